/*
 * aws_creds.h - AWS credentials the way the AWS CLI and SDKs find them, kept fresh.
 *
 * struct aws_creds is one set of credentials (static or temporary). The provider
 * (struct aws_cred_provider) runs the SDKs' default chain once, at create, and then keeps
 * temporary credentials fresh: a background thread fetches new ones ahead of their
 * expiration, so no request fails or waits because of expiry, and a request that still meets
 * an expired token asks for a refresh (aws_cred_provider_refresh()) and retries once.
 *
 * The chain, in the SDKs' order (README "Credentials"):
 *   1. the environment: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN);
 *   2. the shared files (aws_config.h), profile PROFILE (the -o profile, else $AWS_PROFILE,
 *      else "default"): static keys, credential_process (aws_process.h), or role_arn with
 *      source_profile / credential_source / web_identity_token_file (STS, aws_sts.h);
 *   3. web identity (IRSA): AWS_ROLE_ARN + AWS_WEB_IDENTITY_TOKEN_FILE (aws_sts.h);
 *   4. container credentials (ECS, EKS Pod Identity) (aws_imds.h);
 *   5. instance metadata, IMDSv2 (aws_imds.h).
 * A source that is not configured passes to the next; one that is configured but fails stops
 * the chain with its error (as the SDKs do), except instance metadata, the last, which is
 * simply absent off EC2. With nothing found the error names what was tried.
 *
 * Strings in struct aws_creds are owned by it; aws_creds_clear() wipes and frees them. No
 * error message of any function here contains a key, a secret or a token.
 */
#ifndef PAGEFS_AWS_CREDS_H
#define PAGEFS_AWS_CREDS_H

#include <stddef.h>
#include <stdint.h>

struct aws_creds {
    char *access_key;
    char *secret_key;
    char *session_token; /* NULL when there is none */
    int64_t expiration;  /* Unix seconds when they stop working; 0: they do not expire */
};

/* Wipe and free the strings; the struct is left zeroed. Safe on a zeroed struct. */
void aws_creds_clear(struct aws_creds *c);

/* Copies src into *dst (zeroed first). Returns 0 or -ENOMEM (dst left zeroed). */
int aws_creds_dup(const struct aws_creds *src, struct aws_creds *dst);

/* Sets the three strings of *c (session_token may be NULL or "" for none) and expiration,
 * wiping what was there. Returns 0, -EINVAL when the access key or the secret is NULL or
 * empty (c left cleared), -ENOMEM. */
int aws_creds_set(struct aws_creds *c, const char *access_key, const char *secret_key,
                  const char *session_token, int64_t expiration);

/* Credentials from a JSON reply object o (struct json_object of json-c): "AccessKeyId" and
 * "SecretAccessKey" (non-empty strings), the session token under token_key ("Token" for the
 * container endpoint and instance metadata, "SessionToken" for credential_process) and
 * "Expiration" (RFC 3339), both strings when present. `temporary`: the token and Expiration
 * are required; otherwise either may be absent, and without Expiration the set does not
 * expire. Returns 0 with *out, -EIO with *why (a static phrase such as "no AccessKeyId"; never
 * a value), -ENOMEM. */
struct json_object;
int aws_creds_from_json(struct json_object *o, const char *token_key, int temporary,
                        struct aws_creds *out, const char **why);

/* Parses an ISO 8601 / RFC 3339 time as AWS services write it: "2026-12-02T17:00:00Z", with
 * optional fractional seconds and a "Z", "+HH:MM" or "-HH:MM" zone. Returns 0 with Unix
 * seconds in *out, or -EINVAL. */
int aws_time_parse(const char *s, int64_t *out);

/* --- the provider ---------------------------------------------------------------------- */

struct aws_cred_conf {
    const char *profile; /* NULL: $AWS_PROFILE, else "default" */
    const char *region;  /* for STS; NULL: the profile's, $AWS_REGION, ..., us-east-1 */
    int timeout_ms;      /* one fetch (an HTTP call, a process) at most; <= 0: the default */
    /* Where the refresh thread reports (level: syslog's LOG_WARNING a failed refresh,
     * LOG_DEBUG a new set); NULL: failures to stderr. The message holds no secret. */
    void (*log)(void *arg, int level, const char *msg);
    void *log_arg;
};

struct aws_cred_provider;

/* Runs the chain once. Returns 0 with *out (destroy with aws_cred_provider_destroy()), or
 * -errno with one line in err naming what was tried or what failed: -ENOENT nothing found,
 * -EINVAL a bad configuration, -EACCES refused by a service, -ETIMEDOUT, -EIO a bad reply,
 * -ENOMEM. The refresh thread starts on the first aws_cred_provider_get() of temporary
 * credentials (not here: a process that forks after create keeps working). */
int aws_cred_provider_create(const struct aws_cred_conf *conf, struct aws_cred_provider **out,
                             char *err, size_t errlen);

/* One immutable set of credentials, shared: take with aws_cred_provider_get(), give back
 * with aws_cred_snap_unref(). userpwd is "KEY:SECRET" (libcurl's form); token is NULL or the
 * session token; gen counts the sets this provider has had (1, 2, ...). */
struct aws_cred_snap {
    const char *userpwd;
    const char *token;
    int64_t expiration;
    uint64_t gen;
};

/* The current set. Never blocks on a fetch. Returns 0 with *out, or -ENOMEM. */
int aws_cred_provider_get(struct aws_cred_provider *p, const struct aws_cred_snap **out);
void aws_cred_snap_unref(const struct aws_cred_snap *s);

/* A request signed with set `seen_gen` was refused as expired: fetch a new set now unless a
 * newer one than seen_gen is already there. At most one fetch runs at a time (others wait for
 * it), and forced fetches are at least a second apart. Returns 0 when a set newer than
 * seen_gen is current (retry with it), -EAGAIN when the credentials do not expire (static
 * ones: retrying cannot help), or the fetch's -errno. */
int aws_cred_provider_refresh(struct aws_cred_provider *p, uint64_t seen_gen);

/* What the chain found, e.g. "environment", "profile 'x' (credential_process)", "container
 * endpoint"; static for the provider's life. */
const char *aws_cred_provider_source(const struct aws_cred_provider *p);

struct aws_cred_stats {
    uint64_t refreshes;        /* successful fetches after the first */
    uint64_t refresh_failures; /* failed fetches after the first */
    int64_t expiration;        /* of the current set; 0: it does not expire */
};
void aws_cred_provider_stats(struct aws_cred_provider *p, struct aws_cred_stats *out);

/* Stops the refresh thread and frees everything; NULL is a no-op. */
void aws_cred_provider_destroy(struct aws_cred_provider *p);

#endif
