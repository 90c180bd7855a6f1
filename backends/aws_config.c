/*
 * aws_config.c - reads one profile out of the AWS shared files (~/.aws/credentials and
 * ~/.aws/config) the way the AWS CLI and SDKs do; see aws_config.h for the rules.
 *
 * Design: each file is read whole into memory (bounded: AWS_CONFIG_FILE_MAX bytes, lines of
 * AWS_CONFIG_LINE_MAX) and parsed line by line. Only the sections that belong to the wanted
 * profile are kept; their keys go into a small array of (key, value, origin). The credentials
 * file is read first; a key the config file sets again is then ignored, so the credentials
 * file wins. Within one file a later assignment replaces an earlier one (a section may appear
 * twice). In the config file [profile default] wins over [default] as a whole: when both
 * exist the keys of [default] are dropped (as the Java and Rust SDKs do).
 *
 * Lines: "[section]" (an optional comment may follow the ']'), "key = value" split at the
 * first '=', comments starting with '#' or ';', blank lines. An indented line that follows a
 * key of the same section continues that key's value (a nested block such as "s3 =" and its
 * sub-keys) and is skipped; an indented line before any key of its section is read as if it
 * were not indented. A malformed section header ("[broken") starts a section that is nobody's
 * profile; a line without '=' is ignored. Values are taken as written (no inline comments, no
 * quotes removed), as botocore does.
 *
 * Invariants: values may be secrets. Every buffer that held file contents (the file image,
 * the values) is wiped with explicit_bzero before it is freed, and no message carries a
 * value: messages name files, profiles and keys only. No locks and no global state: the
 * functions read only their arguments, the files and the environment.
 */
#include "backends/aws_config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define AWS_CONFIG_FILE_MAX (4u << 20)  /* the largest file read */
#define AWS_CONFIG_LINE_MAX (64u << 10) /* the longest line read */
#define AWS_CONFIG_PATH_MAX 4096

/* Where a key's value came from; decides which of two assignments wins. */
enum kv_origin {
    FROM_CREDENTIALS,    /* the credentials file: wins over the config file */
    FROM_CONFIG_DEFAULT, /* [default] in the config file: loses to [profile default] */
    FROM_CONFIG,         /* [profile NAME] in the config file */
};

struct kv {
    char *key;
    char *value;
    enum kv_origin origin;
};

struct aws_profile {
    char *name;
    struct kv *kv;
    size_t n, cap;
};

static void wipe_free(char *s)
{
    if (s) {
        explicit_bzero(s, strlen(s));
        free(s);
    }
}

void aws_profile_free(struct aws_profile *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++) {
        free(p->kv[i].key);
        wipe_free(p->kv[i].value);
    }
    free(p->kv);
    free(p->name);
    free(p);
}

const char *aws_profile_name(const struct aws_profile *p)
{
    return p->name;
}

const char *aws_profile_get(const struct aws_profile *p, const char *key)
{
    for (size_t i = 0; i < p->n; i++)
        if (strcasecmp(p->kv[i].key, key) == 0)
            return p->kv[i].value;
    return NULL;
}

/* Sets key to value unless an assignment that wins over `origin` is already there. */
static int profile_set(struct aws_profile *p, const char *key, const char *value,
                       enum kv_origin origin)
{
    for (size_t i = 0; i < p->n; i++) {
        struct kv *e = &p->kv[i];
        if (strcasecmp(e->key, key) != 0)
            continue;
        if (e->origin == FROM_CREDENTIALS && origin != FROM_CREDENTIALS)
            return 0;
        if (e->origin == FROM_CONFIG && origin == FROM_CONFIG_DEFAULT)
            return 0;
        char *v = strdup(value);
        if (!v)
            return -ENOMEM;
        wipe_free(e->value);
        e->value = v;
        e->origin = origin;
        return 0;
    }
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 8;
        struct kv *kv = realloc(p->kv, cap * sizeof(*kv));
        if (!kv)
            return -ENOMEM;
        p->kv = kv;
        p->cap = cap;
    }
    struct kv *e = &p->kv[p->n];
    e->key = strdup(key);
    e->value = strdup(value);
    e->origin = origin;
    if (!e->key || !e->value) {
        free(e->key);
        wipe_free(e->value);
        return -ENOMEM;
    }
    p->n++;
    return 0;
}

/* Drops every key that came from [default] in the config file. */
static void profile_drop_origin(struct aws_profile *p, enum kv_origin origin)
{
    size_t j = 0;
    for (size_t i = 0; i < p->n; i++) {
        if (p->kv[i].origin == origin) {
            free(p->kv[i].key);
            wipe_free(p->kv[i].value);
        } else {
            p->kv[j++] = p->kv[i];
        }
    }
    p->n = j;
}

/* --- paths ----------------------------------------------------------------------------- */

/* $var with a leading "~/" (or a lone "~") made $HOME, else $HOME/dflt; "" when neither
 * can be formed. Returns 0, or -ENAMETOOLONG when buf is too short (buf holds a prefix). */
static int config_path(const char *var, const char *dflt, char *buf, size_t len)
{
    const char *v = getenv(var), *home = getenv("HOME");
    int n;

    if (len == 0)
        return -ENAMETOOLONG;
    buf[0] = '\0';
    if (v && *v) {
        if (home && *home && (strcmp(v, "~") == 0 || strncmp(v, "~/", 2) == 0))
            n = snprintf(buf, len, "%s%s", home, v + 1);
        else
            n = snprintf(buf, len, "%s", v);
    } else if (home && *home) {
        n = snprintf(buf, len, "%s/%s", home, dflt);
    } else {
        return 0;
    }
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

void aws_config_credentials_path(char *buf, size_t len)
{
    (void)config_path("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials", buf, len);
}

void aws_config_config_path(char *buf, size_t len)
{
    (void)config_path("AWS_CONFIG_FILE", ".aws/config", buf, len);
}

/* --- reading --------------------------------------------------------------------------- */

/* Reads the whole file into a NUL-terminated buffer (caller wipes and frees). A file that
 * does not exist (or whose directory does not) gives *out NULL and 0. */
static int read_file(const char *path, char **out, size_t *outlen, char *err, size_t errlen)
{
    size_t cap = 4096, len = 0;
    struct stat st;
    char *buf;
    int ret = 0;

    *out = NULL;
    *outlen = 0;
    if (!*path)
        return 0;

    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT || e == ENOTDIR)
            return 0;
        snprintf(err, errlen, "AWS shared file %s: cannot open: %s", path, strerror(e));
        return -EIO;
    }
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > AWS_CONFIG_FILE_MAX) {
        ret = -EFBIG;
        goto out_close_fd;
    }

    /* Grown as it is read: the size fstat gives may be stale (or 0, for special files). */
    buf = malloc(cap);
    if (!buf) {
        ret = -ENOMEM;
        goto out_close_fd;
    }
    for (;;) {
        if (len + 1 == cap) {
            if (len > AWS_CONFIG_FILE_MAX) {
                ret = -EFBIG;
                goto out_wipe_buf;
            }
            char *nb = malloc(cap * 2);
            if (!nb) {
                ret = -ENOMEM;
                goto out_wipe_buf;
            }
            memcpy(nb, buf, len);
            explicit_bzero(buf, len);
            free(buf);
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + len, cap - 1 - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            snprintf(err, errlen, "AWS shared file %s: cannot read: %s", path, strerror(errno));
            ret = -EIO;
            goto out_wipe_buf;
        }
        if (r == 0)
            break;
        len += (size_t)r;
    }
    if (len > AWS_CONFIG_FILE_MAX) {
        ret = -EFBIG;
        goto out_wipe_buf;
    }
    buf[len] = '\0';
    *out = buf;
    *outlen = len;
    goto out_close_fd;

out_wipe_buf:
    explicit_bzero(buf, len);
    free(buf);
out_close_fd:
    close(fd);
    if (ret == -EFBIG) {
        snprintf(err, errlen, "AWS shared file %s: too large (more than %u bytes)", path,
                 AWS_CONFIG_FILE_MAX);
        ret = -EIO;
    }
    return ret;
}

static int is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

/* Trims blanks at both ends of [s, e) in place; returns the start, NUL-terminated. */
static char *trim(char *s, char *e)
{
    while (s < e && is_blank(*s))
        s++;
    while (e > s && is_blank(e[-1]))
        e--;
    *e = '\0';
    return s;
}

/* What a section header means for the profile being loaded. */
enum section_kind {
    SECTION_OTHER,           /* not this profile (or not a profile at all) */
    SECTION_PROFILE,         /* this profile */
    SECTION_DEFAULT_BARE,    /* [default] in the config file, while loading "default" */
    SECTION_DEFAULT_PROFILE, /* [profile default] in the config file, while loading "default" */
};

/* Classifies the header whose text between the brackets is `name` (trimmed). */
static enum section_kind section_kind(const char *name, const char *profile, int config)
{
    if (!config)
        return strcmp(name, profile) == 0 ? SECTION_PROFILE : SECTION_OTHER;
    if (strcmp(name, "default") == 0)
        return strcmp(profile, "default") == 0 ? SECTION_DEFAULT_BARE : SECTION_OTHER;
    if (strncmp(name, "profile", 7) != 0 || !is_blank(name[7]))
        return SECTION_OTHER;
    const char *n = name + 8;
    while (is_blank(*n))
        n++;
    if (strcmp(n, profile) != 0)
        return SECTION_OTHER;
    return strcmp(profile, "default") == 0 ? SECTION_DEFAULT_PROFILE : SECTION_PROFILE;
}

/* Parses the file image buf (len bytes, NUL-terminated, modified in place) and adds the
 * profile's keys to p. *found is set when a section of the profile is present;
 * *saw_profile_default when [profile default] is. */
static int parse(char *buf, size_t len, const char *path, int config, struct aws_profile *p,
                 int *found, int *saw_profile_default, char *err, size_t errlen)
{
    enum section_kind cur = SECTION_OTHER;
    int in_section = 0, had_key = 0;
    char *end = buf + len;

    for (char *line = buf; line < end;) {
        char *nl = memchr(line, '\n', (size_t)(end - line));
        char *le = nl ? nl : end;
        char *next = nl ? nl + 1 : end;
        if ((size_t)(le - line) > AWS_CONFIG_LINE_MAX) {
            snprintf(err, errlen, "AWS shared file %s: a line is too large (more than %u bytes)",
                     path, AWS_CONFIG_LINE_MAX);
            return -EIO;
        }
        int indented = line < le && (*line == ' ' || *line == '\t');
        char *s = trim(line, le);
        line = next;

        if (*s == '\0' || *s == '#' || *s == ';')
            continue;
        if (indented && had_key)
            continue; /* the continuation of a nested value */

        if (*s == '[') {
            char *close = strchr(s, ']');
            char *rest = close ? close + 1 : NULL;
            while (rest && is_blank(*rest))
                rest++;
            in_section = 1;
            had_key = 0;
            if (!close || (*rest && *rest != '#' && *rest != ';')) {
                cur = SECTION_OTHER; /* malformed: nobody's profile */
                continue;
            }
            cur = section_kind(trim(s + 1, close), p->name, config);
            if (cur != SECTION_OTHER)
                *found = 1;
            if (cur == SECTION_DEFAULT_PROFILE)
                *saw_profile_default = 1;
            continue;
        }

        char *eq = strchr(s, '=');
        if (!eq || !in_section)
            continue;
        had_key = 1;
        if (cur == SECTION_OTHER)
            continue;
        char *key = trim(s, eq);
        char *value = trim(eq + 1, eq + 1 + strlen(eq + 1));
        if (!*key)
            continue;
        enum kv_origin origin = !config                       ? FROM_CREDENTIALS
                                : cur == SECTION_DEFAULT_BARE ? FROM_CONFIG_DEFAULT
                                                              : FROM_CONFIG;
        int ret = profile_set(p, key, value, origin);
        if (ret < 0)
            return ret;
    }
    return 0;
}

/* Reads one file and adds the profile's keys from it. */
static int load_file(const char *path, int config, struct aws_profile *p, int *found, char *err,
                     size_t errlen)
{
    char *buf;
    size_t len;
    int saw_profile_default = 0;

    int ret = read_file(path, &buf, &len, err, errlen);
    if (ret < 0 || !buf)
        return ret;
    ret = parse(buf, len, path, config, p, found, &saw_profile_default, err, errlen);
    if (ret == 0 && saw_profile_default)
        profile_drop_origin(p, FROM_CONFIG_DEFAULT);
    explicit_bzero(buf, len);
    free(buf);
    return ret;
}

/* Copies s into out with control characters replaced, for a message. */
static void printable(const char *s, char *out, size_t len)
{
    size_t i = 0;
    for (; s[i] && i + 1 < len; i++)
        out[i] = ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) ? '?' : s[i];
    out[i] = '\0';
}

int aws_profile_load(const char *name, struct aws_profile **out, char *err, size_t errlen)
{
    char cred_path[AWS_CONFIG_PATH_MAX], conf_path[AWS_CONFIG_PATH_MAX], shown[128];
    int ret, found = 0;

    *out = NULL;
    if (errlen)
        err[0] = '\0';
    if (!name || !*name)
        name = getenv("AWS_PROFILE");
    if (!name || !*name)
        name = "default";

    if (config_path("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials", cred_path,
                    sizeof(cred_path)) < 0 ||
        config_path("AWS_CONFIG_FILE", ".aws/config", conf_path, sizeof(conf_path)) < 0) {
        snprintf(err, errlen, "AWS shared files: a path is longer than %d bytes",
                 AWS_CONFIG_PATH_MAX - 1);
        return -EIO;
    }

    struct aws_profile *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->name = strdup(name);
    if (!p->name) {
        ret = -ENOMEM;
        goto out_free_profile;
    }

    ret = load_file(cred_path, 0, p, &found, err, errlen);
    if (ret < 0)
        goto out_free_profile;
    ret = load_file(conf_path, 1, p, &found, err, errlen);
    if (ret < 0)
        goto out_free_profile;
    if (!found) {
        printable(name, shown, sizeof(shown));
        snprintf(err, errlen, "AWS profile '%s' not found in %s or %s", shown,
                 *cred_path ? cred_path : "(no credentials file: HOME not set)",
                 *conf_path ? conf_path : "(no config file: HOME not set)");
        ret = -ENOENT;
        goto out_free_profile;
    }
    *out = p;
    return 0;

out_free_profile:
    if (ret == -ENOMEM && errlen)
        snprintf(err, errlen, "AWS shared files: out of memory");
    aws_profile_free(p);
    return ret;
}
