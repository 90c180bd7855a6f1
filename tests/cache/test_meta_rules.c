/* test_meta_rules.c - unit tests of the namespace rules applied to raw listing entries. */
#include "cache/meta_cache_int.h"
#include "testlib.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static struct backend_entry obj(const char *key, uint64_t size, const char *version)
{
    return (struct backend_entry){(char *)key, 0, size, 1000, (char *)version};
}

static struct backend_entry pfx(const char *key)
{
    return (struct backend_entry){(char *)key, 1, 0, 0, NULL};
}

static void normalize(const char *dir, const struct backend_entry *in, size_t n,
                      struct meta_dir *out, int *marker)
{
    size_t cap = 0;
    memset(out, 0, sizeof(*out));
    *marker = 0;
    for (size_t i = 0; i < n; i++)
        CHECK_EQ(meta_dir_add_entry(out, &cap, dir, &in[i], marker), 0);
    meta_dir_finish(out);
}

static void test_rules_in_subdir(void)
{
    char long255[300] = "d/", long256[300] = "d/";
    memset(long255 + 2, 'x', 255);
    long255[257] = '\0';
    memset(long256 + 2, 'y', 256);
    long256[258] = '\0';
    struct backend_entry in[] = {
        obj("d/", 0, "\"m\""),       /* the directory's own marker */
        obj("d/a", 5, "\"va\""),     /* hidden by the directory a/ */
        pfx("d/a/"),
        obj("d/b", 7, "\"vb\""),
        pfx("d/c/"),
        pfx("d/./"),
        pfx("d/../"),
        obj("d/.", 1, "v"),
        obj("d/..", 1, "v"),
        pfx("d//"),
        obj(long255, 3, "v255"),
        obj(long256, 3, "v256"),
        obj("e/x", 1, "v"),          /* not in d/ */
        obj("d/m/", 0, "\"mm\""),    /* a zero-byte marker of a subdirectory */
        obj("d/z", 2, "\"vz\""),
        obj("d/z/", 0, "\"vz2\""),   /* marker and object: the directory wins */
        obj("d/\xc3\xa9", 4, "v"),   /* non-ASCII sorts after ASCII, bytewise */
        obj("d/Z", 4, "v"),
        obj("d/a b", 4, "v"),
    };
    struct meta_dir d;
    int marker;
    normalize("d/", in, sizeof(in) / sizeof(in[0]), &d, &marker);
    CHECK_EQ(marker, 1);
    struct {
        const char *name;
        int is_dir;
        uint64_t size;
        const char *version;
    } want[] = {
        {"Z", 0, 4, "v"},     {"a", 1, 0, NULL},       {"a b", 0, 4, "v"},
        {"b", 0, 7, "\"vb\""}, {"c", 1, 0, NULL},       {"m", 1, 0, NULL},
        {long255 + 2, 0, 3, "v255"}, {"z", 1, 0, NULL}, {"\xc3\xa9", 0, 4, "v"},
    };
    size_t nwant = sizeof(want) / sizeof(want[0]);
    CHECK_EQ(d.count, nwant);
    for (size_t i = 0; i < d.count && i < nwant; i++) {
        CHECK_STR(d.entries[i].name, want[i].name);
        CHECK_EQ(d.entries[i].is_dir, want[i].is_dir);
        CHECK_EQ(d.entries[i].size, want[i].size);
        if (want[i].version)
            CHECK_STR(d.entries[i].version, want[i].version);
        else
            CHECK(d.entries[i].version == NULL);
        if (!want[i].is_dir)
            CHECK_EQ(d.entries[i].mtime_ns, 1000);
    }
    meta_dir_clear(&d);
    CHECK(d.entries == NULL && d.count == 0);
}

static void test_rules_at_root(void)
{
    struct backend_entry in[] = {
        pfx("a/"), obj("a", 3, "v"), obj("b", 1, "v"), pfx("b/"), obj("c", 9, "v"),
    };
    struct meta_dir d;
    int marker;
    normalize("", in, sizeof(in) / sizeof(in[0]), &d, &marker);
    CHECK_EQ(marker, 0);
    CHECK_EQ(d.count, 3);
    if (d.count == 3) {
        CHECK_STR(d.entries[0].name, "a");
        CHECK_EQ(d.entries[0].is_dir, 1);
        CHECK_STR(d.entries[1].name, "b");
        CHECK_EQ(d.entries[1].is_dir, 1);
        CHECK_STR(d.entries[2].name, "c");
        CHECK_EQ(d.entries[2].is_dir, 0);
        CHECK_EQ(d.entries[2].size, 9);
    }
    meta_dir_clear(&d);

    /* Many entries: the array grows and the order is bytewise. */
    struct meta_dir big = {0};
    size_t cap = 0;
    char key[32];
    for (int i = 999; i >= 0; i--) {
        snprintf(key, sizeof(key), "k%04d", i);
        struct backend_entry e = obj(key, (uint64_t)i, "v");
        CHECK_EQ(meta_dir_add_entry(&big, &cap, "", &e, NULL), 0);
    }
    meta_dir_finish(&big);
    CHECK_EQ(big.count, 1000);
    for (size_t i = 1; i < big.count; i++)
        CHECK(strcmp(big.entries[i - 1].name, big.entries[i].name) < 0);
    meta_dir_clear(&big);
}

int main(void)
{
    RUN(test_rules_in_subdir);
    RUN(test_rules_at_root);
    return test_finish();
}
