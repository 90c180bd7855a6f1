/*
 * json_util.c - shared json-c steps (json_util.h).
 *
 * Design: json_tokener_parse_ex() over the exact length, then a check that only white space
 * follows, so "{}{}" or "{} junk" is refused rather than read as its first value.
 * Invariants: no state; the functions touch only their arguments.
 */
#include "backends/json_util.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

int json_util_parse(const char *buf, size_t len, struct json_object **out)
{
    struct json_object *o = NULL;
    int ret = -EIO;

    *out = NULL;
    if (len == 0 || len > INT_MAX || memchr(buf, '\0', len))
        return -EIO;
    struct json_tokener *tok = json_tokener_new();
    if (!tok)
        return -ENOMEM;
    o = json_tokener_parse_ex(tok, buf, (int)len);
    if (!o || json_tokener_get_error(tok) != json_tokener_success)
        goto out_put;
    for (size_t i = json_tokener_get_parse_end(tok); i < len; i++) {
        if (buf[i] != ' ' && buf[i] != '\n' && buf[i] != '\r' && buf[i] != '\t')
            goto out_put; /* something after the value */
    }
    *out = o;
    o = NULL;
    ret = 0;
out_put:
    json_object_put(o);
    json_tokener_free(tok);
    return ret;
}

int json_util_parse_object(const char *buf, size_t len, struct json_object **out)
{
    int ret = json_util_parse(buf, len, out);
    if (ret == 0 && !json_object_is_type(*out, json_type_object)) {
        json_object_put(*out);
        *out = NULL;
        ret = -EIO;
    }
    return ret;
}

int json_util_string(struct json_object *o, const char *key, const char **s)
{
    struct json_object *m = NULL;

    *s = NULL;
    if (!json_object_object_get_ex(o, key, &m) || !m)
        return 0;
    if (!json_object_is_type(m, json_type_string))
        return -EIO;
    *s = json_object_get_string(m);
    return strlen(*s) == (size_t)json_object_get_string_len(m) ? 1 : -EIO;
}

void json_util_put_wiped(struct json_object *o)
{
    if (!o)
        return;
    if (json_object_is_type(o, json_type_object)) {
        struct json_object_iterator it = json_object_iter_begin(o);
        struct json_object_iterator end = json_object_iter_end(o);
        for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
            struct json_object *v = json_object_iter_peek_value(&it);
            if (json_object_is_type(v, json_type_string))
                explicit_bzero((char *)json_object_get_string(v),
                               (size_t)json_object_get_string_len(v));
        }
    }
    json_object_put(o);
}
