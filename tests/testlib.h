/*
 * testlib.h - the small harness shared by the C tests.
 *
 * A test program calls its test functions through RUN(fn); CHECK* macros record a failure
 * with file and line and keep going; test_finish() prints "N passed, N failed" and returns
 * the exit status for main(). Helpers make throwaway directories and files.
 */
#ifndef PAGEFS_TESTLIB_H
#define PAGEFS_TESTLIB_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

extern int test_failures;      /* CHECK failures in the current test */

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);       \
            test_failures++;                                                               \
        }                                                                                  \
    } while (0)

#define CHECK_EQ(a, b)                                                                     \
    do {                                                                                   \
        long long a_ = (long long)(a), b_ = (long long)(b);                                \
        if (a_ != b_) {                                                                    \
            fprintf(stderr, "%s:%d: CHECK_EQ failed: %s == %lld, %s == %lld\n", __FILE__,  \
                    __LINE__, #a, a_, #b, b_);                                             \
            test_failures++;                                                               \
        }                                                                                  \
    } while (0)

#define CHECK_STR(a, b)                                                                    \
    do {                                                                                   \
        const char *a_ = (a), *b_ = (b);                                                   \
        if (!a_ || !b_ || strcmp(a_, b_) != 0) {                                           \
            fprintf(stderr, "%s:%d: CHECK_STR failed: %s == \"%s\", expected \"%s\"\n",    \
                    __FILE__, __LINE__, #a, a_ ? a_ : "(null)", b_ ? b_ : "(null)");       \
            test_failures++;                                                               \
        }                                                                                  \
    } while (0)

#define RUN(fn) test_run(#fn, fn)

void test_run(const char *name, void (*fn)(void));
int test_finish(void);

/* A fresh empty directory under $PAGEFS_TEST_TMP (or /tmp); caller frees the string. */
char *test_mkdtemp(const char *tag);
void test_rm_rf(const char *path);
/* Writes len bytes to path (creating parent directories); returns 0 or -errno. */
int test_write_file(const char *path, const void *data, size_t len);
/* The 4 KiB pages of [off, off + len) of the file at path that are in the kernel's page
 * cache (mincore over a mapping of it); len 0: to the end of the file. -1 if it cannot be
 * mapped (missing, empty). */
long test_resident_pages(const char *path, size_t off, size_t len);
/* Deterministic pseudo-random bytes (xorshift) for test data. */
void test_fill_random(void *buf, size_t len, uint64_t seed);

#endif
