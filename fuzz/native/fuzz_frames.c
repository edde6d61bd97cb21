/* The engine's header readers on hostile bytes (proxy/native/relay_frames.c): the `acks` of a
 * Produce request and the top-level tagged fields of a Produce v10-13 response.
 *
 * Property of nr_produce_acks: the engine asks it again as more of a request arrives, so its
 * answer on any prefix must agree with its answer on the whole frame: "need more" (0), or the
 * same answer. A prefix that says "unreadable" (-1) while the whole request is readable sends
 * a legitimate request to Python (the defect of a partly read flexible header). */
#include "common.h"
#include "relay_frames.h"

#define MAX_FRAME 600

static void acks_agree(const uint8_t *frame, size_t len, int ver) {
    int16_t whole_acks = 0;
    int whole = nr_produce_acks(frame, len, ver, &whole_acks);
    FUZZ_CHECK(whole >= -1 && whole <= 1, "answer %d", whole);
    for (size_t k = 0; k < len; k++) {
        int16_t acks = 0;
        int part = nr_produce_acks(frame, k, ver, &acks);
        if (part == 1) {
            FUZZ_CHECK(whole == 1 && acks == whole_acks,
                       "v%d: %zu of %zu bytes read acks %d, the whole frame %d (%d)", ver, k,
                       len, acks, whole, whole_acks);
        } else if (part == -1) {
            FUZZ_CHECK(whole == -1, "v%d: %zu of %zu bytes unreadable, the whole frame %d",
                       ver, k, len, whole);
        } else {
            FUZZ_CHECK(part == 0, "answer %d", part);
        }
    }
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
    int64_t tags = nr_top_level_tags(frame, len, NR_PRODUCE, 10 + (data[0] >> 5) % 4);
    FUZZ_CHECK(tags >= -1, "%lld tags", (long long)tags);
    FUZZ_CHECK(nr_top_level_tags(frame, len, NR_FETCH, 16) == -1, "not a Produce response");
    size_t pos = data[0] % 16;
    uint64_t v;
    int r = nr_uvarint(frame, &pos, len, &v);
    FUZZ_CHECK(r >= -1 && r <= 1 && (r != 1 || pos <= len), "uvarint %d at %zu", r, pos);
    free(frame);
    return 0;
}
