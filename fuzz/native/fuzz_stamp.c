/* Native Produce stamping (proxy/native/relay_stamp.c nc_stamp_produce) on hostile requests.
 *
 * The first input byte picks the plan (the shapes proxy/native/stamp_plan.py makes) and
 * whether the frame's size prefix is set to its length (so most inputs get past it); the
 * rest is the request frame. tests/unit/test_native_stamp.py holds the output to the Python
 * chain byte for byte; here, besides reading nothing outside the frame and no undefined
 * behaviour, a stamped request must:
 *   - keep its header (api key, version, correlation id) and declare its own size;
 *   - count at least one batch and as many records as it holds;
 *   - with the trace_context plan that keeps a client's own traceparent, come back byte for
 *     byte when stamped again: every record then carries one valid traceparent, which the
 *     engine keeps, and a batch it appends nothing to must not change. */
#include "common.h"
#include "relay_stamp.h"

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) {
        return 0;
    }
    uint8_t flags = data[0];
    size_t len = size - 1;
    uint8_t *frame = malloc(len); /* exact size: ASan sees a read past it */
    memcpy(frame, data + 1, len);
    if ((flags & 0x08) && len >= 4) {
        uint32_t n = (uint32_t)(len - 4);
        frame[0] = (uint8_t)(n >> 24);
        frame[1] = (uint8_t)(n >> 16);
        frame[2] = (uint8_t)(n >> 8);
        frame[3] = (uint8_t)n;
    }
    nc_plan plan;
    stamp_plan(&plan, flags & 7);
    nc_buf out = {0};
    out.limit = (flags & 0x10) ? 8192 : 0;
    nc_counts counts;
    const char *why = NULL;
    uint64_t state = flags;
    int r = nc_stamp_produce(frame, len, &plan, fuzz_draw, &state, 1700000000123LL, &out,
                             &counts, &why);
    FUZZ_CHECK(r == NC_OK || r == NC_PYTHON, "result %d", r);
    if (r == NC_PYTHON) {
        FUZZ_CHECK(why != NULL, "no reason to go to Python");
        FUZZ_CHECK(counts.batches == 0 && counts.records == 0, "counts of a refused request");
    } else {
        FUZZ_CHECK(out.len >= 12 && be32(out.buf) == out.len - 4, "size %u for %zu bytes",
                   out.len >= 4 ? be32(out.buf) : 0, out.len);
        FUZZ_CHECK(memcmp(out.buf + 4, frame + 4, 8) == 0, "header changed");
        FUZZ_CHECK(counts.batches > 0 && counts.records >= counts.batches &&
                       counts.kept <= counts.records && counts.kept_batches <= counts.batches,
                   "counts %llu %llu %llu %llu", (unsigned long long)counts.batches,
                   (unsigned long long)counts.records, (unsigned long long)counts.kept,
                   (unsigned long long)counts.kept_batches);
        FUZZ_CHECK(out.limit == 0 || out.len <= out.limit + len, "grew past its limit");
        if ((flags & 7) % 3 == 0) {
            nc_buf again = {0};
            nc_counts counts2;
            const char *why2 = NULL;
            int r2 = nc_stamp_produce(out.buf, out.len, &plan, fuzz_draw, &state,
                                      1700000000456LL, &again, &counts2, &why2);
            FUZZ_CHECK(r2 == NC_OK, "a stamped request is refused: %s", why2);
            FUZZ_CHECK(again.len == out.len && memcmp(again.buf, out.buf, out.len) == 0,
                       "stamping a stamped request changed it (%zu -> %zu bytes)", out.len,
                       again.len);
            FUZZ_CHECK(counts2.kept == counts2.records && counts2.records == counts.records,
                       "kept %llu of %llu records, stamped %llu",
                       (unsigned long long)counts2.kept, (unsigned long long)counts2.records,
                       (unsigned long long)counts.records);
            free(again.buf);
        }
    }
    free(out.buf);
    nc_plan_free(&plan);
    free(frame);
    return 0;
}
