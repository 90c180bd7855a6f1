/*
 * fuzz_options.c - libFuzzer target for the command-line parser (fuse/options.c).
 *
 * Each input is parsed twice:
 *   1. split on '\n' into argv (argv[0] = "pagefs"; at most MAX_ARGS words), the way a shell
 *      would hand over arbitrary words: subcommand, flags, -o lists, positionals;
 *   2. as one -o list after a valid SOURCE and MOUNTPOINT, so the mutator spends its effort on
 *      option names, values, sizes and the "\," escapes rather than on finding "-o".
 * Invariants: the result is 0, -EINVAL (with a non-empty one-line message) or -ENOMEM; a
 * successful mount parse has its strings set, a power-of-two page size in range, every value
 * within its documented bounds, and a libfuse option list (and the list of options as given)
 * whose escapes are well formed;
 * pagefs_options_clear() frees everything (LeakSanitizer checks) and zeroes the struct.
 * Seeds: tests/fuzz/corpus/fuzz_options/ (one argv word per line).
 */
#include "fuse/options.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ARGS 64
#define MAX_INPUT (64 * 1024)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Every '\' in the libfuse list escapes a ',' or a '\'; no item is empty. */
static void check_fuse_opts(const char *s)
{
    size_t item_len = 0;
    for (const char *p = s; *p; p++) {
        if (*p == '\\') {
            if (p[1] != ',' && p[1] != '\\')
                abort();
            p++;
            item_len++;
        } else if (*p == ',') {
            if (item_len == 0)
                abort();
            item_len = 0;
        } else {
            item_len++;
        }
    }
    if (*s && item_len == 0)
        abort();
}

static void check_result(int ret, const struct pagefs_options *o, const char *err, int one_line)
{
    if (ret != 0 && ret != -EINVAL && ret != -ENOMEM)
        abort();
    if (ret == -EINVAL && (!err[0] || (one_line && strchr(err, '\n'))))
        abort();
    if (ret != 0 || o->action != PAGEFS_ACTION_MOUNT)
        return;
    if (!o->source || !o->source[0] || !o->mountpoint || !o->mountpoint[0] || !o->cache_dir ||
        !o->cache_dir[0] || !o->fuse_opts || !o->given)
        abort();
    if (o->page_size < PAGEFS_MIN_PAGE_SIZE || o->page_size > PAGEFS_MAX_PAGE_SIZE ||
        (o->page_size & (o->page_size - 1)) != 0)
        abort();
    if (o->cache_size < o->page_size || o->meta_ttl > PAGEFS_MAX_META_TTL || o->retries < 0 ||
        o->retries > PAGEFS_MAX_RETRIES || o->timeout < 1 || o->timeout > PAGEFS_MAX_TIMEOUT ||
        o->stall_timeout < 1 || o->stall_timeout > PAGEFS_MAX_TIMEOUT || o->fail_fast < 0 ||
        o->fail_fast > PAGEFS_MAX_TIMEOUT || o->compress_level < 0 || o->compress_level > 19 ||
        o->dir_prefetch > PAGEFS_MAX_DIR_PREFETCH || (o->umask & ~0777u) != 0 ||
        o->path_style < -1 || o->path_style > 1)
        abort();
    if (o->log_level != PAGEFS_LOG_ERROR && o->log_level != PAGEFS_LOG_WARNING &&
        o->log_level != PAGEFS_LOG_INFO && o->log_level != PAGEFS_LOG_DEBUG)
        abort();
    if (o->endpoint && strncmp(o->endpoint, "http://", 7) && strncmp(o->endpoint, "https://", 8))
        abort();
    check_fuse_opts(o->fuse_opts);
    check_fuse_opts(o->given); /* escaped as the libfuse list */
}

static void parse_and_check(int argc, char *const argv[], const struct pagefs_env *env,
                            int one_line)
{
    struct pagefs_options o;
    char err[512];
    int ret;

    ret = pagefs_options_parse(argc, argv, env, &o, err, sizeof(err));
    check_result(ret, &o, err, one_line);
    pagefs_options_clear(&o);
    if (o.source || o.mountpoint || o.cache_dir || o.fuse_opts || o.endpoint || o.rest || o.given)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const struct pagefs_env env_user = {.euid = 1000, .home = "/home/u", .xdg_cache_home = NULL};
    const struct pagefs_env env_root = {.euid = 0, .home = "/root", .xdg_cache_home = "/x"};
    char *argv[MAX_ARGS + 1];
    char *buf;
    int argc = 0;

    if (size > MAX_INPUT)
        return 0;
    buf = malloc(size + 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';

    /* 2. The whole input as one -o list (it may hold '\n' and NUL: a C string ends at NUL). */
    char *list_argv[] = {"pagefs", "mount", "s3://bucket/prefix", "/mnt/x", "-o", buf, NULL};
    parse_and_check(6, list_argv, &env_user, 0);

    /* 1. One word per line. */
    argv[argc++] = "pagefs";
    for (char *p = buf; argc < MAX_ARGS;) {
        char *nl = memchr(p, '\n', (size_t)(buf + size - p));
        argv[argc++] = p;
        if (!nl)
            break;
        *nl = '\0';
        p = nl + 1;
    }
    argv[argc] = NULL;
    parse_and_check(argc, argv, (size & 1) ? &env_root : &env_user, 1);

    /* A size and a duration on their own: 0, -EINVAL or -ERANGE, whatever the text, and the
     * value untouched on an error. */
    uint64_t v = 7;
    int ret = pagefs_parse_size(argv[argc > 1 ? 1 : 0], &v);
    if ((ret != 0 && ret != -EINVAL && ret != -ERANGE) || (ret != 0 && v != 7))
        abort();
    v = 7;
    ret = pagefs_parse_duration(argv[argc > 1 ? 1 : 0], &v);
    if ((ret != 0 && ret != -EINVAL && ret != -ERANGE) || (ret != 0 && v != 7))
        abort();
    free(buf);
    return 0;
}
