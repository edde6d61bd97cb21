/* What the native Fetch scan costs per MB, without sockets: a reproducible driver for
 * `valgrind --tool=callgrind` (instruction counts do not depend on what else the machine
 * runs). It builds Fetch v16 responses like those of bench/bench_cost.py's consume: one
 * partition of 1 KiB records in ~16 KiB uncompressed batches, each record with a valid
 * `traceparent` of its own trace (as trace_context gives it on produce) and audit's headers,
 * and scans them with the fetch plan of `trace_audit_link` (links into a memory of the default
 * bounds, trace_links.LinkConfig) or, with `--no-links`, of a `drop_headers` chain.
 *
 *     bench/scan_cost.sh [--no-links] [--traces N] [responses]
 *
 * Every record carries a new trace id (the memory fills and then evicts, as in a long consume
 * of records trace_context gave a trace each), or with `--traces N` the next of N trace ids in
 * turn (bench_cost.py --client-traces: its full-speed producer reuses 1024); the ids are rewritten and the batches resealed outside the scan (`reseal`), so
 * the scan's own cost is nf_scan_fetch's inclusive count. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "link_memory.h"
#include "relay_fetch.h"
#include "stamp_core.h"

#define RECORD_VALUE 1024
#define BATCH_RECORDS 11 /* a 16 KiB producer batch of these records */
#define RESPONSE_BATCHES 64 /* ~1 MiB: one partition's max.partition.fetch.bytes */
#define TOPIC_ID "\x11\x11\x11\x11\x11\x11\x11\x11\x11\x11\x11\x11\x11\x11\x11\x11"
#define TOPIC_NAME "bench-cost-consume"

typedef struct {
    uint8_t *p;
    size_t len, cap;
} out_t;

static void put(out_t *o, const void *b, size_t n) {
    if (o->len + n > o->cap) {
        o->cap = (o->len + n) * 2;
        o->p = realloc(o->p, o->cap);
        if (o->p == NULL) {
            abort();
        }
    }
    memcpy(o->p + o->len, b, n);
    o->len += n;
}

static void put_int(out_t *o, uint64_t v, int width) {
    uint8_t b[8];
    for (int i = 0; i < width; i++) {
        b[i] = (uint8_t)(v >> (8 * (width - 1 - i)));
    }
    put(o, b, (size_t)width);
}

static void put_varint(out_t *o, int64_t v) { /* zigzag */
    uint8_t b[10];
    put(o, b, (size_t)(sc_put_varint(b, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63)) - b));
}

static void put_uvarint(out_t *o, uint64_t v) {
    uint8_t b[10];
    put(o, b, (size_t)(sc_put_varint(b, v) - b));
}

static void put_header(out_t *o, const char *key, const char *value) {
    put_varint(o, (int64_t)strlen(key));
    put(o, key, strlen(key));
    put_varint(o, (int64_t)strlen(value));
    put(o, value, strlen(value));
}

static const char TP[] = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";

/* One record as trace_context + audit leave it; the offset of its trace id in `rec`. */
static size_t record(out_t *rec, int index) {
    out_t body = {0};
    put_int(&body, 0, 1);      /* attributes */
    put_varint(&body, 0);      /* timestamp delta */
    put_varint(&body, index);  /* offset delta */
    put_varint(&body, -1);     /* null key */
    put_varint(&body, RECORD_VALUE);
    for (int i = 0; i < RECORD_VALUE; i++) {
        put_int(&body, (uint64_t)('a' + i % 26), 1);
    }
    put_varint(&body, 6);
    size_t tp_at = body.len + 1 + strlen("traceparent") + 1 + 3;
    put_header(&body, "traceparent", TP);
    put_header(&body, "herald.client", "perf-producer-client");
    put_header(&body, "herald.source", "127.0.0.1:53422");
    put_header(&body, "herald.proxy", "herald-bench");
    put_header(&body, "herald.time", "1735689600000");
    put_header(&body, "herald.msg", "01944b2e-6c3a-7d2f-9e4b-5a6c7d8e9f00");
    size_t start = rec->len;
    put_varint(rec, (int64_t)body.len);
    size_t at = rec->len - start;
    put(rec, body.p, body.len);
    free(body.p);
    return start + at + tp_at;
}

typedef struct {
    out_t frame;
    size_t *trace_at; /* where each record's trace id is */
    size_t *batch_at; /* where each batch starts */
    size_t nrecords, nbatches;
} response_t;

static void build(response_t *r) {
    out_t *o = &r->frame;
    memset(r, 0, sizeof *r);
    r->trace_at = calloc(RESPONSE_BATCHES * BATCH_RECORDS, sizeof(size_t));
    r->batch_at = calloc(RESPONSE_BATCHES, sizeof(size_t));
    put_int(o, 0, 4);
    put_int(o, 7, 4);
    put_uvarint(o, 0);
    put_int(o, 0, 4);
    put_int(o, 0, 2);
    put_int(o, 0, 4);
    put_uvarint(o, 2); /* one topic */
    put(o, TOPIC_ID, 16);
    put_uvarint(o, 2); /* one partition */
    put_int(o, 0, 4);
    put_int(o, 0, 2);
    put_int(o, 1 << 20, 8);
    put_int(o, 1 << 20, 8);
    put_int(o, 0, 8);
    put_uvarint(o, 0);
    put_int(o, (uint64_t)-1, 4);
    out_t records = {0};
    for (int b = 0; b < RESPONSE_BATCHES; b++) {
        out_t recs = {0};
        size_t at[BATCH_RECORDS];
        for (int i = 0; i < BATCH_RECORDS; i++) {
            at[i] = record(&recs, i);
        }
        size_t start = records.len;
        r->batch_at[r->nbatches++] = start;
        put_int(&records, (uint64_t)b * BATCH_RECORDS, 8); /* base offset */
        put_int(&records, 49 + recs.len, 4);                 /* length */
        put_int(&records, 0, 4);                             /* leader epoch */
        put_int(&records, 2, 1);                             /* magic */
        put_int(&records, 0, 4);                             /* crc: sealed below */
        put_int(&records, 0, 2);                             /* attributes */
        put_int(&records, BATCH_RECORDS - 1, 4);             /* last offset delta */
        put_int(&records, 1735689600000, 8);
        put_int(&records, 1735689600000, 8);
        put_int(&records, (uint64_t)-1, 8);                  /* producer id */
        put_int(&records, (uint64_t)-1, 2);
        put_int(&records, (uint64_t)-1, 4);
        put_int(&records, BATCH_RECORDS, 4);
        for (int i = 0; i < BATCH_RECORDS; i++) {
            r->trace_at[r->nrecords++] = records.len + at[i];
        }
        put(&records, recs.p, recs.len);
        free(recs.p);
    }
    put_uvarint(o, records.len + 1);
    size_t base = o->len;
    put(o, records.p, records.len);
    free(records.p);
    for (size_t i = 0; i < r->nrecords; i++) {
        r->trace_at[i] += base;
    }
    for (size_t i = 0; i < r->nbatches; i++) {
        r->batch_at[i] += base;
    }
    put_uvarint(o, 0);
    put_uvarint(o, 0);
    put_uvarint(o, 0);
    uint8_t *p = o->p;
    size_t n = o->len - 4;
    p[0] = (uint8_t)(n >> 24), p[1] = (uint8_t)(n >> 16), p[2] = (uint8_t)(n >> 8), p[3] = (uint8_t)n;
}

/* The next trace ids (a counter in hex, modulo `traces` when > 0) and the batches' CRC32C
 * made right again. */
static void reseal(response_t *r, uint64_t *next, uint64_t traces) {
    static const char hex[] = "0123456789abcdef";
    uint8_t *p = r->frame.p;
    for (size_t i = 0; i < r->nrecords; i++) {
        uint64_t v = 1 + (traces ? (*next)++ % traces : (*next)++);
        for (int d = 0; d < 16; d++) {
            p[r->trace_at[i] + 31 - d] = (uint8_t)hex[(v >> (4 * d)) & 15];
        }
    }
    for (size_t i = 0; i < r->nbatches; i++) {
        uint8_t *b = p + r->batch_at[i];
        size_t size = ((size_t)b[8] << 24 | (size_t)b[9] << 16 | (size_t)b[10] << 8 | b[11]) + 12;
        uint32_t crc = sc_crc32c(0, b + 21, size - 21);
        b[17] = (uint8_t)(crc >> 24), b[18] = (uint8_t)(crc >> 16);
        b[19] = (uint8_t)(crc >> 8), b[20] = (uint8_t)crc;
    }
}

int main(int argc, char **argv) {
    int links = 1;
    long responses = 200;
    uint64_t traces = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--no-links") == 0) {
            links = 0;
        } else if (strcmp(argv[i], "--traces") == 0 && i + 1 < argc) {
            traces = strtoull(argv[++i], NULL, 10);
        } else {
            responses = strtol(argv[i], NULL, 10);
        }
    }
    nc_plan plan;
    lm_memory *memory = lm_new(100000, 3600.0, 8); /* LinkConfig's defaults */
    if (memory == NULL || !nc_plan_init(&plan, 0, 1) ||
        !nc_plan_topic_ids(&plan, (const uint8_t *)TOPIC_ID, 16)) {
        return 1;
    }
    plan.max_batch_decompressed = 64 << 20;
    plan.max_request_decompressed = 64 << 20;
    if (links) {
        static const uint8_t names[] = "\0\x12" TOPIC_NAME;
        if (!nc_plan_links(&plan, memory, (const uint8_t *)"127.0.0.1", 9, (const uint8_t *)"",
                           0) ||
            !nc_plan_id_names(&plan, names, sizeof names - 1)) {
            return 1;
        }
    } else if (!nc_plan_key(&plan, (const uint8_t *)"internal.", 9, 1)) {
        return 1;
    }
    response_t r;
    build(&r);
    uint64_t next = 0, remembered = 0, bytes = 0;
    for (long i = 0; i < responses; i++) {
        reseal(&r, &next, traces);
        nc_counts counts;
        const char *why = "";
        if (nf_scan_fetch(r.frame.p, r.frame.len, 16, &plan, 0, &counts, &why) != NC_OK) {
            fprintf(stderr, "the scan refused the response: %s\n", why);
            return 1;
        }
        remembered += counts.remembered;
        bytes += r.frame.len;
    }
    printf("%ld responses of %zu bytes (%zu records), %llu remembered, %lld entries\n",
           responses, r.frame.len, r.nrecords, (unsigned long long)remembered,
           (long long)lm_size(memory));
    (void)bytes;
    nc_plan_free(&plan);
    lm_release(memory);
    free(r.frame.p);
    free(r.trace_at);
    free(r.batch_at);
    return 0;
}
