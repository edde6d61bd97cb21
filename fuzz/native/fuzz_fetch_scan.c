/* The native Fetch scan (proxy/native/relay_fetch.c nf_scan_fetch) on hostile responses.
 *
 * The input's last byte picks the API (bit 1: ShareFetch, else Fetch); the first byte the
 * version (Fetch v4-v18, ShareFetch v0-v2: v0 the scan does not read), whether top-level
 * tagged fields are checked, and the shape of the rest:
 *   - a whole response frame (its size prefix set to its length when the flag says so);
 *   - one partition's records field, whose record batches get their CRC32C made right and
 *     which is put in a well-formed response of that version: the scan checks the CRC
 *     before it reads a record, so this is how mutated records reach the record walk; with
 *     the 0x20 flag (and not 0x40) its whole batches are then compressed (codec from bits
 *     2-3 of the first record byte), to reach the walk through the engine's decompression.
 * When the input's last byte is odd, the plan has links (trace_context `link`: a memory,
 * protocol/link_memory.c, and the names of the topic ids) and the scan remembers the traced
 * records it passes.
 * tests/unit/proxy/native/test_fetch_plan.py and test_native_links.py hold the verdicts and what is
 * remembered to the Python fetch chain; here the scan must read nothing outside the frame,
 * what it counts must fit what the frame holds, and it remembers no more records than it
 * passes (none when it does not pass). The same frame is also scanned as the engine scans a
 * response that arrived in pieces: nf_verify_prefix over two prefixes (cut where the input's
 * second and last bytes say, each an exact-size copy: it must read nothing past what is
 * here), then nf_scan_fetch_verified, whose verdict, reason and counts must be the whole
 * scan's. */
#include "common.h"
#include "relay_fetch.h"
#include "stamp_core.h"

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Give every whole batch of a records field its right CRC32C; the number of them. */
static size_t seal(uint8_t *f, size_t n) {
    size_t pos = 0, batches = 0;
    while (n - pos >= 61) {
        int64_t length = (int32_t)be32(f + pos + 8);
        if (length < 49 || (uint64_t)length + 12 > n - pos) {
            break;
        }
        size_t size = (size_t)length + 12;
        put_be32(f + pos + 17, sc_crc32c(0, f + pos + 21, size - 21));
        pos += size;
        batches++;
    }
    return batches;
}

typedef struct {
    uint8_t *p;
    size_t len, cap;
} out_t;

static void put(out_t *o, const void *b, size_t n) {
    if (n == 0) {
        return;
    }
    if (o->len + n > o->cap) {
        o->cap = (o->len + n) * 2;
        o->p = realloc(o->p, o->cap);
        if (o->p == NULL) {
            abort();
        }
    }
    memcpy(o->p + o->len, b, n);
    o->len += n;
}

static void put_uvarint(out_t *o, uint64_t v) {
    uint8_t b[10];
    size_t n = (size_t)(sc_put_varint(b, v) - b);
    put(o, b, n);
}

static void put_int(out_t *o, uint64_t v, int width) {
    uint8_t b[8];
    for (int i = 0; i < width; i++) {
        b[i] = (uint8_t)(v >> (8 * (width - 1 - i)));
    }
    put(o, b, (size_t)width);
}

/* One topic (known by id from TOPIC_ID_VERSION), one partition holding `records`, in a
 * response of `ver` (protocol/messages/fetch_response.py). */
static void response(out_t *o, int ver, const uint8_t *records, size_t n) {
    int flexible = ver >= FETCH_FLEXIBLE_VERSION;
    put_int(o, 0, 4);       /* size, set below */
    put_int(o, 7, 4);       /* correlation id */
    if (flexible) {
        put_uvarint(o, 0); /* header tagged fields */
    }
    put_int(o, 0, 4); /* throttle time */
    if (ver >= FETCH_SESSION_VERSION) {
        put_int(o, 0, 2); /* error code */
        put_int(o, 0, 4); /* session id */
    }
    if (flexible) {
        put_uvarint(o, 2);
    } else {
        put_int(o, 1, 4);
    }
    if (ver >= TOPIC_ID_VERSION) {
        put(o, TOPIC_ID_A, 16);
    } else if (flexible) {
        put_uvarint(o, 2);
        put(o, "t", 1);
    } else {
        put_int(o, 1, 2);
        put(o, "t", 1);
    }
    if (flexible) {
        put_uvarint(o, 2);
    } else {
        put_int(o, 1, 4);
    }
    put_int(o, 0, 4);  /* index */
    put_int(o, 0, 2);  /* error */
    put_int(o, 10, 8); /* high watermark */
    put_int(o, 10, 8); /* last stable offset */
    if (ver >= FETCH_LOG_START_OFFSET_VERSION) {
        put_int(o, 0, 8); /* log start offset */
    }
    if (flexible) {
        put_uvarint(o, 0); /* null aborted transactions */
    } else {
        put_int(o, (uint64_t)-1, 4);
    }
    if (ver >= FETCH_PREFERRED_READ_REPLICA_VERSION) {
        put_int(o, (uint64_t)-1, 4); /* preferred read replica */
    }
    if (flexible) {
        put_uvarint(o, n + 1);
    } else {
        put_int(o, n, 4);
    }
    put(o, records, n);
    if (flexible) {
        put_uvarint(o, 0); /* partition, topic and top-level tagged fields */
        put_uvarint(o, 0);
        put_uvarint(o, 0);
    }
    put_be32(o->p, (uint32_t)(o->len - 4));
}

/* The same for a ShareFetch response (protocol/messages/share_fetch_response.py): one topic
 * by id, one partition holding `records`, acquired from offset 0 to 9, no node endpoints. */
static void share_response(out_t *o, int ver, const uint8_t *records, size_t n) {
    put_int(o, 0, 4); /* size, set below */
    put_int(o, 7, 4); /* correlation id */
    put_uvarint(o, 0); /* header tagged fields */
    put_int(o, 0, 4); /* throttle time */
    put_int(o, 0, 2); /* error code */
    put_uvarint(o, 0); /* null error message */
    if (ver >= SHARE_FETCH_LOCK_TIMEOUT_VERSION) {
        put_int(o, 30000, 4); /* acquisition lock timeout */
    }
    put_uvarint(o, 2);
    put(o, TOPIC_ID_A, 16);
    put_uvarint(o, 2);
    put_int(o, 0, 4); /* index */
    put_int(o, 0, 2); /* error */
    put_uvarint(o, 0); /* null error message */
    put_int(o, 0, 2); /* acknowledge error */
    put_uvarint(o, 0); /* null acknowledge error message */
    put_int(o, 1, 4);  /* current leader: id, epoch, tagged fields */
    put_int(o, 0, 4);
    put_uvarint(o, 0);
    put_uvarint(o, n + 1);
    put(o, records, n);
    put_uvarint(o, 2); /* one acquired range */
    put_int(o, 0, 8);
    put_int(o, 9, 8);
    put_int(o, 1, 2);
    put_uvarint(o, 0);
    put_uvarint(o, 0); /* partition tagged fields, topic's */
    put_uvarint(o, 0);
    put_uvarint(o, 1); /* no node endpoints */
    put_uvarint(o, 0); /* top-level tagged fields */
    put_be32(o->p, (uint32_t)(o->len - 4));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) {
        return 0;
    }
    uint8_t flags = data[0];
    int api = (data[size - 1] & 2) ? NR_SHARE_FETCH : NR_FETCH;
    int ver = api == NR_SHARE_FETCH
                  ? (flags & 0x0f) % (NF_SHARE_MAX_VERSION + 1)
                  : NF_MIN_VERSION + flags % (NF_MAX_VERSION - NF_MIN_VERSION + 1);
    int check_tags = (flags >> 4) & 1;
    size_t n = size - 1;
    out_t o = {0};
    size_t sealed = (size_t)-1;
    if (flags & 0x80) {
        uint8_t *records = malloc(n ? n : 1);
        memcpy(records, data + 1, n);
        sealed = seal(records, n);
        if ((flags & 0x60) == 0x20 && n > 0) {
            size_t packed_len;
            uint8_t *packed = compress_batches(records, n, 1 + (data[1] >> 2) % 4, &packed_len);
            free(records);
            records = packed;
            n = packed_len;
        }
        if (api == NR_SHARE_FETCH) {
            share_response(&o, ver, records, n);
        } else {
            response(&o, ver, records, n);
        }
        free(records);
    } else {
        put(&o, data + 1, n);
        if ((flags & 0x40) && n >= 4) {
            put_be32(o.p, (uint32_t)(n - 4));
        }
    }
    /* An exact-size copy: ASan sees a read past it. */
    uint8_t *frame = malloc(o.len ? o.len : 1);
    if (o.len > 0) {
        memcpy(frame, o.p, o.len);
    }
    nc_plan plan;
    fetch_plan(&plan);
    lm_memory *memory = NULL;
    if (data[size - 1] & 1) {
        memory = lm_new(16, 1e9, 2);
        must(memory != NULL);
        must(nc_plan_links(&plan, memory, (const uint8_t *)"h", 1, (const uint8_t *)"", 0));
        must(nc_plan_id_names(&plan, (const uint8_t *)"\0\1a\0\2bb", 7));
    }
    /* As the engine scans it: CRCs checked over two prefixes first. */
    nc_plan plan2;
    fetch_plan(&plan2);
    lm_memory *memory2 = NULL;
    if (memory != NULL) {
        memory2 = lm_new(16, 1e9, 2);
        must(memory2 != NULL);
        must(nc_plan_links(&plan2, memory2, (const uint8_t *)"h", 1, (const uint8_t *)"", 0));
        must(nc_plan_id_names(&plan2, (const uint8_t *)"\0\1a\0\2bb", 7));
    }
    size_t cuts[2] = {o.len * (size > 1 ? data[1] : 0) / 256, o.len * data[size - 1] / 255};
    if (cuts[1] < cuts[0]) {
        cuts[1] = cuts[0];
    }
    size_t verified = 0;
    for (int c = 0; c < 2; c++) {
        uint8_t *here = malloc(cuts[c] ? cuts[c] : 1);
        if (cuts[c] > 0) {
            memcpy(here, frame, cuts[c]);
        }
        size_t before = verified;
        verified = nf_verify_prefix(here, cuts[c], o.len, api, ver, &plan2, verified);
        FUZZ_CHECK(verified == before || (verified > before && verified <= cuts[c]),
                   "verified %zu after %zu, %zu here", verified, before, cuts[c]);
        free(here);
    }
    nc_counts counts2;
    const char *why2 = NULL;
    int r2 = nf_scan_fetch_verified(frame, o.len, api, ver, &plan2, check_tags, verified,
                                    &counts2, &why2);
    nc_counts counts;
    const char *why = NULL;
    int r = nf_scan_fetch(frame, o.len, api, ver, &plan, check_tags, &counts, &why);
    FUZZ_CHECK(r2 == r && (r == NC_OK || strcmp(why, why2) == 0) &&
                   counts2.batches == counts.batches && counts2.records == counts.records &&
                   counts2.remembered == counts.remembered,
               "prefix-verified scan: %d (%s) against %d (%s)", r2, r2 == NC_OK ? "" : why2, r,
               r == NC_OK ? "" : why);
    if (memory2 != NULL) {
        lm_release(memory2);
    }
    nc_plan_free(&plan2);
    FUZZ_CHECK(r == NC_OK || r == NC_PYTHON, "result %d", r);
    if (r == NC_OK) {
        FUZZ_CHECK(counts.records >= counts.batches, "%llu records in %llu batches",
                   (unsigned long long)counts.records, (unsigned long long)counts.batches);
        FUZZ_CHECK(counts.batches <= o.len / 61, "%llu batches in %zu bytes",
                   (unsigned long long)counts.batches, o.len);
        FUZZ_CHECK(sealed == (size_t)-1 || counts.batches <= sealed,
                   "%llu batches counted, %zu there", (unsigned long long)counts.batches,
                   sealed);
        FUZZ_CHECK(counts.remembered <= counts.records && (memory != NULL || !counts.remembered),
                   "%llu remembered of %llu records", (unsigned long long)counts.remembered,
                   (unsigned long long)counts.records);
    } else {
        FUZZ_CHECK(why != NULL, "no reason to go to Python");
    }
    if (memory != NULL) {
        FUZZ_CHECK(lm_size(memory) <= 16 && (r == NC_OK || lm_size(memory) == 0),
                   "%lld entries", (long long)lm_size(memory));
        lm_release(memory);
    }
    nc_plan_free(&plan);
    free(frame);
    free(o.p);
    return 0;
}
