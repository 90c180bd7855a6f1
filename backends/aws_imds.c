/*
 * aws_imds.c - credentials from the platform's HTTP endpoints: the container endpoint (ECS
 * tasks, EKS Pod Identity) and the EC2 instance metadata service, IMDSv2 (see aws_imds.h).
 *
 * Design: a call is rare (once at start, then about once an hour ahead of expiry), so each
 * one makes a private curl_pool and drops it at its end. Requests go over curl_common.c's
 * request path, with curl_req_setup() and curl_req_finish() around a transfer of our own
 * (fetch_once()) that adds what curl_common does not: no proxy (the endpoints are loopback or
 * link-local, and the authorization token must not travel to a proxy named by the
 * environment), and, when a full URI names its host, CURLOPT_RESOLVE pins of exactly the
 * addresses that were checked, so a second DNS answer cannot move the request elsewhere. No
 * transfer is verbose (libcurl would print the token). A reply lands in a buffer of our own
 * of REPLY_MAX bytes (a longer one fails with -EIO) and is read with json-c.
 *
 * Container (botocore's ContainerProvider / ContainerMetadataFetcher): RELATIVE_URI wins over
 * FULL_URI and must begin with '/' (so the host stays 169.254.170.2); a FULL_URI is parsed
 * with libcurl's URL API, and over http every address of its host (the literal, or all that
 * getaddrinfo gives for a name) must be loopback, 169.254.170.2, 169.254.170.23 or
 * fd00:ec2::23, as in aws-c-auth and the Rust SDK; https may go anywhere. The token is read
 * at every call. A request is tried up to CONTAINER_ATTEMPTS times, CONTAINER_PAUSE_MS
 * apart, while it fails transiently (a transport error, 429, 5xx), all within the caller's
 * timeout: a backend call scope carrying that deadline caps every transfer.
 *
 * Instance metadata (botocore's InstanceMetadataFetcher): the token PUT, then the role list
 * and the role's credentials with the token; a PUT answered 403, 404 or 405 means IMDSv1 (the
 * GETs go without a token). Each request is tried up to NUM_ATTEMPTS times without a pause
 * while it fails transiently, the role list also while its body is empty and the credentials
 * while they are not JSON; each try is bounded by TIMEOUT, its connect too. A PUT that meets
 * no service (refused, unreachable, timed out) means "not on EC2": -ENOENT.
 *
 * Invariants: a reply body never exceeds REPLY_MAX. Every buffer of ours that held a secret
 * (the authorization token and its header line, the IMDS token and its header line, reply
 * bodies, json-c's copies of a reply's strings, libcurl's copies of our header lines) is
 * wiped before it is freed; what libcurl copies internally while sending is beyond reach.
 * Messages name variables, files, hosts and HTTP statuses, never a URL's path, userinfo or
 * query (ECS's relative URI is a capability) and never a body, except an error code
 * reduced to harmless characters.
 * Lock order: no lock of its own; the private pool's lock is a leaf (curl_common.c).
 */
#include "backends/aws_imds.h"

#include "backends/backend.h"
#include "backends/curl_common.h"
#include "backends/json_util.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define REPLY_MAX (64 * 1024)      /* a reply body, at most */
#define ERRBODY_MAX 512            /* the part of an error body that is read */
#define TOKEN_FILE_MAX (64 * 1024) /* an authorization token file, at most */
#define HOST_SHOWN 128             /* characters of a host a message shows */
#define WHERE_MAX (HOST_SHOWN + 16)
#define URL_MAX 4096 /* an IMDS endpoint */
#define PINS_MAX 2048
#define CODE_MAX 64
#define USER_AGENT "pagefs/" PAGEFS_VERSION

#define CONTAINER_HOST "169.254.170.2"
#define CONTAINER_DEFAULT_MS 5000
#define CONTAINER_ATTEMPT_MS 2000 /* botocore's TIMEOUT_SECONDS */
#define CONTAINER_ATTEMPTS 3      /* botocore's RETRY_ATTEMPTS */
#define CONTAINER_PAUSE_MS 1000   /* botocore's SLEEP_TIME */
#define CONTAINER_CONNECT_MS 1000 /* the endpoint is local: a connect takes microseconds */

#define IMDS_ENDPOINT_V4 "http://169.254.169.254"
#define IMDS_ENDPOINT_V6 "http://[fd00:ec2::254]"
#define IMDS_TOKEN_PATH "/latest/api/token"
#define IMDS_ROLES_PATH "/latest/meta-data/iam/security-credentials/"
#define IMDS_TTL_LINE "X-aws-ec2-metadata-token-ttl-seconds: 21600"
#define IMDS_TOKEN_HEADER "X-aws-ec2-metadata-token"
#define IMDS_TIMEOUT_MAX_S 3600
#define IMDS_ATTEMPTS_MAX 100
#define ROLE_MAX 64 /* IAM's limit on a role name */

/* --- small helpers --------------------------------------------------------------------- */

static void wipe_free(char *s, size_t n)
{
    if (s) {
        explicit_bzero(s, n);
        free(s);
    }
}

static void wipe_free_str(char *s)
{
    if (s)
        wipe_free(s, strlen(s));
}

/* Wipes the strings of a header list (libcurl's copies of our lines) before they are freed. */
static void wipe_lines(struct curl_slist *l)
{
    for (; l; l = l->next) {
        if (l->data)
            explicit_bzero(l->data, strlen(l->data));
    }
}

/* "Name: value" in a malloc'd string built without any other copy of value (unlike
 * asprintf()), or NULL when out of memory. Caller wipes and frees. */
static char *header_line(const char *name, const char *value)
{
    size_t nl = strlen(name), vl = strlen(value);
    char *s = malloc(nl + 2 + vl + 1);
    if (!s)
        return NULL;
    memcpy(s, name, nl);
    memcpy(s + nl, ": ", 2);
    memcpy(s + nl + 2, value, vl + 1);
    return s;
}

/* Copies into out (capacity cap) an error code from a reply, keeping letters, digits and
 * ".-_:" and at most CODE_MAX - 1 of them: what a message may show of a reply. */
static void safe_code(const char *s, char *out, size_t cap)
{
    size_t n = 0;
    for (; s && *s && n + 1 < cap && n + 1 < CODE_MAX; s++) {
        char ch = *s;
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            ch == '.' || ch == '-' || ch == '_' || ch == ':')
            out[n++] = ch;
    }
    if (cap)
        out[n] = '\0';
}

static void pause_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* --- JSON ------------------------------------------------------------------------------ */

/* The error code of an error body ("code" or "Code", as the container agents and IMDS write
 * it), reduced by safe_code(); "" when there is none. */
static void error_code(const char *body, char *code, size_t cap)
{
    struct json_object *o = NULL;
    const char *s = NULL;

    code[0] = '\0';
    if (json_util_parse_object(body, strlen(body), &o) < 0)
        return;
    if (json_util_string(o, "code", &s) != 1)
        (void)json_util_string(o, "Code", &s);
    safe_code(s, code, cap);
    json_util_put_wiped(o);
}

/* --- requests -------------------------------------------------------------------------- */

/* What the requests of one call share, and the last reply. */
struct fetcher {
    struct curl_pool *pool;
    struct curl_common_conf conf;
    struct curl_slist *resolve; /* CURLOPT_RESOLVE pins, or NULL; borrowed */
    char *body;                 /* REPLY_MAX + 1 bytes: the last 2xx body, NUL-terminated */
    size_t len;                 /* of body */
    long status;                /* of the last reply; 0 when none came */
    int overflow;               /* the last body was longer than REPLY_MAX */
    char errbody[ERRBODY_MAX];  /* the start of the last non-2xx body, NUL-terminated */
};

/* Makes f's pool and body buffer; each try is bounded by timeout_ms, its connect by
 * connect_ms. Returns 0, -ENOMEM, -EIO (libcurl gives no handle). */
static int fetcher_init(struct fetcher *f, long timeout_ms, long connect_ms)
{
    memset(f, 0, sizeof(*f));
    f->body = malloc(REPLY_MAX + 1);
    if (!f->body)
        return -ENOMEM;
    f->body[0] = '\0';
    int ret = curl_pool_create(1, &f->pool);
    if (ret < 0) {
        free(f->body);
        f->body = NULL;
        return ret;
    }
    /* No debug variable: a verbose transfer would print the authorization token. */
    curl_common_conf_init(&f->conf, timeout_ms, timeout_ms, 0, NULL);
    f->conf.connect_timeout_ms = connect_ms < timeout_ms ? connect_ms : timeout_ms;
    f->conf.user_agent = USER_AGENT;
    return 0;
}

/* Wipes the buffers and frees the pool; safe on a zeroed fetcher. */
static void fetcher_clear(struct fetcher *f)
{
    wipe_free(f->body, f->body ? REPLY_MAX + 1 : 0);
    explicit_bzero(f->errbody, sizeof(f->errbody));
    curl_pool_destroy(f->pool);
    memset(f, 0, sizeof(*f));
}

/* One request of url: method NULL for a GET, else that method with no body (the token PUT);
 * lines is a NULL-terminated list of header lines, which may hold secrets. Fills f's reply
 * part. Returns curl_req_finish()'s errno. */
static int fetch_once(struct fetcher *f, const char *url, const char *method,
                      const char *const *lines)
{
    struct curl_req r;
    CURL *c;
    int ret = -ENOMEM;

    memset(&r, 0, sizeof(r));
    r.url = url;
    r.method = method;
    r.body.buf = f->body;
    r.body.cap = REPLY_MAX;
    r.errbody = f->errbody;
    r.errcap = sizeof(f->errbody);
    explicit_bzero(f->body, f->len);
    f->len = 0;
    f->status = 0;
    f->overflow = 0;
    f->body[0] = f->errbody[0] = '\0';
    for (; *lines; lines++) {
        struct curl_slist *l = curl_slist_append(r.hdrs, *lines);
        if (!l)
            goto out_clear;
        r.hdrs = l;
    }
    c = curl_pool_take(f->pool);
    if (!c)
        goto out_clear;
    curl_req_setup(c, &f->conf, &r);
    curl_easy_setopt(c, CURLOPT_PROXY, ""); /* never through a proxy */
    if (f->resolve)
        curl_easy_setopt(c, CURLOPT_RESOLVE, f->resolve);
    ret = curl_req_finish(c, &r, curl_easy_perform(c));
    curl_pool_give(f->pool, c);
    f->status = r.status;
    f->len = r.body.len;
    f->overflow = r.body.overflow;
    f->body[f->len] = '\0';
    f->errbody[r.errlen] = '\0';
out_clear:
    wipe_lines(r.hdrs);
    curl_req_clear(&r);
    return ret;
}

/* 1 when ret, the errno of a request that got status, comes from that HTTP status (the
 * server answered and refused), 0 when it is a transport error or a success. */
static int from_status(int ret, long status)
{
    return ret < 0 && status >= 300 && ret == curl_map_error(CURLE_OK, status, 0);
}

/* 1 when the request that ended with ret on f may succeed if tried again: a transport error,
 * a 429 or a 5xx; not a body too long, a cancelled call or a lack of memory. */
static int transient(const struct fetcher *f, int ret)
{
    if (ret == 0 || ret == -ENOMEM || ret == -EINTR || f->overflow)
        return 0;
    if (from_status(ret, f->status))
        return f->status == 429 || f->status >= 500;
    return 1;
}

/* --- the container endpoint ------------------------------------------------------------ */

/* Where container credentials come from. */
struct target {
    char *url;                  /* libcurl's normalized URL; malloc'd, wiped (a capability) */
    char where[WHERE_MAX];      /* "host" or "host:port", for messages */
    struct curl_slist *resolve; /* pins of a checked host name, or NULL */
};

static void target_clear(struct target *t)
{
    wipe_free_str(t->url);
    curl_slist_free_all(t->resolve);
    memset(t, 0, sizeof(*t));
}

/* 1 when v4 (host order) is loopback or one of the container hosts 169.254.170.2 (ECS) and
 * 169.254.170.23 (EKS Pod Identity). */
static int v4_allowed(uint32_t v4)
{
    return (v4 >> 24) == 127 || v4 == 0xa9feaa02u || v4 == 0xa9feaa17u;
}

/* 1 when http to address sa is allowed: loopback (127.0.0.0/8, ::1, or 127/8 mapped into
 * IPv6) or a container host (the two above, fd00:ec2::23). */
static int addr_allowed(const struct sockaddr *sa)
{
    static const struct in6_addr eks_v6 = {
        {{0xfd, 0x00, 0x0e, 0xc2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x23}}};

    if (sa->sa_family == AF_INET)
        return v4_allowed(ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr));
    if (sa->sa_family != AF_INET6)
        return 0;
    const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(a) || memcmp(a, &eks_v6, sizeof(eks_v6)) == 0)
        return 1;
    if (IN6_IS_ADDR_V4MAPPED(a)) {
        uint32_t v4;
        memcpy(&v4, &a->s6_addr[12], 4);
        return v4_allowed(ntohl(v4));
    }
    return 0;
}

/* The numeric text of address sa into buf (capacity cap), in brackets for IPv6 when
 * `brackets` (CURLOPT_RESOLVE's form). */
static void addr_text(const struct sockaddr *sa, int brackets, char *buf, size_t cap)
{
    char a[INET6_ADDRSTRLEN] = "?";

    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, a, sizeof(a));
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, a, sizeof(a));
    if (brackets && sa->sa_family == AF_INET6)
        snprintf(buf, cap, "[%s]", a);
    else
        snprintf(buf, cap, "%s", a);
}

#define ALLOWED_HTTP_HOSTS                                                                         \
    "over http only loopback (127.0.0.0/8, ::1), 169.254.170.2, 169.254.170.23 and "               \
    "fd00:ec2::23 are allowed (any host over https)"

/* Checks the host of an http full URI (as libcurl gives it: an IPv6 literal in brackets),
 * port its port: an address literal must be allowed (addr_allowed()); a name is resolved and
 * all its addresses must be, and then t->resolve pins the name to them. Returns 0, -EINVAL
 * (with err), -ENOMEM. */
static int check_http_host(const char *host, const char *port, struct target *t, char *err,
                           size_t errlen)
{
    const char *var = "AWS_CONTAINER_CREDENTIALS_FULL_URI";
    struct addrinfo hints, *ai = NULL;
    char bare[256], addr[INET6_ADDRSTRLEN + 2], pins[PINS_MAX];
    size_t n = strlen(host);
    int ret = -EINVAL, rc;

    if (n >= 2 && host[0] == '[' && host[n - 1] == ']') {
        host++;
        n -= 2;
    }
    if (n == 0 || n >= sizeof(bare)) {
        snprintf(err, errlen, "container credentials: %s has an empty or too long host", var);
        return -EINVAL;
    }
    memcpy(bare, host, n);
    bare[n] = '\0';
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST;
    if (getaddrinfo(bare, NULL, &hints, &ai) == 0) {
        if (!addr_allowed(ai->ai_addr)) {
            snprintf(err, errlen, "container credentials: %s: host %.*s is not allowed: %s", var,
                     HOST_SHOWN, bare, ALLOWED_HTTP_HOSTS);
            goto out_free;
        }
        ret = 0;
        goto out_free;
    }
    hints.ai_flags = 0;
    rc = getaddrinfo(bare, port, &hints, &ai);
    if (rc == EAI_MEMORY) {
        ret = -ENOMEM;
        goto out_free;
    }
    if (rc != 0) {
        ai = NULL;
        snprintf(err, errlen,
                 "container credentials: %s: cannot resolve host %.*s to check its addresses "
                 "(%s); %s",
                 var, HOST_SHOWN, bare, gai_strerror(rc), ALLOWED_HTTP_HOSTS);
        goto out_free;
    }
    int used = snprintf(pins, sizeof(pins), "%s:%s:", bare, port);
    for (struct addrinfo *p = ai; p; p = p->ai_next) {
        if (!addr_allowed(p->ai_addr)) {
            addr_text(p->ai_addr, 0, addr, sizeof(addr));
            snprintf(err, errlen,
                     "container credentials: %s: host %.*s resolves to %s, which is not allowed: "
                     "%s",
                     var, HOST_SHOWN, bare, addr, ALLOWED_HTTP_HOSTS);
            goto out_free;
        }
        addr_text(p->ai_addr, 1, addr, sizeof(addr));
        if (used > 0 && (size_t)used < sizeof(pins))
            used += snprintf(pins + used, sizeof(pins) - (size_t)used, "%s%s", p == ai ? "" : ",",
                             addr);
    }
    if (used < 0 || (size_t)used >= sizeof(pins)) {
        snprintf(err, errlen, "container credentials: %s: host %.*s has too many addresses", var,
                 HOST_SHOWN, bare);
        goto out_free;
    }
    t->resolve = curl_slist_append(NULL, pins);
    ret = t->resolve ? 0 : -ENOMEM;
out_free:
    if (ai)
        freeaddrinfo(ai);
    return ret;
}

/* Parses text, the URL of variable var, into t: http or https with a host; `relative`: the
 * host must be CONTAINER_HOST; otherwise an http host is checked (check_http_host()).
 * Returns 0, -EINVAL (with err), -ENOMEM. */
static int url_target(const char *var, const char *text, int relative, struct target *t, char *err,
                      size_t errlen)
{
    char *scheme = NULL, *host = NULL, *port = NULL, *shown_port = NULL, *zone = NULL;
    char *url = NULL;
    int ret = -ENOMEM;
    CURLUcode uc;

    curl_common_global_init(); /* before curl_url() */
    CURLU *u = curl_url();
    if (!u)
        return -ENOMEM;
    uc = curl_url_set(u, CURLUPART_URL, text, 0);
    if (uc == CURLUE_OUT_OF_MEMORY)
        goto out_free;
    if (uc != CURLUE_OK || curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
        (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0) ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || !*host ||
        curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) != CURLUE_OK) {
        snprintf(err, errlen, "container credentials: %s is not an http:// or https:// URL%s%s",
                 var, uc != CURLUE_OK ? ": " : "", uc != CURLUE_OK ? curl_url_strerror(uc) : "");
        ret = -EINVAL;
        goto out_free;
    }
    (void)curl_url_get(u, CURLUPART_PORT, &shown_port, 0); /* only one written in the URL */
    snprintf(t->where, sizeof(t->where), "%.*s%s%s", HOST_SHOWN, host, shown_port ? ":" : "",
             shown_port ? shown_port : "");
    if (relative && strcmp(host, CONTAINER_HOST) != 0) {
        snprintf(err, errlen, "container credentials: %s does not stay on host %s", var,
                 CONTAINER_HOST);
        ret = -EINVAL;
        goto out_free;
    }
    if (!relative && strcmp(scheme, "http") == 0) {
        if (curl_url_get(u, CURLUPART_ZONEID, &zone, 0) == CURLUE_OK) {
            snprintf(err, errlen,
                     "container credentials: %s: an http host with a zone id is not allowed", var);
            ret = -EINVAL;
            goto out_free;
        }
        ret = check_http_host(host, port, t, err, errlen);
        if (ret < 0)
            goto out_free;
    }
    ret = -ENOMEM;
    if (curl_url_get(u, CURLUPART_URL, &url, 0) != CURLUE_OK)
        goto out_free;
    t->url = strdup(url);
    ret = t->url ? 0 : -ENOMEM;
out_free:
    if (url)
        explicit_bzero(url, strlen(url));
    curl_free(url);
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_free(shown_port);
    curl_free(zone);
    curl_url_cleanup(u);
    return ret;
}

/* Reads the environment into *t (cleared first; clear it with target_clear()). Returns 0,
 * -ENOENT when neither variable is set, -EINVAL, -ENOMEM (with err). */
static int container_target(struct target *t, char *err, size_t errlen)
{
    const char *rel = getenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
    const char *full = getenv("AWS_CONTAINER_CREDENTIALS_FULL_URI");
    int ret;

    memset(t, 0, sizeof(*t));
    if (rel && *rel) {
        if (rel[0] != '/') {
            snprintf(err, errlen,
                     "container credentials: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI "
                     "must begin with '/'");
            return -EINVAL;
        }
        char *text = malloc(strlen("http://" CONTAINER_HOST) + strlen(rel) + 1);
        if (!text) {
            ret = -ENOMEM;
        } else {
            strcpy(text, "http://" CONTAINER_HOST);
            strcat(text, rel);
            ret = url_target("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", text, 1, t, err, errlen);
            wipe_free_str(text);
        }
    } else if (full && *full) {
        ret = url_target("AWS_CONTAINER_CREDENTIALS_FULL_URI", full, 0, t, err, errlen);
    } else {
        snprintf(err, errlen,
                 "container credentials: neither AWS_CONTAINER_CREDENTIALS_RELATIVE_URI "
                 "nor AWS_CONTAINER_CREDENTIALS_FULL_URI is set");
        return -ENOENT;
    }
    if (ret == -ENOMEM)
        snprintf(err, errlen, "container credentials: out of memory");
    if (ret < 0)
        target_clear(t);
    return ret;
}

int aws_container_url(char *url, size_t cap, char *err, size_t errlen)
{
    struct target t;
    int ret = container_target(&t, err, errlen);
    if (ret < 0)
        return ret;
    size_t n = strlen(t.url);
    if (n >= cap) {
        snprintf(err, errlen, "container credentials: the URL is longer than %zu bytes",
                 cap ? cap - 1 : 0);
        ret = -ENAMETOOLONG;
    } else {
        memcpy(url, t.url, n + 1);
    }
    target_clear(&t);
    return ret;
}

/* Checks token tok[0..n) from `from` for a header value: no line break (it would end the
 * header and start another) and no other control character. Returns 0 or -EINVAL. */
static int token_check(const char *tok, size_t n, const char *from, char *err, size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)tok[i];
        if (ch == '\r' || ch == '\n') {
            snprintf(err, errlen,
                     "container credentials: the authorization token from %s contains a line "
                     "break",
                     from);
            return -EINVAL;
        }
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f) {
            snprintf(err, errlen,
                     "container credentials: the authorization token from %s contains a control "
                     "character",
                     from);
            return -EINVAL;
        }
    }
    return 0;
}

/* The token in file path, read now (it is rotated), with one trailing newline dropped.
 * Returns 0 with *out (wipe_free_str()), -EINVAL (unreadable, empty, too large, bad
 * characters), -ENOMEM. */
static int token_from_file(const char *path, char **out, char *err, size_t errlen)
{
    const char *var = "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE";
    size_t n = 0;
    ssize_t got = 1;
    int ret = -EINVAL, fd;

    *out = NULL;
    char *buf = malloc(TOKEN_FILE_MAX + 1);
    if (!buf) {
        snprintf(err, errlen, "container credentials: out of memory");
        return -ENOMEM;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "container credentials: cannot read %s %.200s: %s", var, path,
                 strerror(e));
        goto out_wipe;
    }
    while (n <= TOKEN_FILE_MAX && got != 0) {
        got = read(fd, buf + n, TOKEN_FILE_MAX + 1 - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            int e = errno;
            snprintf(err, errlen, "container credentials: cannot read %s %.200s: %s", var, path,
                     strerror(e));
            goto out_close;
        }
        n += (size_t)got;
    }
    if (n > TOKEN_FILE_MAX) {
        snprintf(err, errlen, "container credentials: %s %.200s is larger than %d bytes", var, path,
                 TOKEN_FILE_MAX);
        goto out_close;
    }
    if (n > 0 && buf[n - 1] == '\n')
        n--;
    buf[n] = '\0';
    if (n == 0) {
        snprintf(err, errlen, "container credentials: %s %.200s is empty", var, path);
        goto out_close;
    }
    if (token_check(buf, n, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", err, errlen) < 0)
        goto out_close;
    *out = buf;
    buf = NULL;
    ret = 0;
out_close:
    close(fd);
out_wipe:
    wipe_free(buf, buf ? TOKEN_FILE_MAX + 1 : 0);
    return ret;
}

/* The authorization token: from the file named by AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE,
 * else AWS_CONTAINER_AUTHORIZATION_TOKEN (empty: none). Returns 0 with *out (NULL: none;
 * else wipe_free_str()), -EINVAL, -ENOMEM (with err). */
static int container_token(char **out, char *err, size_t errlen)
{
    const char *file = getenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
    const char *env = getenv("AWS_CONTAINER_AUTHORIZATION_TOKEN");

    *out = NULL;
    if (file && *file)
        return token_from_file(file, out, err, errlen);
    if (!env || !*env)
        return 0;
    if (token_check(env, strlen(env), "AWS_CONTAINER_AUTHORIZATION_TOKEN", err, errlen) < 0)
        return -EINVAL;
    *out = strdup(env);
    if (!*out) {
        snprintf(err, errlen, "container credentials: out of memory");
        return -ENOMEM;
    }
    return 0;
}

/* Turns the outcome ret of the request to t into the call's result: credentials from a 2xx
 * body, else the errno and message of the failure. */
static int container_judge(const struct target *t, const struct fetcher *f, int ret, int had_token,
                           struct aws_creds *out, char *err, size_t errlen)
{
    struct json_object *o = NULL;
    const char *why = "not a JSON object";
    char code[CODE_MAX];

    if (ret == 0) {
        ret = json_util_parse_object(f->body, f->len, &o);
        if (ret == 0)
            ret = aws_creds_from_json(o, "Token", 0, out, &why);
        json_util_put_wiped(o);
        if (ret == -EIO)
            snprintf(err, errlen, "container credentials: the reply of %s is not credentials (%s)",
                     t->where, why);
    } else if (f->overflow) {
        snprintf(err, errlen, "container credentials: the reply of %s is longer than %d bytes",
                 t->where, REPLY_MAX);
        ret = -EIO;
    } else if (from_status(ret, f->status)) {
        error_code(f->errbody, code, sizeof(code));
        if (f->status == 401 || f->status == 403) {
            snprintf(err, errlen, "container credentials: %s refused the request (HTTP %ld%s%s)%s",
                     t->where, f->status, *code ? " " : "", code,
                     had_token ? "" : "; no authorization token is set");
            ret = -EACCES;
        } else {
            snprintf(err, errlen, "container credentials: %s answered HTTP %ld%s%s", t->where,
                     f->status, *code ? " " : "", code);
            ret = -EIO; /* a 404 too: the endpoint is configured, so this is no "not found" */
        }
    } else if (ret != -ENOMEM) {
        snprintf(err, errlen, "container credentials: no reply from %s: %s", t->where,
                 strerror(-ret));
    }
    if (ret == -ENOMEM)
        snprintf(err, errlen, "container credentials: out of memory");
    return ret;
}

int aws_creds_from_container(int timeout_ms, struct aws_creds *out, char *err, size_t errlen)
{
    struct target t;
    struct fetcher f;
    struct backend_call call;
    char *token = NULL, *authz = NULL;
    const char *lines[3] = {"Accept: application/json", NULL, NULL};
    int ret;

    memset(out, 0, sizeof(*out));
    if (timeout_ms <= 0)
        timeout_ms = CONTAINER_DEFAULT_MS;
    ret = container_target(&t, err, errlen);
    if (ret < 0)
        return ret;
    ret = container_token(&token, err, errlen);
    if (ret < 0)
        goto out_target;
    if (token) {
        authz = header_line("Authorization", token);
        if (!authz) {
            snprintf(err, errlen, "container credentials: out of memory");
            ret = -ENOMEM;
            goto out_token;
        }
        lines[1] = authz;
    }
    long attempt_ms = timeout_ms / CONTAINER_ATTEMPTS;
    if (attempt_ms < CONTAINER_ATTEMPT_MS)
        attempt_ms = CONTAINER_ATTEMPT_MS;
    ret = fetcher_init(&f, attempt_ms, CONTAINER_CONNECT_MS);
    if (ret < 0) {
        snprintf(err, errlen, "container credentials: %s",
                 ret == -ENOMEM ? "out of memory" : "libcurl initialisation failed");
        goto out_authz;
    }
    f.resolve = t.resolve;
    /* The scope's deadline caps every try's timeouts: the whole call keeps to timeout_ms. */
    backend_call_begin(&call, backend_now_ms() + (uint64_t)timeout_ms, NULL);
    for (int i = 1;; i++) {
        ret = fetch_once(&f, t.url, NULL, lines);
        if (i >= CONTAINER_ATTEMPTS || !transient(&f, ret) ||
            backend_call_remaining_ms(&call) <= CONTAINER_PAUSE_MS)
            break;
        pause_ms(CONTAINER_PAUSE_MS);
    }
    backend_call_end(&call);
    ret = container_judge(&t, &f, ret, token != NULL, out, err, errlen);
    fetcher_clear(&f);
out_authz:
    wipe_free_str(authz);
out_token:
    wipe_free_str(token);
out_target:
    target_clear(&t);
    return ret;
}

/* --- instance metadata ----------------------------------------------------------------- */

struct imds_conf {
    char base[URL_MAX];    /* the endpoint, without a trailing '/' */
    char where[WHERE_MAX]; /* its host[:port], for messages */
    long timeout_ms;       /* one try of one request */
    int attempts;          /* tries of one request */
};

/* The whole number in variable name (unset or empty: def), within [1, max]. Returns 0 or
 * -EINVAL (with err). */
static int env_count(const char *name, long def, long max, long *v, char *err, size_t errlen)
{
    const char *s = getenv(name);
    char *end = NULL;

    *v = def;
    if (!s || !*s)
        return 0;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || x < 1 || x > max) {
        snprintf(err, errlen, "instance metadata: %s must be a whole number from 1 to %ld", name,
                 max);
        return -EINVAL;
    }
    *v = x;
    return 0;
}

/* Parses endpoint ep (from variable var) into ic->base and ic->where: http or https, a host,
 * no query or fragment. Returns 0, -EINVAL (with err), -ENOMEM. */
static int imds_endpoint(const char *var, const char *ep, struct imds_conf *ic, char *err,
                         size_t errlen)
{
    char *scheme = NULL, *host = NULL, *port = NULL, *part = NULL, *url = NULL;
    int ret = -ENOMEM;

    curl_common_global_init(); /* before curl_url() */
    CURLU *u = curl_url();
    if (!u)
        goto out_nomem;
    CURLUcode uc = curl_url_set(u, CURLUPART_URL, ep, 0);
    if (uc == CURLUE_OUT_OF_MEMORY)
        goto out_free;
    ret = -EINVAL;
    if (uc != CURLUE_OK || curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
        (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0) ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || !*host ||
        curl_url_get(u, CURLUPART_QUERY, &part, 0) != CURLUE_NO_QUERY ||
        curl_url_get(u, CURLUPART_FRAGMENT, &part, 0) != CURLUE_NO_FRAGMENT) {
        snprintf(err, errlen,
                 "instance metadata: %s is not an http:// or https:// URL without "
                 "a query",
                 var);
        goto out_free;
    }
    (void)curl_url_get(u, CURLUPART_PORT, &port, 0);
    snprintf(ic->where, sizeof(ic->where), "%.*s%s%s", HOST_SHOWN, host, port ? ":" : "",
             port ? port : "");
    ret = -ENOMEM;
    if (curl_url_get(u, CURLUPART_URL, &url, 0) != CURLUE_OK)
        goto out_free;
    size_t n = strlen(url);
    while (n > 0 && url[n - 1] == '/')
        n--;
    if (n >= sizeof(ic->base)) {
        snprintf(err, errlen, "instance metadata: %s is longer than %d bytes", var, URL_MAX - 1);
        ret = -EINVAL;
        goto out_free;
    }
    memcpy(ic->base, url, n);
    ic->base[n] = '\0';
    ret = 0;
out_free:
    curl_free(url);
    curl_free(part);
    curl_free(port);
    curl_free(host);
    curl_free(scheme);
    curl_url_cleanup(u);
out_nomem:
    if (ret == -ENOMEM)
        snprintf(err, errlen, "instance metadata: out of memory");
    return ret;
}

/* Reads the settings from the environment into *ic. Returns 0, -ENOENT (disabled), -EINVAL,
 * -ENOMEM (with err). */
static int imds_settings(struct imds_conf *ic, char *err, size_t errlen)
{
    const char *disabled = getenv("AWS_EC2_METADATA_DISABLED");
    const char *ep = getenv("AWS_EC2_METADATA_SERVICE_ENDPOINT");
    const char *mode = getenv("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE");
    const char *var = "AWS_EC2_METADATA_SERVICE_ENDPOINT";
    long timeout_s, attempts;
    int ret;

    memset(ic, 0, sizeof(*ic));
    if (disabled && strcasecmp(disabled, "true") == 0) {
        snprintf(err, errlen, "instance metadata disabled (AWS_EC2_METADATA_DISABLED=true)");
        return -ENOENT;
    }
    ret = env_count("AWS_METADATA_SERVICE_TIMEOUT", 1, IMDS_TIMEOUT_MAX_S, &timeout_s, err, errlen);
    if (ret == 0)
        ret = env_count("AWS_METADATA_SERVICE_NUM_ATTEMPTS", 1, IMDS_ATTEMPTS_MAX, &attempts, err,
                        errlen);
    if (ret < 0)
        return ret;
    ic->timeout_ms = timeout_s * 1000;
    ic->attempts = (int)attempts;
    if (mode && *mode && strcasecmp(mode, "IPv4") != 0 && strcasecmp(mode, "IPv6") != 0) {
        snprintf(err, errlen,
                 "instance metadata: AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE must be IPv4 or IPv6");
        return -EINVAL;
    }
    if (!ep || !*ep) {
        var = "the default endpoint";
        ep = mode && strcasecmp(mode, "IPv6") == 0 ? IMDS_ENDPOINT_V6 : IMDS_ENDPOINT_V4;
    }
    return imds_endpoint(var, ep, ic, err, errlen);
}

/* One request of path on the IMDS: method NULL for a GET, which carries the token when
 * there is one, or "PUT" (the token request, with its TTL line). Tried up to ic->attempts
 * times while it fails transiently (transient()) or, when it succeeds, while `again` (NULL:
 * never) finds the body worth another try. Returns the last try's errno (fetch_once()). */
static int imds_request(const struct imds_conf *ic, struct fetcher *f, const char *method,
                        const char *path, const char *token, int (*again)(const struct fetcher *))
{
    char url[URL_MAX + 128];
    char *line = NULL;
    const char *lines[2] = {NULL, NULL};
    int ret;

    if (snprintf(url, sizeof(url), "%s%s", ic->base, path) >= (int)sizeof(url))
        return -ENAMETOOLONG; /* cannot happen: base and path are bounded */
    if (method) {
        lines[0] = IMDS_TTL_LINE;
    } else if (token) {
        line = header_line(IMDS_TOKEN_HEADER, token);
        if (!line)
            return -ENOMEM;
        lines[0] = line;
    }
    for (int i = 1;; i++) {
        ret = fetch_once(f, url, method, lines);
        if (i >= ic->attempts || (ret == 0 && !(again && again(f))) ||
            (ret < 0 && !transient(f, ret)))
            break;
    }
    wipe_free_str(line);
    return ret;
}

/* The errno and message of a failed IMDS request (`what` names it) that got a reply or failed
 * after the service answered before: 401/403 -EACCES, other statuses, a body too long and
 * transport errors -EIO. */
static int imds_failure(const struct imds_conf *ic, const struct fetcher *f, int ret,
                        const char *what, char *err, size_t errlen)
{
    if (ret == -ENOMEM) {
        snprintf(err, errlen, "instance metadata: out of memory");
        return ret;
    }
    if (f->overflow) {
        snprintf(err, errlen, "instance metadata at %s: the reply to %s is longer than %d bytes",
                 ic->where, what, REPLY_MAX);
        return -EIO;
    }
    if (from_status(ret, f->status)) {
        snprintf(err, errlen, "instance metadata at %s: %s was answered HTTP %ld", ic->where, what,
                 f->status);
        return f->status == 401 || f->status == 403 ? -EACCES : -EIO;
    }
    snprintf(err, errlen, "instance metadata at %s: %s failed: %s", ic->where, what,
             strerror(-ret));
    return ret == -EINTR ? ret : -EIO;
}

/* The session token (IMDSv2), or *token NULL for IMDSv1 when the PUT is answered 403, 404
 * or 405. Returns 0, -ENOENT when no service answers, else as imds_failure(). */
static int imds_token(const struct imds_conf *ic, struct fetcher *f, char **token, char *err,
                      size_t errlen)
{
    *token = NULL;
    int ret = imds_request(ic, f, "PUT", IMDS_TOKEN_PATH, NULL, NULL);
    if (ret == 0) {
        size_t n = f->len;
        while (n > 0 && (f->body[n - 1] == '\n' || f->body[n - 1] == '\r' ||
                         f->body[n - 1] == ' ' || f->body[n - 1] == '\t'))
            n--;
        for (size_t i = 0; i < n; i++) {
            if (f->body[i] <= 0x20 || f->body[i] >= 0x7f)
                n = 0; /* not a header value we may send back */
        }
        if (n == 0) {
            snprintf(err, errlen, "instance metadata at %s: the token reply is not a token",
                     ic->where);
            return -EIO;
        }
        *token = strndup(f->body, n);
        explicit_bzero(f->body, f->len);
        if (!*token) {
            snprintf(err, errlen, "instance metadata: out of memory");
            return -ENOMEM;
        }
        return 0;
    }
    if (from_status(ret, f->status) && (f->status == 403 || f->status == 404 || f->status == 405))
        return 0; /* IMDSv1, as the SDKs fall back */
    if (ret == -ETIMEDOUT || ret == -ECONNREFUSED || ret == -EHOSTUNREACH) {
        snprintf(err, errlen, "instance metadata: no instance metadata service at %s (%s)",
                 ic->where, strerror(-ret));
        return -ENOENT;
    }
    return imds_failure(ic, f, ret, "the token request", err, errlen);
}

static int body_empty(const struct fetcher *f)
{
    return f->len == 0;
}

static int role_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           strchr("+=,.@_-", ch) != NULL;
}

/* The instance's role: the first line of the role list, into role[ROLE_MAX + 1]. Returns 0,
 * -ENOENT when the instance has none, else as imds_failure(). */
static int imds_role(const struct imds_conf *ic, struct fetcher *f, const char *token, char *role,
                     char *err, size_t errlen)
{
    int ret = imds_request(ic, f, NULL, IMDS_ROLES_PATH, token, body_empty);
    if (ret < 0 && from_status(ret, f->status) && f->status == 404)
        goto out_no_role;
    if (ret < 0)
        return imds_failure(ic, f, ret, "the role list request", err, errlen);
    const char *s = f->body;
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strcspn(s, "\r\n");
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    if (n == 0)
        goto out_no_role;
    for (size_t i = 0; i < n; i++) {
        if (!role_char(s[i]))
            n = ROLE_MAX + 1;
    }
    if (n > ROLE_MAX) {
        snprintf(err, errlen, "instance metadata at %s: the role list holds no IAM role name",
                 ic->where);
        return -EIO;
    }
    memcpy(role, s, n);
    role[n] = '\0';
    return 0;

out_no_role:
    snprintf(err, errlen, "instance metadata at %s: the instance has no IAM role", ic->where);
    return -ENOENT;
}

static int body_not_json(const struct fetcher *f)
{
    struct json_object *o = NULL;
    int ret = json_util_parse_object(f->body, f->len, &o);
    json_util_put_wiped(o);
    return ret < 0;
}

/* The credentials of role: a JSON object whose Code, when present, is "Success". Returns 0
 * with *out, -ENOENT when the role is not found, -EIO for a reply without credentials, else
 * as imds_failure(). */
static int imds_creds(const struct imds_conf *ic, struct fetcher *f, const char *token,
                      const char *role, struct aws_creds *out, char *err, size_t errlen)
{
    char path[sizeof(IMDS_ROLES_PATH) + ROLE_MAX], code[CODE_MAX];
    struct json_object *o = NULL;
    const char *why = "not a JSON object", *c = NULL;

    snprintf(path, sizeof(path), "%s%s", IMDS_ROLES_PATH, role);
    int ret = imds_request(ic, f, NULL, path, token, body_not_json);
    if (ret < 0 && from_status(ret, f->status) && f->status == 404) {
        snprintf(err, errlen,
                 "instance metadata at %s: the instance has no IAM role (%s is not "
                 "found)",
                 ic->where, role);
        return -ENOENT;
    }
    if (ret < 0)
        return imds_failure(ic, f, ret, "the credentials request", err, errlen);
    ret = json_util_parse_object(f->body, f->len, &o);
    if (ret == 0) {
        int has = json_util_string(o, "Code", &c);
        if (has < 0 || (has == 1 && strcmp(c, "Success") != 0)) {
            safe_code(has == 1 ? c : "", code, sizeof(code));
            snprintf(err, errlen, "instance metadata at %s: role %s: Code %s", ic->where, role,
                     *code ? code : "(not a string)");
            ret = -EIO;
            goto out_put;
        }
        ret = aws_creds_from_json(o, "Token", 1, out, &why);
    }
    if (ret == -EIO)
        snprintf(err, errlen,
                 "instance metadata at %s: role %s: the reply is not credentials "
                 "(%s)",
                 ic->where, role, why);
    else if (ret == -ENOMEM)
        snprintf(err, errlen, "instance metadata: out of memory");
out_put:
    json_util_put_wiped(o);
    return ret;
}

int aws_creds_from_imds(struct aws_creds *out, char *err, size_t errlen)
{
    struct imds_conf ic;
    struct fetcher f;
    char role[ROLE_MAX + 1];
    char *token = NULL;
    int ret;

    memset(out, 0, sizeof(*out));
    ret = imds_settings(&ic, err, errlen);
    if (ret < 0)
        return ret;
    ret = fetcher_init(&f, ic.timeout_ms, ic.timeout_ms);
    if (ret < 0) {
        snprintf(err, errlen, "instance metadata: %s",
                 ret == -ENOMEM ? "out of memory" : "libcurl initialisation failed");
        return ret;
    }
    ret = imds_token(&ic, &f, &token, err, errlen);
    if (ret < 0)
        goto out_clear;
    ret = imds_role(&ic, &f, token, role, err, errlen);
    if (ret < 0)
        goto out_wipe_token;
    ret = imds_creds(&ic, &f, token, role, out, err, errlen);
out_wipe_token:
    wipe_free_str(token);
out_clear:
    fetcher_clear(&f);
    return ret;
}
