/*
 * shaper_stats.c - JSON form of the shaper's counters (json-c) and the atomic stats file.
 *
 * Design: one function builds the whole object from tables of (key, index) pairs, so the
 * names in the JSON and the enums in shaper_stats.h are kept side by side. The file is
 * written to PATH.tmp and renamed over PATH, so a reader never sees half a document.
 * No state; called only from the loop thread.
 */
#include "shaper_stats.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const req_names[SHAPER_REQ_KINDS] = {
    [SHAPER_REQ_GET] = "get",   [SHAPER_REQ_RANGED_GET] = "ranged_get",
    [SHAPER_REQ_HEAD] = "head", [SHAPER_REQ_LIST] = "list",
    [SHAPER_REQ_PUT] = "put",   [SHAPER_REQ_OTHER] = "other",
};

static const char *const fault_names[SHAPER_FAULT_KINDS] = {
    [SHAPER_FAULT_503] = "503",           [SHAPER_FAULT_SLOWDOWN] = "slowdown",
    [SHAPER_FAULT_RESET] = "reset",       [SHAPER_FAULT_TRUNCATE] = "truncate",
    [SHAPER_FAULT_STALL] = "stall",
};

static const char *const err_names[SHAPER_ERR_KINDS] = {
    [SHAPER_ERR_CLIENT_PROTOCOL] = "client_protocol",
    [SHAPER_ERR_UPSTREAM_PROTOCOL] = "upstream_protocol",
    [SHAPER_ERR_UPSTREAM_CONNECT] = "upstream_connect",
    [SHAPER_ERR_IO] = "io",
};

/* Adds key = n to obj. 0 or -ENOMEM. */
static int add_u64(struct json_object *obj, const char *key, uint64_t n)
{
    struct json_object *v = json_object_new_uint64(n);

    if (!v)
        return -ENOMEM;
    if (json_object_object_add(obj, key, v) != 0) {
        json_object_put(v);
        return -ENOMEM;
    }
    return 0;
}

/* Adds key = { "total": sum, names[i]: vals[i]... } to obj. 0 or -ENOMEM. */
static int add_group(struct json_object *obj, const char *key, const char *const *names,
                     const uint64_t *vals, size_t n)
{
    struct json_object *g = json_object_new_object();
    uint64_t total = 0;

    if (!g)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        total += vals[i];
    if (add_u64(g, "total", total) < 0)
        goto out_put;
    for (size_t i = 0; i < n; i++)
        if (add_u64(g, names[i], vals[i]) < 0)
            goto out_put;
    if (json_object_object_add(obj, key, g) != 0)
        goto out_put;
    return 0;

out_put:
    json_object_put(g);
    return -ENOMEM;
}

/* The errors group has no "total": it is not a count of one thing. */
static int add_errors(struct json_object *obj, const struct shaper_stats *st)
{
    struct json_object *g = json_object_new_object();

    if (!g)
        return -ENOMEM;
    for (size_t i = 0; i < SHAPER_ERR_KINDS; i++)
        if (add_u64(g, err_names[i], st->errors[i]) < 0)
            goto out_put;
    if (json_object_object_add(obj, "errors", g) != 0)
        goto out_put;
    return 0;

out_put:
    json_object_put(g);
    return -ENOMEM;
}

char *shaper_stats_json(const struct shaper_stats *st, size_t *len)
{
    struct json_object *obj = json_object_new_object();
    char *out = NULL;

    if (!obj)
        return NULL;
    if (add_group(obj, "requests", req_names, st->requests, SHAPER_REQ_KINDS) < 0 ||
        add_u64(obj, "bytes_up", st->bytes_up) < 0 ||
        add_u64(obj, "bytes_down", st->bytes_down) < 0 ||
        add_u64(obj, "connections", st->connections) < 0 ||
        add_u64(obj, "connections_active", st->connections_active) < 0 ||
        add_group(obj, "faults", fault_names, st->faults, SHAPER_FAULT_KINDS) < 0 ||
        add_errors(obj, st) < 0)
        goto out_put;

    size_t n = 0;
    const char *s = json_object_to_json_string_length(obj, JSON_C_TO_STRING_PLAIN, &n);
    if (!s)
        goto out_put;
    out = malloc(n + 2);
    if (!out)
        goto out_put;
    memcpy(out, s, n);
    out[n] = '\n';
    out[n + 1] = '\0';
    *len = n + 1;

out_put:
    json_object_put(obj);
    return out;
}

int shaper_stats_write_file(const struct shaper_stats *st, const char *path)
{
    size_t len = 0, plen = strlen(path);
    char *json = shaper_stats_json(st, &len);
    char *tmp = malloc(plen + 5);
    FILE *f = NULL;
    int rc = -ENOMEM;

    if (!json || !tmp)
        goto out_free;
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    f = fopen(tmp, "w");
    if (!f) {
        rc = -errno;
        goto out_free;
    }
    if (fwrite(json, 1, len, f) != len) {
        rc = -EIO;
        fclose(f);
        goto out_unlink;
    }
    if (fclose(f) != 0) {
        rc = -errno;
        goto out_unlink;
    }
    if (rename(tmp, path) != 0) {
        rc = -errno;
        goto out_unlink;
    }
    rc = 0;
    goto out_free;

out_unlink:
    unlink(tmp);
out_free:
    free(tmp);
    free(json);
    return rc;
}
