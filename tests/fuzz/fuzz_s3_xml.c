/*
 * fuzz_s3_xml.c - libFuzzer target for the S3 reply parsers (s3_xml.c): ListObjectsV2
 * (with and without a prefix to strip), error documents (S3's <Error>, AWS's
 * <ErrorResponse>) and STS credential replies. Any input must end in 0 or -EIO (or
 * -ENOMEM), with the page freeable and no sanitizer report. On success every entry has a
 * non-empty key, entries come sorted by key (the backend contract), and only the last page
 * has no continuation token; STS credentials have a non-empty key, secret and session token
 * and an expiration, and a failed parse leaves the previous credentials as they were.
 * Built by tests/fuzz/CMakeLists.txt (PAGEFS_FUZZ=ON, Clang); run e.g. `scripts/fuzz.sh
 * --time 600 fuzz_s3_xml`. Seeds: tests/fuzz/corpus/fuzz_s3_xml/.
 */
#include "backends/aws_creds.h"
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

    struct aws_creds creds = {0};
    if (aws_creds_set(&creds, "PREVIOUS", "previous", NULL, 0) != 0)
        abort();
    ret = s3_xml_sts_credentials((const char *)data, size, &creds);
    if (ret != 0 && ret != -EIO && ret != -ENOMEM)
        abort();
    if (ret == 0 && (!creds.access_key[0] || !creds.secret_key[0] || !creds.session_token ||
                     !creds.session_token[0] || creds.expiration <= 0))
        abort();
    if (ret != 0 && (strcmp(creds.access_key, "PREVIOUS") != 0 || creds.session_token))
        abort();
    aws_creds_clear(&creds);
    return 0;
}
