/* The bounded memory of the traced records clients fetched (interceptors/trace_links.py is
 * the Python reference, `FetchedTraces`, and gives the rules): (scope, trace id) -> up to
 * max_parents (topic, partition, offset), least recently fetched evicted first at capacity,
 * an entry not refreshed for ttl_s not believed, and a bounded set of the keys evicted or
 * expired that tells a miss's reason. No Python objects: the record stamper's module
 * (protocol/_stamp.c) owns one for Python, the native relay (proxy/native/) uses the same
 * one from its own thread, so every call takes the memory's mutex. Compiled into both
 * extensions, like stamp_core.c; lm_retain/lm_release count who holds it. */
#ifndef HERALD_LINK_MEMORY_H
#define HERALD_LINK_MEMORY_H

#include <stddef.h>
#include <stdint.h>

typedef struct lm_memory lm_memory;

enum { LM_UNSEEN = 0, LM_EXPIRED = 1, LM_EVICTED = 2 }; /* why a lookup found nothing */
#define LM_TRACE 32 /* a trace id as the traceparent writes it: 32 lowercase hex digits */

typedef struct {
    const uint8_t *topic; /* valid until the next call on the memory (lm_parents copies) */
    size_t topic_len;
    int32_t partition;
    int64_t offset;
} lm_parent;

/* Counters, as the Python members count them (interceptors/trace_links.py and trace_context):
 * records remembered, entries evicted and expired on the way; records linked, parent headers
 * written, and traced records with no entry, by reason. The engine adds to them; the Python
 * path counts in its own stats. */
typedef struct {
    uint64_t remembered, evicted, expired, made, parents, missed[3];
} lm_counts;

/* NULL when out of memory or the bounds are not >= 1 (ttl > 0). One holder. */
lm_memory *lm_new(int64_t capacity, double ttl_s, int64_t max_parents);
void lm_retain(lm_memory *m);
void lm_release(lm_memory *m); /* frees it with its last holder */

/* `scope` fetched record (topic, partition, offset) of `trace` at `now` (seconds, the
 * monotonic clock): 1, with the entries evicted for room and found expired on the way;
 * 0 out of memory (nothing changed). */
int lm_remember(lm_memory *m, const uint8_t *scope, size_t scope_len, const uint8_t *trace,
                const uint8_t *topic, size_t topic_len, int32_t partition, int64_t offset,
                double now, int64_t *evicted, int64_t *expired);

/* lm_remember for n records of one scope at `now`, in order, under one lock: how many were
 * remembered (a record out of memory changes nothing, the next are tried), with the entries
 * evicted and expired on the way. */
typedef struct {
    uint8_t trace[LM_TRACE];
    const uint8_t *topic;
    size_t topic_len;
    int32_t partition;
    int64_t offset;
} lm_record;
int64_t lm_remember_many(lm_memory *m, const uint8_t *scope, size_t scope_len,
                         const lm_record *records, size_t n, double now, int64_t *evicted,
                         int64_t *expired);

/* The records `scope` fetched of `trace` that a record it produces at `now` continues:
 * their number (> 0), copied into out (room for max_parents; topics point into the
 * memory's copy of them, held until the caller's lm_parents_free), the entry marked spent;
 * or -1 - reason (LM_UNSEEN, LM_EXPIRED, LM_EVICTED); or -100 out of memory. */
int64_t lm_parents(lm_memory *m, const uint8_t *scope, size_t scope_len, const uint8_t *trace,
                   double now, lm_parent *out);
void lm_parents_free(lm_parent *out, int64_t n); /* the topic copies lm_parents made */

int64_t lm_size(lm_memory *m);
int64_t lm_max_parents(const lm_memory *m);
void lm_count(lm_memory *m, const lm_counts *more); /* add to the counters */
void lm_counters(lm_memory *m, lm_counts *out);

#endif
