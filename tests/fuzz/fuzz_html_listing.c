/*
 * fuzz_html_listing.c - libFuzzer target for the HTML autoindex parser of the http:// backend
 * (backends/http_listing.c, http_listing_parse()).
 *
 * The input is the page body, handed over without a terminating NUL (libFuzzer's buffer is
 * exactly `size` bytes, so ASan catches any read past it). It is parsed as the listing of two
 * directories: "/pub/data%20set/" with key prefix "data set/", and the root "/" with prefix "".
 * Invariants: the result is 0, -EIO or -ENOMEM; on success every entry's key is the prefix
 * followed by one non-empty path component that is not "." or "..", with a trailing '/'
 * exactly when the entry is a directory (is_prefix), no other '/', and no version; the page
 * is freeable whatever the result.
 * Enabled only once backends/http_listing.c exists (tests/fuzz/CMakeLists.txt).
 * Seeds: tests/fuzz/corpus/fuzz_html_listing/ (nginx, Apache and python http.server pages).
 */
#include "backends/backend.h"
#include "backends/http_listing.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_page(const struct backend_list_page *page, int ret, const char *prefix)
{
    size_t plen = strlen(prefix);

    if (ret != 0 && ret != -EIO && ret != -ENOMEM)
        abort();
    if (ret != 0)
        return;
    for (size_t i = 0; i < page->count; i++) {
        const struct backend_entry *e = &page->entries[i];
        if (!e->key || strncmp(e->key, prefix, plen) != 0)
            abort();
        const char *name = e->key + plen;
        size_t n = strlen(name);
        if (e->is_prefix) {
            if (n < 2 || name[n - 1] != '/')
                abort();
            n--; /* the component without its '/' */
        }
        if (n == 0 || memchr(name, '/', n) || (n == 1 && name[0] == '.') ||
            (n == 2 && name[0] == '.' && name[1] == '.'))
            abort();
        if (e->version)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const struct {
        const char *dir_path, *prefix;
    } dirs[] = {
        {"/pub/data%20set/", "data set/"},
        {"/", ""},
    };

    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        struct backend_list_page page = {0};
        int ret = http_listing_parse((const char *)data, size, dirs[i].dir_path, dirs[i].prefix,
                                     &page);
        check_page(&page, ret, dirs[i].prefix);
        backend_list_page_clear(&page);
    }
    return 0;
}
