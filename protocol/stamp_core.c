/* See stamp_core.h. Safety: every read is bounded by the record's own length and every
 * length is checked against the bytes present before it is used. */
#include "stamp_core.h"

int sc_uvarint(const uint8_t *buf, size_t *pos, size_t limit, uint64_t *out) {
    uint64_t result = 0;
    size_t p = *pos;
    for (int shift = 0; shift < 70; shift += 7) {
        if (p >= limit) {
            return 0;
        }
        uint8_t b = buf[p++];
        result |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *pos = p;
            *out = result;
            return 1;
        }
    }
    return 0;
}

uint64_t sc_read_uvarint(sc_reader *r) {
    uint64_t v = 0;
    size_t start = r->pos;
    if (r->bad || !sc_uvarint(r->p, &r->pos, r->end, &v)) {
        r->bad = 1;
        return 0;
    }
    if (r->pos - start != sc_varint_size(v)) {
        r->longer = 1;
    }
    return v;
}

int64_t sc_read_compact(sc_reader *r) {
    uint64_t v = sc_read_uvarint(r);
    if (r->bad) {
        return 0;
    }
    if (v == 0) {
        return -1;
    }
    if (v - 1 > (uint64_t)INT64_MAX) {
        r->bad = 1;
        return 0;
    }
    return (int64_t)(v - 1);
}

void sc_read_skip(sc_reader *r, uint64_t n) {
    if (r->bad || n > r->end - r->pos) {
        r->bad = 1;
        return;
    }
    r->pos += (size_t)n;
}

void sc_read_tagged(sc_reader *r) {
    uint64_t count = sc_read_uvarint(r);
    for (uint64_t i = 0; i < count && !r->bad; i++) {
        sc_read_uvarint(r);
        sc_read_skip(r, sc_read_uvarint(r));
    }
}

/* A zigzag length at *pos: -1 (null) sets *len to -1, other negatives are errors. */
static const char *read_length(const uint8_t *buf, size_t *pos, size_t limit, int64_t *len,
                               const char *negative) {
    uint64_t z;
    if (!sc_uvarint(buf, pos, limit, &z)) {
        return "truncated record";
    }
    if (z & 1) {
        if (z != 1) {
            return negative;
        }
        *len = -1;
        return NULL;
    }
    if ((z >> 1) > (uint64_t)(limit - *pos)) {
        return "truncated record";
    }
    *len = (int64_t)(z >> 1);
    return NULL;
}

const char *sc_walk_record(const uint8_t *buf, size_t *pos, size_t end, sc_rec *r,
                           sc_key_fn on_key, void *arg) {
    uint64_t z;
    size_t p = *pos;
    const char *err;
    r->start = p;
    if (!sc_uvarint(buf, &p, end, &z)) {
        return "truncated record";
    }
    if ((z & 1) || z == 0 || (z >> 1) > (uint64_t)(end - p)) {
        return "record length out of range";
    }
    size_t rend = p + (size_t)(z >> 1);
    r->body = p;
    r->end = rend;
    p += 1; /* attributes */
    if (!sc_uvarint(buf, &p, rend, &z) || !sc_uvarint(buf, &p, rend, &z)) {
        return "truncated record";
    }
    int64_t len;
    if ((err = read_length(buf, &p, rend, &len, "negative key length")) != NULL) {
        return err;
    }
    if (len > 0) {
        p += (size_t)len;
    }
    if ((err = read_length(buf, &p, rend, &len, "negative value length")) != NULL) {
        return err;
    }
    if (len > 0) {
        p += (size_t)len;
    }
    r->hpos = p;
    if (!sc_uvarint(buf, &p, rend, &z)) {
        return "truncated record";
    }
    if (z && ((z & 1) || (z >> 1) > (uint64_t)((rend - p) >> 1))) {
        return "header count out of range";
    }
    r->first = p;
    r->count = z >> 1;
    int looking = on_key != NULL;
    for (uint64_t h = 0; h < r->count; h++) {
        if (!sc_uvarint(buf, &p, rend, &z)) {
            return "truncated record";
        }
        if (z & 1) {
            return "negative header key length";
        }
        if ((z >> 1) > (uint64_t)(rend - p)) {
            return "truncated record";
        }
        if (looking && on_key(arg, buf + p, (size_t)(z >> 1))) {
            looking = 0;
        }
        p += (size_t)(z >> 1);
        if ((err = read_length(buf, &p, rend, &len, "negative header value length")) != NULL) {
            return err;
        }
        if (len > 0) {
            p += (size_t)len;
        }
    }
    if (p != rend) {
        return "record length does not match its fields";
    }
    *pos = p;
    return NULL;
}

size_t sc_varint_size(uint64_t v) {
    size_t n = 1;
    while (v > 0x7F) {
        v >>= 7;
        n++;
    }
    return n;
}

uint8_t *sc_put_varint(uint8_t *out, uint64_t v) {
    while (v > 0x7F) {
        *out++ = (uint8_t)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    *out++ = (uint8_t)v;
    return out;
}

uint64_t sc_zigzag(int64_t v) {
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

size_t sc_cut_size(const sc_cut *spec, size_t n) {
    size_t size = 0;
    for (size_t s = 0; s < n; s++) {
        size += spec[s].literal_len + (spec[s].digits < 0 ? 1 : (size_t)spec[s].digits);
    }
    return size;
}

uint8_t *sc_hex_cut(uint8_t *w, const uint8_t *chunk, const sc_cut *spec, size_t n) {
    static const char hex[] = "0123456789abcdef";
    static const char variant[] = "89ab";
    size_t d = 0; /* next digit of the chunk */
    for (size_t s = 0; s < n; s++) {
        for (size_t i = 0; i < spec[s].literal_len; i++) {
            *w++ = spec[s].literal[i];
        }
        if (spec[s].digits < 0) {
            unsigned nib = (d & 1) ? (chunk[d >> 1] & 0x0F) : (chunk[d >> 1] >> 4);
            *w++ = (uint8_t)variant[nib & 3];
            d++;
            continue;
        }
        for (int j = 0; j < spec[s].digits; j++, d++) {
            unsigned nib = (d & 1) ? (chunk[d >> 1] & 0x0F) : (chunk[d >> 1] >> 4);
            *w++ = (uint8_t)hex[nib];
        }
    }
    return w;
}

/* Slicing-by-8 tables for the reflected Castagnoli polynomial, made on first use. */
static uint32_t crc_table[8][256];
static int crc_ready;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) {
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        }
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        for (int t = 1; t < 8; t++) {
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
        }
    }
    crc_ready = 1;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#include <string.h>
#define HAVE_CRC_INSTRUCTION 1

/* The SSE4.2 crc32 instruction computes CRC32C: about ten times the table's speed. One
 * instruction waits for the one before (three cycles each), so a long run is cut into three
 * interleaved streams of CRC_BLOCK bytes, which the CPU runs side by side, and joined: the
 * register after X then Y is the register after X moved over |Y| zero bytes (a linear map:
 * four table lookups, crc_shift) xor the register after Y from zero. */
#define CRC_BLOCK 1024
static uint32_t crc_shift_table[4][256];
static int crc_shift_ready;

__attribute__((target("sse4.2"))) static uint64_t crc_words(uint64_t c, const uint8_t *data,
                                                             size_t len) {
    for (; len >= 8; data += 8, len -= 8) {
        uint64_t word;
        memcpy(&word, data, 8);
        c = _mm_crc32_u64(c, word);
    }
    return c;
}

/* The register c moved over CRC_BLOCK zero bytes. */
static uint32_t crc_shift(uint32_t c) {
    return crc_shift_table[0][c & 0xFF] ^ crc_shift_table[1][(c >> 8) & 0xFF] ^
           crc_shift_table[2][(c >> 16) & 0xFF] ^ crc_shift_table[3][c >> 24];
}

static void crc_shift_init(void) {
    static const uint8_t zeros[CRC_BLOCK];
    for (int i = 0; i < 4; i++) {
        for (uint32_t b = 0; b < 256; b++) {
            crc_shift_table[i][b] = (uint32_t)crc_words(b << (8 * i), zeros, CRC_BLOCK);
        }
    }
    /* idempotent: a race writes the same values; the flag after the tables */
    __atomic_store_n(&crc_shift_ready, 1, __ATOMIC_RELEASE);
}

__attribute__((target("sse4.2"))) static uint32_t crc_instruction(uint32_t crc,
                                                                   const uint8_t *data,
                                                                   size_t len) {
    uint64_t c = (uint32_t)~crc;
    if (len >= 3 * CRC_BLOCK && !__atomic_load_n(&crc_shift_ready, __ATOMIC_ACQUIRE)) {
        crc_shift_init();
    }
    for (; len >= 3 * CRC_BLOCK; data += 3 * CRC_BLOCK, len -= 3 * CRC_BLOCK) {
        uint64_t b = 0, d = 0;
        for (size_t i = 0; i < CRC_BLOCK; i += 8) {
            uint64_t x, y, z;
            memcpy(&x, data + i, 8);
            memcpy(&y, data + CRC_BLOCK + i, 8);
            memcpy(&z, data + 2 * CRC_BLOCK + i, 8);
            c = _mm_crc32_u64(c, x);
            b = _mm_crc32_u64(b, y);
            d = _mm_crc32_u64(d, z);
        }
        c = crc_shift(crc_shift((uint32_t)c) ^ (uint32_t)b) ^ (uint32_t)d;
    }
    c = crc_words(c, data, len);
    data += len & ~(size_t)7;
    len &= 7;
    uint32_t c32 = (uint32_t)c;
    while (len--) {
        c32 = _mm_crc32_u8(c32, *data++);
    }
    return ~c32;
}
#endif

uint32_t sc_crc32c(uint32_t crc, const uint8_t *data, size_t len) {
#ifdef HAVE_CRC_INSTRUCTION
    static int has_instruction = -1;
    if (has_instruction < 0) {
        has_instruction = __builtin_cpu_supports("sse4.2") ? 1 : 0;
    }
    if (has_instruction) {
        return crc_instruction(crc, data, len);
    }
#endif
    return sc_crc32c_table(crc, data, len);
}

uint32_t sc_crc32c_table(uint32_t crc, const uint8_t *data, size_t len) {
    if (!crc_ready) {
        crc_init(); /* idempotent: a race writes the same values */
    }
    crc = ~crc;
    while (len >= 8) {
        uint32_t lo = crc ^ ((uint32_t)data[0] | (uint32_t)data[1] << 8 |
                             (uint32_t)data[2] << 16 | (uint32_t)data[3] << 24);
        crc = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^
              crc_table[5][(lo >> 16) & 0xFF] ^ crc_table[4][lo >> 24] ^
              crc_table[3][data[4]] ^ crc_table[2][data[5]] ^ crc_table[1][data[6]] ^
              crc_table[0][data[7]];
        data += 8;
        len -= 8;
    }
    while (len--) {
        crc = (crc >> 8) ^ crc_table[0][(crc ^ *data++) & 0xFF];
    }
    return ~crc;
}
