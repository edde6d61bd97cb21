/* The bounded memory of fetched traces: see link_memory.h, and interceptors/trace_links.py,
 * the reference whose every step this follows (tests/unit/interceptors/test_link_memory.py drives both
 * with the same operations). Two hash tables with an order list each: the entries, least
 * recently fetched first, and the keys gone (evicted or expired), oldest first. An entry's
 * parents are allocated as they come (most traces have one), up to max_parents. */
#include "link_memory.h"

#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* A topic name, kept once however many parents name it (interned: see intern_topic), so that
 * remembering a record allocates and frees nothing for its topic. */
typedef struct topic {
    struct topic *chain;
    uint64_t hash;
    int64_t refs; /* the parents naming it; at 0 it stays until the next sweep */
    size_t len;
    uint8_t name[];
} topic_t;

typedef struct {
    uint8_t *topic; /* an interned topic's name */
    size_t topic_len;
    int32_t partition;
    int64_t offset;
} parent_t;

typedef struct node {
    uint8_t *key; /* scope, then the trace id (LM_TRACE bytes) */
    size_t key_len;
    uint64_t hash;
    struct node *chain, *prev, *next;
    double seen;
    int spent, reason;
    int64_t nparents, room;
    parent_t *parents; /* entries: room for `room` of them */
    uint32_t lost[3];  /* the round's parents not named, by LM_LOST_* (gone: its parents too) */
} node;

typedef struct {
    node **buckets;
    size_t mask, n;
    node *head, *tail; /* oldest, newest */
} table;

struct lm_memory {
    pthread_mutex_t lock;
    int64_t holders;
    int64_t capacity, max_parents;
    double ttl;
    table entries, gone;
    lm_counts counts;
    /* The interned topics (a hash table that sweeps the unnamed ones out as it fills), the
     * last one found, and what the key dropped from `gone` and an entry buried there leave
     * for the next new entry: a node with its key buffer, a parents array. */
    topic_t **topics;
    size_t topics_mask, ntopics, topics_limit;
    topic_t *last_topic;
    node *spare;
    parent_t *spare_parents; /* room for `spare_room` */
    int64_t spare_room;
};

#define LM_AHEAD 8 /* lm_remember_many: how many records ahead it hashes and prefetches */

/* A word at a time: keys are a scope and a 32-byte trace id. */
static uint64_t hash_key(const uint8_t *p, size_t n) {
    uint64_t h = 1469598103934665603ULL ^ n;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0x9E3779B97F4A7C15ULL;
        h ^= h >> 32;
    }
    for (; n > 0; p++, n--) {
        h = (h ^ *p) * 1099511628211ULL;
    }
    return h ^ (h >> 29);
}

static topic_t *topic_of(const uint8_t *name) {
    return (topic_t *)(void *)(name - offsetof(topic_t, name));
}

/* Free the topics no parent names, and let the table grow when most are named. */
static void sweep_topics(lm_memory *m) {
    m->last_topic = NULL;
    for (size_t b = 0; b <= m->topics_mask; b++) {
        topic_t **at = &m->topics[b];
        while (*at != NULL) {
            topic_t *t = *at;
            if (t->refs == 0) {
                *at = t->chain;
                free(t);
                m->ntopics--;
            } else {
                at = &t->chain;
            }
        }
    }
    if (m->ntopics * 2 > m->topics_limit) {
        size_t size = 2 * (m->topics_mask + 1);
        topic_t **grown = calloc(size, sizeof *grown);
        if (grown != NULL) {
            for (size_t b = 0; b <= m->topics_mask; b++) {
                for (topic_t *t = m->topics[b], *next; t != NULL; t = next) {
                    next = t->chain;
                    t->chain = grown[t->hash & (size - 1)];
                    grown[t->hash & (size - 1)] = t;
                }
            }
            free(m->topics);
            m->topics = grown;
            m->topics_mask = size - 1;
        }
        m->topics_limit *= 2;
    }
}

/* The interned name of a topic, one more parent naming it; NULL out of memory. */
static uint8_t *intern_topic(lm_memory *m, const uint8_t *name, size_t len) {
    topic_t *t = m->last_topic;
    if (t == NULL || t->len != len || (len > 0 && memcmp(t->name, name, len) != 0)) {
        uint64_t h = hash_key(name, len);
        for (t = m->topics[h & m->topics_mask]; t != NULL; t = t->chain) {
            if (t->hash == h && t->len == len && (len == 0 || memcmp(t->name, name, len) == 0)) {
                break;
            }
        }
        if (t == NULL) {
            if (m->ntopics >= m->topics_limit) {
                sweep_topics(m);
            }
            t = malloc(sizeof *t + (len ? len : 1));
            if (t == NULL) {
                return NULL;
            }
            if (len > 0) {
                memcpy(t->name, name, len);
            }
            t->len = len;
            t->hash = h;
            t->refs = 0;
            t->chain = m->topics[h & m->topics_mask];
            m->topics[h & m->topics_mask] = t;
            m->ntopics++;
        }
        m->last_topic = t;
    }
    t->refs++;
    return t->name;
}

static int table_init(table *t, int64_t capacity) {
    size_t size = 16;
    while ((int64_t)size < capacity && size < ((size_t)1 << 40)) {
        size <<= 1;
    }
    t->buckets = calloc(size, sizeof(node *));
    t->mask = size - 1;
    t->n = 0;
    t->head = t->tail = NULL;
    return t->buckets != NULL;
}

static node *find(const table *t, const uint8_t *key, size_t len, uint64_t h) {
    for (node *e = t->buckets[h & t->mask]; e != NULL; e = e->chain) {
        if (e->hash == h && e->key_len == len && memcmp(e->key, key, len) == 0) {
            return e;
        }
    }
    return NULL;
}

static void link_last(table *t, node *e) {
    e->prev = t->tail;
    e->next = NULL;
    if (t->tail != NULL) {
        t->tail->next = e;
    } else {
        t->head = e;
    }
    t->tail = e;
}

static void unlink_order(table *t, node *e) {
    if (e->prev != NULL) {
        e->prev->next = e->next;
    } else {
        t->head = e->next;
    }
    if (e->next != NULL) {
        e->next->prev = e->prev;
    } else {
        t->tail = e->prev;
    }
}

static void insert(table *t, node *e) {
    node **b = &t->buckets[e->hash & t->mask];
    e->chain = *b;
    *b = e;
    link_last(t, e);
    t->n++;
}

/* Takes e out of t (not freed). */
static void take(table *t, node *e) {
    node **at = &t->buckets[e->hash & t->mask];
    while (*at != e) {
        at = &(*at)->chain;
    }
    *at = e->chain;
    unlink_order(t, e);
    t->n--;
}

static void free_parents(node *e) {
    for (int64_t i = 0; i < e->nparents; i++) {
        topic_of(e->parents[i].topic)->refs--;
    }
    e->nparents = 0;
}

static void free_node(node *e) {
    if (e->parents != NULL) {
        free_parents(e);
        free(e->parents);
    }
    free(e->key);
    free(e);
}

static void free_table(table *t) {
    node *e = t->head;
    while (e != NULL) {
        node *next = e->next;
        free_node(e);
        e = next;
    }
    free(t->buckets);
}

lm_memory *lm_new(int64_t capacity, double ttl_s, int64_t max_parents) {
    if (capacity < 1 || !(ttl_s > 0) || max_parents < 1 || max_parents > (1 << 20)) {
        return NULL;
    }
    lm_memory *m = calloc(1, sizeof *m);
    if (m == NULL) {
        return NULL;
    }
    m->holders = 1;
    m->capacity = capacity;
    m->ttl = ttl_s;
    m->max_parents = max_parents;
    m->topics = calloc(16, sizeof *m->topics);
    m->topics_mask = 15;
    m->topics_limit = 64;
    if (m->topics == NULL || !table_init(&m->entries, capacity) ||
        !table_init(&m->gone, capacity) || pthread_mutex_init(&m->lock, NULL) != 0) {
        free(m->topics);
        free(m->entries.buckets);
        free(m->gone.buckets);
        free(m);
        return NULL;
    }
    return m;
}

void lm_retain(lm_memory *m) {
    pthread_mutex_lock(&m->lock);
    m->holders++;
    pthread_mutex_unlock(&m->lock);
}

void lm_release(lm_memory *m) {
    if (m == NULL) {
        return;
    }
    pthread_mutex_lock(&m->lock);
    int64_t left = --m->holders;
    pthread_mutex_unlock(&m->lock);
    if (left > 0) {
        return;
    }
    free_table(&m->entries);
    free_table(&m->gone);
    if (m->spare != NULL) {
        free_node(m->spare);
    }
    free(m->spare_parents);
    for (size_t b = 0; b <= m->topics_mask; b++) {
        for (topic_t *t = m->topics[b], *next; t != NULL; t = next) {
            next = t->chain;
            free(t);
        }
    }
    free(m->topics);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

static int set_parent(lm_memory *m, parent_t *p, const uint8_t *topic, size_t topic_len,
                      int32_t partition, int64_t offset) {
    p->topic = intern_topic(m, topic, topic_len);
    if (p->topic == NULL) {
        return 0;
    }
    p->topic_len = topic_len;
    p->partition = partition;
    p->offset = offset;
    return 1;
}

/* Interned topics are the same name when they are the same pointer. */
static int same_parent(const parent_t *p, const parent_t *q) {
    return p->partition == q->partition && p->offset == q->offset && p->topic == q->topic;
}

/* A node that left `gone` (freed, or kept for the next new entry). */
static void retire(lm_memory *m, node *e) {
    if (m->spare == NULL && e->parents == NULL) {
        m->spare = e;
    } else {
        free_node(e);
    }
}

/* A parents array that left its entry (freed, or kept for the next new entry). */
static void retire_parents(lm_memory *m, parent_t *parents, int64_t room) {
    if (m->spare_parents == NULL) {
        m->spare_parents = parents;
        m->spare_room = room;
    } else {
        free(parents);
    }
}

static void lose(uint32_t lost[3], int why, int64_t n) {
    lost[why] = (uint64_t)lost[why] + (uint64_t)n > LM_LOST_MAX ? LM_LOST_MAX
                                                                 : lost[why] + (uint32_t)n;
}

/* An entry evicted or expired leaves its key in `gone`, with why, whether it was spent and
 * the round's losses, its parents now among them: a key already there keeps its place and
 * takes the new ones (as an ordered dict's assignment does). */
static void bury(lm_memory *m, node *e, int reason) {
    table *gone = &m->gone;
    lose(e->lost, reason == LM_EXPIRED ? LM_LOST_EXPIRED : LM_LOST_EVICTED, e->nparents);
    node *g = find(gone, e->key, e->key_len, e->hash);
    if (g != NULL) {
        g->reason = reason;
        g->spent = e->spent;
        memcpy(g->lost, e->lost, sizeof g->lost);
        free_node(e);
    } else {
        free_parents(e);
        retire_parents(m, e->parents, e->room);
        e->parents = NULL;
        e->reason = reason;
        insert(gone, e);
    }
    if ((int64_t)gone->n > m->capacity) {
        node *oldest = gone->head;
        take(gone, oldest);
        retire(m, oldest);
    }
}

/* A new node holding a copy of the key: the spare one when its key buffer fits. */
static node *new_node(lm_memory *m, const uint8_t *key, size_t len) {
    node *e = m->spare;
    uint8_t *buf;
    if (e != NULL && e->key_len == len) {
        m->spare = NULL;
        buf = e->key;
        memset(e, 0, sizeof *e);
    } else {
        e = calloc(1, sizeof *e);
        buf = malloc(len);
        if (e == NULL || buf == NULL) {
            free(e);
            free(buf);
            return NULL;
        }
    }
    memcpy(buf, key, len);
    e->key = buf;
    e->key_len = len;
    return e;
}

/* lm_remember with the memory locked, the key (scope, trace) made by the caller. */
static int remember(lm_memory *m, const uint8_t *key, size_t len, uint64_t h,
                    const uint8_t *topic, size_t topic_len, int32_t partition, int64_t offset,
                    double now, int64_t *evicted, int64_t *expired) {
    *evicted = *expired = 0;
    table *entries = &m->entries;
    node *e = find(entries, key, len, h);
    if (e == NULL) {
        e = new_node(m, key, len);
        parent_t *parents = m->spare_parents;
        int64_t room = m->spare_room;
        m->spare_parents = NULL;
        if (parents == NULL) {
            parents = calloc(1, sizeof(parent_t));
            room = 1;
        }
        if (e == NULL || parents == NULL ||
            !set_parent(m, &parents[0], topic, topic_len, partition, offset)) {
            if (e != NULL) {
                free_node(e);
            }
            free(parents);
            return 0;
        }
        e->hash = h;
        e->seen = now;
        e->parents = parents;
        e->nparents = 1;
        e->room = room;
        insert(entries, e);
        node *g = find(&m->gone, e->key, len, h);
        if (g != NULL) {
            if (!g->spent) { /* the round goes on, its losses too */
                memcpy(e->lost, g->lost, sizeof e->lost);
            }
            take(&m->gone, g);
            retire(m, g);
        }
    } else {
        parent_t fresh;
        if (!set_parent(m, &fresh, topic, topic_len, partition, offset)) {
            return 0;
        }
        unlink_order(entries, e);
        link_last(entries, e);
        parent_t *parents = e->parents;
        if (e->spent) { /* a new round */
            free_parents(e);
            e->spent = 0;
            memset(e->lost, 0, sizeof e->lost);
        } else if (now - e->seen > m->ttl) {
            lose(e->lost, LM_LOST_EXPIRED, e->nparents);
            free_parents(e);
        } else {
            int64_t at = -1;
            for (int64_t i = 0; i < e->nparents; i++) {
                if (same_parent(&parents[i], &fresh)) {
                    at = i;
                    break;
                }
            }
            if (at < 0 && e->nparents >= m->max_parents) {
                at = 0; /* the oldest goes */
                lose(e->lost, LM_LOST_OVERFLOW, 1);
            }
            if (at >= 0) { /* fetched again it becomes the newest */
                topic_of(parents[at].topic)->refs--;
                memmove(&parents[at], &parents[at + 1],
                        (size_t)(e->nparents - at - 1) * sizeof(parent_t));
                e->nparents--;
            }
        }
        /* Grown only when the record is really added: below max_parents here, since a full
         * entry just gave up its oldest or was emptied. */
        if (e->nparents == e->room) {
            int64_t room = 2 * e->room < m->max_parents ? 2 * e->room : m->max_parents;
            parent_t *grown = realloc(e->parents, (size_t)room * sizeof(parent_t));
            if (grown == NULL) {
                topic_of(fresh.topic)->refs--;
                return 0;
            }
            e->parents = grown;
            e->room = room;
        }
        e->parents[e->nparents++] = fresh;
        e->seen = now;
    }
    /* The oldest entries first: expired ones, then any beyond the capacity. */
    double limit = now - m->ttl;
    while (entries->head != NULL) {
        node *oldest = entries->head;
        int reason;
        if (oldest->seen < limit) {
            reason = LM_EXPIRED;
            ++*expired;
        } else if ((int64_t)entries->n > m->capacity) {
            reason = LM_EVICTED;
            ++*evicted;
        } else {
            break;
        }
        take(entries, oldest);
        bury(m, oldest, reason);
    }
    m->counts.remembered++;
    m->counts.evicted += (uint64_t)*evicted;
    m->counts.expired += (uint64_t)*expired;
    return 1;
}

/* The key (scope, trace) in `small` when it fits, else in a new buffer (NULL out of memory). */
static uint8_t *key_in(uint8_t *small, size_t room, const uint8_t *scope, size_t scope_len) {
    size_t len = scope_len + LM_TRACE;
    uint8_t *key = len <= room ? small : malloc(len);
    if (key != NULL && scope_len > 0) {
        memcpy(key, scope, scope_len);
    }
    return key;
}

int lm_remember(lm_memory *m, const uint8_t *scope, size_t scope_len, const uint8_t *trace,
                const uint8_t *topic, size_t topic_len, int32_t partition, int64_t offset,
                double now, int64_t *evicted, int64_t *expired) {
    lm_record one = {{0}, topic, topic_len, partition, offset};
    memcpy(one.trace, trace, LM_TRACE);
    int64_t n = lm_remember_many(m, scope, scope_len, &one, 1, now, evicted, expired);
    return n == 1;
}

int64_t lm_remember_many(lm_memory *m, const uint8_t *scope, size_t scope_len,
                         const lm_record *records, size_t n, double now, int64_t *evicted,
                         int64_t *expired) {
    uint8_t small[256];
    *evicted = *expired = 0;
    uint8_t *key = key_in(small, sizeof small, scope, scope_len);
    if (key == NULL) {
        return 0;
    }
    size_t len = scope_len + LM_TRACE;
    int64_t done = 0;
    /* The hashes LM_AHEAD records ahead, their buckets fetched into the cache meanwhile: a
     * memory of many entries is mostly out of the cache, and a lookup after a lookup waited
     * on each miss in turn. */
    uint64_t ahead[LM_AHEAD];
    for (size_t i = 0; i < n && i < LM_AHEAD; i++) {
        memcpy(key + scope_len, records[i].trace, LM_TRACE);
        ahead[i] = hash_key(key, len);
    }
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < n && i < LM_AHEAD; i++) {
        __builtin_prefetch(&m->entries.buckets[ahead[i] & m->entries.mask]);
    }
    for (size_t i = 0; i < n; i++) {
        const lm_record *r = &records[i];
        int64_t ev, ex;
        uint64_t h = ahead[i % LM_AHEAD];
        if (i + LM_AHEAD < n) {
            memcpy(key + scope_len, records[i + LM_AHEAD].trace, LM_TRACE);
            uint64_t next = ahead[i % LM_AHEAD] = hash_key(key, len);
            __builtin_prefetch(&m->entries.buckets[next & m->entries.mask]);
        }
        if (i + 1 < n) { /* the next one's first node: its bucket came in a while ago */
            node *first = m->entries.buckets[ahead[(i + 1) % LM_AHEAD] & m->entries.mask];
            if (first != NULL) {
                __builtin_prefetch(first);
            }
        }
        memcpy(key + scope_len, r->trace, LM_TRACE);
        if (remember(m, key, len, h, r->topic, r->topic_len, r->partition, r->offset, now,
                     &ev, &ex)) {
            done++;
            *evicted += ev;
            *expired += ex;
        }
    }
    pthread_mutex_unlock(&m->lock);
    if (key != small) {
        free(key);
    }
    return done;
}

int64_t lm_parents(lm_memory *m, const uint8_t *scope, size_t scope_len, const uint8_t *trace,
                   double now, lm_parent *out, uint32_t lost[3]) {
    memset(lost, 0, 3 * sizeof *lost);
    uint8_t small[256];
    uint8_t *key = key_in(small, sizeof small, scope, scope_len);
    if (key == NULL) {
        return LM_NO_MEMORY;
    }
    memcpy(key + scope_len, trace, LM_TRACE);
    size_t len = scope_len + LM_TRACE;
    uint64_t h = hash_key(key, len);
    int64_t n;
    pthread_mutex_lock(&m->lock);
    node *e = find(&m->entries, key, len, h);
    if (e == NULL) {
        node *g = find(&m->gone, key, len, h);
        n = -1 - (g != NULL ? g->reason : LM_UNSEEN);
        if (g != NULL) {
            memcpy(lost, g->lost, 3 * sizeof *lost);
        }
    } else if (now - e->seen > m->ttl) {
        n = -1 - LM_EXPIRED;
        memcpy(lost, e->lost, 3 * sizeof *lost);
        lose(lost, LM_LOST_EXPIRED, e->nparents);
    } else {
        for (n = 0; n < e->nparents; n++) {
            const parent_t *p = &e->parents[n];
            uint8_t *topic = malloc(p->topic_len ? p->topic_len : 1);
            if (topic == NULL) {
                lm_parents_free(out, n);
                n = LM_NO_MEMORY;
                break;
            }
            memcpy(topic, p->topic, p->topic_len);
            out[n] = (lm_parent){topic, p->topic_len, p->partition, p->offset};
        }
        if (n > 0) {
            e->spent = 1;
            memcpy(lost, e->lost, 3 * sizeof *lost);
        }
    }
    pthread_mutex_unlock(&m->lock);
    if (key != small) {
        free(key);
    }
    return n;
}

void lm_parents_free(lm_parent *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        free((void *)out[i].topic);
    }
}

int64_t lm_size(lm_memory *m) {
    pthread_mutex_lock(&m->lock);
    int64_t n = (int64_t)m->entries.n;
    pthread_mutex_unlock(&m->lock);
    return n;
}

int64_t lm_max_parents(const lm_memory *m) {
    return m->max_parents;
}

void lm_count(lm_memory *m, const lm_counts *more) {
    pthread_mutex_lock(&m->lock);
    lm_counts *c = &m->counts;
    c->remembered += more->remembered;
    c->evicted += more->evicted;
    c->expired += more->expired;
    c->made += more->made;
    c->parents += more->parents;
    for (int i = 0; i < 3; i++) {
        c->missed[i] += more->missed[i];
        c->lost[i] += more->lost[i];
    }
    pthread_mutex_unlock(&m->lock);
}

void lm_counters(lm_memory *m, lm_counts *out) {
    pthread_mutex_lock(&m->lock);
    *out = m->counts;
    pthread_mutex_unlock(&m->lock);
}
