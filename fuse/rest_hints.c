/*
 * rest_hints.c - the sampler hints' routes of the control plane (see rest_int.h and
 * cache/hints.h): POST /api/v1/hints installs a plan (a sampler's order of files for an
 * epoch, sent by python/pagefs/torch.py), GET lists the plans with their progress, DELETE
 * drops one. Allowed on the control socket and on rest= (like load jobs: a plan only fetches
 * what the mount would serve anyway, within the cache's room for prefetched pages).
 *
 * Design: the body is parsed whole (rest_parse_hints: up to REST_MAX_HINTS_BODY bytes and
 * HINTS_MAX_ENTRIES paths), its paths handed to the reader's hints, which own them from
 * then on. Paths are not looked up here: the planner resolves them as it gets to them, so a
 * plan of a million files is installed at once, and a path that does not exist only counts
 * as missing.
 * Invariants: none beyond rest.c's. No locks of its own.
 */
#include "fuse/rest_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache/hints.h"
#include "cache/reader.h"

enum MHD_Result rest_api_hints_set(struct rest_server *rs, struct MHD_Connection *c,
                                   struct req_ctx *ctx)
{
    struct rest_hints hb;
    int st = rest_parse_hints(ctx->body ? ctx->body : "", ctx->body_len, HINTS_MAX_ENTRIES, &hb);
    if (st == 400)
        return rest_reply_error(c, ctx, 400,
                                "expected {\"name\": \"[A-Za-z0-9._:@-]{1,128}\", \"paths\": "
                                "[mount paths of files, in reading order]}");
    if (st)
        return rest_reply_status(c, ctx, st);
    size_t n = hb.count;
    char name[sizeof(hb.name)];
    memcpy(name, hb.name, sizeof(name));
    char **paths = hb.paths; /* hints_set takes them */
    hb.paths = NULL;
    hb.count = 0;
    struct hints *h = reader_hints(rs->reader);
    int rc = hints_set(h, name, paths, n);
    if (rc < 0)
        return rest_reply_errno(c, ctx, rc, "hints");
    struct hints_stats hs;
    hints_get_stats(h, &hs);
    struct json_object *o = json_object_new_object();
    if (!o)
        return MHD_NO;
    json_object_object_add(o, "name", json_object_new_string(name));
    rest_add_u64(o, "entries", n);
    rest_add_u64(o, "plans", hs.plans);
    return rest_reply_json(c, ctx, 200, o);
}

enum MHD_Result rest_api_hints_list(struct rest_server *rs, struct MHD_Connection *c,
                                    struct req_ctx *ctx)
{
    struct hints_plan_info *v;
    size_t n;
    int rc = hints_list(reader_hints(rs->reader), &v, &n);
    if (rc < 0)
        return rest_reply_errno(c, ctx, rc, "hints");
    struct json_object *o = json_object_new_object(), *a = json_object_new_array();
    if (!o || !a) {
        json_object_put(o);
        json_object_put(a);
        free(v);
        return MHD_NO;
    }
    for (size_t i = 0; i < n; i++) {
        struct json_object *p = json_object_new_object();
        if (!p)
            break;
        json_object_object_add(p, "name", json_object_new_string(v[i].name));
        rest_add_u64(p, "entries", v[i].entries);
        rest_add_u64(p, "position", v[i].position);
        rest_add_u64(p, "opened", v[i].opened);
        rest_add_u64(p, "queued", v[i].queued);
        rest_add_u64(p, "resident", v[i].resident);
        rest_add_u64(p, "missing", v[i].missing);
        rest_add_u64(p, "skipped", v[i].skipped);
        rest_add_u64(p, "ahead_bytes", v[i].ahead_bytes);
        json_object_array_add(a, p);
    }
    free(v);
    json_object_object_add(o, "plans", a);
    return rest_reply_json(c, ctx, 200, o);
}

enum MHD_Result rest_api_hints_drop(struct rest_server *rs, struct MHD_Connection *c,
                                    struct req_ctx *ctx)
{
    int rc = hints_drop(reader_hints(rs->reader), ctx->req.name);
    if (rc == -ENOENT)
        return rest_reply_error(c, ctx, 404, "no such plan");
    if (rc < 0)
        return rest_reply_errno(c, ctx, rc, "hints");
    struct json_object *o = json_object_new_object();
    if (!o)
        return MHD_NO;
    json_object_object_add(o, "name", json_object_new_string(ctx->req.name));
    return rest_reply_json(c, ctx, 200, o);
}
