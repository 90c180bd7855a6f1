/* test_urlcode.c - the shared percent-decoder: escapes, flags, refusals, in-place decoding,
 * and the three callers' wrappers keeping their own rules. */
#include "backends/http_listing.h"
#include "backends/s3_xml.h"
#include "backends/urlcode.h"
#include "testlib.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void test_hex_value(void)
{
    CHECK_EQ(url_hex_value('0'), 0);
    CHECK_EQ(url_hex_value('9'), 9);
    CHECK_EQ(url_hex_value('a'), 10);
    CHECK_EQ(url_hex_value('F'), 15);
    CHECK_EQ(url_hex_value('g'), -1);
    CHECK_EQ(url_hex_value('G'), -1);
    CHECK_EQ(url_hex_value('/'), -1);
    CHECK_EQ(url_hex_value(':'), -1);
    CHECK_EQ(url_hex_value('\0'), -1);
    CHECK_EQ(url_hex_value(0xc3), -1);
}

static void test_decode_basic(void)
{
    char *out = NULL;
    size_t n = 0;

    CHECK_EQ(url_decode("a%20b%2fc%C3%A9", 15, &out, &n, 0), 0);
    CHECK_STR(out, "a b/c\xc3\xa9");
    CHECK_EQ(n, 7);
    free(out);
    /* Only len bytes are read: the escape cut by len is malformed. */
    CHECK_EQ(url_decode("ab%41", 4, &out, &n, 0), -EINVAL);
    CHECK(out == NULL);
    CHECK_EQ(url_decode("ab%41", 2, &out, &n, 0), 0);
    CHECK_STR(out, "ab");
    free(out);
    CHECK_EQ(url_decode("", 0, &out, NULL, 0), 0);
    CHECK_STR(out, "");
    free(out);
}

static void test_decode_flags(void)
{
    char *out = NULL;

    CHECK_EQ(url_decode("a+b", 3, &out, NULL, 0), 0);
    CHECK_STR(out, "a+b");
    free(out);
    CHECK_EQ(url_decode("a+b%2B", 6, &out, NULL, URL_DECODE_PLUS_SPACE), 0);
    CHECK_STR(out, "a b+");
    free(out);
    CHECK_EQ(url_decode("a%2Fb", 5, &out, NULL, 0), 0);
    CHECK_STR(out, "a/b");
    free(out);
    CHECK_EQ(url_decode("a%2Fb", 5, &out, NULL, URL_DECODE_NO_SLASH), -EINVAL);
    CHECK_EQ(url_decode("a%2fb", 5, &out, NULL, URL_DECODE_NO_SLASH), -EINVAL);
    CHECK_EQ(url_decode("a/b", 3, &out, NULL, URL_DECODE_NO_SLASH), 0); /* raw '/' is fine */
    CHECK_STR(out, "a/b");
    free(out);
}

static void test_decode_refused(void)
{
    static const struct {
        const char *in;
        size_t len;
    } bad[] = {
        {"%", 1},   {"%4", 2},    {"a%4", 3},  {"%g0", 3},  {"%0g", 3},
        {"%00", 3}, {"a%00b", 5}, {"a\0b", 3}, {"%%41", 4}, {"% 41", 4},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        char *out = (char *)"untouched";
        CHECK_EQ(url_decode(bad[i].in, bad[i].len, &out, NULL, URL_DECODE_PLUS_SPACE), -EINVAL);
        CHECK(out == NULL);
    }
}

static void test_decode_in_place(void)
{
    char s[] = "%41%42c+d%7e";
    CHECK_EQ(url_decode_to(s, strlen(s), s, URL_DECODE_PLUS_SPACE), 6);
    CHECK_STR(s, "ABc d~");
    char t[] = "x%zz";
    CHECK_EQ(url_decode_to(t, strlen(t), t, 0), -EINVAL);
}

/* The wrappers keep their callers' rules: S3 keys decode '+' as a space, index-page links
 * keep it; both refuse %00 and bad escapes. */
static void test_wrappers(void)
{
    char k[] = "dir%2Fa+b%25";
    CHECK_EQ(s3_url_decode(k), 0);
    CHECK_STR(k, "dir/a b%");
    char bad[] = "a%0";
    CHECK_EQ(s3_url_decode(bad), -EIO);

    int nomem = 0;
    char *n = http_percent_decode("a+b%20c", 7, &nomem);
    CHECK_STR(n, "a+b c");
    free(n);
    CHECK(http_percent_decode("a%00", 4, &nomem) == NULL);
    CHECK_EQ(nomem, 0);
}

int main(void)
{
    RUN(test_hex_value);
    RUN(test_decode_basic);
    RUN(test_decode_flags);
    RUN(test_decode_refused);
    RUN(test_decode_in_place);
    RUN(test_wrappers);
    return test_finish();
}
