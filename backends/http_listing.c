/*
 * http_listing.c - directory index pages (nginx, Apache, python http.server) to listing
 * entries (see http_listing.h for the rules).
 *
 * Design: libxml2's forgiving HTML parser builds a tree (no network, no entity expansion
 * beyond HTML's own, errors and warnings silenced); an iterative walk visits every <a href>.
 * Each href goes through href_child_name(), which applies the listing rules and decodes the
 * name; the entry's metadata is read from its row text (row_text()): the following cells of
 * the link's table row, or the text after the link up to the end of its <pre> line. Accepted
 * children are collected in a local array, sorted and merged by key, and only then appended
 * to `out`, so an error leaves `out` as it was.
 *
 * Invariants: nothing reads `html` past len (libxml2 gets the length; the pre-checks use it);
 * row texts are bounded (ROW_MAX); every decoded name is checked for '/', NUL, ".", "..", ""
 * and its length before it becomes part of a key. Stateless apart from libxml2's one-time
 * initialisation (pthread_once), so it is safe to call from many threads.
 */
#include "backends/http_listing.h"
#include "backends/urlcode.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <libxml/HTMLparser.h>
#include <libxml/tree.h>

#define NAME_MAX_BYTES 255
#define ROW_MAX 512   /* bytes of row text looked at for a date and a size */
#define ROW_TOKENS 16 /* tokens of row text looked at */
#define CHARSET_SCAN 4096

struct child {
    char *key;
    int is_dir;
    uint64_t size;
    int64_t mtime_ns;
};

struct children {
    struct child *v;
    size_t n, cap;
};

static pthread_once_t xml_once = PTHREAD_ONCE_INIT; /* written once, by pthread_once */

static void xml_init_once(void)
{
    xmlInitParser();
}

/* ---- names -------------------------------------------------------------------------- */

char *http_percent_decode(const char *s, size_t n, int *nomem)
{
    char *out = NULL;
    if (url_decode(s, n, &out, NULL, 0) == -ENOMEM && nomem)
        *nomem = 1;
    return out;
}

/* Splits an absolute path into its segments (between '/'); returns the count, or -1 when
 * there are more than `max`. A trailing '/' gives a last empty segment. */
static int split_segments(const char *p, const char **seg, size_t *seglen, int max)
{
    int n = 0;
    if (*p != '/')
        return -1;
    p++;
    for (;;) {
        size_t l = strcspn(p, "/");
        if (n == max)
            return -1;
        seg[n] = p;
        seglen[n] = l;
        n++;
        if (p[l] == '\0')
            return n;
        p += l + 1;
    }
}

/* 1 when two percent-encoded segments decode to the same bytes, 0 otherwise (or invalid). */
static int segment_equal(const char *a, size_t al, const char *b, size_t bl, int *nomem)
{
    if (al == bl && memcmp(a, b, al) == 0)
        return 1;
    char *da = http_percent_decode(a, al, nomem);
    char *db = da ? http_percent_decode(b, bl, nomem) : NULL;
    int eq = da && db && strcmp(da, db) == 0;
    free(db);
    free(da);
    return eq;
}

#define MAX_DEPTH 256

/* name (a decoded child name, owned) when it is usable as one path component: not "", ".",
 * "..", no '/', at most NAME_MAX_BYTES; otherwise name is freed and NULL returned. */
static char *usable_name(char *name)
{
    if (!name)
        return NULL;
    size_t nl = strlen(name);
    if (nl == 0 || nl > NAME_MAX_BYTES || strchr(name, '/') || strcmp(name, ".") == 0 ||
        strcmp(name, "..") == 0) {
        free(name);
        return NULL;
    }
    return name;
}

/* The child name an href designates, decoded (caller frees), with *is_dir; NULL when the
 * href is not a direct child of dir_path (or on no memory: *nomem set). */
static char *href_child_name(const char *href, const char *dir_path, int *is_dir, int *nomem)
{
    const char *start = href, *end;
    const char *raw;
    size_t rawlen;

    while (*start == ' ' || *start == '\t' || *start == '\n' || *start == '\r' || *start == '\f')
        start++;
    end = start + strlen(start);
    while (end > start && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\n' ||
                           end[-1] == '\r' || end[-1] == '\f'))
        end--;
    size_t len = (size_t)(end - start);
    if (len == 0 || memchr(start, '?', len) || memchr(start, '#', len) || memchr(start, '\\', len))
        return NULL;
    /* A scheme ("http:", "mailto:") is letters, digits, '+', '-', '.' up to a ':'. */
    size_t sl = strspn(start, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-.");
    if (sl > 0 && sl < len && start[sl] == ':')
        return NULL;

    if (start[0] == '/') {
        if (len > 1 && start[1] == '/')
            return NULL; /* //host/path */
        const char *hseg[MAX_DEPTH + 2], *dseg[MAX_DEPTH + 1];
        size_t hlen[MAX_DEPTH + 2], dlen[MAX_DEPTH + 1];
        char *copy = strndup(start, len);
        if (!copy) {
            *nomem = 1;
            return NULL;
        }
        int hn = split_segments(copy, hseg, hlen, MAX_DEPTH + 2);
        int dn = split_segments(dir_path, dseg, dlen, MAX_DEPTH + 1);
        char *name = NULL;
        /* dir_path ends with '/': its last segment is empty and stands for the child. */
        if (hn < 0 || dn < 0 || !(hn == dn || hn == dn + 1))
            goto out_abs;
        if (hn == dn + 1 && hlen[hn - 1] != 0)
            goto out_abs; /* "/dir/name/more" */
        for (int i = 0; i < dn - 1; i++) {
            if (!segment_equal(hseg[i], hlen[i], dseg[i], dlen[i], nomem))
                goto out_abs;
        }
        *is_dir = hn == dn + 1;
        name = http_percent_decode(hseg[dn - 1], hlen[dn - 1], nomem);
    out_abs:
        free(copy);
        return usable_name(name);
    }

    while (len >= 2 && start[0] == '.' && start[1] == '/') {
        start += 2; /* "./name": how nginx protects names with a ':' */
        len -= 2;
    }
    raw = start;
    rawlen = len;
    const char *slash = memchr(raw, '/', rawlen);
    *is_dir = 0;
    if (slash) {
        if (slash != raw + rawlen - 1)
            return NULL;
        *is_dir = 1;
        rawlen--;
    }
    if (rawlen == 0)
        return NULL;
    return usable_name(http_percent_decode(raw, rawlen, nomem));
}

/* ---- row text: dates and sizes ------------------------------------------------------ */

struct rowbuf {
    char s[ROW_MAX + 1];
    size_t n;
    int done; /* the row ended (a newline in <pre> text, or the buffer is full) */
};

/* Appends text, stopping at a newline when stop_at_nl; returns 1 when the row ended. */
static int row_add(struct rowbuf *r, const char *t, int stop_at_nl)
{
    for (; *t && !r->done; t++) {
        if (stop_at_nl && *t == '\n') {
            r->done = 1;
            break;
        }
        if (r->n == ROW_MAX) {
            r->done = 1;
            break;
        }
        r->s[r->n++] = *t;
    }
    r->s[r->n] = '\0';
    return r->done;
}

static int name_is(const xmlNode *n, const char *name)
{
    return n && n->type == XML_ELEMENT_NODE && n->name &&
           strcasecmp((const char *)n->name, name) == 0;
}

/* Appends the text content of a subtree (bounded by the row buffer). */
static void row_add_subtree(struct rowbuf *r, const xmlNode *n, int stop_at_nl)
{
    const xmlNode *top = n;
    while (n && !r->done) {
        if ((n->type == XML_TEXT_NODE || n->type == XML_CDATA_SECTION_NODE) && n->content)
            row_add(r, (const char *)n->content, stop_at_nl);
        if (n->children && n->type == XML_ELEMENT_NODE) {
            n = n->children;
            continue;
        }
        while (n && n != top && !n->next)
            n = n->parent;
        if (!n || n == top)
            break;
        n = n->next;
    }
}

/* The text of the row the link `a` stands in. */
static void row_text(const xmlNode *a, struct rowbuf *r)
{
    const xmlNode *cell = NULL, *p;

    r->n = 0;
    r->done = 0;
    r->s[0] = '\0';
    for (p = a; p && p->type == XML_ELEMENT_NODE; p = p->parent) {
        if (name_is(p, "td") || name_is(p, "th"))
            cell = p;
        if (name_is(p, "tr") || name_is(p, "table") || name_is(p, "body"))
            break;
    }
    if (name_is(p, "tr") && cell) {
        for (const xmlNode *c = cell->next; c && !r->done; c = c->next) {
            if (name_is(c, "td") || name_is(c, "th")) {
                row_add_subtree(r, c->children, 0);
                row_add(r, " ", 0);
            }
        }
        return;
    }
    /* A <pre> line: the siblings after the link up to a newline or the next link. */
    for (const xmlNode *s = a->next; s && !r->done; s = s->next) {
        if (s->type == XML_TEXT_NODE) {
            if (s->content && row_add(r, (const char *)s->content, 1))
                break;
            continue;
        }
        if (s->type != XML_ELEMENT_NODE)
            continue;
        if (name_is(s, "a") || name_is(s, "br") || name_is(s, "li") || name_is(s, "tr") ||
            name_is(s, "p") || name_is(s, "div") || name_is(s, "img") || name_is(s, "hr"))
            break;
        row_add_subtree(r, s->children, 1);
    }
}

static const char *const months[12] = {"jan", "feb", "mar", "apr", "may", "jun",
                                       "jul", "aug", "sep", "oct", "nov", "dec"};

static int month_of(const char *t, size_t n)
{
    if (n != 3)
        return -1;
    for (int i = 0; i < 12; i++) {
        if (strncasecmp(t, months[i], 3) == 0)
            return i + 1;
    }
    return -1;
}

/* Digits t[0..n) as an int; -1 unless exactly n digits (n <= 4). */
static int digits(const char *t, size_t n)
{
    int v = 0;
    if (n == 0 || n > 4)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (t[i] < '0' || t[i] > '9')
            return -1;
        v = v * 10 + (t[i] - '0');
    }
    return v;
}

/* "01-Jan-2024", "2024-01-01" or "2024-Jan-01". Returns 0 and fills tm, or -1. */
static int parse_date(const char *t, size_t n, struct tm *tm)
{
    const char *d1 = memchr(t, '-', n);
    if (!d1)
        return -1;
    const char *d2 = memchr(d1 + 1, '-', (size_t)(t + n - d1 - 1));
    if (!d2)
        return -1;
    size_t l1 = (size_t)(d1 - t), l2 = (size_t)(d2 - d1 - 1), l3 = (size_t)(t + n - d2 - 1);
    int y, m, d;
    if (l1 == 4) {
        y = digits(t, 4);
        m = l2 == 3 ? month_of(d1 + 1, 3) : (l2 == 2 ? digits(d1 + 1, 2) : -1);
        d = l3 <= 2 ? digits(d2 + 1, l3) : -1;
    } else {
        d = l1 <= 2 ? digits(t, l1) : -1;
        m = month_of(d1 + 1, l2);
        y = l3 == 4 ? digits(d2 + 1, 4) : -1;
    }
    if (y < 1970 || m < 1 || m > 12 || d < 1 || d > 31)
        return -1;
    tm->tm_year = y - 1900;
    tm->tm_mon = m - 1;
    tm->tm_mday = d;
    return 0;
}

/* "12:34" or "12:34:56". */
static int parse_time(const char *t, size_t n, struct tm *tm)
{
    int h, mi, s = 0;
    if (n == 5 && t[2] == ':') {
        h = digits(t, 2);
        mi = digits(t + 3, 2);
    } else if (n == 8 && t[2] == ':' && t[5] == ':') {
        h = digits(t, 2);
        mi = digits(t + 3, 2);
        s = digits(t + 6, 2);
    } else {
        return -1;
    }
    if (h < 0 || h > 23 || mi < 0 || mi > 59 || s < 0 || s > 60)
        return -1;
    tm->tm_hour = h;
    tm->tm_min = mi;
    tm->tm_sec = s;
    return 0;
}

/* Plain digits as an exact byte count; UINT64_MAX otherwise. */
static uint64_t parse_size(const char *t, size_t n)
{
    uint64_t v = 0;
    if (n == 0 || n > 19)
        return UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        if (t[i] < '0' || t[i] > '9')
            return UINT64_MAX;
        v = v * 10 + (uint64_t)(t[i] - '0');
    }
    return v;
}

static int is_space_at(const char *s, size_t *skip)
{
    unsigned char c = (unsigned char)s[0];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
        *skip = 1;
        return 1;
    }
    if (c == 0xc2 && (unsigned char)s[1] == 0xa0) { /* U+00A0, &nbsp; */
        *skip = 2;
        return 1;
    }
    return 0;
}

static void parse_row(const char *s, uint64_t *size, int64_t *mtime_ns)
{
    const char *tok[ROW_TOKENS];
    size_t tl[ROW_TOKENS];
    int nt = 0;
    size_t skip;

    *size = UINT64_MAX;
    *mtime_ns = 0;
    while (*s && nt < ROW_TOKENS) {
        if (is_space_at(s, &skip)) {
            s += skip;
            continue;
        }
        const char *b = s;
        while (*s && !is_space_at(s, &skip))
            s++;
        tok[nt] = b;
        tl[nt] = (size_t)(s - b);
        nt++;
    }
    for (int i = 0; i + 1 < nt; i++) {
        struct tm tm = {0};
        if (parse_date(tok[i], tl[i], &tm) < 0 || parse_time(tok[i + 1], tl[i + 1], &tm) < 0)
            continue;
        time_t t = timegm(&tm);
        if (t == (time_t)-1 || t < INT64_MIN / 1000000000 || t > INT64_MAX / 1000000000)
            return; /* out of the nanosecond range of int64 */
        *mtime_ns = (int64_t)t * 1000000000;
        if (i + 2 < nt)
            *size = parse_size(tok[i + 2], tl[i + 2]);
        return;
    }
}

/* ---- collecting --------------------------------------------------------------------- */

static int cmp_child(const void *a, const void *b)
{
    const struct child *x = a, *y = b;
    return strcmp(x->key, y->key);
}

static void children_free(struct children *c)
{
    for (size_t i = 0; i < c->n; i++)
        free(c->v[i].key);
    free(c->v);
    c->v = NULL;
    c->n = c->cap = 0;
}

static int children_add(struct children *c, char *key, int is_dir, uint64_t size, int64_t mtime_ns)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        struct child *v = realloc(c->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        c->v = v;
        c->cap = cap;
    }
    c->v[c->n++] = (struct child){.key = key, .is_dir = is_dir, .size = size, .mtime_ns = mtime_ns};
    return 0;
}

/* One <a>: if its href names a child, adds it. Returns 0 or -ENOMEM. */
static int visit_link(const xmlNode *a, const char *dir_path, const char *prefix,
                      struct children *c, struct rowbuf *row)
{
    int is_dir = 0, nomem = 0, rc;
    xmlChar *href = xmlGetProp(a, (const xmlChar *)"href");
    if (!href)
        return 0;
    char *name = href_child_name((const char *)href, dir_path, &is_dir, &nomem);
    xmlFree(href);
    if (!name)
        return nomem ? -ENOMEM : 0;
    uint64_t size = UINT64_MAX;
    int64_t mtime_ns = 0;
    row_text(a, row);
    parse_row(row->s, &size, &mtime_ns);
    char *key = NULL;
    if (asprintf(&key, "%s%s%s", prefix, name, is_dir ? "/" : "") < 0) {
        free(name);
        return -ENOMEM;
    }
    free(name);
    rc = children_add(c, key, is_dir, is_dir ? 0 : size, mtime_ns);
    if (rc < 0)
        free(key);
    return rc;
}

/* Sorts by key and merges twins, keeping the exact size and the time any of them had. */
static void children_merge(struct children *c)
{
    size_t j = 0;
    if (c->n < 2)
        return;
    qsort(c->v, c->n, sizeof(*c->v), cmp_child);
    for (size_t i = 1; i < c->n; i++) {
        struct child *k = &c->v[j], *x = &c->v[i];
        if (strcmp(k->key, x->key) == 0) {
            if (k->size == UINT64_MAX)
                k->size = x->size;
            if (k->mtime_ns == 0)
                k->mtime_ns = x->mtime_ns;
            free(x->key);
            continue;
        }
        c->v[++j] = *x;
    }
    c->n = j + 1;
}

/* The document declares its own charset (a <meta>); otherwise it is read as UTF-8. */
static int declares_charset(const char *html, size_t len)
{
    size_t n = len < CHARSET_SCAN ? len : CHARSET_SCAN;
    static const char needle[] = "charset";
    for (size_t i = 0; i + sizeof(needle) - 1 <= n; i++) {
        if (strncasecmp(html + i, needle, sizeof(needle) - 1) == 0)
            return 1;
    }
    return 0;
}

int http_listing_parse(const char *html, size_t len, const char *dir_path, const char *prefix,
                       struct backend_list_page *out)
{
    struct children c = {0};
    struct rowbuf *row = NULL;
    htmlDocPtr doc = NULL;
    size_t i = 0, before;
    int rc = -EIO;

    if (!out || !dir_path || !prefix || dir_path[0] != '/' ||
        dir_path[strlen(dir_path) - 1] != '/' || (!html && len))
        return -EINVAL;
    /* An HTML page starts with markup, after blanks and an optional UTF-8 BOM. */
    if (len >= 3 && memcmp(html, "\xef\xbb\xbf", 3) == 0)
        i = 3;
    while (i < len && (html[i] == ' ' || html[i] == '\t' || html[i] == '\r' || html[i] == '\n'))
        i++;
    if (i >= len || html[i] != '<' || len > INT_MAX)
        return -EIO;

    pthread_once(&xml_once, xml_init_once);
    doc = htmlReadMemory(html, (int)len, NULL, declares_charset(html, len) ? NULL : "UTF-8",
                         HTML_PARSE_RECOVER | HTML_PARSE_NOERROR | HTML_PARSE_NOWARNING |
                             HTML_PARSE_NONET | HTML_PARSE_NOBLANKS);
    if (!doc)
        return -EIO;
    xmlNode *root = xmlDocGetRootElement(doc);
    if (!root || !name_is(root, "html"))
        goto out_free_doc;
    row = malloc(sizeof(*row));
    if (!row) {
        rc = -ENOMEM;
        goto out_free_doc;
    }

    /* Iterative pre-order walk of the whole tree. */
    xmlNode *n = root;
    rc = 0;
    while (n && rc == 0) {
        if (name_is(n, "a"))
            rc = visit_link(n, dir_path, prefix, &c, row);
        if (n->children && n->type == XML_ELEMENT_NODE) {
            n = n->children;
            continue;
        }
        while (n && n != root && !n->next)
            n = n->parent;
        if (!n || n == root)
            break;
        n = n->next;
    }
    if (rc < 0)
        goto out_free_children;

    children_merge(&c);
    before = out->count;
    for (size_t k = 0; k < c.n; k++) {
        rc = backend_list_page_add(out, c.v[k].key, c.v[k].is_dir, c.v[k].size, c.v[k].mtime_ns,
                                   NULL);
        if (rc < 0) {
            /* Take back what this call appended: out is left as it was. */
            while (out->count > before) {
                out->count--;
                free(out->entries[out->count].key);
                free(out->entries[out->count].version);
            }
            goto out_free_children;
        }
    }
    rc = 0;

out_free_children:
    children_free(&c);
    free(row);
out_free_doc:
    xmlFreeDoc(doc);
    return rc;
}
