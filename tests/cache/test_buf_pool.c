/*
 * test_buf_pool.c - unit tests of the fetch buffer pool (cache/buf_pool.c): buffers are
 * usable whole, a released buffer is reused for the same size, what is kept never takes the
 * mapped total past the cap, a new size unmaps free buffers of other sizes to fit, sizes
 * beyond the class table are not kept, and many threads at once keep the counts exact.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "cache/buf_pool.h"
#include "testlib.h"

#define G 4096u /* mapping grain */

static struct buf_pool_stats stats(struct buf_pool *p)
{
    struct buf_pool_stats s;
    buf_pool_get_stats(p, &s);
    return s;
}

static void test_reuse(void)
{
    struct buf_pool *p;
    CHECK_EQ(buf_pool_create(0, &p), -EINVAL);
    CHECK_EQ(buf_pool_create(1u << 20, &p), 0);
    CHECK(buf_pool_get(p, 0) == NULL);
    unsigned char *a = buf_pool_get(p, 5000);
    CHECK(a != NULL);
    CHECK_EQ((uintptr_t)a % 64, 0);
    memset(a, 0xa5, 5000); /* all of it is ours */
    struct buf_pool_stats s = stats(p);
    CHECK_EQ(s.in_use, 2 * G); /* 5000 + header, rounded up */
    CHECK_EQ(s.maps, 1);
    buf_pool_put(p, a);
    s = stats(p);
    CHECK_EQ(s.in_use, 0);
    CHECK_EQ(s.free, 2 * G);
    unsigned char *b = buf_pool_get(p, 6000); /* the same length: reused */
    CHECK(b == a);
    s = stats(p);
    CHECK_EQ(s.reuses, 1);
    CHECK_EQ(s.maps, 1);
    CHECK_EQ(s.free, 0);
    buf_pool_put(p, b);
    buf_pool_put(p, NULL);
    buf_pool_destroy(p);
}

static void test_cap(void)
{
    struct buf_pool *p;
    CHECK_EQ(buf_pool_create(3 * 2 * G, &p), 0); /* three 2-grain buffers */
    void *b[4];
    for (int i = 0; i < 4; i++) {
        b[i] = buf_pool_get(p, 5000);
        CHECK(b[i] != NULL);
    }
    CHECK_EQ(stats(p).in_use, 8 * G); /* in use may exceed the cap */
    for (int i = 0; i < 4; i++)
        buf_pool_put(p, b[i]);
    struct buf_pool_stats s = stats(p);
    CHECK_EQ(s.in_use, 0);
    CHECK_EQ(s.free, 6 * G); /* the first one back did not fit: unmapped */
    /* Another size: free buffers of the other size go until the new one fits. */
    void *big = buf_pool_get(p, 4 * G);
    CHECK(big != NULL);
    memset(big, 1, 4 * G);
    s = stats(p);
    CHECK_EQ(s.in_use, 5 * G);
    CHECK_EQ(s.free, 0); /* 5 + 2 > 6: every small one went */
    CHECK(s.in_use + s.free <= 6 * G);
    buf_pool_put(p, big);
    s = stats(p);
    CHECK_EQ(s.free, 5 * G);
    CHECK_EQ(buf_pool_get(p, 4 * G), big);
    buf_pool_put(p, big);
    buf_pool_destroy(p);
}

static void test_class_table_full(void)
{
    struct buf_pool *p;
    CHECK_EQ(buf_pool_create(1u << 30, &p), 0);
    void *b[17];
    uint64_t kept = 0;
    for (int i = 0; i < 17; i++) {
        b[i] = buf_pool_get(p, (size_t)(i + 1) * G); /* 17 lengths */
        CHECK(b[i] != NULL);
        if (i < 16)
            kept += (uint64_t)(i + 2) * G;
    }
    for (int i = 0; i < 17; i++)
        buf_pool_put(p, b[i]);
    struct buf_pool_stats s = stats(p);
    CHECK_EQ(s.in_use, 0);
    CHECK_EQ(s.free, kept); /* the 17th length had no class left */
    buf_pool_destroy(p);
}

struct worker {
    struct buf_pool *p;
    int id;
    int ok;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    w->ok = 1;
    for (int i = 0; i < 2000; i++) {
        size_t size = (size_t)((i + w->id) % 3 + 1) * 3 * G;
        unsigned char *b = buf_pool_get(w->p, size);
        if (!b) {
            w->ok = 0;
            break;
        }
        memset(b, w->id, size);
        for (size_t k = 0; k < size; k += G)
            if (b[k] != (unsigned char)w->id)
                w->ok = 0;
        buf_pool_put(w->p, b);
    }
    return NULL;
}

/* 8 threads, 3 lengths (4, 7 and 10 grains), under a tight cap and a roomy one. */
static void test_threads(void)
{
    for (int roomy = 0; roomy < 2; roomy++) {
        struct buf_pool *p;
        uint64_t cap = roomy ? 1u << 30 : 40 * G;
        CHECK_EQ(buf_pool_create(cap, &p), 0);
        pthread_t th[8];
        struct worker w[8];
        for (int i = 0; i < 8; i++) {
            w[i] = (struct worker){.p = p, .id = i + 1};
            pthread_create(&th[i], NULL, worker_main, &w[i]);
        }
        for (int i = 0; i < 8; i++) {
            pthread_join(th[i], NULL);
            CHECK(w[i].ok);
        }
        struct buf_pool_stats s = stats(p);
        CHECK_EQ(s.in_use, 0);
        CHECK(s.free <= cap);
        CHECK_EQ(s.maps + s.reuses, 8 * 2000);
        if (roomy)
            CHECK(s.maps <= 8 * 3); /* at most what was in use at once, of each length */
        buf_pool_destroy(p);
    }
}

int main(void)
{
    RUN(test_reuse);
    RUN(test_cap);
    RUN(test_class_table_full);
    RUN(test_threads);
    return test_finish();
}
