/* The memory of fetched traces (protocol/link_memory.c) under a script of operations from the
 * input: remember, look up, time passing, an extra holder. tests/unit/interceptors/test_link_memory.py
 * holds its answers to the Python reference; here it must stay within its bounds (entries,
 * parents per entry), give back only parents remembered for that very (scope, trace), never
 * name or declare lost more parents than the (scope, trace) was given (a lookup's parents and
 * losses add up to at most what it remembered), read nothing outside what it is given and
 * free everything with its last holder. */
#include "common.h"
#include "link_memory.h"

#define SEEN_MAX 512

typedef struct {
    uint8_t scope, trace, topic_len;
    uint8_t topic[8];
    int32_t partition;
    int64_t offset;
} seen_t;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_in in = {data, size, 0};
    int64_t capacity = 1 + in_byte(&in) % 8, max_parents = 1 + in_byte(&in) % 4;
    double ttl = 0.5 + in_byte(&in) % 16;
    lm_memory *m = lm_new(capacity, ttl, max_parents);
    FUZZ_CHECK(m != NULL, "a memory with bounds >= 1");
    FUZZ_CHECK(lm_new(0, 1.0, 1) == NULL && lm_new(1, 0.0, 1) == NULL, "bad bounds accepted");
    seen_t *seen = calloc(SEEN_MAX, sizeof *seen);
    size_t nseen = 0;
    lm_parent *out = malloc((size_t)max_parents * sizeof *out);
    double now = 100.0;
    int held = 0;
    while (in.pos < in.len) {
        uint8_t op = in_byte(&in);
        uint8_t s = in_byte(&in) % 4, tr = in_byte(&in) % 8;
        uint8_t scope[3] = {'h', (uint8_t)('0' + s), 0};
        size_t scope_len = s == 3 ? 0 : 2; /* an empty scope too */
        uint8_t trace[LM_TRACE];
        memset(trace, 'a' + tr, LM_TRACE);
        switch (op % 5) {
        case 0:
        case 1: {
            size_t topic_len;
            const uint8_t *topic = in_bytes(&in, in_byte(&in) % 9, &topic_len);
            uint8_t *copy = malloc(topic_len ? topic_len : 1); /* exact: ASan sees overreads */
            memcpy(copy, topic, topic_len);
            int32_t partition = (int32_t)in_byte(&in) % 3;
            int64_t offset = in_byte(&in) % 6, evicted, expired;
            FUZZ_CHECK(lm_remember(m, scope, scope_len, trace, copy, topic_len, partition,
                                   offset, now, &evicted, &expired),
                       "remember failed");
            FUZZ_CHECK(evicted >= 0 && expired >= 0 && evicted <= 1, "evicted %lld",
                       (long long)evicted);
            if (nseen < SEEN_MAX) {
                seen_t *e = &seen[nseen++];
                e->scope = s;
                e->trace = tr;
                e->topic_len = (uint8_t)topic_len;
                memcpy(e->topic, copy, topic_len);
                e->partition = partition;
                e->offset = offset;
            }
            free(copy);
            break;
        }
        case 2: {
            uint32_t lost[3] = {7, 7, 7};
            int64_t n = lm_parents(m, scope, scope_len, trace, now, out, lost);
            FUZZ_CHECK(n >= -3 && n <= max_parents && n != 0, "%lld parents", (long long)n);
            uint64_t remembered = 0;
            for (size_t j = 0; j < nseen; j++) {
                remembered += seen[j].scope == s && seen[j].trace == tr;
            }
            uint64_t total = (uint64_t)(n > 0 ? n : 0) + lost[0] + lost[1] + lost[2];
            FUZZ_CHECK(total <= remembered || nseen == SEEN_MAX,
                       "%llu parents named or lost of %llu remembered",
                       (unsigned long long)total, (unsigned long long)remembered);
            FUZZ_CHECK(n != -1 - LM_UNSEEN || (lost[0] | lost[1] | lost[2]) == 0,
                       "losses declared for a key never seen");
            FUZZ_CHECK(n != -1 - LM_EXPIRED || lost[0] > 0, "expired with no parent lost");
            for (int64_t i = 0; i < n; i++) {
                int found = 0;
                for (size_t j = 0; j < nseen && !found; j++) {
                    const seen_t *e = &seen[j];
                    found = e->scope == s && e->trace == tr && e->topic_len == out[i].topic_len &&
                            memcmp(e->topic, out[i].topic, e->topic_len) == 0 &&
                            e->partition == out[i].partition && e->offset == out[i].offset;
                }
                FUZZ_CHECK(found || nseen == SEEN_MAX, "a parent never remembered");
            }
            lm_parents_free(out, n > 0 ? n : 0);
            break;
        }
        case 3:
            now += (double)(op >> 3) / 4;
            break;
        case 4:
            if (!held) {
                lm_retain(m);
                held = 1;
            } else {
                lm_release(m);
                held = 0;
            }
            break;
        }
        FUZZ_CHECK(lm_size(m) >= 0 && lm_size(m) <= capacity, "%lld entries over %lld",
                   (long long)lm_size(m), (long long)capacity);
    }
    lm_counts c;
    lm_counters(m, &c);
    FUZZ_CHECK(c.remembered <= nseen || nseen == SEEN_MAX, "counted more than remembered");
    if (held) {
        lm_release(m);
    }
    lm_release(m);
    free(out);
    free(seen);
    return 0;
}
