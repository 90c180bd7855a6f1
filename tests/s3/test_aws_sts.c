/*
 * test_aws_sts.c - STS (aws_sts.h) against radosgw's real STS (the `rgw` ctest fixture).
 *
 * Usage: test_aws_sts STATEDIR/env. The fixture (rgw.sh) runs radosgw with STS on, a role
 * the test user may assume (PAGEFS_TEST_STS_ROLE_ARN), and a role assumable with web identity
 * tokens of a local OpenID Connect issuer (PAGEFS_TEST_STS_WEB_ROLE_ARN) whose signing key is
 * PAGEFS_TEST_OIDC_KEY: this test signs its own tokens (RS256 with libcrypto), good ones and
 * bad ones, and radosgw fetches the issuer's JWKS and checks them for real.
 *
 * Checked: endpoint resolution (pure, no server); AssumeRole success, the temporary
 * credentials then used for real signed S3 requests (refused without the session token),
 * AssumeRole from temporary credentials (the session-token header), a wrong secret, a role
 * that does not exist, durations radosgw refuses, an unreachable endpoint, a server that is
 * not STS, one that never answers (a listening socket that is never read); web identity
 * success, tokens radosgw rejects (expired, foreign key, wrong audience), the token file
 * re-read at every call, unreadable and empty token files. No error message may contain a
 * key, a secret or a token.
 */
#include "backends/aws_creds.h"
#include "backends/aws_sts.h"
#include "backends/curl_common.h"
#include "testlib.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define DURATION 900 /* radosgw's minimum */

/* The fixture's settings. */
static char endpoint[256], access_key[128], secret_key[128], region[64] = "us-east-1";
static char role_arn[256], web_role_arn[256], oidc_issuer[256], oidc_key[512], oidc_kid[64],
    oidc_client_id[64];
static char endpoint_host[256]; /* endpoint without "http://" */
static char bucket[64];
static char *tmpdir;

/* --- helpers --------------------------------------------------------------------------- */

static struct aws_sts_conf sts_conf(const char *ep)
{
    struct aws_sts_conf c = {.endpoint = ep, .region = region, .timeout_ms = 10000};
    return c;
}

/* err holds no secret of these credentials (and none of the source keys). */
static int err_clean(const char *err, const struct aws_creds *c)
{
    if (strstr(err, secret_key) || strstr(err, access_key))
        return 0;
    if (c && c->secret_key && strstr(err, c->secret_key))
        return 0;
    if (c && c->session_token && strstr(err, c->session_token))
        return 0;
    return 1;
}

/* A signed S3 request to radosgw: method (NULL: GET) on path with the given credentials,
 * with X-Amz-Security-Token when token is not NULL. Returns the request's errno; *status
 * and (when body is not NULL) the start of a 2xx body. */
static int s3_request(const char *method, const char *path, const char *ak, const char *sk,
                      const char *token, long *status, char *body, size_t bodylen)
{
    struct curl_pool *pool = NULL;
    struct curl_common_conf cc;
    struct curl_req r = {0};
    char url[512], userpwd[4096], sigv4[96];
    int ret = curl_pool_create(1, &pool);
    if (ret < 0)
        return ret;
    curl_common_conf_init(&cc, 10000, 10000, 0, NULL);
    snprintf(url, sizeof(url), "%s%s", endpoint, path);
    snprintf(userpwd, sizeof(userpwd), "%s:%s", ak, sk);
    snprintf(sigv4, sizeof(sigv4), "aws:amz:%s:s3", region);
    r.url = url;
    r.method = method;
    r.head = method && strcmp(method, "HEAD") == 0;
    if (r.head)
        r.method = NULL;
    r.sigv4 = sigv4;
    r.userpwd = userpwd;
    r.body.grow = 1;
    r.body.max = 1 << 20;
    ret = curl_req_header(&r, "x-amz-content-sha256: " EMPTY_SHA256);
    if (ret == 0 && token)
        ret = curl_req_header(&r, "X-Amz-Security-Token: %s", token);
    if (ret == 0)
        ret = curl_req_perform(pool, &cc, &r);
    *status = r.status;
    if (body && bodylen)
        snprintf(body, bodylen, "%.*s", (int)(r.body.len < bodylen ? r.body.len : bodylen - 1),
                 r.body.buf ? r.body.buf : "");
    curl_req_clear(&r);
    curl_pool_destroy(pool);
    return ret;
}

/* A signed PUT of data to path, the small independent way (libcurl's easy API: the one
 * request path sends no body with a custom method). Returns the CURLcode; *status. */
static int s3_put(const char *path, const char *ak, const char *sk, const char *token,
                  const char *data, long *status)
{
    char url[512], userpwd[4096], sigv4[96], line[4200], hex[65];
    unsigned char md[32];
    unsigned int mdlen = 0;
    struct curl_slist *hdrs = NULL;

    snprintf(url, sizeof(url), "%s%s", endpoint, path);
    snprintf(userpwd, sizeof(userpwd), "%s:%s", ak, sk);
    snprintf(sigv4, sizeof(sigv4), "aws:amz:%s:s3", region);
    EVP_Digest(data, strlen(data), md, &mdlen, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++)
        sprintf(hex + 2 * i, "%02x", md[i]);
    snprintf(line, sizeof(line), "x-amz-content-sha256: %s", hex);
    hdrs = curl_slist_append(hdrs, line);
    if (token) {
        snprintf(line, sizeof(line), "X-Amz-Security-Token: %s", token);
        hdrs = curl_slist_append(hdrs, line);
    }
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "PUT");
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, data);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(data));
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4);
    curl_easy_setopt(h, CURLOPT_USERPWD, userpwd);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 10L);
    CURLcode cc = curl_easy_perform(h);
    *status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    return (int)cc;
}

static void b64url(const unsigned char *in, size_t len, char *out, size_t outlen)
{
    size_t need = 4 * ((len + 2) / 3) + 1;
    if (need > outlen) {
        out[0] = '\0';
        return;
    }
    int n = EVP_EncodeBlock((unsigned char *)out, in, (int)len);
    while (n > 0 && out[n - 1] == '=')
        n--;
    out[n] = '\0';
    for (int i = 0; i < n; i++) {
        if (out[i] == '+')
            out[i] = '-';
        else if (out[i] == '/')
            out[i] = '_';
    }
}

/* A JWT (RS256) with the given payload, signed with key; caller frees. */
static char *jwt_sign(EVP_PKEY *key, const char *payload)
{
    char header[160], h64[256], p64[2048], s64[1024], input[2400];
    unsigned char sig[512];
    size_t siglen = sizeof(sig);

    snprintf(header, sizeof(header), "{\"alg\":\"RS256\",\"typ\":\"JWT\",\"kid\":\"%s\"}",
             oidc_kid);
    b64url((const unsigned char *)header, strlen(header), h64, sizeof(h64));
    b64url((const unsigned char *)payload, strlen(payload), p64, sizeof(p64));
    snprintf(input, sizeof(input), "%s.%s", h64, p64);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (!md || EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, key) != 1 ||
        EVP_DigestSign(md, sig, &siglen, (const unsigned char *)input, strlen(input)) != 1) {
        EVP_MD_CTX_free(md);
        return NULL;
    }
    EVP_MD_CTX_free(md);
    b64url(sig, siglen, s64, sizeof(s64));
    size_t n = strlen(input) + strlen(s64) + 2;
    char *jwt = malloc(n);
    snprintf(jwt, n, "%s.%s", input, s64);
    return jwt;
}

/* A token of the fixture's issuer for its client id, valid from now + from_s to now + to_s
 * (issued at now + from_s), with aud `aud` (NULL: the client id); signed with key. */
static char *make_token(EVP_PKEY *key, const char *aud, long from_s, long to_s)
{
    char payload[1024];
    long now = (long)time(NULL);
    snprintf(payload, sizeof(payload),
             "{\"iss\":\"%s\",\"sub\":\"pagefs-sts-test\",\"aud\":\"%s\",\"iat\":%ld,"
             "\"exp\":%ld}",
             oidc_issuer, aud ? aud : oidc_client_id, now + from_s, now + to_s);
    return jwt_sign(key, payload);
}

static EVP_PKEY *load_issuer_key(void)
{
    FILE *f = fopen(oidc_key, "r");
    if (!f)
        return NULL;
    EVP_PKEY *k = PEM_read_PrivateKey(f, NULL, NULL, NULL);
    fclose(f);
    return k;
}

/* Writes token (plus `trailer`) to the token file; returns its path (static). */
static const char *write_token(const char *token, const char *trailer)
{
    static char path[512];
    snprintf(path, sizeof(path), "%s/token", tmpdir);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(token, f);
        fputs(trailer, f);
        fclose(f);
    }
    return path;
}

/* The signature part of a JWT, a substring no error message may contain. */
static const char *token_secret_part(const char *jwt)
{
    const char *dot = strrchr(jwt, '.');
    return dot ? dot + 1 : jwt;
}

/* --- endpoint resolution (pure) -------------------------------------------------------- */

static void check_endpoint(const char *region_, const char *mode, const char *profile_ep,
                           int want_ret, const char *want)
{
    char buf[256];
    int ret = aws_sts_endpoint(region_, mode, profile_ep, buf, sizeof(buf));
    CHECK_EQ(ret, want_ret);
    if (ret != want_ret)
        fprintf(stderr, "  for region %s mode %s profile %s\n", region_ ? region_ : "(null)",
                mode ? mode : "(null)", profile_ep ? profile_ep : "(null)");
    if (want && ret == 0)
        CHECK_STR(buf, want);
}

static void test_endpoint(void)
{
    char small[24];

    unsetenv("AWS_ENDPOINT_URL_STS");
    unsetenv("AWS_ENDPOINT_URL");
    /* Regional is the default; legacy sends the SDKs' legacy regions to the global one. */
    check_endpoint("us-west-2", NULL, NULL, 0, "https://sts.us-west-2.amazonaws.com");
    check_endpoint("us-west-2", "", NULL, 0, "https://sts.us-west-2.amazonaws.com");
    check_endpoint("us-west-2", "regional", NULL, 0, "https://sts.us-west-2.amazonaws.com");
    check_endpoint("us-west-2", "legacy", NULL, 0, "https://sts.amazonaws.com");
    check_endpoint("us-east-1", "Legacy", NULL, 0, "https://sts.amazonaws.com");
    check_endpoint("eu-north-1", "legacy", NULL, 0, "https://sts.amazonaws.com");
    check_endpoint("ap-east-1", "legacy", NULL, 0, "https://sts.ap-east-1.amazonaws.com");
    check_endpoint("eu-south-1", "legacy", NULL, 0, "https://sts.eu-south-1.amazonaws.com");
    check_endpoint("us-east-1", "regional", NULL, 0, "https://sts.us-east-1.amazonaws.com");
    check_endpoint("aws-global", NULL, NULL, 0, "https://sts.amazonaws.com");
    check_endpoint("aws-global", "legacy", NULL, 0, "https://sts.amazonaws.com");
    /* China's partition. */
    check_endpoint("cn-north-1", NULL, NULL, 0, "https://sts.cn-north-1.amazonaws.com.cn");
    check_endpoint("cn-northwest-1", "legacy", NULL, 0,
                   "https://sts.cn-northwest-1.amazonaws.com.cn");
    /* Bad modes and regions. */
    check_endpoint("us-west-2", "global", NULL, -EINVAL, NULL);
    check_endpoint(NULL, NULL, NULL, -EINVAL, NULL);
    check_endpoint("", NULL, NULL, -EINVAL, NULL);
    check_endpoint("US-WEST-2", NULL, NULL, -EINVAL, NULL);
    check_endpoint("us west", NULL, NULL, -EINVAL, NULL);
    check_endpoint("us-west-2.evil.com/x", NULL, NULL, -EINVAL, NULL);
    check_endpoint("-us", NULL, NULL, -EINVAL, NULL);
    /* A profile's endpoint_url, then $AWS_ENDPOINT_URL, then $AWS_ENDPOINT_URL_STS. */
    check_endpoint("us-west-2", NULL, "http://profile.example:8080", 0,
                   "http://profile.example:8080");
    check_endpoint(NULL, NULL, "http://profile.example:8080", 0, "http://profile.example:8080");
    setenv("AWS_ENDPOINT_URL", "http://all.example", 1);
    check_endpoint("us-west-2", NULL, "http://profile.example:8080", 0, "http://all.example");
    setenv("AWS_ENDPOINT_URL_STS", "http://sts.example", 1);
    check_endpoint("us-west-2", "legacy", "http://profile.example:8080", 0, "http://sts.example");
    check_endpoint("us-west-2", "bogus", NULL, -EINVAL, NULL); /* a bad mode is still bad */
    setenv("AWS_ENDPOINT_URL_STS", "", 1);                     /* empty: not set */
    check_endpoint("us-west-2", NULL, NULL, 0, "http://all.example");
    unsetenv("AWS_ENDPOINT_URL");
    check_endpoint("us-west-2", NULL, "", 0, "https://sts.us-west-2.amazonaws.com");
    unsetenv("AWS_ENDPOINT_URL_STS");
    /* Too long for the buffer. */
    CHECK_EQ(aws_sts_endpoint("ap-southeast-2", NULL, NULL, small, sizeof(small)), -ENAMETOOLONG);
    CHECK_EQ(aws_sts_endpoint("ap-southeast-2", NULL, "http://a-rather-long-host.example", small,
                              sizeof(small)),
             -ENAMETOOLONG);
    CHECK_EQ(aws_sts_endpoint("us-west-2", NULL, NULL, small, 0), -EINVAL);
}

/* --- AssumeRole ------------------------------------------------------------------------ */

static void test_assume_role(void)
{
    struct aws_sts_conf conf = sts_conf(endpoint);
    struct aws_creds src = {0}, tmp = {0};
    char err[512] = "", body[4096], path[128];
    long status = 0;

    CHECK_EQ(aws_creds_set(&src, access_key, secret_key, NULL, 0), 0);
    int64_t now = (int64_t)time(NULL);
    int ret = aws_sts_assume_role(&conf, &src, role_arn, "pagefs-sts-test", NULL, DURATION, &tmp,
                                  err, sizeof(err));
    CHECK_EQ(ret, 0);
    if (ret != 0) {
        fprintf(stderr, "  err: %s\n", err);
        goto out;
    }
    CHECK(tmp.access_key && *tmp.access_key && strcmp(tmp.access_key, access_key) != 0);
    CHECK(tmp.secret_key && *tmp.secret_key && strcmp(tmp.secret_key, secret_key) != 0);
    CHECK(tmp.session_token && *tmp.session_token);
    CHECK(tmp.expiration >= now + DURATION - 60 && tmp.expiration <= now + DURATION + 60);

    /* The temporary credentials work for S3 (ListBuckets), with their token only. */
    CHECK_EQ(s3_request(NULL, "/", tmp.access_key, tmp.secret_key, tmp.session_token, &status, body,
                        sizeof(body)),
             0);
    CHECK_EQ(status, 200);
    CHECK(strstr(body, "<ListAllMyBucketsResult") != NULL);
    CHECK(strstr(body, bucket) != NULL); /* the test user's bucket, made in main() */
    CHECK_EQ(s3_request(NULL, "/", tmp.access_key, tmp.secret_key, NULL, &status, NULL, 0),
             -EACCES);
    CHECK_EQ(status, 403);
    /* They read and write the test user's bucket (the role's policy allows s3:*). */
    snprintf(path, sizeof(path), "/%s", bucket);
    CHECK_EQ(s3_request("HEAD", path, tmp.access_key, tmp.secret_key, tmp.session_token, &status,
                        NULL, 0),
             0);
    CHECK_EQ(status, 200);
    snprintf(path, sizeof(path), "/%s/by-role", bucket);
    CHECK_EQ(
        s3_put(path, tmp.access_key, tmp.secret_key, tmp.session_token, "role's object", &status),
        CURLE_OK);
    CHECK_EQ(status, 200);
    CHECK_EQ(s3_request(NULL, path, access_key, secret_key, NULL, &status, body, sizeof(body)), 0);
    CHECK_STR(body, "role's object");
    snprintf(path, sizeof(path), "/%s/by-user", bucket);
    CHECK_EQ(s3_request("GET", path, tmp.access_key, tmp.secret_key, tmp.session_token, &status,
                        body, sizeof(body)),
             0);
    CHECK_STR(body, "user's object");

    /* Defaults: a generated session name, the default duration (the role's maximum); an
     * external id with the characters that need encoding in a form ('+', which AWS allows,
     * radosgw 16.2 refuses as InvalidArgument: not used here). */
    struct aws_creds tmp2 = {0};
    now = (int64_t)time(NULL);
    CHECK_EQ(aws_sts_assume_role(&conf, &src, role_arn, NULL, "ext/id=with,all.chars@rgw:allows", 0,
                                 &tmp2, err, sizeof(err)),
             0);
    CHECK(tmp2.expiration >= now + AWS_STS_DEFAULT_DURATION - 60 &&
          tmp2.expiration <= now + AWS_STS_DEFAULT_DURATION + 60);
    CHECK(tmp2.access_key && strcmp(tmp2.access_key, tmp.access_key) != 0);
    aws_creds_clear(&tmp2);
out:
    aws_creds_clear(&tmp);
    aws_creds_clear(&src);
}

/* Source credentials that are temporary themselves: the call carries X-Amz-Security-Token
 * (the role's trust policy admits its own session "chain"). */
static void test_assume_role_chained(void)
{
    struct aws_sts_conf conf = sts_conf(endpoint);
    struct aws_creds src = {0}, first = {0}, second = {0}, no_token = {0};
    char err[512] = "";
    long status;

    CHECK_EQ(aws_creds_set(&src, access_key, secret_key, NULL, 0), 0);
    CHECK_EQ(aws_sts_assume_role(&conf, &src, role_arn, "chain", NULL, DURATION, &first, err,
                                 sizeof(err)),
             0);
    if (!first.session_token)
        goto out;
    int ret = aws_sts_assume_role(&conf, &first, role_arn, "chain", NULL, DURATION, &second, err,
                                  sizeof(err));
    CHECK_EQ(ret, 0);
    if (ret != 0)
        fprintf(stderr, "  err: %s\n", err);
    CHECK(second.session_token && strcmp(second.session_token, first.session_token) != 0);
    if (second.session_token) {
        CHECK_EQ(s3_request(NULL, "/", second.access_key, second.secret_key, second.session_token,
                            &status, NULL, 0),
                 0);
    }
    /* The same temporary keys without their token are refused. */
    CHECK_EQ(aws_creds_set(&no_token, first.access_key, first.secret_key, NULL, 0), 0);
    CHECK_EQ(aws_sts_assume_role(&conf, &no_token, role_arn, "chain", NULL, DURATION, &second, err,
                                 sizeof(err)),
             -EACCES);
    CHECK(strstr(err, "AccessDenied") != NULL);
    CHECK(err_clean(err, &first));
out:
    aws_creds_clear(&no_token);
    aws_creds_clear(&second);
    aws_creds_clear(&first);
    aws_creds_clear(&src);
}

static void test_assume_role_refused(void)
{
    struct aws_sts_conf conf = sts_conf(endpoint);
    struct aws_creds src = {0}, out = {0};
    char err[512] = "", want[600], nosuch[300];

    /* A wrong secret. */
    CHECK_EQ(aws_creds_set(&src, access_key, "wrong-secret-0123456789", NULL, 0), 0);
    CHECK_EQ(
        aws_sts_assume_role(&conf, &src, role_arn, NULL, NULL, DURATION, &out, err, sizeof(err)),
        -EACCES);
    snprintf(want, sizeof(want), "STS AssumeRole of %s at %s: AccessDenied", role_arn,
             endpoint_host);
    CHECK_STR(err, want);
    CHECK(!strstr(err, "wrong-secret-0123456789"));
    CHECK(out.access_key == NULL);
    /* An unknown key. */
    CHECK_EQ(aws_creds_set(&src, "NOSUCHKEY00000000000", secret_key, NULL, 0), 0);
    CHECK_EQ(
        aws_sts_assume_role(&conf, &src, role_arn, NULL, NULL, DURATION, &out, err, sizeof(err)),
        -EACCES);
    CHECK(err_clean(err, NULL));

    CHECK_EQ(aws_creds_set(&src, access_key, secret_key, NULL, 0), 0);
    /* A role that does not exist: radosgw says NoSuchEntity (404), a bad configuration. */
    snprintf(nosuch, sizeof(nosuch), "arn:aws:iam:::role/pagefs-no-such-role");
    CHECK_EQ(aws_sts_assume_role(&conf, &src, nosuch, NULL, NULL, DURATION, &out, err, sizeof(err)),
             -EINVAL);
    snprintf(want, sizeof(want), "STS AssumeRole of %s at %s: NoSuchEntity", nosuch, endpoint_host);
    CHECK_STR(err, want);
    /* Not an ARN at all. */
    CHECK_EQ(aws_sts_assume_role(&conf, &src, "not-an-arn", NULL, NULL, DURATION, &out, err,
                                 sizeof(err)),
             -EINVAL);
    CHECK(strstr(err, "InvalidArgument") != NULL);
    /* Durations outside radosgw's bounds: below its 900 s minimum, above the role's 3600 s
     * maximum. */
    CHECK_EQ(aws_sts_assume_role(&conf, &src, role_arn, NULL, NULL, 60, &out, err, sizeof(err)),
             -EINVAL);
    snprintf(want, sizeof(want), "STS AssumeRole of %s at %s: InvalidArgument", role_arn,
             endpoint_host);
    CHECK_STR(err, want);
    CHECK_EQ(aws_sts_assume_role(&conf, &src, role_arn, NULL, NULL, 7200, &out, err, sizeof(err)),
             -EINVAL);
    CHECK(out.access_key == NULL);
    CHECK(err_clean(err, NULL));

    /* Nothing listens on 127.0.0.1:1: refused at once. */
    struct aws_sts_conf dead = sts_conf("http://127.0.0.1:1");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_EQ(
        aws_sts_assume_role(&dead, &src, role_arn, NULL, NULL, DURATION, &out, err, sizeof(err)),
        -ECONNREFUSED);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 < 2000);
    snprintf(want, sizeof(want), "STS AssumeRole of %s at 127.0.0.1:1: %s", role_arn,
             strerror(ECONNREFUSED));
    CHECK_STR(err, want);

    /* Not an STS endpoint: the OIDC issuer's http.server answers a POST with 501. */
    struct aws_sts_conf not_sts = sts_conf(oidc_issuer);
    CHECK_EQ(
        aws_sts_assume_role(&not_sts, &src, role_arn, NULL, NULL, DURATION, &out, err, sizeof(err)),
        -EIO);
    snprintf(want, sizeof(want), "STS AssumeRole of %s at %s: HTTP 501", role_arn,
             oidc_issuer + strlen("http://"));
    CHECK_STR(err, want);

    /* A server that takes the connection and never answers: the call's timeout. */
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t salen = sizeof(sa);
    char silent[64];
    CHECK(lfd >= 0 && bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(lfd, 4) == 0 &&
          getsockname(lfd, (struct sockaddr *)&sa, &salen) == 0);
    snprintf(silent, sizeof(silent), "http://127.0.0.1:%d", ntohs(sa.sin_port));
    struct aws_sts_conf slow = sts_conf(silent);
    slow.timeout_ms = 300;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_EQ(
        aws_sts_assume_role(&slow, &src, role_arn, NULL, NULL, DURATION, &out, err, sizeof(err)),
        -ETIMEDOUT);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    CHECK(ms >= 250 && ms < 3000);
    CHECK(strstr(err, silent + strlen("http://")) != NULL);
    close(lfd);

    /* Arguments. */
    CHECK_EQ(aws_sts_assume_role(NULL, &src, role_arn, NULL, NULL, 0, &out, err, sizeof(err)),
             -EINVAL);
    struct aws_sts_conf noep = sts_conf(NULL);
    CHECK_EQ(aws_sts_assume_role(&noep, &src, role_arn, NULL, NULL, 0, &out, err, sizeof(err)),
             -EINVAL);
    CHECK_EQ(aws_sts_assume_role(&conf, &src, "", NULL, NULL, 0, &out, err, sizeof(err)), -EINVAL);
    struct aws_creds empty = {0};
    CHECK_EQ(aws_sts_assume_role(&conf, &empty, role_arn, NULL, NULL, 0, &out, err, sizeof(err)),
             -EINVAL);
    CHECK(out.access_key == NULL);
    aws_creds_clear(&src);
}

/* --- AssumeRoleWithWebIdentity --------------------------------------------------------- */

static void test_web_identity(void)
{
    struct aws_sts_conf conf = sts_conf(endpoint);
    struct aws_creds out = {0};
    char err[512] = "", want[600];
    long status;
    EVP_PKEY *key = load_issuer_key();
    EVP_PKEY *foreign = EVP_RSA_gen(2048);
    char *good = NULL, *expired = NULL, *forged = NULL, *wrong_aud = NULL;

    CHECK(key != NULL);
    CHECK(foreign != NULL);
    if (!key || !foreign)
        goto out;
    good = make_token(key, NULL, -10, 600);
    expired = make_token(key, NULL, -7200, -3600);
    forged = make_token(foreign, NULL, -10, 600);
    wrong_aud = make_token(key, "someone-else", -10, 600);
    CHECK(good && expired && forged && wrong_aud);
    if (!good || !expired || !forged || !wrong_aud)
        goto out;

    /* A good token (with the trailing newline files usually have). */
    const char *file = write_token(good, "\n");
    int64_t now = (int64_t)time(NULL);
    int ret = aws_sts_assume_role_web_identity(&conf, web_role_arn, "pagefs-web-test", file,
                                               DURATION, &out, err, sizeof(err));
    CHECK_EQ(ret, 0);
    if (ret != 0)
        fprintf(stderr, "  err: %s\n", err);
    CHECK(out.access_key && *out.access_key && out.secret_key && *out.secret_key);
    CHECK(out.session_token && *out.session_token);
    CHECK(out.expiration >= now + DURATION - 60 && out.expiration <= now + DURATION + 60);
    if (out.session_token) {
        CHECK_EQ(s3_request(NULL, "/", out.access_key, out.secret_key, out.session_token, &status,
                            NULL, 0),
                 0);
        CHECK_EQ(status, 200);
    }
    aws_creds_clear(&out);

    /* Tokens radosgw rejects, each after fetching the issuer's keys: expired, signed by
     * another key, for another audience. */
    const char *bad[] = {expired, forged, wrong_aud};
    snprintf(want, sizeof(want), "STS AssumeRoleWithWebIdentity of %s at %s: AccessDenied",
             web_role_arn, endpoint_host);
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        file = write_token(bad[i], "");
        CHECK_EQ(aws_sts_assume_role_web_identity(&conf, web_role_arn, NULL, file, DURATION, &out,
                                                  err, sizeof(err)),
                 -EACCES);
        CHECK_STR(err, want);
        CHECK(!strstr(err, token_secret_part(bad[i])));
        CHECK(out.access_key == NULL);
    }
    /* Not a JWT at all; a good token for a role that trusts another principal. */
    file = write_token("not-a-jwt", " \n\t");
    CHECK_EQ(aws_sts_assume_role_web_identity(&conf, web_role_arn, NULL, file, DURATION, &out, err,
                                              sizeof(err)),
             -EACCES);
    CHECK(!strstr(err, "not-a-jwt"));
    file = write_token(good, "");
    CHECK_EQ(aws_sts_assume_role_web_identity(&conf, role_arn, NULL, file, DURATION, &out, err,
                                              sizeof(err)),
             -EACCES);
    CHECK(strstr(err, role_arn) && !strstr(err, token_secret_part(good)));

    /* The file is read at every call: the same path, first expired, then good again. */
    file = write_token(expired, "\n");
    CHECK_EQ(aws_sts_assume_role_web_identity(&conf, web_role_arn, NULL, file, DURATION, &out, err,
                                              sizeof(err)),
             -EACCES);
    file = write_token(good, "\r\n");
    CHECK_EQ(aws_sts_assume_role_web_identity(&conf, web_role_arn, NULL, file, DURATION, &out, err,
                                              sizeof(err)),
             0);
    CHECK(out.session_token != NULL);
    aws_creds_clear(&out);

    /* Unreachable STS, with a good token: the transport's errno, and no token in err. */
    struct aws_sts_conf dead = sts_conf("http://127.0.0.1:1");
    CHECK_EQ(aws_sts_assume_role_web_identity(&dead, web_role_arn, NULL, file, DURATION, &out, err,
                                              sizeof(err)),
             -ECONNREFUSED);
    CHECK(strstr(err, "127.0.0.1:1") && !strstr(err, token_secret_part(good)));

    /* Token files that cannot be used. */
    char path[600];
    snprintf(path, sizeof(path), "%s/no-such-token", tmpdir);
    CHECK_EQ(aws_sts_assume_role_web_identity(&conf, web_role_arn, NULL, path, DURATION, &out, err,
                                              sizeof(err)),
             -ENOENT);
    CHECK(strstr(err, path) != NULL);
    CHECK_EQ(aws_sts_assume_role_web_identity(&conf, web_role_arn, NULL, tmpdir, DURATION, &out,
                                              err, sizeof(err)),
             -ENOENT);
    file = write_token("", " \n\n");
    CHECK_EQ(aws_sts_assume_role_web_identity(&conf, web_role_arn, NULL, file, DURATION, &out, err,
                                              sizeof(err)),
             -EINVAL);
    CHECK(strstr(err, "empty") != NULL);
    CHECK_EQ(aws_sts_assume_role_web_identity(&conf, web_role_arn, NULL, NULL, DURATION, &out, err,
                                              sizeof(err)),
             -EINVAL);
    CHECK(out.access_key == NULL);
out:
    free(good);
    free(expired);
    free(forged);
    free(wrong_aud);
    EVP_PKEY_free(key);
    EVP_PKEY_free(foreign);
}

/* --- setup ----------------------------------------------------------------------------- */

static int read_env(const char *path)
{
    static const struct {
        const char *name;
        char *dst;
        size_t len;
    } vars[] = {
        {"PAGEFS_TEST_STS_ENDPOINT", endpoint, sizeof(endpoint)},
        {"AWS_ACCESS_KEY_ID", access_key, sizeof(access_key)},
        {"AWS_SECRET_ACCESS_KEY", secret_key, sizeof(secret_key)},
        {"AWS_REGION", region, sizeof(region)},
        {"PAGEFS_TEST_STS_ROLE_ARN", role_arn, sizeof(role_arn)},
        {"PAGEFS_TEST_STS_WEB_ROLE_ARN", web_role_arn, sizeof(web_role_arn)},
        {"PAGEFS_TEST_OIDC_ISSUER", oidc_issuer, sizeof(oidc_issuer)},
        {"PAGEFS_TEST_OIDC_KEY", oidc_key, sizeof(oidc_key)},
        {"PAGEFS_TEST_OIDC_KID", oidc_kid, sizeof(oidc_kid)},
        {"PAGEFS_TEST_OIDC_CLIENT_ID", oidc_client_id, sizeof(oidc_client_id)},
    };
    FILE *f = fopen(path, "r");
    char line[1024];
    if (!f) {
        fprintf(stderr, "cannot read %s: %s\n", path, strerror(errno));
        return -1;
    }
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\r\n")] = '\0';
        char *eq = strchr(line, '=');
        if (!eq)
            continue;
        *eq = '\0';
        for (size_t i = 0; i < sizeof(vars) / sizeof(*vars); i++) {
            if (strcmp(line, vars[i].name) == 0)
                snprintf(vars[i].dst, vars[i].len, "%s", eq + 1);
        }
    }
    fclose(f);
    for (size_t i = 0; i < sizeof(vars) / sizeof(*vars); i++) {
        if (!vars[i].dst[0]) {
            fprintf(stderr, "%s lacks %s (an rgw.sh without STS?)\n", path, vars[i].name);
            return -1;
        }
    }
    const char *h = strstr(endpoint, "://");
    snprintf(endpoint_host, sizeof(endpoint_host), "%s", h ? h + 3 : endpoint);
    return 0;
}

/* The test user's own bucket and object, for the role's credentials to find. */
static void setup(void)
{
    char path[128];
    long status = 0;
    snprintf(path, sizeof(path), "/%s", bucket);
    CHECK_EQ(s3_request("PUT", path, access_key, secret_key, NULL, &status, NULL, 0), 0);
    CHECK_EQ(status, 200);
}

static void setup_object(void)
{
    char path[128];
    long status = 0;
    snprintf(path, sizeof(path), "/%s/by-user", bucket);
    CHECK_EQ(s3_put(path, access_key, secret_key, NULL, "user's object", &status), CURLE_OK);
    CHECK_EQ(status, 200);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s STATEDIR/env\n", argv[0]);
        return 2;
    }
    if (read_env(argv[1]) < 0)
        return 1;
    curl_common_global_init();
    snprintf(bucket, sizeof(bucket), "pagefs-sts%ld-%d", (long)time(NULL), (int)getpid());
    tmpdir = test_mkdtemp("aws_sts");

    RUN(test_endpoint);
    RUN(setup);
    RUN(setup_object);
    RUN(test_assume_role);
    RUN(test_assume_role_chained);
    RUN(test_assume_role_refused);
    RUN(test_web_identity);

    test_rm_rf(tmpdir);
    free(tmpdir);
    return test_finish();
}
