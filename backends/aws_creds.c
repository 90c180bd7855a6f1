/*
 * aws_creds.c - finds AWS credentials: environment first, then the shared credentials file.
 *
 * Design: a line-by-line reader of the INI-style credentials file that tracks whether the
 * current section is the wanted profile and copies the three known keys out of it. The
 * file is read once at backend creation; nothing is cached here.
 * Invariants: every string handed out is owned by the struct aws_creds; secrets are wiped
 * (explicit_bzero) before they are freed, and the line buffer that held them too. No error
 * message contains a key or a token. No locks: the functions touch only their arguments and
 * the (read-only) environment.
 */
#include "backends/aws_creds.h"

#include <ctype.h>
#include <errno.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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
    if (!c->access_key || !c->secret_key || (session_token && *session_token && !c->session_token)) {
        aws_creds_clear(c);
        return -ENOMEM;
    }
    c->expiration = expiration;
    return 0;
}

int aws_creds_dup(const struct aws_creds *src, struct aws_creds *dst)
{
    memset(dst, 0, sizeof(*dst));
    int ret = aws_creds_set(dst, src->access_key, src->secret_key, src->session_token,
                            src->expiration);
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
    struct tm tm = {.tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h,
                    .tm_min = mi, .tm_sec = sec};
    time_t t = timegm(&tm);
    if (t == (time_t)-1 || tm.tm_mday != d) /* timegm normalises 31 Feb to March */
        return -EINVAL;
    *out = (int64_t)t - sign * (int64_t)(zh * 3600 + zm * 60);
    return 0;
}

/* Trim leading and trailing whitespace in place; returns the start. */
static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* Does section header text `name` (already trimmed, brackets removed) select `profile`? */
static int section_matches(char *name, const char *profile)
{
    if (strcmp(name, profile) == 0)
        return 1;
    if (strncmp(name, "profile", 7) == 0 && isspace((unsigned char)name[7]))
        return strcmp(trim(name + 8), profile) == 0;
    return 0;
}

static int set_field(char **field, const char *value)
{
    char *dup = strdup(value);
    if (!dup)
        return -ENOMEM;
    wipe_free(*field);
    *field = dup;
    return 0;
}

int aws_creds_from_file(const char *path, const char *profile, struct aws_creds *out)
{
    struct aws_creds c = {0};
    char *line = NULL;
    size_t cap = 0;
    int in_profile = 0, seen_profile = 0;
    int ret;

    memset(out, 0, sizeof(*out));
    if (!path || !profile || !*profile)
        return -EINVAL;
    FILE *f = fopen(path, "re");
    if (!f)
        return errno == ENOMEM ? -ENOMEM : -ENOENT;

    for (;;) {
        errno = 0;
        ssize_t n = getline(&line, &cap, f);
        if (n < 0) {
            ret = ferror(f) ? (errno == ENOMEM ? -ENOMEM : -EIO) : 0;
            break;
        }
        char *s = trim(line);
        if (*s == '\0' || *s == '#' || *s == ';')
            continue;
        if (*s == '[') {
            char *end = strchr(s, ']');
            if (!end) {
                in_profile = 0; /* a broken header: ignore the section it would open */
                continue;
            }
            *end = '\0';
            in_profile = section_matches(trim(s + 1), profile);
            seen_profile |= in_profile;
            continue;
        }
        if (!in_profile)
            continue;
        char *eq = strchr(s, '=');
        if (!eq)
            continue;
        *eq = '\0';
        char *name = trim(s), *value = trim(eq + 1);
        ret = 0;
        if (strcasecmp(name, "aws_access_key_id") == 0)
            ret = set_field(&c.access_key, value);
        else if (strcasecmp(name, "aws_secret_access_key") == 0)
            ret = set_field(&c.secret_key, value);
        else if (strcasecmp(name, "aws_session_token") == 0 ||
                 strcasecmp(name, "aws_security_token") == 0)
            ret = set_field(&c.session_token, value);
        if (ret < 0)
            break;
    }
    if (ret < 0)
        goto out_clear;
    if (!seen_profile || (!c.access_key && !c.secret_key)) {
        ret = -ENOENT;
        goto out_clear;
    }
    if (!c.access_key || !c.secret_key || !*c.access_key || !*c.secret_key) {
        ret = -EINVAL;
        goto out_clear;
    }
    *out = c;
    memset(&c, 0, sizeof(c));
    ret = 0;
out_clear:
    aws_creds_clear(&c);
    if (line) {
        explicit_bzero(line, cap);
        free(line);
    }
    fclose(f);
    return ret;
}

static int from_env(struct aws_creds *out)
{
    const char *ak = getenv("AWS_ACCESS_KEY_ID");
    const char *sk = getenv("AWS_SECRET_ACCESS_KEY");
    const char *tok = getenv("AWS_SESSION_TOKEN");
    struct aws_creds c = {0};

    if (!ak || !*ak || !sk || !*sk)
        return -ENOENT;
    c.access_key = strdup(ak);
    c.secret_key = strdup(sk);
    if (tok && *tok)
        c.session_token = strdup(tok);
    if (!c.access_key || !c.secret_key || (tok && *tok && !c.session_token)) {
        aws_creds_clear(&c);
        return -ENOMEM;
    }
    *out = c;
    return 0;
}

int aws_creds_load(const char *profile, struct aws_creds *out, char *err, size_t errlen)
{
    char path[4096];
    int ret;

    memset(out, 0, sizeof(*out));
    ret = from_env(out);
    if (ret != -ENOENT) {
        if (ret < 0)
            snprintf(err, errlen, "out of memory reading AWS credentials");
        return ret;
    }
    if (getenv("AWS_ACCESS_KEY_ID") && *getenv("AWS_ACCESS_KEY_ID") &&
        !(getenv("AWS_SECRET_ACCESS_KEY") && *getenv("AWS_SECRET_ACCESS_KEY"))) {
        snprintf(err, errlen, "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not");
        return -EINVAL;
    }

    if (!profile || !*profile)
        profile = getenv("AWS_PROFILE");
    if (!profile || !*profile)
        profile = "default";
    const char *file = getenv("AWS_SHARED_CREDENTIALS_FILE");
    if (file && *file) {
        snprintf(path, sizeof(path), "%s", file);
    } else {
        const char *home = getenv("HOME");
        snprintf(path, sizeof(path), "%s/.aws/credentials", home && *home ? home : ".");
    }

    ret = aws_creds_from_file(path, profile, out);
    switch (ret) {
    case 0:
        break;
    case -ENOENT:
        snprintf(err, errlen,
                 "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, add "
                 "profile [%s] to %s, or use no_sign_request for a public bucket",
                 profile, path);
        break;
    case -EINVAL:
        snprintf(err, errlen,
                 "profile [%s] in %s needs both aws_access_key_id and aws_secret_access_key",
                 profile, path);
        break;
    case -ENOMEM:
        snprintf(err, errlen, "out of memory reading AWS credentials");
        break;
    default:
        snprintf(err, errlen, "cannot read AWS credentials file %s", path);
        break;
    }
    return ret;
}
