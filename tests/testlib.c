/* testlib.c - see testlib.h. */
#include "testlib.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int test_failures;
static int passed, failed;

void test_run(const char *name, void (*fn)(void))
{
    test_failures = 0;
    fn();
    if (test_failures) {
        failed++;
        fprintf(stderr, "FAIL %s (%d checks)\n", name, test_failures);
    } else {
        passed++;
        fprintf(stderr, "ok   %s\n", name);
    }
}

int test_finish(void)
{
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

char *test_mkdtemp(const char *tag)
{
    const char *base = getenv("PAGEFS_TEST_TMP");
    if (!base || !*base)
        base = "/tmp";
    mkdir(base, 0755); /* others must reach the mount points beneath (allow_other tests) */
    size_t n = strlen(base) + strlen(tag) + 32;
    char *path = malloc(n);
    if (!path)
        return NULL;
    snprintf(path, n, "%s/%s-XXXXXX", base, tag);
    if (!mkdtemp(path)) {
        free(path);
        return NULL;
    }
    return path;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void test_rm_rf(const char *path)
{
    if (path)
        nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void mkdir_parents(const char *path)
{
    char *copy = strdup(path);
    if (!copy)
        return;
    for (char *p = copy + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(copy, 0755);
            *p = '/';
        }
    }
    free(copy);
}

int test_write_file(const char *path, const void *data, size_t len)
{
    mkdir_parents(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return -errno;
    const char *p = data;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            int e = errno;
            close(fd);
            return -e;
        }
        p += n;
        len -= (size_t)n;
    }
    close(fd);
    return 0;
}

long test_resident_pages(const char *path, size_t off, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || st.st_size == 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    size_t size = (size_t)st.st_size;
    void *m = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return -1;
    size_t n = (size + 4095) / 4096;
    size_t end = len ? (off + len + 4095) / 4096 : n;
    unsigned char *vec = calloc(n, 1);
    long count = -1;
    if (vec && mincore(m, size, vec) == 0) {
        count = 0;
        for (size_t i = off / 4096; i < end && i < n; i++)
            count += vec[i] & 1;
    }
    free(vec);
    munmap(m, size);
    return count;
}

void test_fill_random(void *buf, size_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    unsigned char *p = buf;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (unsigned char)(x >> 24);
    }
}
