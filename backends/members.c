/*
 * members.c - the cluster's member view (see members.h).
 *
 * Design: one thread per members object keeps the view current; readers take a reference to
 * the published view (a pointer swap under a leaf lock), so a peer read never waits on etcd or
 * on the file system.
 *  - etcd: register = lease grant (ttl_s) + put of this node's record under the lease; the
 *    lease is kept alive every ttl_s/3 seconds; a keepalive that finds the lease gone (etcd
 *    restarted, or this process was stopped past its TTL) registers again. Between refreshes
 *    the thread blocks in a watch on the members prefix (a change wakes it at once), at most
 *    until the next keepalive is due or poll_ms has passed, then re-reads the whole prefix.
 *    A range that fails keeps the last good view: etcd being down says nothing about peers.
 *  - static: the file is stat'ed every poll_ms and re-parsed when it changed.
 * The view is built sorted by id and published only when it differs from the current one
 * (generation + 1), so hrw sees the same order on every node for the same membership.
 *
 * Invariants: a published view is never modified; view->self indexes the member whose id
 * (etcd) or address (static) is this node's, or is -1. In etcd mode this node is always in
 * its own view.
 * Lock order: m->lock is a leaf; no etcd request is made under it. The thread's requests run
 * in a call scope whose cancel flag is m->stop, so destroy ends a watch within about a second.
 */
#include "backends/members.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backends/backend.h"
#include "backends/etcd.h"

#define STATIC_FILE_MAX (1u << 20)

struct members {
    /* Set at create, read-only after. */
    char cluster[65];
    struct member self;
    char *peers_file;
    char prefix[128]; /* /pagefs/CLUSTER/members/ */
    char self_key[128 + MEMBERS_ID_MAX];
    int ttl_s, poll_ms;
    struct etcd_client *etcd;
    void (*log)(void *arg, int warning, const char *msg);
    void *log_arg;

    pthread_t thread;
    int thread_started;
    atomic_int stop;

    /* Thread-owned (read by status under lock). */
    int64_t lease;
    uint64_t next_keepalive_ms;
    struct stat file_st; /* the peers file as last parsed */
    int file_known;

    pthread_mutex_t lock; /* leaf: guards the fields below */
    pthread_cond_t cond;  /* stop */
    struct members_view *view;
    struct members_status st;
};

/* ---- names, addresses, records ---------------------------------------------------------- */

static int valid_chars(const char *s, size_t max, int colon)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > max)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (!isalnum(ch) && ch != '.' && ch != '_' && ch != '-' && !(colon && ch == ':'))
            return 0;
    }
    return 1;
}

int members_valid_id(const char *s)
{
    return valid_chars(s, MEMBERS_ID_MAX, 1);
}

int members_valid_cluster(const char *s)
{
    return valid_chars(s, 64, 0);
}

int members_parse_addr(const char *addr)
{
    size_t n = addr ? strlen(addr) : 0;
    if (n == 0 || n > MEMBERS_ADDR_MAX)
        return -EINVAL;
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr)
        return -EINVAL;
    if (addr[0] == '[') { /* [IPv6]:PORT */
        if (colon[-1] != ']' || colon - addr < 4)
            return -EINVAL;
        for (const char *p = addr + 1; p < colon - 1; p++)
            if (!isxdigit((unsigned char)*p) && *p != ':' && *p != '.')
                return -EINVAL;
    } else {
        for (const char *p = addr; p < colon; p++)
            if (!isalnum((unsigned char)*p) && *p != '.' && *p != '-' && *p != '_')
                return -EINVAL;
    }
    const char *port = colon + 1;
    size_t pl = strlen(port);
    if (pl == 0 || pl > 5)
        return -EINVAL;
    long v = 0;
    for (const char *p = port; *p; p++) {
        if (!isdigit((unsigned char)*p))
            return -EINVAL;
        v = v * 10 + (*p - '0');
    }
    return v >= 1 && v <= 65535 ? 0 : -EINVAL;
}

static int parse_weight(const char *s, double *out)
{
    char *end = NULL;
    errno = 0;
    double w = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(w) || w <= 0 || w > 1e6)
        return -EINVAL;
    *out = w;
    return 0;
}

static int member_cmp(const void *a, const void *b)
{
    return strcmp(((const struct member *)a)->id, ((const struct member *)b)->id);
}

/* Sorts list by id; -EEXIST names the first duplicate in err. */
static int sort_unique(struct member *list, size_t n, char *err, size_t errlen)
{
    if (n > 1)
        qsort(list, n, sizeof(*list), member_cmp);
    for (size_t i = 1; i < n; i++) {
        if (strcmp(list[i - 1].id, list[i].id) == 0) {
            snprintf(err, errlen, "member %s is listed twice", list[i].id);
            return -EEXIST;
        }
    }
    return 0;
}

/* One line of a peers file: "HOST:PORT [weight=W] [zone=Z]" (line is modified). */
static int parse_static_line(char *line, struct member *out, char *err, size_t errlen)
{
    char *save = NULL;
    char *addr = strtok_r(line, " \t", &save);
    memset(out, 0, sizeof(*out));
    out->weight = 1;
    if (members_parse_addr(addr) < 0) {
        snprintf(err, errlen, "'%.80s' is not HOST:PORT", addr);
        return -EINVAL;
    }
    snprintf(out->addr, sizeof(out->addr), "%s", addr);
    snprintf(out->id, sizeof(out->id), "%s", addr);
    if (strlen(addr) > MEMBERS_ID_MAX) {
        snprintf(err, errlen, "address longer than %d bytes", MEMBERS_ID_MAX);
        return -EINVAL;
    }
    for (char *tok = strtok_r(NULL, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
        if (strncmp(tok, "weight=", 7) == 0) {
            if (parse_weight(tok + 7, &out->weight) < 0) {
                snprintf(err, errlen, "bad weight '%.40s' (a number > 0)", tok + 7);
                return -EINVAL;
            }
        } else if (strncmp(tok, "zone=", 5) == 0 && valid_chars(tok + 5, MEMBERS_ZONE_MAX, 0)) {
            snprintf(out->zone, sizeof(out->zone), "%s", tok + 5);
        } else {
            snprintf(err, errlen, "unknown field '%.40s' (weight=W or zone=Z)", tok);
            return -EINVAL;
        }
    }
    return 0;
}

int members_parse_static(const char *text, struct member **out, size_t *n, char *err, size_t errlen)
{
    struct member *list = NULL;
    size_t count = 0, cap = 0, lineno = 0;
    char why[160];
    int rc = 0;
    *out = NULL;
    *n = 0;
    char *copy = strdup(text);
    if (!copy)
        return -ENOMEM;
    char *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        lineno++; /* blank lines vanish in strtok: numbers count non-empty lines */
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        line[strcspn(line, "\r")] = '\0';
        char *p = line + strspn(line, " \t");
        if (!*p)
            continue;
        if (count == MEMBERS_MAX) {
            snprintf(err, errlen, "more than %d members", MEMBERS_MAX);
            rc = -E2BIG;
            goto out_free;
        }
        if (count == cap) {
            cap = cap ? cap * 2 : 8;
            struct member *grown = realloc(list, cap * sizeof(*list));
            if (!grown) {
                rc = -ENOMEM;
                goto out_free;
            }
            list = grown;
        }
        rc = parse_static_line(p, &list[count], why, sizeof(why));
        if (rc < 0) {
            snprintf(err, errlen, "line %zu: %s", lineno, why);
            goto out_free;
        }
        count++;
    }
    rc = sort_unique(list, count, err, errlen);
    if (rc < 0)
        goto out_free;
    free(copy);
    *out = list;
    *n = count;
    return 0;
out_free:
    free(copy);
    free(list);
    return rc < 0 ? rc : -EINVAL;
}

/* The JSON record this node puts under its key. Caller frees. */
static char *record_json(const struct member *self)
{
    struct json_object *o = json_object_new_object();
    char *s = NULL;
    if (!o)
        return NULL;
    json_object_object_add(o, "id", json_object_new_string(self->id));
    json_object_object_add(o, "addr", json_object_new_string(self->addr));
    json_object_object_add(o, "weight", json_object_new_double(self->weight));
    json_object_object_add(o, "zone", json_object_new_string(self->zone));
    s = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
    json_object_put(o);
    return s;
}

static const char *json_str(struct json_object *o, const char *field)
{
    struct json_object *v = NULL;
    if (!json_object_object_get_ex(o, field, &v) || !json_object_is_type(v, json_type_string))
        return NULL;
    return json_object_get_string(v);
}

/* A member from an etcd record; -EINVAL for one that is malformed (skipped by the caller). */
static int record_parse(const char *key, const char *prefix, const char *val, size_t len,
                        struct member *out)
{
    struct json_tokener *tok = json_tokener_new();
    struct json_object *o = NULL;
    int rc = -EINVAL;
    if (!tok)
        return -ENOMEM;
    o = json_tokener_parse_ex(tok, val, (int)len);
    json_tokener_free(tok);
    if (!o || !json_object_is_type(o, json_type_object))
        goto out;
    const char *id = json_str(o, "id"), *addr = json_str(o, "addr"), *zone = json_str(o, "zone");
    /* The key names the id: a record can not claim another node's place. */
    if (!id || !members_valid_id(id) || strcmp(key + strlen(prefix), id) != 0)
        goto out;
    if (!addr || members_parse_addr(addr) < 0)
        goto out;
    memset(out, 0, sizeof(*out));
    snprintf(out->id, sizeof(out->id), "%s", id);
    snprintf(out->addr, sizeof(out->addr), "%s", addr);
    if (zone && (!*zone || valid_chars(zone, MEMBERS_ZONE_MAX, 0)))
        snprintf(out->zone, sizeof(out->zone), "%s", zone);
    out->weight = 1;
    struct json_object *w = NULL;
    if (json_object_object_get_ex(o, "weight", &w)) {
        double d = json_object_get_double(w);
        if (!isfinite(d) || d <= 0 || d > 1e6)
            goto out;
        out->weight = d;
    }
    rc = 0;
out:
    json_object_put(o);
    return rc;
}

/* ---- views -------------------------------------------------------------------------------- */

/* A view of list (taken over: freed on failure too). */
static struct members_view *view_new(struct member *list, size_t n, const struct member *self,
                                     int self_by_id)
{
    struct members_view *v = calloc(1, sizeof(*v));
    if (!v)
        goto out_free_list;
    v->nodes = calloc(n ? n : 1, sizeof(*v->nodes));
    if (!v->nodes)
        goto out_free_view;
    atomic_init(&v->refs, 1);
    v->members = list;
    v->n = n;
    v->self = -1;
    for (size_t i = 0; i < n; i++) {
        v->nodes[i].name = list[i].id;
        v->nodes[i].weight = list[i].weight;
        if (self_by_id ? strcmp(list[i].id, self->id) == 0 : strcmp(list[i].addr, self->addr) == 0)
            v->self = (int)i;
    }
    return v;
out_free_view:
    free(v);
out_free_list:
    free(list);
    return NULL;
}

void members_view_unref(struct members_view *v)
{
    if (!v || atomic_fetch_sub(&v->refs, 1) != 1)
        return;
    free(v->nodes);
    free(v->members);
    free(v);
}

struct members_view *members_view_get(struct members *m)
{
    pthread_mutex_lock(&m->lock);
    struct members_view *v = m->view;
    atomic_fetch_add(&v->refs, 1);
    pthread_mutex_unlock(&m->lock);
    return v;
}

static int same_members(const struct members_view *v, const struct member *list, size_t n)
{
    if (v->n != n)
        return 0;
    for (size_t i = 0; i < n; i++) {
        const struct member *a = &v->members[i], *b = &list[i];
        if (strcmp(a->id, b->id) || strcmp(a->addr, b->addr) || strcmp(a->zone, b->zone) ||
            a->weight != b->weight)
            return 0;
    }
    return 1;
}

static void logf_(struct members *m, int warning, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void logf_(struct members *m, int warning, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    if (!m->log)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    m->log(m->log_arg, warning, msg);
}

/* Publishes list (taken over) as the view when it differs from the current one; records a
 * good refresh either way. 0 or -ENOMEM. */
static int publish(struct members *m, struct member *list, size_t n, int self_by_id)
{
    struct members_view *old = NULL, *v = NULL;
    pthread_mutex_lock(&m->lock);
    m->st.refreshes++;
    m->st.last_ok_ms = (int64_t)backend_now_ms();
    m->st.last_error[0] = '\0';
    if (m->view && same_members(m->view, list, n)) {
        pthread_mutex_unlock(&m->lock);
        free(list);
        return 0;
    }
    pthread_mutex_unlock(&m->lock);
    v = view_new(list, n, &m->self, self_by_id);
    if (!v)
        return -ENOMEM;
    pthread_mutex_lock(&m->lock);
    old = m->view;
    v->generation = old ? old->generation + 1 : 1;
    m->view = v;
    m->st.generation = v->generation;
    pthread_mutex_unlock(&m->lock);
    if (old) {
        char ids[256] = "";
        size_t used = 0;
        for (size_t i = 0; i < v->n && used < sizeof(ids) - 1; i++)
            used += (size_t)snprintf(ids + used, sizeof(ids) - used, "%s%s", i ? " " : "",
                                     v->members[i].addr);
        logf_(m, 0, "cluster %s: %zu member%s: %s", m->cluster, v->n, v->n == 1 ? "" : "s", ids);
    }
    members_view_unref(old);
    return 0;
}

static void note_error(struct members *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void note_error(struct members *m, const char *fmt, ...)
{
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&m->lock);
    int first = strcmp(m->st.last_error, msg) != 0;
    m->st.errors++;
    snprintf(m->st.last_error, sizeof(m->st.last_error), "%s", msg);
    pthread_mutex_unlock(&m->lock);
    if (first) /* once per new trouble, not once per poll */
        logf_(m, 1, "cluster %s: %s", m->cluster, msg);
}

/* ---- static file ------------------------------------------------------------------------- */

static int read_text(const char *path, char **out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    char *buf = malloc(STATIC_FILE_MAX + 1);
    size_t len = 0;
    int rc = 0;
    if (!buf) {
        rc = -ENOMEM;
        goto out_close;
    }
    for (;;) {
        ssize_t r = read(fd, buf + len, STATIC_FILE_MAX + 1 - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = -errno;
            goto out_close;
        }
        if (r == 0)
            break;
        len += (size_t)r;
        if (len > STATIC_FILE_MAX) {
            rc = -EFBIG;
            goto out_close;
        }
    }
    buf[len] = '\0';
    if (memchr(buf, '\0', len)) {
        rc = -EINVAL;
        goto out_close;
    }
    *out = buf;
    buf = NULL;
out_close:
    free(buf);
    close(fd);
    return rc;
}

/* Re-reads the peers file when it changed (or when force). */
static void static_refresh(struct members *m, int force, char *err, size_t errlen)
{
    struct stat st;
    char *text = NULL, why[200];
    struct member *list = NULL;
    size_t n = 0;
    err[0] = '\0';
    if (stat(m->peers_file, &st) < 0) {
        snprintf(err, errlen, "peers file %s: %s (keeping the last view)", m->peers_file,
                 strerror(errno));
        note_error(m, "%s", err);
        return;
    }
    if (!force && m->file_known && st.st_ino == m->file_st.st_ino &&
        st.st_size == m->file_st.st_size && st.st_mtim.tv_sec == m->file_st.st_mtim.tv_sec &&
        st.st_mtim.tv_nsec == m->file_st.st_mtim.tv_nsec)
        return;
    int rc = read_text(m->peers_file, &text);
    if (rc == 0)
        rc = members_parse_static(text, &list, &n, why, sizeof(why));
    else
        snprintf(why, sizeof(why), "%s", strerror(-rc));
    free(text);
    if (rc < 0) {
        snprintf(err, errlen, "peers file %s: %s (keeping the last view)", m->peers_file, why);
        note_error(m, "%s", err);
        return;
    }
    m->file_st = st;
    m->file_known = 1;
    if (publish(m, list, n, 0) < 0)
        note_error(m, "out of memory");
}

/* ---- etcd --------------------------------------------------------------------------------- */

static int etcd_register(struct members *m)
{
    int64_t lease = 0;
    char *rec = record_json(&m->self);
    if (!rec)
        return -ENOMEM;
    int rc = etcd_lease_grant(m->etcd, m->ttl_s, &lease, NULL);
    if (rc == 0)
        rc = etcd_put(m->etcd, m->self_key, rec, strlen(rec), lease);
    free(rec);
    if (rc < 0) {
        note_error(m, "cannot register with etcd at %s: %s (retrying)",
                   etcd_client_endpoint(m->etcd), strerror(-rc));
        if (lease)
            etcd_lease_revoke(m->etcd, lease);
        return rc;
    }
    m->lease = lease;
    m->next_keepalive_ms = backend_now_ms() + (uint64_t)m->ttl_s * 1000 / 3;
    pthread_mutex_lock(&m->lock);
    m->st.registered = 1;
    m->st.lease = lease;
    pthread_mutex_unlock(&m->lock);
    return 0;
}

static void etcd_keepalive(struct members *m)
{
    int rc = etcd_lease_keepalive(m->etcd, m->lease, NULL);
    m->next_keepalive_ms = backend_now_ms() + (uint64_t)m->ttl_s * 1000 / 3;
    if (rc == -ENOENT) { /* the lease expired (etcd restarted, or we were stopped) */
        logf_(m, 1, "cluster %s: etcd lease expired; registering again", m->cluster);
        m->lease = 0;
        pthread_mutex_lock(&m->lock);
        m->st.registered = 0;
        m->st.lease = 0;
        pthread_mutex_unlock(&m->lock);
        etcd_register(m);
    } else if (rc < 0) {
        note_error(m, "etcd keepalive at %s: %s", etcd_client_endpoint(m->etcd), strerror(-rc));
    }
}

/* Reads the members prefix; on success publishes it (with this node in it) and sets *rev. */
static int etcd_refresh(struct members *m, int64_t *rev)
{
    struct etcd_kv *kvs = NULL;
    size_t n = 0, count = 0;
    int have_self = 0;
    int rc = etcd_range_prefix(m->etcd, m->prefix, &kvs, &n, rev);
    if (rc < 0) {
        note_error(m, "cannot read members from etcd at %s: %s (keeping the last view)",
                   etcd_client_endpoint(m->etcd), strerror(-rc));
        return rc;
    }
    struct member *list = calloc(n + 1, sizeof(*list));
    if (!list) {
        etcd_kvs_free(kvs, n);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n && count < MEMBERS_MAX; i++) {
        if (record_parse(kvs[i].key, m->prefix, kvs[i].value, kvs[i].value_len, &list[count]) < 0)
            continue; /* someone else's malformed record: not a member */
        if (strcmp(list[count].id, m->self.id) == 0) {
            have_self = 1;
            list[count] = m->self; /* our own record as we know it */
        }
        count++;
    }
    etcd_kvs_free(kvs, n);
    if (!have_self)
        list[count++] = m->self;
    char why[160];
    if (sort_unique(list, count, why, sizeof(why)) < 0) { /* cannot happen: keys are unique */
        free(list);
        return -EIO;
    }
    return publish(m, list, count, 1);
}

/* Sleeps up to ms or until stopped. */
static void nap(struct members *m, int ms)
{
    struct timespec ts = backend_deadline_ms((uint64_t)ms);
    pthread_mutex_lock(&m->lock);
    while (!atomic_load(&m->stop))
        if (pthread_cond_timedwait(&m->cond, &m->lock, &ts) == ETIMEDOUT)
            break;
    pthread_mutex_unlock(&m->lock);
}

static void etcd_loop(struct members *m)
{
    int64_t rev = 0;
    int have_rev = 0;
    while (!atomic_load(&m->stop)) {
        if (!m->lease)
            etcd_register(m);
        else if (backend_now_ms() >= m->next_keepalive_ms)
            etcd_keepalive(m);
        if (atomic_load(&m->stop))
            break;
        have_rev = etcd_refresh(m, &rev) == 0;
        uint64_t now = backend_now_ms();
        int wait = m->poll_ms;
        if (m->lease) {
            int64_t until = (int64_t)m->next_keepalive_ms - (int64_t)now;
            if (until < wait)
                wait = until > 0 ? (int)until : 0;
        } else if (wait > 1000) {
            wait = 1000; /* not registered: try again soon */
        }
        if (wait == 0 || atomic_load(&m->stop))
            continue;
        int64_t seen = 0;
        int rc = have_rev ? etcd_watch_wait(m->etcd, m->prefix, rev, wait, &seen) : -EAGAIN;
        if (rc < 0 && rc != -ETIMEDOUT && rc != -ESTALE && !atomic_load(&m->stop))
            nap(m, wait); /* etcd is not answering: do not spin */
    }
}

static void *members_thread(void *arg)
{
    pthread_setname_np(pthread_self(), "pagefs-members"); /* top -H, perf --sort comm */
    struct members *m = arg;
    struct backend_call call;
    char err[300];
    backend_call_begin(&call, 0, &m->stop);
    if (m->etcd) {
        etcd_loop(m);
    } else {
        while (!atomic_load(&m->stop)) {
            nap(m, m->poll_ms);
            if (!atomic_load(&m->stop))
                static_refresh(m, 0, err, sizeof(err));
        }
    }
    backend_call_end(&call);
    return NULL;
}

/* ---- life cycle --------------------------------------------------------------------------- */

static int check_conf(const struct members_conf *conf, char *err, size_t errlen)
{
    if (!members_valid_cluster(conf->cluster)) {
        snprintf(err, errlen, "cluster name must be 1 to 64 of A-Z a-z 0-9 . _ -");
        return -EINVAL;
    }
    if (!conf->self_addr || members_parse_addr(conf->self_addr) < 0) {
        snprintf(err, errlen, "a cluster node needs rest=HOST:PORT (the address peers reach)");
        return -EINVAL;
    }
    if (!!conf->peers_file == !!conf->etcd) {
        snprintf(err, errlen, "a cluster needs exactly one of peers=FILE and etcd=URL");
        return -EINVAL;
    }
    if (conf->etcd && !members_valid_id(conf->self_id)) {
        snprintf(err, errlen, "bad node id (1 to %d of A-Z a-z 0-9 . _ : -)", MEMBERS_ID_MAX);
        return -EINVAL;
    }
    if (conf->zone && *conf->zone && !valid_chars(conf->zone, MEMBERS_ZONE_MAX, 0)) {
        snprintf(err, errlen, "zone must be 1 to %d of A-Z a-z 0-9 . _ -", MEMBERS_ZONE_MAX);
        return -EINVAL;
    }
    if (conf->weight < 0 || !isfinite(conf->weight) || conf->weight > 1e6) {
        snprintf(err, errlen, "weight must be a number > 0");
        return -EINVAL;
    }
    return 0;
}

int members_create(const struct members_conf *conf, struct members **out, char *err, size_t errlen)
{
    struct members *m = NULL;
    int rc;
    *out = NULL;
    err[0] = '\0';
    rc = check_conf(conf, err, errlen);
    if (rc < 0)
        return rc;
    m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    if (backend_cond_init_monotonic(&m->cond) < 0) {
        free(m);
        return -ENOMEM;
    }
    pthread_mutex_init(&m->lock, NULL);
    atomic_init(&m->stop, 0);
    snprintf(m->cluster, sizeof(m->cluster), "%s", conf->cluster);
    snprintf(m->self.addr, sizeof(m->self.addr), "%s", conf->self_addr);
    snprintf(m->self.id, sizeof(m->self.id), "%s", conf->etcd ? conf->self_id : conf->self_addr);
    snprintf(m->self.zone, sizeof(m->self.zone), "%s", conf->zone ? conf->zone : "");
    m->self.weight = conf->weight > 0 ? conf->weight : 1;
    snprintf(m->prefix, sizeof(m->prefix), "/pagefs/%s/members/", m->cluster);
    snprintf(m->self_key, sizeof(m->self_key), "%s%s", m->prefix, m->self.id);
    m->ttl_s = conf->ttl_s > 0 ? conf->ttl_s : MEMBERS_DEFAULT_TTL_S;
    m->poll_ms = conf->poll_ms > 0 ? conf->poll_ms : MEMBERS_DEFAULT_POLL_MS;
    m->log = conf->log;
    m->log_arg = conf->log_arg;
    m->st.source = conf->etcd ? "etcd" : "static";

    if (conf->peers_file) {
        m->peers_file = strdup(conf->peers_file);
        if (!m->peers_file) {
            rc = -ENOMEM;
            goto out_destroy;
        }
        snprintf(m->st.where, sizeof(m->st.where), "%s", conf->peers_file);
        static_refresh(m, 1, err, errlen);
        if (!m->view) { /* no good view yet: the mount would run alone; say so and stop */
            rc = -EINVAL;
            goto out_destroy;
        }
    } else {
        struct etcd_conf ec = {.endpoints = conf->etcd, .timeout_ms = 2000};
        rc = etcd_client_create(&ec, &m->etcd, err, errlen);
        if (rc < 0)
            goto out_destroy;
        snprintf(m->st.where, sizeof(m->st.where), "%s", conf->etcd);
        /* This node alone until etcd answers. */
        struct member *self = malloc(sizeof(*self));
        if (!self) {
            rc = -ENOMEM;
            goto out_destroy;
        }
        *self = m->self;
        m->view = view_new(self, 1, &m->self, 1);
        if (!m->view) {
            rc = -ENOMEM;
            goto out_destroy;
        }
        m->view->generation = 1;
        m->st.generation = 1;
        int64_t rev = 0;
        if (etcd_register(m) < 0 || etcd_refresh(m, &rev) < 0)
            snprintf(err, errlen, "%s", m->st.last_error);
    }
    rc = pthread_create(&m->thread, NULL, members_thread, m);
    if (rc) {
        rc = -rc;
        goto out_destroy;
    }
    m->thread_started = 1;
    *out = m;
    return 0;
out_destroy:
    members_destroy(m);
    return rc;
}

void members_destroy(struct members *m)
{
    if (!m)
        return;
    if (m->thread_started) {
        pthread_mutex_lock(&m->lock);
        atomic_store(&m->stop, 1);
        pthread_cond_broadcast(&m->cond);
        pthread_mutex_unlock(&m->lock);
        pthread_join(m->thread, NULL);
    }
    if (m->etcd && m->lease) /* leave the view now, not after the TTL */
        etcd_lease_revoke(m->etcd, m->lease);
    etcd_client_destroy(m->etcd);
    members_view_unref(m->view);
    free(m->peers_file);
    pthread_cond_destroy(&m->cond);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

void members_get_status(struct members *m, struct members_status *out)
{
    pthread_mutex_lock(&m->lock);
    *out = m->st;
    if (m->etcd)
        snprintf(out->where, sizeof(out->where), "%s", etcd_client_endpoint(m->etcd));
    pthread_mutex_unlock(&m->lock);
}
