/*
 * test_aws_creds.c - unit tests of the credential chain and provider (aws_creds.h): one set's
 * helpers and ISO 8601 times, the order of the chain (environment, profiles with keys,
 * credential_process and roles, what a failure says), and the provider's refreshes: ahead of
 * expiry in the background (counted by the helper program itself), forced on an expired
 * reply, and a failing refresh that keeps the old set. No server: the temporary credentials
 * come from credential_process scripts the test writes; STS, the container endpoint and
 * instance metadata have their own tests (test_aws_sts, test_aws_imds).
 */
#include "backends/aws_creds.h"
#include "testlib.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CANARY_SECRET "CanarySecretDoNotPrint0123456789"

static char *dir;

static const char *path_of(const char *name)
{
    static char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return path;
}

static void write_text(const char *name, const char *text, int mode)
{
    CHECK_EQ(test_write_file(path_of(name), text, strlen(text)), 0);
    CHECK_EQ(chmod(path_of(name), mode), 0);
}

/* Every variable the chain reads, unset; HOME is the test dir (no ~/.aws there yet);
 * instance metadata off so that the chain ends quickly and the same way on any machine. */
static void clean_env(void)
{
    static const char *const vars[] = {"AWS_ACCESS_KEY_ID",
                                       "AWS_SECRET_ACCESS_KEY",
                                       "AWS_SESSION_TOKEN",
                                       "AWS_PROFILE",
                                       "AWS_SHARED_CREDENTIALS_FILE",
                                       "AWS_CONFIG_FILE",
                                       "AWS_ROLE_ARN",
                                       "AWS_WEB_IDENTITY_TOKEN_FILE",
                                       "AWS_ROLE_SESSION_NAME",
                                       "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                                       "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                                       "AWS_CONTAINER_AUTHORIZATION_TOKEN",
                                       "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
                                       "AWS_EC2_METADATA_SERVICE_ENDPOINT",
                                       "AWS_ENDPOINT_URL",
                                       "AWS_ENDPOINT_URL_STS",
                                       "AWS_STS_REGIONAL_ENDPOINTS",
                                       "AWS_REGION",
                                       "AWS_DEFAULT_REGION"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(*vars); i++)
        unsetenv(vars[i]);
    setenv("HOME", dir, 1);
    setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
    setenv("AWS_CONFIG_FILE", path_of("config"), 1);
    setenv("AWS_SHARED_CREDENTIALS_FILE", path_of("credentials"), 1);
    unlink(path_of("config"));
    unlink(path_of("credentials"));
}

static void test_time_parse(void)
{
    int64_t t = 0;
    CHECK_EQ(aws_time_parse("1970-01-01T00:00:00Z", &t), 0);
    CHECK_EQ(t, 0);
    CHECK_EQ(aws_time_parse("2026-12-02T17:00:00Z", &t), 0);
    CHECK_EQ(t, 1796230800);
    CHECK_EQ(aws_time_parse("2026-12-02T17:00:00.123456Z", &t), 0);
    CHECK_EQ(t, 1796230800);
    CHECK_EQ(aws_time_parse("2026-12-02T18:30:00+01:30", &t), 0);
    CHECK_EQ(t, 1796230800);
    CHECK_EQ(aws_time_parse("2026-12-02T15:00:00-02:00", &t), 0);
    CHECK_EQ(t, 1796230800);
    const char *bad[] = {"",
                         "2026-12-02",
                         "2026-12-02T17:00:00",
                         "2026-02-30T00:00:00Z",
                         "2026-13-01T00:00:00Z",
                         "2026-12-02T17:00:00Zjunk",
                         "20261202T170000Z",
                         "2026-12-02T17:00:00.Z",
                         "2026-12-02T24:00:00Z",
                         "1969-12-31T00:00:00Z",
                         "2026-12-02T17:00:00+1:00"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
        CHECK_EQ(aws_time_parse(bad[i], &t), -EINVAL);
    CHECK_EQ(aws_time_parse(NULL, &t), -EINVAL);
}

static void test_set_dup(void)
{
    struct aws_creds a = {0}, b = {0};
    CHECK_EQ(aws_creds_set(&a, "AK", "SK", "", 42), 0);
    CHECK(a.session_token == NULL); /* "" is no token */
    CHECK_EQ(aws_creds_dup(&a, &b), 0);
    CHECK_STR(b.access_key, "AK");
    CHECK_STR(b.secret_key, "SK");
    CHECK_EQ(b.expiration, 42);
    CHECK_EQ(aws_creds_set(&a, "AK", "", "tok", 0), -EINVAL);
    CHECK(a.access_key == NULL);
    aws_creds_clear(&b);
    aws_creds_clear(&b); /* twice is fine */
    CHECK(b.access_key == NULL && b.expiration == 0);
}

static struct aws_cred_provider *create_ok(const char *profile)
{
    struct aws_cred_conf conf = {.profile = profile, .timeout_ms = 5000};
    struct aws_cred_provider *p = NULL;
    char err[512] = "";
    int ret = aws_cred_provider_create(&conf, &p, err, sizeof(err));
    if (ret != 0)
        fprintf(stderr, "provider_create: %d: %s\n", ret, err);
    CHECK_EQ(ret, 0);
    return p;
}

/* The provider fails with ret; its message is returned (static) for more checks. */
static const char *create_fails(const char *profile, int want)
{
    struct aws_cred_conf conf = {.profile = profile, .timeout_ms = 5000};
    struct aws_cred_provider *p = NULL;
    static char err[1024];
    err[0] = '\0';
    CHECK_EQ(aws_cred_provider_create(&conf, &p, err, sizeof(err)), want);
    CHECK(p == NULL);
    CHECK(err[0] != '\0');
    CHECK(strstr(err, CANARY_SECRET) == NULL);
    return err;
}

static void check_set(struct aws_cred_provider *p, const char *userpwd, const char *token)
{
    const struct aws_cred_snap *s = NULL;
    CHECK_EQ(aws_cred_provider_get(p, &s), 0);
    CHECK_STR(s->userpwd, userpwd);
    if (token)
        CHECK_STR(s->token, token);
    else
        CHECK(s->token == NULL);
    aws_cred_snap_unref(s);
}

static void test_environment_first(void)
{
    clean_env();
    write_text("credentials",
               "[default]\naws_access_key_id = AKIFILE\n"
               "aws_secret_access_key = secretfile\n",
               0600);
    setenv("AWS_ACCESS_KEY_ID", "AKIENV", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "secretenv", 1);
    setenv("AWS_SESSION_TOKEN", "tokenenv", 1);
    struct aws_cred_provider *p = create_ok(NULL);
    CHECK_STR(aws_cred_provider_source(p), "environment (AWS_ACCESS_KEY_ID)");
    check_set(p, "AKIENV:secretenv", "tokenenv");
    CHECK_EQ(aws_cred_provider_refresh(p, 1), -EAGAIN); /* fixed keys: nothing to refresh */
    struct aws_cred_stats st;
    aws_cred_provider_stats(p, &st);
    CHECK_EQ(st.expiration, 0);
    aws_cred_provider_destroy(p);

    /* Half a pair in the environment is an error, not a fall-through to the file. */
    unsetenv("AWS_SECRET_ACCESS_KEY");
    const char *err = create_fails(NULL, -EINVAL);
    CHECK(strstr(err, "AWS_SECRET_ACCESS_KEY") != NULL);
    clean_env();
}

static void test_profiles(void)
{
    clean_env();
    write_text("credentials",
               "[default]\naws_access_key_id = AKIDEFAULT\naws_secret_access_key = sdefault\n"
               "[work]  \naws_access_key_id   =   AKIWORK   \n"
               "AWS_SECRET_ACCESS_KEY = secret/with+chars=   \r\n"
               "aws_security_token = oldtoken\n"
               "[halfway]\naws_access_key_id = AKIHALF\n",
               0600);
    write_text("config",
               "[profile cfgonly]\naws_access_key_id = AKICFG\n"
               "aws_secret_access_key = scfg\nregion = eu-west-1\n"
               "[profile nothing]\nregion = eu-west-1\n",
               0600);
    struct aws_cred_provider *p = create_ok(NULL);
    check_set(p, "AKIDEFAULT:sdefault", NULL);
    CHECK_STR(aws_cred_provider_source(p), "profile 'default' (keys)");
    aws_cred_provider_destroy(p);

    p = create_ok("work");
    check_set(p, "AKIWORK:secret/with+chars=", "oldtoken");
    aws_cred_provider_destroy(p);

    setenv("AWS_PROFILE", "cfgonly", 1);
    p = create_ok(NULL);
    check_set(p, "AKICFG:scfg", NULL);
    aws_cred_provider_destroy(p);
    p = create_ok("work"); /* the option wins over AWS_PROFILE */
    check_set(p, "AKIWORK:secret/with+chars=", "oldtoken");
    aws_cred_provider_destroy(p);
    unsetenv("AWS_PROFILE");

    const char *err = create_fails("halfway", -EINVAL);
    CHECK(strstr(err, "profile 'halfway'") != NULL);
    /* A profile named by the user must exist and must have credentials: no fall-through. */
    err = create_fails("nosuch", -ENOENT);
    CHECK(strstr(err, "nosuch") != NULL);
    err = create_fails("nothing", -ENOENT);
    CHECK(strstr(err, "profile 'nothing'") != NULL);
    clean_env();
}

static void test_nothing_found_says_what_was_tried(void)
{
    clean_env();
    const char *err = create_fails(NULL, -ENOENT);
    CHECK(strstr(err, "no AWS credentials") != NULL);
    CHECK(strstr(err, "AWS_ACCESS_KEY_ID unset") != NULL);
    CHECK(strstr(err, "'default'") != NULL);
    CHECK(strstr(err, "web identity") != NULL);
    CHECK(strstr(err, "container") != NULL);
    CHECK(strstr(err, "instance metadata") != NULL);
    CHECK(strstr(err, "no_sign_request") != NULL);
}

static void test_role_profiles_refused_when_incomplete(void)
{
    clean_env();
    write_text("config",
               "[profile noroot]\nrole_arn = arn:aws:iam::123456789012:role/r\n"
               "[profile both]\nrole_arn = arn:aws:iam::123456789012:role/r\n"
               "source_profile = base\ncredential_source = Environment\n"
               "[profile badcs]\nrole_arn = arn:aws:iam::123456789012:role/r\n"
               "credential_source = Elsewhere\n"
               "[profile loop1]\nrole_arn = arn:aws:iam::123456789012:role/r\n"
               "source_profile = loop2\n"
               "[profile loop2]\nrole_arn = arn:aws:iam::123456789012:role/r\n"
               "source_profile = loop1\n"
               "[profile emptysrc]\nrole_arn = arn:aws:iam::123456789012:role/r\n"
               "source_profile = nokeys\n"
               "[profile nokeys]\nregion = us-east-1\n"
               "[profile baddur]\nrole_arn = arn:aws:iam::123456789012:role/r\n"
               "source_profile = nokeys\nduration_seconds = 60\n",
               0600);
    const char *err = create_fails("noroot", -EINVAL);
    CHECK(strstr(err, "source_profile") != NULL);
    create_fails("both", -EINVAL);
    err = create_fails("badcs", -EINVAL);
    CHECK(strstr(err, "Elsewhere") != NULL);
    err = create_fails("loop1", -EINVAL);
    CHECK(strstr(err, "loop") != NULL);
    err = create_fails("emptysrc", -ENOENT);
    CHECK(strstr(err, "nokeys") != NULL);
    err = create_fails("baddur", -EINVAL);
    CHECK(strstr(err, "duration_seconds") != NULL);
    clean_env();
}

/* A credential_process script: counts its runs in NAME.count and prints a set that expires
 * `life` seconds from now, with the run number in the key; `fail_after` > 0: runs after that
 * one exit 1. */
static void write_helper(const char *name, int life, int fail_after)
{
    char text[2048];
    snprintf(text, sizeof(text),
             "#!/bin/sh\n"
             "n=$(cat '%s.count' 2>/dev/null || echo 0); n=$((n+1)); echo $n > '%s.count'\n"
             "if [ %d -gt 0 ] && [ $n -gt %d ]; then echo 'helper says: broken' >&2; exit 1; fi\n"
             "exp=$(date -u -d @$(( $(date +%%s) + %d )) +%%Y-%%m-%%dT%%H:%%M:%%SZ)\n"
             "printf '{\"Version\": 1, \"AccessKeyId\": \"AKIRUN%%s\", \"SecretAccessKey\": "
             "\"%s\", \"SessionToken\": \"tok%%s\", \"Expiration\": \"%%s\"}' $n $n $exp\n",
             path_of(name), path_of(name), fail_after, fail_after, life, CANARY_SECRET);
    write_text(name, text, 0755);
    char count[600];
    snprintf(count, sizeof(count), "%s.count", path_of(name));
    unlink(count);
}

static int helper_runs(const char *name)
{
    char count[600];
    snprintf(count, sizeof(count), "%s.count", path_of(name));
    FILE *f = fopen(count, "r");
    int n = 0;
    if (f) {
        if (fscanf(f, "%d", &n) != 1)
            n = 0;
        fclose(f);
    }
    return n;
}

/* Temporary credentials from credential_process that live 6 s are fetched again in the
 * background before they expire, while a reader keeps taking sets: no set it gets is ever
 * expired, and the helper's own count says how many fetches there were. */
static void test_refresh_ahead_of_expiry(void)
{
    clean_env();
    write_helper("helper6", 6, 0);
    char cfg[1024];
    snprintf(cfg, sizeof(cfg), "[profile temp]\ncredential_process = '%s'\n", path_of("helper6"));
    write_text("config", cfg, 0600);
    struct aws_cred_provider *p = create_ok("temp");
    CHECK_STR(aws_cred_provider_source(p), "profile 'temp' (credential_process)");
    check_set(p, "AKIRUN1:" CANARY_SECRET, "tok1");
    time_t t0 = time(NULL);
    uint64_t last_gen = 1;
    int expired_seen = 0;
    while (time(NULL) - t0 < 14) {
        const struct aws_cred_snap *s;
        CHECK_EQ(aws_cred_provider_get(p, &s), 0);
        if (s->expiration <= (int64_t)time(NULL))
            expired_seen++;
        CHECK(s->gen >= last_gen);
        last_gen = s->gen;
        aws_cred_snap_unref(s);
        usleep(20000);
    }
    CHECK_EQ(expired_seen, 0);
    struct aws_cred_stats st;
    aws_cred_provider_stats(p, &st);
    /* Refreshed at half the 6 s lifetime: about every 3 s, so 4 or 5 times in 14 s. */
    CHECK(st.refreshes >= 3 && st.refreshes <= 7);
    CHECK_EQ(st.refresh_failures, 0);
    CHECK_EQ((int)st.refreshes + 1, helper_runs("helper6"));
    CHECK_EQ(last_gen, st.refreshes + 1);
    CHECK(st.expiration > (int64_t)time(NULL));
    aws_cred_provider_destroy(p);
    clean_env();
}

/* A forced refresh (a request refused as expired): a newer set already there is enough; a
 * second forced fetch within a second is refused; later, a new set comes. */
static void test_forced_refresh(void)
{
    clean_env();
    write_helper("helper_long", 3600, 0);
    char cfg[1024];
    snprintf(cfg, sizeof(cfg), "[profile temp]\ncredential_process = %s\n", path_of("helper_long"));
    write_text("config", cfg, 0600);
    struct aws_cred_provider *p = create_ok("temp");
    CHECK_EQ(aws_cred_provider_refresh(p, 1), -EAGAIN); /* just fetched */
    usleep(1100000);
    CHECK_EQ(aws_cred_provider_refresh(p, 1), 0);
    check_set(p, "AKIRUN2:" CANARY_SECRET, "tok2");
    CHECK_EQ(aws_cred_provider_refresh(p, 1), 0); /* set 2 is newer than 1: no fetch */
    CHECK_EQ(helper_runs("helper_long"), 2);
    struct aws_cred_stats st;
    aws_cred_provider_stats(p, &st);
    CHECK_EQ(st.refreshes, 1);
    aws_cred_provider_destroy(p);
    clean_env();
}

/* A helper that fails after its first run: the background refresh fails, is counted and
 * retried, and the old set stays current; the failure's message carries the helper's stderr
 * line, not its secret. */
static void test_failed_refresh_keeps_old_set(void)
{
    clean_env();
    write_helper("helper_fail", 4, 1);
    char cfg[1024];
    snprintf(cfg, sizeof(cfg), "[profile temp]\ncredential_process = %s\n", path_of("helper_fail"));
    write_text("config", cfg, 0600);
    struct aws_cred_provider *p = create_ok("temp");
    check_set(p, "AKIRUN1:" CANARY_SECRET, "tok1"); /* starts the refresh thread */
    sleep(5);
    struct aws_cred_stats st;
    aws_cred_provider_stats(p, &st);
    CHECK_EQ(st.refreshes, 0);
    CHECK(st.refresh_failures >= 2); /* due at 2 s, retried after 1 s, 2 s */
    check_set(p, "AKIRUN1:" CANARY_SECRET, "tok1");
    aws_cred_provider_destroy(p);

    /* At create the same failure stops the chain with the helper's words. */
    const char *err = create_fails("temp", -EIO);
    CHECK(strstr(err, "helper says: broken") != NULL);
    clean_env();
}

int main(void)
{
    dir = test_mkdtemp("awscreds");
    RUN(test_time_parse);
    RUN(test_set_dup);
    RUN(test_environment_first);
    RUN(test_profiles);
    RUN(test_nothing_found_says_what_was_tried);
    RUN(test_role_profiles_refused_when_incomplete);
    RUN(test_refresh_ahead_of_expiry);
    RUN(test_forced_refresh);
    RUN(test_failed_refresh_keeps_old_set);
    test_rm_rf(dir);
    free(dir);
    return test_finish();
}
