/*
 * json_util.h - the few json-c steps the backends that read JSON share (etcd.c, aws_imds.c,
 * aws_process.c): one whole document from a buffer, a string member, and a put that first
 * wipes the strings (replies that carry credentials).
 */
#ifndef PAGEFS_JSON_UTIL_H
#define PAGEFS_JSON_UTIL_H

#include <json-c/json.h>
#include <stddef.h>

/* Parses buf[0..len) as one JSON value with nothing but white space after it (and no NUL in
 * it). Returns 0 with *out (put it with json_object_put() or json_util_put_wiped()), -EIO when
 * it is not that, -ENOMEM. */
int json_util_parse(const char *buf, size_t len, struct json_object **out);

/* json_util_parse() of a document that must be an object (-EIO otherwise). */
int json_util_parse_object(const char *buf, size_t len, struct json_object **out);

/* Member key of object o as a string: 1 with *s (json-c's, lives as long as o), 0 when absent
 * or null, -EIO when it is something else or holds a NUL. */
int json_util_string(struct json_object *o, const char *key, const char **s);

/* Wipes every string member of object o (json-c frees its copies without wiping), then puts
 * o. NULL is a no-op. */
void json_util_put_wiped(struct json_object *o);

#endif
