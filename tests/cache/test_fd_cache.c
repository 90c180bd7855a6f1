/*
 * test_fd_cache.c - unit tests of the page-file descriptor cache (cache/fd_cache.c): borrow and
 * give back, offers kept or handed back, room made by the clock, forgetting a page or a file
 * (at once, or when a borrower gives it back), every descriptor closed exactly once.
 */
#include "cache/fd_cache.h"
#include "testlib.h"

#include <fcntl.h>
#include <unistd.h>

static int new_fd(void)
{
    return open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static int is_open(int fd)
{
    return fd >= 0 && fcntl(fd, F_GETFD) >= 0;
}

static void test_borrow_and_offer(void)
{
    struct fd_cache *c;
    struct fd_cache_closes cl = {0};
    CHECK_EQ(fd_cache_create(4, 0, &c), 0);
    CHECK_EQ(fd_cache_get(c, 1, 0), -1); /* nothing yet */
    int a = new_fd();
    fd_cache_put(c, 1, 0, a, &cl); /* offered: kept */
    CHECK_EQ(cl.n, 0);
    CHECK_EQ(fd_cache_get(c, 1, 0), a);
    CHECK_EQ(fd_cache_get(c, 1, 0), a); /* two borrowers */
    /* A second descriptor offered for the same page is handed back. */
    int b = new_fd();
    fd_cache_put(c, 1, 0, b, &cl);
    CHECK_EQ(cl.n, 1);
    CHECK_EQ(cl.fd[0], b);
    fd_cache_closes_run(&cl);
    CHECK(!is_open(b));
    fd_cache_put(c, 1, 0, a, &cl);
    fd_cache_put(c, 1, 0, a, &cl);
    CHECK_EQ(cl.n, 0);
    CHECK(is_open(a));
    struct fd_cache_stats s;
    fd_cache_get_stats(c, &s);
    CHECK_EQ(s.open, 1);
    CHECK_EQ(s.hits, 2);
    CHECK_EQ(s.misses, 1);
    fd_cache_put(c, 1, 0, -1, &cl); /* nothing */
    fd_cache_destroy(c);
    CHECK(!is_open(a));
}

static void test_room_by_clock(void)
{
    struct fd_cache *c;
    struct fd_cache_closes cl = {0};
    CHECK_EQ(fd_cache_create(3, 0, &c), 0);
    int fd[3];
    for (int i = 0; i < 3; i++) {
        fd[i] = new_fd();
        fd_cache_put(c, 7, (uint64_t)i, fd[i], &cl);
    }
    CHECK_EQ(cl.n, 0);
    /* Page 0 borrowed, page 1 used again: a fourth page takes page 2's slot. */
    CHECK_EQ(fd_cache_get(c, 7, 0), fd[0]);
    CHECK_EQ(fd_cache_get(c, 7, 1), fd[1]);
    fd_cache_put(c, 7, 1, fd[1], &cl);
    int d = new_fd();
    fd_cache_put(c, 7, 3, d, &cl);
    /* Every entry had been used since the hand last passed: one full sweep clears the marks,
     * then the first one nobody borrows goes (page 1 or 2, never the borrowed page 0). */
    CHECK_EQ(cl.n, 1);
    CHECK(cl.fd[0] == fd[1] || cl.fd[0] == fd[2]);
    int gone = cl.fd[0];
    fd_cache_closes_run(&cl);
    CHECK(!is_open(gone));
    CHECK(is_open(fd[0]));
    CHECK_EQ(fd_cache_get(c, 7, 3), d);
    fd_cache_put(c, 7, 3, d, &cl);
    /* Every entry borrowed: an offer is handed back. */
    for (uint64_t i = 0; i < 4; i++) {
        int x = fd_cache_get(c, 7, i);
        (void)x;
    }
    int e = new_fd();
    fd_cache_put(c, 7, 9, e, &cl);
    CHECK_EQ(cl.n, 1);
    CHECK_EQ(cl.fd[0], e);
    fd_cache_closes_run(&cl);
    struct fd_cache_stats s;
    fd_cache_get_stats(c, &s);
    CHECK_EQ(s.evicted, 1);
    CHECK_EQ(s.open, 3);
    fd_cache_destroy(c);
    CHECK(!is_open(fd[0]));
    CHECK(!is_open(d));
}

static void test_forget(void)
{
    struct fd_cache *c;
    struct fd_cache_closes cl = {0};
    CHECK_EQ(fd_cache_create(16, 0, &c), 0);
    int a = new_fd(), b = new_fd();
    fd_cache_put(c, 1, 0, a, &cl);
    fd_cache_put(c, 1, 1, b, &cl);
    /* Not borrowed: handed back at once. */
    fd_cache_forget(c, 1, 0, &cl);
    CHECK_EQ(cl.n, 1);
    CHECK_EQ(cl.fd[0], a);
    fd_cache_closes_run(&cl);
    CHECK_EQ(fd_cache_get(c, 1, 0), -1);
    /* Borrowed: it goes when given back; a new file of the page meanwhile is another entry. */
    CHECK_EQ(fd_cache_get(c, 1, 1), b);
    fd_cache_forget(c, 1, 1, &cl);
    CHECK_EQ(cl.n, 0);
    CHECK(is_open(b));
    CHECK_EQ(fd_cache_get(c, 1, 1), -1); /* forgotten: not lent again */
    int b2 = new_fd();
    fd_cache_put(c, 1, 1, b2, &cl);
    CHECK_EQ(cl.n, 0);
    fd_cache_put(c, 1, 1, b, &cl); /* the borrower gives the old one back */
    CHECK_EQ(cl.n, 1);
    CHECK_EQ(cl.fd[0], b);
    fd_cache_closes_run(&cl);
    CHECK_EQ(fd_cache_get(c, 1, 1), b2);
    fd_cache_put(c, 1, 1, b2, &cl);
    fd_cache_forget(c, 5, 5, &cl); /* unknown: nothing */
    CHECK_EQ(cl.n, 0);
    /* A whole file: its 12 pages go, more than one closes struct holds (the rest at once); the
     * other file's page stays. */
    int f[12];
    for (int i = 0; i < 12; i++) {
        f[i] = new_fd();
        fd_cache_put(c, 2, (uint64_t)i, f[i], &cl);
    }
    CHECK_EQ(fd_cache_get(c, 2, 3), f[3]); /* one of them borrowed */
    fd_cache_forget_file(c, 2, &cl);
    CHECK_EQ(cl.n, FD_CACHE_CLOSES);
    fd_cache_closes_run(&cl);
    for (int i = 0; i < 12; i++)
        CHECK(i == 3 ? is_open(f[i]) : !is_open(f[i]));
    fd_cache_put(c, 2, 3, f[3], &cl);
    CHECK_EQ(cl.n, 1);
    fd_cache_closes_run(&cl);
    CHECK(!is_open(f[3]));
    CHECK_EQ(fd_cache_get(c, 1, 1), b2);
    fd_cache_put(c, 1, 1, b2, &cl);
    struct fd_cache_stats s;
    fd_cache_get_stats(c, &s);
    CHECK_EQ(s.open, 1);
    CHECK_EQ(s.forgot, 14);
    fd_cache_destroy(c);
    CHECK(!is_open(b2));
}

static void test_no_room(void)
{
    /* A cache of 0 keeps nothing: every offer comes back. */
    struct fd_cache *c;
    struct fd_cache_closes cl = {0};
    CHECK_EQ(fd_cache_create(0, 0, &c), 0);
    int a = new_fd();
    fd_cache_put(c, 1, 0, a, &cl);
    CHECK_EQ(cl.n, 1);
    fd_cache_closes_run(&cl);
    CHECK(!is_open(a));
    CHECK_EQ(fd_cache_get(c, 1, 0), -1);
    fd_cache_forget_file(c, 1, &cl);
    fd_cache_destroy(c);
    fd_cache_destroy(NULL);
}

static void test_floor(void)
{
    /* Kept descriptors are moved up to the floor; the one offered comes back to close. */
    struct fd_cache *c;
    struct fd_cache_closes cl = {0};
    CHECK_EQ(fd_cache_create(4, 200, &c), 0);
    int a = new_fd();
    CHECK(a < 200);
    fd_cache_put(c, 1, 0, a, &cl);
    CHECK_EQ(cl.n, 1);
    CHECK_EQ(cl.fd[0], a);
    fd_cache_closes_run(&cl);
    CHECK(!is_open(a));
    int kept = fd_cache_get(c, 1, 0);
    CHECK(kept >= 200);
    CHECK(is_open(kept));
    fd_cache_put(c, 1, 0, kept, &cl);
    CHECK_EQ(cl.n, 0);
    fd_cache_destroy(c);
    CHECK(!is_open(kept));
}

int main(void)
{
    RUN(test_borrow_and_offer);
    RUN(test_room_by_clock);
    RUN(test_forget);
    RUN(test_no_room);
    RUN(test_floor);
    return test_finish();
}
