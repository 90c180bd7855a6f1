/* test_backend_layers.c - the stats, retry and fault layers stacked over the local backend. */
#include "backends/backend.h"
#include "testlib.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static char *root;
static char err[256];

static struct backend *make_local(void)
{
    struct backend *be = NULL;
    CHECK_EQ(local_backend_create(root, &be, err, sizeof(err)), 0);
    return be;
}

static void test_fault_then_retry(void)
{
    struct backend *fault, *retry, *stats;
    char buf[16];
    CHECK_EQ(fault_backend_create(make_local(), 0, 0, &fault), 0);
    CHECK_EQ(retry_backend_create(fault, 3, &retry), 0);
    CHECK_EQ(stats_backend_create(retry, &stats), 0);
    CHECK_EQ(stats->caps, BACKEND_CAP_VERSIONED);

    CHECK_EQ(stats->ops->read_range(stats, "f", NULL, 0, 4, buf), 4);
    /* Two calls through, then EIO forever: the retry layer gives up after 1 + 3 attempts. */
    fault_backend_set(fault, 2, EIO, 0);
    CHECK_EQ(stats->ops->read_range(stats, "f", NULL, 0, 4, buf), 4);
    CHECK_EQ(stats->ops->read_range(stats, "f", NULL, 0, 4, buf), 4);
    CHECK_EQ(stats->ops->read_range(stats, "f", NULL, 0, 4, buf), -EIO);
    /* Definite errors are not retried. */
    fault_backend_set(fault, 0, ENOENT, 0);
    CHECK_EQ(stats->ops->check(stats), -ENOENT);
    /* A transient failure followed by success is invisible to the caller. */
    fault_backend_set(fault, 0, 0, 0);
    CHECK_EQ(stats->ops->check(stats), 0);

    struct backend_counters c;
    CHECK_EQ(stats->ops->counters(stats, &c), 0);
    CHECK_EQ(c.read_calls, 4);
    CHECK_EQ(c.check_calls, 2);
    CHECK_EQ(c.errors, 2);
    CHECK_EQ(c.bytes_read, 12);
    backend_destroy(stats);
}

static void test_counters_without_stats(void)
{
    struct backend *retry;
    struct backend_counters c;
    CHECK_EQ(retry_backend_create(make_local(), 1, &retry), 0);
    CHECK_EQ(retry->ops->counters(retry, &c), -ENOTSUP);
    backend_destroy(retry);
}

static void test_list_page_growth(void)
{
    struct backend_list_page page = {0};
    char key[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(key, sizeof(key), "k%04d", i);
        CHECK_EQ(backend_list_page_add(&page, key, i & 1, (uint64_t)i, i, i & 1 ? NULL : "v"), 0);
    }
    CHECK_EQ(page.count, 1000);
    CHECK_STR(page.entries[999].key, "k0999");
    CHECK_EQ(page.entries[998].size, 998);
    CHECK_STR(page.entries[998].version, "v");
    backend_list_page_clear(&page);
    CHECK_EQ(page.count, 0);
}

int main(void)
{
    root = test_mkdtemp("layers");
    char path[512];
    snprintf(path, sizeof(path), "%s/f", root);
    test_write_file(path, "data", 4);
    RUN(test_fault_then_retry);
    RUN(test_counters_without_stats);
    RUN(test_list_page_growth);
    test_rm_rf(root);
    free(root);
    return test_finish();
}
