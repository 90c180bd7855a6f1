/* test_local_backend.c - the file:// backend: listing, stat, ranged reads, versions. */
#include "backends/backend.h"
#include "backends/stack.h"
#include "testlib.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *root;
static struct backend *be;
static char err[256];

static void setup(void)
{
    root = test_mkdtemp("local");
    char path[512], data[5000];
    test_fill_random(data, sizeof(data), 1);
    snprintf(path, sizeof(path), "%s/a.bin", root);
    test_write_file(path, data, sizeof(data));
    snprintf(path, sizeof(path), "%s/dir/b c+%%.txt", root);
    test_write_file(path, "hello", 5);
    snprintf(path, sizeof(path), "%s/dir/sub/deep/x", root);
    test_write_file(path, "", 0);
    snprintf(path, sizeof(path), "%s/empty", root);
    mkdir(path, 0755);
    CHECK_EQ(backend_stack_create(&(struct backend_conf){.source = NULL}, &be, err, sizeof(err)),
             -EINVAL);
    char src[600];
    snprintf(src, sizeof(src), "file://%s", root);
    CHECK_EQ(backend_stack_create(&(struct backend_conf){.source = src}, &be, err, sizeof(err)), 0);
}

static void test_list_root(void)
{
    struct backend_list_page page;
    CHECK_EQ(be->ops->list(be, "", "/", NULL, &page), 0);
    CHECK_EQ(page.count, 3);
    if (page.count == 3) {
        CHECK_STR(page.entries[0].key, "a.bin");
        CHECK_EQ(page.entries[0].size, 5000);
        CHECK(page.entries[0].version != NULL);
        CHECK_STR(page.entries[1].key, "dir/");
        CHECK_EQ(page.entries[1].is_prefix, 1);
        CHECK_STR(page.entries[2].key, "empty/");
    }
    CHECK(page.next_token == NULL);
    backend_list_page_clear(&page);
}

static void test_list_nested_and_flat(void)
{
    struct backend_list_page page;
    CHECK_EQ(be->ops->list(be, "dir/", "/", NULL, &page), 0);
    CHECK_EQ(page.count, 2);
    if (page.count == 2) {
        CHECK_STR(page.entries[0].key, "dir/b c+%.txt");
        CHECK_STR(page.entries[1].key, "dir/sub/");
    }
    backend_list_page_clear(&page);
    CHECK_EQ(be->ops->list(be, "dir/", NULL, NULL, &page), 0);
    CHECK_EQ(page.count, 2);
    if (page.count == 2)
        CHECK_STR(page.entries[1].key, "dir/sub/deep/x");
    backend_list_page_clear(&page);
    /* A missing prefix lists as empty, as on S3. */
    CHECK_EQ(be->ops->list(be, "nope/", "/", NULL, &page), 0);
    CHECK_EQ(page.count, 0);
    backend_list_page_clear(&page);
    CHECK_EQ(be->ops->list(be, "../", "/", NULL, &page), -EINVAL);
    CHECK_EQ(be->ops->list(be, "dir", "/", NULL, &page), -EINVAL);
    CHECK_EQ(be->ops->list(be, "", "|", NULL, &page), -EINVAL);
}

static void test_stat_and_read(void)
{
    struct backend_stat st;
    char data[5000], buf[6000];
    test_fill_random(data, sizeof(data), 1);
    CHECK_EQ(be->ops->stat(be, "a.bin", &st), 0);
    CHECK_EQ(st.size, 5000);
    CHECK_EQ(be->ops->read_range(be, "a.bin", st.version, 100, 1000, buf), 1000);
    CHECK(memcmp(buf, data + 100, 1000) == 0);
    /* Short at the end, zero past it. */
    CHECK_EQ(be->ops->read_range(be, "a.bin", st.version, 4000, 2000, buf), 1000);
    CHECK(memcmp(buf, data + 4000, 1000) == 0);
    CHECK_EQ(be->ops->read_range(be, "a.bin", NULL, 5000, 10, buf), 0);
    CHECK_EQ(be->ops->read_range(be, "a.bin", "0-0-0", 0, 10, buf), -ESTALE);
    CHECK_EQ(be->ops->read_range(be, "missing", NULL, 0, 10, buf), -ENOENT);
    CHECK_EQ(be->ops->read_range(be, "../etc/passwd", NULL, 0, 10, buf), -EINVAL);
    CHECK_EQ(be->ops->read_range(be, "dir/../a.bin", NULL, 0, 10, buf), -EINVAL);
    struct backend_stat dirst;
    CHECK_EQ(be->ops->stat(be, "dir", &dirst), -ENOENT);

    /* Rewriting the file makes the old version stale. */
    char path[512];
    snprintf(path, sizeof(path), "%s/a.bin", root);
    usleep(10000);
    test_write_file(path, "new", 3);
    CHECK_EQ(be->ops->read_range(be, "a.bin", st.version, 0, 3, buf), -ESTALE);
    backend_stat_clear(&st);
    CHECK_EQ(be->ops->stat(be, "a.bin", &st), 0);
    CHECK_EQ(be->ops->read_range(be, "a.bin", st.version, 0, 10, buf), 3);
    backend_stat_clear(&st);
}

static void test_check_and_counters(void)
{
    struct backend_counters c;
    CHECK_EQ(be->ops->check(be), 0);
    CHECK_EQ(be->ops->counters(be, &c), 0);
    CHECK(c.read_calls >= 5);
    CHECK_EQ(c.check_calls, 1);

    struct backend *bad;
    CHECK_EQ(backend_stack_create(&(struct backend_conf){.source = "file:///nonexistent-pagefs"},
                                  &bad, err, sizeof(err)),
             0);
    CHECK_EQ(bad->ops->check(bad), -ENOENT);
    backend_destroy(bad);
    CHECK_EQ(backend_stack_create(&(struct backend_conf){.source = "file://relative"}, &bad, err,
                                  sizeof(err)),
             -EINVAL);
    CHECK_EQ(backend_stack_create(&(struct backend_conf){.source = "ftp://x"}, &bad, err,
                                  sizeof(err)),
             -EINVAL);
    CHECK(strstr(err, "unsupported") != NULL);
}

/* file://localhost/DIR is the same source as file:///DIR (the command line always accepted
 * it; backend_stack_create() used to take "localhost/DIR" for a relative path and refuse it). */
static void test_localhost_source(void)
{
    char src[600];
    snprintf(src, sizeof(src), "file://localhost%s/", root);
    struct backend *lb = NULL;
    CHECK_EQ(backend_stack_create(&(struct backend_conf){.source = src}, &lb, err, sizeof(err)), 0);
    if (!lb)
        return;
    CHECK_EQ(lb->ops->check(lb), 0);
    struct backend_stat st, want;
    CHECK_EQ(lb->ops->stat(lb, "a.bin", &st), 0);
    CHECK_EQ(be->ops->stat(be, "a.bin", &want), 0);
    CHECK_EQ(st.size, want.size);
    CHECK_STR(st.version, want.version);
    backend_stat_clear(&st);
    backend_stat_clear(&want);
    backend_destroy(lb);
}

int main(void)
{
    setup();
    RUN(test_list_root);
    RUN(test_list_nested_and_flat);
    RUN(test_stat_and_read);
    RUN(test_check_and_counters);
    RUN(test_localhost_source);
    backend_destroy(be);
    test_rm_rf(root);
    free(root);
    return test_finish();
}
