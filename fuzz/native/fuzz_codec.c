/* The engine's codecs (proxy/native/relay_codec.c nk_decompress, nk_compress) on hostile
 * records sections.
 *
 * The first input byte picks the codec (gzip, snappy, lz4, zstd; bits 0-1) and the limit
 * (bits 2-7: from 0 to 1 MiB), the rest is the compressed section, as a client or a broker
 * sends it inside a batch whose CRC32C is right. Besides reading nothing outside the input
 * and no undefined behaviour:
 *   - the output never passes the limit, and the buffer never grows past the limit and one
 *     byte, whatever sizes the frame announces (the bound protocol/compression.py keeps);
 *   - what decompresses, compressed again by the engine, decompresses to the same bytes
 *     (what the engine writes after stamping, it reads back: and so does Python,
 *     tests/unit/proxy/native/test_native_codecs.py);
 *   - the engine's lz4 writing of the same bytes is always the same (it is Python's). */
#include "common.h"
#include "relay_codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) {
        return 0;
    }
    int codec = 1 + (data[0] & 3);
    size_t limit = ((size_t)(data[0] >> 2) * (1024 * 1024)) / 63;
    nk_buf out = {0};
    const char *why = NULL;
    int r = nk_decompress(codec, data + 1, size - 1, limit, &out, &why);
    FUZZ_CHECK(r == NK_OK || r == NK_BAD || r == NK_TOO_LARGE, "result %d", r);
    FUZZ_CHECK(out.cap <= limit + 1, "grew to %zu for a limit of %zu", out.cap, limit);
    if (r == NK_BAD) {
        FUZZ_CHECK(why != NULL, "no reason");
    }
    if (r == NK_OK) {
        FUZZ_CHECK(out.len <= limit, "%zu bytes past a limit of %zu", out.len, limit);
        nk_buf packed = {0}, again = {0};
        FUZZ_CHECK(nk_compress(codec, out.buf, out.len, &packed, &why) == NK_OK,
                   "cannot compress: %s", why);
        r = nk_decompress(codec, packed.buf, packed.len, out.len, &again, &why);
        FUZZ_CHECK(r == NK_OK && again.len == out.len &&
                       (out.len == 0 || memcmp(again.buf, out.buf, out.len) == 0),
                   "codec %d: what the engine writes it does not read back (%d)", codec, r);
        if (codec == NK_LZ4) {
            nk_buf twice = {0};
            FUZZ_CHECK(nk_compress(codec, out.buf, out.len, &twice, &why) == NK_OK &&
                           twice.len == packed.len &&
                           memcmp(twice.buf, packed.buf, packed.len) == 0,
                       "lz4 written two ways");
            nk_buf_free(&twice);
        }
        nk_buf_free(&packed);
        nk_buf_free(&again);
    }
    nk_buf_free(&out);
    return 0;
}
