/*
 * evict_model.c - see evict_model.h.
 *
 * Rules (as documented for the cache):
 *   - Every read of a resident item and every item stored takes the next access clock value.
 *     A read of an item among the last min(RECENT, max(4, resident items / 16)) items an
 *     access started on (stored after a miss, or re-referenced) is part of that access: the item's
 * clock follows it, on its side. Any other read of a resident item is a re-reference: the interval
 * since its last read is a reuse sample (reuse -= reuse / max(256, resident items); reuse =
 * max(reuse, sample)), and the item becomes the newest kept item (an item on probation is
 * promoted).
 *   - evict=stable. band = capacity / 32, at least two items of the mean resident size (a page
 *     size when none is), at most capacity / 2; the kept items have room for capacity - band
 *     bytes (the band is taken again at each step below). Before an item is stored: the kept items over
 *     their room move to probation, least recently read first (demotion, keeping their clock).
 *     The new item is kept if it fits in the room, or if the least recently read kept item is
 *     idle (clock of the store - its clock) longer than reuse + reuse / 4 (a replacement);
 *     else it goes on probation. After: the kept items over their room are demoted; then, if
 *     the bytes exceed the capacity, items are evicted in order - probation first, by clock,
 *     down to capacity - band / 2, then kept items by clock while over the capacity.
 *   - evict=lru. Over the high watermark (capacity * high%), items are evicted in the same
 *     order down to the low watermark.
 * Sides are kept as two min-heaps of clocks with lazy deletion: an entry is valid while the
 * item that holds that clock is on that side.
 */
#include "evict_model.h"

#include <stdlib.h>
#include <string.h>

#define RECENT 64 /* PAGE_INDEX_RECENT */
#define DECAY_MIN 256
#define GHOSTS 32768 /* PAGE_INDEX_GHOSTS */

enum side { ABSENT, KEPT, PROB };

struct heap {
    uint64_t *v;
    size_t n, cap;
};

struct evict_model {
    struct evict_model_conf conf;
    size_t items;
    unsigned char *side;
    uint64_t *clock_of, *len;
    int64_t *who; /* who[clock]: the item whose clock it is, or -1 */
    size_t who_cap;
    struct heap kept, prob;
    int64_t ring[RECENT];
    size_t ring_next;
    int64_t *file_id; /* the cache's key of each item: (file_id, idx) */
    uint64_t *idx;
    struct ghost {
        int64_t item; /* -1: empty */
        uint64_t clock;
    } * ghosts;
    uint64_t clock, rows, bytes, prob_bytes, prob_pages, reuse, high, low;
    struct evict_model_stats st;
};

static int heap_push(struct heap *h, uint64_t x)
{
    if (h->n == h->cap) {
        size_t ncap = h->cap ? h->cap * 2 : 1024;
        uint64_t *nv = realloc(h->v, ncap * sizeof(*nv));
        if (!nv)
            return -1;
        h->v = nv;
        h->cap = ncap;
    }
    size_t i = h->n++;
    while (i > 0 && h->v[(i - 1) / 2] > x) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = x;
    return 0;
}

static void heap_pop(struct heap *h)
{
    uint64_t x = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && h->v[c + 1] < h->v[c])
            c++;
        if (h->v[c] >= x)
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n)
        h->v[i] = x;
}

/* The item with the smallest clock on side s, or -1. */
static int64_t oldest(struct evict_model *m, struct heap *h, enum side s)
{
    while (h->n) {
        int64_t it = m->who[h->v[0]];
        if (it >= 0 && m->side[it] == s && m->clock_of[it] == h->v[0])
            return it;
        heap_pop(h);
    }
    return -1;
}

static int set_clock(struct evict_model *m, size_t item, uint64_t c)
{
    if (c >= m->who_cap) {
        size_t ncap = m->who_cap * 2 > c + 1 ? m->who_cap * 2 : c + 1;
        int64_t *nw = realloc(m->who, ncap * sizeof(*nw));
        if (!nw)
            return -1;
        for (size_t i = m->who_cap; i < ncap; i++)
            nw[i] = -1;
        m->who = nw;
        m->who_cap = ncap;
    }
    if (m->side[item] != ABSENT && m->who[m->clock_of[item]] == (int64_t)item)
        m->who[m->clock_of[item]] = -1;
    m->clock_of[item] = c;
    m->who[c] = (int64_t)item;
    return heap_push(m->side[item] == PROB ? &m->prob : &m->kept, c);
}

static void ring_push(struct evict_model *m, size_t item)
{
    m->ring[m->ring_next] = (int64_t)item;
    m->ring_next = (m->ring_next + 1) % RECENT;
}

/* Among the last min(RECENT, max(4, resident items / 16)) access starts. */
static int ring_has(const struct evict_model *m, size_t item)
{
    size_t w = m->rows / 16;
    w = w < 4 ? 4 : w > RECENT ? RECENT : w;
    for (size_t i = 1; i <= w; i++)
        if (m->ring[(m->ring_next + RECENT - i) % RECENT] == (int64_t)item)
            return 1;
    return 0;
}

static void sample(struct evict_model *m, uint64_t iv)
{
    uint64_t div = m->rows > DECAY_MIN ? m->rows : DECAY_MIN;
    m->reuse -= m->reuse / div;
    if (iv > m->reuse)
        m->reuse = iv;
}

static uint64_t kept_bytes(const struct evict_model *m)
{
    return m->bytes - m->prob_bytes;
}

static void to_prob(struct evict_model *m, size_t it)
{
    m->side[it] = PROB;
    m->prob_bytes += m->len[it];
    m->prob_pages++;
    heap_push(&m->prob, m->clock_of[it]);
}

/* The probation band: capacity / 32, at least two items of the mean resident size (a page
 * size when none is), at most capacity / 2. */
static uint64_t band(const struct evict_model *m)
{
    uint64_t b = m->conf.capacity / 32;
    uint64_t unit = m->rows ? m->bytes / m->rows : m->conf.page_size;
    if (b < 2 * unit)
        b = 2 * unit;
    return b < m->conf.capacity / 2 ? b : m->conf.capacity / 2;
}

static void demote(struct evict_model *m, uint64_t band)
{
    while (kept_bytes(m) > m->conf.capacity - band) {
        int64_t it = oldest(m, &m->kept, KEPT);
        if (it < 0)
            return;
        to_prob(m, (size_t)it);
        m->st.demotions++;
    }
}

/* The ghost slot of an item: splitmix64 of (file_id << 32 ^ idx), modulo GHOSTS. */
static struct ghost *ghost_slot(struct evict_model *m, size_t it)
{
    uint64_t z = ((uint64_t)m->file_id[it] << 32 ^ m->idx[it]) + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return &m->ghosts[z % GHOSTS];
}

static void evict_one(struct evict_model *m, size_t it)
{
    struct ghost *g = ghost_slot(m, it);
    g->item = (int64_t)it;
    g->clock = m->clock_of[it];
    if (m->side[it] == PROB) {
        m->prob_bytes -= m->len[it];
        m->prob_pages--;
    }
    m->who[m->clock_of[it]] = -1;
    m->side[it] = ABSENT;
    m->bytes -= m->len[it];
    m->rows--;
    m->st.evictions++;
}

/* Evicts in order (probation first, by clock; then kept by clock) down to low; evict=stable
 * takes kept items only while the bytes exceed the capacity. */
static void evict_down(struct evict_model *m, uint64_t low)
{
    while (m->bytes > low) {
        int64_t it = oldest(m, &m->prob, PROB);
        if (it < 0 && (m->conf.lru || m->bytes > m->conf.capacity))
            it = oldest(m, &m->kept, KEPT);
        if (it < 0)
            return;
        evict_one(m, (size_t)it);
    }
}

static void maybe_evict(struct evict_model *m)
{
    if (m->conf.lru) {
        if (m->bytes > m->high)
            evict_down(m, m->low);
        return;
    }
    uint64_t b = band(m);
    if (kept_bytes(m) <= m->conf.capacity - b && m->bytes <= m->conf.capacity)
        return;
    demote(m, b);
    if (m->bytes > m->conf.capacity)
        evict_down(m, m->conf.capacity - b / 2);
}

int evict_model_read(struct evict_model *m, size_t item, uint64_t len)
{
    if (m->side[item] != ABSENT) {
        uint64_t c = ++m->clock;
        if (!ring_has(m, item)) {
            ring_push(m, item);
            sample(m, c - m->clock_of[item]);
            if (m->side[item] == PROB) {
                m->side[item] = KEPT;
                m->prob_bytes -= m->len[item];
                m->prob_pages--;
                m->st.promotions++;
            }
        }
        set_clock(m, item, c);
        m->st.hits++;
        return 1;
    }
    enum side s = KEPT;
    struct ghost *g = ghost_slot(m, item);
    if (g->item == (int64_t)item) { /* evicted before: its reuse interval */
        sample(m, m->clock + 1 - g->clock);
        g->item = -1;
    }
    if (!m->conf.lru) {
        maybe_evict(m);
        if (kept_bytes(m) + len > m->conf.capacity - band(m)) {
            int64_t o = oldest(m, &m->kept, KEPT);
            if (o >= 0 && m->clock + 1 - m->clock_of[o] > m->reuse + m->reuse / 4) {
                m->st.replacements++;
            } else {
                s = PROB;
                m->st.probation_stored++;
            }
        }
    }
    uint64_t c = ++m->clock;
    m->side[item] = s;
    m->len[item] = len;
    m->bytes += len;
    m->rows++;
    if (s == PROB) {
        m->prob_bytes += len;
        m->prob_pages++;
    }
    set_clock(m, item, c);
    ring_push(m, item);
    m->st.misses++;
    maybe_evict(m);
    return 0;
}

void evict_model_restart(struct evict_model *m)
{
    for (size_t i = 0; i < RECENT; i++)
        m->ring[i] = -1;
    for (size_t i = 0; m->ghosts && i < GHOSTS; i++)
        m->ghosts[i].item = -1;
}

void evict_model_key(struct evict_model *m, size_t item, int64_t file_id, uint64_t idx)
{
    m->file_id[item] = file_id;
    m->idx[item] = idx;
}

void evict_model_stats(const struct evict_model *m, struct evict_model_stats *out)
{
    *out = m->st;
    out->reuse = m->reuse;
    out->clock = m->clock;
    out->prob_pages = m->prob_pages;
    out->bytes = m->bytes;
}

int evict_model_resident(const struct evict_model *m, size_t item)
{
    return m->side[item] != ABSENT;
}

static uint64_t pct(uint64_t cap, unsigned p)
{
    return cap / 100 * p + cap % 100 * p / 100;
}

struct evict_model *evict_model_create(const struct evict_model_conf *conf, size_t items)
{
    struct evict_model *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->conf = *conf;
    m->items = items;
    m->side = calloc(items, 1);
    m->clock_of = calloc(items, sizeof(*m->clock_of));
    m->len = calloc(items, sizeof(*m->len));
    m->file_id = calloc(items, sizeof(*m->file_id));
    m->idx = calloc(items, sizeof(*m->idx));
    m->ghosts = calloc(GHOSTS, sizeof(*m->ghosts));
    if (!m->side || !m->clock_of || !m->len || !m->file_id || !m->idx || !m->ghosts) {
        evict_model_destroy(m);
        return NULL;
    }
    m->high = pct(conf->capacity, conf->high_pct ? conf->high_pct : 95);
    m->low = pct(conf->capacity, conf->low_pct ? conf->low_pct : 85);
    for (size_t i = 0; i < items; i++)
        m->file_id[i] = (int64_t)i + 1;
    for (size_t i = 0; i < GHOSTS; i++)
        m->ghosts[i].item = -1;
    evict_model_restart(m);
    return m;
}

void evict_model_destroy(struct evict_model *m)
{
    if (!m)
        return;
    free(m->side);
    free(m->clock_of);
    free(m->len);
    free(m->file_id);
    free(m->idx);
    free(m->ghosts);
    free(m->who);
    free(m->kept.v);
    free(m->prob.v);
    free(m);
}
