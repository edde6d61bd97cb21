/* Stamping Produce requests in the native relay: see relay_stamp.c. */
#ifndef HERALD_RELAY_STAMP_H
#define HERALD_RELAY_STAMP_H

#include <stddef.h>
#include <stdint.h>

#include "contracts/native_relay.h"
#include "link_memory.h"
#include "relay_frames.h"

/* What a column's value is (interceptors.api.NativeColumn.kind): NC_CONST .. NC_TRACEPARENT
 * and NC_KIND_NAMES come from contracts/native_relay.h, in the order Python sends a column's
 * kind as its index. */

/* The Produce versions the stamp walks: from the first whose batches are v2 record batches
 * (headers) up to the newest the engine reads, NR_PRODUCE_MAX_VERSION (relay_frames.h; v13
 * names topics by id: one Herald has not learnt goes to Python). The batch codecs it stamps
 * are relay_codec.h's NK_NATIVE_CODECS. */
#define NC_PRODUCE_MIN_VERSION 3
/* Which stream of random bytes a column draws from (interceptors.ids: trace ids, message ids). */
enum { NC_TRACE_DRAWS = 0, NC_MSG_DRAWS = 1 };

typedef struct {
    int kind;
    uint8_t *key; /* the key's wire form: zigzag length, then the key */
    size_t key_len;
    uint8_t *value; /* NC_CONST: the value, NULL for a null value */
    size_t value_len;
    int sampled, per_batch; /* NC_TRACEPARENT */
    int keeps; /* NC_TRACEPARENT: a record with one valid traceparent keeps it (no value) */
} nc_col;

typedef struct {
    nc_col *cols;
    size_t ncols, cols_cap;
    uint8_t **keys; /* watched header keys, then watched prefixes */
    size_t *key_lens;
    size_t nkeys, nprefixes, keys_cap;
    int64_t max_batch_records, max_request_records;
    int64_t max_batch_bytes; /* < 0: none */
    /* What a compressed batch may decompress to, and all of a request's records (its
     * uncompressed batches counted as they are): limits.max_batch_decompressed_bytes and
     * max_request_decompressed_bytes, or less. 0: compressed batches go to Python. */
    int64_t max_batch_decompressed, max_request_decompressed;
    uint8_t *topic_ids;      /* the topic ids Herald knows (16 bytes each, sorted): v13 */
    size_t ntopic_ids;
    /* Links (trace_context `link`): a record that keeps its own traceparent gets, in the
     * keeper column's place, one header `link_key` (wire form) per parent the memory holds
     * for (link_scope, its trace id), then one header `lost_key` (wire form; none when NULL)
     * per reason with parents of its round the memory cannot name. NULL: none. */
    lm_memory *links;
    uint8_t *link_scope, *link_key, *lost_key;
    size_t link_scope_len, link_key_len, lost_key_len;
    /* A later member looks at linked records in a way the engine does not reproduce
     * (stamp_plan.py `_wire_links`): those go to Python. */
    int link_hits_python;
    /* The Fetch scan with links: the name of each known topic id, in topic_ids' order. */
    uint8_t **id_names;
    size_t *id_name_lens;
    const nc_col *keeper;     /* the column that `keeps`, if any (at most one) */
    const uint8_t *keeper_key; /* its key (in keeper->key, past the length) */
    size_t keeper_key_len;
} nc_plan;

typedef struct {
    uint8_t *buf;
    size_t len, cap;
    size_t limit; /* > 0: a request that would grow past this is not stamped */
} nc_buf;

/* Fills dst with n random bytes of a stream; 0 when it cannot. */
typedef int (*nc_draw_fn)(void *arg, int stream, uint8_t *dst, size_t n);

/* What a stamped request held: batches and records; records that kept their own traceparent
 * (the keeper column appended nothing to them), and batches all of whose records did; the
 * compressed batches re-encoded with their codec (a scan counts those it read). */
typedef struct {
    uint64_t batches, records, kept, kept_batches;
    uint64_t compressed[8]; /* of the batches, those compressed (and changed), by codec id */
    /* Links: kept records given parent headers, the headers, the kept records with none by
     * reason (LM_UNSEEN, LM_EXPIRED, LM_EVICTED), and of the kept_batches those with a
     * record given link headers (changed all the same). */
    uint64_t linked, parents, missed[3], linked_batches;
    /* The Fetch scan with links: traced records remembered, entries evicted, expired. */
    uint64_t remembered, evicted, expired;
    /* Links: parents declared lost by LM_LOST_* (the headers' counts, summed), kept records
     * given link headers (parents or lost), the lost headers written. */
    uint64_t lost[3], marked, lost_headers;
} nc_counts;

void nc_counts_add(nc_counts *into, const nc_counts *more);

enum { NC_OK = 0, NC_PYTHON = 1, NC_NOMEM = 2 };

/* Readers shared with the Fetch scan (relay_fetch.c), bounded by sc_reader: a big-endian
 * int of 2 or 4 bytes; an array count (compact or int32; 0 when negative or unreadable);
 * whether a topic id is one the plan knows. */
#include "relay_trace.h"
#include "stamp_core.h"
int64_t nc_read_int(sc_reader *r, int width);
int nc_read_count(sc_reader *r, int compact, int64_t *count);
int nc_known_id(const nc_plan *plan, const uint8_t *id);
enum { NC_UNKNOWN_ID = -1 }; /* nc_id_index: a topic id the plan does not know */
int64_t nc_id_index(const nc_plan *plan, const uint8_t *id); /* its place, or NC_UNKNOWN_ID */
int nc_ascii(const uint8_t *p, size_t n); /* 1: every byte is ASCII */

/* A record walk's key callback (sc_key_fn): sets `hit` at the first key the plan watches. */
typedef struct {
    const nc_plan *plan;
    int hit;
} nc_watch;
int nc_watched_key(void *arg, const uint8_t *key, size_t len);

/* A plan built from its parts (_relay.c reads its Python form, proxy/native/stamp_plan.py
 * `StampPlan.wire`; the fuzz targets build theirs): nc_plan_init makes room for `ncols`
 * columns and `nkeys` watched keys and prefixes, which are then added in order (keys before
 * prefixes); the limits are set in the struct. Each returns 0 when out of memory or, for a
 * column, when it is not one (*why says why); nc_plan_free frees the plan either way. */
int nc_plan_init(nc_plan *plan, size_t ncols, size_t nkeys);
int nc_plan_column(nc_plan *plan, int kind, const uint8_t *key, size_t key_len,
                   const uint8_t *value, size_t value_len, int sampled, int per_batch,
                   int keeps, const char **why); /* value NULL: a null value */
int nc_plan_key(nc_plan *plan, const uint8_t *key, size_t len, int prefix);
int nc_plan_topic_ids(nc_plan *plan, const uint8_t *ids, size_t n); /* 16 bytes each, sorted */
/* The plan's links: the memory (retained until nc_plan_free), the session's scope and the
 * header key's wire form. */
int nc_plan_links(nc_plan *plan, lm_memory *links, const uint8_t *scope, size_t scope_len,
                  const uint8_t *key_wire, size_t key_len);
/* The lost parents header key's wire form (after nc_plan_links). */
int nc_plan_lost_key(nc_plan *plan, const uint8_t *key_wire, size_t key_len);
/* The names of the plan's topic ids, in their order: each a 2-byte length, then the name. */
int nc_plan_id_names(nc_plan *plan, const uint8_t *blob, size_t len);
void nc_plan_free(nc_plan *plan);

/* Stamp one whole Produce request frame (size prefix included) into out (reset first).
 * NC_OK: out holds the new frame and counts what was stamped; NC_PYTHON: the request is one
 * the engine does not stamp (or not well formed), *why says why; NC_NOMEM. Reads nothing
 * outside frame[0..len). */
int nc_stamp_produce(const uint8_t *frame, size_t len, const nc_plan *plan, nc_draw_fn draw,
                     void *draw_arg, int64_t now_ms, nc_buf *out, nc_counts *counts,
                     const char **why);

#endif
