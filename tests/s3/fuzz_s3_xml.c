/*
 * fuzz_s3_xml.c - libFuzzer target for the S3 reply parsers (s3_xml.c): ListObjectsV2
 * (with and without a prefix to strip) and error documents. Any input must end in 0 or
 * -EIO (or -ENOMEM), with the page freeable and no sanitizer report.
 * Built only with Clang (see CMakeLists.txt); run e.g. `fuzz_s3_xml -max_total_time=60`.
 */
#include "backends/backend.h"
#include "backends/s3_xml.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct backend_list_page page = {0};
    char code[64];
    int ret;

    ret = s3_xml_parse_list((const char *)data, size, "", &page);
    if (ret != 0 && ret != -EIO && ret != -ENOMEM)
        abort();
    for (size_t i = 0; ret == 0 && i < page.count; i++) {
        if (!page.entries[i].key || !page.entries[i].key[0])
            abort();
    }
    backend_list_page_clear(&page);

    ret = s3_xml_parse_list((const char *)data, size, "p/", &page);
    if (ret != 0 && ret != -EIO && ret != -ENOMEM)
        abort();
    backend_list_page_clear(&page);

    s3_xml_error_code((const char *)data, size, code, sizeof(code));
    if (strlen(code) >= sizeof(code))
        abort();
    return 0;
}
