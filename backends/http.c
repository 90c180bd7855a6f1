/*
 * http.c - the HTTP(S) backend: a static web tree (index pages) or one file, read with Range
 * requests over libcurl.
 *
 * Sources: "http(s)://host[:port]/path/" is a directory tree whose listings are the server's
 * index pages (nginx autoindex, Apache mod_autoindex, python http.server), parsed by
 * http_listing.c; key "a/b" is the URL base + "a/b" percent-encoded. A URL not ending in '/'
 * is resolved once, at the first call, with a HEAD (redirects followed): an HTML reply makes it
 * a directory (the effective URL, with a '/' added), anything else a single file, shown as a
 * directory holding that one file under the URL's last path segment.
 *
 * Versions (backend_stat.version, the listing entries' version) say how reads are checked;
 * read_range fails with -ESTALE, never mixing bytes, when the reply does not match:
 *   "\"etag\""          a strong ETag (HEAD): GET with If-Match, the reply's ETag must equal it;
 *   "M:<size>:<secs>"   no strong ETag, Last-Modified and size (HEAD): If-Unmodified-Since,
 *                       the reply's Last-Modified and total size must equal them;
 *   "S:<size>"          size only (HEAD without either): the total size must equal it;
 *   "L:<size>:<secs>"   exact size and time (minute precision) straight from the index page:
 *                       the total size must equal it, and the reply's Last-Modified must lie
 *                       within LISTING_SETTLED_S of that time.
 * A listing entry gets an "L:" version only when the page shows its exact size and its time is
 * more than LISTING_SETTLED_S before the server's Date (older than any clock offset an index
 * page could be printed in): a file changed since then shows a new time, so the listing's
 * version changes with it, and reads of the old version see a Last-Modified more than
 * LISTING_SETTLED_S after the listed time (whatever zone the page prints times in). A file
 * rewritten with the same size and its old time set back (touch -d) is not seen as changed:
 * the same blind spot as nginx's own ETag (size and time). Every other file of a listing (no exact
 * size, no time, a recent time) is HEADed, up to HEAD_PARALLEL at once on one curl multi handle,
 * and gets the HEAD's size, Last-Modified and one of the other versions. A file gone by the time of
 * its HEAD is left out; a file without a Content-Length cannot be paged and is left out too.
 *
 * A server that ignores Range answers 200 with the whole body: the bytes before `off` are
 * skipped and the transfer is cut once `len` bytes are in, so such servers (python's
 * http.server) work, at the price of the skipped bytes.
 *
 * Every op is one request (a listing: one GET plus its HEADs) on an easy handle borrowed from
 * a keep-alive pool; retries belong to the retry layer. Requests go through curl_common.c's
 * one request path, shared with s3.c: struct curl_req (body, reply headers), curl_req_perform()
 * (the HEADs of a listing: curl_req_setup()/curl_req_finish() on a multi handle) and
 * curl_map_error(), the one place curl codes and statuses become errno. What is this
 * backend's own: the header lines (Range, a conditional, Accept-Encoding: identity), reading a
 * 200 to a ranged GET (cut_whole), and judging replies against versions. Redirects are
 * followed (at most MAX_REDIRS, http and https only); https verifies certificates (curl's
 * defaults, never turned off). Sources with credentials in the URL are refused (they would
 * show in messages and mount tables).
 *
 * Invariants: `mode` goes from MODE_UNKNOWN to MODE_DIR or MODE_FILE once and never changes
 * back; the fields it implies (base_url/base_path, file_url/file_name) are set before it.
 * A read reply is accepted only when its bytes are exactly [off, off + n) of the expected
 * version. Reply bodies are bounded (LIST_BODY_MAX, the caller's buffer for reads).
 *
 * Lock order: mode_lock, then the pool's lock (curl_common.c). mode_lock is held across the
 * resolving HEAD only (callers of the first op wait for it); the pool's lock is a leaf,
 * never held across a request.
 */
#include "backends/http.h"

#include "backends/curl_common.h"
#include "backends/http_listing.h"
#include "backends/invariants.h"
#include "backends/urlcode.h"
#include "backends/source.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define POOL_MAX 64
#define LIST_BODY_MAX (32u << 20)
#define DEFAULT_TIMEOUT_MS 30000
#define MAX_REDIRS 5L
#define HEAD_PARALLEL 8
#define LISTING_SETTLED_S (26 * 3600) /* beyond any UTC offset (+14 h / -12 h) plus slack */

enum http_mode { MODE_UNKNOWN, MODE_DIR, MODE_FILE };

struct http {
    char *source;    /* the URL as given */
    char *base_url;  /* MODE_DIR: scheme://authority/path/ (ends in '/') */
    char *base_path; /* MODE_DIR: its path, percent-encoded, starting and ending in '/' */
    char *file_url;  /* MODE_FILE: the file's URL (the source) */
    char *file_name; /* MODE_FILE: the one child's name */
    struct curl_common_conf cconf; /* timeouts, redirects, User-Agent, PAGEFS_HTTP_DEBUG */
    struct curl_pool *pool;

    pthread_mutex_t mode_lock;
    enum http_mode mode; /* guarded by mode_lock until set, immutable after */
};

/* --- one request -------------------------------------------------------------------- */

/* Adds the header line every request of this backend ends with: bytes as stored (a compressed
 * reply would not match Content-Length or ranges). Returns 0 or -ENOMEM. */
static int add_identity(struct curl_req *r)
{
    return curl_req_header(r, "Accept-Encoding: identity");
}

/* Runs request r (curl_common.c) after the header lines the caller added (Range, a
 * conditional). Returns 0 for a usable 2xx reply or -errno (curl_map_error()). */
static int perform(struct http *h, struct curl_req *r)
{
    int ret = add_identity(r);
    return ret < 0 ? ret : curl_req_perform(h->pool, &h->cconf, r);
}

/* --- versions ----------------------------------------------------------------------- */

static int strong_etag(const char *etag)
{
    size_t n = etag ? strlen(etag) : 0;
    return n >= 2 && etag[0] == '"' && etag[n - 1] == '"';
}

/* Size, mtime and version of a HEAD (or GET) reply; -EIO without a Content-Length. */
static int stat_from_reply(const struct curl_req *r, struct backend_stat *st)
{
    memset(st, 0, sizeof(*st));
    if (r->content_length < 0)
        return -EIO;
    st->size = (uint64_t)r->content_length;
    st->mtime_ns = r->last_modified > 0 ? r->last_modified * 1000000000 : 0;
    int n;
    if (strong_etag(r->etag))
        n = asprintf(&st->version, "%s", r->etag);
    else if (r->last_modified > 0)
        n = asprintf(&st->version, "M:%" PRIu64 ":%" PRId64, st->size, r->last_modified);
    else
        n = asprintf(&st->version, "S:%" PRIu64, st->size);
    if (n < 0) {
        st->version = NULL;
        return -ENOMEM;
    }
    return 0;
}

struct version {
    char kind; /* 0 none, 'E' etag, 'M', 'S', 'L' */
    const char *etag;
    uint64_t size;
    int64_t secs;
};

static int parse_u64(const char *s, char stop, uint64_t *v, const char **end)
{
    char *e = NULL;
    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    unsigned long long x = strtoull(s, &e, 10);
    if (errno || *e != stop)
        return -1;
    *v = x;
    *end = e;
    return 0;
}

static int parse_version(const char *v, struct version *out)
{
    const char *e;
    uint64_t t;
    memset(out, 0, sizeof(*out));
    if (!v || !*v)
        return 0;
    if (v[0] == '"') {
        out->kind = 'E';
        out->etag = v;
        return strong_etag(v) && strlen(v) < 120 ? 0 : -1;
    }
    if ((v[0] == 'M' || v[0] == 'L') && v[1] == ':') {
        out->kind = v[0];
        if (parse_u64(v + 2, ':', &out->size, &e) < 0 || parse_u64(e + 1, '\0', &t, &e) < 0 ||
            t > INT64_MAX)
            return -1;
        out->secs = (int64_t)t;
        return 0;
    }
    if (v[0] == 'S' && v[1] == ':') {
        out->kind = 'S';
        return parse_u64(v + 2, '\0', &out->size, &e);
    }
    return -1;
}

/* --- URLs and modes ----------------------------------------------------------------- */

/* URL of `key` in directory mode; caller frees. */
static char *key_url(const struct http *h, const char *key)
{
    char *enc = url_encode(key, 1), *url = NULL;
    if (enc && asprintf(&url, "%s%s", h->base_url, enc) < 0)
        url = NULL;
    free(enc);
    return url;
}

/* Path part of an http(s) URL (percent-encoded, no query), malloc'd; "/" when it has none. */
static char *url_path(const char *url)
{
    CURLU *u = curl_url();
    char *p = NULL, *out = NULL;
    if (!u)
        return NULL;
    if (curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_PATH, &p, 0) == CURLUE_OK)
        out = strdup(p && *p ? p : "/");
    curl_free(p);
    curl_url_cleanup(u);
    return out;
}

/* Directory mode rooted at `url` (a '/' is added when missing). Under mode_lock. */
static int set_dir_mode(struct http *h, const char *url)
{
    size_t n = strlen(url);
    char *base = NULL;
    if (asprintf(&base, "%s%s", url, n && url[n - 1] == '/' ? "" : "/") < 0)
        return -ENOMEM;
    char *path = url_path(base);
    if (!path) {
        free(base);
        return -ENOMEM;
    }
    h->base_url = base;
    h->base_path = path;
    h->mode = MODE_DIR;
    return 0;
}

static int is_html(const char *content_type)
{
    if (!content_type)
        return 0;
    size_t n = strcspn(content_type, "; \t");
    return (n == 9 && strncasecmp(content_type, "text/html", 9) == 0) ||
           (n == 21 && strncasecmp(content_type, "application/xhtml+xml", 21) == 0);
}

/* Resolves a source URL not ending in '/': one HEAD decides directory or single file. */
static int resolve(struct http *h)
{
    struct curl_req r = {.url = h->source, .head = 1};
    int ret;

    ret = perform(h, &r);
    if (ret < 0)
        goto out_clear;
    if (is_html(r.content_type)) {
        ret = set_dir_mode(h, r.effective_url ? r.effective_url : h->source);
        goto out_clear;
    }
    /* The file's name: the last segment of the source path, decoded. */
    char *path = url_path(h->source);
    ret = -ENOMEM;
    if (!path)
        goto out_clear;
    const char *seg = strrchr(path, '/');
    seg = seg ? seg + 1 : path;
    char *name = http_percent_decode(seg, strlen(seg), NULL);
    free(path);
    if (name && (!*name || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0 ||
                 strlen(name) > 255)) {
        free(name);
        name = strdup("file"); /* a URL whose last segment is no usable name */
    } else if (!name) {
        name = strdup("file");
    }
    if (!name)
        goto out_clear;
    h->file_url = strdup(h->source);
    if (!h->file_url) {
        free(name);
        goto out_clear;
    }
    h->file_name = name;
    h->mode = MODE_FILE;
    ret = 0;
out_clear:
    curl_req_clear(&r);
    return ret;
}

#ifdef PAGEFS_INVARIANTS
/* Debug builds (backends/invariants.h): the mode's fields are set (the pool checks its own).
 * Under mode_lock. */
static void http_check_invariants(struct http *h)
{
    int ok = 1;
    if (h->mode == MODE_DIR)
        ok = h->base_url && h->base_path && h->base_path[0] == '/' &&
             h->base_url[strlen(h->base_url) - 1] == '/' &&
             h->base_path[strlen(h->base_path) - 1] == '/';
    else if (h->mode == MODE_FILE)
        ok = h->file_url && h->file_name && *h->file_name && !strchr(h->file_name, '/');
    if (!ok)
        pagefs_invariant_failed("http backend", "mode %d", (int)h->mode);
}
#endif

/* The mode, resolving it on first use. Returns MODE_DIR/MODE_FILE or -errno. */
static int get_mode(struct http *h)
{
    int ret;
    pthread_mutex_lock(&h->mode_lock);
    ret = h->mode == MODE_UNKNOWN ? resolve(h) : 0;
    PAGEFS_CHECK_INVARIANTS(http_check_invariants(h));
    if (ret == 0)
        ret = (int)h->mode;
    pthread_mutex_unlock(&h->mode_lock);
    return ret;
}

static int valid_key(const char *key)
{
    return key && *key && key[0] != '/';
}

/* URL of object `key` for the current mode (caller frees); -ENOENT/-EINVAL/-ENOMEM/-errno
 * of the mode resolution in *err. */
static char *object_url(struct http *h, const char *key, int *err)
{
    char *url;
    int mode = get_mode(h);

    *err = 0;
    if (mode < 0) {
        *err = mode;
        return NULL;
    }
    if (!valid_key(key)) {
        *err = -EINVAL;
        return NULL;
    }
    if (mode == MODE_FILE) {
        if (strcmp(key, h->file_name) != 0) {
            *err = -ENOENT;
            return NULL;
        }
        url = strdup(h->file_url);
    } else {
        url = key_url(h, key);
    }
    if (!url)
        *err = -ENOMEM;
    return url;
}

/* --- ops ---------------------------------------------------------------------------- */

static int http_stat(struct backend *be, const char *key, struct backend_stat *out)
{
    struct http *h = be->priv;
    struct curl_req r = {.head = 1};
    int ret;

    memset(out, 0, sizeof(*out));
    char *url = object_url(h, key, &ret);
    if (!url)
        return ret;
    r.url = url;
    r.log_key = key;
    ret = perform(h, &r);
    if (ret == 0)
        ret = stat_from_reply(&r, out);
    curl_req_clear(&r);
    free(url);
    return ret;
}

/* HEADs the entries idx[0..n) of pg, HEAD_PARALLEL at a time on one multi handle, and fills
 * their size, mtime and version; an entry that is gone (or has no length) gets key freed and
 * set to NULL. Returns 0 or the first hard error. */
static int head_entries(struct http *h, struct backend_list_page *pg, const size_t *idx, size_t n)
{
    struct slot {
        CURL *c;
        struct curl_req r;
        char *url;
        size_t entry;
    } slots[HEAD_PARALLEL];
    size_t next = 0, active = 0;
    int ret = 0;
    CURLM *m = curl_multi_init();

    if (!m)
        return -ENOMEM;
    memset(slots, 0, sizeof(slots));
    while ((next < n && ret == 0) || active > 0) {
        /* Fill free slots. */
        for (int s = 0; s < HEAD_PARALLEL && next < n && ret == 0; s++) {
            struct slot *sl = &slots[s];
            if (sl->c)
                continue;
            struct backend_entry *e = &pg->entries[idx[next]];
            memset(&sl->r, 0, sizeof(sl->r));
            sl->r.head = 1;
            sl->url = key_url(h, e->key);
            sl->r.url = sl->url;
            sl->r.log_key = e->key;
            sl->c = sl->url ? curl_pool_take(h->pool) : NULL;
            if (!sl->c || add_identity(&sl->r) < 0)
                goto out_slot_nomem;
            curl_req_setup(sl->c, &h->cconf, &sl->r);
            curl_easy_setopt(sl->c, CURLOPT_PRIVATE, sl);
            if (curl_multi_add_handle(m, sl->c) != CURLM_OK)
                goto out_slot_nomem;
            sl->entry = idx[next++];
            active++;
            continue;
        out_slot_nomem:
            if (sl->c) {
                curl_easy_setopt(sl->c, CURLOPT_HTTPHEADER, NULL);
                curl_pool_give(h->pool, sl->c);
            }
            curl_req_clear(&sl->r);
            free(sl->url);
            memset(sl, 0, sizeof(*sl));
            ret = -ENOMEM;
        }
        if (active == 0)
            break;
        int running = 0;
        if (curl_multi_perform(m, &running) != CURLM_OK) {
            ret = ret ? ret : -EIO;
            break;
        }
        CURLMsg *msg;
        int left;
        int finished = 0;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            struct slot *sl = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&sl);
            int rc = curl_req_finish(sl->c, &sl->r, msg->data.result);
            struct backend_entry *e = &pg->entries[sl->entry];
            struct backend_stat st = {0};
            int unpageable = 0;
            if (rc == 0) {
                rc = stat_from_reply(&sl->r, &st);
                unpageable = rc == -EIO;
            }
            if (rc == -ENOENT || unpageable) {
                free(e->key); /* gone since the listing, or not pageable: left out */
                e->key = NULL;
            } else if (rc == 0) {
                e->size = st.size;
                e->mtime_ns = st.mtime_ns;
                free(e->version);
                e->version = st.version;
                st.version = NULL;
            } else if (ret == 0) {
                ret = rc;
            }
            backend_stat_clear(&st);
            curl_multi_remove_handle(m, sl->c);
            curl_pool_give(h->pool, sl->c);
            curl_req_clear(&sl->r);
            free(sl->url);
            memset(sl, 0, sizeof(*sl));
            active--;
            finished++;
        }
        if (ret < 0 && active == 0)
            break;
        if (!finished && running > 0)
            curl_multi_poll(m, NULL, 0, 1000, NULL);
    }
    /* An error above may leave transfers running: abandon them. */
    for (int s = 0; s < HEAD_PARALLEL; s++) {
        struct slot *sl = &slots[s];
        if (!sl->c)
            continue;
        curl_multi_remove_handle(m, sl->c);
        curl_easy_setopt(sl->c, CURLOPT_HTTPHEADER, NULL);
        curl_pool_give(h->pool, sl->c);
        curl_req_clear(&sl->r);
        free(sl->url);
    }
    curl_multi_cleanup(m);
    return ret;
}

/* Gives every file entry of a parsed listing its version: "L:" from the page when the page
 * shows an exact, settled size and time, otherwise a HEAD's. `server_now` is the listing
 * reply's Date (or our clock). */
static int complete_entries(struct http *h, struct backend_list_page *pg, int64_t server_now)
{
    size_t *idx = NULL, n = 0;
    int ret = 0;

    if (pg->count == 0)
        return 0;
    idx = malloc(pg->count * sizeof(*idx));
    if (!idx)
        return -ENOMEM;
    for (size_t i = 0; i < pg->count; i++) {
        struct backend_entry *e = &pg->entries[i];
        if (e->is_prefix)
            continue;
        int64_t secs = e->mtime_ns / 1000000000;
        if (e->size != UINT64_MAX && e->mtime_ns > 0 && secs < server_now - LISTING_SETTLED_S) {
            if (asprintf(&e->version, "L:%" PRIu64 ":%" PRId64, e->size, secs) < 0) {
                e->version = NULL;
                ret = -ENOMEM;
                goto out_free;
            }
            continue;
        }
        idx[n++] = i;
    }
    ret = head_entries(h, pg, idx, n);
    if (ret < 0)
        goto out_free;
    /* Drop the entries left out (key NULL), keeping the order. */
    size_t j = 0;
    for (size_t i = 0; i < pg->count; i++) {
        if (pg->entries[i].key)
            pg->entries[j++] = pg->entries[i];
        else
            free(pg->entries[i].version);
    }
    pg->count = j;
out_free:
    free(idx);
    return ret;
}

/* Fetches and parses the index page of `prefix` (directory mode) into out, without HEADs;
 * *server_now gets the reply's Date. */
static int fetch_listing(struct http *h, const char *prefix, struct backend_list_page *out,
                         int64_t *server_now)
{
    struct curl_req r = {.body = {.grow = 1, .max = LIST_BODY_MAX}};
    char *url = NULL, *path = NULL;
    int ret;

    url = key_url(h, prefix);
    if (!url)
        return -ENOMEM;
    r.url = url;
    r.log_method = "LIST";
    r.log_key = prefix;
    ret = perform(h, &r);
    if (ret < 0)
        goto out_free;
    if (r.content_type && !is_html(r.content_type)) {
        ret = -ENOTDIR; /* a file where a directory was expected */
        goto out_free;
    }
    /* Absolute links are compared with the path the page was actually served at. */
    path = url_path(r.effective_url ? r.effective_url : url);
    if (!path) {
        ret = -ENOMEM;
        goto out_free;
    }
    size_t pl = strlen(path);
    if (pl == 0 || path[pl - 1] != '/') {
        ret = -EIO; /* redirected to something that is not a directory */
        goto out_free;
    }
    ret = http_listing_parse(r.body.buf ? r.body.buf : "", r.body.len, path, prefix, out);
    *server_now = r.date > 0 ? r.date : (int64_t)time(NULL);
out_free:
    free(path);
    curl_req_clear(&r);
    free(url);
    return ret;
}

static int http_list(struct backend *be, const char *prefix, const char *delim, const char *token,
                     struct backend_list_page *out)
{
    struct http *h = be->priv;
    int64_t now = 0;
    int ret;

    memset(out, 0, sizeof(*out));
    if (!prefix)
        prefix = "";
    if (prefix[0] == '/' || (*prefix && prefix[strlen(prefix) - 1] != '/'))
        return -EINVAL;
    if (!delim || strcmp(delim, "/") != 0 || token)
        return -EINVAL; /* index pages are one level, one page */
    int mode = get_mode(h);
    if (mode < 0)
        return mode;
    if (mode == MODE_FILE) {
        struct backend_stat st;
        if (*prefix)
            return -ENOENT;
        ret = http_stat(be, h->file_name, &st);
        if (ret == 0)
            ret = backend_list_page_add(out, h->file_name, 0, st.size, st.mtime_ns, st.version);
        backend_stat_clear(&st);
        goto out;
    }
    ret = fetch_listing(h, prefix, out, &now);
    if (ret == 0)
        ret = complete_entries(h, out, now);
out:
    if (ret < 0)
        backend_list_page_clear(out);
    return ret;
}

static ssize_t http_read_range(struct backend *be, const char *key, const char *version,
                               uint64_t off, size_t len, void *buf)
{
    struct http *h = be->priv;
    struct curl_req r = {.body = {.buf = buf, .cap = len}, .cut_whole = 1, .skip = off};
    struct version v;
    char cond[160] = "";
    ssize_t ret;
    int err;

    if (!valid_key(key) || (!buf && len) || (len && off > UINT64_MAX - len) ||
        len > (size_t)SSIZE_MAX)
        return -EINVAL;
    if (parse_version(version, &v) < 0)
        return -ESTALE; /* not a version this backend hands out */
    if (len == 0)
        return 0;
    char *url = object_url(h, key, &err);
    if (!url)
        return err;
    r.url = url;
    r.log_key = key;
    if (v.kind == 'E') {
        snprintf(cond, sizeof(cond), "If-Match: %s", v.etag);
    } else if (v.kind == 'M') {
        time_t t = (time_t)v.secs;
        struct tm tm;
        if (gmtime_r(&t, &tm))
            strftime(cond, sizeof(cond), "If-Unmodified-Since: %a, %d %b %Y %H:%M:%S GMT", &tm);
    }
    if (curl_req_header(&r, "Range: bytes=%" PRIu64 "-%" PRIu64, off, off + len - 1) < 0 ||
        (cond[0] && curl_req_header(&r, "%s", cond) < 0)) {
        ret = -ENOMEM;
        goto out_free;
    }
    ret = perform(h, &r);
    if (ret == -ERANGE) {
        /* 416: the range starts at or after the end; fine unless the size says otherwise. */
        ret = (v.kind == 'M' || v.kind == 'S' || v.kind == 'L') && off < v.size ? -ESTALE : 0;
        goto out_free;
    }
    if (ret < 0)
        goto out_free;

    /* The object behind the reply: its total size and validators. */
    uint64_t total;
    if (r.status == 206) {
        uint64_t want_end = off + len - 1;
        if (!r.have_range || r.range_total == UINT64_MAX || r.range_start > r.range_end ||
            r.range_end >= r.range_total) {
            ret = -EIO; /* no Content-Range, an unknown total, or one that contradicts itself */
            goto out_free;
        }
        total = r.range_total;
        if (total - 1 < want_end)
            want_end = total - 1;
        if (r.range_start != off || r.range_end != want_end || r.body.len != want_end - off + 1) {
            ret = -EIO;
            goto out_free;
        }
    } else if (r.status == 200) {
        if (r.content_length < 0) {
            ret = -EIO;
            goto out_free;
        }
        total = (uint64_t)r.content_length;
        uint64_t want = total > off ? total - off : 0;
        if (want > len)
            want = len;
        if (r.body.len != want) {
            ret = -EIO; /* cut short */
            goto out_free;
        }
    } else {
        ret = -EIO;
        goto out_free;
    }
    switch (v.kind) {
    case 'E':
        if (!r.etag || strcmp(r.etag, v.etag) != 0)
            ret = -ESTALE;
        break;
    case 'M':
        if (total != v.size || r.last_modified != v.secs)
            ret = -ESTALE;
        break;
    case 'S':
        if (total != v.size)
            ret = -ESTALE;
        break;
    case 'L':
        /* The page's time is in an unknown zone, but a file changed after the listing was
         * modified more than LISTING_SETTLED_S after the time the listing showed. */
        if (total != v.size ||
            (r.last_modified > 0 && (r.last_modified - v.secs >= LISTING_SETTLED_S ||
                                     v.secs - r.last_modified >= LISTING_SETTLED_S)))
            ret = -ESTALE;
        break;
    default:
        break;
    }
    if (ret == 0)
        ret = (ssize_t)r.body.len;
out_free:
    curl_req_clear(&r);
    free(url);
    return ret;
}

static int http_check(struct backend *be)
{
    struct http *h = be->priv;
    struct backend_list_page page = {0};
    int64_t now;
    int mode = get_mode(h);

    if (mode < 0)
        return mode;
    if (mode == MODE_FILE)
        return 0; /* the resolving HEAD found it */
    int ret = fetch_listing(h, "", &page, &now);
    backend_list_page_clear(&page);
    return ret;
}

static void http_free(struct http *h)
{
    curl_pool_destroy(h->pool);
    pthread_mutex_destroy(&h->mode_lock);
    free(h->source);
    free(h->base_url);
    free(h->base_path);
    free(h->file_url);
    free(h->file_name);
    free(h);
}

static void http_destroy(struct backend *be)
{
    if (!be)
        return;
    http_free(be->priv);
    free(be);
}

static const struct backend_ops http_ops = {
    .name = "http",
    .caps = BACKEND_CAP_VERSIONED | BACKEND_CAP_REMOTE,
    .stat = http_stat,
    .list = http_list,
    .read_range = http_read_range,
    .check = http_check,
    .counters = NULL, /* the stats layer above counts */
    .destroy = http_destroy,
};

/* --- creation ----------------------------------------------------------------------- */

/* Checks the source URL with the one SOURCE grammar (backends/source.h): http or https, a
 * host, no credentials, no fragment. The messages never repeat a URL that carries
 * credentials. */
static int check_source(const char *source, char *err, size_t errlen)
{
    struct backend_source src;
    int ret = backend_source_parse(source, &src, err, errlen);
    if (ret == 0 && src.kind != BACKEND_SOURCE_HTTP) {
        snprintf(err, errlen, "%s: want http[s]://host[:port]/path", source);
        ret = -EINVAL;
    }
    return ret;
}

int http_backend_create(const struct backend_conf *conf, struct backend **out, char *err,
                        size_t errlen)
{
    struct backend *be = NULL;
    struct http *h = NULL;
    int ret;

    *out = NULL;
    if (errlen)
        err[0] = '\0';
    if (!conf || !conf->source) {
        snprintf(err, errlen, "no source given");
        return -EINVAL;
    }
    curl_common_global_init();
    ret = check_source(conf->source, err, errlen);
    if (ret < 0)
        return ret;

    h = calloc(1, sizeof(*h));
    if (!h)
        goto out_nomem;
    if (pthread_mutex_init(&h->mode_lock, NULL) != 0) {
        free(h);
        goto out_nomem;
    }
    h->source = strdup(conf->source);
    if (!h->source)
        goto out_nomem_h;
    size_t n = strlen(h->source);
    if (n && h->source[n - 1] == '/' && !strchr(h->source, '?')) {
        ret = set_dir_mode(h, h->source);
        if (ret < 0)
            goto out_nomem_h;
    }
    curl_common_conf_init(&h->cconf, conf->timeout_ms, DEFAULT_TIMEOUT_MS, conf->stall_timeout_ms,
                          "PAGEFS_HTTP_DEBUG");
    h->cconf.max_redirs = MAX_REDIRS;
    if (conf->log_debug) { /* a debug line per request: path, range, status (curl_common.c) */
        h->cconf.log = conf->log;
        h->cconf.log_arg = conf->log_arg;
    }
    h->cconf.user_agent = "pagefs/" PAGEFS_VERSION;

    ret = curl_pool_create(POOL_MAX, &h->pool);
    if (ret == -ENOMEM)
        goto out_nomem_h;
    if (ret < 0) {
        snprintf(err, errlen, "libcurl initialisation failed");
        http_free(h);
        return -ENOMEM;
    }

    be = calloc(1, sizeof(*be));
    if (!be)
        goto out_nomem_h;
    be->ops = &http_ops;
    be->priv = h;
    be->caps = http_ops.caps;
    *out = be;
    return 0;

out_nomem_h:
    http_free(h);
out_nomem:
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
}
