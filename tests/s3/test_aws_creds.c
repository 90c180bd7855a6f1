/*
 * test_aws_creds.c - unit tests of the AWS credentials lookup: the credentials file parser
 * (profiles, whitespace, comments, broken files) and the environment-first order.
 */
#include "backends/aws_creds.h"
#include "testlib.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *dir;

static const char *write_creds(const char *name, const char *text)
{
    static char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    CHECK_EQ(test_write_file(path, text, strlen(text)), 0);
    return path;
}

static void clear_env(void)
{
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    unsetenv("AWS_SESSION_TOKEN");
    unsetenv("AWS_PROFILE");
    unsetenv("AWS_SHARED_CREDENTIALS_FILE");
}

static const char sample[] =
    "# a comment\n"
    "; another comment\n"
    "\n"
    "[default]\n"
    "aws_access_key_id=AKIDEFAULT\n"
    "aws_secret_access_key=secretdefault\n"
    "\n"
    "  [ work ]  \n"
    "\taws_access_key_id   =   AKIWORK   \n"
    "AWS_SECRET_ACCESS_KEY = secret/with+chars=   \r\n"
    "aws_session_token = tok en\n"
    "region = eu-west-1\n"
    "[profile cfgstyle]\n"
    "aws_access_key_id = AKICFG\n"
    "aws_secret_access_key = secretcfg\n"
    "aws_security_token = oldtoken\n"
    "[halfway]\n"
    "aws_access_key_id = AKIHALF\n"
    "[empty]\n"
    "[broken\n"
    "aws_access_key_id = AKIBROKEN\n"
    "aws_secret_access_key = secretbroken\n"
    "[last]\n"
    "aws_secret_access_key = lastsecret\n"
    "aws_access_key_id = AKILAST"; /* no trailing newline */

static void test_file_profiles(void)
{
    const char *path = write_creds("credentials", sample);
    struct aws_creds c;

    CHECK_EQ(aws_creds_from_file(path, "default", &c), 0);
    CHECK_STR(c.access_key, "AKIDEFAULT");
    CHECK_STR(c.secret_key, "secretdefault");
    CHECK(c.session_token == NULL);
    aws_creds_clear(&c);
    CHECK(c.access_key == NULL && c.secret_key == NULL);

    CHECK_EQ(aws_creds_from_file(path, "work", &c), 0);
    CHECK_STR(c.access_key, "AKIWORK");
    CHECK_STR(c.secret_key, "secret/with+chars=");
    CHECK_STR(c.session_token, "tok en");
    aws_creds_clear(&c);

    CHECK_EQ(aws_creds_from_file(path, "cfgstyle", &c), 0);
    CHECK_STR(c.access_key, "AKICFG");
    CHECK_STR(c.session_token, "oldtoken");
    aws_creds_clear(&c);

    CHECK_EQ(aws_creds_from_file(path, "last", &c), 0);
    CHECK_STR(c.access_key, "AKILAST");
    CHECK_STR(c.secret_key, "lastsecret");
    aws_creds_clear(&c);

    CHECK_EQ(aws_creds_from_file(path, "halfway", &c), -EINVAL);
    CHECK(c.access_key == NULL);
    CHECK_EQ(aws_creds_from_file(path, "empty", &c), -ENOENT);
    CHECK_EQ(aws_creds_from_file(path, "nosuch", &c), -ENOENT);
    /* The keys under a broken header belong to no profile. */
    CHECK_EQ(aws_creds_from_file(path, "broken", &c), -ENOENT);
    CHECK_EQ(aws_creds_from_file(path, "", &c), -EINVAL);
}

static void test_file_missing_and_odd(void)
{
    struct aws_creds c;
    char path[512];

    snprintf(path, sizeof(path), "%s/does-not-exist", dir);
    CHECK_EQ(aws_creds_from_file(path, "default", &c), -ENOENT);
    CHECK_EQ(aws_creds_from_file(dir, "default", &c), -EIO); /* a directory */
    const char *empty = write_creds("empty", "");
    CHECK_EQ(aws_creds_from_file(empty, "default", &c), -ENOENT);
    const char *junk = write_creds("junk", "\x01\x02 garbage\n=\n[\n]\n[default\n");
    CHECK_EQ(aws_creds_from_file(junk, "default", &c), -ENOENT);
    /* A repeated key: the last one wins, like the AWS CLI's parser. */
    const char *rep = write_creds("rep", "[default]\naws_access_key_id=A1\n"
                                         "aws_secret_access_key=S1\naws_access_key_id=A2\n");
    CHECK_EQ(aws_creds_from_file(rep, "default", &c), 0);
    CHECK_STR(c.access_key, "A2");
    aws_creds_clear(&c);
    /* Profile sections repeated: keys merge. */
    const char *split = write_creds("split", "[p]\naws_access_key_id=A\n[q]\nx=y\n"
                                             "[p]\naws_secret_access_key=S\n");
    CHECK_EQ(aws_creds_from_file(split, "p", &c), 0);
    CHECK_STR(c.access_key, "A");
    CHECK_STR(c.secret_key, "S");
    aws_creds_clear(&c);
}

static void test_load_order(void)
{
    struct aws_creds c;
    char err[512];
    const char *path = write_creds("credentials", sample);

    clear_env();
    setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);

    /* Profile: argument, else AWS_PROFILE, else default. */
    CHECK_EQ(aws_creds_load(NULL, &c, err, sizeof(err)), 0);
    CHECK_STR(c.access_key, "AKIDEFAULT");
    aws_creds_clear(&c);
    setenv("AWS_PROFILE", "work", 1);
    CHECK_EQ(aws_creds_load(NULL, &c, err, sizeof(err)), 0);
    CHECK_STR(c.access_key, "AKIWORK");
    aws_creds_clear(&c);
    CHECK_EQ(aws_creds_load("last", &c, err, sizeof(err)), 0);
    CHECK_STR(c.access_key, "AKILAST");
    aws_creds_clear(&c);

    /* The environment wins over any file. */
    setenv("AWS_ACCESS_KEY_ID", "AKIENV", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "secretenv", 1);
    setenv("AWS_SESSION_TOKEN", "tokenenv", 1);
    CHECK_EQ(aws_creds_load("work", &c, err, sizeof(err)), 0);
    CHECK_STR(c.access_key, "AKIENV");
    CHECK_STR(c.secret_key, "secretenv");
    CHECK_STR(c.session_token, "tokenenv");
    aws_creds_clear(&c);

    /* Half-set environment: an error that does not show the key. */
    unsetenv("AWS_SECRET_ACCESS_KEY");
    err[0] = '\0';
    CHECK_EQ(aws_creds_load(NULL, &c, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "AWS_SECRET_ACCESS_KEY") != NULL);
    CHECK(strstr(err, "AKIENV") == NULL);
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SESSION_TOKEN");

    /* Missing profile / file: -ENOENT naming the profile and file, no secrets. */
    err[0] = '\0';
    CHECK_EQ(aws_creds_load("nosuch", &c, err, sizeof(err)), -ENOENT);
    CHECK(strstr(err, "[nosuch]") != NULL);
    CHECK(strstr(err, path) != NULL);
    err[0] = '\0';
    CHECK_EQ(aws_creds_load("halfway", &c, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "secret") == NULL || strstr(err, "aws_secret_access_key") != NULL);
    CHECK(strstr(err, "AKIHALF") == NULL);

    /* Default location: $HOME/.aws/credentials. */
    unsetenv("AWS_SHARED_CREDENTIALS_FILE");
    unsetenv("AWS_PROFILE");
    char home[512], awsdir[600];
    snprintf(home, sizeof(home), "%s/home", dir);
    snprintf(awsdir, sizeof(awsdir), "%s/.aws/credentials", home);
    const char *text = "[default]\naws_access_key_id=AKIHOME\naws_secret_access_key=sh\n";
    CHECK_EQ(test_write_file(awsdir, text, strlen(text)), 0);
    char *old_home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
    setenv("HOME", home, 1);
    CHECK_EQ(aws_creds_load(NULL, &c, err, sizeof(err)), 0);
    CHECK_STR(c.access_key, "AKIHOME");
    aws_creds_clear(&c);
    if (old_home)
        setenv("HOME", old_home, 1);
    else
        unsetenv("HOME");
    free(old_home);
    clear_env();
}

int main(void)
{
    dir = test_mkdtemp("awscreds");
    RUN(test_file_profiles);
    RUN(test_file_missing_and_odd);
    RUN(test_load_order);
    test_rm_rf(dir);
    free(dir);
    return test_finish();
}
