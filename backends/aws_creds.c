/*
 * aws_creds.c - AWS credentials: one set (struct aws_creds), the SDKs' default chain, and the
 * provider that keeps temporary credentials fresh.
 *
 * Design: the chain (resolve_chain()) is resolved once into a `struct source`, a small tree
 * that says how to fetch a set again: fixed keys, a credential_process command, an STS role
 * (with a `base` source for AssumeRole's own credentials, fetched again at every refresh), the
 * container endpoint or instance metadata. The provider keeps the current set as a refcounted
 * immutable snapshot: a request takes a reference (aws_cred_provider_get(), a mutex and an
 * atomic increment, no fetch), signs with it and gives it back, so a refresh never changes a
 * set under a request. A refresh thread, started by the first get of a set that expires,
 * fetches the next set at the earlier of 5 minutes and half the lifetime before expiration,
 * and retries failures with backoff (1 s doubling to 60 s) while the old set stays current.
 * A request refused as expired calls aws_cred_provider_refresh(), which fetches at once unless
 * a newer set already exists (one fetch at a time, forced fetches a second apart).
 * Invariants: a snapshot's strings never change while it has references; gen grows by one per
 * set; secrets are wiped (explicit_bzero) before they are freed; no message contains a key, a
 * secret or a token (messages name sources, profiles, files, programs and endpoints).
 * Lock order: fetch_mu (held across a fetch, which may take seconds) before mu (a leaf, held
 * only to swap or read the current set); the refresh thread waits on cond under mu.
 */
#include "backends/aws_creds.h"

#include "backends/aws_config.h"
#include "backends/aws_imds.h"
#include "backends/aws_process.h"
#include "backends/aws_sts.h"
#include "backends/json_util.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>

static void wipe_free(char *s)
{
    if (s) {
        explicit_bzero(s, strlen(s));
        free(s);
    }
}

void aws_creds_clear(struct aws_creds *c)
{
    if (!c)
        return;
    wipe_free(c->access_key);
    wipe_free(c->secret_key);
    wipe_free(c->session_token);
    memset(c, 0, sizeof(*c));
}

int aws_creds_set(struct aws_creds *c, const char *access_key, const char *secret_key,
                  const char *session_token, int64_t expiration)
{
    aws_creds_clear(c);
    if (!access_key || !*access_key || !secret_key || !*secret_key)
        return -EINVAL;
    c->access_key = strdup(access_key);
    c->secret_key = strdup(secret_key);
    if (session_token && *session_token)
        c->session_token = strdup(session_token);
    if (!c->access_key || !c->secret_key ||
        (session_token && *session_token && !c->session_token)) {
        aws_creds_clear(c);
        return -ENOMEM;
    }
    c->expiration = expiration;
    return 0;
}

int aws_creds_dup(const struct aws_creds *src, struct aws_creds *dst)
{
    memset(dst, 0, sizeof(*dst));
    int ret =
        aws_creds_set(dst, src->access_key, src->secret_key, src->session_token, src->expiration);
    return ret == -EINVAL ? -ENOMEM : ret; /* src is always a complete set */
}

/* n decimal digits at *s into *out; advances *s. */
static int digits(const char **s, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (!isdigit((unsigned char)(*s)[i]))
            return -EINVAL;
        v = v * 10 + ((*s)[i] - '0');
    }
    *s += n;
    *out = v;
    return 0;
}

int aws_time_parse(const char *s, int64_t *out)
{
    int y, mo, d, h, mi, sec, zh = 0, zm = 0, sign = 0;

    if (!s || digits(&s, 4, &y) || *s++ != '-' || digits(&s, 2, &mo) || *s++ != '-' ||
        digits(&s, 2, &d) || (*s != 'T' && *s != 't' && *s != ' '))
        return -EINVAL;
    s++;
    if (digits(&s, 2, &h) || *s++ != ':' || digits(&s, 2, &mi) || *s++ != ':' ||
        digits(&s, 2, &sec))
        return -EINVAL;
    if (*s == '.') {
        s++;
        if (!isdigit((unsigned char)*s))
            return -EINVAL;
        while (isdigit((unsigned char)*s))
            s++;
    }
    if (*s == 'Z' || *s == 'z') {
        s++;
    } else if (*s == '+' || *s == '-') {
        sign = *s++ == '+' ? 1 : -1;
        if (digits(&s, 2, &zh) || *s++ != ':' || digits(&s, 2, &zm) || zh > 23 || zm > 59)
            return -EINVAL;
    } else {
        return -EINVAL;
    }
    if (*s || y < 1970 || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60)
        return -EINVAL;
    struct tm tm = {.tm_year = y - 1900,
                    .tm_mon = mo - 1,
                    .tm_mday = d,
                    .tm_hour = h,
                    .tm_min = mi,
                    .tm_sec = sec};
    time_t t = timegm(&tm);
    if (t == (time_t)-1 || tm.tm_mday != d) /* timegm normalises 31 Feb to March */
        return -EINVAL;
    *out = (int64_t)t - sign * (int64_t)(zh * 3600 + zm * 60);
    return 0;
}

int aws_creds_from_json(struct json_object *o, const char *token_key, int temporary,
                        struct aws_creds *out, const char **why)
{
    const char *key, *secret, *token, *exp;
    int64_t expiration = 0;
    int session = strcmp(token_key, "SessionToken") == 0;

    memset(out, 0, sizeof(*out));
    if (json_util_string(o, "AccessKeyId", &key) != 1 || !*key) {
        *why = "no AccessKeyId";
        return -EIO;
    }
    if (json_util_string(o, "SecretAccessKey", &secret) != 1 || !*secret) {
        *why = "no SecretAccessKey";
        return -EIO;
    }
    int has_token = json_util_string(o, token_key, &token);
    if (has_token < 0) {
        *why = session ? "SessionToken is not a string" : "Token is not a string";
        return -EIO;
    }
    int has_exp = json_util_string(o, "Expiration", &exp);
    if (has_exp < 0 || (has_exp == 1 && aws_time_parse(exp, &expiration) < 0)) {
        *why = "Expiration is not an RFC 3339 time";
        return -EIO;
    }
    if (temporary && (has_token != 1 || !*token || has_exp != 1)) {
        *why = session ? "no SessionToken or no Expiration" : "no Token or no Expiration";
        return -EIO;
    }
    if (has_exp == 1 && expiration == 0)
        expiration = 1; /* the epoch itself: expired, not "does not expire" */
    int ret = aws_creds_set(out, key, secret, has_token == 1 ? token : NULL, expiration);
    if (ret < 0)
        *why = "out of memory";
    return ret;
}

/* --- the chain ------------------------------------------------------------------------- */

#define DEFAULT_FETCH_TIMEOUT_MS 30000
#define MAX_PROFILE_DEPTH 8       /* source_profile hops before "a loop" */
#define REFRESH_AHEAD_MAX_S 300   /* refresh at most this long before expiration ... */
#define FORCED_SPACING_US 1000000 /* ... and forced fetches at least this far apart */
#define RETRY_MIN_S 1             /* a failed refresh is retried after 1, 2, 4, ... s */
#define RETRY_MAX_S 60

enum source_kind {
    SRC_STATIC,       /* keys from the environment or a profile: never refreshed */
    SRC_PROCESS,      /* credential_process */
    SRC_ASSUME_ROLE,  /* role_arn + source_profile / credential_source: STS AssumeRole */
    SRC_WEB_IDENTITY, /* role_arn + a token file: STS AssumeRoleWithWebIdentity */
    SRC_CONTAINER,
    SRC_IMDS,
};

/* One configured way to get credentials; a role's `base` is where its caller's come from. */
struct source {
    enum source_kind kind;
    struct aws_creds fixed;                                   /* SRC_STATIC */
    char *command;                                            /* SRC_PROCESS */
    char *role_arn, *session_name, *external_id, *token_file; /* the STS kinds */
    int duration_s;
    char *sts_endpoint, *sts_region;
    struct source *base; /* SRC_ASSUME_ROLE */
};

static void source_free(struct source *s)
{
    while (s) {
        struct source *base = s->base;
        aws_creds_clear(&s->fixed);
        free(s->command);
        free(s->role_arn);
        free(s->session_name);
        free(s->external_id);
        free(s->token_file);
        free(s->sts_endpoint);
        free(s->sts_region);
        free(s);
        s = base;
    }
}

/* Fetches one set from s (and its base). Returns 0 or -errno with err. */
static int source_fetch(const struct source *s, int timeout_ms, struct aws_creds *out, char *err,
                        size_t errlen)
{
    struct aws_sts_conf sts = {
        .endpoint = s->sts_endpoint, .region = s->sts_region, .timeout_ms = timeout_ms};
    struct aws_creds base = {0};
    int ret;

    memset(out, 0, sizeof(*out));
    switch (s->kind) {
    case SRC_STATIC:
        ret = aws_creds_dup(&s->fixed, out);
        if (ret < 0)
            snprintf(err, errlen, "out of memory");
        return ret;
    case SRC_PROCESS:
        return aws_creds_from_process(s->command, timeout_ms, out, err, errlen);
    case SRC_ASSUME_ROLE:
        ret = source_fetch(s->base, timeout_ms, &base, err, errlen);
        if (ret == 0)
            ret = aws_sts_assume_role(&sts, &base, s->role_arn, s->session_name, s->external_id,
                                      s->duration_s, out, err, errlen);
        aws_creds_clear(&base);
        return ret;
    case SRC_WEB_IDENTITY:
        return aws_sts_assume_role_web_identity(&sts, s->role_arn, s->session_name, s->token_file,
                                                s->duration_s, out, err, errlen);
    case SRC_CONTAINER:
        return aws_creds_from_container(timeout_ms, out, err, errlen);
    case SRC_IMDS:
        return aws_creds_from_imds(out, err, errlen);
    }
    return -EINVAL;
}

/* What resolving the chain needs besides the profile files. */
struct resolve {
    const char *region;       /* STS's signing region */
    const char *profile_name; /* the profile asked for */
    char *desc;               /* what was found, for aws_cred_provider_source() */
    char *err;
    size_t errlen;
};

static int fail(struct resolve *rs, int ret, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(struct resolve *rs, int ret, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rs->err, rs->errlen, fmt, ap);
    va_end(ap);
    return ret;
}

static int dup_opt(char **dst, const char *src)
{
    if (!src || !*src)
        return 0;
    *dst = strdup(src);
    return *dst ? 0 : -ENOMEM;
}

/* The STS part of a role source: ARN, session name, duration, endpoint. `regional` and
 * `endpoint_url` are the profile's settings (NULL: none). */
static int role_setup(struct resolve *rs, struct source *s, const char *role_arn,
                      const char *session_name, const char *external_id, const char *duration,
                      const char *regional, const char *endpoint_url, const char *where)
{
    char url[2048];
    int ret;

    if (!regional || !*regional)
        regional = getenv("AWS_STS_REGIONAL_ENDPOINTS");
    ret = aws_sts_endpoint(rs->region, regional && *regional ? regional : NULL, endpoint_url, url,
                           sizeof(url));
    if (ret < 0)
        return fail(rs, ret,
                    "%s: no usable STS endpoint (region '%s', sts_regional_endpoints "
                    "'%s')",
                    where, rs->region, regional ? regional : "");
    if (duration && *duration) {
        char *end;
        long d = strtol(duration, &end, 10);
        if (*end || d < 900 || d > 43200)
            return fail(rs, -EINVAL, "%s: duration_seconds must be 900..43200", where);
        s->duration_s = (int)d;
    }
    if (dup_opt(&s->role_arn, role_arn) || dup_opt(&s->session_name, session_name) ||
        dup_opt(&s->external_id, external_id) || dup_opt(&s->sts_endpoint, url) ||
        dup_opt(&s->sts_region, rs->region))
        return fail(rs, -ENOMEM, "out of memory");
    return 0;
}

static int resolve_profile(struct resolve *rs, const char *name, int depth, struct source **out);

/* credential_source = Environment | Ec2InstanceMetadata | EcsContainer: the base of a role. */
static int resolve_credential_source(struct resolve *rs, const char *profile, const char *cs,
                                     struct source *s)
{
    if (strcmp(cs, "Environment") == 0) {
        const char *ak = getenv("AWS_ACCESS_KEY_ID"), *sk = getenv("AWS_SECRET_ACCESS_KEY");
        if (!ak || !*ak || !sk || !*sk)
            return fail(rs, -ENOENT,
                        "profile '%s': credential_source Environment, but "
                        "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY are not set",
                        profile);
        s->kind = SRC_STATIC;
        int ret = aws_creds_set(&s->fixed, ak, sk, getenv("AWS_SESSION_TOKEN"), 0);
        return ret < 0 ? fail(rs, ret, "out of memory") : 0;
    }
    if (strcmp(cs, "Ec2InstanceMetadata") == 0) {
        s->kind = SRC_IMDS;
        return 0;
    }
    if (strcmp(cs, "EcsContainer") == 0) {
        s->kind = SRC_CONTAINER;
        return 0;
    }
    return fail(rs, -EINVAL,
                "profile '%s': credential_source '%s' is not one of Environment, "
                "Ec2InstanceMetadata, EcsContainer",
                profile, cs);
}

/* Profile p's own credentials (keys, then credential_process), for a profile without
 * role_arn or a source_profile that names itself. -ENOENT when it has none. */
static int resolve_plain(struct resolve *rs, const struct aws_profile *p, struct source *s)
{
    const char *name = aws_profile_name(p);
    const char *ak = aws_profile_get(p, "aws_access_key_id");
    const char *sk = aws_profile_get(p, "aws_secret_access_key");
    const char *tok = aws_profile_get(p, "aws_session_token");
    const char *cmd = aws_profile_get(p, "credential_process");

    if (!tok)
        tok = aws_profile_get(p, "aws_security_token");
    if ((ak && *ak) || (sk && *sk)) {
        if (!ak || !*ak || !sk || !*sk)
            return fail(rs, -EINVAL,
                        "profile '%s' needs both aws_access_key_id and "
                        "aws_secret_access_key",
                        name);
        s->kind = SRC_STATIC;
        int ret = aws_creds_set(&s->fixed, ak, sk, tok, 0);
        return ret < 0 ? fail(rs, ret, "out of memory") : 0;
    }
    if (cmd && *cmd) {
        s->kind = SRC_PROCESS;
        return dup_opt(&s->command, cmd) < 0 ? fail(rs, -ENOMEM, "out of memory") : 0;
    }
    return -ENOENT;
}

/* Profile `name` as a source (depth counts source_profile hops). -ENOENT (err set) when the
 * profile does not exist or has no credentials. */
static int resolve_profile(struct resolve *rs, const char *name, int depth, struct source **out)
{
    struct aws_profile *p = NULL;
    struct source *s = NULL;
    int ret;

    *out = NULL;
    if (depth > MAX_PROFILE_DEPTH)
        return fail(rs, -EINVAL, "profile '%s': source_profile chain longer than %d (a loop?)",
                    name, MAX_PROFILE_DEPTH);
    ret = aws_profile_load(name, &p, rs->err, rs->errlen);
    if (ret < 0)
        return ret;
    s = calloc(1, sizeof(*s));
    if (!s) {
        ret = fail(rs, -ENOMEM, "out of memory");
        goto out_free;
    }
    const char *role = aws_profile_get(p, "role_arn");
    if (!role || !*role) {
        ret = resolve_plain(rs, p, s);
        if (ret == -ENOENT)
            fail(rs, -ENOENT, "profile '%s' has no credentials", name);
        goto out_free;
    }

    char where[300];
    snprintf(where, sizeof(where), "profile '%s'", name);
    const char *src_profile = aws_profile_get(p, "source_profile");
    const char *cs = aws_profile_get(p, "credential_source");
    const char *wif = aws_profile_get(p, "web_identity_token_file");
    ret = role_setup(rs, s, role, aws_profile_get(p, "role_session_name"),
                     aws_profile_get(p, "external_id"), aws_profile_get(p, "duration_seconds"),
                     aws_profile_get(p, "sts_regional_endpoints"),
                     aws_profile_get(p, "endpoint_url"), where);
    if (ret < 0)
        goto out_free;
    if ((src_profile && *src_profile) + (cs && *cs) + (wif && *wif) != 1) {
        ret = fail(rs, -EINVAL,
                   "profile '%s' has role_arn and needs exactly one of "
                   "source_profile, credential_source, web_identity_token_file",
                   name);
        goto out_free;
    }
    if (wif && *wif) {
        s->kind = SRC_WEB_IDENTITY;
        ret = dup_opt(&s->token_file, wif) < 0 ? fail(rs, -ENOMEM, "out of memory") : 0;
        goto out_free;
    }
    s->kind = SRC_ASSUME_ROLE;
    s->base = calloc(1, sizeof(*s->base));
    if (!s->base) {
        ret = fail(rs, -ENOMEM, "out of memory");
        goto out_free;
    }
    if (cs && *cs) {
        ret = resolve_credential_source(rs, name, cs, s->base);
    } else if (strcmp(src_profile, name) == 0) {
        /* A profile that is its own source uses its own keys (the SDKs' rule). */
        ret = resolve_plain(rs, p, s->base);
        if (ret == -ENOENT)
            fail(rs, -ENOENT, "profile '%s' is its own source_profile but has no keys", name);
    } else {
        free(s->base);
        s->base = NULL;
        ret = resolve_profile(rs, src_profile, depth + 1, &s->base);
        if (ret == -ENOENT)
            fail(rs, -ENOENT, "profile '%s': its source_profile '%s' has no credentials", name,
                 src_profile);
    }
out_free:
    aws_profile_free(p);
    if (ret < 0)
        source_free(s);
    else
        *out = s;
    return ret;
}

static const char *kind_name(enum source_kind k)
{
    switch (k) {
    case SRC_STATIC:
        return "keys";
    case SRC_PROCESS:
        return "credential_process";
    case SRC_ASSUME_ROLE:
        return "role_arn, STS AssumeRole";
    case SRC_WEB_IDENTITY:
        return "web identity, STS AssumeRoleWithWebIdentity";
    case SRC_CONTAINER:
        return "container endpoint";
    case SRC_IMDS:
        return "instance metadata";
    }
    return "?";
}

/* Runs the chain (aws_creds.h): *out is the source found and *first its first set. */
static int resolve_chain(struct resolve *rs, int timeout_ms, struct source **out,
                         struct aws_creds *first)
{
    struct source *s = NULL;
    char tried[1024] = "";
    int ret;

    *out = NULL;
    /* 1. The environment. */
    const char *ak = getenv("AWS_ACCESS_KEY_ID"), *sk = getenv("AWS_SECRET_ACCESS_KEY");
    if ((ak && *ak) != (sk && *sk))
        return fail(rs, -EINVAL, "%s is set but %s is not",
                    ak && *ak ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY",
                    ak && *ak ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
    if (ak && *ak) {
        s = calloc(1, sizeof(*s));
        if (!s)
            return fail(rs, -ENOMEM, "out of memory");
        s->kind = SRC_STATIC;
        ret = aws_creds_set(&s->fixed, ak, sk, getenv("AWS_SESSION_TOKEN"), 0);
        if (ret < 0) {
            free(s);
            return fail(rs, ret, "out of memory");
        }
        rs->desc = strdup("environment (AWS_ACCESS_KEY_ID)");
        goto found;
    }
    snprintf(tried, sizeof(tried), "AWS_ACCESS_KEY_ID unset");

    /* 2. The shared files. A profile named by the user must exist; "default" need not. */
    const char *name = rs->profile_name;
    int named = name && *name;
    if (!named) {
        name = getenv("AWS_PROFILE");
        named = name && *name;
    }
    if (!named)
        name = "default";
    ret = resolve_profile(rs, name, 0, &s);
    if (ret == 0) {
        if (asprintf(&rs->desc, "profile '%s' (%s)", name, kind_name(s->kind)) < 0)
            rs->desc = NULL;
        goto found;
    }
    if (ret != -ENOENT || named)
        return ret; /* configured but broken, or a named profile that is not there */
    size_t n = strlen(tried);
    snprintf(tried + n, sizeof(tried) - n, ", %s", rs->err);

    /* 3. Web identity from the environment (IRSA). */
    const char *role = getenv("AWS_ROLE_ARN"), *wif = getenv("AWS_WEB_IDENTITY_TOKEN_FILE");
    if (role && *role && wif && *wif) {
        s = calloc(1, sizeof(*s));
        if (!s)
            return fail(rs, -ENOMEM, "out of memory");
        s->kind = SRC_WEB_IDENTITY;
        ret = role_setup(rs, s, role, getenv("AWS_ROLE_SESSION_NAME"), NULL, NULL, NULL, NULL,
                         "AWS_ROLE_ARN");
        if (ret == 0 && dup_opt(&s->token_file, wif) < 0)
            ret = fail(rs, -ENOMEM, "out of memory");
        if (ret < 0) {
            source_free(s);
            return ret;
        }
        rs->desc = strdup("web identity (AWS_ROLE_ARN, AWS_WEB_IDENTITY_TOKEN_FILE)");
        goto found;
    }
    n = strlen(tried);
    snprintf(tried + n, sizeof(tried) - n, ", no web identity (AWS_ROLE_ARN)");

    /* 4. The container endpoint, 5. instance metadata: tried by fetching. */
    for (int k = 0; k < 2; k++) {
        s = calloc(1, sizeof(*s));
        if (!s)
            return fail(rs, -ENOMEM, "out of memory");
        s->kind = k == 0 ? SRC_CONTAINER : SRC_IMDS;
        ret = source_fetch(s, timeout_ms, first, rs->err, rs->errlen);
        if (ret == 0) {
            rs->desc = strdup(kind_name(s->kind));
            *out = s;
            return rs->desc ? 0 : fail(rs, -ENOMEM, "out of memory");
        }
        source_free(s);
        s = NULL;
        if (ret != -ENOENT)
            return ret;
        n = strlen(tried);
        snprintf(tried + n, sizeof(tried) - n, ", %s",
                 k == 0 ? "no container endpoint (AWS_CONTAINER_CREDENTIALS_*_URI)" : rs->err);
    }
    return fail(rs, -ENOENT,
                "no AWS credentials: %s (or use no_sign_request for a public "
                "bucket)",
                tried);

found:
    if (!rs->desc) {
        source_free(s);
        return fail(rs, -ENOMEM, "out of memory");
    }
    ret = source_fetch(s, timeout_ms, first, rs->err, rs->errlen);
    if (ret < 0) {
        source_free(s);
        return ret;
    }
    *out = s;
    return 0;
}

/* --- the provider ---------------------------------------------------------------------- */

/* A set as handed out: the public part first, then what it owns. */
struct snap {
    struct aws_cred_snap pub;
    atomic_int refs;
    int64_t obtained; /* Unix seconds when it was fetched */
    char *userpwd;
    char *token;
};

struct aws_cred_provider {
    struct source *src;
    char *desc;
    int timeout_ms;
    int refreshable; /* the source can give new sets (not fixed keys) */
    void (*log)(void *arg, int level, const char *msg);
    void *log_arg;

    pthread_mutex_t fetch_mu; /* held across a fetch: one at a time; taken before mu */
    int64_t last_fetch_us;    /* monotonic end of the last fetch (under fetch_mu) */

    pthread_mutex_t mu; /* guards the fields below */
    pthread_cond_t cond;
    struct snap *cur;
    uint64_t gen;
    struct aws_cred_stats stats;
    int thread_started, stopping;
    pthread_t thread;
};

static void snap_free(struct snap *s)
{
    if (!s)
        return;
    if (s->userpwd) {
        explicit_bzero(s->userpwd, strlen(s->userpwd));
        free(s->userpwd);
    }
    if (s->token) {
        explicit_bzero(s->token, strlen(s->token));
        free(s->token);
    }
    free(s);
}

void aws_cred_snap_unref(const struct aws_cred_snap *pub)
{
    struct snap *s = (struct snap *)pub; /* pub is the first member */
    if (s && atomic_fetch_sub(&s->refs, 1) == 1)
        snap_free(s);
}

/* A snap made of c (c is left as it was). NULL when out of memory. */
static struct snap *snap_new(const struct aws_creds *c, uint64_t gen)
{
    struct snap *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    atomic_init(&s->refs, 1);
    if (asprintf(&s->userpwd, "%s:%s", c->access_key, c->secret_key) < 0) {
        s->userpwd = NULL;
        goto out_free;
    }
    if (c->session_token && !(s->token = strdup(c->session_token)))
        goto out_free;
    s->obtained = (int64_t)time(NULL);
    s->pub.userpwd = s->userpwd;
    s->pub.token = s->token;
    s->pub.expiration = c->expiration;
    s->pub.gen = gen;
    return s;
out_free:
    snap_free(s);
    return NULL;
}

static void plog(struct aws_cred_provider *p, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void plog(struct aws_cred_provider *p, int level, const char *fmt, ...)
{
    char msg[768];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (p->log)
        p->log(p->log_arg, level, msg);
    else if (level <= LOG_WARNING)
        fprintf(stderr, "pagefs: %s\n", msg);
}

static int64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Fetches a new set and makes it current. Called with fetch_mu held, mu not held. */
static int provider_fetch_locked(struct aws_cred_provider *p, char *err, size_t errlen)
{
    struct aws_creds c = {0};
    int ret = source_fetch(p->src, p->timeout_ms, &c, err, errlen);
    p->last_fetch_us = mono_us();
    pthread_mutex_lock(&p->mu);
    if (ret == 0) {
        struct snap *s = snap_new(&c, p->gen + 1);
        if (s) {
            struct snap *old = p->cur;
            p->cur = s;
            p->gen++;
            p->stats.refreshes++;
            p->stats.expiration = c.expiration;
            aws_cred_snap_unref(old ? &old->pub : NULL);
            pthread_mutex_unlock(&p->mu);
            plog(p, LOG_DEBUG, "AWS credentials refreshed (%s), set %llu, valid for %llds", p->desc,
                 (unsigned long long)s->pub.gen,
                 (long long)(c.expiration ? c.expiration - (int64_t)time(NULL) : -1));
            pthread_mutex_lock(&p->mu);
        } else {
            ret = -ENOMEM;
            snprintf(err, errlen, "out of memory");
        }
    }
    if (ret < 0)
        p->stats.refresh_failures++;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->mu);
    aws_creds_clear(&c);
    return ret;
}

/* When the set fetched at `obtained` and expiring at `exp` is to be replaced: the earlier
 * of 5 minutes before exp and half its lifetime before exp. */
static int64_t refresh_at(int64_t obtained, int64_t exp)
{
    int64_t life = exp - obtained;
    int64_t ahead = life / 2 < REFRESH_AHEAD_MAX_S ? life / 2 : REFRESH_AHEAD_MAX_S;
    return exp - (ahead > 0 ? ahead : 0);
}

/* The refresh thread: sleeps until the current set is due, fetches, and on failure tries
 * again after 1, 2, 4, ... 60 s while the old set (if still valid) goes on being used. */
static void *refresh_main(void *arg)
{
    pthread_setname_np(pthread_self(), "pagefs-creds"); /* top -H, perf --sort comm */
    struct aws_cred_provider *p = arg;
    int64_t backoff = 0, retry_at = 0;
    char err[512];

    pthread_mutex_lock(&p->mu);
    while (!p->stopping) {
        if (!p->cur->pub.expiration) { /* a refresh gave a set that does not expire */
            pthread_cond_wait(&p->cond, &p->mu);
            continue;
        }
        int64_t due = refresh_at(p->cur->obtained, p->cur->pub.expiration);
        if (due < p->cur->obtained + RETRY_MIN_S)
            due = p->cur->obtained + RETRY_MIN_S; /* a set fetched already expiring */
        if (retry_at > due)
            due = retry_at;
        int64_t now = (int64_t)time(NULL);
        if (now < due) {
            struct timespec ts = {.tv_sec = (time_t)due};
            pthread_cond_timedwait(&p->cond, &p->mu, &ts);
            continue; /* woken: re-read the (maybe new) set and the stop flag */
        }
        uint64_t gen = p->gen;
        pthread_mutex_unlock(&p->mu);
        pthread_mutex_lock(&p->fetch_mu);
        int ret = 0;
        pthread_mutex_lock(&p->mu);
        int fresh = p->gen != gen; /* a forced refresh got there first */
        pthread_mutex_unlock(&p->mu);
        if (!fresh)
            ret = provider_fetch_locked(p, err, sizeof(err));
        pthread_mutex_unlock(&p->fetch_mu);
        if (ret < 0) {
            backoff =
                backoff ? (backoff * 2 > RETRY_MAX_S ? RETRY_MAX_S : backoff * 2) : RETRY_MIN_S;
            retry_at = (int64_t)time(NULL) + backoff;
            plog(p, LOG_WARNING, "refreshing AWS credentials (%s) failed, retrying in %llds: %s",
                 p->desc, (long long)backoff, err);
        } else {
            backoff = 0;
            retry_at = 0;
        }
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int aws_cred_provider_create(const struct aws_cred_conf *conf, struct aws_cred_provider **out,
                             char *err, size_t errlen)
{
    struct aws_cred_provider *p = NULL;
    struct aws_creds first = {0};
    struct resolve rs = {.region = conf && conf->region && *conf->region ? conf->region : NULL,
                         .profile_name = conf ? conf->profile : NULL,
                         .err = err,
                         .errlen = errlen};
    int ret;

    *out = NULL;
    if (errlen)
        err[0] = '\0';
    if (!rs.region)
        rs.region = getenv("AWS_REGION");
    if (!rs.region || !*rs.region)
        rs.region = getenv("AWS_DEFAULT_REGION");
    if (!rs.region || !*rs.region)
        rs.region = "us-east-1";
    p = calloc(1, sizeof(*p));
    if (!p)
        return fail(&rs, -ENOMEM, "out of memory");
    p->timeout_ms = conf && conf->timeout_ms > 0 ? conf->timeout_ms : DEFAULT_FETCH_TIMEOUT_MS;
    p->log = conf ? conf->log : NULL;
    p->log_arg = conf ? conf->log_arg : NULL;
    pthread_mutex_init(&p->fetch_mu, NULL);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cond, NULL);

    ret = resolve_chain(&rs, p->timeout_ms, &p->src, &first);
    if (ret < 0)
        goto out_free;
    p->desc = rs.desc;
    rs.desc = NULL;
    p->refreshable = p->src->kind != SRC_STATIC;
    p->cur = snap_new(&first, 1);
    if (!p->cur) {
        ret = fail(&rs, -ENOMEM, "out of memory");
        goto out_free;
    }
    p->gen = 1;
    p->stats.expiration = first.expiration;
    p->last_fetch_us = mono_us();
    aws_creds_clear(&first);
    *out = p;
    return 0;

out_free:
    aws_creds_clear(&first);
    free(rs.desc);
    aws_cred_provider_destroy(p);
    return ret;
}

int aws_cred_provider_get(struct aws_cred_provider *p, const struct aws_cred_snap **out)
{
    int ret = 0;

    pthread_mutex_lock(&p->mu);
    if (p->cur->pub.expiration && p->refreshable && !p->thread_started && !p->stopping) {
        if (pthread_create(&p->thread, NULL, refresh_main, p) == 0)
            p->thread_started = 1;
        /* else: no refresh ahead; an expired set is still refreshed on demand */
    }
    atomic_fetch_add(&p->cur->refs, 1);
    *out = &p->cur->pub;
    pthread_mutex_unlock(&p->mu);
    return ret;
}

int aws_cred_provider_refresh(struct aws_cred_provider *p, uint64_t seen_gen)
{
    char err[512];
    int ret;

    if (!p->refreshable)
        return -EAGAIN;
    pthread_mutex_lock(&p->fetch_mu);
    pthread_mutex_lock(&p->mu);
    uint64_t gen = p->gen;
    pthread_mutex_unlock(&p->mu);
    if (gen > seen_gen) {
        ret = 0; /* someone else fetched a newer set meanwhile */
    } else if (mono_us() - p->last_fetch_us < FORCED_SPACING_US) {
        ret = -EAGAIN; /* just fetched: the store refuses fresh credentials, do not hammer */
    } else {
        ret = provider_fetch_locked(p, err, sizeof(err));
        if (ret < 0)
            plog(p, LOG_WARNING, "refreshing expired AWS credentials (%s) failed: %s", p->desc,
                 err);
    }
    pthread_mutex_unlock(&p->fetch_mu);
    return ret;
}

const char *aws_cred_provider_source(const struct aws_cred_provider *p)
{
    return p->desc;
}

void aws_cred_provider_stats(struct aws_cred_provider *p, struct aws_cred_stats *out)
{
    pthread_mutex_lock(&p->mu);
    *out = p->stats;
    pthread_mutex_unlock(&p->mu);
}

void aws_cred_provider_destroy(struct aws_cred_provider *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    pthread_cond_broadcast(&p->cond);
    int started = p->thread_started;
    pthread_mutex_unlock(&p->mu);
    if (started)
        pthread_join(p->thread, NULL);
    aws_cred_snap_unref(p->cur ? &p->cur->pub : NULL);
    source_free(p->src);
    free(p->desc);
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->fetch_mu);
    free(p);
}
