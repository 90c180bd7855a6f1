/*
 * aws_sts.c - AWS STS AssumeRole and AssumeRoleWithWebIdentity (see aws_sts.h).
 *
 * Design: one call is one form POST (application/x-www-form-urlencoded, every value
 * percent-encoded with url_encode()) over curl_common.c, on a private curl pool made and
 * destroyed within the call: these calls are rare (once per credential lifetime), so keeping
 * a connection alive between them buys nothing. AssumeRole is signed with libcurl's SigV4
 * (CURLOPT_AWS_SIGV4 "aws:amz:REGION:sts", per request) with the source credentials, and
 * carries X-Amz-Security-Token (which libcurl then signs with the other header lines) when
 * they are temporary. libcurl hashes the form body itself, which AWS STS and radosgw 16.2's
 * STS both accept, so no x-amz-content-sha256 line is sent (radosgw's S3 API needs one; its
 * STS does not, measured). The global endpoint https://sts.amazonaws.com is signed for
 * us-east-1 whatever the configured region, as the SDKs do. AssumeRoleWithWebIdentity is not
 * signed: the web identity token, read from its file at every call, is the proof.
 *
 * A 2xx reply's <Credentials> is parsed by s3_xml_sts_credentials(); an error reply's <Code>
 * by s3_xml_error_code() (S3-style <Error> from radosgw, <ErrorResponse><Error> from AWS) and
 * mapped to errno by sts_map_code(). Error messages name the call, the role ARN, the
 * endpoint's host and the code or the transport's reason; never a key, a secret, a token.
 *
 * Invariants: every buffer of ours that held a secret (the "KEY:SECRET" string, the session
 * token's header line, the web identity token and the form body that carries it, the reply
 * body with the new credentials) is wiped with explicit_bzero() before it is freed, on every
 * path; libcurl's own copies are not ours to wipe. No state outlives a call; no locks.
 */
#include "backends/aws_sts.h"

#include "backends/curl_common.h"
#include "backends/s3_xml.h"
#include "backends/urlcode.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define STS_VERSION "2011-06-15"
#define STS_DEFAULT_TIMEOUT_MS 10000
#define STS_REPLY_MAX (64 * 1024)      /* a reply with credentials is a few KiB */
#define STS_ERRBODY_MAX 4096           /* the start of an error reply, where <Code> is */
#define STS_TOKEN_FILE_MAX (64 * 1024) /* a web identity token file, at most (AWS: 20000) */
#define STS_GLOBAL_ENDPOINT "https://sts.amazonaws.com"
#define STS_GLOBAL_HOST "sts.amazonaws.com"
#define STS_GLOBAL_REGION "us-east-1"

/* The regions the SDKs send to the global endpoint when sts_regional_endpoints is "legacy"
 * (botocore's LEGACY_GLOBAL_STS_REGIONS, aws-sdk-go's sts_legacy_regions.go). */
static const char *const legacy_global_regions[] = {
    "ap-northeast-1", "ap-south-1",   "ap-southeast-1", "ap-southeast-2",
    "aws-global",     "ca-central-1", "eu-central-1",   "eu-north-1",
    "eu-west-1",      "eu-west-2",    "eu-west-3",      "sa-east-1",
    "us-east-1",      "us-east-2",    "us-west-1",      "us-west-2",
};

/* A region name as AWS spells them: lower-case letters, digits and inner '-', at most 63. */
static int region_valid(const char *r)
{
    size_t n = r ? strlen(r) : 0;
    if (n == 0 || n > 63 || r[0] == '-' || r[n - 1] == '-')
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = r[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
            return 0;
    }
    return 1;
}

static int copy_out(char *buf, size_t len, const char *s)
{
    int n = snprintf(buf, len, "%s", s);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int aws_sts_endpoint(const char *region, const char *regional_mode, const char *profile_endpoint,
                     char *buf, size_t len)
{
    int legacy = 0, n;
    const char *v;

    if (!buf || len == 0)
        return -EINVAL;
    buf[0] = '\0';
    if (regional_mode && *regional_mode) {
        if (strcasecmp(regional_mode, "legacy") == 0)
            legacy = 1;
        else if (strcasecmp(regional_mode, "regional") != 0)
            return -EINVAL;
    }
    v = getenv("AWS_ENDPOINT_URL_STS");
    if (v && *v)
        return copy_out(buf, len, v);
    v = getenv("AWS_ENDPOINT_URL");
    if (v && *v)
        return copy_out(buf, len, v);
    if (profile_endpoint && *profile_endpoint)
        return copy_out(buf, len, profile_endpoint);
    if (!region_valid(region))
        return -EINVAL;
    /* aws-global names the global endpoint in either mode (the endpoint model's own entry). */
    if (strcmp(region, "aws-global") == 0)
        return copy_out(buf, len, STS_GLOBAL_ENDPOINT);
    if (legacy) {
        for (size_t i = 0; i < sizeof(legacy_global_regions) / sizeof(*legacy_global_regions);
             i++) {
            if (strcmp(region, legacy_global_regions[i]) == 0)
                return copy_out(buf, len, STS_GLOBAL_ENDPOINT);
        }
    }
    n = snprintf(buf, len, "https://sts.%s.amazonaws.com%s", region,
                 strncmp(region, "cn-", 3) == 0 ? ".cn" : "");
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* The host[:port] of url, for error messages: what follows "scheme://" up to the path. */
static void url_host(const char *url, char *out, size_t outlen)
{
    const char *p = strstr(url, "://");
    p = p ? p + 3 : url;
    size_t n = strcspn(p, "/?#");
    snprintf(out, outlen, "%.*s", (int)(n < 255 ? n : 255), p);
}

/* A growing form body "k=v&k=v"; values are percent-encoded. Wiped when freed, since a value
 * may be a token. */
struct form {
    char *buf;
    size_t len, cap;
    int err;
};

static void form_add(struct form *f, const char *key, const char *value)
{
    if (f->err)
        return;
    char *enc = url_encode(value, 0);
    if (!enc) {
        f->err = -ENOMEM;
        return;
    }
    size_t need = f->len + strlen(key) + strlen(enc) + 3;
    if (need > f->cap) {
        size_t cap = f->cap ? f->cap : 512;
        while (cap < need)
            cap *= 2;
        char *grown = malloc(cap); /* not realloc(): the old buffer is wiped */
        if (!grown) {
            f->err = -ENOMEM;
            goto out_free_enc;
        }
        if (f->buf) {
            memcpy(grown, f->buf, f->len + 1);
            explicit_bzero(f->buf, f->cap);
            free(f->buf);
        }
        f->buf = grown;
        f->cap = cap;
    }
    f->len += (size_t)sprintf(f->buf + f->len, "%s%s=%s", f->len ? "&" : "", key, enc);
out_free_enc:
    explicit_bzero(enc, strlen(enc));
    free(enc);
}

static void form_free(struct form *f)
{
    if (f->buf) {
        explicit_bzero(f->buf, f->cap);
        free(f->buf);
    }
    f->buf = NULL;
}

/* STS's error codes to errno: refusals of the caller's identity or token -EACCES, bad
 * parameters -EINVAL, the codes AWS documents as transient (the identity provider could not
 * be reached, throttling) -EIO; any other code, or none, follows the status: 401 and 403
 * -EACCES, 429 -EIO, other 4xx -EINVAL (radosgw's NoSuchEntity for a role that does not
 * exist, its InvalidArgument for a duration out of bounds). */
static int sts_map_code(const char *code, long status)
{
    static const char *const denied[] = {"AccessDenied",          "InvalidClientTokenId",
                                         "SignatureDoesNotMatch", "InvalidIdentityToken",
                                         "IncompleteSignature",   "MissingAuthenticationToken",
                                         "InvalidAccessKeyId",    "IDPRejectedClaim"};
    static const char *const transient[] = {"IDPCommunicationError", "Throttling",
                                            "ThrottlingException",   "RequestLimitExceeded",
                                            "ServiceUnavailable",    "InternalFailure"};

    if (code && *code) {
        for (size_t i = 0; i < sizeof(denied) / sizeof(*denied); i++) {
            if (strcmp(code, denied[i]) == 0)
                return -EACCES;
        }
        if (strncmp(code, "ExpiredToken", 12) == 0)
            return -EACCES;
        for (size_t i = 0; i < sizeof(transient) / sizeof(*transient); i++) {
            if (strcmp(code, transient[i]) == 0)
                return -EIO;
        }
        if (strcmp(code, "ValidationError") == 0 || strcmp(code, "MalformedPolicyDocument") == 0 ||
            strncmp(code, "InvalidParameter", 16) == 0)
            return -EINVAL;
    }
    if (status == 401 || status == 403)
        return -EACCES;
    if (status == 429)
        return -EIO;
    return status >= 400 && status < 500 ? -EINVAL : -EIO;
}

/* code as it may appear in an error message: an error code's characters only. */
static void sanitize_code(char *code)
{
    for (char *p = code; *p; p++) {
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
              *p == '.' || *p == '_' || *p == '-' || *p == ':'))
            *p = '?';
    }
}

/* One STS call: POSTs the form to conf->endpoint (signed when userpwd is not NULL, with the
 * session token line when token is not NULL) and parses the reply into *out. `what` names
 * the call for err ("AssumeRole"). */
static int sts_call(const struct aws_sts_conf *conf, const char *what, const char *role_arn,
                    const struct form *f, const char *userpwd, const char *token,
                    struct aws_creds *out, char *err, size_t errlen)
{
    struct curl_common_conf cc;
    struct curl_pool *pool = NULL;
    struct curl_req r = {0};
    char errbody[STS_ERRBODY_MAX], code[128] = "", host[256], sigv4[96];
    int ret;

    url_host(conf->endpoint, host, sizeof(host));
    curl_common_conf_init(&cc, conf->timeout_ms, STS_DEFAULT_TIMEOUT_MS, 0, "PAGEFS_S3_DEBUG");
    ret = curl_pool_create(1, &pool);
    if (ret < 0) {
        snprintf(err, errlen, "STS %s of %s at %s: %s", what, role_arn, host, strerror(-ret));
        goto out;
    }
    r.url = conf->endpoint;
    r.post_body = f->buf;
    r.post_len = f->len;
    r.post_form = 1;
    r.body.grow = 1;
    r.body.max = STS_REPLY_MAX;
    r.errbody = errbody;
    r.errcap = sizeof(errbody);
    if (userpwd) {
        const char *region = conf->region && *conf->region ? conf->region : STS_GLOBAL_REGION;
        if (strcmp(region, "aws-global") == 0 || strcasecmp(host, STS_GLOBAL_HOST) == 0)
            region = STS_GLOBAL_REGION;
        snprintf(sigv4, sizeof(sigv4), "aws:amz:%s:sts", region);
        r.sigv4 = sigv4;
        r.userpwd = userpwd;
        if (token && *token) {
            ret = curl_req_header(&r, "X-Amz-Security-Token: %s", token);
            if (ret < 0) {
                snprintf(err, errlen, "STS %s of %s at %s: %s", what, role_arn, host,
                         strerror(-ret));
                goto out_clear;
            }
        }
    }
    ret = curl_req_perform(pool, &cc, &r);
    if (ret == 0) {
        ret = s3_xml_sts_credentials(r.body.buf, r.body.len, out);
        if (ret < 0)
            snprintf(err, errlen, "STS %s of %s at %s: %s", what, role_arn, host,
                     ret == -ENOMEM ? strerror(ENOMEM) : "reply without usable credentials");
        goto out_clear;
    }
    /* An error status (not a transport failure, which wins over any status): the reply's
     * code says why. */
    int from_status = r.status >= 300 && ret == curl_map_error(CURLE_OK, r.status, 0);
    s3_xml_error_code(errbody, r.errlen, code, sizeof(code));
    sanitize_code(code);
    if (from_status && r.status >= 400 && r.status < 500) {
        ret = sts_map_code(code, r.status);
        if (*code)
            snprintf(err, errlen, "STS %s of %s at %s: %s", what, role_arn, host, code);
        else
            snprintf(err, errlen, "STS %s of %s at %s: HTTP %ld", what, role_arn, host, r.status);
    } else if (from_status) { /* 5xx: transient; 3xx: not an STS endpoint */
        snprintf(err, errlen, "STS %s of %s at %s: HTTP %ld%s%s", what, role_arn, host, r.status,
                 *code ? " " : "", code);
    } else {
        snprintf(err, errlen, "STS %s of %s at %s: %s", what, role_arn, host, strerror(-ret));
    }
out_clear:
    if (r.body.buf)
        explicit_bzero(r.body.buf, r.body.cap);
    for (struct curl_slist *h = r.hdrs; h; h = h->next) /* the session token's line */
        explicit_bzero(h->data, strlen(h->data));
    curl_req_clear(&r);
    curl_pool_destroy(pool);
out:
    return ret;
}

static void default_session_name(char *buf, size_t len, const char *session_name)
{
    if (session_name && *session_name)
        snprintf(buf, len, "%s", session_name);
    else
        snprintf(buf, len, "pagefs-%lld", (long long)time(NULL));
}

int aws_sts_assume_role(const struct aws_sts_conf *conf, const struct aws_creds *source,
                        const char *role_arn, const char *session_name, const char *external_id,
                        int duration_s, struct aws_creds *out, char *err, size_t errlen)
{
    struct form f = {0};
    char session[128], duration[16], *userpwd = NULL;
    size_t upl;
    int ret;

    if (errlen)
        err[0] = '\0';
    if (!conf || !conf->endpoint || !*conf->endpoint || !source || !source->access_key ||
        !*source->access_key || !source->secret_key || !*source->secret_key || !role_arn ||
        !*role_arn || !out) {
        snprintf(err, errlen, "STS AssumeRole: missing endpoint, role ARN or source credentials");
        return -EINVAL;
    }
    default_session_name(session, sizeof(session), session_name);
    snprintf(duration, sizeof(duration), "%d",
             duration_s > 0 ? duration_s : AWS_STS_DEFAULT_DURATION);
    form_add(&f, "Action", "AssumeRole");
    form_add(&f, "Version", STS_VERSION);
    form_add(&f, "RoleArn", role_arn);
    form_add(&f, "RoleSessionName", session);
    form_add(&f, "DurationSeconds", duration);
    if (external_id && *external_id)
        form_add(&f, "ExternalId", external_id);
    if (f.err) {
        ret = f.err;
        snprintf(err, errlen, "STS AssumeRole of %s: %s", role_arn, strerror(-ret));
        goto out_free_form;
    }
    upl = strlen(source->access_key) + strlen(source->secret_key) + 2;
    userpwd = malloc(upl);
    if (!userpwd) {
        ret = -ENOMEM;
        snprintf(err, errlen, "STS AssumeRole of %s: %s", role_arn, strerror(ENOMEM));
        goto out_free_form;
    }
    snprintf(userpwd, upl, "%s:%s", source->access_key, source->secret_key);
    ret = sts_call(conf, "AssumeRole", role_arn, &f, userpwd, source->session_token, out, err,
                   errlen);
    explicit_bzero(userpwd, upl);
    free(userpwd);
out_free_form:
    form_free(&f);
    return ret;
}

/* Reads the token file into a new NUL-terminated buffer (caller wipes and frees), trailing
 * whitespace trimmed. Returns 0, -ENOENT when it cannot be read (err says why), -EINVAL
 * when it is empty or too large, -ENOMEM. */
static int read_token(const char *path, char **out, size_t *outlen, char *err, size_t errlen)
{
    struct stat sb;
    char *buf = NULL;
    size_t len = 0;
    int fd, ret;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "web identity token file %s: %s", path, strerror(errno));
        return -ENOENT;
    }
    if (fstat(fd, &sb) < 0) {
        snprintf(err, errlen, "web identity token file %s: %s", path, strerror(errno));
        ret = -ENOENT;
        goto out_close;
    }
    if (!S_ISREG(sb.st_mode)) {
        snprintf(err, errlen, "web identity token file %s: not a regular file", path);
        ret = -ENOENT;
        goto out_close;
    }
    if (sb.st_size > STS_TOKEN_FILE_MAX) {
        snprintf(err, errlen, "web identity token file %s: larger than %d bytes", path,
                 STS_TOKEN_FILE_MAX);
        ret = -EINVAL;
        goto out_close;
    }
    buf = malloc(STS_TOKEN_FILE_MAX + 1);
    if (!buf) {
        ret = -ENOMEM;
        snprintf(err, errlen, "web identity token file %s: %s", path, strerror(ENOMEM));
        goto out_close;
    }
    for (;;) { /* to EOF: the file may have grown since fstat */
        ssize_t n = read(fd, buf + len, STS_TOKEN_FILE_MAX + 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            snprintf(err, errlen, "web identity token file %s: %s", path, strerror(errno));
            ret = -ENOENT;
            goto out_wipe;
        }
        if (n == 0)
            break;
        len += (size_t)n;
        if (len > STS_TOKEN_FILE_MAX) {
            snprintf(err, errlen, "web identity token file %s: larger than %d bytes", path,
                     STS_TOKEN_FILE_MAX);
            ret = -EINVAL;
            goto out_wipe;
        }
    }
    while (len > 0 && (buf[len - 1] == ' ' || buf[len - 1] == '\t' || buf[len - 1] == '\n' ||
                       buf[len - 1] == '\r' || buf[len - 1] == '\f' || buf[len - 1] == '\v'))
        len--;
    buf[len] = '\0';
    if (len == 0 || memchr(buf, '\0', len)) {
        snprintf(err, errlen, "web identity token file %s: %s", path,
                 len ? "not a token (a NUL byte)" : "empty");
        ret = -EINVAL;
        goto out_wipe;
    }
    *out = buf;
    *outlen = len;
    buf = NULL;
    ret = 0;
out_wipe:
    if (buf) {
        explicit_bzero(buf, STS_TOKEN_FILE_MAX + 1);
        free(buf);
    }
out_close:
    close(fd);
    return ret;
}

int aws_sts_assume_role_web_identity(const struct aws_sts_conf *conf, const char *role_arn,
                                     const char *session_name, const char *token_file,
                                     int duration_s, struct aws_creds *out, char *err,
                                     size_t errlen)
{
    struct form f = {0};
    char session[128], duration[16], *token = NULL;
    size_t token_len = 0;
    int ret;

    if (errlen)
        err[0] = '\0';
    if (!conf || !conf->endpoint || !*conf->endpoint || !role_arn || !*role_arn || !token_file ||
        !*token_file || !out) {
        snprintf(err, errlen,
                 "STS AssumeRoleWithWebIdentity: missing endpoint, role ARN or token file");
        return -EINVAL;
    }
    ret = read_token(token_file, &token, &token_len, err, errlen);
    if (ret < 0)
        return ret;
    default_session_name(session, sizeof(session), session_name);
    snprintf(duration, sizeof(duration), "%d",
             duration_s > 0 ? duration_s : AWS_STS_DEFAULT_DURATION);
    form_add(&f, "Action", "AssumeRoleWithWebIdentity");
    form_add(&f, "Version", STS_VERSION);
    form_add(&f, "RoleArn", role_arn);
    form_add(&f, "RoleSessionName", session);
    form_add(&f, "WebIdentityToken", token);
    form_add(&f, "DurationSeconds", duration);
    explicit_bzero(token, token_len);
    free(token);
    if (f.err) {
        ret = f.err;
        snprintf(err, errlen, "STS AssumeRoleWithWebIdentity of %s: %s", role_arn, strerror(-ret));
        goto out_free_form;
    }
    ret = sts_call(conf, "AssumeRoleWithWebIdentity", role_arn, &f, NULL, NULL, out, err, errlen);
out_free_form:
    form_free(&f);
    return ret;
}
