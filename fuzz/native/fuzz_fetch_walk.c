/* The streamed Fetch v16+ walk (proxy/native/relay_frames.c nr_fetch_walk) on hostile bytes.
 *
 * The input is a Fetch response after its size and correlation id. It is walked three ways:
 * by a plain reading of protocol/fetch_tail.py `_walk_response` written here (the reference:
 * where the top-level tagged fields begin, or that the bytes cannot be a response of this
 * size), whole in one call, and as the engine walks it, in pieces of sizes the input picks,
 * some of the skipped bytes passed over without being in the buffer (spliced). All three must
 * agree, and the walk must never read outside the bytes it is given. */
#include "common.h"
#include "relay_frames.h"

/* ---- the reference: fetch_tail.py, step by step ---- */

typedef struct {
    const uint8_t *p;
    size_t pos, size;
    int bad;
} ref_t;

static void ref_take(ref_t *r, uint64_t n) {
    if (r->bad || n > r->size - r->pos) {
        r->bad = 1;
        return;
    }
    r->pos += (size_t)n;
}

static uint64_t ref_varint(ref_t *r) {
    uint64_t value = 0;
    for (int i = 0; i < 5 && !r->bad; i++) {
        size_t at = r->pos;
        ref_take(r, 1);
        if (r->bad) {
            return 0;
        }
        uint8_t b = r->p[at];
        value |= (uint64_t)(b & 0x7F) << (7 * i);
        if (b < 0x80) {
            return value;
        }
    }
    r->bad = 1; /* longer than 5 bytes */
    return 0;
}

static int64_t ref_compact(ref_t *r) {
    return (int64_t)ref_varint(r) - 1; /* at most 2^35: no overflow */
}

static void ref_tags(ref_t *r) {
    uint64_t n = ref_varint(r);
    for (uint64_t i = 0; i < n && !r->bad; i++) {
        ref_varint(r);
        ref_take(r, ref_varint(r));
    }
}

/* The offset of the top-level tagged fields in the body (after the correlation id), or -1.
 * The tail must hold one byte at least (decode_tail cannot read an empty one). */
static int64_t reference(const uint8_t *p, size_t size) {
    ref_t r = {p, 0, size, 0};
    ref_tags(&r);
    ref_take(&r, 10);
    int64_t topics = ref_compact(&r);
    if (topics < 0) {
        return -1;
    }
    for (int64_t t = 0; t < topics && !r.bad; t++) {
        ref_take(&r, 16);
        int64_t parts = ref_compact(&r);
        for (int64_t q = 0; q < parts && !r.bad; q++) {
            ref_take(&r, 30);
            int64_t aborted = ref_compact(&r);
            for (int64_t a = 0; a < aborted && !r.bad; a++) {
                ref_take(&r, 16);
                ref_tags(&r);
            }
            ref_take(&r, 4);
            int64_t records = ref_compact(&r);
            ref_take(&r, records > 0 ? (uint64_t)records : 0);
            ref_tags(&r);
        }
        ref_tags(&r);
    }
    if (r.bad || r.pos == size) {
        return -1;
    }
    return (int64_t)r.pos;
}

/* ---- the engine's walk ---- */

/* Walk the whole body in one call (what the engine does when it is all here). */
static int64_t whole(const uint8_t *p, size_t size) {
    nr_fwalk w;
    nr_fetch_walk_start(&w);
    size_t pos = 0;
    int r = nr_fetch_walk(&w, p, &pos, size, size);
    FUZZ_CHECK(r != NR_W_MORE, "all %zu bytes are here, and the walk wants more", size);
    FUZZ_CHECK(pos <= size, "walked to %zu of %zu", pos, size);
    return r == NR_W_TAIL ? (int64_t)pos : -1;
}

/* Walk it as bytes arrive in pieces: `cuts` picks the piece sizes and which skips splice. */
static int64_t in_pieces(const uint8_t *p, size_t size, fuzz_in *cuts) {
    nr_fwalk w;
    nr_fetch_walk_start(&w);
    size_t pos = 0, have = 0;
    for (int round = 0; round < 100000; round++) {
        uint8_t c = in_byte(cuts);
        if (w.skip > 0 && (c & 0x80) && have == pos) {
            /* Spliced: skipped bytes go socket to socket, never into the buffer. */
            uint64_t n = 1 + (uint64_t)(c & 0x7f) * 37;
            if (n > w.skip) {
                n = w.skip;
            }
            if (n > size - pos) {
                n = size - pos;
            }
            pos += (size_t)n;
            have = pos;
            w.skip -= n;
        }
        size_t more = 1 + (size_t)(c & 0x3f) * ((c & 0x40) ? 97 : 1);
        have = have + more < size ? have + more : size;
        int r = nr_fetch_walk(&w, p, &pos, have, size - pos);
        FUZZ_CHECK(pos <= have, "walked to %zu of %zu here", pos, have);
        if (r != NR_W_MORE) {
            return r == NR_W_TAIL ? (int64_t)pos : -1;
        }
        FUZZ_CHECK(have < size, "every byte is here and the walk wants more");
    }
    FUZZ_CHECK(0, "the walk did not end");
    return -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) {
        return 0;
    }
    size_t ncuts = data[0] % 64;
    if (size - 1 < ncuts) {
        return 0;
    }
    fuzz_in cuts = {data + 1, ncuts, 0};
    size_t len = size - 1 - ncuts;
    uint8_t *body = malloc(len ? len : 1);
    memcpy(body, data + 1 + ncuts, len);
    int64_t want = reference(body, len);
    int64_t got = whole(body, len);
    FUZZ_CHECK(got == want, "whole walk %lld, reference %lld", (long long)got, (long long)want);
    got = in_pieces(body, len, &cuts);
    FUZZ_CHECK(got == want, "walk in pieces %lld, reference %lld", (long long)got,
               (long long)want);
    free(body);
    return 0;
}
