/* The bounded memory of fetched traces: see link_memory.h, and interceptors/trace_links.py,
 * the reference whose every step this follows (tests/unit/test_link_memory.py drives both
 * with the same operations). Two hash tables with an order list each: the entries, least
 * recently fetched first, and the keys gone (evicted or expired), oldest first. An entry's
 * parents are allocated as they come (most traces have one), up to max_parents. */
#include "link_memory.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t *topic;
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
};

static uint64_t hash_key(const uint8_t *p, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ p[i]) * 1099511628211ULL;
    }
    return h ^ (h >> 29);
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
        free(e->parents[i].topic);
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
    if (!table_init(&m->entries, capacity) || !table_init(&m->gone, capacity) ||
        pthread_mutex_init(&m->lock, NULL) != 0) {
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
    pthread_mutex_destroy(&m->lock);
    free(m);
}

/* The key (scope, trace) in a new buffer. */
static uint8_t *make_key(const uint8_t *scope, size_t scope_len, const uint8_t *trace) {
    uint8_t *key = malloc(scope_len + LM_TRACE);
    if (key != NULL) {
        if (scope_len > 0) {
            memcpy(key, scope, scope_len);
        }
        memcpy(key + scope_len, trace, LM_TRACE);
    }
    return key;
}

static int set_parent(parent_t *p, const uint8_t *topic, size_t topic_len, int32_t partition,
                      int64_t offset) {
    p->topic = malloc(topic_len ? topic_len : 1);
    if (p->topic == NULL) {
        return 0;
    }
    if (topic_len > 0) {
        memcpy(p->topic, topic, topic_len);
    }
    p->topic_len = topic_len;
    p->partition = partition;
    p->offset = offset;
    return 1;
}

static int same_parent(const parent_t *p, const uint8_t *topic, size_t topic_len,
                       int32_t partition, int64_t offset) {
    return p->partition == partition && p->offset == offset && p->topic_len == topic_len &&
           (topic_len == 0 || memcmp(p->topic, topic, topic_len) == 0);
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
        free(e->parents);
        e->parents = NULL;
        e->reason = reason;
        insert(gone, e);
    }
    if ((int64_t)gone->n > m->capacity) {
        node *oldest = gone->head;
        take(gone, oldest);
        free_node(oldest);
    }
}

int lm_remember(lm_memory *m, const uint8_t *scope, size_t scope_len, const uint8_t *trace,
                const uint8_t *topic, size_t topic_len, int32_t partition, int64_t offset,
                double now, int64_t *evicted, int64_t *expired) {
    *evicted = *expired = 0;
    uint8_t *key = make_key(scope, scope_len, trace);
    if (key == NULL) {
        return 0;
    }
    size_t len = scope_len + LM_TRACE;
    uint64_t h = hash_key(key, len);
    pthread_mutex_lock(&m->lock);
    table *entries = &m->entries;
    node *e = find(entries, key, len, h);
    if (e == NULL) {
        e = calloc(1, sizeof *e);
        parent_t *parents = calloc(1, sizeof(parent_t));
        if (e == NULL || parents == NULL ||
            !set_parent(&parents[0], topic, topic_len, partition, offset)) {
            free(e);
            free(parents);
            free(key);
            pthread_mutex_unlock(&m->lock);
            return 0;
        }
        e->key = key;
        key = NULL;
        e->key_len = len;
        e->hash = h;
        e->seen = now;
        e->parents = parents;
        e->nparents = e->room = 1;
        insert(entries, e);
        node *g = find(&m->gone, e->key, len, h);
        if (g != NULL) {
            if (!g->spent) { /* the round goes on, its losses too */
                memcpy(e->lost, g->lost, sizeof e->lost);
            }
            take(&m->gone, g);
            free_node(g);
        }
    } else {
        free(key);
        key = NULL;
        parent_t fresh;
        if (e->nparents == e->room && e->room < m->max_parents) { /* room for one more */
            int64_t room = 2 * e->room < m->max_parents ? 2 * e->room : m->max_parents;
            parent_t *grown = realloc(e->parents, (size_t)room * sizeof(parent_t));
            if (grown == NULL) {
                pthread_mutex_unlock(&m->lock);
                return 0;
            }
            e->parents = grown;
            e->room = room;
        }
        if (!set_parent(&fresh, topic, topic_len, partition, offset)) {
            pthread_mutex_unlock(&m->lock);
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
                if (same_parent(&parents[i], topic, topic_len, partition, offset)) {
                    at = i;
                    break;
                }
            }
            if (at < 0 && e->nparents >= m->max_parents) {
                at = 0; /* the oldest goes */
                lose(e->lost, LM_LOST_OVERFLOW, 1);
            }
            if (at >= 0) { /* fetched again it becomes the newest */
                free(parents[at].topic);
                memmove(&parents[at], &parents[at + 1],
                        (size_t)(e->nparents - at - 1) * sizeof(parent_t));
                e->nparents--;
            }
        }
        parents[e->nparents++] = fresh;
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
    pthread_mutex_unlock(&m->lock);
    return 1;
}

int64_t lm_parents(lm_memory *m, const uint8_t *scope, size_t scope_len, const uint8_t *trace,
                   double now, lm_parent *out, uint32_t lost[3]) {
    memset(lost, 0, 3 * sizeof *lost);
    uint8_t *key = make_key(scope, scope_len, trace);
    if (key == NULL) {
        return -100;
    }
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
                n = -100;
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
    free(key);
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
