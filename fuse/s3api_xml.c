/*
 * s3api_xml.c - the S3 API's XML documents (see s3api_xml.h).
 *
 * Design: one xmlTextWriter per document over an xmlBuffer; every write goes through w_*()
 * helpers that latch the first failure, so a document is either complete or not returned.
 * With encoding-type=url the keys, prefixes, delimiter, markers and start-after are written
 * percent-encoded (s3api_url_encode()), as S3 does; the element text is escaped by the
 * writer either way. Text that XML 1.0 cannot hold (not UTF-8, control characters) fails the
 * document: a client that lists such keys asks for encoding-type=url (boto3 and the AWS CLI
 * always do).
 */
#include "fuse/s3api_xml.h"

#include <errno.h>
#include <inttypes.h>
#include <libxml/xmlstring.h>
#include <libxml/xmlwriter.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fuse/s3api_parse.h"

#define S3_NS "http://s3.amazonaws.com/doc/2006-03-01/"

struct w {
    xmlBufferPtr buf;
    xmlTextWriterPtr tw;
    int failed;
};

static int w_begin(struct w *w, const char *root, int ns)
{
    w->failed = 0;
    w->buf = xmlBufferCreate();
    w->tw = w->buf ? xmlNewTextWriterMemory(w->buf, 0) : NULL;
    if (!w->tw) {
        if (w->buf)
            xmlBufferFree(w->buf);
        return -ENOMEM;
    }
    if (xmlTextWriterStartDocument(w->tw, "1.0", "UTF-8", NULL) < 0 ||
        xmlTextWriterStartElement(w->tw, BAD_CAST root) < 0 ||
        (ns && xmlTextWriterWriteAttribute(w->tw, BAD_CAST "xmlns", BAD_CAST S3_NS) < 0))
        w->failed = 1;
    return 0;
}

static void w_start(struct w *w, const char *name)
{
    if (!w->failed && xmlTextWriterStartElement(w->tw, BAD_CAST name) < 0)
        w->failed = 1;
}

static void w_end(struct w *w)
{
    if (!w->failed && xmlTextWriterEndElement(w->tw) < 0)
        w->failed = 1;
}

/* Text XML 1.0 can hold: UTF-8 without control characters other than tab, LF and CR (the
 * writer would copy anything else through into a broken document). */
static int xml_text_ok(const char *s)
{
    if (!xmlCheckUTF8(BAD_CAST s))
        return 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 && *p != '\t' && *p != '\n' && *p != '\r')
            return 0;
    return 1;
}

static void w_elem(struct w *w, const char *name, const char *text)
{
    if (!w->failed &&
        (!xml_text_ok(text) || xmlTextWriterWriteElement(w->tw, BAD_CAST name, BAD_CAST text) < 0))
        w->failed = 1;
}

__attribute__((format(printf, 3, 4))) static void w_elemf(struct w *w, const char *name,
                                                          const char *fmt, ...)
{
    char text[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    w_elem(w, name, text);
}

/* A key-like text, percent-encoded when enc. */
static void w_key(struct w *w, const char *name, const char *text, int enc)
{
    if (!enc) {
        w_elem(w, name, text);
        return;
    }
    char *e = s3api_url_encode(text);
    if (!e)
        w->failed = 1;
    else
        w_elem(w, name, e);
    free(e);
}

static int w_finish(struct w *w, char **out, size_t *len)
{
    int rc = 0;
    *out = NULL;
    if (!w->failed && xmlTextWriterEndDocument(w->tw) < 0)
        w->failed = 1;
    xmlFreeTextWriter(w->tw); /* flushes into buf */
    if (w->failed) {
        rc = -EIO;
        goto out;
    }
    size_t n = (size_t)xmlBufferLength(w->buf);
    *out = malloc(n + 1);
    if (!*out) {
        rc = -ENOMEM;
        goto out;
    }
    memcpy(*out, xmlBufferContent(w->buf), n);
    (*out)[n] = '\0';
    *len = n;
out:
    xmlBufferFree(w->buf);
    return rc;
}

void s3api_iso_time(int64_t ns, char *buf, size_t len)
{
    time_t s = (time_t)(ns / 1000000000);
    struct tm tm;
    if (ns < 0 || !gmtime_r(&s, &tm)) {
        snprintf(buf, len, "1970-01-01T00:00:00.000Z");
        return;
    }
    snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ns % 1000000000 / 1000000));
}

int s3api_xml_error(const char *code, const char *message, const char *resource,
                    const char *request_id, char **out, size_t *len)
{
    struct w w;
    if (w_begin(&w, "Error", 0) < 0)
        return -ENOMEM;
    w_elem(&w, "Code", code);
    w_elem(&w, "Message", message);
    if (resource)
        w_elem(&w, "Resource", resource);
    w_elem(&w, "RequestId", request_id);
    w_end(&w);
    return w_finish(&w, out, len);
}

int s3api_xml_buckets(const char *bucket, int64_t created_ns, char **out, size_t *len)
{
    struct w w;
    char when[32];
    if (w_begin(&w, "ListAllMyBucketsResult", 1) < 0)
        return -ENOMEM;
    w_start(&w, "Owner");
    w_elem(&w, "ID", "pagefs");
    w_elem(&w, "DisplayName", "pagefs");
    w_end(&w);
    w_start(&w, "Buckets");
    w_start(&w, "Bucket");
    w_elem(&w, "Name", bucket);
    s3api_iso_time(created_ns, when, sizeof(when));
    w_elem(&w, "CreationDate", when);
    w_end(&w);
    w_end(&w);
    w_end(&w);
    return w_finish(&w, out, len);
}

int s3api_xml_location(const char *region, char **out, size_t *len)
{
    struct w w;
    if (w_begin(&w, "LocationConstraint", 1) < 0)
        return -ENOMEM;
    if (region && *region && strcmp(region, "us-east-1") != 0 && !w.failed &&
        xmlTextWriterWriteString(w.tw, BAD_CAST region) < 0)
        w.failed = 1;
    w_end(&w);
    return w_finish(&w, out, len);
}

int s3api_xml_list(const struct s3api_list_result *r, char **out, size_t *len)
{
    struct w w;
    char when[32];
    int enc = r->encoding_url;
    size_t keys = 0;
    if (w_begin(&w, "ListBucketResult", 1) < 0)
        return -ENOMEM;
    w_elem(&w, "Name", r->bucket);
    w_key(&w, "Prefix", r->prefix ? r->prefix : "", enc);
    if (r->v2) {
        if (r->start_after)
            w_key(&w, "StartAfter", r->start_after, enc);
        if (r->continuation_token)
            w_elem(&w, "ContinuationToken", r->continuation_token);
        for (size_t i = 0; i < r->count; i++)
            keys++;
        w_elemf(&w, "KeyCount", "%zu", keys);
    } else {
        w_key(&w, "Marker", r->marker ? r->marker : "", enc);
        if (r->truncated && r->next)
            w_key(&w, "NextMarker", r->next, enc);
    }
    w_elemf(&w, "MaxKeys", "%u", r->max_keys);
    if (r->delimiter)
        w_key(&w, "Delimiter", r->delimiter, enc);
    if (enc)
        w_elem(&w, "EncodingType", "url");
    w_elem(&w, "IsTruncated", r->truncated ? "true" : "false");
    if (r->v2 && r->truncated && r->next)
        w_elem(&w, "NextContinuationToken", r->next);
    for (size_t i = 0; i < r->count; i++) {
        const struct s3api_list_item *it = &r->items[i];
        if (it->is_prefix)
            continue;
        w_start(&w, "Contents");
        w_key(&w, "Key", it->key, enc);
        s3api_iso_time(it->mtime_ns, when, sizeof(when));
        w_elem(&w, "LastModified", when);
        w_elem(&w, "ETag", it->etag ? it->etag : "\"\"");
        w_elemf(&w, "Size", "%" PRIu64, it->size);
        w_elem(&w, "StorageClass", "STANDARD");
        w_end(&w);
    }
    for (size_t i = 0; i < r->count; i++) {
        if (!r->items[i].is_prefix)
            continue;
        w_start(&w, "CommonPrefixes");
        w_key(&w, "Prefix", r->items[i].key, enc);
        w_end(&w);
    }
    w_end(&w);
    return w_finish(&w, out, len);
}
