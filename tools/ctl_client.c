/*
 * ctl_client.c - how the operator commands find and talk to a running daemon.
 *
 * Finding it: a PATH inside a pagefs mount is made absolute (realpath), the mount root is the
 * last directory walking up whose st_dev is the path's, and the root's `user.pagefs.stats`
 * attribute (key=value lines) names the daemon's unix control socket in `control_socket=`.
 * The path relative to the root is what the daemon's API takes.
 *
 * Talking: HTTP/1.1 over that socket with libcurl (CURLOPT_UNIX_SOCKET_PATH; the host part of
 * the URL is ignored), one easy handle per ctl_http so a polling loop reuses one connection.
 * Request bodies are built by the callers with json-c; replies are parsed with json-c.
 *
 * No globals; a ctl_http is used by one thread.
 */
#include "tools/ctl.h"

#include <curl/curl.h>
#include <errno.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#define STATS_XATTR "user.pagefs.stats"
#define MAX_REPLY (64u << 20) /* bytes of a reply body we accept */

int ctl_mount_root(const char *abs_path, char **root)
{
    struct stat st;
    if (!abs_path || abs_path[0] != '/')
        return -EINVAL;
    if (stat(abs_path, &st) < 0)
        return -errno;
    dev_t dev = st.st_dev;
    char *cur = strdup(abs_path);
    if (!cur)
        return -ENOMEM;
    while (strcmp(cur, "/") != 0) {
        char *slash = strrchr(cur, '/');
        char *parent = slash == cur ? strdup("/") : strndup(cur, (size_t)(slash - cur));
        if (!parent) {
            free(cur);
            return -ENOMEM;
        }
        if (stat(parent, &st) < 0 || st.st_dev != dev) {
            free(parent);
            break;
        }
        free(cur);
        cur = parent;
    }
    *root = cur;
    return 0;
}

int ctl_relative_path(const char *root, const char *abs_path, char **rel)
{
    size_t n = strlen(root);
    const char *rest;
    if (strcmp(root, "/") == 0) {
        if (abs_path[0] != '/')
            return -EINVAL;
        rest = abs_path + 1;
    } else {
        if (strncmp(root, abs_path, n) != 0 || (abs_path[n] != '\0' && abs_path[n] != '/'))
            return -EINVAL;
        rest = abs_path + n;
        while (*rest == '/')
            rest++;
    }
    *rel = strdup(rest);
    return *rel ? 0 : -ENOMEM;
}

int ctl_kv_get(const char *text, const char *key, char **value)
{
    size_t klen = strlen(key);
    const char *line = text;
    while (line && *line) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (len > klen && strncmp(line, key, klen) == 0 && line[klen] == '=') {
            *value = strndup(line + klen + 1, len - klen - 1);
            return *value ? 0 : -ENOMEM;
        }
        line = end ? end + 1 : NULL;
    }
    return -ENOENT;
}

/* Reads the root's stats attribute; 0 with *text (caller frees) or -errno. */
static int read_stats_xattr(const char *root, char **text)
{
    for (int attempt = 0; attempt < 4; attempt++) {
        ssize_t need = getxattr(root, STATS_XATTR, NULL, 0);
        if (need < 0)
            return -errno;
        char *buf = malloc((size_t)need + 1);
        if (!buf)
            return -ENOMEM;
        ssize_t got = getxattr(root, STATS_XATTR, buf, (size_t)need);
        if (got >= 0) {
            buf[got] = '\0';
            *text = buf;
            return 0;
        }
        int rc = -errno;
        free(buf);
        if (rc != -ERANGE)
            return rc;
    }
    return -ERANGE;
}

/* The mount point of the only pagefs mount in /proc/self/mountinfo. Returns 0 with *mp
 * (caller frees), -ENOENT if there is none, -EEXIST if there are several. */
static int only_pagefs_mount(char **mp)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return -errno;
    char *line = NULL, *found = NULL;
    size_t cap = 0;
    int n = 0, rc = 0;
    while (getline(&line, &cap, f) > 0) {
        char *sep = strstr(line, " - ");
        if (!sep || strncmp(sep + 3, "fuse.pagefs ", 12) != 0)
            continue;
        /* field 5 is the mount point, octal-escaped */
        char *p = line;
        for (int i = 0; i < 4 && p; i++) {
            p = strchr(p, ' ');
            if (p)
                p++;
        }
        if (!p)
            continue;
        char *end = strchr(p, ' ');
        if (!end)
            continue;
        char *path = malloc((size_t)(end - p) + 1);
        if (!path) {
            rc = -ENOMEM;
            break;
        }
        size_t o = 0;
        for (char *q = p; q < end; q++) {
            if (q[0] == '\\' && end - q >= 4 && q[1] >= '0' && q[1] <= '3') {
                path[o++] = (char)(((q[1] - '0') << 6) | ((q[2] - '0') << 3) | (q[3] - '0'));
                q += 3;
            } else {
                path[o++] = *q;
            }
        }
        path[o] = '\0';
        n++;
        free(found);
        found = path;
    }
    free(line);
    fclose(f);
    if (rc == 0 && n == 0)
        rc = -ENOENT;
    else if (rc == 0 && n > 1)
        rc = -EEXIST;
    if (rc == 0)
        *mp = found;
    else
        free(found);
    return rc;
}

int ctl_pagefs_mount_cache_dir(const char *path, char **cache_dir)
{
    char *abs = NULL, *root = NULL, *text = NULL, *sock = NULL;
    int rc = 0;
    *cache_dir = NULL;
    abs = realpath(path, NULL);
    if (!abs)
        return errno == ENOMEM ? -ENOMEM : 0;
    if (ctl_mount_root(abs, &root) < 0 || strcmp(root, abs) != 0 ||
        read_stats_xattr(root, &text) < 0)
        goto out_free;
    if (ctl_kv_get(text, "control_socket", &sock) < 0 || !strrchr(sock, '/'))
        goto out_free;
    char *slash = strrchr(sock, '/');
    *cache_dir = slash == sock ? strdup("/") : strndup(sock, (size_t)(slash - sock));
    rc = *cache_dir ? 1 : -ENOMEM;
out_free:
    free(sock);
    free(text);
    free(root);
    free(abs);
    return rc;
}

static int is_dead_mount_error(int err)
{
    return err == ENOTCONN || err == ECONNABORTED;
}

int ctl_target_find(const char *path, struct ctl_target *t, char **rel)
{
    char *abs = NULL, *root = NULL, *text = NULL, *sock = NULL, *fallback = NULL;
    int code = CTL_EXIT_UNREACHABLE;
    memset(t, 0, sizeof(*t));
    const char *p = path ? path : ".";
    abs = realpath(p, NULL);
    if (!abs) {
        int e = errno;
        ctl_errorf("cannot access '%s': %s", p, strerror(e));
        code = is_dead_mount_error(e) ? CTL_EXIT_UNREACHABLE : CTL_EXIT_USAGE;
        goto out;
    }
    int rc = ctl_mount_root(abs, &root);
    if (rc < 0) {
        ctl_errorf("cannot access '%s': %s", abs, strerror(-rc));
        code = is_dead_mount_error(-rc) ? CTL_EXIT_UNREACHABLE : CTL_EXIT_USAGE;
        goto out_free_abs;
    }
    rc = read_stats_xattr(root, &text);
    if (rc < 0 && !path && (rc == -ENODATA || rc == -ENOTSUP)) {
        /* No path given and the current directory is elsewhere: the only pagefs mount. */
        int mrc = only_pagefs_mount(&fallback);
        if (mrc == -EEXIST) {
            ctl_errorf("several pagefs mounts: name one (a path inside it)");
            code = CTL_EXIT_USAGE;
            goto out_free_root;
        }
        if (mrc == 0) {
            free(root);
            root = fallback;
            fallback = NULL;
            free(abs);
            abs = strdup(root);
            if (!abs) {
                ctl_errorf("out of memory");
                code = CTL_EXIT_FAILED;
                goto out_free_root;
            }
            rc = read_stats_xattr(root, &text);
        }
    }
    if (rc < 0) {
        if ((rc == -ENODATA || rc == -ENOTSUP) && !path)
            ctl_errorf("'%s' is not inside a pagefs mount, and no pagefs mount was found "
                       "(name a path inside one)",
                       abs);
        else if (rc == -ENODATA || rc == -ENOTSUP)
            ctl_errorf("'%s' is not inside a pagefs mount", path);
        else if (is_dead_mount_error(-rc))
            ctl_errorf("the pagefs daemon of %s is gone (%s)", root, strerror(-rc));
        else
            ctl_errorf("cannot read %s of %s: %s", STATS_XATTR, root, strerror(-rc));
        goto out_free_root;
    }
    rc = ctl_kv_get(text, "control_socket", &sock);
    if (rc < 0 || !*sock) {
        ctl_errorf("the pagefs daemon of %s has no control socket", root);
        goto out_free_text;
    }
    if (rel) {
        rc = ctl_relative_path(root, abs, rel);
        if (rc < 0) {
            ctl_errorf("cannot place '%s' in %s", abs, root);
            code = CTL_EXIT_USAGE;
            goto out_free_sock;
        }
    }
    t->root = root;
    t->control_socket = sock;
    root = NULL;
    sock = NULL;
    code = CTL_EXIT_OK;
out_free_sock:
    free(sock);
out_free_text:
    free(text);
out_free_root:
    free(root);
out_free_abs:
    free(abs);
out:
    return code;
}

void ctl_target_clear(struct ctl_target *t)
{
    free(t->root);
    free(t->control_socket);
    memset(t, 0, sizeof(*t));
}

/* ---- HTTP over the control socket ---------------------------------------------------------- */

struct ctl_http {
    CURL *curl;
    char *socket_path;
    long timeout_s; /* 0: the defaults of ctl_http_request */
};

struct body_buf {
    char *data;
    size_t len, cap;
};

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    struct body_buf *b = userdata;
    size_t n = size * nmemb;
    if (b->len + n + 1 > MAX_REPLY)
        return 0; /* curl fails the transfer with CURLE_WRITE_ERROR */
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d)
            return 0;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, ptr, n);
    b->len += n;
    b->data[b->len] = '\0';
    return n;
}

int ctl_http_create(const char *socket_path, struct ctl_http **out)
{
    struct ctl_http *h = calloc(1, sizeof(*h));
    if (!h)
        return -ENOMEM;
    h->socket_path = strdup(socket_path);
    if (!h->socket_path)
        goto out_free_h;
    h->curl = curl_easy_init();
    if (!h->curl)
        goto out_free_path;
    *out = h;
    return 0;
out_free_path:
    free(h->socket_path);
out_free_h:
    free(h);
    return -ENOMEM;
}

void ctl_http_set_timeout(struct ctl_http *h, long seconds)
{
    h->timeout_s = seconds;
}

void ctl_http_destroy(struct ctl_http *h)
{
    if (!h)
        return;
    curl_easy_cleanup(h->curl);
    free(h->socket_path);
    free(h);
}

static int curl_errno(CURLcode c)
{
    switch (c) {
    case CURLE_COULDNT_CONNECT:
        return -ECONNREFUSED;
    case CURLE_OPERATION_TIMEDOUT:
        return -ETIMEDOUT;
    case CURLE_OUT_OF_MEMORY:
        return -ENOMEM;
    case CURLE_WRITE_ERROR:
        return -EFBIG;
    case CURLE_GOT_NOTHING:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
        return -ECONNRESET;
    default:
        return -EPROTO;
    }
}

int ctl_http_request(struct ctl_http *h, const char *method, const char *url_path,
                     struct json_object *body, long *status, struct json_object **reply, char *err,
                     size_t errlen)
{
    char url[4096], cerr[CURL_ERROR_SIZE] = "";
    struct body_buf b = {0};
    struct curl_slist *headers = NULL;
    int rc = 0;
    *reply = NULL;
    *status = 0;
    if (snprintf(url, sizeof(url), "http://localhost%s", url_path) >= (int)sizeof(url)) {
        snprintf(err, errlen, "request too long");
        return -ENAMETOOLONG;
    }
    CURL *c = h->curl;
    curl_easy_reset(c); /* keeps the connection */
    curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, h->socket_path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, h->timeout_s ? h->timeout_s : 10L);
    long timeout = strcmp(method, "GET") == 0 ? 120L : 600L;
    curl_easy_setopt(c, CURLOPT_TIMEOUT, h->timeout_s ? h->timeout_s : timeout);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    headers = curl_slist_append(headers, "Accept: application/json");
    if (!headers) {
        rc = -ENOMEM;
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    if (body) {
        const char *s = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN);
        struct curl_slist *more =
            s ? curl_slist_append(headers, "Content-Type: application/json") : NULL;
        if (!more) {
            rc = -ENOMEM;
            snprintf(err, errlen, "out of memory");
            goto out_free_headers;
        }
        headers = more;
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(s));
        curl_easy_setopt(c, CURLOPT_COPYPOSTFIELDS, s);
    }
    if (strcmp(method, "GET") != 0 && !(body && strcmp(method, "POST") == 0))
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    CURLcode cc = curl_easy_perform(c);
    if (cc != CURLE_OK) {
        rc = curl_errno(cc);
        snprintf(err, errlen, "%s %s over %s: %s", method, url_path, h->socket_path,
                 cerr[0] ? cerr : curl_easy_strerror(cc));
        goto out_free_headers;
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    if (b.len > 0) {
        struct json_tokener *tok = json_tokener_new();
        if (!tok) {
            rc = -ENOMEM;
            snprintf(err, errlen, "out of memory");
            goto out_free_headers;
        }
        struct json_object *obj = json_tokener_parse_ex(tok, b.data, (int)b.len);
        if (obj && json_tokener_get_error(tok) == json_tokener_success &&
            json_tokener_get_parse_end(tok) == b.len)
            *reply = obj;
        else
            json_object_put(obj);
        json_tokener_free(tok);
    }
out_free_headers:
    curl_slist_free_all(headers);
out:
    free(b.data);
    return rc;
}

int ctl_call(struct ctl_http *h, const char *method, const char *url_path, struct json_object *body,
             struct json_object **reply)
{
    char err[1024];
    long status;
    struct json_object *r = NULL;
    int rc = ctl_http_request(h, method, url_path, body, &status, &r, err, sizeof(err));
    if (rc < 0) {
        ctl_errorf("the daemon does not answer: %s", err);
        return CTL_EXIT_UNREACHABLE;
    }
    if (status < 200 || status > 299) {
        const char *msg = ctl_json_str(r, "error");
        if (!*msg)
            msg = ctl_json_str(r, "message");
        ctl_errorf("%s %s: HTTP %ld%s%s", method, url_path, status, *msg ? ": " : "", msg);
        json_object_put(r);
        return CTL_EXIT_FAILED;
    }
    if (!r || !json_object_is_type(r, json_type_object)) {
        ctl_errorf("%s %s: the reply is not a JSON object", method, url_path);
        json_object_put(r);
        return CTL_EXIT_FAILED;
    }
    *reply = r;
    return CTL_EXIT_OK;
}

char *ctl_url_escape(const char *s)
{
    /* curl_easy_escape needs a handle only for historical reasons; NULL works since 7.82 but
     * not everywhere, so use a throwaway one. */
    CURL *c = curl_easy_init();
    if (!c)
        return NULL;
    char *e = curl_easy_escape(c, s, 0);
    char *out = e ? strdup(e) : NULL;
    curl_free(e);
    curl_easy_cleanup(c);
    return out;
}

int ctl_target_find_paths(char **paths, int n, struct ctl_target *t, struct json_object **api_paths)
{
    struct json_object *arr = json_object_new_array();
    int code = CTL_EXIT_OK;
    memset(t, 0, sizeof(*t));
    if (!arr) {
        ctl_errorf("out of memory");
        return CTL_EXIT_FAILED;
    }
    for (int i = 0; i < n; i++) {
        struct ctl_target ti;
        char *rel = NULL, *api = NULL;
        code = ctl_target_find(paths[i], &ti, &rel);
        if (code != CTL_EXIT_OK)
            goto out_clear;
        if (i == 0) {
            *t = ti;
        } else {
            int same =
                strcmp(ti.root, t->root) == 0 && strcmp(ti.control_socket, t->control_socket) == 0;
            if (!same)
                ctl_errorf("'%s' and '%s' are in different mounts (%s, %s): one mount at a time",
                           paths[0], paths[i], t->root, ti.root);
            ctl_target_clear(&ti);
            if (!same) {
                free(rel);
                code = CTL_EXIT_USAGE;
                goto out_clear;
            }
        }
        /* The API takes mount paths; a leading '/' keeps one from reading as a URI. */
        if (asprintf(&api, "/%s", rel) < 0)
            api = NULL;
        free(rel);
        struct json_object *s = api ? json_object_new_string(api) : NULL;
        free(api);
        if (!s || json_object_array_add(arr, s) != 0) {
            json_object_put(s);
            ctl_errorf("out of memory");
            code = CTL_EXIT_FAILED;
            goto out_clear;
        }
    }
    *api_paths = arr;
    return CTL_EXIT_OK;
out_clear:
    ctl_target_clear(t);
    json_object_put(arr);
    return code;
}
