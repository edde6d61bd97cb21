/* The W3C trace context checks the engine makes before it keeps a record's own traceparent
 * (proxy/native/relay_trace.c), on hostile header values. tests/unit/proxy/native/test_relay_trace.py
 * holds them to the Python functions; here they must read nothing outside the value, and
 * what they accept must have the shape the rules ask for. */
#include "common.h"
#include "relay_trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *v = malloc(size ? size : 1); /* exact size: ASan sees a read past it */
    memcpy(v, data, size);
    if (nt_valid_traceparent(v, (int64_t)size)) {
        FUZZ_CHECK(size >= 55 && v[2] == '-' && v[35] == '-' && v[52] == '-',
                   "a valid traceparent of %zu bytes", size);
        FUZZ_CHECK(size == 55 || !(v[0] == '0' && v[1] == '0'), "version 00 goes on");
    }
    if (nt_valid_tracestate(v, (int64_t)size)) {
        for (size_t i = 0; i < size; i++) {
            FUZZ_CHECK(v[i] < 0x80, "a valid tracestate with a non-ASCII byte");
        }
    }
    FUZZ_CHECK(!nt_valid_traceparent(NULL, -1) && !nt_valid_tracestate(NULL, -1),
               "a null value is valid");
    free(v);
    return 0;
}
