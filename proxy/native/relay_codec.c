/* Record-batch codecs for the native relay: gzip (zlib), snappy (libsnappy's C API), lz4
 * (liblz4's block API, framed here) and zstd (libzstd), the system libraries every Linux
 * distribution keeps patched, so the engine carries no codec of its own.
 *
 * protocol/compression.py is the reference, and this file reads and writes what it does:
 * - the same frames accepted: lz4 frames with the checks of Kafka's Java reader (version 01,
 *   independent blocks, no reserved bits, a valid descriptor checksum; block and content
 *   checksums skipped), snappy raw or in xerial framing (known by its magic alone), gzip
 *   members one after the other (trailing bytes that start no member ignored), zstd frames
 *   and skippable frames;
 * - the same frames written: lz4 with fixed flags (version 01, independent 64 KiB blocks, no
 *   checksums, a block stored when it does not shrink; byte for byte what Python writes, both
 *   compressing blocks with LZ4_compress_default), snappy in xerial framing with 32 KiB
 *   blocks, gzip and zstd at the library's default level.
 * - the same bound: decompression stops at the caller's limit and never allocates past it,
 *   whatever sizes a forged header announces. Snappy's length prefix is checked before
 *   anything is allocated; lz4 blocks decode into at most their announced maximum; zstd
 *   decodes in one shot into a buffer sized from its frame and block headers (never a
 *   streaming window, which a forged header could make 128 MiB); gzip inflates into a buffer
 *   that grows up to the limit.
 * A frame the engine does not accept goes to Python, which accepts or refuses it.
 *
 * The zstd contexts are kept per thread (the engine's, or a test's) and freed with it.
 */
#include "relay_codec.h"

#include <lz4.h>
#include <pthread.h>
#include <snappy-c.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

void nk_buf_free(nk_buf *b) {
    free(b->buf);
    b->buf = NULL;
    b->len = b->cap = 0;
}

int nk_reserve(nk_buf *b, size_t more, size_t most) {
    if (b->buf != NULL && b->cap - b->len >= more) {
        return 1;
    }
    size_t want = b->cap ? b->cap * 2 : 4096;
    if (want - b->len < more) {
        want = b->len + more;
    }
    if (want - b->len > most && most >= more) {
        want = b->len + most;
    }
    if (want == 0) {
        want = 1; /* a buffer to point into, even for nothing */
    }
    uint8_t *grown = realloc(b->buf, want);
    if (grown == NULL) {
        return 0;
    }
    b->buf = grown;
    b->cap = want;
    return 1;
}

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_le32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* ---- per-thread zstd contexts ------------------------------------------------------------ */

typedef struct {
    ZSTD_CCtx *c;
    ZSTD_DCtx *d;
} zstd_ctx;

static pthread_key_t zstd_key;
static pthread_once_t zstd_once = PTHREAD_ONCE_INIT;

static void zstd_free(void *p) {
    zstd_ctx *z = p;
    ZSTD_freeCCtx(z->c);
    ZSTD_freeDCtx(z->d);
    free(z);
}

static void zstd_key_init(void) {
    pthread_key_create(&zstd_key, zstd_free);
}

static zstd_ctx *zstd_for_thread(void) {
    pthread_once(&zstd_once, zstd_key_init);
    zstd_ctx *z = pthread_getspecific(zstd_key);
    if (z == NULL) {
        z = calloc(1, sizeof *z);
        if (z == NULL || pthread_setspecific(zstd_key, z) != 0) {
            free(z);
            return NULL;
        }
    }
    return z;
}

/* ---- lz4 --------------------------------------------------------------------------------- */

static const uint8_t LZ4_MAGIC[4] = {0x04, 0x22, 0x4d, 0x18};
#define LZ4_FRAME_BLOCK (64 * 1024)

static uint32_t rotl(uint32_t v, int n) {
    return v << n | v >> (32 - n);
}

/* xxHash32, seed 0, of fewer than 16 bytes: what an lz4 frame descriptor checksum needs. */
static uint32_t xxh32_short(const uint8_t *p, size_t n) {
    const uint32_t P1 = 0x9E3779B1u, P2 = 0x85EBCA77u, P3 = 0xC2B2AE3Du, P4 = 0x27D4EB2Fu,
                   P5 = 0x165667B1u;
    uint32_t acc = P5 + (uint32_t)n;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        acc = rotl(acc + le32(p + i) * P3, 17) * P4;
    }
    for (; i < n; i++) {
        acc = rotl(acc + p[i] * P5, 11) * P1;
    }
    acc ^= acc >> 15;
    acc *= P2;
    acc ^= acc >> 13;
    acc *= P3;
    return acc ^ (acc >> 16);
}

static uint8_t lz4_header_checksum(const uint8_t *descriptor, size_t n) {
    return (uint8_t)(xxh32_short(descriptor, n) >> 8);
}

static int lz4_decompress(const uint8_t *src, size_t n, size_t limit, nk_buf *out,
                          const char **why) {
    if (n < 7 || memcmp(src, LZ4_MAGIC, 4) != 0) {
        *why = "not an lz4 frame";
        return NK_BAD;
    }
    uint8_t flg = src[4], bd = src[5];
    if (flg >> 6 != 1) {
        *why = "unsupported lz4 frame version";
        return NK_BAD;
    }
    if (!(flg & 0x20)) {
        *why = "lz4 frames with linked blocks are not supported";
        return NK_BAD;
    }
    if ((flg & 0x03) || (bd & 0x8F)) {
        *why = "lz4 frame descriptor reserved bits set";
        return NK_BAD;
    }
    int id = (bd >> 4) & 7;
    if (id < 4) {
        *why = "bad lz4 block maximum size";
        return NK_BAD;
    }
    size_t block_max = (size_t)1 << (8 + 2 * id); /* 4: 64 KiB ... 7: 4 MiB */
    size_t checksum = (flg & 0x10) ? 4 : 0;
    size_t pos = 6 + ((flg & 0x08) ? 8 : 0);
    if (pos >= n || src[pos] != lz4_header_checksum(src + 4, pos - 4)) {
        *why = "lz4 frame descriptor checksum mismatch";
        return NK_BAD;
    }
    pos++;
    size_t room = limit;
    for (;;) {
        if (pos > n || n - pos < 4) {
            *why = "truncated lz4 frame";
            return NK_BAD;
        }
        uint32_t size = le32(src + pos);
        pos += 4;
        if (size == 0) {
            return NK_OK; /* the end mark; a content checksum may follow, skipped as in Java */
        }
        int stored = (size & 0x80000000u) != 0;
        size &= 0x7FFFFFFFu;
        if (size > block_max || size > n - pos) {
            *why = "lz4 block size out of range";
            return NK_BAD;
        }
        const uint8_t *block = src + pos;
        pos += size + checksum;
        if (stored) {
            if (size > room) {
                return NK_TOO_LARGE;
            }
            if (!nk_reserve(out, size, room)) {
                return NK_NOMEM;
            }
            memcpy(out->buf + out->len, block, size);
            out->len += size;
            room -= size;
            continue;
        }
        size_t cap = block_max < room ? block_max : room;
        if (!nk_reserve(out, cap, room)) {
            return NK_NOMEM;
        }
        int got = LZ4_decompress_safe((const char *)block, (char *)out->buf + out->len,
                                      (int)size, (int)cap);
        if (got < 0) {
            /* corrupt, or more than the room left: Python tells which */
            *why = "an lz4 block that does not decode within the limit";
            return cap < block_max ? NK_TOO_LARGE : NK_BAD;
        }
        out->len += (size_t)got;
        room -= (size_t)got;
    }
}

static int lz4_compress(const uint8_t *src, size_t n, nk_buf *out) {
    size_t blocks = n / LZ4_FRAME_BLOCK + 1;
    size_t most = 7 + blocks * (4 + (size_t)LZ4_COMPRESSBOUND(LZ4_FRAME_BLOCK)) + 4;
    if (!nk_reserve(out, most, most)) {
        return NK_NOMEM;
    }
    uint8_t *w = out->buf + out->len;
    memcpy(w, LZ4_MAGIC, 4);
    w[4] = 0x60; /* version 01, independent blocks, no checksums, no content size */
    w[5] = 0x40; /* 64 KiB blocks */
    w[6] = lz4_header_checksum(w + 4, 2);
    w += 7;
    for (size_t i = 0; i < n; i += LZ4_FRAME_BLOCK) {
        int raw = (int)(n - i < LZ4_FRAME_BLOCK ? n - i : LZ4_FRAME_BLOCK);
        int got = LZ4_compress_default((const char *)src + i, (char *)w + 4, raw,
                                       LZ4_COMPRESSBOUND(LZ4_FRAME_BLOCK));
        if (got <= 0 || got >= raw) { /* incompressible: stored, the size's high bit set */
            put_le32(w, (uint32_t)raw | 0x80000000u);
            memcpy(w + 4, src + i, (size_t)raw);
            got = raw;
        } else {
            put_le32(w, (uint32_t)got);
        }
        w += 4 + (size_t)got;
    }
    put_le32(w, 0);
    w += 4;
    out->len = (size_t)(w - out->buf);
    return NK_OK;
}

/* ---- zstd -------------------------------------------------------------------------------- */

#define ZSTD_MAGIC 0xFD2FB528u
#define ZSTD_BLOCK_MAX (128 * 1024)

/* An upper bound of what the frames regenerate, from their frame and block headers alone
 * (protocol/compression.py `_zstd_bound`): 0 and *why when they are not zstd frames. */
static int zstd_bound(const uint8_t *p, size_t end, uint64_t *bound, const char **why) {
    uint64_t pos = 0;
    *bound = 0;
    while (pos < end) {
        if (end - pos < 4) {
            *why = "truncated zstd frame";
            return 0;
        }
        uint32_t magic = le32(p + pos);
        if ((magic & 0xFFFFFFF0u) == 0x184D2A50u) { /* skippable */
            if (end - pos < 8) {
                *why = "truncated zstd frame";
                return 0;
            }
            pos += 8 + (uint64_t)le32(p + pos + 4);
            continue;
        }
        if (magic != ZSTD_MAGIC) {
            *why = "not a zstd frame";
            return 0;
        }
        if (end - pos < 5) {
            *why = "truncated zstd frame";
            return 0;
        }
        uint8_t fhd = p[pos + 4];
        int single = (fhd & 0x20) != 0;
        static const int FCS[4] = {0, 2, 4, 8}, DID[4] = {0, 1, 2, 4};
        int fcs = FCS[fhd >> 6] ? FCS[fhd >> 6] : single;
        pos += 5 + (single ? 0 : 1) + (uint64_t)DID[fhd & 3] + (uint64_t)fcs;
        for (;;) {
            if (pos > end || end - pos < 3) {
                *why = "truncated zstd frame";
                return 0;
            }
            uint32_t header = (uint32_t)p[pos] | (uint32_t)p[pos + 1] << 8 |
                              (uint32_t)p[pos + 2] << 16;
            pos += 3;
            uint32_t kind = (header >> 1) & 3, size = header >> 3;
            if (kind == 0) {
                *bound += size;
                pos += size;
            } else if (kind == 1) {
                *bound += size;
                pos += 1;
            } else if (kind == 2) {
                if (size > ZSTD_BLOCK_MAX) {
                    *why = "zstd block too large";
                    return 0;
                }
                *bound += ZSTD_BLOCK_MAX;
                pos += size;
            } else {
                *why = "reserved zstd block type";
                return 0;
            }
            if (header & 1) {
                break;
            }
        }
        if (fhd & 0x04) {
            pos += 4;
        }
    }
    if (pos > end) {
        *why = "truncated zstd frame";
        return 0;
    }
    return 1;
}

static int zstd_decompress(const uint8_t *src, size_t n, size_t limit, nk_buf *out,
                           const char **why) {
    uint64_t bound;
    if (!zstd_bound(src, n, &bound, why)) {
        return NK_BAD;
    }
    if (bound == 0) {
        return NK_OK;
    }
    /* As Python: into a buffer of the bound, or of one byte over the limit when the bound
     * is larger (filling it means the data is too large). */
    size_t cap = bound > (uint64_t)limit ? limit + 1 : (size_t)bound;
    zstd_ctx *z = zstd_for_thread();
    if (z == NULL || (z->d == NULL && (z->d = ZSTD_createDCtx()) == NULL) ||
        !nk_reserve(out, cap, cap)) {
        return NK_NOMEM;
    }
    size_t got = ZSTD_decompressDCtx(z->d, out->buf + out->len, cap, src, n);
    if (ZSTD_isError(got)) {
        if (bound > (uint64_t)limit) {
            return NK_TOO_LARGE;
        }
        *why = ZSTD_getErrorName(got);
        return NK_BAD;
    }
    if (got > limit) {
        return NK_TOO_LARGE;
    }
    out->len += got;
    return NK_OK;
}

static int zstd_compress(const uint8_t *src, size_t n, nk_buf *out, const char **why) {
    size_t most = ZSTD_compressBound(n);
    zstd_ctx *z = zstd_for_thread();
    if (z == NULL || (z->c == NULL && (z->c = ZSTD_createCCtx()) == NULL) ||
        !nk_reserve(out, most, most)) {
        return NK_NOMEM;
    }
    size_t got = ZSTD_compressCCtx(z->c, out->buf + out->len, most, src, n,
                                   ZSTD_CLEVEL_DEFAULT);
    if (ZSTD_isError(got)) {
        *why = ZSTD_getErrorName(got);
        return NK_BAD;
    }
    out->len += got;
    return NK_OK;
}

/* ---- gzip -------------------------------------------------------------------------------- */

static int gzip_decompress(const uint8_t *src, size_t n, size_t limit, nk_buf *out,
                           const char **why) {
    size_t room = limit;
    const uint8_t *rest = src;
    size_t left = n;
    for (;;) {
        z_stream zs;
        memset(&zs, 0, sizeof zs);
        if (inflateInit2(&zs, 31) != Z_OK) {
            return NK_NOMEM;
        }
        size_t start = out->len, produced = 0;
        int result = NK_OK;
        zs.next_in = (Bytef *)rest;
        for (;;) {
            /* At most room + 1 bytes per member, as Python's max_length: one byte more than
             * the room left means too large. */
            if (out->cap == out->len) {
                size_t most = room + 1 - produced;
                size_t want = 4 * left > 65536 ? 4 * left : 65536;
                if (!nk_reserve(out, want < most ? want : most, most)) {
                    result = NK_NOMEM;
                    break;
                }
            }
            size_t space = out->cap - out->len;
            if (space > room + 1 - produced) {
                space = room + 1 - produced;
            }
            uInt in_chunk = left > UINT32_MAX ? UINT32_MAX : (uInt)left;
            uInt out_chunk = space > UINT32_MAX ? UINT32_MAX : (uInt)space;
            zs.avail_in = in_chunk;
            zs.next_out = out->buf + out->len;
            zs.avail_out = out_chunk;
            int r = inflate(&zs, Z_NO_FLUSH);
            size_t made = out_chunk - zs.avail_out, used = in_chunk - zs.avail_in;
            out->len += made;
            produced += made;
            left -= used;
            if (produced > room) {
                result = NK_TOO_LARGE;
                break;
            }
            if (r == Z_STREAM_END) {
                break;
            }
            if (r == Z_OK || (r == Z_BUF_ERROR && zs.avail_out == 0)) {
                if (left == 0 && zs.avail_out > 0) {
                    *why = "truncated gzip data";
                    result = NK_BAD;
                    break;
                }
                continue; /* more output room, or more input in the next chunk */
            }
            *why = r == Z_BUF_ERROR ? "truncated gzip data" : "corrupt gzip data";
            result = NK_BAD;
            break;
        }
        rest = zs.next_in;
        inflateEnd(&zs);
        if (result != NK_OK) {
            return result;
        }
        room -= out->len - start;
        /* Like Java's GZIPInputStream: another member follows, or the data ends here (what
         * follows is ignored). */
        if (left < 2 || rest[0] != 0x1f || rest[1] != 0x8b) {
            return NK_OK;
        }
    }
}

static int gzip_compress(const uint8_t *src, size_t n, nk_buf *out, const char **why) {
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY) !=
        Z_OK) {
        return NK_NOMEM;
    }
    size_t most = deflateBound(&zs, (uLong)n);
    if (n > UINT32_MAX || !nk_reserve(out, most, most)) {
        deflateEnd(&zs);
        return NK_NOMEM;
    }
    zs.next_in = (Bytef *)src;
    zs.avail_in = (uInt)n;
    zs.next_out = out->buf + out->len;
    zs.avail_out = (uInt)most;
    int r = deflate(&zs, Z_FINISH);
    size_t made = most - zs.avail_out;
    deflateEnd(&zs);
    if (r != Z_STREAM_END) {
        *why = "gzip compression failed";
        return NK_BAD;
    }
    out->len += made;
    return NK_OK;
}

/* ---- snappy ------------------------------------------------------------------------------ */

static const uint8_t XERIAL_MAGIC[8] = {0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0};
#define XERIAL_BLOCK (32 * 1024)

static int snappy_raw(const uint8_t *block, size_t n, size_t *room, nk_buf *out,
                      const char **why) {
    size_t size;
    if (n == 0) {
        *why = "empty snappy block";
        return NK_BAD;
    }
    if (snappy_uncompressed_length((const char *)block, n, &size) != SNAPPY_OK) {
        *why = "corrupt snappy data";
        return NK_BAD;
    }
    if (size > *room) {
        return NK_TOO_LARGE;
    }
    if (!nk_reserve(out, size, size)) {
        return NK_NOMEM;
    }
    size_t got = size;
    if (snappy_uncompress((const char *)block, n, (char *)out->buf + out->len, &got) !=
            SNAPPY_OK ||
        got != size) {
        *why = "corrupt snappy data";
        return NK_BAD;
    }
    out->len += size;
    *room -= size;
    return NK_OK;
}

static int snappy_decompress(const uint8_t *src, size_t n, size_t limit, nk_buf *out,
                             const char **why) {
    size_t room = limit;
    if (n < 8 || memcmp(src, XERIAL_MAGIC, 8) != 0) {
        return snappy_raw(src, n, &room, out, why);
    }
    /* Only the magic tells the framing: writers disagree about the version fields. */
    if (n < 16) {
        *why = "truncated xerial snappy header";
        return NK_BAD;
    }
    size_t pos = 16;
    while (pos < n) {
        if (n - pos < 4) {
            *why = "truncated xerial snappy block length";
            return NK_BAD;
        }
        int32_t size = (int32_t)((uint32_t)src[pos] << 24 | (uint32_t)src[pos + 1] << 16 |
                                 (uint32_t)src[pos + 2] << 8 | src[pos + 3]);
        pos += 4;
        if (size < 0 || (size_t)size > n - pos) {
            *why = "xerial snappy block length out of range";
            return NK_BAD;
        }
        int r = snappy_raw(src + pos, (size_t)size, &room, out, why);
        if (r != NK_OK) {
            return r;
        }
        pos += (size_t)size;
    }
    return NK_OK;
}

static int snappy_compress_xerial(const uint8_t *src, size_t n, nk_buf *out,
                                  const char **why) {
    size_t blocks = n / XERIAL_BLOCK + 1;
    size_t most = 16 + blocks * (4 + snappy_max_compressed_length(XERIAL_BLOCK));
    if (!nk_reserve(out, most, most)) {
        return NK_NOMEM;
    }
    uint8_t *w = out->buf + out->len;
    memcpy(w, XERIAL_MAGIC, 8);
    put_be32(w + 8, 1); /* version */
    put_be32(w + 12, 1); /* compatible version */
    w += 16;
    for (size_t i = 0; i < n; i += XERIAL_BLOCK) {
        size_t raw = n - i < XERIAL_BLOCK ? n - i : XERIAL_BLOCK;
        size_t got = snappy_max_compressed_length(XERIAL_BLOCK);
        if (snappy_compress((const char *)src + i, raw, (char *)w + 4, &got) != SNAPPY_OK) {
            *why = "snappy compression failed";
            return NK_BAD;
        }
        put_be32(w, (uint32_t)got);
        w += 4 + got;
    }
    out->len = (size_t)(w - out->buf);
    return NK_OK;
}

/* ---- entry points ------------------------------------------------------------------------ */

int nk_decompress(int codec, const uint8_t *src, size_t n, size_t limit, nk_buf *out,
                  const char **why) {
    *why = "a codec the engine does not read";
    switch (codec) {
    case NK_GZIP:
        return gzip_decompress(src, n, limit, out, why);
    case NK_SNAPPY:
        return snappy_decompress(src, n, limit, out, why);
    case NK_LZ4:
        return lz4_decompress(src, n, limit, out, why);
    case NK_ZSTD:
        return zstd_decompress(src, n, limit, out, why);
    default:
        return NK_BAD;
    }
}

int nk_compress(int codec, const uint8_t *src, size_t n, nk_buf *out, const char **why) {
    *why = "a codec the engine does not write";
    switch (codec) {
    case NK_GZIP:
        return gzip_compress(src, n, out, why);
    case NK_SNAPPY:
        return snappy_compress_xerial(src, n, out, why);
    case NK_LZ4:
        return lz4_compress(src, n, out);
    case NK_ZSTD:
        return zstd_compress(src, n, out, why);
    default:
        return NK_BAD;
    }
}
