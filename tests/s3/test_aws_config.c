/*
 * test_aws_config.c - unit tests of the AWS shared files reader (aws_config.h): profiles from
 * both files and their precedence, [profile x] against [x], [default] and [profile default],
 * comments, nested values, CRLF, missing and oversized files, the environment variables
 * (AWS_PROFILE, AWS_CONFIG_FILE, AWS_SHARED_CREDENTIALS_FILE, "~/"), case-insensitive keys,
 * empty values and what the error messages may say.
 *
 * HOME is set to a directory of the test's own; every file is written there.
 */
#include "backends/aws_config.h"
#include "testlib.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *dir; /* the test's directory; HOME is dir/home */
static char home[512];

static void put(const char *rel, const char *text)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", home, rel);
    CHECK_EQ(test_write_file(path, text, strlen(text)), 0);
}

static void drop(const char *rel)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", home, rel);
    unlink(path);
}

static void clean_env(void)
{
    unsetenv("AWS_PROFILE");
    unsetenv("AWS_CONFIG_FILE");
    unsetenv("AWS_SHARED_CREDENTIALS_FILE");
    setenv("HOME", home, 1);
    drop(".aws/credentials");
    drop(".aws/config");
}

/* Loads name and expects success; NULL on failure (after a recorded CHECK failure). */
static struct aws_profile *load(const char *name)
{
    struct aws_profile *p = NULL;
    char err[1024] = "";
    int rc = aws_profile_load(name, &p, err, sizeof(err));
    if (rc != 0)
        fprintf(stderr, "load(%s): %d %s\n", name ? name : "(null)", rc, err);
    CHECK_EQ(rc, 0);
    return p;
}

/* Expects key to be unset in p. */
#define CHECK_UNSET(p, key) CHECK((p) && aws_profile_get((p), (key)) == NULL)

static const char credentials[] = "[default]\n"
                                  "aws_access_key_id = AKIDEFAULT\n"
                                  "aws_secret_access_key = creds-secret-default\n"
                                  "\n"
                                  "[work]\n"
                                  "aws_access_key_id=AKIWORK\n"
                                  "aws_secret_access_key=creds-secret-work\n"
                                  "region = from-credentials\n"
                                  "[profile px]\n"
                                  "aws_access_key_id = AKIPX\n";

static const char config[] = "# a comment\n"
                             "; another comment\n"
                             "   # an indented comment\n"
                             "[default]\n"
                             "region = us-west-2\n"
                             "aws_access_key_id = AKI-FROM-CONFIG\n"
                             "output=json\n"
                             "[profile work]\n"
                             "region = eu-west-1\n"
                             "role_arn = arn:aws:iam::123456789012:role/reader\n"
                             "s3 =\n"
                             "  max_concurrent_requests = 20\n"
                             "  addressing_style = path\n"
                             "\t[profile hidden]\n"
                             "cli_pager=\n"
                             "note = a # is part of the value ; so is this\n"
                             "[work]\n"
                             "mfa_serial = not-a-profile-key\n"
                             "[sso-session corp]\n"
                             "sso_region = us-east-1\n"
                             "[services dev]\n"
                             "s3 =\n"
                             "  endpoint_url = http://localhost:9000\n"
                             "[profile cfgonly]\n"
                             "credential_process = /bin/true\n"
                             "[profile   spaced   ]   # a comment after the header\n"
                             "region = ap-south-1\n";

static void test_two_files(void)
{
    clean_env();
    put(".aws/credentials", credentials);
    put(".aws/config", config);

    struct aws_profile *p = load(NULL);
    CHECK_STR(aws_profile_name(p), "default");
    CHECK_STR(aws_profile_get(p, "aws_access_key_id"), "AKIDEFAULT"); /* credentials win */
    CHECK_STR(aws_profile_get(p, "aws_secret_access_key"), "creds-secret-default");
    CHECK_STR(aws_profile_get(p, "region"), "us-west-2");
    CHECK_STR(aws_profile_get(p, "output"), "json");
    CHECK_UNSET(p, "role_arn");
    aws_profile_free(p);

    p = load("work");
    CHECK_STR(aws_profile_name(p), "work");
    CHECK_STR(aws_profile_get(p, "aws_access_key_id"), "AKIWORK");
    CHECK_STR(aws_profile_get(p, "region"), "from-credentials");
    CHECK_STR(aws_profile_get(p, "role_arn"), "arn:aws:iam::123456789012:role/reader");
    /* The nested block: "s3" is set (empty), its indented sub-keys are not keys. */
    CHECK_STR(aws_profile_get(p, "s3"), "");
    CHECK_UNSET(p, "max_concurrent_requests");
    CHECK_UNSET(p, "addressing_style");
    CHECK_STR(aws_profile_get(p, "cli_pager"), "");
    CHECK_STR(aws_profile_get(p, "note"), "a # is part of the value ; so is this");
    CHECK_UNSET(p, "mfa_serial"); /* from "[work]" in the config file: not profile work */
    CHECK_UNSET(p, "sso_region");
    aws_profile_free(p);

    p = load("cfgonly");
    CHECK_STR(aws_profile_get(p, "credential_process"), "/bin/true");
    CHECK_UNSET(p, "aws_access_key_id");
    aws_profile_free(p);

    p = load("spaced");
    CHECK_STR(aws_profile_get(p, "region"), "ap-south-1");
    aws_profile_free(p);

    /* Not profiles: non-profile sections, a bare [x] of the config file, an indented header
     * inside a nested value, and [profile x] of the credentials file as profile x. */
    const char *not_profiles[] = {"corp", "sso-session corp", "dev", "services dev", "hidden",
                                  "px",   "profile work"};
    for (size_t i = 0; i < sizeof(not_profiles) / sizeof(not_profiles[0]); i++) {
        struct aws_profile *q = (struct aws_profile *)1;
        char err[1024] = "";
        CHECK_EQ(aws_profile_load(not_profiles[i], &q, err, sizeof(err)), -ENOENT);
        CHECK(q == NULL);
        CHECK(strstr(err, not_profiles[i]) != NULL);
    }
    /* In the credentials file a section's name is taken whole. */
    p = load("profile px");
    CHECK_STR(aws_profile_get(p, "aws_access_key_id"), "AKIPX");
    aws_profile_free(p);
}

static void test_missing_profile_message(void)
{
    char err[1024] = "", cred[512], conf[512];
    struct aws_profile *p = (struct aws_profile *)1;

    clean_env();
    put(".aws/credentials", credentials);
    put(".aws/config", config);
    aws_config_credentials_path(cred, sizeof(cred));
    aws_config_config_path(conf, sizeof(conf));
    CHECK_EQ(aws_profile_load("nosuch", &p, err, sizeof(err)), -ENOENT);
    CHECK(p == NULL);
    CHECK(strstr(err, "'nosuch'") != NULL);
    CHECK(strstr(err, cred) != NULL);
    CHECK(strstr(err, conf) != NULL);
    CHECK(strchr(err, '\n') == NULL);
    CHECK(strstr(err, "secret") == NULL && strstr(err, "AKI") == NULL);

    /* A name with a control character is shown without it. */
    CHECK_EQ(aws_profile_load("bad\nname", &p, err, sizeof(err)), -ENOENT);
    CHECK(strchr(err, '\n') == NULL);
    CHECK(strstr(err, "bad?name") != NULL);

    /* Neither file exists: the same, naming both paths. */
    clean_env();
    CHECK_EQ(aws_profile_load(NULL, &p, err, sizeof(err)), -ENOENT);
    CHECK(strstr(err, "'default'") != NULL);
    CHECK(strstr(err, cred) != NULL && strstr(err, conf) != NULL);

    /* Only one file exists: it is enough. */
    put(".aws/config", "[profile only]\nregion = r1\n");
    p = load("only");
    CHECK_STR(aws_profile_get(p, "region"), "r1");
    aws_profile_free(p);
    drop(".aws/config");
    put(".aws/credentials", "[only]\nregion = r2\n");
    p = load("only");
    CHECK_STR(aws_profile_get(p, "region"), "r2");
    aws_profile_free(p);

    /* An empty section is a profile (with no keys). */
    put(".aws/credentials", "[hollow]\n");
    p = load("hollow");
    CHECK(p != NULL && aws_profile_get(p, "region") == NULL);
    aws_profile_free(p);
}

static void test_default_forms(void)
{
    clean_env();
    /* [profile default] wins over [default] as a whole, wherever each one is. */
    put(".aws/config", "[default]\nregion = bare\nonly_bare = 1\n"
                       "[profile default]\nregion = prefixed\n"
                       "[default]\nregion = bare-again\n");
    struct aws_profile *p = load("default");
    CHECK_STR(aws_profile_get(p, "region"), "prefixed");
    CHECK_UNSET(p, "only_bare");
    aws_profile_free(p);

    put(".aws/config", "[profile default]\nregion = prefixed-only\n");
    p = load(NULL);
    CHECK_STR(aws_profile_get(p, "region"), "prefixed-only");
    aws_profile_free(p);

    put(".aws/config", "[default]\nregion = bare-only\n");
    p = load(NULL);
    CHECK_STR(aws_profile_get(p, "region"), "bare-only");
    aws_profile_free(p);

    /* The credentials file's [default] still wins over either. */
    put(".aws/credentials", "[default]\nregion = creds\n");
    p = load(NULL);
    CHECK_STR(aws_profile_get(p, "region"), "creds");
    aws_profile_free(p);
    /* And [profile default] in the credentials file is not default. */
    put(".aws/credentials", "[profile default]\nregion = creds\n");
    p = load(NULL);
    CHECK_STR(aws_profile_get(p, "region"), "bare-only");
    aws_profile_free(p);
}

static void test_syntax(void)
{
    clean_env();
    put(".aws/credentials", "orphan = before any section\n"
                            "  [ spaced ]  \r\n"
                            "\tAWS_Access_Key_ID   =   AKISPACED   \r\n"
                            "Aws_Secret_Access_Key = secret/with+chars==\r\n"
                            "empty =\r\n"
                            "empty2=   \r\n"
                            "equals = a=b=c\r\n"
                            "no equals sign here\r\n"
                            "  nested = looks like a continuation\r\n"
                            "\r\n"
                            "[dup]\nk = first\nk = second\nK = third\n"
                            "[other]\nk = other\n"
                            "[dup]\nk2 = merged\n"
                            "[broken\n"
                            "k = under a broken header\n"
                            "[last]\n"
                            "k = no newline at the end");
    struct aws_profile *p = load("spaced");
    CHECK_STR(aws_profile_get(p, "aws_access_key_id"), "AKISPACED");
    CHECK_STR(aws_profile_get(p, "AWS_ACCESS_KEY_ID"), "AKISPACED");
    CHECK_STR(aws_profile_get(p, "aws_secret_access_key"), "secret/with+chars==");
    CHECK_STR(aws_profile_get(p, "empty"), "");
    CHECK_STR(aws_profile_get(p, "EMPTY2"), "");
    CHECK_STR(aws_profile_get(p, "equals"), "a=b=c");
    CHECK_UNSET(p, "nested");
    CHECK_UNSET(p, "orphan");
    CHECK_UNSET(p, "no equals sign here");
    aws_profile_free(p);

    p = load("dup");
    CHECK_STR(aws_profile_get(p, "k"), "third"); /* the last assignment wins */
    CHECK_STR(aws_profile_get(p, "k2"), "merged");
    aws_profile_free(p);
    p = load("last");
    CHECK_STR(aws_profile_get(p, "k"), "no newline at the end");
    aws_profile_free(p);
    struct aws_profile *q = NULL;
    char err[512];
    CHECK_EQ(aws_profile_load("broken", &q, err, sizeof(err)), -ENOENT);

    /* CRLF throughout, in the config file too. */
    put(".aws/config", "[profile crlf]\r\nregion = eu-north-1\r\ns3 =\r\n  x = y\r\n"
                       "output = text\r\n");
    p = load("crlf");
    CHECK_STR(aws_profile_get(p, "region"), "eu-north-1");
    CHECK_STR(aws_profile_get(p, "output"), "text");
    CHECK_STR(aws_profile_get(p, "s3"), "");
    CHECK_UNSET(p, "x");
    aws_profile_free(p);
}

static void test_environment(void)
{
    char buf[1024], want[1024];

    clean_env();
    /* Default paths under HOME. */
    aws_config_credentials_path(buf, sizeof(buf));
    snprintf(want, sizeof(want), "%s/.aws/credentials", home);
    CHECK_STR(buf, want);
    aws_config_config_path(buf, sizeof(buf));
    snprintf(want, sizeof(want), "%s/.aws/config", home);
    CHECK_STR(buf, want);

    /* The variables, with "~/" as HOME. */
    put("elsewhere/c1", "[p1]\nsrc = creds-file\n");
    put("elsewhere/k1", "[profile p1]\nsrc = config-file\nregion = r\n");
    setenv("AWS_SHARED_CREDENTIALS_FILE", "~/elsewhere/c1", 1);
    snprintf(want, sizeof(want), "%s/elsewhere/k1", home);
    setenv("AWS_CONFIG_FILE", want, 1);
    aws_config_credentials_path(buf, sizeof(buf));
    snprintf(want, sizeof(want), "%s/elsewhere/c1", home);
    CHECK_STR(buf, want);
    setenv("AWS_PROFILE", "p1", 1);
    struct aws_profile *p = load(NULL);
    CHECK_STR(aws_profile_name(p), "p1");
    CHECK_STR(aws_profile_get(p, "src"), "creds-file");
    CHECK_STR(aws_profile_get(p, "region"), "r");
    aws_profile_free(p);
    p = load("");
    CHECK_STR(aws_profile_name(p), "p1");
    aws_profile_free(p);
    /* An explicit name beats AWS_PROFILE. */
    struct aws_profile *q = NULL;
    char err[1024];
    CHECK_EQ(aws_profile_load("default", &q, err, sizeof(err)), -ENOENT);
    CHECK(strstr(err, want) != NULL); /* the file actually read is named */

    setenv("AWS_CONFIG_FILE", "~/elsewhere/k1", 1);
    unsetenv("AWS_SHARED_CREDENTIALS_FILE");
    p = load(NULL);
    CHECK_STR(aws_profile_get(p, "src"), "config-file");
    aws_profile_free(p);

    /* No HOME and no variables: empty paths, and nothing found. */
    unsetenv("AWS_CONFIG_FILE");
    unsetenv("HOME");
    aws_config_credentials_path(buf, sizeof(buf));
    CHECK_STR(buf, "");
    aws_config_config_path(buf, sizeof(buf));
    CHECK_STR(buf, "");
    CHECK_EQ(aws_profile_load(NULL, &q, err, sizeof(err)), -ENOENT);
    CHECK(strstr(err, "HOME") != NULL);
    clean_env();
}

static void test_limits_and_errors(void)
{
    char err[1024];
    struct aws_profile *p = (struct aws_profile *)1;

    clean_env();
    /* A line just under 64 KiB is fine; one over is -EIO, not a crash. */
    size_t n = 64 * 1024 + 100;
    char *text = malloc(n + 64);
    CHECK(text != NULL);
    if (!text)
        return;
    int hdr = snprintf(text, n, "[big]\nk = ");
    memset(text + hdr, 'S', 60000);
    strcpy(text + hdr + 60000, "\n");
    put(".aws/credentials", text);
    struct aws_profile *big = load("big");
    CHECK(big && aws_profile_get(big, "k") && strlen(aws_profile_get(big, "k")) == 60000);
    aws_profile_free(big);

    memset(text + hdr, 'S', n - hdr - 1);
    text[n - 1] = '\0';
    put(".aws/credentials", text);
    CHECK_EQ(aws_profile_load("big", &p, err, sizeof(err)), -EIO);
    CHECK(p == NULL);
    CHECK(strstr(err, "too large") != NULL);
    CHECK(strstr(err, "SSSS") == NULL);
    free(text);

    /* A file over 4 MiB: -EIO, whatever its lines. */
    size_t fsz = (4u << 20) + 10;
    char *huge = malloc(fsz + 1);
    CHECK(huge != NULL);
    if (!huge)
        return;
    for (size_t i = 0; i < fsz; i++)
        huge[i] = (i % 64 == 63) ? '\n' : '#';
    huge[fsz] = '\0';
    put(".aws/credentials", huge);
    free(huge);
    CHECK_EQ(aws_profile_load("default", &p, err, sizeof(err)), -EIO);
    CHECK(strstr(err, "too large") != NULL);
    drop(".aws/credentials");

    /* A path that exists but is not a readable file. */
    char d[1024];
    snprintf(d, sizeof(d), "%s/adir", home);
    mkdir(d, 0755);
    setenv("AWS_CONFIG_FILE", d, 1);
    CHECK_EQ(aws_profile_load("default", &p, err, sizeof(err)), -EIO);
    CHECK(strstr(err, d) != NULL);
    /* A path through a regular file is a missing file. */
    put("plain", "x");
    snprintf(d, sizeof(d), "%s/plain/config", home);
    setenv("AWS_CONFIG_FILE", d, 1);
    CHECK_EQ(aws_profile_load("default", &p, err, sizeof(err)), -ENOENT);
    clean_env();

    aws_profile_free(NULL);
}

int main(void)
{
    dir = test_mkdtemp("awsconfig");
    if (!dir)
        return 1;
    snprintf(home, sizeof(home), "%s/home", dir);
    mkdir(home, 0755);
    RUN(test_two_files);
    RUN(test_missing_profile_message);
    RUN(test_default_forms);
    RUN(test_syntax);
    RUN(test_environment);
    RUN(test_limits_and_errors);
    test_rm_rf(dir);
    free(dir);
    return test_finish();
}
