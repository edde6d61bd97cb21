/* What the native fuzz targets share: plans like the ones Herald gives the engine, a
 * deterministic source of random bytes for stamping, and a reader over the fuzzer's input.
 * Built with the engine's C sources, without Python (fuzz/native/build.sh). */
#ifndef HERALD_FUZZ_COMMON_H
#define HERALD_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "relay_stamp.h"

/* Abort with a message: libFuzzer saves the input that got here. */
#define FUZZ_CHECK(cond, ...)                                                                \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "fuzz check failed (%s:%d): %s: ", __FILE__, __LINE__, #cond);   \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fprintf(stderr, "\n");                                                           \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

/* The input, read front to back; reads past its end give zeros. */
typedef struct {
    const uint8_t *p;
    size_t len, pos;
} fuzz_in;

static inline uint8_t in_byte(fuzz_in *in) {
    return in->pos < in->len ? in->p[in->pos++] : 0;
}

static inline uint32_t in_u16(fuzz_in *in) {
    uint32_t hi = in_byte(in);
    return hi << 8 | in_byte(in);
}

/* Up to `want` bytes of the input, in place. */
static inline const uint8_t *in_bytes(fuzz_in *in, size_t want, size_t *got) {
    size_t left = in->len - in->pos;
    *got = want < left ? want : left;
    const uint8_t *at = in->p + in->pos;
    in->pos += *got;
    return at;
}

/* Random bytes for stamping: a counter, so that a run is reproducible. */
static inline int fuzz_draw(void *arg, int stream, uint8_t *dst, size_t n) {
    uint64_t *state = arg;
    for (size_t i = 0; i < n; i++) {
        *state = *state * 6364136223846793005ULL + 1442695040888963407ULL + (uint64_t)stream;
        dst[i] = (uint8_t)(*state >> 56);
    }
    return 1;
}

#define TOPIC_ID_A "\x11\x11\x11\x11\x11\x11\x11\x11\x11\x11\x11\x11\x11\x11\x11\x11"
#define TOPIC_ID_B "\x22\x22\x22\x22\x22\x22\x22\x22\x22\x22\x22\x22\x22\x22\x22\x22"

static inline void must(int ok) {
    if (!ok) {
        fprintf(stderr, "cannot build a plan\n");
        abort();
    }
}

/* The plans Herald makes (proxy/native/stamp_plan.py): `which` picks trace_context in record
 * mode keeping a client's own traceparent, trace_context in batch mode (unsampled) with
 * audit's columns, or audit alone with a null constant; `which` 3 is the first with audit's
 * columns after it (audit after trace_context: a kept record's links go in the middle of
 * what is appended). The limits are small enough to be met (the decompression limits too:
 * 256 KiB a batch, 1 MiB a request). */
static inline void stamp_plan(nc_plan *plan, int which) {
    static const uint8_t tp_key[] = "\x16" HEADER_TRACEPARENT; /* zigzag length 11, the key */
    const char *why;
    int mode = which % 3;
    must(nc_plan_init(plan, 6, 6));
    must(nc_plan_topic_ids(plan, (const uint8_t *)TOPIC_ID_A TOPIC_ID_B, 32));
    plan->max_batch_records = 500;
    plan->max_request_records = 2000;
    plan->max_batch_bytes = (which & 4) ? 3000 : -1;
    plan->max_batch_decompressed = 256 * 1024;
    plan->max_request_decompressed = 1024 * 1024;
    if (mode != 2) {
        must(nc_plan_column(plan, NC_TRACEPARENT, tp_key, sizeof tp_key - 1, NULL, 0,
                            mode == 0, mode == 1, mode == 0, &why));
    }
    if (mode != 0 || which == 3) {
        must(nc_plan_column(plan, NC_CLIENT_ID, (const uint8_t *)"\x1aherald.client", 14,
                            NULL, 0, 0, 0, 0, &why));
        must(nc_plan_column(plan, NC_TIME_MS_TEXT, (const uint8_t *)"\x16herald.time", 12,
                            NULL, 0, 0, 0, 0, &why));
        must(nc_plan_column(plan, NC_UUID7, (const uint8_t *)"\x14herald.msg", 11, NULL, 0, 0,
                            0, 0, &why));
        must(nc_plan_column(plan, NC_CONST, (const uint8_t *)"\x16herald.null", 12, NULL, 0, 0,
                            0, 0, &why));
        must(nc_plan_column(plan, NC_CONST, (const uint8_t *)"\x00", 1, (const uint8_t *)"v",
                            1, 0, 0, 0, &why));
    }
    must(nc_plan_key(plan, (const uint8_t *)HEADER_TRACEPARENT, HEADER_TRACEPARENT_LEN, 0));
    must(nc_plan_key(plan, (const uint8_t *)HEADER_TRACESTATE, HEADER_TRACESTATE_LEN, 0));
    must(nc_plan_key(plan, (const uint8_t *)"b3", 2, 0));
    must(nc_plan_key(plan, (const uint8_t *)"herald.", 7, 1));
}

/* The plan of a fetch chain that drops `x-debug` and headers under `x-tenant-`
 * (proxy/native/fetch_plan.py), knowing two topic ids. */
static inline void fetch_plan(nc_plan *plan) {
    must(nc_plan_init(plan, 0, 2));
    plan->max_batch_decompressed = 256 * 1024;
    plan->max_request_decompressed = 1024 * 1024;
    must(nc_plan_topic_ids(plan, (const uint8_t *)TOPIC_ID_A TOPIC_ID_B, 32));
    must(nc_plan_key(plan, (const uint8_t *)"x-debug", 7, 0));
    must(nc_plan_key(plan, (const uint8_t *)"x-tenant-", 9, 1));
}

/* The whole batches of a records field f[0..n) compressed with `codec` (their records
 * section; attributes, length and CRC32C set), what follows them as it is: malloc'd, *len
 * set. How mutated records reach the record walk through a codec. */
#include "relay_codec.h"
#include "stamp_core.h"
static inline uint8_t *compress_batches(const uint8_t *f, size_t n, int codec, size_t *len) {
    nk_buf out = {0};
    size_t pos = 0;
    while (n - pos >= 61) {
        const uint8_t *b = f + pos;
        int64_t length = (int32_t)((uint32_t)b[8] << 24 | (uint32_t)b[9] << 16 |
                                   (uint32_t)b[10] << 8 | b[11]);
        if (length < 49 || (uint64_t)length + 12 > n - pos) {
            break;
        }
        size_t size = (size_t)length + 12, at = out.len;
        must(nk_reserve(&out, 61, SIZE_MAX));
        memcpy(out.buf + at, b, 61);
        out.len += 61;
        const char *why;
        must(nk_compress(codec, b + 61, size - 61, &out, &why) == NK_OK);
        uint8_t *h = out.buf + at;
        uint32_t sealed = (uint32_t)(out.len - at);
        h[22] = (uint8_t)((h[22] & ~7) | codec);
        uint32_t crc;
        h[8] = (uint8_t)((sealed - 12) >> 24);
        h[9] = (uint8_t)((sealed - 12) >> 16);
        h[10] = (uint8_t)((sealed - 12) >> 8);
        h[11] = (uint8_t)(sealed - 12);
        crc = sc_crc32c(0, h + 21, sealed - 21);
        h[17] = (uint8_t)(crc >> 24);
        h[18] = (uint8_t)(crc >> 16);
        h[19] = (uint8_t)(crc >> 8);
        h[20] = (uint8_t)crc;
        pos += size;
    }
    must(nk_reserve(&out, n - pos + 1, SIZE_MAX));
    memcpy(out.buf + out.len, f + pos, n - pos);
    out.len += n - pos;
    *len = out.len;
    return out.buf;
}

#endif
