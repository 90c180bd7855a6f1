/*
 * s3_xml.c - ListObjectsV2, error and STS credential replies parsed with expat, plus the pure
 * helpers of the S3 backend (URL decoding on top of urlcode.c, timestamps, the S3 refinement
 * of curl_common.c's errno mapping).
 *
 * Design: a streaming expat parser tracks the element path (depth and the names that
 * matter) and collects the text of the leaf fields it wants into a bounded buffer. Entries
 * are gathered raw, then post-processed once the document is complete, because
 * <EncodingType> may come after the keys it describes: keys are URL-decoded if asked,
 * stripped of the source prefix, and sorted (S3 sends all Contents, then all
 * CommonPrefixes; the backend contract wants one key order). The STS parser has its own small
 * state (struct sts_state) on the same expat driver (run_expat()): it takes the four fields of
 * the <Credentials> under the reply's *Result element and nothing else, and because two of
 * them are secrets its text buffer grows by copy-and-wipe and is wiped before it is freed.
 * Invariants: any malformed input ends in -EIO with the page left freeable, never a crash;
 * field text is bounded (FIELD_MAX) so a hostile reply cannot grow memory without limit
 * beyond the reply itself. No shared state, no locks.
 */
#include "backends/s3_xml.h"

#include "backends/aws_creds.h"
#include "backends/curl_common.h"
#include "backends/urlcode.h"

#include <curl/curl.h>
#include <errno.h>
#include <expat.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FIELD_MAX (64 * 1024) /* longest text of one field (keys are <= 1024 bytes) */
#define PARSE_CHUNK (1 << 20) /* bytes handed to expat per call */

/* Leaf fields we collect. */
enum field {
    F_NONE,
    F_IS_TRUNCATED,
    F_NEXT_TOKEN,
    F_ENCODING_TYPE,
    F_KEY,
    F_SIZE,
    F_LAST_MODIFIED,
    F_ETAG,
    F_PREFIX,
    F_ERROR_CODE,
};

enum doc_kind { DOC_LIST, DOC_ERROR };

struct raw_entry {
    char *key;
    int is_prefix;
    uint64_t size;
    int64_t mtime_ns;
    char *etag;
};

struct list_state {
    XML_Parser parser;
    enum doc_kind kind;
    int err;   /* first error, 0 while fine */
    int depth; /* current element depth (root = 1) */
    int in_contents, in_prefixes;
    int error_response, in_error; /* DOC_ERROR: root <ErrorResponse>, inside its <Error> */
    enum field field;             /* the leaf being collected, F_NONE otherwise */
    char *text;
    size_t text_len, text_cap;

    /* Entry under construction. */
    char *cur_key, *cur_etag;
    int have_size;
    uint64_t cur_size;
    int64_t cur_mtime;

    /* Document-level results. */
    struct raw_entry *entries;
    size_t count, cap;
    int truncated, have_truncated;
    char *next_token;
    int url_encoded;
    char *error_code; /* DOC_ERROR */
};

static void fail(struct list_state *st, int err)
{
    if (!st->err)
        st->err = err;
    XML_StopParser(st->parser, XML_FALSE);
}

static enum field leaf_for(const struct list_state *st, const char *name)
{
    if (st->kind == DOC_ERROR) {
        /* S3 (and radosgw's STS): <Error><Code>; AWS STS and IAM:
         * <ErrorResponse><Error><Code>. */
        int depth = st->error_response ? 3 : 2;
        int inside = st->error_response ? st->in_error : 1;
        return inside && st->depth == depth && strcmp(name, "Code") == 0 ? F_ERROR_CODE : F_NONE;
    }
    if (st->depth == 2) {
        if (strcmp(name, "IsTruncated") == 0)
            return F_IS_TRUNCATED;
        if (strcmp(name, "NextContinuationToken") == 0)
            return F_NEXT_TOKEN;
        if (strcmp(name, "EncodingType") == 0)
            return F_ENCODING_TYPE;
    } else if (st->depth == 3 && st->in_contents) {
        if (strcmp(name, "Key") == 0)
            return F_KEY;
        if (strcmp(name, "Size") == 0)
            return F_SIZE;
        if (strcmp(name, "LastModified") == 0)
            return F_LAST_MODIFIED;
        if (strcmp(name, "ETag") == 0)
            return F_ETAG;
    } else if (st->depth == 3 && st->in_prefixes) {
        if (strcmp(name, "Prefix") == 0)
            return F_PREFIX;
    }
    return F_NONE;
}

static void reset_entry(struct list_state *st)
{
    free(st->cur_key);
    free(st->cur_etag);
    st->cur_key = st->cur_etag = NULL;
    st->have_size = 0;
    st->cur_size = 0;
    st->cur_mtime = 0;
}

static void XMLCALL on_start(void *ud, const XML_Char *name, const XML_Char **attrs)
{
    struct list_state *st = ud;
    (void)attrs;

    st->depth++;
    if (st->depth == 1) {
        if (st->kind == DOC_ERROR && strcmp(name, "ErrorResponse") == 0)
            st->error_response = 1;
        else if (strcmp(name, st->kind == DOC_LIST ? "ListBucketResult" : "Error") != 0)
            fail(st, -EIO);
        return;
    }
    if (st->field != F_NONE) { /* markup inside a text field */
        fail(st, -EIO);
        return;
    }
    if (st->kind == DOC_ERROR && st->error_response && st->depth == 2 &&
        strcmp(name, "Error") == 0) {
        st->in_error = 1;
        return;
    }
    if (st->kind == DOC_LIST && st->depth == 2) {
        if (strcmp(name, "Contents") == 0) {
            st->in_contents = 1;
            reset_entry(st);
            return;
        }
        if (strcmp(name, "CommonPrefixes") == 0) {
            st->in_prefixes = 1;
            reset_entry(st);
            return;
        }
    }
    st->field = leaf_for(st, name);
    st->text_len = 0;
}

static void XMLCALL on_text(void *ud, const XML_Char *s, int len)
{
    struct list_state *st = ud;

    if (st->field == F_NONE || len <= 0)
        return;
    if (st->text_len + (size_t)len + 1 > FIELD_MAX) {
        fail(st, -EIO);
        return;
    }
    if (st->text_len + (size_t)len + 1 > st->text_cap) {
        size_t cap = st->text_cap ? st->text_cap : 256;
        while (cap < st->text_len + (size_t)len + 1)
            cap *= 2;
        char *grown = realloc(st->text, cap);
        if (!grown) {
            fail(st, -ENOMEM);
            return;
        }
        st->text = grown;
        st->text_cap = cap;
    }
    memcpy(st->text + st->text_len, s, (size_t)len);
    st->text_len += (size_t)len;
}

static int parse_u64(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (!*s)
        return -EIO;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -EIO;
        if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
            return -EIO;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return 0;
}

static int push_entry(struct list_state *st, char *key, int is_prefix)
{
    if (st->count == st->cap) {
        size_t cap = st->cap ? st->cap * 2 : 64;
        struct raw_entry *grown = realloc(st->entries, cap * sizeof(*grown));
        if (!grown)
            return -ENOMEM;
        st->entries = grown;
        st->cap = cap;
    }
    struct raw_entry *e = &st->entries[st->count++];
    e->key = key;
    e->is_prefix = is_prefix;
    e->size = is_prefix ? 0 : st->cur_size;
    e->mtime_ns = is_prefix ? 0 : st->cur_mtime;
    e->etag = is_prefix ? NULL : st->cur_etag;
    if (!is_prefix)
        st->cur_etag = NULL;
    return 0;
}

/* Handle the end of a leaf field whose text is st->text[0..text_len). */
static void end_field(struct list_state *st)
{
    char *text = st->text_len || st->text ? st->text : NULL;
    char **slot = NULL;
    int ret;

    if (text)
        text[st->text_len] = '\0';
    const char *t = text ? text : "";
    switch (st->field) {
    case F_IS_TRUNCATED:
        if (strcmp(t, "true") == 0)
            st->truncated = 1;
        else if (strcmp(t, "false") == 0)
            st->truncated = 0;
        else
            fail(st, -EIO);
        st->have_truncated = 1;
        return;
    case F_ENCODING_TYPE:
        st->url_encoded = strcmp(t, "url") == 0;
        return;
    case F_SIZE:
        if (parse_u64(t, &st->cur_size) < 0)
            fail(st, -EIO);
        st->have_size = 1;
        return;
    case F_LAST_MODIFIED:
        if (s3_parse_iso8601(t, &st->cur_mtime) < 0)
            fail(st, -EIO);
        return;
    case F_NEXT_TOKEN:
        slot = &st->next_token;
        break;
    case F_KEY:
        slot = &st->cur_key;
        break;
    case F_ETAG:
        slot = &st->cur_etag;
        break;
    case F_ERROR_CODE:
        slot = &st->error_code;
        break;
    case F_PREFIX: {
        char *p = strdup(t);
        if (!p) {
            fail(st, -ENOMEM);
            return;
        }
        ret = push_entry(st, p, 1);
        if (ret < 0) {
            free(p);
            fail(st, ret);
        }
        return;
    }
    case F_NONE:
        return;
    }
    if (*slot) { /* a field given twice */
        fail(st, -EIO);
        return;
    }
    *slot = strdup(t);
    if (!*slot)
        fail(st, -ENOMEM);
}

static void XMLCALL on_end(void *ud, const XML_Char *name)
{
    struct list_state *st = ud;
    (void)name;

    if (st->field != F_NONE) {
        end_field(st);
        st->field = F_NONE;
    } else if (st->depth == 2 && st->in_contents) {
        st->in_contents = 0;
        if (!st->cur_key || !st->have_size) {
            fail(st, -EIO);
        } else {
            int ret = push_entry(st, st->cur_key, 0);
            if (ret < 0)
                fail(st, ret);
            else
                st->cur_key = NULL;
        }
        reset_entry(st);
    } else if (st->depth == 2 && st->in_prefixes) {
        st->in_prefixes = 0;
    } else if (st->depth == 2 && st->in_error) {
        st->in_error = 0;
    }
    st->depth--;
}

/* Feeds xml[0..len) to a new expat parser with these handlers and user data ud, in chunks;
 * *parser is the parser while it runs (the handlers stop it through their state), *err the
 * handlers' first error. Returns *err, -EIO when expat itself refused the document, -ENOMEM
 * when no parser could be made. */
static int run_expat(XML_Parser *parser, void *ud, XML_StartElementHandler start,
                     XML_EndElementHandler end, XML_CharacterDataHandler text, const char *xml,
                     size_t len, int *err)
{
    *parser = XML_ParserCreate("UTF-8");
    if (!*parser)
        return -ENOMEM;
    XML_SetUserData(*parser, ud);
    XML_SetElementHandler(*parser, start, end);
    XML_SetCharacterDataHandler(*parser, text);

    size_t off = 0;
    do {
        size_t n = len - off < PARSE_CHUNK ? len - off : PARSE_CHUNK;
        int final = off + n == len;
        if (XML_Parse(*parser, xml ? xml + off : "", (int)n, final) != XML_STATUS_OK) {
            if (!*err)
                *err = -EIO;
            break;
        }
        off += n;
    } while (off < len);
    XML_ParserFree(*parser);
    *parser = NULL;
    return *err;
}

static int run_parser(struct list_state *st, const char *xml, size_t len)
{
    return run_expat(&st->parser, st, on_start, on_end, on_text, xml, len, &st->err);
}

static void free_state(struct list_state *st)
{
    for (size_t i = 0; i < st->count; i++) {
        free(st->entries[i].key);
        free(st->entries[i].etag);
    }
    free(st->entries);
    reset_entry(st);
    free(st->text);
    free(st->next_token);
    free(st->error_code);
}

static int cmp_raw(const void *a, const void *b)
{
    const struct raw_entry *x = a, *y = b;
    return strcmp(x->key, y->key);
}

int s3_xml_parse_list(const char *xml, size_t len, const char *strip,
                      struct backend_list_page *out)
{
    struct list_state st = {.kind = DOC_LIST};
    size_t strip_len = strip ? strlen(strip) : 0;
    int ret;

    ret = run_parser(&st, xml, len);
    if (ret < 0)
        goto out_free;
    if (!st.have_truncated || (st.truncated && (!st.next_token || !*st.next_token))) {
        ret = -EIO;
        goto out_free;
    }
    for (size_t i = 0; i < st.count; i++) {
        struct raw_entry *e = &st.entries[i];
        if (st.url_encoded) {
            ret = s3_url_decode(e->key);
            if (ret < 0)
                goto out_free;
        }
        if (strncmp(e->key, strip ? strip : "", strip_len) != 0) {
            ret = -EIO;
            goto out_free;
        }
        memmove(e->key, e->key + strip_len, strlen(e->key) - strip_len + 1);
    }
    if (st.count > 1)
        qsort(st.entries, st.count, sizeof(*st.entries), cmp_raw);
    for (size_t i = 0; i < st.count; i++) {
        struct raw_entry *e = &st.entries[i];
        if (!*e->key) /* the source root's own marker */
            continue;
        ret = backend_list_page_add(out, e->key, e->is_prefix, e->size, e->mtime_ns,
                                    e->etag);
        if (ret < 0)
            goto out_free;
    }
    if (st.truncated) {
        out->next_token = st.next_token;
        st.next_token = NULL;
    }
    ret = 0;
out_free:
    free_state(&st);
    return ret;
}

void s3_xml_error_code(const char *xml, size_t len, char *code, size_t codelen)
{
    struct list_state st = {.kind = DOC_ERROR};

    if (codelen)
        code[0] = '\0';
    if (xml && len && run_parser(&st, xml, len) == 0 && st.error_code && codelen)
        snprintf(code, codelen, "%s", st.error_code);
    free_state(&st);
}

/* --- STS credentials ------------------------------------------------------------------- */

/* The fields of <Credentials>, in the order of sts_field_names. */
enum sts_field { STS_ACCESS_KEY, STS_SECRET_KEY, STS_SESSION_TOKEN, STS_EXPIRATION, STS_NFIELDS };

static const char *const sts_field_names[STS_NFIELDS] = {"AccessKeyId", "SecretAccessKey",
                                                         "SessionToken", "Expiration"};

struct sts_state {
    XML_Parser parser;
    int err;
    int depth;     /* root = 1 */
    int in_result; /* inside a depth-2 element whose name ends in "Result" */
    int in_creds;  /* inside its <Credentials> (depth 3) */
    int field;     /* the sts_field being collected, -1 otherwise */
    char *text;    /* its text; may hold a secret: grown by copy-and-wipe, wiped at the end */
    size_t text_len, text_cap;
    char *val[STS_NFIELDS]; /* the fields found, NUL-terminated; wiped before they are freed */
};

static void sts_fail(struct sts_state *st, int err)
{
    if (!st->err)
        st->err = err;
    XML_StopParser(st->parser, XML_FALSE);
}

/* Wipes and frees a NUL-terminated string (NULL is a no-op). */
static void free_wiped(char *s)
{
    if (s) {
        explicit_bzero(s, strlen(s));
        free(s);
    }
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static void XMLCALL sts_on_start(void *ud, const XML_Char *name, const XML_Char **attrs)
{
    struct sts_state *st = ud;
    (void)attrs;

    st->depth++;
    if (st->field >= 0) { /* markup inside a text field */
        sts_fail(st, -EIO);
        return;
    }
    if (st->depth == 2 && ends_with(name, "Result")) {
        st->in_result = 1;
    } else if (st->depth == 3 && st->in_result && strcmp(name, "Credentials") == 0) {
        st->in_creds = 1;
    } else if (st->depth == 4 && st->in_creds) {
        for (int i = 0; i < STS_NFIELDS; i++) {
            if (strcmp(name, sts_field_names[i]) == 0) {
                st->field = i;
                st->text_len = 0;
                break;
            }
        }
    }
}

static void XMLCALL sts_on_text(void *ud, const XML_Char *s, int len)
{
    struct sts_state *st = ud;

    if (st->field < 0 || len <= 0)
        return;
    if (st->text_len + (size_t)len + 1 > FIELD_MAX) {
        sts_fail(st, -EIO);
        return;
    }
    if (st->text_len + (size_t)len + 1 > st->text_cap) {
        /* Not realloc(): the old buffer may hold part of a secret and is wiped first. */
        size_t cap = st->text_cap ? st->text_cap : 256;
        while (cap < st->text_len + (size_t)len + 1)
            cap *= 2;
        char *grown = malloc(cap);
        if (!grown) {
            sts_fail(st, -ENOMEM);
            return;
        }
        if (st->text) {
            memcpy(grown, st->text, st->text_len);
            explicit_bzero(st->text, st->text_cap);
            free(st->text);
        }
        st->text = grown;
        st->text_cap = cap;
    }
    memcpy(st->text + st->text_len, s, (size_t)len);
    st->text_len += (size_t)len;
}

static void XMLCALL sts_on_end(void *ud, const XML_Char *name)
{
    struct sts_state *st = ud;
    (void)name;

    if (st->field >= 0) {
        char **slot = &st->val[st->field];
        st->field = -1;
        if (*slot) { /* a field given twice */
            sts_fail(st, -EIO);
        } else {
            *slot = strndup(st->text ? st->text : "", st->text_len);
            if (!*slot)
                sts_fail(st, -ENOMEM);
        }
        if (st->text)
            explicit_bzero(st->text, st->text_len);
        st->text_len = 0;
    } else if (st->depth == 3 && st->in_creds) {
        st->in_creds = 0;
    } else if (st->depth == 2 && st->in_result) {
        st->in_result = 0;
    }
    st->depth--;
}

int s3_xml_sts_credentials(const char *xml, size_t len, struct aws_creds *out)
{
    struct sts_state st = {.field = -1};
    struct aws_creds got = {0};
    int64_t expiration = 0;
    int ret;

    ret = run_expat(&st.parser, &st, sts_on_start, sts_on_end, sts_on_text, xml, len, &st.err);
    if (ret < 0)
        goto out_wipe;
    for (int i = 0; i < STS_NFIELDS; i++) {
        if (!st.val[i] || !*st.val[i]) {
            ret = -EIO;
            goto out_wipe;
        }
    }
    if (aws_time_parse(st.val[STS_EXPIRATION], &expiration) < 0 || expiration <= 0) {
        ret = -EIO;
        goto out_wipe;
    }
    ret = aws_creds_set(&got, st.val[STS_ACCESS_KEY], st.val[STS_SECRET_KEY],
                        st.val[STS_SESSION_TOKEN], expiration);
    if (ret < 0) /* not -EINVAL: every field is non-empty */
        goto out_wipe;
    aws_creds_clear(out);
    *out = got;
    ret = 0;
out_wipe:
    for (int i = 0; i < STS_NFIELDS; i++)
        free_wiped(st.val[i]);
    if (st.text) {
        explicit_bzero(st.text, st.text_cap);
        free(st.text);
    }
    return ret;
}

int s3_url_decode(char *s)
{
    return url_decode_to(s, strlen(s), s, URL_DECODE_PLUS_SPACE) < 0 ? -EIO : 0;
}

int s3_parse_iso8601(const char *s, int64_t *ns)
{
    struct tm tm = {0};
    int year, mon, day, hour, min, sec, used = 0;
    int64_t frac = 0;

    if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &year, &mon, &day, &hour, &min, &sec, &used) !=
            6 ||
        used != 19)
        return -EIO;
    if (mon < 1 || mon > 12 || day < 1 || day > 31 || hour > 23 || min > 59 || sec > 60 ||
        year < 1970 || hour < 0 || min < 0 || sec < 0)
        return -EIO;
    const char *p = s + used;
    if (*p == '.') {
        int digits = 0;
        for (p++; *p >= '0' && *p <= '9'; p++, digits++) {
            if (digits < 9)
                frac = frac * 10 + (*p - '0');
        }
        if (digits == 0)
            return -EIO;
        for (; digits < 9; digits++)
            frac *= 10;
    }
    if (*p == 'Z')
        p++;
    if (*p != '\0')
        return -EIO;
    tm.tm_year = year - 1900;
    tm.tm_mon = mon - 1;
    tm.tm_mday = day;
    tm.tm_hour = hour;
    tm.tm_min = min;
    tm.tm_sec = sec;
    time_t t = timegm(&tm);
    if (t == (time_t)-1 || t > INT64_MAX / 1000000000 - 1)
        return -EIO; /* past 2262: nanoseconds would overflow int64 */
    *ns = (int64_t)t * 1000000000 + frac;
    return 0;
}

int s3_map_error(int curl_code, long http_status, long os_errno, const char *s3_code)
{
    static const char *const credential_codes[] = {"ExpiredToken", "InvalidToken",
                                                   "TokenRefreshRequired", "InvalidAccessKeyId"};

    if ((CURLcode)curl_code == CURLE_OK && http_status == 400 && s3_code) {
        for (size_t i = 0; i < sizeof(credential_codes) / sizeof(*credential_codes); i++) {
            if (strcmp(s3_code, credential_codes[i]) == 0)
                return -EACCES;
        }
    }
    return curl_map_error((CURLcode)curl_code, http_status, os_errno);
}
