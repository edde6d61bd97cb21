/* Stamping Produce requests in the native relay, with the Python chain as the reference.
 *
 * For a session whose produce chain the engine can run (proxy/native/stamp_plan.py decides, and
 * gives the plan: the columns each member appends, what they watch, the limits, the topic ids
 * Herald knows), a Produce request of the versions relay_stamp.h names is walked whole (v13
 * names topics by id: one Herald has not learnt goes to Python, which refuses it until it
 * has); every batch must be magic 2,
 * uncompressed, not a control batch, within the limits, with no record carrying a watched
 * header, but for a record that keeps its own trace context: one valid traceparent and only
 * valid tracestates, when the plan's traceparent column `keeps` (relay_trace.c checks them;
 * that column appends nothing to such a record). Then every record gets the columns appended
 * (as protocol/_stamp.c `append` does), each batch its new length and CRC32C, each records
 * field its new length, the frame its new size. Anything else hands the request to Python
 * unchanged (NC_PYTHON). Ids are cut from random bytes drawn per batch in the layout of
 * interceptors/ids.py (24 bytes per trace context, for the records that get one, 12 per
 * message id, the first record's chunk last), so that a test can feed the same draws to both.
 *
 * Safety: every read is bounded by the frame, every length checked before it is used.
 */
#include "relay_stamp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "contracts/features.h"
#include "contracts/native_relay.h"
#include "relay_codec.h"
#include "stamp_core.h"

/* A macro's value as a string literal, for messages that name a constant. */
#define NC_STR_(x) #x
#define NC_STR(x) NC_STR_(x)

#define BATCH_HEADER 61
#define TP_LEN 55
#define UUID_LEN 36
#define UUID_PREFIX 15

static const sc_cut TP_SAMPLED[] = {
    {(const uint8_t *)"00-", 3, 32}, {(const uint8_t *)"-", 1, 16}, {(const uint8_t *)"-01", 3, 0}};
static const sc_cut TP_UNSAMPLED[] = {
    {(const uint8_t *)"00-", 3, 32}, {(const uint8_t *)"-", 1, 16}, {(const uint8_t *)"-00", 3, 0}};
static const sc_cut UUID7_RANDOM[] = {
    {(const uint8_t *)"", 0, 3}, {(const uint8_t *)"-", 1, -1}, {(const uint8_t *)"", 0, 3},
    {(const uint8_t *)"-", 1, 12}};

/* ---- the plan ------------------------------------------------------------------------- */

static uint8_t *copy_bytes(const uint8_t *from, size_t len) {
    uint8_t *out = malloc(len ? len : 1);
    if (out != NULL && len > 0) {
        memcpy(out, from, len);
    }
    return out;
}

void nc_plan_free(nc_plan *plan) {
    for (size_t i = 0; i < plan->ncols; i++) {
        free(plan->cols[i].key);
        free(plan->cols[i].value);
    }
    for (size_t i = 0; i < plan->nkeys + plan->nprefixes; i++) {
        free(plan->keys[i]);
    }
    free(plan->cols);
    free(plan->topic_ids);
    lm_release(plan->links);
    free(plan->link_scope);
    free(plan->link_key);
    free(plan->lost_key);
    if (plan->id_names != NULL) {
        for (size_t i = 0; i < plan->ntopic_ids; i++) {
            free(plan->id_names[i]);
        }
    }
    free(plan->id_names);
    free(plan->id_name_lens);
    free(plan->keys);
    free(plan->key_lens);
    memset(plan, 0, sizeof *plan);
}

int nc_plan_init(nc_plan *plan, size_t ncols, size_t nkeys) {
    memset(plan, 0, sizeof *plan);
    plan->max_batch_bytes = -1;
    plan->cols = calloc(ncols ? ncols : 1, sizeof(nc_col));
    plan->keys = calloc(nkeys ? nkeys : 1, sizeof(uint8_t *));
    plan->key_lens = calloc(nkeys ? nkeys : 1, sizeof(size_t));
    plan->cols_cap = ncols;
    plan->keys_cap = nkeys;
    return plan->cols != NULL && plan->keys != NULL && plan->key_lens != NULL;
}

int nc_plan_topic_ids(nc_plan *plan, const uint8_t *ids, size_t n) {
    free(plan->topic_ids);
    plan->ntopic_ids = 0;
    if ((plan->topic_ids = copy_bytes(ids, n)) == NULL) {
        return 0;
    }
    plan->ntopic_ids = n / 16;
    return 1;
}

int nc_plan_links(nc_plan *plan, lm_memory *links, const uint8_t *scope, size_t scope_len,
                  const uint8_t *key_wire, size_t key_len) {
    if (plan->links != NULL) {
        return 0;
    }
    if ((plan->link_scope = copy_bytes(scope, scope_len)) == NULL ||
        (plan->link_key = copy_bytes(key_wire, key_len)) == NULL) {
        return 0;
    }
    plan->link_scope_len = scope_len;
    plan->link_key_len = key_len;
    lm_retain(links);
    plan->links = links;
    return 1;
}

int nc_plan_lost_key(nc_plan *plan, const uint8_t *key_wire, size_t key_len) {
    if (plan->lost_key != NULL || (plan->lost_key = copy_bytes(key_wire, key_len)) == NULL) {
        return 0;
    }
    plan->lost_key_len = key_len;
    return 1;
}

int nc_plan_id_names(nc_plan *plan, const uint8_t *blob, size_t len) {
    size_t n = plan->ntopic_ids, at = 0;
    if (plan->id_names != NULL) {
        return 0;
    }
    plan->id_names = calloc(n ? n : 1, sizeof(uint8_t *));
    plan->id_name_lens = calloc(n ? n : 1, sizeof(size_t));
    if (plan->id_names == NULL || plan->id_name_lens == NULL) {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (len - at < 2) {
            return 0;
        }
        size_t k = (size_t)blob[at] << 8 | blob[at + 1];
        at += 2;
        if (len - at < k || (plan->id_names[i] = copy_bytes(blob + at, k)) == NULL) {
            return 0;
        }
        plan->id_name_lens[i] = k;
        at += k;
    }
    return at == len;
}

int nc_plan_column(nc_plan *plan, int kind, const uint8_t *key, size_t key_len,
                   const uint8_t *value, size_t value_len, int sampled, int per_batch,
                   int keeps, const char **why) {
    *why = NULL;
    if (plan->ncols == plan->cols_cap || kind < NC_CONST || kind > NC_TRACEPARENT) {
        *why = "a column is (kind 0-4, key bytes, bytes or None, bool, bool, bool)";
        return 0;
    }
    if (keeps && (kind != NC_TRACEPARENT || plan->keeper != NULL)) {
        *why = "one traceparent column at most keeps a record's own";
        return 0;
    }
    size_t at = 0;
    uint64_t z;
    if (!sc_uvarint(key, &at, key_len, &z) || z != 2 * (key_len - at)) {
        *why = "a column key is its zigzag length, then the key";
        return 0;
    }
    nc_col *c = &plan->cols[plan->ncols++];
    c->kind = kind;
    c->sampled = sampled;
    c->per_batch = per_batch;
    c->keeps = keeps;
    if ((c->key = copy_bytes(key, key_len)) == NULL ||
        (value != NULL && (c->value = copy_bytes(value, value_len)) == NULL)) {
        return 0;
    }
    c->key_len = key_len;
    c->value_len = value != NULL ? value_len : 0;
    if (keeps) {
        plan->keeper = c;
        plan->keeper_key = c->key + at;
        plan->keeper_key_len = key_len - at;
    }
    return 1;
}

int nc_plan_key(nc_plan *plan, const uint8_t *key, size_t len, int prefix) {
    size_t i = plan->nkeys + plan->nprefixes;
    if (i == plan->keys_cap || (!prefix && plan->nprefixes > 0)) {
        return 0; /* keys come before prefixes: nc_watched_key tells them apart by index */
    }
    if ((plan->keys[i] = copy_bytes(key, len)) == NULL) {
        return 0;
    }
    plan->key_lens[i] = len;
    if (prefix) {
        plan->nprefixes++;
    } else {
        plan->nkeys++;
    }
    return 1;
}

/* ---- reading the request -------------------------------------------------------------- */

typedef sc_reader rd_t;
#define rd_uvarint sc_read_uvarint
#define rd_skip sc_read_skip
#define rd_tagged sc_read_tagged
#define rd_int nc_read_int

int64_t nc_read_int(sc_reader *r, int width) {
    if (r->bad || (size_t)width > r->end - r->pos) {
        r->bad = 1;
        return 0;
    }
    uint32_t v = 0;
    for (int i = 0; i < width; i++) {
        v = (v << 8) | r->p[r->pos + (size_t)i];
    }
    r->pos += (size_t)width;
    return width == 2 ? (int64_t)(int16_t)v : (int64_t)(int32_t)v;
}

int nc_ascii(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (p[i] >= 0x80) {
            return 0;
        }
    }
    return 1;
}

/* What rd_name answers besides a length: a null name, or one that cannot be taken. */
enum { NAME_NULL = -1, NAME_BAD = -2 };

/* A name (topic name, client id) the Python codec reads as the same text: ASCII only.
 * Returns its length, NAME_NULL or NAME_BAD. */
static int64_t rd_name(rd_t *r, int compact, const uint8_t **at) {
    int64_t n;
    if (compact) {
        n = sc_read_compact(r);
    } else {
        n = rd_int(r, 2);
    }
    if (r->bad || n < -1) {
        return NAME_BAD;
    }
    if (n < 0) {
        return NAME_NULL;
    }
    *at = r->p + r->pos;
    rd_skip(r, (uint64_t)n);
    if (r->bad || !nc_ascii(*at, (size_t)n)) {
        return NAME_BAD;
    }
    return n;
}

int nc_known_id(const nc_plan *plan, const uint8_t *id) {
    return nc_id_index(plan, id) != NC_UNKNOWN_ID;
}

int64_t nc_id_index(const nc_plan *plan, const uint8_t *id) {
    size_t lo = 0, hi = plan->ntopic_ids;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = memcmp(plan->topic_ids + 16 * mid, id, 16);
        if (c == 0) {
            return (int64_t)mid;
        }
        if (c < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return NC_UNKNOWN_ID;
}

int nc_read_count(sc_reader *r, int compact, int64_t *count) {
    *count = compact ? sc_read_compact(r) : rd_int(r, 4);
    return !r->bad && *count >= 0;
}

/* ---- output --------------------------------------------------------------------------- */

static int reserve(nc_buf *b, size_t more) {
    if (b->cap - b->len >= more) {
        return 1;
    }
    size_t cap = b->cap ? b->cap : 4096;
    while (cap - b->len < more) {
        cap *= 2;
    }
    uint8_t *grown = realloc(b->buf, cap);
    if (grown == NULL) {
        return 0;
    }
    b->buf = grown;
    b->cap = cap;
    return 1;
}

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t be32u(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* ---- one request ---------------------------------------------------------------------- */

/* What every record gets appended: `tail` (the same bytes for every record of the request,
 * but for the per-record ids, written into their slots per record or per batch). */
typedef struct {
    uint8_t *tail;
    size_t len;
    size_t *slot; /* per column: offset of its id in tail (per-record columns) */
    size_t keep_from, keep_to; /* the keeper column's bytes in tail, which kept records skip */
    uint8_t *draws[2];
    size_t draws_cap[2];
    /* Compressed batches: one decompressed (its header, then its records), its stamped form,
     * the records field being written; what is left of the request's decompression limit. */
    nk_buf plain, stamped, field;
    int64_t left;
    /* Links: per record that keeps its traceparent, in order, the link headers made for it
     * (`count` of them, parents then lost ones, `len` bytes at `from` in lbuf), looked up once,
     * when
     * its batch is first checked (`lookup`), then read again from `size_at`; `batch_at`: the
     * first of the batch checked last, which write_batch then writes. */
    struct link_row {
        size_t from, len;
        uint64_t count;
    } *rows;
    size_t nrows, rows_cap, size_at, batch_at;
    int batch_linked; /* the batch checked last has a record given link headers */
    nk_buf lbuf;
    lm_parent *found;
    int lookup;
    double now;
    uint64_t linked, parents, missed[3], lost[3], marked, lost_headers;
} tail_t;

static int build_tail(tail_t *t, const nc_plan *plan, const uint8_t *client_id,
                      int64_t client_len, int64_t now_ms) {
    char time_text[24];
    int time_len = snprintf(time_text, sizeof time_text, "%lld", (long long)now_ms);
    uint8_t prefix[UUID_PREFIX];
    char hex[13];
    snprintf(hex, sizeof hex, "%012llx", (unsigned long long)now_ms & ((1ULL << 48) - 1));
    memcpy(prefix, hex, 8);
    prefix[8] = '-';
    memcpy(prefix + 9, hex + 8, 4);
    prefix[13] = '-';
    prefix[14] = '7';
    size_t size = 0;
    for (size_t i = 0; i < plan->ncols; i++) {
        size += plan->cols[i].key_len + 10 + plan->cols[i].value_len +
                (size_t)(client_len > 0 ? client_len : 0) + (size_t)time_len + UUID_LEN + TP_LEN;
    }
    t->tail = malloc(size ? size : 1);
    t->slot = calloc(plan->ncols ? plan->ncols : 1, sizeof(size_t));
    if (t->tail == NULL || t->slot == NULL) {
        return 0;
    }
    uint8_t *w = t->tail;
    for (size_t i = 0; i < plan->ncols; i++) {
        const nc_col *c = &plan->cols[i];
        if (c == plan->keeper) {
            t->keep_from = (size_t)(w - t->tail);
        }
        memcpy(w, c->key, c->key_len);
        w += c->key_len;
        const uint8_t *value = NULL;
        int64_t n = -1;
        switch (c->kind) {
        case NC_CONST:
            value = c->value;
            n = value != NULL ? (int64_t)c->value_len : -1;
            break;
        case NC_CLIENT_ID:
            value = client_id;
            n = client_len;
            break;
        case NC_TIME_MS_TEXT:
            value = (const uint8_t *)time_text;
            n = time_len;
            break;
        case NC_UUID7:
            w = sc_put_varint(w, sc_zigzag(UUID_LEN));
            memcpy(w, prefix, UUID_PREFIX);
            t->slot[i] = (size_t)(w - t->tail) + UUID_PREFIX;
            memset(w + UUID_PREFIX, '0', UUID_LEN - UUID_PREFIX);
            w += UUID_LEN;
            continue;
        case NC_TRACEPARENT:
            w = sc_put_varint(w, sc_zigzag(TP_LEN));
            t->slot[i] = (size_t)(w - t->tail);
            memset(w, '0', TP_LEN);
            w += TP_LEN;
            if (c == plan->keeper) {
                t->keep_to = (size_t)(w - t->tail);
            }
            continue;
        }
        if (n < 0) {
            *w++ = 1; /* zigzag(-1): a null value */
        } else {
            w = sc_put_varint(w, sc_zigzag(n));
            memcpy(w, value, (size_t)n);
            w += n;
        }
    }
    t->len = (size_t)(w - t->tail);
    return 1;
}

static void free_tail(tail_t *t) {
    free(t->tail);
    free(t->slot);
    free(t->draws[0]);
    free(t->draws[1]);
    nk_buf_free(&t->plain);
    nk_buf_free(&t->stamped);
    nk_buf_free(&t->field);
    nk_buf_free(&t->lbuf);
    free(t->rows);
    free(t->found);
}

/* One link header into lbuf: `key_wire`, then the value `a` followed by `b`. 0: no memory. */
static int put_link(tail_t *t, const uint8_t *key_wire, size_t key_len, const uint8_t *a,
                    size_t a_len, const uint8_t *b, size_t b_len) {
    size_t value = a_len + b_len;
    if (!nk_reserve(&t->lbuf, key_len + 10 + value, SIZE_MAX)) {
        return 0;
    }
    uint8_t *w = t->lbuf.buf + t->lbuf.len;
    memcpy(w, key_wire, key_len);
    w = sc_put_varint(w + key_len, sc_zigzag((int64_t)value));
    memcpy(w, a, a_len);
    memcpy(w + a_len, b, b_len);
    t->lbuf.len = (size_t)(w + value - t->lbuf.buf);
    return 1;
}

/* The row of the next record that keeps its traceparent `tp` (55 bytes, valid): looked up in
 * the memory, or the one looked up before. NULL out of memory. */
static const struct link_row *link_row(tail_t *t, const nc_plan *plan, const uint8_t *tp) {
    if (!t->lookup) {
        return t->size_at < t->nrows ? &t->rows[t->size_at++] : NULL;
    }
    if (t->nrows == t->rows_cap) {
        size_t cap = t->rows_cap ? 2 * t->rows_cap : 64;
        struct link_row *grown = realloc(t->rows, cap * sizeof *grown);
        if (grown == NULL) {
            return NULL;
        }
        t->rows = grown;
        t->rows_cap = cap;
    }
    if (t->found == NULL &&
        (t->found = malloc((size_t)lm_max_parents(plan->links) * sizeof(lm_parent))) == NULL) {
        return NULL;
    }
    uint32_t lost[3];
    int64_t n = lm_parents(plan->links, plan->link_scope, plan->link_scope_len, tp + 3, t->now,
                           t->found, lost);
    if (n == LM_NO_MEMORY) {
        return NULL;
    }
    struct link_row *row = &t->rows[t->nrows];
    *row = (struct link_row){t->lbuf.len, 0, 0};
    if (n < 0) {
        t->missed[-1 - n]++;
    } else {
        for (int64_t i = 0; i < n; i++) {
            const lm_parent *p = &t->found[i];
            char nums[48];
            int k = snprintf(nums, sizeof nums, ":%ld:%lld", (long)p->partition,
                             (long long)p->offset);
            if (!put_link(t, plan->link_key, plan->link_key_len, p->topic, p->topic_len,
                          (const uint8_t *)nums, (size_t)k)) {
                lm_parents_free(t->found, n);
                return NULL;
            }
        }
        lm_parents_free(t->found, n);
        t->linked++;
        t->parents += (uint64_t)n;
        row->count = (uint64_t)n;
    }
    /* The round's parents it cannot name, as trace_context declares them: one header per
     * reason, after the parents (interceptors/trace_links.py `lost_values`). */
    static const char *const LOST_NAMES[] = {"expired", "evicted", "overflow"};
    for (int why = 0; why < 3 && plan->lost_key != NULL; why++) {
        if (lost[why] == 0) {
            continue;
        }
        char count[16];
        int k = snprintf(count, sizeof count, ":%lu", (unsigned long)lost[why]);
        if (!put_link(t, plan->lost_key, plan->lost_key_len, (const uint8_t *)LOST_NAMES[why],
                      strlen(LOST_NAMES[why]), (const uint8_t *)count, (size_t)k)) {
            return NULL;
        }
        t->lost[why] += lost[why];
        t->lost_headers++;
        row->count++;
    }
    row->len = t->lbuf.len - row->from;
    t->marked += row->count > 0;
    t->nrows++;
    return row;
}

int nc_watched_key(void *arg, const uint8_t *key, size_t len) {
    nc_watch *w = arg;
    const nc_plan *plan = w->plan;
    for (size_t i = 0; i < plan->nkeys + plan->nprefixes; i++) {
        size_t n = plan->key_lens[i];
        if ((i < plan->nkeys ? n == len : n <= len) && memcmp(plan->keys[i], key, n) == 0) {
            w->hit = 1;
            return 1;
        }
    }
    return 0;
}

/* What a record's headers make of it: stamped like any (R_PLAIN), stamped but for the keeper
 * column, as it carries one valid traceparent and only valid tracestates (R_KEPT), or one
 * for Python, which looks at records carrying a watched header (R_PYTHON). */
enum { R_PLAIN, R_KEPT, R_PYTHON };

typedef struct {
    const nc_plan *plan;
    int other;       /* a watched key the keeper does not keep */
    uint64_t tp, ts; /* the keeper's key and tracestate headers, with a keeper */
} rec_keys;

static int is_key(const uint8_t *key, size_t len, const uint8_t *want, size_t want_len) {
    return len == want_len && memcmp(key, want, len) == 0;
}

/* The record walk's key callback (sc_key_fn). */
static int record_key(void *arg, const uint8_t *key, size_t len) {
    rec_keys *k = arg;
    const nc_plan *plan = k->plan;
    if (plan->keeper != NULL) {
        if (is_key(key, len, plan->keeper_key, plan->keeper_key_len)) {
            k->tp++;
            return 0;
        }
        if (is_key(key, len, (const uint8_t *)HEADER_TRACESTATE, HEADER_TRACESTATE_LEN)) {
            k->ts++;
            return 0;
        }
    }
    nc_watch w = {plan, 0};
    k->other = nc_watched_key(&w, key, len);
    return k->other;
}

/* The class of a record walked (sc_walk_record, which checked its headers) with record_key. */
static int classify(const uint8_t *b, const sc_rec *r, const rec_keys *k,
                    const uint8_t **tp_value) {
    if (!(k->other | k->tp | k->ts)) {
        return R_PLAIN;
    }
    if (k->other || k->tp != 1) {
        return R_PYTHON; /* tracestate alone, several traceparents, other watched keys */
    }
    const nc_plan *plan = k->plan;
    size_t p = r->first;
    for (uint64_t h = 0; h < r->count; h++) {
        uint64_t z;
        sc_uvarint(b, &p, r->end, &z);
        const uint8_t *key = b + p;
        size_t key_len = (size_t)(z >> 1);
        p += key_len;
        sc_uvarint(b, &p, r->end, &z);
        int64_t n = z == 1 ? -1 : (int64_t)(z >> 1);
        const uint8_t *value = n < 0 ? NULL : b + p;
        p += n < 0 ? 0 : (size_t)n;
        if (is_key(key, key_len, plan->keeper_key, plan->keeper_key_len)) {
            if (!nt_valid_traceparent(value, n)) {
                return R_PYTHON;
            }
            *tp_value = value;
        } else if (is_key(key, key_len, (const uint8_t *)HEADER_TRACESTATE,
                          HEADER_TRACESTATE_LEN)) {
            if (!nt_valid_tracestate(value, n)) {
                return R_PYTHON; /* Python counts it (tracestate_invalid) */
            }
        }
    }
    return R_KEPT;
}

/* Walk one record (checked before) at *pos and classify it. */
static int walk_class(const uint8_t *b, size_t *pos, size_t size, const nc_plan *plan,
                      sc_rec *r) {
    rec_keys k = {plan, 0, 0, 0};
    const uint8_t *tp;
    sc_walk_record(b, pos, size, r, record_key, &k);
    return classify(b, r, &k, &tp);
}

/* Check one batch at b (at most `room` bytes to the end of its records field): its size and
 * its size once stamped, how many of its records keep their own traceparent, whether it
 * stays as it is (*same: nothing is appended to any of its records), or a reason it is not
 * ours. Its CRC32C is checked first (`check_crc`; the second pass over a checked batch skips
 * it), as the Python path checks it before it reads a record: a corrupted batch is never
 * stamped and sealed with a fresh CRC, the broker refuses it as it came. */
static const char *check_batch(const uint8_t *b, size_t room, const nc_plan *plan,
                               tail_t *t, int check_crc, int plain, size_t *size,
                               size_t *new_size, int64_t *records, int64_t *kept, int *same) {
    if (room < BATCH_HEADER) {
        return "a partial record batch";
    }
    int64_t length = (int32_t)be32u(b + 8);
    if (length < BATCH_HEADER - 12 || (uint64_t)length + 12 > room) {
        return "a batch length out of range";
    }
    *size = (size_t)length + 12;
    if (b[16] != 2) {
        return "a batch of magic 0 or 1";
    }
    unsigned attributes = (unsigned)b[21] << 8 | b[22];
    if ((attributes & 7) && !plain) {
        return "a compressed batch";
    }
    if (attributes & 0x20) {
        return "a control batch";
    }
    if (check_crc && sc_crc32c(0, b + 21, *size - 21) != be32u(b + 17)) {
        return "a record batch CRC mismatch";
    }
    int64_t count = (int32_t)be32u(b + 57);
    if (count <= 0) {
        return "an empty batch";
    }
    if (count > plan->max_batch_records) {
        return "a batch over limits.max_batch_records";
    }
    size_t pos = BATCH_HEADER, total = BATCH_HEADER;
    int64_t n = 0;
    int linked = 0;
    *kept = 0;
    t->batch_at = t->lookup ? t->nrows : t->size_at;
    while (pos < *size) {
        sc_rec r;
        rec_keys k = {plan, 0, 0, 0};
        if (n >= count || sc_walk_record(b, &pos, *size, &r, record_key, &k) != NULL) {
            return "malformed records";
        }
        const uint8_t *tp = NULL;
        int cls = classify(b, &r, &k, &tp);
        if (cls == R_PYTHON) {
            return "a record with a watched header";
        }
        size_t added = plan->ncols, tail_len = t->len;
        if (cls == R_KEPT) {
            added--;
            tail_len -= t->keep_to - t->keep_from;
            ++*kept;
            if (plan->links != NULL) {
                const struct link_row *row = link_row(t, plan, tp);
                if (row == NULL) {
                    return "no memory for the links";
                }
                if (row->count > 0 && plan->link_hits_python) {
                    return "a linked record a later member looks at";
                }
                added += row->count;
                tail_len += row->len;
                linked |= row->count > 0;
            }
        }
        size_t rec = (r.hpos - r.body) + sc_varint_size(sc_zigzag((int64_t)(r.count + added))) +
                     (r.end - r.first) + tail_len;
        total += sc_varint_size(sc_zigzag((int64_t)rec)) + rec;
        n++;
    }
    if (n != count) {
        return "a batch holding fewer records than it declares";
    }
    /* Every record keeps its own traceparent and the keeper is the only column: Python
     * leaves such a batch byte for byte as it came (varints longer than they need be
     * included), and so does the engine. */
    *same = *kept == count && t->len == t->keep_to - t->keep_from && !linked;
    t->batch_linked = linked;
    if (*same) {
        total = *size;
    }
    if (total > INT32_MAX) {
        return "a batch too large once stamped";
    }
    if (!plain && plan->max_batch_bytes >= 0 && (int64_t)total > plan->max_batch_bytes &&
        (int64_t)*size <= plan->max_batch_bytes) {
        return "a batch over the topic's size limit once stamped";
    }
    *new_size = total;
    *records = count;
    return NULL;
}

/* How many bytes of random draws column c takes for a batch of `count` records, `fresh` of
 * which get its value (all but those that keep their own traceparent, for the keeper). */
static size_t draw_size(const nc_col *c, int64_t count, int64_t fresh) {
    if (c->kind == NC_UUID7) {
        return 12 * (size_t)count;
    }
    if (c->kind != NC_TRACEPARENT) {
        return 0;
    }
    int64_t n = c->keeps ? fresh : count;
    return c->per_batch ? (n > 0 ? 24 : 0) : 24 * (size_t)n;
}

/* Fill the per-batch ids into t->draws (NC_OK, or NC_PYTHON / NC_NOMEM). */
static int draw_batch(tail_t *t, const nc_plan *plan, int64_t count, int64_t fresh,
                      nc_draw_fn draw, void *arg, const char **why) {
    size_t need[2] = {0, 0};
    for (size_t i = 0; i < plan->ncols; i++) {
        const nc_col *c = &plan->cols[i];
        need[c->kind == NC_UUID7 ? NC_MSG_DRAWS : NC_TRACE_DRAWS] += draw_size(c, count, fresh);
    }
    for (int s = 0; s < 2; s++) {
        if (need[s] > t->draws_cap[s]) {
            uint8_t *grown = realloc(t->draws[s], need[s]);
            if (grown == NULL) {
                return NC_NOMEM;
            }
            t->draws[s] = grown;
            t->draws_cap[s] = need[s];
        }
    }
    /* Column by column, as the Python chain draws: each column's draw is one call (a column
     * with nothing to make, a batch whose records all keep their traceparent, draws nothing,
     * as Python makes a batch's shared context on first use). */
    size_t at[2] = {0, 0};
    for (size_t i = 0; i < plan->ncols; i++) {
        const nc_col *c = &plan->cols[i];
        size_t n = draw_size(c, count, fresh);
        if (n == 0) {
            continue;
        }
        int s = c->kind == NC_UUID7 ? NC_MSG_DRAWS : NC_TRACE_DRAWS;
        if (!draw(arg, s, t->draws[s] + at[s], n)) {
            *why = "no random bytes left";
            return NC_PYTHON;
        }
        at[s] += n;
    }
    return NC_OK;
}

/* Write the ids of record `index` of `count` into the tail's slots; the record is number
 * `nth` of the batch's `fresh` records that get the keeper's value, or keeps its own (`kept`).
 * Python makes each value in record order, the first record's from the first draw, which
 * the engine's one draw per batch holds last. */
static void fill_ids(tail_t *t, const nc_plan *plan, int64_t count, int64_t index,
                     int64_t fresh, int64_t nth, int kept) {
    size_t at[2] = {0, 0};
    for (size_t i = 0; i < plan->ncols; i++) {
        const nc_col *c = &plan->cols[i];
        size_t n = draw_size(c, count, fresh);
        if (c->kind == NC_TRACEPARENT) {
            const sc_cut *spec = c->sampled ? TP_SAMPLED : TP_UNSAMPLED;
            int64_t of = c->keeps ? fresh : count, k = c->keeps ? nth : index;
            if (!(c->keeps && kept) && (!c->per_batch || k == 0)) {
                size_t chunk = c->per_batch ? 0 : 24 * (size_t)(of - 1 - k);
                sc_hex_cut(t->tail + t->slot[i], t->draws[0] + at[0] + chunk, spec, 3);
            }
            at[0] += n;
        } else if (c->kind == NC_UUID7) {
            sc_hex_cut(t->tail + t->slot[i],
                       t->draws[1] + at[1] + 12 * (size_t)(count - 1 - index), UUID7_RANDOM, 4);
            at[1] += n;
        }
    }
}

/* Write the stamped batch (checked by check_batch; `kept` of its records keep their own
 * traceparent) at out; with `seal`, its CRC32C (a batch about to be compressed has none). */
static void write_batch(const uint8_t *b, size_t size, size_t new_size, int64_t count,
                        int64_t kept, const nc_plan *plan, tail_t *t, uint8_t *out,
                        int seal) {
    memcpy(out, b, BATCH_HEADER);
    put_be32(out + 8, (uint32_t)(new_size - 12));
    uint8_t *w = out + BATCH_HEADER;
    size_t pos = BATCH_HEADER;
    int64_t nth = 0;
    size_t at = t->batch_at; /* the batch's link rows, one per record that keeps */
    for (int64_t i = 0; i < count; i++) {
        sc_rec r;
        int keeps = 0;
        if (kept) { /* only then are records walked for their keys again */
            keeps = walk_class(b, &pos, size, plan, &r) == R_KEPT;
        } else {
            sc_walk_record(b, &pos, size, &r, NULL, NULL); /* checked before */
        }
        fill_ids(t, plan, count, i, count - kept, nth, keeps);
        nth += !keeps;
        size_t skip = keeps ? t->keep_to - t->keep_from : 0;
        const struct link_row *row = keeps && plan->links != NULL ? &t->rows[at++] : NULL;
        uint64_t parents = row != NULL ? row->count : 0;
        size_t link_len = row != NULL ? row->len : 0;
        uint64_t headers =
            sc_zigzag((int64_t)(r.count + plan->ncols - (keeps ? 1 : 0) + parents));
        size_t rec = (r.hpos - r.body) + sc_varint_size(headers) + (r.end - r.first) + t->len -
                     skip + link_len;
        w = sc_put_varint(w, sc_zigzag((int64_t)rec));
        memcpy(w, b + r.body, r.hpos - r.body);
        w += r.hpos - r.body;
        w = sc_put_varint(w, headers);
        memcpy(w, b + r.first, r.end - r.first);
        w += r.end - r.first;
        if (keeps) {
            memcpy(w, t->tail, t->keep_from);
            w += t->keep_from;
            if (link_len) { /* in the keeper's place, as trace_context adds them */
                memcpy(w, t->lbuf.buf + row->from, link_len);
                w += link_len;
            }
            memcpy(w, t->tail + t->keep_to, t->len - t->keep_to);
            w += t->len - t->keep_to;
        } else {
            memcpy(w, t->tail, t->len);
            w += t->len;
        }
    }
    if (seal) {
        put_be32(out + 17, sc_crc32c(0, out + 21, new_size - 21));
    }
}

/* A batch's size as its header declares it, when the field holds that much: 0 otherwise. */
static size_t batch_size(const uint8_t *b, size_t room) {
    if (room < BATCH_HEADER) {
        return 0;
    }
    int64_t length = (int32_t)be32u(b + 8);
    if (length < BATCH_HEADER - 12 || (uint64_t)length + 12 > room) {
        return 0;
    }
    return (size_t)length + 12;
}

/* Count a batch that passed its checks; NC_PYTHON past the request's record limit. */
static int count_batch(const nc_plan *plan, const tail_t *t, nc_counts *counts,
                       int64_t records, int64_t kept, const char **why) {
    counts->batches++;
    counts->records += (uint64_t)records;
    counts->kept += (uint64_t)kept;
    counts->kept_batches += kept == records;
    counts->linked_batches += kept == records && t->batch_linked;
    if ((int64_t)counts->records > plan->max_request_records) {
        *why = "a request over limits.max_request_records";
        return NC_PYTHON;
    }
    return NC_OK;
}

/* A compressed batch at b (at most `room` bytes to the end of its field): decompressed
 * within the limits, checked and stamped as an uncompressed one, recompressed with its own
 * codec and sealed (attributes and every other header field as they came, a new length and
 * CRC32C), appended to out; *size is its size as it came. Python does the same (protocol/
 * records.py `to_bytes`), and what it refuses or must fit to a topic's limit goes to it. */
static int stamp_compressed(const uint8_t *b, size_t room, const nc_plan *plan, tail_t *t,
                            nc_draw_fn draw, void *arg, nk_buf *out, size_t *size,
                            nc_counts *counts, int *changed, const char **why) {
    if ((*size = batch_size(b, room)) == 0) {
        *why = "a batch length out of range";
        return NC_PYTHON;
    }
    unsigned attributes = (unsigned)b[21] << 8 | b[22];
    int codec = (int)(attributes & 7);
    if (b[16] != 2) {
        *why = "a batch of magic 0 or 1";
        return NC_PYTHON;
    }
    if (!(NK_NATIVE_CODECS & (1u << codec))) {
        *why = "a compression codec the engine does not read";
        return NC_PYTHON;
    }
    if (attributes & 0x20) {
        *why = "a control batch";
        return NC_PYTHON;
    }
    /* The CRC first, as Python checks it before it decompresses anything. */
    if (sc_crc32c(0, b + 21, *size - 21) != be32u(b + 17)) {
        *why = "a record batch CRC mismatch";
        return NC_PYTHON;
    }
    int64_t count = (int32_t)be32u(b + 57);
    if (count <= 0) {
        *why = "an empty batch";
        return NC_PYTHON;
    }
    if (count > plan->max_batch_records) {
        *why = "a batch over limits.max_batch_records";
        return NC_PYTHON;
    }
    int64_t limit = plan->max_batch_decompressed < t->left ? plan->max_batch_decompressed
                                                           : t->left;
    if (limit <= 0) {
        *why = "a compressed batch over the decompression limits";
        return NC_PYTHON;
    }
    nk_buf *plain = &t->plain;
    plain->len = 0;
    if (!nk_reserve(plain, BATCH_HEADER, SIZE_MAX)) {
        return NC_NOMEM;
    }
    memcpy(plain->buf, b, BATCH_HEADER);
    plain->len = BATCH_HEADER;
    const char *no;
    int r = nk_decompress(codec, b + BATCH_HEADER, *size - BATCH_HEADER, (size_t)limit, plain,
                          &no);
    if (r == NK_NOMEM) {
        return NC_NOMEM;
    }
    if (r == NK_TOO_LARGE) {
        *why = "a compressed batch over the decompression limits";
        return NC_PYTHON;
    }
    if (r != NK_OK) {
        *why = no;
        return NC_PYTHON;
    }
    t->left -= (int64_t)(plain->len - BATCH_HEADER);
    if (plain->len - 12 > INT32_MAX) {
        *why = "a batch too large once decompressed";
        return NC_PYTHON;
    }
    put_be32(plain->buf + 8, (uint32_t)(plain->len - 12));
    size_t plain_size, new_size;
    int64_t records, kept;
    int same;
    no = check_batch(plain->buf, plain->len, plan, t, 0, 1, &plain_size, &new_size, &records,
                     &kept, &same);
    if (no != NULL) {
        *why = no;
        return NC_PYTHON;
    }
    /* The stamped records are held too, before they are compressed: to the same bound (tiny
     * records grow manyfold; Python stamps such a batch in a worker thread). */
    if ((int64_t)new_size - BATCH_HEADER > plan->max_batch_decompressed) {
        *why = "a compressed batch over the decompression limits once stamped";
        return NC_PYTHON;
    }
    if (count_batch(plan, t, counts, records, kept, why) != NC_OK) {
        return NC_PYTHON;
    }
    size_t at = out->len;
    if (same) { /* nothing appended: it stays as it came, as in Python */
        if (!nk_reserve(out, *size, SIZE_MAX)) {
            return NC_NOMEM;
        }
        memcpy(out->buf + out->len, b, *size);
        out->len += *size;
        return NC_OK;
    }
    *changed = 1;
    r = draw_batch(t, plan, records, records - kept, draw, arg, why);
    if (r != NC_OK) {
        return r;
    }
    nk_buf *stamped = &t->stamped;
    stamped->len = 0;
    if (!nk_reserve(stamped, new_size, SIZE_MAX)) {
        return NC_NOMEM;
    }
    write_batch(plain->buf, plain_size, new_size, records, kept, plan, t, stamped->buf, 0);
    if (!nk_reserve(out, BATCH_HEADER, SIZE_MAX)) {
        return NC_NOMEM;
    }
    memcpy(out->buf + at, b, BATCH_HEADER);
    out->len += BATCH_HEADER;
    r = nk_compress(codec, stamped->buf + BATCH_HEADER, new_size - BATCH_HEADER, out, &no);
    if (r != NK_OK) {
        *why = no;
        return r == NK_NOMEM ? NC_NOMEM : NC_PYTHON;
    }
    size_t sealed = out->len - at;
    if (sealed - 12 > INT32_MAX) {
        *why = "a batch too large once stamped";
        return NC_PYTHON;
    }
    /* The rule of interceptors/batch_fit.py: a batch that fitted the limit and no longer
     * does is Python's to re-encode with a stronger codec, or refuse. */
    if (plan->max_batch_bytes >= 0 && (int64_t)sealed > plan->max_batch_bytes &&
        (int64_t)*size <= plan->max_batch_bytes) {
        *why = "a batch over the topic's size limit once stamped";
        return NC_PYTHON;
    }
    put_be32(out->buf + at + 8, (uint32_t)(sealed - 12));
    put_be32(out->buf + at + 17, sc_crc32c(0, out->buf + at + 21, sealed - 21));
    counts->compressed[codec]++;
    return NC_OK;
}

/* Write a records field's length, then its `total` bytes from `from` (NULL: written by the
 * caller afterwards), to out. */
static int put_field(nc_buf *out, int compact, size_t total, const uint8_t *from,
                     const char **why) {
    if (total > INT32_MAX - 1 || (out->limit > 0 && out->len + 5 + total > out->limit)) {
        *why = "records too large once stamped";
        return NC_PYTHON;
    }
    if (!reserve(out, 5 + total)) {
        return NC_NOMEM;
    }
    if (compact) {
        out->len = (size_t)(sc_put_varint(out->buf + out->len, (uint64_t)total + 1) - out->buf);
    } else {
        put_be32(out->buf + out->len, (uint32_t)total);
        out->len += 4;
    }
    if (from != NULL) {
        memcpy(out->buf + out->len, from, total);
        out->len += total;
    }
    return NC_OK;
}

/* A records field holding a compressed batch: every batch stamped in order into t->field
 * (a compressed batch's stamped size is known only once compressed), then the field. */
static int stamp_field_in_order(const uint8_t *f, size_t len, int compact,
                                const nc_plan *plan, tail_t *t, nc_draw_fn draw, void *arg,
                                nc_buf *out, nc_counts *counts, int *changed,
                                const char **why) {
    nk_buf *field = &t->field;
    field->len = 0;
    size_t pos = 0;
    while (pos < len) {
        const uint8_t *b = f + pos;
        size_t size = batch_size(b, len - pos);
        if (size > 0 && (b[22] & 7)) {
            int r = stamp_compressed(b, len - pos, plan, t, draw, arg, field, &size, counts,
                                     changed, why);
            if (r != NC_OK) {
                return r;
            }
            if (out->limit > 0 && out->len + 5 + field->len > out->limit) {
                *why = "records too large once stamped"; /* known now: stop here */
                return NC_PYTHON;
            }
            pos += size;
            continue;
        }
        size_t new_size;
        int64_t records, kept;
        int same;
        const char *no = check_batch(b, len - pos, plan, t, 1, 0, &size, &new_size, &records,
                                     &kept, &same);
        if (no != NULL) {
            *why = no;
            return NC_PYTHON;
        }
        t->left -= (int64_t)size;
        if (count_batch(plan, t, counts, records, kept, why) != NC_OK) {
            return NC_PYTHON;
        }
        if (!nk_reserve(field, new_size, SIZE_MAX)) {
            return NC_NOMEM;
        }
        if (same) {
            memcpy(field->buf + field->len, b, size);
        } else {
            *changed = 1;
            int r = draw_batch(t, plan, records, records - kept, draw, arg, why);
            if (r != NC_OK) {
                return r;
            }
            write_batch(b, size, new_size, records, kept, plan, t, field->buf + field->len, 1);
        }
        field->len += new_size;
        pos += size;
    }
    return put_field(out, compact, field->len, field->buf, why);
}

/* One records field of `len` bytes at f: its stamped form appended to out; *changed set
 * when a batch of it changes. */
static int stamp_records(const uint8_t *f, size_t len, int compact, const nc_plan *plan,
                         tail_t *t, nc_draw_fn draw, void *arg, nc_buf *out,
                         nc_counts *counts, int *changed, const char **why) {
    for (size_t pos = 0, size; (size = batch_size(f + pos, len - pos)) > 0; pos += size) {
        if (f[pos + 22] & 7) {
            return stamp_field_in_order(f, len, compact, plan, t, draw, arg, out, counts,
                                        changed, why);
        }
    }
    /* Uncompressed batches only: first check every batch and size the new field, then
     * write it straight into out (the links looked up in the first pass). */
    size_t pos = 0, total = 0, rows = t->nrows;
    while (pos < len) {
        size_t size, new_size;
        int64_t records, kept;
        int same;
        /* *why is set only when the request goes to Python: a batch that passes must not
         * clear the reason the caller set for what it still has to read. */
        const char *no = check_batch(f + pos, len - pos, plan, t, 1, 0, &size, &new_size,
                                     &records, &kept, &same);
        if (no != NULL) {
            *why = no;
            return NC_PYTHON;
        }
        *changed |= !same;
        t->left -= (int64_t)size;
        if (count_batch(plan, t, counts, records, kept, why) != NC_OK) {
            return NC_PYTHON;
        }
        pos += size;
        total += new_size;
    }
    int r = put_field(out, compact, total, NULL, why);
    if (r != NC_OK) {
        return r;
    }
    pos = 0;
    t->lookup = 0;
    t->size_at = rows;
    while (pos < len) {
        size_t size, new_size;
        int64_t records, kept;
        int same;
        check_batch(f + pos, len - pos, plan, t, 0, 0, &size, &new_size, &records, &kept,
                    &same);
        if (same) { /* it draws nothing: Python makes no value for it either */
            memcpy(out->buf + out->len, f + pos, size);
        } else {
            r = draw_batch(t, plan, records, records - kept, draw, arg, why);
            if (r != NC_OK) {
                return r;
            }
            write_batch(f + pos, size, new_size, records, kept, plan, t, out->buf + out->len,
                        1);
        }
        out->len += new_size;
        pos += size;
    }
    t->lookup = 1;
    return NC_OK;
}

static int copy_to(nc_buf *out, const uint8_t *from, size_t n) {
    if (!reserve(out, n)) {
        return 0;
    }
    memcpy(out->buf + out->len, from, n);
    out->len += n;
    return 1;
}

int nc_stamp_produce(const uint8_t *frame, size_t len, const nc_plan *plan, nc_draw_fn draw,
                     void *draw_arg, int64_t now_ms, nc_buf *out, nc_counts *counts,
                     const char **why) {
    rd_t r = {frame, 0, len, 0};
    out->len = 0;
    memset(counts, 0, sizeof *counts);
    *why = "a malformed Produce request";
    if (len < 12 || (uint64_t)(uint32_t)rd_int(&r, 4) + 4 != len) {
        return NC_PYTHON;
    }
    int64_t api = rd_int(&r, 2), ver = rd_int(&r, 2);
    rd_skip(&r, 4); /* correlation id */
    if (api != NR_PRODUCE || ver < NC_PRODUCE_MIN_VERSION || ver > NR_PRODUCE_MAX_VERSION) {
        *why = "not a Produce request of v" NC_STR(NC_PRODUCE_MIN_VERSION) "-v" NC_STR(
            NR_PRODUCE_MAX_VERSION);
        return NC_PYTHON;
    }
    int flexible = ver >= PRODUCE_FLEXIBLE_VERSION;
    const uint8_t *client_id = NULL;
    int64_t client_len = rd_name(&r, 0, &client_id);
    if (client_len == NAME_BAD) {
        *why = r.bad ? "a malformed Produce request" : "a client id that is not ASCII";
        return NC_PYTHON;
    }
    if (flexible) {
        rd_tagged(&r); /* request header v2 */
    }
    /* the transactional id (nullable) */
    if (flexible) {
        uint64_t n = rd_uvarint(&r);
        rd_skip(&r, n ? n - 1 : 0);
    } else {
        int64_t n = rd_int(&r, 2);
        if (n < -1) {
            return NC_PYTHON;
        }
        rd_skip(&r, n > 0 ? (uint64_t)n : 0);
    }
    rd_skip(&r, 6); /* acks, timeout */
    int64_t topics;
    if (!nc_read_count(&r, flexible, &topics)) {
        return NC_PYTHON;
    }
    tail_t t = {0};
    if (!build_tail(&t, plan, client_id, client_len, now_ms)) {
        free_tail(&t);
        return NC_NOMEM;
    }
    t.left = plan->max_request_decompressed;
    t.lookup = 1;
    if (plan->links != NULL) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts); /* Python's time.monotonic */
        t.now = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    }
    int result = NC_OK;
    int changed = 0; /* a batch changes: the request is rewritten */
    size_t copied = 0;
    for (int64_t ti = 0; ti < topics && result == NC_OK; ti++) {
        const uint8_t *name;
        int64_t partitions;
        if (ver >= TOPIC_ID_VERSION) {
            const uint8_t *id = r.p + r.pos;
            rd_skip(&r, 16);
            if (!r.bad && !nc_known_id(plan, id)) {
                *why = "a topic id Herald has not learnt";
                result = NC_PYTHON;
                break;
            }
        } else if (rd_name(&r, flexible, &name) < 0) {
            *why = r.bad ? "a malformed Produce request" : "a topic name that is not ASCII";
            result = NC_PYTHON;
            break;
        }
        if (!nc_read_count(&r, flexible, &partitions)) {
            result = NC_PYTHON;
            break;
        }
        for (int64_t pi = 0; pi < partitions && result == NC_OK; pi++) {
            rd_skip(&r, 4); /* index */
            size_t field = r.pos;
            int64_t n = flexible ? sc_read_compact(&r) : rd_int(&r, 4);
            if (r.bad || n < -1 || (uint64_t)(n < 0 ? 0 : n) > r.end - r.pos) {
                result = NC_PYTHON;
                break;
            }
            if (n > 0) {
                if (!copy_to(out, frame + copied, field - copied)) {
                    result = NC_NOMEM;
                    break;
                }
                result = stamp_records(frame + r.pos, (size_t)n, flexible, plan, &t, draw,
                                       draw_arg, out, counts, &changed, why);
                r.pos += (size_t)n;
                copied = r.pos;
            }
            if (flexible) {
                rd_tagged(&r);
            }
        }
        if (flexible) {
            rd_tagged(&r);
        }
    }
    if (flexible) {
        rd_tagged(&r);
    }
    if (result == NC_OK && (r.bad || r.pos != len)) {
        *why = "a malformed Produce request";
        result = NC_PYTHON;
    }
    if (result == NC_OK && counts->batches == 0) {
        *why = "no records to stamp";
        result = NC_PYTHON;
    }
    if (result == NC_OK && !changed) {
        /* Nothing appended anywhere (every record keeps its own traceparent): Python
         * forwards such a request as it came, and so does the engine. */
        out->len = 0;
        memcpy(counts->missed, t.missed, sizeof t.missed); /* no link header for any */
        if (!copy_to(out, frame, len)) {
            memset(counts, 0, sizeof *counts);
            result = NC_NOMEM;
        }
        free_tail(&t);
        return result;
    }
    if (result == NC_OK && r.longer) {
        /* Python re-encodes a request it changes: every varint in its shortest form, where
         * the engine would copy the client's. Real clients write them short. */
        *why = "a varint longer than it need be";
        result = NC_PYTHON;
    }
    if (result == NC_OK && !copy_to(out, frame + copied, len - copied)) {
        result = NC_NOMEM;
    }
    if (result == NC_OK && out->len - 4 > INT32_MAX) {
        *why = "a request too large once stamped";
        result = NC_PYTHON;
    }
    if (result == NC_OK) {
        put_be32(out->buf, (uint32_t)(out->len - 4));
        counts->linked = t.linked;
        counts->parents = t.parents;
        memcpy(counts->missed, t.missed, sizeof t.missed);
        memcpy(counts->lost, t.lost, sizeof t.lost);
        counts->marked = t.marked;
        counts->lost_headers = t.lost_headers;
    } else {
        memset(counts, 0, sizeof *counts);
    }
    free_tail(&t);
    return result;
}

void nc_counts_add(nc_counts *into, const nc_counts *more) {
    for (int i = 0; i < 8; i++) {
        into->compressed[i] += more->compressed[i];
    }
    into->batches += more->batches;
    into->records += more->records;
    into->kept += more->kept;
    into->kept_batches += more->kept_batches;
    into->linked += more->linked;
    into->parents += more->parents;
    into->linked_batches += more->linked_batches;
    into->remembered += more->remembered;
    into->evicted += more->evicted;
    into->expired += more->expired;
    for (int i = 0; i < 3; i++) {
        into->missed[i] += more->missed[i];
        into->lost[i] += more->lost[i];
    }
    into->marked += more->marked;
    into->lost_headers += more->lost_headers;
}
