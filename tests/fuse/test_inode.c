/*
 * test_inode.c - unit tests of the FUSE inode table (fuse/inode.c): keys, lookup counts,
 * forget, stable numbers, replacement on a type change, finding an entry by key, growth,
 * every error return, and a multithreaded ref/forget run checked against the expected final
 * state.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fuse/inode.h"
#include "testlib.h"

static const struct inode_attr dir_attr = {.is_dir = 1, .mtime_ns = 5};

static struct inode_attr file_attr(uint64_t size, const char *version)
{
    struct inode_attr a = {
        .is_dir = 0, .size = size, .mtime_ns = 1000000000123, .version = version};
    return a;
}

static void test_root(void)
{
    struct inode_table *t;
    CHECK_EQ(inode_table_create(&t), 0);
    struct inode_info info;
    CHECK_EQ(inode_table_get(t, INODE_ROOT_ID, &info), 0);
    CHECK_EQ(info.ino, INODE_ROOT_ID);
    CHECK_EQ(info.is_dir, 1);
    CHECK_STR(info.key, "");
    CHECK(info.version == NULL);
    inode_info_clear(&info);
    CHECK_EQ(inode_table_count(t), 1);
    /* The root is never forgotten. */
    inode_table_forget(t, INODE_ROOT_ID, 1000);
    CHECK_EQ(inode_table_get(t, INODE_ROOT_ID, &info), 0);
    inode_info_clear(&info);
    CHECK_EQ(inode_table_count(t), 1);
    inode_table_destroy(t);
    inode_table_destroy(NULL);
}

static void test_children_and_keys(void)
{
    struct inode_table *t;
    CHECK_EQ(inode_table_create(&t), 0);
    struct inode_info d, f, g;
    CHECK_EQ(inode_table_ref_child(t, INODE_ROOT_ID, "train", &dir_attr, &d), 0);
    CHECK_STR(d.key, "train/");
    CHECK_EQ(d.is_dir, 1);
    CHECK_EQ(d.parent, INODE_ROOT_ID);
    CHECK(d.ino > INODE_ROOT_ID);
    CHECK_EQ(d.ino, inode_ino_for_key("train/"));

    struct inode_attr fa = file_attr(42, "\"etag1\"");
    CHECK_EQ(inode_table_ref_child(t, d.ino, "a b+%é.jpg", &fa, &f), 0);
    CHECK_STR(f.key, "train/a b+%é.jpg");
    CHECK_EQ(f.size, 42);
    CHECK_EQ(f.mtime_ns, 1000000000123);
    CHECK_STR(f.version, "\"etag1\"");
    CHECK_EQ(f.parent, d.ino);
    CHECK_EQ(f.ino, inode_ino_for_key("train/a b+%é.jpg"));

    /* The same name again: the same inode, one more lookup, attributes refreshed. */
    struct inode_attr fb = file_attr(43, "\"etag2\"");
    CHECK_EQ(inode_table_ref_child(t, d.ino, "a b+%é.jpg", &fb, &g), 0);
    CHECK_EQ(g.ino, f.ino);
    CHECK_EQ(g.size, 43);
    CHECK_STR(g.version, "\"etag2\"");
    CHECK_EQ(inode_table_nlookup(t, f.ino), 2);
    CHECK_EQ(inode_table_count(t), 3);
    inode_info_clear(&g);

    /* update() changes attributes, not type. */
    struct inode_attr fc = file_attr(7, "v3");
    CHECK_EQ(inode_table_update(t, f.ino, &fc), 0);
    CHECK_EQ(inode_table_get(t, f.ino, &g), 0);
    CHECK_EQ(g.size, 7);
    CHECK_STR(g.version, "v3");
    CHECK_EQ(g.is_dir, 0);
    inode_info_clear(&g);
    CHECK_EQ(inode_table_update(t, 999999, &fc), -ENOENT);

    /* A snapshot is a copy: clearing it leaves the table alone. */
    CHECK_EQ(inode_table_get(t, d.ino, &g), 0);
    CHECK_STR(g.key, "train/");
    inode_info_clear(&g);

    inode_info_clear(&d);
    inode_info_clear(&f);
    inode_table_destroy(t); /* frees entries still referenced */
}

static void test_forget_and_stable_numbers(void)
{
    struct inode_table *t;
    CHECK_EQ(inode_table_create(&t), 0);
    struct inode_info d, f;
    CHECK_EQ(inode_table_ref_child(t, INODE_ROOT_ID, "d", &dir_attr, &d), 0);
    struct inode_attr fa = file_attr(1, "v");
    CHECK_EQ(inode_table_ref_child(t, d.ino, "f", &fa, &f), 0);
    CHECK_EQ(inode_table_ref_child(t, d.ino, "f", &fa, NULL), 0);
    CHECK_EQ(inode_table_ref_child(t, d.ino, "f", &fa, NULL), 0);
    CHECK_EQ(inode_table_nlookup(t, f.ino), 3);
    inode_table_forget(t, f.ino, 2);
    CHECK_EQ(inode_table_nlookup(t, f.ino), 1);
    CHECK_EQ(inode_table_count(t), 3);
    inode_table_forget(t, f.ino, 1);
    CHECK_EQ(inode_table_nlookup(t, f.ino), 0);
    CHECK_EQ(inode_table_count(t), 2);
    struct inode_info g;
    CHECK_EQ(inode_table_get(t, f.ino, &g), -ENOENT);
    /* Unknown inodes and double forgets are ignored. */
    inode_table_forget(t, f.ino, 1);
    inode_table_forget(t, 123456789, 1);
    CHECK_EQ(inode_table_count(t), 2);

    /* Looked up again: the same number. */
    CHECK_EQ(inode_table_ref_child(t, d.ino, "f", &fa, &g), 0);
    CHECK_EQ(g.ino, f.ino);
    CHECK_EQ(inode_table_nlookup(t, g.ino), 1);
    inode_info_clear(&g);

    /* Forgetting more than the count frees the entry. */
    inode_table_forget(t, f.ino, 50);
    CHECK_EQ(inode_table_count(t), 2);
    inode_table_forget(t, d.ino, 1);
    CHECK_EQ(inode_table_count(t), 1);

    inode_info_clear(&d);
    inode_info_clear(&f);
    inode_table_destroy(t);
}

static void test_type_change(void)
{
    struct inode_table *t;
    CHECK_EQ(inode_table_create(&t), 0);
    struct inode_info f, d, g;
    struct inode_attr fa = file_attr(10, "v");
    CHECK_EQ(inode_table_ref_child(t, INODE_ROOT_ID, "x", &fa, &f), 0);
    /* "x" became a directory in the store: a new inode; the old one lives until forgotten. */
    CHECK_EQ(inode_table_ref_child(t, INODE_ROOT_ID, "x", &dir_attr, &d), 0);
    CHECK(d.ino != f.ino);
    CHECK_STR(d.key, "x/");
    CHECK_EQ(inode_table_count(t), 3);
    CHECK_EQ(inode_table_get(t, f.ino, &g), 0);
    CHECK_STR(g.key, "x");
    inode_info_clear(&g);
    /* The name now finds the directory. */
    CHECK_EQ(inode_table_ref_child(t, INODE_ROOT_ID, "x", &dir_attr, &g), 0);
    CHECK_EQ(g.ino, d.ino);
    CHECK_EQ(inode_table_nlookup(t, d.ino), 2);
    inode_info_clear(&g);
    inode_table_forget(t, f.ino, 1);
    CHECK_EQ(inode_table_count(t), 2);
    CHECK_EQ(inode_table_get(t, d.ino, &g), 0);
    inode_info_clear(&g);
    inode_info_clear(&f);
    inode_info_clear(&d);
    inode_table_destroy(t);
}

/* find_key walks names from the root: files and directories by their keys, the entry a name
 * has now (not one it replaced), nothing for names the kernel was never handed. */
static void test_find_key(void)
{
    struct inode_table *t;
    CHECK_EQ(inode_table_create(&t), 0);
    struct inode_info d, s, f, x, xd;
    struct inode_attr fa = file_attr(10, "v");
    uint64_t ino = 0;
    CHECK_EQ(inode_table_ref_child(t, INODE_ROOT_ID, "d", &dir_attr, &d), 0);
    CHECK_EQ(inode_table_ref_child(t, d.ino, "s", &dir_attr, &s), 0);
    CHECK_EQ(inode_table_ref_child(t, s.ino, "f.bin", &fa, &f), 0);
    CHECK_EQ(inode_table_find_key(t, "", &ino), 0);
    CHECK_EQ(ino, INODE_ROOT_ID);
    CHECK_EQ(inode_table_find_key(t, "d/s/f.bin", &ino), 0);
    CHECK_EQ(ino, f.ino);
    CHECK_EQ(inode_table_find_key(t, "d/s/", &ino), 0);
    CHECK_EQ(ino, s.ino);
    CHECK_EQ(inode_table_find_key(t, "d/", &ino), 0);
    CHECK_EQ(ino, d.ino);
    /* A file's key names no directory and a directory's no file; unknown names, none. */
    CHECK_EQ(inode_table_find_key(t, "d/s", &ino), -ENOENT);
    CHECK_EQ(inode_table_find_key(t, "d/s/f.bin/", &ino), -ENOENT);
    CHECK_EQ(inode_table_find_key(t, "d/s/g.bin", &ino), -ENOENT);
    CHECK_EQ(inode_table_find_key(t, "e/f.bin", &ino), -ENOENT);
    CHECK_EQ(inode_table_find_key(t, "d//s/f.bin", &ino), -ENOENT);
    /* Forgotten: gone. */
    inode_table_forget(t, f.ino, 1);
    CHECK_EQ(inode_table_find_key(t, "d/s/f.bin", &ino), -ENOENT);
    /* A file replaced by a directory of the same name: the key finds what the name has now. */
    CHECK_EQ(inode_table_ref_child(t, INODE_ROOT_ID, "x", &fa, &x), 0);
    CHECK_EQ(inode_table_ref_child(t, INODE_ROOT_ID, "x", &dir_attr, &xd), 0);
    CHECK_EQ(inode_table_find_key(t, "x/", &ino), 0);
    CHECK_EQ(ino, xd.ino);
    CHECK_EQ(inode_table_find_key(t, "x", &ino), -ENOENT);
    inode_info_clear(&d);
    inode_info_clear(&s);
    inode_info_clear(&f);
    inode_info_clear(&x);
    inode_info_clear(&xd);
    inode_table_destroy(t);
}

static void test_errors(void)
{
    struct inode_table *t;
    CHECK_EQ(inode_table_create(&t), 0);
    struct inode_attr fa = file_attr(1, "v");
    struct inode_info f, g;
    char longname[300];
    memset(longname, 'n', sizeof(longname));
    longname[256] = '\0';
    CHECK_EQ(inode_table_ref_child(t, INODE_ROOT_ID, "", &fa, &g), -EINVAL);
    CHECK_EQ(inode_table_ref_child(t, INODE_ROOT_ID, ".", &fa, &g), -EINVAL);
    CHECK_EQ(inode_table_ref_child(t, INODE_ROOT_ID, "..", &fa, &g), -EINVAL);
    CHECK_EQ(inode_table_ref_child(t, INODE_ROOT_ID, "a/b", &fa, &g), -EINVAL);
    CHECK_EQ(inode_table_ref_child(t, INODE_ROOT_ID, longname, &fa, &g), -EINVAL);
    longname[255] = '\0';
    CHECK_EQ(inode_table_ref_child(t, INODE_ROOT_ID, longname, &fa, NULL), 0);
    CHECK_EQ(inode_table_ref_child(t, 987654321, "a", &fa, &g), -ENOENT);
    CHECK_EQ(inode_table_ref_child(t, INODE_ROOT_ID, "file", &fa, &f), 0);
    CHECK_EQ(inode_table_ref_child(t, f.ino, "child", &fa, &g), -ENOENT); /* parent is a file */
    CHECK_EQ(inode_table_get(t, 0, &g), -ENOENT);
    CHECK_EQ(inode_table_count(t), 3);
    inode_info_clear(&f);
    inode_table_destroy(t);
}

static void test_many(void)
{
    /* The debug invariant walk is O(n) per change: too slow for 20000 entries. */
    unsetenv("PAGEFS_CHECK_INODES");
    struct inode_table *t;
    CHECK_EQ(inode_table_create(&t), 0);
    enum { N = 20000 };
    uint64_t *inos = calloc(N, sizeof(*inos));
    CHECK(inos != NULL);
    if (!inos)
        return;
    struct inode_info d;
    CHECK_EQ(inode_table_ref_child(t, INODE_ROOT_ID, "big", &dir_attr, &d), 0);
    char name[32];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof(name), "f%06d", i);
        struct inode_attr fa = file_attr((uint64_t)i, "v");
        struct inode_info f;
        CHECK_EQ(inode_table_ref_child(t, d.ino, name, &fa, &f), 0);
        inos[i] = f.ino;
        inode_info_clear(&f);
    }
    CHECK_EQ(inode_table_count(t), N + 2);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        struct inode_info f;
        snprintf(name, sizeof(name), "big/f%06d", i);
        if (inode_table_get(t, inos[i], &f) != 0) {
            bad++;
            continue;
        }
        if (strcmp(f.key, name) != 0 || f.size != (uint64_t)i)
            bad++;
        inode_info_clear(&f);
    }
    CHECK_EQ(bad, 0);
    /* All numbers distinct. */
    int dup = 0;
    for (int i = 0; i < N; i++)
        for (int j = i + 1; j < N && j < i + 50; j++)
            dup += inos[i] == inos[j];
    CHECK_EQ(dup, 0);
    for (int i = 0; i < N; i += 2)
        inode_table_forget(t, inos[i], 1);
    CHECK_EQ(inode_table_count(t), N / 2 + 2);
    free(inos);
    inode_info_clear(&d);
    inode_table_destroy(t);
    setenv("PAGEFS_CHECK_INODES", "1", 1);
}

struct worker_arg {
    struct inode_table *t;
    uint64_t dir;
    int id;
    int errors;
};

/* Each worker looks up its own and shared names many times and forgets all it looked up. */
static void *worker(void *p)
{
    struct worker_arg *w = p;
    char name[32];
    for (int round = 0; round < 2000; round++) {
        snprintf(name, sizeof(name), "%s%d", round % 2 ? "shared" : "own",
                 round % 2 ? round % 37 : w->id * 100000 + round % 53);
        struct inode_attr fa = file_attr((uint64_t)round, "v");
        struct inode_info f;
        if (inode_table_ref_child(w->t, w->dir, name, &fa, &f) != 0) {
            w->errors++;
            continue;
        }
        char key[64];
        snprintf(key, sizeof(key), "d/%s", name);
        if (strcmp(f.key, key) != 0)
            w->errors++;
        inode_table_forget(w->t, f.ino, 1);
        inode_info_clear(&f);
    }
    return NULL;
}

static void test_threads(void)
{
    struct inode_table *t;
    CHECK_EQ(inode_table_create(&t), 0);
    struct inode_info d;
    CHECK_EQ(inode_table_ref_child(t, INODE_ROOT_ID, "d", &dir_attr, &d), 0);
    enum { T = 4 };
    pthread_t th[T];
    struct worker_arg args[T];
    for (int i = 0; i < T; i++) {
        args[i] = (struct worker_arg){.t = t, .dir = d.ino, .id = i};
        CHECK_EQ(pthread_create(&th[i], NULL, worker, &args[i]), 0);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ(args[i].errors, 0);
    }
    /* Every lookup was forgotten: only the root and "d" remain. */
    CHECK_EQ(inode_table_count(t), 2);
    CHECK_EQ(inode_table_nlookup(t, d.ino), 1);
    inode_info_clear(&d);
    inode_table_destroy(t);
}

int main(void)
{
    setenv("PAGEFS_CHECK_INODES", "1", 1); /* debug builds: walk the tables after changes */
    RUN(test_root);
    RUN(test_children_and_keys);
    RUN(test_forget_and_stable_numbers);
    RUN(test_type_change);
    RUN(test_find_key);
    RUN(test_errors);
    RUN(test_many);
    RUN(test_threads);
    return test_finish();
}
