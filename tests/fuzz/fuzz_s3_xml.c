/*
 * fuzz_s3_xml.c - libFuzzer target for the S3 reply parsers (s3_xml.c): ListObjectsV2
 * (with and without a prefix to strip) and error documents. Any input must end in 0 or
 * -EIO (or -ENOMEM), with the page freeable and no sanitizer report. On success every entry
 * has a non-empty key, entries come sorted by key (the backend contract), and only the last
 * page has no continuation token.
 * Built by tests/fuzz/CMakeLists.txt (PAGEFS_FUZZ=ON, Clang); run e.g. `scripts/fuzz.sh
 * --time 600 fuzz_s3_xml`. Seeds: tests/fuzz/corpus/fuzz_s3_xml/.
 */
#include "backends/backend.h"
#include "backends/s3_xml.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_page(const struct backend_list_page *page, int ret)
{
    if (ret != 0 && ret != -EIO && ret != -ENOMEM)
        abort();
    if (ret != 0)
        return;
    for (size_t i = 0; i < page->count; i++) {
        const struct backend_entry *e = &page->entries[i];
        if (!e->key || !e->key[0])
            abort();
        if (i > 0 && strcmp(page->entries[i - 1].key, e->key) > 0)
            abort();
        if (e->is_prefix && (e->size || e->version))
            abort();
    }
    if (page->next_token && !page->next_token[0])
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct backend_list_page page = {0};
    char code[64];
    int ret;

    ret = s3_xml_parse_list((const char *)data, size, "", &page);
    check_page(&page, ret);
    backend_list_page_clear(&page);

    ret = s3_xml_parse_list((const char *)data, size, "p/", &page);
    check_page(&page, ret);
    backend_list_page_clear(&page);

    s3_xml_error_code((const char *)data, size, code, sizeof(code));
    if (strlen(code) >= sizeof(code))
        abort();
    return 0;
}
