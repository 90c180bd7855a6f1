/*
 * test_aws_imds.c - unit tests of the container credentials (ECS, EKS Pod Identity) and the
 * EC2 instance metadata service (IMDSv2) sources (backends/aws_imds.h).
 *
 * No EC2 metadata service or ECS/EKS agent can run here (they live on link-local addresses
 * of the platform), so the tests serve their documented protocols on loopback with
 * libmicrohttpd, in this process, and strictly: the IMDS fake answers a GET without the
 * session token it issued 401 (as an IMDSv2-only instance does) and a token PUT without the
 * TTL header 400, and records every request (method, path, headers) for the asserts; the
 * container fake answers 401 unless the Authorization header is the one it expects. Modes
 * of the fakes give the failures: a 403 to the PUT (IMDSv1), garbage JSON, Code "Failed", an
 * empty role list, a 404, a 500, a body over 64 KiB; a socket that accepts connections and
 * never answers gives the timeouts. RELATIVE_URI always means 169.254.170.2, which cannot be
 * served here, so its URL is checked through aws_container_url(), and so are the host
 * decisions for addresses that cannot be served (169.254.170.23, fd00:ec2::23). Every
 * failure's message is checked for the secrets and tokens in play (canary strings); a failed
 * check names the canary's index, never the message.
 */
#include "backends/aws_imds.h"
#include "testlib.h"

#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define ROLE "pagefs-role"
#define ROLES_PATH "/latest/meta-data/iam/security-credentials/"
#define TOKEN_PREFIX "imds-session-token-CANARY-"
#define IMDS_KEY "ASIAIMDSACCESSKEY"
#define IMDS_SECRET "imds-secret-CANARY"
#define IMDS_SESSION "imds-session-CANARY"
#define CTR_KEY "ASIACONTAINERKEY"
#define CTR_SECRET "container-secret-CANARY"
#define CTR_SESSION "container-session-CANARY"
#define STATIC_KEY "AKIASTATICKEY"
#define STATIC_SECRET "static-secret-CANARY"
#define AUTH_ENV "auth-env-token-CANARY"
#define AUTH_FILE1 "auth-file-token-1-CANARY"
#define AUTH_FILE2 "auth-file-token-2-CANARY"
#define AUTH_BAD "auth-bad-token-CANARY"
#define URL_PASSWORD "url-password-CANARY"
#define URL_QUERY "url-query-CANARY"
#define URL_PATH "url-path-CANARY"
#define CTR_PATH "/v2/credentials/" URL_PATH
#define BODY_CANARY "error-body-CANARY"
#define EXP_IMDS "2030-01-02T03:04:05Z"
#define EXP_IMDS_S 1893553445
#define EXP_CTR "2031-06-07T08:09:10Z"
#define EXP_CTR_S 1938586150

static const char *const canaries[] = {"CANARY",   TOKEN_PREFIX, IMDS_SECRET,   IMDS_SESSION,
                                       CTR_SECRET, CTR_SESSION,  STATIC_SECRET, AUTH_ENV,
                                       AUTH_FILE1, AUTH_FILE2,   AUTH_BAD,      URL_PASSWORD,
                                       URL_QUERY,  URL_PATH,     BODY_CANARY};

/* No secret, token or canary of the tests appears in err. */
static void check_clean_at(const char *err, int line)
{
    for (size_t i = 0; i < sizeof(canaries) / sizeof(canaries[0]); i++) {
        if (strstr(err, canaries[i])) {
            fprintf(stderr, "line %d: the message holds canary #%zu\n", line, i);
            test_failures++;
        }
    }
}
#define check_clean(err) check_clean_at(err, __LINE__)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static char *dir;
static int have_v6; /* this machine has an IPv6 loopback */

static void clear_env(void)
{
    static const char *const vars[] = {"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                                       "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                                       "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
                                       "AWS_CONTAINER_AUTHORIZATION_TOKEN",
                                       "AWS_EC2_METADATA_DISABLED",
                                       "AWS_EC2_METADATA_SERVICE_ENDPOINT",
                                       "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE",
                                       "AWS_METADATA_SERVICE_TIMEOUT",
                                       "AWS_METADATA_SERVICE_NUM_ATTEMPTS"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        unsetenv(vars[i]);
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *body,
                             size_t len)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result reply_str(struct MHD_Connection *c, unsigned status, const char *body)
{
    return reply(c, status, body, strlen(body));
}

/* A body of more than 64 KiB that is valid JSON credentials but for its size. */
static char *big_body(const char *key, const char *secret)
{
    size_t n = 70000;
    char *b = malloc(n + 1);
    int head =
        snprintf(b, n + 1, "{\"AccessKeyId\":\"%s\",\"SecretAccessKey\":\"%s\",", key, secret);
    memset(b + head, ' ', n - (size_t)head);
    memcpy(b + n - 2, "}\n", 2);
    b[n] = '\0';
    return b;
}

/* --- the IMDS fake --------------------------------------------------------------------- */

enum imds_mode {
    IMDS_OK,
    IMDS_V1,        /* the token PUT is answered 403; GETs need no token */
    IMDS_GARBAGE,   /* the credentials are not JSON */
    IMDS_FAILED,    /* the credentials' Code is "Failed" */
    IMDS_NO_ROLES,  /* the role list is empty */
    IMDS_ROLES_404, /* the role list is not found */
    IMDS_500,       /* the credentials request is answered 500 */
    IMDS_BIG,       /* the credentials are longer than 64 KiB */
    IMDS_REJECT,    /* every GET is answered 401, as for an expired token */
};

struct rec {
    char method[8], path[96], token[64], ttl[16];
    int has_token, has_ttl;
};

struct imds_fake {
    struct MHD_Daemon *d;
    unsigned port;
    char endpoint[64];
    pthread_mutex_t lock;
    enum imds_mode mode; /* under lock, like everything below */
    int issued;          /* tokens issued */
    char token[64];      /* the last one */
    int n;               /* requests seen; recs keeps the first 16 */
    struct rec recs[16];
};

static enum MHD_Result imds_handler(void *cls, struct MHD_Connection *c, const char *url,
                                    const char *method, const char *ver, const char *upload,
                                    size_t *upload_size, void **con_cls)
{
    static int started;
    struct imds_fake *s = cls;
    char token[64], buf[512];
    (void)ver;
    (void)upload;

    if (!*con_cls) {
        *con_cls = &started; /* headers in; the (empty) body may follow */
        return MHD_YES;
    }
    if (*upload_size) {
        *upload_size = 0;
        return MHD_YES;
    }
    const char *tok = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-aws-ec2-metadata-token");
    const char *ttl =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-aws-ec2-metadata-token-ttl-seconds");
    pthread_mutex_lock(&s->lock);
    if (s->n < 16) {
        struct rec *r = &s->recs[s->n];
        snprintf(r->method, sizeof(r->method), "%s", method);
        snprintf(r->path, sizeof(r->path), "%s", url);
        snprintf(r->token, sizeof(r->token), "%s", tok ? tok : "");
        snprintf(r->ttl, sizeof(r->ttl), "%s", ttl ? ttl : "");
        r->has_token = tok != NULL;
        r->has_ttl = ttl != NULL;
    }
    s->n++;
    enum imds_mode mode = s->mode;
    snprintf(token, sizeof(token), "%s", s->token);
    pthread_mutex_unlock(&s->lock);

    if (strcmp(method, "PUT") == 0 && strcmp(url, "/latest/api/token") == 0) {
        if (mode == IMDS_V1)
            return reply_str(c, 403, "");
        if (!ttl || atoi(ttl) < 1 || atoi(ttl) > 21600)
            return reply_str(c, 400, "");
        pthread_mutex_lock(&s->lock);
        snprintf(s->token, sizeof(s->token), TOKEN_PREFIX "%d", ++s->issued);
        snprintf(token, sizeof(token), "%s", s->token);
        pthread_mutex_unlock(&s->lock);
        return reply_str(c, 200, token);
    }
    if (strcmp(method, "GET") != 0)
        return reply_str(c, 405, "");
    if (mode == IMDS_REJECT || (mode != IMDS_V1 && (!tok || !*token || strcmp(tok, token) != 0)))
        return reply_str(c, 401, "");
    if (strcmp(url, ROLES_PATH) == 0) {
        if (mode == IMDS_NO_ROLES)
            return reply_str(c, 200, "");
        if (mode == IMDS_ROLES_404)
            return reply_str(c, 404, "");
        return reply_str(c, 200, ROLE);
    }
    if (strcmp(url, ROLES_PATH ROLE) != 0)
        return reply_str(c, 404, "");
    switch (mode) {
    case IMDS_GARBAGE:
        return reply_str(c, 200,
                         "{\"Code\" : \"Success\", \"AccessKeyId\" : \"" IMDS_KEY
                         "\", \"SecretAccessKey\" : \"" IMDS_SECRET "\", \"Tok");
    case IMDS_FAILED:
        return reply_str(c, 200,
                         "{\"Code\" : \"Failed\", \"Message\" : \"" BODY_CANARY "\", "
                         "\"AccessKeyId\" : \"" IMDS_KEY "\", \"SecretAccessKey\" : \"" IMDS_SECRET
                         "\", \"Token\" : \"" IMDS_SESSION "\", \"Expiration\" : \"" EXP_IMDS
                         "\"}");
    case IMDS_500:
        return reply_str(c, 500, "{\"Message\" : \"" BODY_CANARY " " IMDS_SECRET "\"}");
    case IMDS_BIG: {
        char *b = big_body(IMDS_KEY, IMDS_SECRET);
        enum MHD_Result ret = reply_str(c, 200, b);
        free(b);
        return ret;
    }
    default:
        snprintf(buf, sizeof(buf),
                 "{\n  \"Code\" : \"Success\",\n  \"LastUpdated\" : \"2030-01-01T21:00:00Z\",\n"
                 "  \"Type\" : \"AWS-HMAC\",\n  \"AccessKeyId\" : \"%s\",\n"
                 "  \"SecretAccessKey\" : \"%s\",\n  \"Token\" : \"%s\",\n"
                 "  \"Expiration\" : \"%s\"\n}",
                 IMDS_KEY, IMDS_SECRET, IMDS_SESSION, EXP_IMDS);
        return reply_str(c, 200, buf);
    }
}

static struct imds_fake imds;

static int imds_start(void)
{
    pthread_mutex_init(&imds.lock, NULL);
    imds.d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
                              imds_handler, &imds, MHD_OPTION_END);
    if (!imds.d)
        return -1;
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(imds.d, MHD_DAEMON_INFO_BIND_PORT);
    imds.port = di ? di->port : 0;
    snprintf(imds.endpoint, sizeof(imds.endpoint), "http://127.0.0.1:%u", imds.port);
    return imds.port ? 0 : -1;
}

/* Sets the mode and forgets the requests and tokens; points the client at the fake. */
static void imds_reset(enum imds_mode mode)
{
    pthread_mutex_lock(&imds.lock);
    imds.mode = mode;
    imds.n = 0;
    imds.token[0] = '\0';
    memset(imds.recs, 0, sizeof(imds.recs));
    pthread_mutex_unlock(&imds.lock);
    clear_env();
    setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.endpoint, 1);
}

static int imds_count(void)
{
    pthread_mutex_lock(&imds.lock);
    int n = imds.n;
    pthread_mutex_unlock(&imds.lock);
    return n;
}

/* --- the container fake ---------------------------------------------------------------- */

enum ctr_mode { CTR_OK, CTR_STATIC, CTR_GARBAGE, CTR_500, CTR_404, CTR_BIG };

struct ctr_fake {
    struct MHD_Daemon *d;
    unsigned port;
    pthread_mutex_t lock;
    enum ctr_mode mode; /* under lock, like everything below */
    char want_auth[64]; /* the Authorization it accepts; "": any, or none */
    char seen_auth[64]; /* of the last request */
    int seen_has_auth;
    char seen_accept[64];
    char seen_path[64];
    int requests;
};

static enum MHD_Result ctr_handler(void *cls, struct MHD_Connection *c, const char *url,
                                   const char *method, const char *ver, const char *upload,
                                   size_t *upload_size, void **con_cls)
{
    struct ctr_fake *s = cls;
    char want[64], buf[512];
    (void)ver;
    (void)upload;
    (void)upload_size;
    (void)con_cls;

    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    const char *accept = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Accept");
    pthread_mutex_lock(&s->lock);
    s->requests++;
    snprintf(s->seen_auth, sizeof(s->seen_auth), "%s", auth ? auth : "");
    s->seen_has_auth = auth != NULL;
    snprintf(s->seen_accept, sizeof(s->seen_accept), "%s", accept ? accept : "");
    snprintf(s->seen_path, sizeof(s->seen_path), "%s", url);
    enum ctr_mode mode = s->mode;
    snprintf(want, sizeof(want), "%s", s->want_auth);
    pthread_mutex_unlock(&s->lock);

    if (strcmp(method, "GET") != 0)
        return reply_str(c, 405, "");
    if (*want && (!auth || strcmp(auth, want) != 0))
        return reply_str(c, 401, "{\"code\":\"InvalidToken\",\"message\":\"" BODY_CANARY "\"}");
    switch (mode) {
    case CTR_STATIC:
        return reply_str(c, 200,
                         "{\"AccessKeyId\":\"" STATIC_KEY "\",\"SecretAccessKey\":\"" STATIC_SECRET
                         "\"}");
    case CTR_GARBAGE:
        return reply_str(c, 200, "<html>" CTR_SECRET "</html>");
    case CTR_500:
        return reply_str(c, 500, "{\"code\":\"Internal\",\"message\":\"" BODY_CANARY "\"}");
    case CTR_404:
        return reply_str(c, 404, "not here " BODY_CANARY);
    case CTR_BIG: {
        char *b = big_body(CTR_KEY, CTR_SECRET);
        enum MHD_Result ret = reply_str(c, 200, b);
        free(b);
        return ret;
    }
    default:
        snprintf(buf, sizeof(buf),
                 "{\"AccessKeyId\": \"%s\", \"SecretAccessKey\": \"%s\", \"Token\": \"%s\", "
                 "\"Expiration\": \"%s\", \"RoleArn\": \"arn:aws:iam::1:role/x\"}",
                 CTR_KEY, CTR_SECRET, CTR_SESSION, EXP_CTR);
        return reply_str(c, 200, buf);
    }
}

static struct ctr_fake ctr;

static int ctr_start(void)
{
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    pthread_mutex_init(&ctr.lock, NULL);
    /* Both 127.0.0.1 and ::1 when the machine has IPv6: one port for every loopback test. */
    if (have_v6)
        ctr.d = MHD_start_daemon(flags | MHD_USE_DUAL_STACK, 0, NULL, NULL, ctr_handler, &ctr,
                                 MHD_OPTION_END);
    if (!ctr.d) {
        have_v6 = 0;
        ctr.d = MHD_start_daemon(flags, 0, NULL, NULL, ctr_handler, &ctr, MHD_OPTION_END);
    }
    if (!ctr.d)
        return -1;
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(ctr.d, MHD_DAEMON_INFO_BIND_PORT);
    ctr.port = di ? di->port : 0;
    return ctr.port ? 0 : -1;
}

static void ctr_reset(enum ctr_mode mode, const char *want_auth)
{
    pthread_mutex_lock(&ctr.lock);
    ctr.mode = mode;
    snprintf(ctr.want_auth, sizeof(ctr.want_auth), "%s", want_auth ? want_auth : "");
    ctr.seen_auth[0] = ctr.seen_accept[0] = ctr.seen_path[0] = '\0';
    ctr.seen_has_auth = 0;
    ctr.requests = 0;
    pthread_mutex_unlock(&ctr.lock);
    clear_env();
}

static int ctr_requests(void)
{
    pthread_mutex_lock(&ctr.lock);
    int n = ctr.requests;
    pthread_mutex_unlock(&ctr.lock);
    return n;
}

/* Points FULL_URI at the fake through host (an address or name, IPv6 in brackets), with a
 * canary in the path and the query (a URI may carry a capability: never shown). */
static void ctr_full_uri(const char *host)
{
    char url[160];
    snprintf(url, sizeof(url), "http://%s:%u" CTR_PATH "?id=" URL_QUERY, host, ctr.port);
    setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", url, 1);
}

/* --- helpers --------------------------------------------------------------------------- */

/* A port nothing listens on. */
static unsigned dead_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof(a);
    bind(s, (struct sockaddr *)&a, sizeof(a));
    getsockname(s, (struct sockaddr *)&a, &l);
    close(s);
    return ntohs(a.sin_port);
}

/* A listening socket that is never accepted from: connections complete (the kernel accepts
 * them into the backlog) and requests are never answered. Returns the fd, *port set. */
static int hung_listener(unsigned *port)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof(a);
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(s, 16) < 0 ||
        getsockname(s, (struct sockaddr *)&a, &l) < 0)
        return -1;
    *port = ntohs(a.sin_port);
    return s;
}

static int machine_has_v6(void)
{
    int s = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    int ok = s >= 0 && bind(s, (struct sockaddr *)&a, sizeof(a)) == 0;
    if (s >= 0)
        close(s);
    return ok;
}

static void write_token_file(const char *path, const char *text)
{
    CHECK_EQ(test_write_file(path, text, strlen(text)), 0);
}

/* --- container: the URL and the host decision ------------------------------------------ */

/* aws_container_url() for FULL_URI `full`: its return, the URL in url. */
static int full_url(const char *full, char *url, size_t cap, char *err, size_t errlen)
{
    clear_env();
    setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", full, 1);
    url[0] = err[0] = '\0';
    return aws_container_url(url, cap, err, errlen);
}

static void expect_allowed(const char *full, const char *want_url)
{
    char url[512], err[512];
    int ret = full_url(full, url, sizeof(url), err, sizeof(err));
    if (ret != 0)
        fprintf(stderr, "refused %s: %s\n", full, err);
    CHECK_EQ(ret, 0);
    CHECK_STR(url, want_url);
}

/* Refused with -EINVAL, and the message names `shown` (the host) but holds no canary. */
static void expect_refused(const char *full, const char *shown)
{
    char url[512], err[512];
    CHECK_EQ(full_url(full, url, sizeof(url), err, sizeof(err)), -EINVAL);
    CHECK_STR(url, "");
    CHECK(strlen(err) > 0);
    if (shown && !strstr(err, shown)) {
        fprintf(stderr, "the message for a refused URL does not name %s: %s\n", shown, err);
        test_failures++;
    }
    check_clean(err);
}

static void test_container_hosts(void)
{
    char url[512], err[512];

    /* Loopback, the ECS and EKS container hosts over http; anything over https. */
    expect_allowed("http://127.0.0.1:8080/creds", "http://127.0.0.1:8080/creds");
    expect_allowed("http://127.5.6.7/creds?id=1", "http://127.5.6.7/creds?id=1");
    expect_allowed("http://[::1]:9911/creds", "http://[::1]:9911/creds");
    expect_allowed("http://localhost:9911/creds", "http://localhost:9911/creds");
    expect_allowed("http://169.254.170.23/v1/credentials", "http://169.254.170.23/v1/credentials");
    expect_allowed("http://169.254.170.2/v2/credentials/x",
                   "http://169.254.170.2/v2/credentials/x");
    expect_allowed("http://[fd00:ec2::23]/v1/credentials", "http://[fd00:ec2::23]/v1/credentials");
    expect_allowed("https://example.com/creds", "https://example.com/creds");
    expect_allowed("https://10.0.0.1:8443/creds", "https://10.0.0.1:8443/creds");

    /* Everything else over http, and what is no http(s) URL. example.com is refused whether
     * or not a DNS server answers here (no network: the name does not resolve; with one, it
     * resolves to addresses that are not loopback). */
    expect_refused("http://10.0.0.1/creds", "10.0.0.1");
    expect_refused("http://example.com/creds", "example.com");
    expect_refused("http://169.254.169.254/latest/meta-data/", "169.254.169.254");
    expect_refused("http://169.254.170.3/creds", "169.254.170.3");
    expect_refused("http://[fe80::1]/creds", "fe80::1");
    expect_refused("http://[fd00:ec2::24]/creds", "fd00:ec2::24");
    expect_refused("http://[::ffff:10.0.0.1]/creds", NULL);
    expect_refused("http://user:" URL_PASSWORD "@10.0.0.1/p?q=" URL_QUERY, "10.0.0.1");
    expect_refused("ftp://127.0.0.1/creds", NULL);
    expect_refused("not a url " URL_QUERY, NULL);
    expect_refused("127.0.0.1/creds", NULL);

    /* RELATIVE_URI: always on 169.254.170.2, and first when both are set. */
    clear_env();
    setenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/1b2c-uuid", 1);
    CHECK_EQ(aws_container_url(url, sizeof(url), err, sizeof(err)), 0);
    CHECK_STR(url, "http://169.254.170.2/v2/credentials/1b2c-uuid");
    setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:1/x", 1);
    CHECK_EQ(aws_container_url(url, sizeof(url), err, sizeof(err)), 0);
    CHECK_STR(url, "http://169.254.170.2/v2/credentials/1b2c-uuid");
    CHECK_EQ(aws_container_url(url, 10, err, sizeof(err)), -ENAMETOOLONG);
    setenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "v2/credentials/x", 1); /* no '/' */
    CHECK_EQ(aws_container_url(url, sizeof(url), err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "RELATIVE_URI") != NULL);
    setenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", ".evil.example/x", 1);
    CHECK_EQ(aws_container_url(url, sizeof(url), err, sizeof(err)), -EINVAL);

    /* Neither set (an empty one counts as unset). */
    clear_env();
    setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "", 1);
    CHECK_EQ(aws_container_url(url, sizeof(url), err, sizeof(err)), -ENOENT);
    CHECK(strstr(err, "AWS_CONTAINER_CREDENTIALS_FULL_URI") != NULL);
}

/* --- container: fetching --------------------------------------------------------------- */

static void test_container_not_configured(void)
{
    struct aws_creds c;
    char err[512] = "";

    clear_env();
    setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", AUTH_ENV, 1); /* a token alone is nothing */
    CHECK_EQ(aws_creds_from_container(1000, &c, err, sizeof(err)), -ENOENT);
    CHECK(c.access_key == NULL);
    CHECK(strstr(err, "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") != NULL);
    check_clean(err);
}

static void test_container_env_token(void)
{
    struct aws_creds c;
    char err[512] = "";

    ctr_reset(CTR_OK, AUTH_ENV);
    ctr_full_uri("127.0.0.1");
    setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", AUTH_ENV, 1);
    CHECK_EQ(aws_creds_from_container(0, &c, err, sizeof(err)), 0);
    CHECK_STR(c.access_key, CTR_KEY);
    CHECK_STR(c.secret_key, CTR_SECRET);
    CHECK_STR(c.session_token, CTR_SESSION);
    CHECK_EQ(c.expiration, EXP_CTR_S);
    aws_creds_clear(&c);
    CHECK_EQ(ctr_requests(), 1);
    CHECK_STR(ctr.seen_auth, AUTH_ENV);
    CHECK_STR(ctr.seen_accept, "application/json");
    CHECK_STR(ctr.seen_path, CTR_PATH);

    /* Without a token: no Authorization header at all. */
    ctr_reset(CTR_OK, NULL);
    ctr_full_uri("127.0.0.1");
    CHECK_EQ(aws_creds_from_container(0, &c, err, sizeof(err)), 0);
    CHECK_STR(c.access_key, CTR_KEY);
    aws_creds_clear(&c);
    CHECK_EQ(ctr.seen_has_auth, 0);
}

static void test_container_token_file(void)
{
    struct aws_creds c;
    char err[512] = "", path[512];

    snprintf(path, sizeof(path), "%s/eks-pod-identity-token", dir);
    write_token_file(path, AUTH_FILE1 "\n");
    ctr_reset(CTR_OK, AUTH_FILE1);
    ctr_full_uri("127.0.0.1");
    setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", path, 1);
    setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", AUTH_ENV, 1); /* the file wins */
    CHECK_EQ(aws_creds_from_container(0, &c, err, sizeof(err)), 0);
    CHECK_STR(c.access_key, CTR_KEY);
    aws_creds_clear(&c);
    CHECK_STR(ctr.seen_auth, AUTH_FILE1); /* one trailing newline dropped */

    /* Rotated between two calls: the second call sends the new token. */
    write_token_file(path, AUTH_FILE2);
    pthread_mutex_lock(&ctr.lock);
    snprintf(ctr.want_auth, sizeof(ctr.want_auth), "%s", AUTH_FILE2);
    pthread_mutex_unlock(&ctr.lock);
    CHECK_EQ(aws_creds_from_container(0, &c, err, sizeof(err)), 0);
    CHECK_STR(c.access_key, CTR_KEY);
    aws_creds_clear(&c);
    CHECK_STR(ctr.seen_auth, AUTH_FILE2);
    CHECK_EQ(ctr_requests(), 2);
}

/* A token that cannot be sent: -EINVAL before any request, and the message holds no token. */
static void expect_bad_token(const char *file_text, const char *env_text, const char *why)
{
    struct aws_creds c;
    char err[512] = "", path[512];

    ctr_reset(CTR_OK, NULL);
    ctr_full_uri("127.0.0.1");
    if (file_text) {
        snprintf(path, sizeof(path), "%s/bad-token", dir);
        write_token_file(path, file_text);
        setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", path, 1);
    }
    if (env_text)
        setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", env_text, 1);
    CHECK_EQ(aws_creds_from_container(0, &c, err, sizeof(err)), -EINVAL);
    CHECK(c.access_key == NULL);
    CHECK_EQ(ctr_requests(), 0);
    if (!strstr(err, why)) {
        fprintf(stderr, "a bad token's message does not say '%s'\n", why);
        test_failures++;
    }
    check_clean(err);
}

static void test_container_bad_tokens(void)
{
    struct aws_creds c;
    char err[512] = "", path[512];

    expect_bad_token(AUTH_BAD "\nX-Injected: 1\n", NULL, "line break");
    expect_bad_token(AUTH_BAD "\n\n", NULL, "line break"); /* only one newline is dropped */
    expect_bad_token(AUTH_BAD "\r\n", NULL, "line break");
    expect_bad_token(AUTH_BAD "\001x", NULL, "control character");
    expect_bad_token("\n", NULL, "empty");
    expect_bad_token(NULL, AUTH_BAD "\r\nX-Injected: 1", "line break");
    expect_bad_token(NULL, AUTH_BAD "\n", "line break");

    /* A token file that cannot be read. */
    ctr_reset(CTR_OK, NULL);
    ctr_full_uri("127.0.0.1");
    snprintf(path, sizeof(path), "%s/no-such-token", dir);
    setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", path, 1);
    setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", AUTH_ENV, 1);
    CHECK_EQ(aws_creds_from_container(0, &c, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "no-such-token") != NULL);
    CHECK_EQ(ctr_requests(), 0);
    check_clean(err);
}

static void test_container_refused(void)
{
    struct aws_creds c;
    char err[512] = "";

    ctr_reset(CTR_OK, AUTH_FILE1);
    ctr_full_uri("127.0.0.1");
    setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", AUTH_BAD, 1);
    CHECK_EQ(aws_creds_from_container(0, &c, err, sizeof(err)), -EACCES);
    CHECK(c.access_key == NULL);
    CHECK(strstr(err, "401") != NULL);
    CHECK(strstr(err, "InvalidToken") != NULL); /* the error code, not the message */
    CHECK_EQ(ctr_requests(), 1);                /* a refusal is not retried */
    check_clean(err);

    unsetenv("AWS_CONTAINER_AUTHORIZATION_TOKEN");
    CHECK_EQ(aws_creds_from_container(0, &c, err, sizeof(err)), -EACCES);
    CHECK(strstr(err, "no authorization token") != NULL);
    check_clean(err);

    /* A host that is not allowed is refused before any connection. */
    clear_env();
    setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://10.0.0.1/creds", 1);
    setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", AUTH_ENV, 1);
    CHECK_EQ(aws_creds_from_container(0, &c, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "10.0.0.1") != NULL);
    check_clean(err);
}

static void test_container_static(void)
{
    struct aws_creds c;
    char err[512] = "";

    ctr_reset(CTR_STATIC, NULL);
    ctr_full_uri("127.0.0.1");
    CHECK_EQ(aws_creds_from_container(0, &c, err, sizeof(err)), 0);
    CHECK_STR(c.access_key, STATIC_KEY);
    CHECK_STR(c.secret_key, STATIC_SECRET);
    CHECK(c.session_token == NULL);
    CHECK_EQ(c.expiration, 0);
    aws_creds_clear(&c);
}

static void test_container_bad_replies(void)
{
    struct aws_creds c;
    char err[512] = "";

    ctr_reset(CTR_GARBAGE, NULL);
    ctr_full_uri("127.0.0.1");
    CHECK_EQ(aws_creds_from_container(0, &c, err, sizeof(err)), -EIO);
    CHECK(c.access_key == NULL);
    CHECK(strstr(err, "not credentials") != NULL);
    CHECK_EQ(ctr_requests(), 1);
    check_clean(err);

    ctr_reset(CTR_BIG, NULL);
    ctr_full_uri("127.0.0.1");
    CHECK_EQ(aws_creds_from_container(0, &c, err, sizeof(err)), -EIO);
    CHECK(strstr(err, "longer than") != NULL);
    check_clean(err);

    ctr_reset(CTR_404, NULL);
    ctr_full_uri("127.0.0.1");
    CHECK_EQ(aws_creds_from_container(0, &c, err, sizeof(err)), -EIO);
    CHECK(strstr(err, "404") != NULL);
    check_clean(err);

    /* A 500 is tried three times, a second apart (botocore's attempts). */
    ctr_reset(CTR_500, NULL);
    ctr_full_uri("127.0.0.1");
    double t0 = now_s();
    CHECK_EQ(aws_creds_from_container(5000, &c, err, sizeof(err)), -EIO);
    double took = now_s() - t0;
    CHECK_EQ(ctr_requests(), 3);
    CHECK(took >= 1.9 && took < 4.0);
    CHECK(strstr(err, "500") != NULL);
    check_clean(err);
}

static void test_container_transport(void)
{
    struct aws_creds c;
    char err[512] = "", url[128];
    unsigned port;

    /* Nothing listens: refused, tried again while the time allows. */
    ctr_reset(CTR_OK, NULL);
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/creds", dead_port());
    setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", url, 1);
    setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", AUTH_ENV, 1);
    double t0 = now_s();
    CHECK_EQ(aws_creds_from_container(1500, &c, err, sizeof(err)), -ECONNREFUSED);
    CHECK(now_s() - t0 < 2.5);
    check_clean(err);

    /* Connected, never answered: the call keeps to its timeout. */
    int fd = hung_listener(&port);
    CHECK(fd >= 0);
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/creds", port);
    setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", url, 1);
    t0 = now_s();
    CHECK_EQ(aws_creds_from_container(1000, &c, err, sizeof(err)), -ETIMEDOUT);
    double took = now_s() - t0;
    CHECK(took >= 0.9 && took < 2.0);
    CHECK(c.access_key == NULL);
    check_clean(err);
    close(fd);
}

/* The fake reached through other loopback hosts: 127.5.6.7, localhost (a name, resolved and
 * pinned) and ::1 when the machine has it. */
static void test_container_loopback_hosts(void)
{
    const char *hosts[] = {"127.5.6.7", "localhost", "[::1]"};
    struct aws_creds c;
    char err[512] = "";

    for (size_t i = 0; i < sizeof(hosts) / sizeof(hosts[0]); i++) {
        if (i == 2 && !have_v6) {
            fprintf(stderr, "no IPv6 loopback here: http://[::1] not fetched\n");
            continue;
        }
        ctr_reset(CTR_OK, AUTH_ENV);
        ctr_full_uri(hosts[i]);
        setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", AUTH_ENV, 1);
        int ret = aws_creds_from_container(0, &c, err, sizeof(err));
        if (ret != 0)
            fprintf(stderr, "via %s: %d %s\n", hosts[i], ret, err);
        CHECK_EQ(ret, 0);
        CHECK_STR(c.access_key, CTR_KEY);
        aws_creds_clear(&c);
        CHECK_EQ(ctr_requests(), 1);
        CHECK_STR(ctr.seen_auth, AUTH_ENV);
    }
}

/* --- instance metadata ----------------------------------------------------------------- */

static void test_imds_v2(void)
{
    struct aws_creds c;
    char err[512] = "";

    imds_reset(IMDS_OK);
    int ret = aws_creds_from_imds(&c, err, sizeof(err));
    if (ret != 0)
        fprintf(stderr, "imds: %d %s\n", ret, err);
    CHECK_EQ(ret, 0);
    CHECK_STR(c.access_key, IMDS_KEY);
    CHECK_STR(c.secret_key, IMDS_SECRET);
    CHECK_STR(c.session_token, IMDS_SESSION);
    CHECK_EQ(c.expiration, EXP_IMDS_S);
    aws_creds_clear(&c);

    CHECK_EQ(imds_count(), 3);
    CHECK_STR(imds.recs[0].method, "PUT");
    CHECK_STR(imds.recs[0].path, "/latest/api/token");
    CHECK_STR(imds.recs[0].ttl, "21600");
    CHECK_EQ(imds.recs[0].has_token, 0);
    CHECK_STR(imds.recs[1].method, "GET");
    CHECK_STR(imds.recs[1].path, ROLES_PATH);
    CHECK_STR(imds.recs[1].token, TOKEN_PREFIX "1");
    CHECK_EQ(imds.recs[1].has_ttl, 0);
    CHECK_STR(imds.recs[2].method, "GET");
    CHECK_STR(imds.recs[2].path, ROLES_PATH ROLE);
    CHECK_STR(imds.recs[2].token, TOKEN_PREFIX "1");

    /* An endpoint with a trailing '/' and an explicit IPv4 mode: the same paths. */
    imds_reset(IMDS_OK);
    char ep[80];
    snprintf(ep, sizeof(ep), "%s/", imds.endpoint);
    setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", ep, 1);
    setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", "ipv4", 1);
    CHECK_EQ(aws_creds_from_imds(&c, err, sizeof(err)), 0);
    aws_creds_clear(&c);
    CHECK_EQ(imds_count(), 3);
    CHECK_STR(imds.recs[0].path, "/latest/api/token");
    CHECK_STR(imds.recs[2].path, ROLES_PATH ROLE);
}

static void test_imds_v1_fallback(void)
{
    struct aws_creds c;
    char err[512] = "";

    imds_reset(IMDS_V1);
    CHECK_EQ(aws_creds_from_imds(&c, err, sizeof(err)), 0);
    CHECK_STR(c.access_key, IMDS_KEY);
    CHECK_STR(c.session_token, IMDS_SESSION);
    aws_creds_clear(&c);
    CHECK_EQ(imds_count(), 3);
    CHECK_STR(imds.recs[0].method, "PUT");
    CHECK_STR(imds.recs[1].path, ROLES_PATH);
    CHECK_EQ(imds.recs[1].has_token, 0);
    CHECK_STR(imds.recs[2].path, ROLES_PATH ROLE);
    CHECK_EQ(imds.recs[2].has_token, 0);
}

/* aws_creds_from_imds() against mode: its return, with err; out checked empty on failure. */
static int imds_fails(enum imds_mode mode, char *err, size_t errlen)
{
    struct aws_creds c;
    imds_reset(mode);
    err[0] = '\0';
    int ret = aws_creds_from_imds(&c, err, errlen);
    if (ret == 0)
        aws_creds_clear(&c);
    else
        CHECK(c.access_key == NULL && c.secret_key == NULL && c.session_token == NULL);
    check_clean(err);
    return ret;
}

static void test_imds_bad_replies(void)
{
    char err[512];

    CHECK_EQ(imds_fails(IMDS_GARBAGE, err, sizeof(err)), -EIO);
    CHECK(strstr(err, "not credentials") != NULL);
    CHECK_EQ(imds_fails(IMDS_FAILED, err, sizeof(err)), -EIO);
    CHECK(strstr(err, "Code Failed") != NULL);
    CHECK_EQ(imds_fails(IMDS_BIG, err, sizeof(err)), -EIO);
    CHECK(strstr(err, "longer than") != NULL);
    CHECK_EQ(imds_fails(IMDS_500, err, sizeof(err)), -EIO);
    CHECK(strstr(err, "500") != NULL);
    CHECK_EQ(imds_count(), 3); /* one attempt by default */

    CHECK_EQ(imds_fails(IMDS_NO_ROLES, err, sizeof(err)), -ENOENT);
    CHECK(strstr(err, "the instance has no IAM role") != NULL);
    CHECK_EQ(imds_fails(IMDS_ROLES_404, err, sizeof(err)), -ENOENT);
    CHECK(strstr(err, "the instance has no IAM role") != NULL);
    CHECK_EQ(imds_count(), 2); /* no credentials request */
}

static void test_imds_attempts(void)
{
    struct aws_creds c;
    char err[512];

    /* Each request is tried NUM_ATTEMPTS times while it fails transiently. */
    imds_reset(IMDS_500);
    setenv("AWS_METADATA_SERVICE_NUM_ATTEMPTS", "3", 1);
    CHECK_EQ(aws_creds_from_imds(&c, err, sizeof(err)), -EIO);
    CHECK_EQ(imds_count(), 5); /* PUT, roles, three credentials requests */
    CHECK_STR(imds.recs[4].path, ROLES_PATH ROLE);
    check_clean(err);

    /* Garbage JSON is tried again too (botocore); an empty role list as well. */
    imds_reset(IMDS_GARBAGE);
    setenv("AWS_METADATA_SERVICE_NUM_ATTEMPTS", "2", 1);
    CHECK_EQ(aws_creds_from_imds(&c, err, sizeof(err)), -EIO);
    CHECK_EQ(imds_count(), 4);
    imds_reset(IMDS_NO_ROLES);
    setenv("AWS_METADATA_SERVICE_NUM_ATTEMPTS", "2", 1);
    CHECK_EQ(aws_creds_from_imds(&c, err, sizeof(err)), -ENOENT);
    CHECK_EQ(imds_count(), 3);

    /* A refusal is not retried: the token not accepted (401) is -EACCES at once. */
    imds_reset(IMDS_REJECT);
    setenv("AWS_METADATA_SERVICE_NUM_ATTEMPTS", "3", 1);
    CHECK_EQ(aws_creds_from_imds(&c, err, sizeof(err)), -EACCES);
    CHECK_EQ(imds_count(), 2); /* PUT, roles */
    CHECK(strstr(err, "401") != NULL);
    check_clean(err);
}

static void test_imds_absent(void)
{
    struct aws_creds c;
    char err[512], ep[80];
    unsigned port;

    /* Nothing listens: not on EC2. */
    imds_reset(IMDS_OK);
    snprintf(ep, sizeof(ep), "http://127.0.0.1:%u", dead_port());
    setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", ep, 1);
    CHECK_EQ(aws_creds_from_imds(&c, err, sizeof(err)), -ENOENT);
    CHECK(strstr(err, "no instance metadata service at 127.0.0.1:") != NULL);

    /* The endpoint's userinfo is never shown. */
    snprintf(ep, sizeof(ep), "http://u:" URL_PASSWORD "@127.0.0.1:%u/", dead_port());
    setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", ep, 1);
    CHECK_EQ(aws_creds_from_imds(&c, err, sizeof(err)), -ENOENT);
    CHECK(strstr(err, "no instance metadata service at 127.0.0.1:") != NULL);
    check_clean(err);

    /* Connected, never answered: the token PUT times out within TIMEOUT. */
    int fd = hung_listener(&port);
    CHECK(fd >= 0);
    snprintf(ep, sizeof(ep), "http://127.0.0.1:%u", port);
    setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", ep, 1);
    setenv("AWS_METADATA_SERVICE_TIMEOUT", "1", 1);
    double t0 = now_s();
    CHECK_EQ(aws_creds_from_imds(&c, err, sizeof(err)), -ENOENT);
    double took = now_s() - t0;
    CHECK(took >= 0.9 && took < 2.5);
    CHECK(strstr(err, "no instance metadata service") != NULL);
    close(fd);

    /* Disabled: no request at all. */
    imds_reset(IMDS_OK);
    setenv("AWS_EC2_METADATA_DISABLED", "TRUE", 1);
    CHECK_EQ(aws_creds_from_imds(&c, err, sizeof(err)), -ENOENT);
    CHECK(strstr(err, "instance metadata disabled") != NULL);
    CHECK_EQ(imds_count(), 0);
    setenv("AWS_EC2_METADATA_DISABLED", "false", 1);
    CHECK_EQ(aws_creds_from_imds(&c, err, sizeof(err)), 0);
    aws_creds_clear(&c);
}

static void test_imds_settings(void)
{
    static const char *const bad[][2] = {
        {"AWS_METADATA_SERVICE_TIMEOUT", "abc"},
        {"AWS_METADATA_SERVICE_TIMEOUT", "0"},
        {"AWS_METADATA_SERVICE_TIMEOUT", "2s"},
        {"AWS_METADATA_SERVICE_NUM_ATTEMPTS", "-1"},
        {"AWS_METADATA_SERVICE_NUM_ATTEMPTS", "100000"},
        {"AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", "IPv5"},
        {"AWS_EC2_METADATA_SERVICE_ENDPOINT", "ftp://127.0.0.1/"},
        {"AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1/?q=1"},
        {"AWS_EC2_METADATA_SERVICE_ENDPOINT", "no url"},
    };
    struct aws_creds c;
    char err[512];

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        imds_reset(IMDS_OK);
        setenv(bad[i][0], bad[i][1], 1);
        err[0] = '\0';
        CHECK_EQ(aws_creds_from_imds(&c, err, sizeof(err)), -EINVAL);
        if (!strstr(err, bad[i][0])) {
            fprintf(stderr, "the message for a bad %s does not name it: %s\n", bad[i][0], err);
            test_failures++;
        }
        CHECK_EQ(imds_count(), 0);
    }
}

int main(void)
{
    dir = test_mkdtemp("aws_imds");
    have_v6 = machine_has_v6();
    if (!dir || imds_start() < 0 || ctr_start() < 0) {
        fprintf(stderr, "cannot start the fake endpoints\n");
        return 1;
    }
    RUN(test_container_hosts);
    RUN(test_container_not_configured);
    RUN(test_container_env_token);
    RUN(test_container_token_file);
    RUN(test_container_bad_tokens);
    RUN(test_container_refused);
    RUN(test_container_static);
    RUN(test_container_bad_replies);
    RUN(test_container_transport);
    RUN(test_container_loopback_hosts);
    RUN(test_imds_v2);
    RUN(test_imds_v1_fallback);
    RUN(test_imds_bad_replies);
    RUN(test_imds_attempts);
    RUN(test_imds_absent);
    RUN(test_imds_settings);
    clear_env();
    MHD_stop_daemon(imds.d);
    MHD_stop_daemon(ctr.d);
    test_rm_rf(dir);
    free(dir);
    return test_finish();
}
