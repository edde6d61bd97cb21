/* The engine's header readers on hostile bytes (proxy/native/relay_frames.c): the `acks` of a
 * Produce request, the top-level tagged fields of a Produce response (from
 * PRODUCE_NODE_ENDPOINTS_VERSION to NR_PRODUCE_MAX_VERSION), and the varints both read.
 *
 * Property of nr_produce_acks: the engine asks it again as more of a request arrives, so its
 * answer on any prefix must agree with its answer on the whole frame: NR_NEED_MORE, or the
 * same answer. A prefix that says NR_UNREADABLE while the whole request is readable sends a
 * legitimate request to Python (the defect of a partly read flexible header).
 *
 * Besides the input read as it is, the input also drives the building of well-formed frames,
 * whose answers are known:
 *   - a Produce request of any version up to NR_PRODUCE_MAX_VERSION (client id, header tagged
 *     fields, transactional id of the input's sizes, null ones too): nr_produce_acks reads
 *     exactly the acks written, and every prefix agrees;
 *   - a Produce response of a version whose top-level tagged fields the engine reads (topics,
 *     partitions, record errors, messages and tagged fields at every level, of the input's
 *     counts and sizes): nr_top_level_tags gives the number of top-level tagged fields
 *     written; the frame cut short by any number of bytes is NR_UNREADABLE or, past the count
 *     itself, the same count;
 *   - varints: nr_uvarint agrees with a plain reading of the bytes (seven bits a byte, at
 *     most ten bytes), every shorter limit says "need more", and a value the input gives,
 *     written (in its shortest form, or padded with continuation bytes up to ten), reads back
 *     the same over exactly the bytes written. */
#include "common.h"
#include "contracts/features.h"
#include "relay_frames.h"

#define MAX_FRAME 600

static void acks_agree(const uint8_t *frame, size_t len, int ver) {
    int16_t whole_acks = 0;
    int whole = nr_produce_acks(frame, len, ver, &whole_acks);
    FUZZ_CHECK(whole == NR_UNREADABLE || whole == NR_NEED_MORE || whole == NR_READ,
               "answer %d", whole);
    for (size_t k = 0; k < len; k++) {
        int16_t acks = 0;
        int part = nr_produce_acks(frame, k, ver, &acks);
        if (part == NR_READ) {
            FUZZ_CHECK(whole == NR_READ && acks == whole_acks,
                       "v%d: %zu of %zu bytes read acks %d, the whole frame %d (%d)", ver, k,
                       len, acks, whole, whole_acks);
        } else if (part == NR_UNREADABLE) {
            FUZZ_CHECK(whole == NR_UNREADABLE,
                       "v%d: %zu of %zu bytes unreadable, the whole frame %d", ver, k, len,
                       whole);
        } else {
            FUZZ_CHECK(part == NR_NEED_MORE, "answer %d", part);
        }
    }
}

/* A plain reading of an unsigned varint: seven bits a byte, low first, at most ten bytes.
 * NR_READ (*end past it), NR_NEED_MORE (the bytes end first), NR_UNREADABLE (ten bytes and
 * no end). */
static int plain_uvarint(const uint8_t *p, size_t pos, size_t limit, uint64_t *v,
                         size_t *end) {
    uint64_t value = 0;
    for (int i = 0; i < 10; i++) {
        if (pos + (size_t)i >= limit) {
            return NR_NEED_MORE;
        }
        uint8_t b = p[pos + (size_t)i];
        value |= (uint64_t)(b & 0x7f) << (7 * i);
        if (b < 0x80) {
            *v = value;
            *end = pos + (size_t)i + 1;
            return NR_READ;
        }
    }
    return NR_UNREADABLE;
}

static void uvarint_agrees(const uint8_t *p, size_t start, size_t len) {
    uint64_t want = 0, got = 0;
    size_t end = 0, pos = start;
    int plain = plain_uvarint(p, start, len, &want, &end);
    int r = nr_uvarint(p, &pos, len, &got);
    FUZZ_CHECK(r == plain, "uvarint at %zu of %zu: %d, read plainly %d", start, len, r, plain);
    if (r == NR_READ) {
        FUZZ_CHECK(got == want && pos == end, "uvarint %llu to %zu, plainly %llu to %zu",
                   (unsigned long long)got, pos, (unsigned long long)want, end);
        for (size_t k = start; k < end; k++) {
            size_t at = start;
            FUZZ_CHECK(nr_uvarint(p, &at, k, &got) == NR_NEED_MORE,
                       "uvarint cut at %zu of %zu..%zu", k, start, end);
        }
    } else {
        FUZZ_CHECK(pos == start, "a uvarint not read moved %zu to %zu", start, pos);
    }
}

static size_t put_uvarint(uint8_t *out, uint64_t v, size_t pad_to) {
    size_t n = 0;
    while (v >= 0x80 || n + 1 < pad_to) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

static void uvarint_round_trip(fuzz_in *in) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        v = v << 8 | in_byte(in);
    }
    v >>= in_byte(in) % 64; /* small values as often as large */
    uint8_t buf[12];
    size_t shortest = put_uvarint(buf, v, 0);
    size_t padded = put_uvarint(buf, v, shortest + in_byte(in) % (11 - shortest));
    FUZZ_CHECK(padded <= 10, "%zu bytes", padded);
    buf[padded] = in_byte(in); /* a byte after it, read or not */
    size_t pos = 0;
    uint64_t got = 0;
    FUZZ_CHECK(nr_uvarint(buf, &pos, padded + 1, &got) == NR_READ && got == v &&
                   pos == padded,
               "%llu in %zu bytes read as %llu in %zu", (unsigned long long)v, padded,
               (unsigned long long)got, pos);
}

/* The frame being built: writes past its room are dropped and flagged. */
typedef struct {
    uint8_t buf[4096];
    size_t len;
    int full;
} frame_out;

static void put(frame_out *f, const void *p, size_t n) {
    if (n > sizeof f->buf - f->len) {
        f->full = 1;
        return;
    }
    memcpy(f->buf + f->len, p, n);
    f->len += n;
}

static void put_be(frame_out *f, uint64_t v, int bytes) {
    uint8_t b[8];
    for (int i = 0; i < bytes; i++) {
        b[i] = (uint8_t)(v >> (8 * (bytes - 1 - i)));
    }
    put(f, b, (size_t)bytes);
}

static void put_var(frame_out *f, uint64_t v) {
    uint8_t b[12];
    put(f, b, put_uvarint(b, v, 0));
}

static void put_filler(frame_out *f, size_t n, uint8_t seed) {
    for (size_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)(seed + i);
        put(f, &b, 1);
    }
}

/* Tagged fields: a count, then each tag, its size and that many bytes. */
static void put_tags(frame_out *f, fuzz_in *in, uint64_t count) {
    put_var(f, count);
    for (uint64_t i = 0; i < count; i++) {
        size_t size = in_byte(in) % 9;
        put_var(f, i + in_byte(in) % 3);
        put_var(f, size);
        put_filler(f, size, (uint8_t)i);
    }
}

static void put_size_prefix(frame_out *f) {
    uint32_t size = (uint32_t)(f->len - 4);
    f->buf[0] = (uint8_t)(size >> 24);
    f->buf[1] = (uint8_t)(size >> 16);
    f->buf[2] = (uint8_t)(size >> 8);
    f->buf[3] = (uint8_t)size;
}

/* A nullable string: a compact length (N+1, 0 null) in flexible versions, else an int16. */
static void put_string(frame_out *f, int flexible, int length) {
    if (flexible) {
        put_var(f, (uint64_t)(length + 1));
    } else {
        put_be(f, (uint64_t)(uint16_t)(int16_t)length, 2);
    }
    put_filler(f, length > 0 ? (size_t)length : 0, 'a');
}

static void acks_of_a_built_request(fuzz_in *in) {
    int ver = in_byte(in) % (NR_PRODUCE_MAX_VERSION + 1);
    int flexible = ver >= PRODUCE_FLEXIBLE_VERSION;
    int16_t acks = (int16_t)in_u16(in);
    frame_out *f = calloc(1, sizeof *f);
    put_be(f, 0, 4);                           /* size, set below */
    put_be(f, 0, 2);                           /* api key: Produce */
    put_be(f, (uint64_t)ver, 2);
    put_be(f, in_u16(in), 4);                  /* correlation id */
    put_string(f, 0, (int)(in_byte(in) % 40) - 1); /* client id: an int16 string always */
    if (flexible) {
        put_tags(f, in, in_byte(in) % 4);
    }
    if (ver >= PRODUCE_TRANSACTIONAL_ID_VERSION) {
        put_string(f, flexible, (int)(in_byte(in) % 40) - 1);
    }
    put_be(f, (uint64_t)(uint16_t)acks, 2);
    put_be(f, 30000, 4);                       /* timeout */
    put_filler(f, in_byte(in) % 16, 0);        /* the topics, as far as they matter */
    FUZZ_CHECK(!f->full, "room");
    put_size_prefix(f);
    uint8_t *frame = malloc(f->len);            /* exact size: ASan sees a read past it */
    memcpy(frame, f->buf, f->len);
    int16_t got = 0;
    int r = nr_produce_acks(frame, f->len, ver, &got);
    FUZZ_CHECK(r == NR_READ && got == acks, "v%d: acks %d read as %d (%d)", ver, acks, got,
               r);
    acks_agree(frame, f->len, ver);
    free(frame);
    free(f);
}

static void tags_of_a_built_response(fuzz_in *in) {
    int ver = PRODUCE_NODE_ENDPOINTS_VERSION +
              in_byte(in) % (NR_PRODUCE_MAX_VERSION - PRODUCE_NODE_ENDPOINTS_VERSION + 1);
    frame_out *f = calloc(1, sizeof *f);
    put_be(f, 0, 4);
    put_be(f, in_u16(in), 4); /* correlation id */
    put_tags(f, in, in_byte(in) % 3);
    int topics = in_byte(in) % 3;
    put_var(f, (uint64_t)topics + 1);
    for (int t = 0; t < topics; t++) {
        if (ver >= TOPIC_ID_VERSION) {
            put_filler(f, 16, (uint8_t)t);
        } else {
            put_string(f, 1, 1 + in_byte(in) % 20);
        }
        int parts = in_byte(in) % 3;
        put_var(f, (uint64_t)parts + 1);
        for (int p = 0; p < parts; p++) {
            put_filler(f, 30, (uint8_t)p); /* index, error, offsets, times */
            int errors = in_byte(in) % 3;
            put_var(f, (uint64_t)errors + 1);
            for (int e = 0; e < errors; e++) {
                put_be(f, (uint64_t)e, 4);
                put_string(f, 1, (int)(in_byte(in) % 12) - 1);
                put_tags(f, in, in_byte(in) % 2);
            }
            put_string(f, 1, (int)(in_byte(in) % 12) - 1); /* error message */
            put_tags(f, in, in_byte(in) % 2);
        }
        put_tags(f, in, in_byte(in) % 2);
    }
    put_be(f, 0, 4); /* throttle time */
    size_t count_at = f->len;
    uint64_t count = in_byte(in) % 4;
    put_tags(f, in, count);
    FUZZ_CHECK(!f->full, "room");
    put_size_prefix(f);
    uint8_t *frame = malloc(f->len);
    memcpy(frame, f->buf, f->len);
    int64_t got = nr_top_level_tags(frame, f->len, NR_PRODUCE, ver);
    FUZZ_CHECK(got == (int64_t)count, "v%d: %llu top-level tags read as %lld", ver,
               (unsigned long long)count, (long long)got);
    /* Cut short: before the count (a varint of one byte here) nothing can be read; after it,
     * the count is what it was (the fields themselves are not read), except that none
     * announced leaves nothing after it. */
    for (size_t k = 0; k < f->len; k++) {
        int64_t part = nr_top_level_tags(frame, k, NR_PRODUCE, ver);
        int64_t want = k > count_at && count > 0 ? (int64_t)count : NR_UNREADABLE;
        FUZZ_CHECK(part == want, "v%d: cut at %zu of %zu (count at %zu): %lld, not %lld",
                   ver, k, f->len, count_at, (long long)part, (long long)want);
    }
    free(frame);
    free(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) {
        return 0;
    }
    int ver = data[0] & 0x1f;
    size_t len = size - 1 < MAX_FRAME ? size - 1 : MAX_FRAME;
    /* An exact-size copy: ASan sees any read past the bytes given. */
    uint8_t *frame = malloc(len ? len : 1);
    memcpy(frame, data + 1, len);
    acks_agree(frame, len, ver);
    int64_t tags = nr_top_level_tags(
        frame, len, NR_PRODUCE,
        PRODUCE_NODE_ENDPOINTS_VERSION +
            (data[0] >> 5) % (NR_PRODUCE_MAX_VERSION - PRODUCE_NODE_ENDPOINTS_VERSION + 1));
    FUZZ_CHECK(tags >= NR_UNREADABLE, "%lld tags", (long long)tags);
    FUZZ_CHECK(nr_top_level_tags(frame, len, NR_FETCH, FETCH_NODE_ENDPOINTS_VERSION) ==
                   NR_UNREADABLE,
               "not a Produce response");
    for (size_t at = 0; at < len && at < 32; at++) {
        uvarint_agrees(frame, at, len);
    }
    free(frame);
    fuzz_in in = {data + 1, size - 1, 0};
    uvarint_round_trip(&in);
    acks_of_a_built_request(&in);
    tags_of_a_built_response(&in);
    return 0;
}
