/*
 * http_listing.h - the network-free half of the HTTP backend: parsing the directory index
 * pages static web servers generate (nginx autoindex, Apache mod_autoindex as a FancyIndexing
 * table, as FancyIndexing <pre> or as a plain <ul> list, python -m http.server) with libxml2's
 * HTML parser. A pure function of its arguments, so it is unit-tested on captured pages and
 * fuzzed (tests/fuzz).
 *
 * Listing rules: only direct children of the directory are kept: relative hrefs ("name",
 * "name/", "./name"), or absolute paths "/dir_path/name[/]" (compared segment by segment
 * after percent-decoding). Dropped: "../" and parent links, hrefs with a query or fragment
 * (sort links such as "?C=N;O=D", "#top"), hrefs with a scheme or host ("http://...",
 * "//host/...", "mailto:"), hrefs with a '/' other than one trailing '/', a name whose
 * percent-decoding is invalid or yields '/' or NUL, and the names "", ".", ".." and names
 * longer than 255 bytes. A trailing '/' makes a directory. A name listed twice is kept once
 * (with the most metadata seen). Entries are appended sorted by key (bytewise).
 *
 * Sizes and times come from the text of the entry's row (the rest of the <pre> line after
 * the link, or the following cells of its table row): a date ("01-Jan-2024 12:34",
 * "2024-01-01 12:34[:56]", "2024-Jan-01 12:34:56"), read as UTC, then a size. Only a size of
 * plain digits after a recognised date is exact; "1.2M", "12K", "-" or no size at all give
 * UINT64_MAX.
 */
#ifndef PAGEFS_HTTP_LISTING_H
#define PAGEFS_HTTP_LISTING_H

#include <stddef.h>

#include "backends/backend.h"

/* Parses an autoindex HTML page of the directory at URL path `dir_path` (percent-encoded,
 * starting and ending with '/'). Appends the children to `out` with backend_list_page_add():
 * key = prefix + decoded name (+ "/" for directories, is_prefix=1), size = exact size or
 * UINT64_MAX when the page shows none, mtime_ns = parsed time or 0, version NULL. Returns 0,
 * -EIO for input that is not an HTML listing, -ENOMEM. Never reads outside [html, html+len);
 * len may be 0; html is not NUL-terminated.
 * (Also -EINVAL for a NULL out/dir_path/prefix or a dir_path not starting and ending with
 * '/'. On error nothing has been appended.) */
int http_listing_parse(const char *html, size_t len, const char *dir_path, const char *prefix,
                       struct backend_list_page *out);

/* Percent-decodes `s[0..n)` into a malloc'd NUL-terminated string (caller frees); '+' stays
 * '+' (paths, not forms). Returns NULL for an invalid escape, an encoded NUL, or no memory
 * (*nomem then set to 1). */
char *http_percent_decode(const char *s, size_t n, int *nomem);

#endif
