/*
 * mkcache.c - test helper for test_pagefs_cache_cli.py: fills a cache directory the way the
 * daemon does, through the real page cache and metadata cache over the local backend.
 *
 *   mkcache SRC_DIR CACHE_DIR PAGE_SIZE DIR... -- KEY...
 * lists each DIR ("" for the root, else ending in '/') through the metadata cache, then reads
 * every KEY completely through the page cache. Exit 0 on success, 1 with a message otherwise.
 */
#include "backends/backend.h"
#include "backends/local.h"
#include "cache/meta_cache.h"
#include "cache/page_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int read_key(struct backend *be, struct page_cache *pc, const char *key)
{
    struct backend_stat st;
    struct pc_file *f = NULL;
    int rc = be->ops->stat(be, key, &st);
    if (rc < 0)
        return rc;
    rc = page_cache_open(pc, key, st.version, st.size, st.mtime_ns, &f, NULL);
    if (rc < 0)
        goto out_stat;
    char *buf = malloc(1 << 20);
    if (!buf) {
        rc = -12;
        goto out_unref;
    }
    for (uint64_t off = 0; off < st.size;) {
        ssize_t n = page_cache_read(pc, f, off, 1 << 20, buf);
        if (n <= 0) {
            rc = n < 0 ? (int)n : -5;
            break;
        }
        off += (uint64_t)n;
    }
    free(buf);
out_unref:
    pc_file_unref(f);
out_stat:
    backend_stat_clear(&st);
    return rc;
}

int main(int argc, char **argv)
{
    char err[256];
    struct backend *be = NULL;
    struct page_cache *pc = NULL;
    struct meta_cache *mc = NULL;
    int rc, i;

    if (argc < 4) {
        fprintf(stderr, "usage: mkcache SRC_DIR CACHE_DIR PAGE_SIZE DIR... -- KEY...\n");
        return 1;
    }
    rc = local_backend_create(argv[1], &be, err, sizeof(err));
    if (rc < 0)
        goto out_err;
    struct page_cache_conf pconf = {.dir = argv[2], .page_size = (uint32_t)atoi(argv[3])};
    rc = page_cache_create(&pconf, be, &pc, err, sizeof(err));
    if (rc < 0)
        goto out_be;
    struct meta_cache_conf mconf = {.dir = argv[2], .ttl_ms = 3600 * 1000};
    rc = meta_cache_create(&mconf, be, &mc, err, sizeof(err));
    if (rc < 0)
        goto out_pc;
    for (i = 4; i < argc && strcmp(argv[i], "--") != 0; i++) {
        struct meta_dir d;
        rc = meta_cache_list(mc, argv[i], &d);
        if (rc < 0) {
            snprintf(err, sizeof(err), "list '%s' failed: %d", argv[i], rc);
            goto out_mc;
        }
        meta_dir_clear(&d);
    }
    for (i++; i < argc; i++) {
        rc = read_key(be, pc, argv[i]);
        if (rc < 0) {
            snprintf(err, sizeof(err), "read '%s' failed: %d", argv[i], rc);
            goto out_mc;
        }
    }
    rc = 0;
out_mc:
    meta_cache_destroy(mc);
out_pc:
    page_cache_destroy(pc);
out_be:
    backend_destroy(be);
out_err:
    if (rc < 0)
        fprintf(stderr, "mkcache: %s\n", err);
    return rc < 0 ? 1 : 0;
}
