/*
 * replay_main.c - a main() for fuzz targets in builds without libFuzzer (gcc): runs
 * LLVMFuzzerTestOneInput once on every file named on the command line, or in a directory
 * named there (the checked-in seed corpus), so each target's corpus is a regression test in
 * every build. A target reports a broken invariant by abort(), which fails the test.
 *
 * Design: each input is read whole into a malloc'd buffer of exactly its size (no trailing
 * NUL, as libFuzzer hands it), so an over-read is visible to ASan builds. Exit status 0 when
 * every input ran, 1 when a file could not be read or no input was found.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Runs the target on one file. Returns 0, or -errno if the file could not be read. */
static int replay_file(const char *path)
{
    struct stat st;
    uint8_t *buf = NULL;
    FILE *f;
    int ret = 0;

    f = fopen(path, "rb");
    if (!f)
        return -errno;
    if (fstat(fileno(f), &st) < 0 || st.st_size < 0) {
        ret = -errno;
        goto out_close;
    }
    /* malloc(0) may return NULL: keep one byte, hand over size 0. */
    buf = malloc((size_t)st.st_size ? (size_t)st.st_size : 1);
    if (!buf) {
        ret = -ENOMEM;
        goto out_close;
    }
    if (st.st_size && fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
        ret = -EIO;
        goto out_free;
    }
    LLVMFuzzerTestOneInput(buf, (size_t)st.st_size);
out_free:
    free(buf);
out_close:
    fclose(f);
    return ret;
}

/* Runs every regular file of directory `dir`. Returns the number run, or -errno. */
static int replay_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;

    if (!d)
        return -errno;
    while ((de = readdir(d))) {
        char path[4096];
        struct stat st;
        if (de->d_name[0] == '.')
            continue;
        if (snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= (int)sizeof(path))
            continue;
        if (stat(path, &st) < 0 || !S_ISREG(st.st_mode))
            continue;
        int ret = replay_file(path);
        if (ret < 0) {
            fprintf(stderr, "replay: %s: %s\n", path, strerror(-ret));
            closedir(d);
            return ret;
        }
        n++;
    }
    closedir(d);
    return n;
}

int main(int argc, char **argv)
{
    int total = 0;

    for (int i = 1; i < argc; i++) {
        struct stat st;
        int ret;
        if (stat(argv[i], &st) < 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        ret = S_ISDIR(st.st_mode) ? replay_dir(argv[i]) : replay_file(argv[i]);
        if (ret < 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(-ret));
            return 1;
        }
        total += S_ISDIR(st.st_mode) ? ret : 1;
    }
    printf("replayed %d inputs\n", total);
    return total > 0 ? 0 : 1;
}
