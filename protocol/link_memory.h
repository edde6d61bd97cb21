/* The bounded memory of the traced records clients fetched (interceptors/trace_links.py is
 * the Python reference, `FetchedTraces`, and gives the rules): (scope, trace id) -> up to
 * max_parents (topic, partition, offset), least recently fetched evicted first at capacity,
 * an entry not refreshed for ttl_s not believed, and a bounded set of the keys evicted or
 * expired that tells a miss's reason; per (scope, trace) round, the parents it knew of but
 * cannot name, by reason (expired, evicted, over max_parents), kept with a dropped key too.
 * An entry costs about 280 bytes with one parent (its parents are allocated as they come,
 * about 440 with three), a dropped key about 180 (bench/bench_link_memory.py measures them):
 * about 45 MB for the default 100,000 entries when both are full. No Python objects: the
 * record stamper's module (protocol/_stamp.c) owns one for Python, the native relay (proxy/native/) uses the same
 * one from its own thread, so every call takes the memory's mutex. Compiled into both
 * extensions, like stamp_core.c; lm_retain/lm_release count who holds it. */
#ifndef HERALD_LINK_MEMORY_H
#define HERALD_LINK_MEMORY_H

#include <stddef.h>
#include <stdint.h>

typedef struct lm_memory lm_memory;

enum { LM_UNSEEN = 0, LM_EXPIRED = 1, LM_EVICTED = 2 }; /* why a lookup found nothing */
enum { LM_NO_MEMORY = -100 }; /* lm_parents could not allocate */
/* Why a parent known is not named: the index in lost[] (the headers' order). */
enum { LM_LOST_EXPIRED = 0, LM_LOST_EVICTED = 1, LM_LOST_OVERFLOW = 2 };
#define LM_LOST_MAX 4294967295u /* a count saturates there (interceptors/trace_links.py) */
#define LM_TRACE 32 /* a trace id as the traceparent writes it: 32 lowercase hex digits */

typedef struct {
    const uint8_t *topic; /* valid until the next call on the memory (lm_parents copies) */
    size_t topic_len;
    int32_t partition;
    int64_t offset;
} lm_parent;

/* Counters, as the Python members count them (interceptors/trace_links.py and trace_context,
 * whose FETCH_COUNTERS and PRODUCE_COUNTERS name them in this order): records remembered,
 * entries evicted and expired on the way; records linked, parent headers written, traced
 * records with no entry, by reason, and parents declared lost, by reason. The engine adds to
 * them; the Python path counts in its own stats. */
typedef struct {
    uint64_t remembered, evicted, expired, made, parents, missed[3], lost[3];
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
 * their number (> 0), copied into out (room for max_parents; each topic a copy made for
 * the caller, freed by its lm_parents_free), the entry marked spent;
 * or -1 - reason (LM_UNSEEN, LM_EXPIRED, LM_EVICTED); or LM_NO_MEMORY out of memory. In lost, by
 * LM_LOST_*, the parents of the round that record cannot name (all 0: none). */
int64_t lm_parents(lm_memory *m, const uint8_t *scope, size_t scope_len, const uint8_t *trace,
                   double now, lm_parent *out, uint32_t lost[3]);
void lm_parents_free(lm_parent *out, int64_t n); /* the topic copies lm_parents made */

int64_t lm_size(lm_memory *m);
int64_t lm_max_parents(const lm_memory *m);
void lm_count(lm_memory *m, const lm_counts *more); /* add to the counters */
void lm_counters(lm_memory *m, lm_counts *out);

#endif
