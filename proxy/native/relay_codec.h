/* Record-batch codecs for the native relay: see relay_codec.c. No Python objects. */
#ifndef HERALD_RELAY_CODEC_H
#define HERALD_RELAY_CODEC_H

#include <stddef.h>
#include <stdint.h>

/* Codec ids, bits 0-2 of a batch's attributes, and NK_CODEC_NAMES: contracts/native_relay.h,
 * from protocol/compression.py. */
#include "contracts/native_relay.h"

/* The codecs whose batches the engine stamps (relay_stamp.c) and scans (relay_fetch.c)
 * itself: the decision module reads them (through _relay.c) to tell a compressed batch the
 * engine keeps from one that goes to Python. Bit n set: codec n. */
#define NK_NATIVE_CODECS ((1u << NK_GZIP) | (1u << NK_SNAPPY) | (1u << NK_LZ4) | (1u << NK_ZSTD))

/* A growing output buffer. */
typedef struct {
    uint8_t *buf;
    size_t len, cap;
} nk_buf;

void nk_buf_free(nk_buf *b);

/* Room for `more` bytes past b->len, growing at most to `most` bytes past it (a doubling
 * that would go further stops there): 0 when out of memory. */
int nk_reserve(nk_buf *b, size_t more, size_t most);

enum { NK_OK = 0, NK_BAD = 1, NK_TOO_LARGE = 2, NK_NOMEM = 3 };

/* Decompress one batch's records section src[0..n) of `codec`, appending at most `limit`
 * bytes to out. NK_OK; NK_BAD (corrupt, or a frame Python refuses: *why says what);
 * NK_TOO_LARGE (it holds more than `limit`); NK_NOMEM. The buffer never grows past
 * out->len + limit + 1, whatever the data announces. */
int nk_decompress(int codec, const uint8_t *src, size_t n, size_t limit, nk_buf *out,
                  const char **why);

/* Compress src[0..n) with `codec` framed as protocol/compression.py `compress` frames it
 * (library default level), appending to out: NK_OK, NK_NOMEM, or NK_BAD (*why). */
int nk_compress(int codec, const uint8_t *src, size_t n, nk_buf *out, const char **why);

#endif
