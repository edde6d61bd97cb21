/* The record-level pieces shared by the record stamper (protocol/_stamp.c) and the native
 * relay's Produce stamping (proxy/native/relay_stamp.c): one walk over a magic-2 record, varints,
 * the hex cutting of ids, and CRC32C. Compiled into both extensions (setup.py); nothing here
 * touches Python objects. */
#ifndef HERALD_STAMP_CORE_H
#define HERALD_STAMP_CORE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    size_t start;   /* the record's length varint */
    size_t body;    /* attributes */
    size_t hpos;    /* header count varint */
    size_t first;   /* first header */
    size_t end;     /* end of the record */
    uint64_t count; /* header count */
} sc_rec;

/* Called with each header key of a record; returns 1 to stop looking at further keys. */
typedef int (*sc_key_fn)(void *arg, const uint8_t *key, size_t len);

/* Unsigned varint at *pos below limit (at most 10 bytes): 1 read, 0 truncated or too long.
 * Inline for its one-byte case (most lengths and deltas in a record): the record walks call
 * it several times per record, and a call each was a measurable share of a Fetch scan. */
int sc_uvarint_long(const uint8_t *buf, size_t *pos, size_t limit, uint64_t *out);

static inline int sc_uvarint(const uint8_t *buf, size_t *pos, size_t limit, uint64_t *out) {
    size_t p = *pos;
    if (p < limit && buf[p] < 0x80) {
        *out = buf[p];
        *pos = p + 1;
        return 1;
    }
    return sc_uvarint_long(buf, pos, limit, out);
}

/* One record at *pos, below end: fills r, moves *pos past it, reports header keys to on_key
 * (may be NULL). NULL on success, else what is wrong with the record. */
const char *sc_walk_record(const uint8_t *buf, size_t *pos, size_t end, sc_rec *r,
                           sc_key_fn on_key, void *arg);

/* A bounded reader over a buffer: any overrun or malformed varint sets `bad`, and reads
 * after that return 0. */
typedef struct {
    const uint8_t *p;
    size_t pos, end;
    int bad;
    int longer; /* a varint read was not in its shortest form */
} sc_reader;

uint64_t sc_read_uvarint(sc_reader *r);
/* A compact length or count (KIP-482: uvarint N+1, 0 for null): -1 for null, else N. An N
 * above INT64_MAX (no frame holds that much) sets `bad`: it is never cast to a signed type,
 * where taking one off 2^63 would overflow. */
int64_t sc_read_compact(sc_reader *r);
void sc_read_skip(sc_reader *r, uint64_t n);
void sc_read_tagged(sc_reader *r); /* a tagged-field section, skipped */

size_t sc_varint_size(uint64_t v);
uint8_t *sc_put_varint(uint8_t *out, uint64_t v);
uint64_t sc_zigzag(int64_t v);

/* One part of an id cut from a chunk of random bytes: a literal, then `digits` lowercase hex
 * digits of the chunk (-1: one UUID variant digit, 8 9 a or b, from the next digit). */
typedef struct {
    const uint8_t *literal;
    size_t literal_len;
    int digits;
} sc_cut;

/* The bytes sc_hex_cut writes for `spec`. */
size_t sc_cut_size(const sc_cut *spec, size_t n);

/* Write the id cut from `chunk` by `spec` at w; returns the end. */
uint8_t *sc_hex_cut(uint8_t *w, const uint8_t *chunk, const sc_cut *spec, size_t n);

/* CRC32C (Castagnoli), as Kafka's record batches carry it: crc32c(0, data, len); with the
 * SSE4.2 instruction where the CPU has it, else `sc_crc32c_table` (slicing by 8). */
uint32_t sc_crc32c(uint32_t crc, const uint8_t *data, size_t len);
uint32_t sc_crc32c_table(uint32_t crc, const uint8_t *data, size_t len);

#endif
