/* Native Produce stamping (proxy/native/relay_stamp.c nc_stamp_produce) on hostile requests.
 *
 * The first input byte picks the plan (the shapes proxy/native/stamp_plan.py makes) and the
 * shape of the rest:
 *   - a whole request frame (its size prefix set to its length when the flag says so, so
 *     most inputs get past it);
 *   - a version byte and one partition's records field, whose batches get their CRC32C made
 *     right and which is put in a well-formed request of that version: the stamp checks the
 *     CRC before it reads a record, so this is how mutated records reach the record walk;
 *     with the 0x40 flag its whole batches are then compressed (codec from the version byte's
 *     high bits), so that they reach it through the engine's decompression and are stamped
 *     and recompressed.
 * tests/unit/proxy/native/test_stamp_plan.py and test_native_codecs.py hold the output to the Python
 * chain byte for byte; here, besides reading nothing outside the frame and no undefined
 * behaviour, a stamped request must:
 *   - keep its header (api key, version, correlation id) and declare its own size;
 *   - count at least one batch and as many records as it holds;
 *   - with the trace_context plan that keeps a client's own traceparent and appends nothing
 *     else, come back byte for byte when stamped again: every record then carries one valid
 *     traceparent, which the engine keeps, and a batch it appends nothing to must not change;
 *   - with the 0x80 flag and a plan that keeps (alone, or with audit's columns after it),
 *     links (trace_context `link`): a memory (protocol/link_memory.c) that remembers parents
 *     for every trace id the frame seems to carry ("00-" and 32 hex digits), so that kept
 *     records find some: no more records linked than kept, no more parents than the memory
 *     holds per trace; some traces fetched more often than max_parents or long ago, whose
 *     records declare lost parents (`herald.parents_lost`): at most one header per reason,
 *     only on records that kept their own traceparent;
 *   - read as a Produce request of its version, hold the same topics and partitions, and in
 *     them the same batches in the same order, each whole, with its CRC32C right, and with
 *     everything but its length and CRC (offsets, producer id, epoch, sequence, attributes,
 *     timestamps, record count) as the request had it: the counts are theirs. */
#include <time.h>

#include "common.h"
#include "contracts/features.h"
#include "relay_stamp.h"
#include "stamp_core.h"

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* Give every whole batch of a records field its right CRC32C. */
static void seal(uint8_t *f, size_t n) {
    size_t pos = 0;
    while (n - pos >= 61) {
        int64_t length = (int32_t)be32(f + pos + 8);
        if (length < 49 || (uint64_t)length + 12 > n - pos) {
            return;
        }
        size_t size = (size_t)length + 12;
        put_be32(f + pos + 17, sc_crc32c(0, f + pos + 21, size - 21));
        pos += size;
    }
}

/* A Produce request of version `ver` (one the stamp walks) with one topic (known by id from
 * TOPIC_ID_VERSION) and one partition holding `records` (protocol/messages/produce_request.py);
 * malloc'd, *len set. */
static uint8_t *request(int ver, const uint8_t *records, size_t n, size_t *len) {
    int flexible = ver >= PRODUCE_FLEXIBLE_VERSION;
    uint8_t *out = malloc(64 + n);
    size_t w = 4;
    static const uint8_t head[] = {0, 0, 0, 0, 0, 0, 0, 7, 0, 3, 'a', 'p', 'p'};
    memcpy(out + w, head, sizeof head);
    out[w + 3] = (uint8_t)ver;
    w += sizeof head;
    if (flexible) {
        out[w++] = 0; /* header tagged fields */
        out[w++] = 0; /* null transactional id */
    } else {
        out[w++] = 0xff; /* null transactional id */
        out[w++] = 0xff;
    }
    static const uint8_t acks_timeout[] = {0, 1, 0, 0, 0x75, 0x30};
    memcpy(out + w, acks_timeout, sizeof acks_timeout);
    w += sizeof acks_timeout;
    if (flexible) {
        out[w++] = 2; /* one topic */
    } else {
        put_be32(out + w, 1);
        w += 4;
    }
    if (ver >= TOPIC_ID_VERSION) {
        memcpy(out + w, TOPIC_ID_A, 16);
        w += 16;
    } else if (flexible) {
        out[w++] = 2;
        out[w++] = 't';
    } else {
        out[w++] = 0;
        out[w++] = 1;
        out[w++] = 't';
    }
    if (flexible) {
        out[w++] = 2; /* one partition */
    } else {
        put_be32(out + w, 1);
        w += 4;
    }
    put_be32(out + w, 0); /* its index */
    w += 4;
    if (flexible) {
        w = (size_t)(sc_put_varint(out + w, (uint64_t)n + 1) - out);
    } else {
        put_be32(out + w, (uint32_t)n);
        w += 4;
    }
    memcpy(out + w, records, n);
    w += n;
    if (flexible) {
        out[w++] = 0; /* partition, topic and top-level tagged fields */
        out[w++] = 0;
        out[w++] = 0;
    }
    put_be32(out, (uint32_t)(w - 4));
    *len = w;
    return out;
}

/* ---- a plain reading of a Produce request's batches, to hold the stamped one to ----------- */

#define MAX_BATCHES 256

typedef struct {
    const uint8_t *at[MAX_BATCHES]; /* each batch's header */
    size_t size[MAX_BATCHES];
    size_t n;
    uint64_t records;
    size_t parts; /* partitions, with their topic's position folded in */
    uint64_t shape; /* a hash of the topics' names or ids and the partitions' indexes */
    int whole;    /* every records field is whole batches, each with its CRC right */
} batches;

static uint32_t rd_be(sc_reader *r, int bytes) {
    if (r->bad || r->end - r->pos < (size_t)bytes) {
        r->bad = 1;
        return 0;
    }
    uint32_t v = 0;
    for (int i = 0; i < bytes; i++) {
        v = v << 8 | r->p[r->pos++];
    }
    return v;
}

static void fold(batches *b, const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        b->shape = (b->shape ^ p[i]) * 1099511628211ULL;
    }
}

static void walk_records(const uint8_t *f, size_t n, batches *b) {
    size_t pos = 0;
    while (pos < n) {
        if (n - pos < 61 || b->n == MAX_BATCHES) {
            b->whole = 0;
            return;
        }
        const uint8_t *h = f + pos;
        uint32_t length = be32(h + 8);
        if (length < 49 || (uint64_t)length + 12 > n - pos || h[16] != 2 ||
            be32(h + 17) != sc_crc32c(0, h + 21, length - 9)) {
            b->whole = 0;
            return;
        }
        b->at[b->n] = h;
        b->size[b->n++] = (size_t)length + 12;
        b->records += be32(h + 57);
        pos += (size_t)length + 12;
    }
}

/* Read `frame` as a Produce request of its version (one the stamp walks); 1 when it reads
 * so. */
static int walk_request(const uint8_t *frame, size_t len, batches *b) {
    memset(b, 0, sizeof *b);
    b->whole = 1;
    sc_reader r = {frame, 6, len, 0, 0};
    int ver = (int16_t)rd_be(&r, 2);
    int flexible = ver >= PRODUCE_FLEXIBLE_VERSION;
    rd_be(&r, 4);                                     /* correlation id */
    int16_t client_id = (int16_t)rd_be(&r, 2);
    sc_read_skip(&r, client_id > 0 ? (uint64_t)client_id : 0);
    if (flexible) {
        sc_read_tagged(&r);
    }
    if (flexible) {                                   /* transactional id */
        int64_t n = sc_read_compact(&r);
        sc_read_skip(&r, n > 0 ? (uint64_t)n : 0);
    } else {
        int16_t n = (int16_t)rd_be(&r, 2);
        sc_read_skip(&r, n > 0 ? (uint64_t)n : 0);
    }
    rd_be(&r, 2);                                     /* acks */
    rd_be(&r, 4);                                     /* timeout */
    int64_t topics = flexible ? sc_read_compact(&r) : (int32_t)rd_be(&r, 4);
    for (int64_t t = 0; t < topics && !r.bad; t++) {
        size_t name_at = r.pos;
        if (ver >= TOPIC_ID_VERSION) {
            sc_read_skip(&r, 16);
        } else {
            int64_t n = flexible ? sc_read_compact(&r) : (int16_t)rd_be(&r, 2);
            sc_read_skip(&r, n > 0 ? (uint64_t)n : 0);
        }
        if (!r.bad) {
            fold(b, frame + name_at, r.pos - name_at);
        }
        int64_t parts = flexible ? sc_read_compact(&r) : (int32_t)rd_be(&r, 4);
        for (int64_t p = 0; p < parts && !r.bad; p++) {
            size_t index_at = r.pos;
            rd_be(&r, 4);
            if (!r.bad) {
                fold(b, frame + index_at, 4);
            }
            int64_t n = flexible ? sc_read_compact(&r) : (int32_t)rd_be(&r, 4);
            size_t at = r.pos;
            sc_read_skip(&r, n > 0 ? (uint64_t)n : 0);
            if (!r.bad && n > 0) {
                walk_records(frame + at, (size_t)n, b);
            }
            b->parts++;
            if (flexible) {
                sc_read_tagged(&r);
            }
        }
        if (flexible) {
            sc_read_tagged(&r);
        }
    }
    if (flexible) {
        sc_read_tagged(&r);
    }
    return !r.bad && ver >= NC_PRODUCE_MIN_VERSION && ver <= NR_PRODUCE_MAX_VERSION;
}

/* The stamped request `out` against the request `in` it was made from, and its counts. */
static void same_batches(const uint8_t *in, size_t in_len, const uint8_t *out, size_t out_len,
                         const nc_counts *counts) {
    batches *was = malloc(sizeof *was), *now = malloc(sizeof *now);
    int read_in = walk_request(in, in_len, was);
    FUZZ_CHECK(walk_request(out, out_len, now), "a stamped request that is not one");
    FUZZ_CHECK(now->whole, "a stamped batch is cut, not of magic 2, or its CRC is wrong");
    FUZZ_CHECK(now->n == counts->batches && now->records == counts->records,
               "%zu batches of %llu records, counted %llu of %llu", now->n,
               (unsigned long long)now->records, (unsigned long long)counts->batches,
               (unsigned long long)counts->records);
    /* What it stamped reads as a Produce request too (the engine refuses what does not)
     * with the same partitions and batches. */
    FUZZ_CHECK(read_in && was->whole, "the engine stamped a request that is not well formed");
    FUZZ_CHECK(was->parts == now->parts && was->shape == now->shape,
               "%zu partitions became %zu, or their topics or indexes changed", was->parts,
               now->parts);
    FUZZ_CHECK(was->n == now->n && was->records == now->records,
               "%zu batches of %llu records became %zu of %llu", was->n,
               (unsigned long long)was->records, now->n, (unsigned long long)now->records);
    for (size_t i = 0; i < now->n; i++) {
        const uint8_t *a = was->at[i], *b = now->at[i];
        FUZZ_CHECK(memcmp(a, b, 8) == 0 && memcmp(a + 12, b + 12, 5) == 0 &&
                       memcmp(a + 21, b + 21, 40) == 0,
                   "batch %zu: its header changed beyond its length and CRC", i);
    }
    free(was);
    free(now);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) {
        return 0;
    }
    uint8_t flags = data[0];
    size_t len = size - 1;
    uint8_t *frame;
    if (flags & 0x20) {
        int ver = NC_PRODUCE_MIN_VERSION +
                  data[1] % (NR_PRODUCE_MAX_VERSION - NC_PRODUCE_MIN_VERSION + 1);
        size_t n = size - 2;
        uint8_t *records = malloc(n ? n : 1);
        memcpy(records, data + 2, n);
        seal(records, n);
        if (flags & 0x40) {
            size_t packed_len;
            uint8_t *packed = compress_batches(records, n, 1 + (data[1] >> 4) % 4,
                                               &packed_len);
            free(records);
            records = packed;
            n = packed_len;
        }
        uint8_t *built = request(ver, records, n, &len);
        free(records);
        frame = malloc(len); /* exact size: ASan sees a read past it */
        memcpy(frame, built, len);
        free(built);
    } else {
        frame = malloc(len);
        memcpy(frame, data + 1, len);
        if ((flags & 0x08) && len >= 4) {
            put_be32(frame, (uint32_t)(len - 4));
        }
    }
    nc_plan plan;
    stamp_plan(&plan, flags & 7);
    int links = (flags & 0x80) && (flags & 7) % 3 == 0;
    if (links) {
        lm_memory *m = lm_new(64, 1e6, 3);
        must(m != NULL);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts); /* the stamp's clock */
        double now = (double)ts.tv_sec;
        for (size_t i = 0; i + 35 <= len; i++) {
            if (memcmp(frame + i, "00-", 3) == 0) {
                int64_t ev, ex;
                /* 1-4 parents: past max_parents; every fifth fetched long ago: expired */
                double at = i % 5 == 4 ? now - 2e6 : now;
                for (int k = 0; k < 1 + (int)(i % 4); k++) {
                    must(lm_remember(m, (const uint8_t *)"h", 1, frame + i + 3,
                                     (const uint8_t *)"in", 2, k, (int64_t)i, at, &ev, &ex));
                }
            }
        }
        must(nc_plan_links(&plan, m, (const uint8_t *)"h", 1,
                           (const uint8_t *)"\x1aherald.parent", 14));
        /* as stamp_plan.py makes it: the lost parents are declared */
        must(nc_plan_lost_key(&plan, (const uint8_t *)"\x26herald.parents_lost", 20));
        lm_release(m); /* the plan holds it */
    }
    nc_buf out = {0};
    out.limit = (flags & 0x10) ? 8192 : 0;
    nc_counts counts;
    const char *why = NULL;
    uint64_t state = flags;
    int r = nc_stamp_produce(frame, len, &plan, fuzz_draw, &state, 1700000000123LL, &out,
                             &counts, &why);
    FUZZ_CHECK(r == NC_OK || r == NC_PYTHON, "result %d", r);
    if (r == NC_PYTHON) {
        FUZZ_CHECK(why != NULL, "no reason to go to Python");
        FUZZ_CHECK(counts.batches == 0 && counts.records == 0, "counts of a refused request");
    } else {
        FUZZ_CHECK(out.len >= 12 && be32(out.buf) == out.len - 4, "size %u for %zu bytes",
                   out.len >= 4 ? be32(out.buf) : 0, out.len);
        FUZZ_CHECK(memcmp(out.buf + 4, frame + 4, 8) == 0, "header changed");
        FUZZ_CHECK(counts.batches > 0 && counts.records >= counts.batches &&
                       counts.kept <= counts.records && counts.kept_batches <= counts.batches,
                   "counts %llu %llu %llu %llu", (unsigned long long)counts.batches,
                   (unsigned long long)counts.records, (unsigned long long)counts.kept,
                   (unsigned long long)counts.kept_batches);
        FUZZ_CHECK(out.limit == 0 || out.len <= out.limit + len, "grew past its limit");
        same_batches(frame, len, out.buf, out.len, &counts);
        FUZZ_CHECK(counts.lost_headers <= 3 * counts.marked && counts.marked <= counts.kept &&
                       counts.linked <= counts.marked &&
                       counts.lost[0] + counts.lost[1] + counts.lost[2] >= counts.lost_headers &&
                       (links || counts.lost_headers == 0),
                   "%llu lost headers on %llu records", (unsigned long long)counts.lost_headers,
                   (unsigned long long)counts.marked);
        FUZZ_CHECK(counts.linked <= counts.kept && counts.parents <= 3 * counts.linked &&
                       counts.parents >= counts.linked &&
                       (links || counts.linked + counts.missed[0] == 0),
                   "linked %llu of %llu kept, %llu parents", (unsigned long long)counts.linked,
                   (unsigned long long)counts.kept, (unsigned long long)counts.parents);
        if ((flags & 7) % 3 == 0 && (flags & 7) != 3 && !links) { /* the keeper alone */
            nc_buf again = {0};
            nc_counts counts2;
            const char *why2 = NULL;
            int r2 = nc_stamp_produce(out.buf, out.len, &plan, fuzz_draw, &state,
                                      1700000000456LL, &again, &counts2, &why2);
            FUZZ_CHECK(r2 == NC_OK, "a stamped request is refused: %s", why2);
            FUZZ_CHECK(again.len == out.len && memcmp(again.buf, out.buf, out.len) == 0,
                       "stamping a stamped request changed it (%zu -> %zu bytes)", out.len,
                       again.len);
            FUZZ_CHECK(counts2.kept == counts2.records && counts2.records == counts.records,
                       "kept %llu of %llu records, stamped %llu",
                       (unsigned long long)counts2.kept, (unsigned long long)counts2.records,
                       (unsigned long long)counts.records);
            free(again.buf);
        }
    }
    free(out.buf);
    nc_plan_free(&plan);
    free(frame);
    return 0;
}
