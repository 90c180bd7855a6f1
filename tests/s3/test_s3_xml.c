/*
 * test_s3_xml.c - unit tests of the S3 backend's network-free parts: ListObjectsV2 and error
 * reply parsing, URL decoding of keys, SigV4 key encoding, timestamps, errno mapping, and
 * the argument checks of s3_backend_create (no request is sent by create); STS credential
 * replies (s3_xml_sts_credentials) and AWS's <ErrorResponse> error documents.
 */
#include "backends/aws_creds.h"
#include "backends/backend.h"
#include "backends/curl_common.h"
#include "backends/s3.h"
#include "backends/s3_xml.h"
#include "backends/urlcode.h"
#include "testlib.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NS "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\""

static int parse(const char *xml, const char *strip, struct backend_list_page *page)
{
    memset(page, 0, sizeof(*page));
    return s3_xml_parse_list(xml, strlen(xml), strip, page);
}

static void test_list_basic(void)
{
    const char *xml =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
        "<ListBucketResult " NS "><Name>bkt</Name><Prefix>dir/</Prefix>"
        "<KeyCount>3</KeyCount><MaxKeys>1000</MaxKeys><Delimiter>/</Delimiter>"
        "<IsTruncated>false</IsTruncated>"
        "<Contents><Key>dir/b.txt</Key><LastModified>2024-05-01T12:34:56.789Z</LastModified>"
        "<ETag>&quot;0123456789abcdef0123456789abcdef&quot;</ETag><Size>12345</Size>"
        "<StorageClass>STANDARD</StorageClass></Contents>"
        "<Contents><Key>dir/a.txt</Key><LastModified>1970-01-01T00:00:01Z</LastModified>"
        "<ETag>\"abc-2\"</ETag><Size>0</Size><Owner><ID>x</ID></Owner></Contents>"
        "<CommonPrefixes><Prefix>dir/sub/</Prefix></CommonPrefixes>"
        "<CommonPrefixes><Prefix>dir/aaa/</Prefix></CommonPrefixes>"
        "</ListBucketResult>";
    struct backend_list_page page;

    CHECK_EQ(parse(xml, "", &page), 0);
    CHECK_EQ(page.count, 4);
    CHECK(page.next_token == NULL);
    if (page.count == 4) {
        /* One key order across objects and prefixes. */
        CHECK_STR(page.entries[0].key, "dir/a.txt");
        CHECK_STR(page.entries[1].key, "dir/aaa/");
        CHECK_STR(page.entries[2].key, "dir/b.txt");
        CHECK_STR(page.entries[3].key, "dir/sub/");
        CHECK_EQ(page.entries[0].is_prefix, 0);
        CHECK_EQ(page.entries[0].size, 0);
        CHECK_EQ(page.entries[0].mtime_ns, 1000000000LL);
        CHECK_STR(page.entries[0].version, "\"abc-2\"");
        CHECK_EQ(page.entries[1].is_prefix, 1);
        CHECK(page.entries[1].version == NULL);
        CHECK_EQ(page.entries[2].size, 12345);
        CHECK_EQ(page.entries[2].mtime_ns, 1714566896789000000LL);
        CHECK_STR(page.entries[2].version, "\"0123456789abcdef0123456789abcdef\"");
        CHECK_EQ(page.entries[3].is_prefix, 1);
    }
    backend_list_page_clear(&page);
}

static void test_list_strip_prefix(void)
{
    const char *xml = "<ListBucketResult><IsTruncated>false</IsTruncated>"
                      "<Contents><Key>src/pre/</Key><Size>0</Size></Contents>"
                      "<Contents><Key>src/pre/x</Key><Size>1</Size></Contents>"
                      "<CommonPrefixes><Prefix>src/pre/d/</Prefix></CommonPrefixes>"
                      "</ListBucketResult>";
    struct backend_list_page page;

    CHECK_EQ(parse(xml, "src/pre/", &page), 0);
    CHECK_EQ(page.count, 2); /* the root's own marker "src/pre/" is skipped */
    if (page.count == 2) {
        CHECK_STR(page.entries[0].key, "d/");
        CHECK_STR(page.entries[1].key, "x");
        CHECK_EQ(page.entries[1].size, 1);
    }
    backend_list_page_clear(&page);

    /* A key outside the prefix is a broken reply. */
    CHECK_EQ(parse(xml, "other/", &page), -EIO);
    backend_list_page_clear(&page);
}

static void test_list_url_decoding(void)
{
    /* space (as '+' and as %20), '+', '%', '#', '&' and UTF-8 "é中" as escapes. */
    const char *xml = "<ListBucketResult><EncodingType>url</EncodingType>"
                      "<IsTruncated>false</IsTruncated>"
                      "<Contents><Key>odd/a+b%20c</Key><Size>1</Size></Contents>"
                      "<Contents><Key>odd/plus%2Bsign</Key><Size>2</Size></Contents>"
                      "<Contents><Key>odd/100%25</Key><Size>3</Size></Contents>"
                      "<Contents><Key>odd/%C3%A9%E4%B8%AD</Key><Size>4</Size></Contents>"
                      "<Contents><Key>odd/h%23t%26a</Key><Size>5</Size></Contents>"
                      "<CommonPrefixes><Prefix>odd/sp+ace%2F</Prefix></CommonPrefixes>"
                      "</ListBucketResult>";
    struct backend_list_page page;

    CHECK_EQ(parse(xml, "odd/", &page), 0);
    CHECK_EQ(page.count, 6);
    if (page.count == 6) {
        CHECK_STR(page.entries[0].key, "100%");
        CHECK_STR(page.entries[1].key, "a b c");
        CHECK_STR(page.entries[2].key, "h#t&a");
        CHECK_STR(page.entries[3].key, "plus+sign");
        CHECK_STR(page.entries[4].key, "sp ace/");
        CHECK_EQ(page.entries[4].is_prefix, 1);
        CHECK_STR(page.entries[5].key, "\xc3\xa9\xe4\xb8\xad");
    }
    backend_list_page_clear(&page);

    /* Without <EncodingType>, keys are taken literally. EncodingType after the keys. */
    const char *raw = "<ListBucketResult><IsTruncated>false</IsTruncated>"
                      "<Contents><Key>a+b%41</Key><Size>1</Size></Contents>"
                      "</ListBucketResult>";
    CHECK_EQ(parse(raw, "", &page), 0);
    CHECK(page.count == 1 && strcmp(page.entries[0].key, "a+b%41") == 0);
    backend_list_page_clear(&page);
    const char *late = "<ListBucketResult><IsTruncated>false</IsTruncated>"
                       "<Contents><Key>a+b%41</Key><Size>1</Size></Contents>"
                       "<EncodingType>url</EncodingType></ListBucketResult>";
    CHECK_EQ(parse(late, "", &page), 0);
    CHECK(page.count == 1 && strcmp(page.entries[0].key, "a bA") == 0);
    backend_list_page_clear(&page);

    /* A bad escape or an encoded NUL is a broken reply. */
    const char *bad = "<ListBucketResult><EncodingType>url</EncodingType>"
                      "<IsTruncated>false</IsTruncated>"
                      "<Contents><Key>a%4</Key><Size>1</Size></Contents></ListBucketResult>";
    CHECK_EQ(parse(bad, "", &page), -EIO);
    backend_list_page_clear(&page);
    const char *nul = "<ListBucketResult><EncodingType>url</EncodingType>"
                      "<IsTruncated>false</IsTruncated>"
                      "<Contents><Key>a%00b</Key><Size>1</Size></Contents></ListBucketResult>";
    CHECK_EQ(parse(nul, "", &page), -EIO);
    backend_list_page_clear(&page);
}

static void test_list_truncation(void)
{
    const char *xml = "<ListBucketResult><IsTruncated>true</IsTruncated>"
                      "<NextContinuationToken>1/a+b&amp;c=</NextContinuationToken>"
                      "<Contents><Key>k</Key><Size>1</Size></Contents></ListBucketResult>";
    struct backend_list_page page;

    CHECK_EQ(parse(xml, "", &page), 0);
    CHECK_STR(page.next_token, "1/a+b&c="); /* the token is not URL-decoded */
    backend_list_page_clear(&page);

    const char *no_token = "<ListBucketResult><IsTruncated>true</IsTruncated>"
                           "<Contents><Key>k</Key><Size>1</Size></Contents>"
                           "</ListBucketResult>";
    CHECK_EQ(parse(no_token, "", &page), -EIO);
    backend_list_page_clear(&page);

    /* Not truncated: a stray token is ignored. */
    const char *done = "<ListBucketResult><NextContinuationToken>x</NextContinuationToken>"
                       "<IsTruncated>false</IsTruncated></ListBucketResult>";
    CHECK_EQ(parse(done, "", &page), 0);
    CHECK(page.next_token == NULL);
    CHECK_EQ(page.count, 0);
    backend_list_page_clear(&page);
}

static void test_list_malformed(void)
{
    static const char *const bad[] = {
        "",
        "not xml at all",
        "<ListBucketResult><IsTruncated>false</IsTruncated>", /* unterminated */
        "<Error><Code>NoSuchBucket</Code></Error>",           /* wrong root */
        "<ListBucketResult></ListBucketResult>",              /* no IsTruncated */
        "<ListBucketResult><IsTruncated>maybe</IsTruncated></ListBucketResult>",
        "<ListBucketResult><IsTruncated>false</IsTruncated>"
        "<Contents><Size>1</Size></Contents></ListBucketResult>", /* no Key */
        "<ListBucketResult><IsTruncated>false</IsTruncated>"
        "<Contents><Key>k</Key></Contents></ListBucketResult>", /* no Size */
        "<ListBucketResult><IsTruncated>false</IsTruncated>"
        "<Contents><Key>k</Key><Size>-1</Size></Contents></ListBucketResult>",
        "<ListBucketResult><IsTruncated>false</IsTruncated>"
        "<Contents><Key>k</Key><Size>99999999999999999999999</Size></Contents>"
        "</ListBucketResult>",
        "<ListBucketResult><IsTruncated>false</IsTruncated>"
        "<Contents><Key>k</Key><Size>1</Size><LastModified>yesterday</LastModified>"
        "</Contents></ListBucketResult>",
        "<ListBucketResult><IsTruncated>false</IsTruncated>"
        "<Contents><Key>k</Key><Key>j</Key><Size>1</Size></Contents></ListBucketResult>",
        "<ListBucketResult><IsTruncated>false</IsTruncated>"
        "<Contents><Key>k<b>x</b></Key><Size>1</Size></Contents></ListBucketResult>",
        "<ListBucketResult><IsTruncated>false</IsTruncated>"
        "<Contents><Key>&undefined;</Key><Size>1</Size></Contents></ListBucketResult>",
        "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult><x/>",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct backend_list_page page;
        int ret = parse(bad[i], "", &page);
        if (ret != -EIO)
            fprintf(stderr, "malformed case %zu: got %d\n", i, ret);
        CHECK_EQ(ret, -EIO);
        backend_list_page_clear(&page);
    }
    /* NULL buffer of length 0. */
    struct backend_list_page page = {0};
    CHECK_EQ(s3_xml_parse_list(NULL, 0, "", &page), -EIO);
    backend_list_page_clear(&page);

    /* Every prefix of a valid reply is malformed (truncated download); none may crash. */
    const char *xml = "<ListBucketResult><IsTruncated>true</IsTruncated>"
                      "<NextContinuationToken>t</NextContinuationToken>"
                      "<Contents><Key>k</Key><Size>1</Size><ETag>\"e\"</ETag></Contents>"
                      "<CommonPrefixes><Prefix>p/</Prefix></CommonPrefixes>"
                      "</ListBucketResult>";
    size_t n = strlen(xml);
    for (size_t cut = 0; cut < n; cut++) {
        memset(&page, 0, sizeof(page));
        CHECK_EQ(s3_xml_parse_list(xml, cut, "", &page), -EIO);
        backend_list_page_clear(&page);
    }
    memset(&page, 0, sizeof(page));
    CHECK_EQ(s3_xml_parse_list(xml, n, "", &page), 0);
    CHECK_EQ(page.count, 2);
    backend_list_page_clear(&page);

    /* Random byte flips of a valid reply: any result is fine but a crash or leak. */
    char *copy = malloc(n);
    uint64_t rnd[64];
    test_fill_random(rnd, sizeof(rnd), 42);
    for (int round = 0; round < 2000; round++) {
        memcpy(copy, xml, n);
        uint64_t r = rnd[round % 64] ^ (uint64_t)round * 0x9e3779b97f4a7c15ull;
        copy[r % n] = (char)(r >> 32);
        copy[(r >> 12) % n] = (char)(r >> 40);
        memset(&page, 0, sizeof(page));
        int ret = s3_xml_parse_list(copy, n, "", &page);
        CHECK(ret == 0 || ret == -EIO);
        backend_list_page_clear(&page);
    }
    free(copy);
}

static void test_list_huge_and_empty(void)
{
    /* An empty listing. */
    struct backend_list_page page;
    CHECK_EQ(parse("<ListBucketResult><IsTruncated>false</IsTruncated>"
                   "<KeyCount>0</KeyCount></ListBucketResult>",
                   "", &page),
             0);
    CHECK_EQ(page.count, 0);
    CHECK(page.next_token == NULL);
    backend_list_page_clear(&page);

    /* 50000 entries with 900-byte keys (~47 MB of XML): parsed in chunks, all kept, sorted. */
    size_t nkeys = 50000, cap = nkeys * 1000 + 256, len = 0;
    char *xml = malloc(cap);
    char longpart[901];
    memset(longpart, 'x', 900);
    longpart[900] = '\0';
    len += (size_t)sprintf(xml + len, "<ListBucketResult><IsTruncated>false</IsTruncated>");
    for (size_t i = nkeys; i-- > 0;)
        len += (size_t)sprintf(xml + len, "<Contents><Key>%s%06zu</Key><Size>%zu</Size>"
                                          "</Contents>",
                               longpart, i, i);
    len += (size_t)sprintf(xml + len, "</ListBucketResult>");
    memset(&page, 0, sizeof(page));
    CHECK_EQ(s3_xml_parse_list(xml, len, "", &page), 0);
    CHECK_EQ(page.count, nkeys);
    if (page.count == nkeys) {
        CHECK_EQ(page.entries[0].size, 0);
        CHECK_EQ(page.entries[nkeys - 1].size, nkeys - 1);
        int sorted = 1;
        for (size_t i = 1; i < nkeys; i++)
            sorted &= strcmp(page.entries[i - 1].key, page.entries[i].key) < 0;
        CHECK(sorted);
    }
    backend_list_page_clear(&page);

    /* One field longer than any key can be is refused. */
    len = 0;
    len += (size_t)sprintf(xml + len, "<ListBucketResult><IsTruncated>false</IsTruncated>"
                                      "<Contents><Key>");
    memset(xml + len, 'k', 200000);
    len += 200000;
    len += (size_t)sprintf(xml + len, "</Key><Size>1</Size></Contents></ListBucketResult>");
    memset(&page, 0, sizeof(page));
    CHECK_EQ(s3_xml_parse_list(xml, len, "", &page), -EIO);
    backend_list_page_clear(&page);
    free(xml);
}

static void test_error_code(void)
{
    char code[64];
    const char *xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>NoSuchBucket"
                      "</Code><Message/><BucketName>b</BucketName><RequestId>x</RequestId>"
                      "</Error>";
    s3_xml_error_code(xml, strlen(xml), code, sizeof(code));
    CHECK_STR(code, "NoSuchBucket");
    s3_xml_error_code("garbage", 7, code, sizeof(code));
    CHECK_STR(code, "");
    s3_xml_error_code(NULL, 0, code, sizeof(code));
    CHECK_STR(code, "");
    const char *other = "<ListBucketResult><Code>x</Code></ListBucketResult>";
    s3_xml_error_code(other, strlen(other), code, sizeof(code));
    CHECK_STR(code, "");
    /* Truncated to the buffer. */
    s3_xml_error_code(xml, strlen(xml), code, 5);
    CHECK_STR(code, "NoSu");
}

static void test_error_code_error_response(void)
{
    char code[64];
    /* AWS STS and IAM: <ErrorResponse><Error><Code>. */
    const char *aws = "<ErrorResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">"
                      "<Error><Type>Sender</Type><Code>ExpiredTokenException</Code>"
                      "<Message>Token expired</Message></Error><RequestId>r</RequestId>"
                      "</ErrorResponse>";
    s3_xml_error_code(aws, strlen(aws), code, sizeof(code));
    CHECK_STR(code, "ExpiredTokenException");
    /* A <Code> elsewhere in an ErrorResponse is not its code. */
    const char *stray = "<ErrorResponse><Code>x</Code><Other><Code>y</Code></Other>"
                        "</ErrorResponse>";
    s3_xml_error_code(stray, strlen(stray), code, sizeof(code));
    CHECK_STR(code, "");
    /* radosgw's STS answers S3-style. */
    const char *rgw = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>AccessDenied"
                      "</Code><Message></Message><RequestId>tx0</RequestId></Error>";
    s3_xml_error_code(rgw, strlen(rgw), code, sizeof(code));
    CHECK_STR(code, "AccessDenied");
}

/* An STS reply around the given <Credentials> content. */
static char *sts_reply(const char *creds)
{
    static const char head[] =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
        "<AssumeRoleResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">"
        "<AssumeRoleResult><AssumedRoleUser><Arn>arn:aws:sts::1:assumed-role/r/s</Arn>"
        "</AssumedRoleUser><Credentials>";
    static const char tail[] = "</Credentials><PackedPolicySize>0</PackedPolicySize>"
                               "</AssumeRoleResult><ResponseMetadata><RequestId>x</RequestId>"
                               "</ResponseMetadata></AssumeRoleResponse>";
    size_t n = sizeof(head) + strlen(creds) + sizeof(tail);
    char *s = malloc(n);
    snprintf(s, n, "%s%s%s", head, creds, tail);
    return s;
}

#define STS_AK "<AccessKeyId>ASIATEMP0001</AccessKeyId>"
#define STS_SK "<SecretAccessKey>tempSecret/+=01</SecretAccessKey>"
#define STS_TOK "<SessionToken>FwoGZXIvYXdzE&amp;token==</SessionToken>"
#define STS_EXP "<Expiration>2026-12-02T16:58:26.859220720Z</Expiration>"

/* s3_xml_sts_credentials() on reply(creds); *out starts with a previous set, which must
 * survive a failure. */
static int sts_parse(const char *creds, struct aws_creds *out)
{
    char *xml = sts_reply(creds);
    CHECK_EQ(aws_creds_set(out, "OLDKEY", "oldsecret", NULL, 0), 0);
    int ret = s3_xml_sts_credentials(xml, strlen(xml), out);
    if (ret < 0) {
        CHECK_STR(out->access_key, "OLDKEY");
        CHECK_STR(out->secret_key, "oldsecret");
        CHECK(out->session_token == NULL);
    }
    free(xml);
    return ret;
}

static void test_sts_credentials(void)
{
    struct aws_creds c = {0};

    /* AWS's form, fields in the documented order. */
    CHECK_EQ(sts_parse(STS_AK STS_SK STS_TOK STS_EXP, &c), 0);
    CHECK_STR(c.access_key, "ASIATEMP0001");
    CHECK_STR(c.secret_key, "tempSecret/+=01");
    CHECK_STR(c.session_token, "FwoGZXIvYXdzE&token==");
    CHECK_EQ(c.expiration, 1796230706);

    /* radosgw's form: another order, no namespace, AssumeRoleWithWebIdentity. */
    const char *rgw = "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult>"
                      "<SubjectFromWebIdentityToken>sub</SubjectFromWebIdentityToken>"
                      "<Credentials><AccessKeyId>vABv0J9KPh04CL2dWHe</AccessKeyId>"
                      "<Expiration>2011-07-11T19:55:29Z</Expiration>"
                      "<SecretAccessKey>s3cr3t</SecretAccessKey>"
                      "<SessionToken>tok</SessionToken></Credentials>"
                      "</AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>";
    CHECK_EQ(s3_xml_sts_credentials(rgw, strlen(rgw), &c), 0);
    CHECK_STR(c.access_key, "vABv0J9KPh04CL2dWHe");
    CHECK_STR(c.secret_key, "s3cr3t");
    CHECK_STR(c.session_token, "tok");
    CHECK_EQ(c.expiration, 1310414129);

    /* A field missing, empty or given twice. */
    CHECK_EQ(sts_parse(STS_AK STS_SK STS_EXP, &c), -EIO); /* no SessionToken */
    CHECK_EQ(sts_parse(STS_AK STS_TOK STS_EXP, &c), -EIO);
    CHECK_EQ(sts_parse(STS_SK STS_TOK STS_EXP, &c), -EIO);
    CHECK_EQ(sts_parse(STS_AK STS_SK STS_TOK, &c), -EIO);
    CHECK_EQ(sts_parse(STS_AK STS_SK "<SessionToken></SessionToken>" STS_EXP, &c), -EIO);
    CHECK_EQ(sts_parse(STS_AK STS_SK "<SessionToken/>" STS_EXP, &c), -EIO);
    CHECK_EQ(sts_parse(STS_AK STS_AK STS_SK STS_TOK STS_EXP, &c), -EIO);
    /* A bad Expiration. */
    CHECK_EQ(sts_parse(STS_AK STS_SK STS_TOK "<Expiration>tomorrow</Expiration>", &c), -EIO);
    CHECK_EQ(sts_parse(STS_AK STS_SK STS_TOK "<Expiration>2026-13-02T16:58:26Z</Expiration>",
                       &c),
             -EIO);
    CHECK_EQ(sts_parse(STS_AK STS_SK STS_TOK "<Expiration>1796230706</Expiration>", &c), -EIO);
    /* Markup inside a field. */
    CHECK_EQ(sts_parse(STS_AK STS_SK "<SessionToken>a<b/>c</SessionToken>" STS_EXP, &c), -EIO);
    aws_creds_clear(&c);

    /* Truncated XML, at every length. */
    char *xml = sts_reply(STS_AK STS_SK STS_TOK STS_EXP);
    size_t len = strlen(xml);
    int ok = 1;
    for (size_t n = 0; n < len; n++) {
        CHECK_EQ(aws_creds_set(&c, "OLDKEY", "oldsecret", NULL, 0), 0);
        if (s3_xml_sts_credentials(xml, n, &c) != -EIO || strcmp(c.access_key, "OLDKEY") != 0)
            ok = 0;
    }
    CHECK(ok);
    CHECK_EQ(s3_xml_sts_credentials(xml, len, &c), 0);
    CHECK_STR(c.access_key, "ASIATEMP0001");
    free(xml);

    /* Credentials anywhere but under the root's *Result element are not the reply's. */
    const char *misplaced[] = {
        "<AssumeRoleResponse><Credentials>" STS_AK STS_SK STS_TOK STS_EXP
        "</Credentials></AssumeRoleResponse>",
        "<AssumeRoleResponse><AssumeRoleResult><X><Credentials>" STS_AK STS_SK STS_TOK STS_EXP
        "</Credentials></X></AssumeRoleResult></AssumeRoleResponse>",
        "<AssumeRoleResponse><Other>" STS_AK STS_SK STS_TOK STS_EXP
        "</Other></AssumeRoleResponse>",
        "<Error><Code>AccessDenied</Code></Error>",
        "",
        "not xml",
    };
    for (size_t i = 0; i < sizeof(misplaced) / sizeof(*misplaced); i++) {
        CHECK_EQ(aws_creds_set(&c, "OLDKEY", "oldsecret", NULL, 0), 0);
        CHECK_EQ(s3_xml_sts_credentials(misplaced[i], strlen(misplaced[i]), &c), -EIO);
        CHECK_STR(c.access_key, "OLDKEY");
    }
    CHECK_EQ(s3_xml_sts_credentials(NULL, 0, &c), -EIO);

    /* A field longer than the parser's bound. */
    size_t big = 70 * 1024;
    char *huge = malloc(big + 64);
    memset(huge, 'A', big + 64);
    memcpy(huge, "<SessionToken>", 14);
    memcpy(huge + big, "</SessionToken>", 16);
    char *creds = malloc(big + 256);
    snprintf(creds, big + 256, "%s%s%s%s", STS_AK, STS_SK, huge, STS_EXP);
    CHECK_EQ(sts_parse(creds, &c), -EIO);
    free(creds);
    free(huge);
    aws_creds_clear(&c);
}

static void test_uri_encode(void)
{
    struct {
        const char *in;
        int keep_slash;
        const char *out;
    } cases[] = {
        {"plain-key_1.txt~", 1, "plain-key_1.txt~"},
        {"dir/sub/file", 1, "dir/sub/file"},
        {"dir/sub/file", 0, "dir%2Fsub%2Ffile"},
        {"a b+c%d", 1, "a%20b%2Bc%25d"},
        {"#&?=;:@!*'()$,", 1, "%23%26%3F%3D%3B%3A%40%21%2A%27%28%29%24%2C"},
        {"\xc3\xa9\xe4\xb8\xad", 1, "%C3%A9%E4%B8%AD"},
        {"", 0, ""},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *enc = url_encode(cases[i].in, cases[i].keep_slash);
        CHECK_STR(enc, cases[i].out);
        /* Round trip through the decoder (which also maps '+' to ' ', never produced). */
        if (enc) {
            CHECK_EQ(s3_url_decode(enc), 0);
            CHECK_STR(enc, cases[i].in);
        }
        free(enc);
    }
    char s[] = "%41%4a%4A+%2b";
    CHECK_EQ(s3_url_decode(s), 0);
    CHECK_STR(s, "AJJ +");
    char t[] = "%G1", u[] = "%", v[] = "%4";
    CHECK_EQ(s3_url_decode(t), -EIO);
    CHECK_EQ(s3_url_decode(u), -EIO);
    CHECK_EQ(s3_url_decode(v), -EIO);
}

static void test_iso8601(void)
{
    int64_t ns = -1;
    CHECK_EQ(s3_parse_iso8601("1970-01-01T00:00:00Z", &ns), 0);
    CHECK_EQ(ns, 0);
    CHECK_EQ(s3_parse_iso8601("2024-05-01T12:34:56.789Z", &ns), 0);
    CHECK_EQ(ns, 1714566896789000000LL);
    CHECK_EQ(s3_parse_iso8601("2024-05-01T12:34:56.123456789123Z", &ns), 0);
    CHECK_EQ(ns, 1714566896123456789LL);
    CHECK_EQ(s3_parse_iso8601("2024-05-01T12:34:56", &ns), 0);
    CHECK_EQ(ns, 1714566896000000000LL);
    CHECK_EQ(s3_parse_iso8601("2024-02-29T00:00:00.5Z", &ns), 0);
    CHECK_EQ(ns, 1709164800500000000LL);
    CHECK_EQ(s3_parse_iso8601("", &ns), -EIO);
    CHECK_EQ(s3_parse_iso8601("2024-13-01T00:00:00Z", &ns), -EIO);
    CHECK_EQ(s3_parse_iso8601("2024-05-01 12:34:56Z", &ns), -EIO);
    CHECK_EQ(s3_parse_iso8601("2024-05-01T12:34:56.Z", &ns), -EIO);
    CHECK_EQ(s3_parse_iso8601("2024-05-01T12:34:56Zjunk", &ns), -EIO);
    CHECK_EQ(s3_parse_iso8601("Wed, 01 May 2024 12:34:56 GMT", &ns), -EIO);
}

static void test_errno_mapping(void)
{
    CHECK_EQ(s3_map_error(CURLE_OK, 200, 0, NULL), 0);
    CHECK_EQ(s3_map_error(CURLE_OK, 204, 0, NULL), 0);
    CHECK_EQ(s3_map_error(CURLE_OK, 206, 0, NULL), 0);
    CHECK_EQ(s3_map_error(CURLE_OK, 404, 0, NULL), -ENOENT);
    /* One mapping for S3 and HTTP (curl_map_error): 410 Gone is ENOENT for both. */
    CHECK_EQ(s3_map_error(CURLE_OK, 410, 0, NULL), -ENOENT);
    CHECK_EQ(curl_map_error(CURLE_OK, 410, 0), -ENOENT);
    CHECK_EQ(s3_map_error(CURLE_OK, 403, 0, NULL), -EACCES);
    CHECK_EQ(s3_map_error(CURLE_OK, 401, 0, NULL), -EACCES);
    CHECK_EQ(s3_map_error(CURLE_OK, 412, 0, NULL), -ESTALE);
    CHECK_EQ(s3_map_error(CURLE_OK, 416, 0, NULL), -ERANGE);
    CHECK_EQ(s3_map_error(CURLE_OK, 400, 0, NULL), -EINVAL);
    CHECK_EQ(s3_map_error(CURLE_OK, 301, 0, NULL), -EINVAL);
    CHECK_EQ(s3_map_error(CURLE_OK, 429, 0, NULL), -EIO);
    CHECK_EQ(s3_map_error(CURLE_OK, 500, 0, NULL), -EIO);
    CHECK_EQ(s3_map_error(CURLE_OK, 503, 0, NULL), -EIO);
    CHECK_EQ(s3_map_error(CURLE_OK, 0, 0, NULL), -EIO);
    CHECK_EQ(s3_map_error(CURLE_OPERATION_TIMEDOUT, 0, 0, NULL), -ETIMEDOUT);
    CHECK_EQ(s3_map_error(CURLE_COULDNT_CONNECT, 0, ECONNREFUSED, NULL), -ECONNREFUSED);
    CHECK_EQ(s3_map_error(CURLE_COULDNT_CONNECT, 0, 0, NULL), -ECONNREFUSED);
    CHECK_EQ(s3_map_error(CURLE_COULDNT_CONNECT, 0, EHOSTUNREACH, NULL), -EHOSTUNREACH);
    CHECK_EQ(s3_map_error(CURLE_COULDNT_CONNECT, 0, ENETUNREACH, NULL), -EHOSTUNREACH);
    CHECK_EQ(s3_map_error(CURLE_COULDNT_RESOLVE_HOST, 0, 0, NULL), -EHOSTUNREACH);
    CHECK_EQ(s3_map_error(CURLE_OUT_OF_MEMORY, 0, 0, NULL), -ENOMEM);
    CHECK_EQ(s3_map_error(CURLE_ABORTED_BY_CALLBACK, 0, 0, NULL), -EINTR); /* cancelled */
    CHECK_EQ(s3_map_error(CURLE_RECV_ERROR, 200, 0, NULL), -EIO);
    CHECK_EQ(s3_map_error(CURLE_PARTIAL_FILE, 206, 0, NULL), -EIO);
    CHECK_EQ(s3_map_error(CURLE_GOT_NOTHING, 0, 0, NULL), -EIO);
    /* 400 with a credentials code is a credentials problem; other 400s are not. */
    CHECK_EQ(s3_map_error(CURLE_OK, 400, 0, "ExpiredToken"), -EACCES);
    CHECK_EQ(s3_map_error(CURLE_OK, 400, 0, "InvalidAccessKeyId"), -EACCES);
    CHECK_EQ(s3_map_error(CURLE_OK, 400, 0, "AuthorizationHeaderMalformed"), -EINVAL);
    CHECK_EQ(s3_map_error(CURLE_OK, 400, 0, ""), -EINVAL);
    CHECK_EQ(s3_map_error(CURLE_OK, 403, 0, "SignatureDoesNotMatch"), -EACCES);
    CHECK_EQ(s3_map_error(CURLE_OK, 404, 0, "NoSuchBucket"), -ENOENT);
    CHECK_EQ(s3_map_error(CURLE_OK, 503, 0, "SlowDown"), -EIO);
    CHECK_EQ(s3_map_error(CURLE_OK, 200, 0, "ExpiredToken"), 0);
    /* A transport error wins over whatever status was seen. */
    CHECK_EQ(s3_map_error(CURLE_OPERATION_TIMEDOUT, 200, 0, NULL), -ETIMEDOUT);
}

/* s3_backend_create validates its configuration without sending a request. */
static void test_create_args(void)
{
    struct backend_conf conf = {.path_style = -1, .no_sign_request = 1};
    struct backend *be = NULL;
    char err[256];

    static const char *const bad_sources[] = {
        "file:///x", "s3://", "s3://ab", "s3://bad$bucket/x", "http://bucket",
    };
    for (size_t i = 0; i < sizeof(bad_sources) / sizeof(bad_sources[0]); i++) {
        conf.source = bad_sources[i];
        err[0] = '\0';
        CHECK_EQ(s3_backend_create(&conf, &be, err, sizeof(err)), -EINVAL);
        CHECK(be == NULL);
        CHECK(err[0] != '\0');
    }
    conf.source = "s3://bucket/pre";
    conf.endpoint = "ftp://127.0.0.1:21";
    CHECK_EQ(s3_backend_create(&conf, &be, err, sizeof(err)), -EINVAL);
    conf.endpoint = "not a url";
    CHECK_EQ(s3_backend_create(&conf, &be, err, sizeof(err)), -EINVAL);
    conf.endpoint = "http://127.0.0.1:1/?x=y";
    CHECK_EQ(s3_backend_create(&conf, &be, err, sizeof(err)), -EINVAL);
    conf.endpoint = "http://127.0.0.1:1";
    conf.region = "Bad Region";
    CHECK_EQ(s3_backend_create(&conf, &be, err, sizeof(err)), -EINVAL);
    conf.region = NULL;

    /* A valid anonymous configuration: created, caps right, ops reject bad keys locally. */
    CHECK_EQ(s3_backend_create(&conf, &be, err, sizeof(err)), 0);
    CHECK(be != NULL);
    if (be) {
        CHECK_STR(be->ops->name, "s3");
        CHECK_EQ(be->ops->caps, BACKEND_CAP_VERSIONED | BACKEND_CAP_REMOTE);
        struct backend_stat st;
        struct backend_list_page page;
        char buf[4];
        CHECK_EQ(be->ops->stat(be, "", &st), -EINVAL);
        CHECK_EQ(be->ops->stat(be, "/abs", &st), -EINVAL);
        CHECK_EQ(be->ops->list(be, "nodelim", "/", NULL, &page), -EINVAL);
        CHECK_EQ(be->ops->list(be, "/x/", "/", NULL, &page), -EINVAL);
        CHECK_EQ(be->ops->read_range(be, NULL, NULL, 0, 4, buf), -EINVAL);
        CHECK_EQ(be->ops->read_range(be, "k", NULL, UINT64_MAX, 4, buf), -EINVAL);
        CHECK_EQ(be->ops->read_range(be, "k", NULL, 0, 0, buf), 0);
        backend_destroy(be);
    }
}

/* Missing credentials: a clear error at create, without a request. */
static void test_create_no_credentials(void)
{
    char *dir = test_mkdtemp("s3creds");
    char path[512], err[512];
    struct backend_conf conf = {.source = "s3://bucket", .path_style = -1,
                                .endpoint = "http://127.0.0.1:1"};
    struct backend *be = NULL;

    snprintf(path, sizeof(path), "%s/none", dir);
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    unsetenv("AWS_SESSION_TOKEN");
    unsetenv("AWS_PROFILE");
    setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
    setenv("AWS_CONFIG_FILE", path, 1);
    setenv("AWS_EC2_METADATA_DISABLED", "true", 1); /* the chain's last step, off EC2 */
    CHECK_EQ(s3_backend_create(&conf, &be, err, sizeof(err)), -ENOENT);
    CHECK(be == NULL);
    CHECK(strstr(err, "credentials") != NULL);

    /* With a profile file: created. The secret never shows up in an error text. */
    snprintf(path, sizeof(path), "%s/creds", dir);
    const char *file = "[other]\naws_access_key_id = AKIAOTHER\n"
                       "aws_secret_access_key = SeCrEtOtHeR\n";
    CHECK_EQ(test_write_file(path, file, strlen(file)), 0);
    setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
    CHECK_EQ(s3_backend_create(&conf, &be, err, sizeof(err)), -ENOENT);
    CHECK(strstr(err, "SeCrEt") == NULL);
    CHECK(strstr(err, "'default'") != NULL);
    conf.profile = "other";
    CHECK_EQ(s3_backend_create(&conf, &be, err, sizeof(err)), 0);
    backend_destroy(be);
    /* An endpoint with a user and password (or a query) is refused without echoing it. */
    const char *bad_eps[] = {"http://user:PaSsWoRd@127.0.0.1:1", "http://127.0.0.1:1/?t=PaSsWoRd",
                             "http://127.0.0.1:1/#PaSsWoRd"};
    for (size_t i = 0; i < sizeof(bad_eps) / sizeof(*bad_eps); i++) {
        conf.endpoint = bad_eps[i];
        CHECK_EQ(s3_backend_create(&conf, &be, err, sizeof(err)), -EINVAL);
        CHECK(strstr(err, "PaSsWoRd") == NULL);
        CHECK(strstr(err, "endpoint") != NULL);
    }
    conf.endpoint = "http://127.0.0.1:1";
    unsetenv("AWS_SHARED_CREDENTIALS_FILE");
    unsetenv("AWS_CONFIG_FILE");
    unsetenv("AWS_EC2_METADATA_DISABLED");
    test_rm_rf(dir);
    free(dir);
}

int main(void)
{
    RUN(test_list_basic);
    RUN(test_list_strip_prefix);
    RUN(test_list_url_decoding);
    RUN(test_list_truncation);
    RUN(test_list_malformed);
    RUN(test_list_huge_and_empty);
    RUN(test_error_code);
    RUN(test_error_code_error_response);
    RUN(test_sts_credentials);
    RUN(test_uri_encode);
    RUN(test_iso8601);
    RUN(test_errno_mapping);
    RUN(test_create_args);
    RUN(test_create_no_credentials);
    return test_finish();
}
