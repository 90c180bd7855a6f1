/*
 * test_http_listing.c - unit tests of http_listing_parse() (backends/http_listing.h).
 *
 * The fixtures in tests/http/fixtures/ are index pages captured from real servers serving the
 * tree tests/http/make_tree.py writes: nginx 1.22 (autoindex on), Apache 2.4 mod_autoindex
 * (FancyIndexing as a table, FancyIndexing as <pre>, plain <ul>), python3.11 -m http.server.
 * Each must list exactly that tree, with the sizes and times each server shows. Synthetic
 * pages then check every listing rule, and that nothing past `len` is read.
 */
#include "backends/http_listing.h"
#include "testlib.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef HTTP_FIXTURES
#error "HTTP_FIXTURES (the fixtures directory) must be defined by the build"
#endif

#define NOSIZE UINT64_MAX
#define T_TREE 1795978200LL /* 2026-11-29 18:50 UTC, when the fixtures were captured */
#define T_OLD 1577836800LL  /* 2020-01-01 00:00 UTC, make_tree.py's settled files */
#define NS 1000000000LL

struct want {
    const char *key;
    int is_prefix;
    uint64_t size; /* files only */
};

static char long_name[256];

/* The tree's root as every server lists it; sizes as nginx prints them (exact). */
static struct want tree_exact[] = {
    {"100%.dat", 0, 777},
    {"a/", 1, 0},
    {"amp&lt<gt>.txt", 0, 303},
    {"big.bin", 0, 20971520},
    {"colon:name.txt", 0, 302},
    {"dir with space/", 1, 0},
    {"empty-file.bin", 0, 0},
    {"empty/", 1, 0},
    {"hash#tag.txt", 0, 300},
    {"hello.txt", 0, 12},
    {"na\xc3\xafve-\xe6\x97\xa5\xe6\x9c\xac.txt", 0, 5000},
    {"old/", 1, 0},
    {"plus+sign.bin", 0, 4097},
    {"question?.txt", 0, 301},
    {"space name.txt", 0, 1000},
    {long_name, 0, 99},
};
#define TREE_N (sizeof(tree_exact) / sizeof(tree_exact[0]))

static void init_long_name(void)
{
    memset(long_name, 'x', 251);
    memcpy(long_name + 251, ".bin", 5);
}

static char *read_fixture(const char *name, size_t *len)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", HTTP_FIXTURES, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open fixture %s\n", path);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    /* Exactly n bytes, no terminator: the parser must stay inside them (ASan checks). */
    char *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static int parse_fixture(const char *name, const char *dir_path, const char *prefix,
                         struct backend_list_page *pg)
{
    size_t len = 0;
    char *html = read_fixture(name, &len);
    memset(pg, 0, sizeof(*pg));
    if (!html)
        return -999;
    int rc = http_listing_parse(html, len, dir_path, prefix, pg);
    free(html);
    return rc;
}

static void check_sorted(const struct backend_list_page *pg)
{
    for (size_t i = 1; i < pg->count; i++)
        CHECK(strcmp(pg->entries[i - 1].key, pg->entries[i].key) < 0);
    CHECK(pg->next_token == NULL);
    for (size_t i = 0; i < pg->count; i++)
        CHECK(pg->entries[i].version == NULL);
}

/* The page lists the tree; sizes exact where `exact`, else as `sizes_of` says. */
static void check_tree(const struct backend_list_page *pg, const char *prefix, int exact_sizes,
                       const uint64_t *sizes, int64_t mtime_ns)
{
    CHECK_EQ(pg->count, TREE_N);
    check_sorted(pg);
    for (size_t i = 0; i < TREE_N && i < pg->count; i++) {
        const struct backend_entry *e = &pg->entries[i];
        char key[512];
        snprintf(key, sizeof(key), "%s%s", prefix, tree_exact[i].key);
        CHECK_STR(e->key, key);
        CHECK_EQ(e->is_prefix, tree_exact[i].is_prefix);
        if (tree_exact[i].is_prefix) {
            CHECK_EQ(e->size, 0);
        } else if (exact_sizes) {
            CHECK(e->size == tree_exact[i].size);
        } else {
            if (e->size != sizes[i])
                fprintf(stderr, "  entry %s: size %llu\n", e->key, (unsigned long long)e->size);
            CHECK(e->size == sizes[i]);
        }
        CHECK_EQ(e->mtime_ns, mtime_ns);
    }
}

static void test_nginx(void)
{
    struct backend_list_page pg;
    CHECK_EQ(parse_fixture("nginx_tree.html", "/tree/", "", &pg), 0);
    check_tree(&pg, "", 1, NULL, T_TREE * NS);
    backend_list_page_clear(&pg);

    /* The same page as the listing of a prefix: keys carry it. */
    CHECK_EQ(parse_fixture("nginx_tree.html", "/tree/", "sub dir/", &pg), 0);
    check_tree(&pg, "sub dir/", 1, NULL, T_TREE * NS);
    backend_list_page_clear(&pg);

    CHECK_EQ(parse_fixture("nginx_old.html", "/tree/old/", "old/", &pg), 0);
    CHECK_EQ(pg.count, 2);
    if (pg.count == 2) {
        CHECK_STR(pg.entries[0].key, "old/settled-1.bin");
        CHECK(pg.entries[0].size == (2u << 20) + 5);
        CHECK_EQ(pg.entries[0].mtime_ns, T_OLD * NS);
        CHECK_STR(pg.entries[1].key, "old/settled-2.txt");
        CHECK(pg.entries[1].size == 123);
    }
    backend_list_page_clear(&pg);

    /* An empty directory: a listing with no children (only "../"). */
    CHECK_EQ(parse_fixture("nginx_empty.html", "/tree/empty/", "empty/", &pg), 0);
    CHECK_EQ(pg.count, 0);
    backend_list_page_clear(&pg);
}

static void test_apache(void)
{
    /* Apache prints sizes under 1 KiB in bytes (exact), the rest as "4.0K", "20M". */
    static const uint64_t sizes[TREE_N] = {777, 0,  303,    NOSIZE, 302,    0,   0,      0,
                                           300, 12, NOSIZE, 0,      NOSIZE, 301, NOSIZE, 99};
    struct backend_list_page pg;

    CHECK_EQ(parse_fixture("apache_table.html", "/table/", "", &pg), 0);
    check_tree(&pg, "", 0, sizes, T_TREE * NS);
    backend_list_page_clear(&pg);

    CHECK_EQ(parse_fixture("apache_pre.html", "/pre/", "", &pg), 0);
    check_tree(&pg, "", 0, sizes, T_TREE * NS);
    backend_list_page_clear(&pg);

    static const uint64_t none[TREE_N] = {NOSIZE, 0,      NOSIZE, NOSIZE, NOSIZE, 0,
                                          NOSIZE, 0,      NOSIZE, NOSIZE, NOSIZE, 0,
                                          NOSIZE, NOSIZE, NOSIZE, NOSIZE};
    CHECK_EQ(parse_fixture("apache_plain.html", "/plain/", "", &pg), 0);
    check_tree(&pg, "", 0, none, 0);
    backend_list_page_clear(&pg);

    CHECK_EQ(parse_fixture("apache_table_old.html", "/table/old/", "old/", &pg), 0);
    CHECK_EQ(pg.count, 2);
    if (pg.count == 2) {
        CHECK(pg.entries[0].size == NOSIZE); /* "2.0M" */
        CHECK(pg.entries[1].size == 123);
        CHECK_EQ(pg.entries[1].mtime_ns, T_OLD * NS);
    }
    backend_list_page_clear(&pg);
    CHECK_EQ(parse_fixture("apache_pre_old.html", "/pre/old/", "old/", &pg), 0);
    CHECK_EQ(pg.count, 2);
    backend_list_page_clear(&pg);
    CHECK_EQ(parse_fixture("apache_plain_old.html", "/plain/old/", "old/", &pg), 0);
    CHECK_EQ(pg.count, 2);
    backend_list_page_clear(&pg);
}

static void test_python(void)
{
    static const uint64_t none[TREE_N] = {NOSIZE, 0,      NOSIZE, NOSIZE, NOSIZE, 0,
                                          NOSIZE, 0,      NOSIZE, NOSIZE, NOSIZE, 0,
                                          NOSIZE, NOSIZE, NOSIZE, NOSIZE};
    struct backend_list_page pg;
    CHECK_EQ(parse_fixture("python_tree.html", "/tree/", "", &pg), 0);
    check_tree(&pg, "", 0, none, 0);
    backend_list_page_clear(&pg);
    CHECK_EQ(parse_fixture("python_empty.html", "/tree/empty/", "empty/", &pg), 0);
    CHECK_EQ(pg.count, 0);
    backend_list_page_clear(&pg);
}

/* Parses a string page; returns the keys joined by '|' (caller frees) or NULL on error. */
static char *keys_of(const char *html, const char *dir_path, int *rc_out)
{
    struct backend_list_page pg = {0};
    int rc = http_listing_parse(html, strlen(html), dir_path, "", &pg);
    if (rc_out)
        *rc_out = rc;
    if (rc < 0)
        return NULL;
    size_t cap = 1;
    for (size_t i = 0; i < pg.count; i++)
        cap += strlen(pg.entries[i].key) + 1;
    char *s = calloc(1, cap);
    for (size_t i = 0; s && i < pg.count; i++) {
        if (i)
            strcat(s, "|");
        strcat(s, pg.entries[i].key);
    }
    backend_list_page_clear(&pg);
    return s;
}

static void check_keys(const char *html, const char *dir_path, const char *want)
{
    int rc = 0;
    char *got = keys_of(html, dir_path, &rc);
    CHECK_EQ(rc, 0);
    CHECK_STR(got, want);
    free(got);
}

static void test_href_rules(void)
{
    /* Kept: relative names and dirs, "./name", absolute paths under the directory (compared
     * after decoding), whitespace around an href. */
    check_keys("<html><body>"
               "<a href=\"plain\">x</a><a href=\"sub/\">x</a><a href=\"./dot\">x</a>"
               "<a href=\"/t%72ee/abs\">x</a><a href=\"/tree/absdir/\">x</a>"
               "<a href=\"  spaced  \">x</a><a href=\"p%2Bq+r\">x</a>"
               "</body></html>",
               "/tree/", "abs|absdir/|dot|p+q+r|plain|spaced|sub/");
    /* Dropped: parent, sort links, fragments, other hosts, schemes, deeper paths, encoded
     * '/', NUL, bad escapes, ".", "..", empty, other absolute paths, the directory itself. */
    check_keys("<html><body>"
               "<a href=\"../\">p</a><a href=\"?C=N;O=D\">s</a><a href=\"#top\">f</a>"
               "<a href=\"x#frag\">f</a><a href=\"x?y=1\">q</a>"
               "<a href=\"http://other/tree/x\">h</a><a href=\"https://h/tree/y\">h</a>"
               "<a href=\"//host/tree/z\">n</a><a href=\"mailto:a@b\">m</a>"
               "<a href=\"javascript:void(0)\">j</a><a href=\"a/b\">d</a><a href=\"a/b/\">d</a>"
               "<a href=\"a%2Fb\">e</a><a href=\"%00x\">z</a><a href=\"%zz\">b</a>"
               "<a href=\"%4\">b</a><a href=\".\">.</a><a href=\"./\">.</a><a href=\"..\">.</a>"
               "<a href=\"%2e%2e/\">.</a><a href=\"\">e</a><a>no href</a>"
               "<a href=\"/other/x\">o</a><a href=\"/tree/a/b\">o</a><a href=\"/tree/\">o</a>"
               "<a href=\"/x\">o</a><a href=\"/tree//x\">o</a><a href=\"a\\b\">o</a>"
               "</body></html>",
               "/tree/", "");
    /* At the server root every absolute "/name" is a child. */
    check_keys("<html><a href=\"/top\">t</a><a href=\"/d/\">d</a><a href=\"/d/e\">e</a></html>",
               "/", "d/|top");

    /* Name length: 255 bytes kept, 256 dropped (after decoding). */
    char page[1200], n255[256], n256[257];
    memset(n255, 'a', 255);
    n255[255] = '\0';
    memset(n256, 'b', 256);
    n256[256] = '\0';
    snprintf(page, sizeof(page), "<html><a href=\"%s\">x</a><a href=\"%s\">y</a></html>", n255,
             n256);
    check_keys(page, "/", n255);
    /* 85 escapes of 3 bytes decode to 85 bytes: kept although the href is 255 long. */
    char enc[300] = "";
    for (int i = 0; i < 85; i++)
        strcat(enc, "%41");
    snprintf(page, sizeof(page), "<html><a href=\"%s\">x</a></html>", enc);
    char dec[86];
    memset(dec, 'A', 85);
    dec[85] = '\0';
    check_keys(page, "/", dec);

    /* Twins are listed once, with the metadata any of them had; a file and a directory of
     * the same name are two keys. */
    struct backend_list_page pg = {0};
    const char *twins = "<html><pre><a href=\"f\">f</a>\n"
                        "<a href=\"f\">f</a>  01-Jan-2024 00:00   42\n"
                        "<a href=\"f/\">f/</a> 01-Jan-2024 00:00   -\n</pre></html>";
    CHECK_EQ(http_listing_parse(twins, strlen(twins), "/", "", &pg), 0);
    CHECK_EQ(pg.count, 2);
    if (pg.count == 2) {
        CHECK_STR(pg.entries[0].key, "f");
        CHECK(pg.entries[0].size == 42);
        CHECK_EQ(pg.entries[0].mtime_ns, 1704067200LL * NS);
        CHECK_STR(pg.entries[1].key, "f/");
        CHECK_EQ(pg.entries[1].is_prefix, 1);
    }
    backend_list_page_clear(&pg);
}

static void test_row_formats(void)
{
    struct backend_list_page pg = {0};
    /* nginx with autoindex_exact_size off; lighttpd-style dates with seconds; a size with no
     * date is not trusted; a bad date is no date. */
    const char *page = "<html><body><pre>"
                       "<a href=\"k\">k</a>          01-Feb-2024 10:20     12K\n"
                       "<a href=\"l\">l</a>          2024-Feb-01 10:20:30  1234\n"
                       "<a href=\"m\">m</a>          2024-02-01 10:20:30   5\n"
                       "<a href=\"n\">n</a>          77\n"
                       "<a href=\"o\">o</a>          2024-13-01 10:20  9\n"
                       "<a href=\"p\">p</a>          01-Feb-2024 25:20  9\n"
                       "<a href=\"q\">q</a>          01-Feb-2024 10:20  99999999999999999999\n"
                       "</pre></body></html>";
    CHECK_EQ(http_listing_parse(page, strlen(page), "/d/", "d/", &pg), 0);
    CHECK_EQ(pg.count, 7);
    if (pg.count == 7) {
        const int64_t t = 1706782800LL; /* 2024-02-01 10:20 UTC */
        CHECK(pg.entries[0].size == NOSIZE);
        CHECK_EQ(pg.entries[0].mtime_ns, t * NS);
        CHECK(pg.entries[1].size == 1234);
        CHECK_EQ(pg.entries[1].mtime_ns, (t + 30) * NS);
        CHECK(pg.entries[2].size == 5);
        CHECK_EQ(pg.entries[2].mtime_ns, (t + 30) * NS);
        CHECK(pg.entries[3].size == NOSIZE);
        CHECK_EQ(pg.entries[3].mtime_ns, 0);
        CHECK(pg.entries[4].size == NOSIZE);
        CHECK_EQ(pg.entries[4].mtime_ns, 0);
        CHECK(pg.entries[5].size == NOSIZE);
        CHECK(pg.entries[6].size == NOSIZE); /* does not fit 64 bits */
    }
    backend_list_page_clear(&pg);

    /* A table row: the cells after the link's cell, &nbsp; as a blank. */
    const char *table =
        "<html><table><tr><td><a href=\"t\">t</a></td>"
        "<td>2024-02-01&nbsp;10:20</td><td>&nbsp;321&nbsp;</td></tr></table></html>";
    CHECK_EQ(http_listing_parse(table, strlen(table), "/", "", &pg), 0);
    CHECK_EQ(pg.count, 1);
    if (pg.count == 1) {
        CHECK(pg.entries[0].size == 321);
        CHECK_EQ(pg.entries[0].mtime_ns, 1706782800LL * NS);
    }
    backend_list_page_clear(&pg);
}

static void test_not_a_listing(void)
{
    struct backend_list_page pg = {0};
    int rc;
    CHECK_EQ(http_listing_parse(NULL, 0, "/", "", &pg), -EIO);
    CHECK_EQ(http_listing_parse("", 0, "/", "", &pg), -EIO);
    CHECK_EQ(http_listing_parse("   \n", 4, "/", "", &pg), -EIO);
    CHECK_EQ(http_listing_parse("hello world", 11, "/", "", &pg), -EIO);
    CHECK_EQ(http_listing_parse("\x89PNG\r\n\x1a\n", 8, "/", "", &pg), -EIO);
    CHECK_EQ(http_listing_parse("{\"a\": 1}", 8, "/", "", &pg), -EIO);
    CHECK_EQ(pg.count, 0);
    /* Bad arguments. */
    CHECK_EQ(http_listing_parse("<html></html>", 13, "tree/", "", &pg), -EINVAL);
    CHECK_EQ(http_listing_parse("<html></html>", 13, "/tree", "", &pg), -EINVAL);
    CHECK_EQ(http_listing_parse("<html></html>", 13, "/", NULL, &pg), -EINVAL);
    CHECK_EQ(http_listing_parse("<html></html>", 13, "/", "", NULL), -EINVAL);
    /* A page without links is an empty listing; a BOM and blanks may precede the markup. */
    char *k = keys_of("\xef\xbb\xbf  <!DOCTYPE html><title>Index of /</title>", "/", &rc);
    CHECK_EQ(rc, 0);
    CHECK_STR(k, "");
    free(k);
}

static void test_bounds(void)
{
    /* The second link lies past len: it must not be seen. */
    const char *page = "<html><a href=\"first\">1</a><a href=\"second\">2</a></html>";
    const char *cut = strstr(page, "<a href=\"second");
    size_t len = (size_t)(cut - page);
    char *exact = malloc(len); /* no terminator after the bytes */
    memcpy(exact, page, len);
    struct backend_list_page pg = {0};
    CHECK_EQ(http_listing_parse(exact, len, "/", "", &pg), 0);
    CHECK_EQ(pg.count, 1);
    if (pg.count == 1)
        CHECK_STR(pg.entries[0].key, "first");
    backend_list_page_clear(&pg);
    /* Every prefix of a real page parses without reading past its end (ASan builds). */
    size_t flen = 0;
    char *full = read_fixture("apache_table.html", &flen);
    CHECK(full != NULL);
    for (size_t n = 0; full && n <= flen; n += 37) {
        char *p = malloc(n ? n : 1);
        memcpy(p, full, n);
        int rc = http_listing_parse(p, n, "/table/", "", &pg);
        CHECK(rc == 0 || rc == -EIO);
        check_sorted(&pg);
        backend_list_page_clear(&pg);
        free(p);
    }
    free(full);
    free(exact);

    /* Appending to a page that already holds entries keeps them. */
    CHECK_EQ(backend_list_page_add(&pg, "zzz", 0, 1, 0, NULL), 0);
    const char *more = "<html><a href=\"b\">b</a></html>";
    CHECK_EQ(http_listing_parse(more, strlen(more), "/", "p/", &pg), 0);
    CHECK_EQ(pg.count, 2);
    if (pg.count == 2) {
        CHECK_STR(pg.entries[0].key, "zzz");
        CHECK_STR(pg.entries[1].key, "p/b");
    }
    backend_list_page_clear(&pg);
}

static void test_percent_decode(void)
{
    int nomem = 0;
    char *s = http_percent_decode("a%20b+c%2fd", 11, &nomem);
    CHECK_STR(s, "a b+c/d");
    free(s);
    CHECK(http_percent_decode("%", 1, &nomem) == NULL);
    CHECK(http_percent_decode("%4", 2, &nomem) == NULL);
    CHECK(http_percent_decode("%g0", 3, &nomem) == NULL);
    CHECK(http_percent_decode("a%00", 4, &nomem) == NULL);
    /* Only n bytes are read: "%41" cut after "%4" is invalid, not "A". */
    CHECK(http_percent_decode("%41", 2, &nomem) == NULL);
    CHECK_EQ(nomem, 0);
}

int main(void)
{
    init_long_name();
    RUN(test_nginx);
    RUN(test_apache);
    RUN(test_python);
    RUN(test_href_rules);
    RUN(test_row_formats);
    RUN(test_not_a_listing);
    RUN(test_bounds);
    RUN(test_percent_decode);
    return test_finish();
}
