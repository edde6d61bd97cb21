/* Scanning Fetch responses in the native relay, with the Python fetch chain as the reference.
 *
 * For a session whose fetch chain only watches header keys (proxy/native/fetch_plan.py decides:
 * `drop_headers` with names and prefixes), a Fetch response v4-v18 that fits the session's buffer
 * is walked whole (the layouts of protocol/messages/fetch_response.py, flexible from v12, topic ids
 * from v13), and so is a share group's ShareFetch response v1-v2
 * (protocol/messages/share_fetch_response.py: flexible, topics by id, each partition's acquired
 * ranges after its records, the leader hints a field of their own). Every partition's records field
 * is cut into batches as protocol/records.py `split_batches` cuts it: a trailing partial batch is
 * skipped, as the chain skips it, and so are control batches. Every other batch must be magic 2,
 * have a valid CRC32C (the Python path checks it before reading a record), hold the records it
 * declares, and no record may carry a watched header key. A compressed batch is read decompressed
 * (relay_codec.c), within the plan's decompression limits, as Python reads it. Then the chain would
 * change nothing and the response passes as it came; anything else (a watched header, a legacy
 * batch, a batch over the limits or one the codec refuses, a topic id Herald has not learnt, leader
 * hints where a filter reads them, bytes that are not a well-formed response) goes to Python. A
 * ShareFetch response passed so changes nothing of what the share group acquired: the chain that
 * scans dropped no record, so Herald owes the broker no acknowledgement for it
 * (proxy/filters/share_drops.py).
 *
 * Safety: every read is bounded by the frame (sc_reader), every length checked before use.
 */
#include "relay_fetch.h"

#include <string.h>

#include "contracts/features.h"
#include "contracts/native_relay.h"
#include "relay_codec.h"
#include "relay_trace.h"
#include <stdlib.h>
#include <time.h>

#define BATCH_HEADER 61
#define LENGTH_OVERHEAD 12
#define LEGACY_MIN_LENGTH 14 /* protocol/records.py _LEGACY_MIN_LENGTH */
#define MAGIC_AT 16

static uint32_t be32at(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* What a response's compressed batches need: a buffer for one decompressed, and what is
 * left of the plan's limit for the whole response. */
/* With links (trace_context `link`: proxy/native/fetch_plan.py gives the memory and the
 * session's scope), each record carrying a valid traceparent as its first is remembered, as
 * interceptors/trace_links.py `RememberFetched` does: (its trace id, topic, partition,
 * offset), held until the whole response is known to pass and then remembered in order. */
typedef lm_record pending_t;

typedef struct {
    nk_buf plain;
    int64_t left;
    int nomem;
    pending_t *pending;
    size_t npending, pending_cap;
    const uint8_t *topic; /* the partition being read: its topic's name, its index */
    size_t topic_len;
    int32_t partition;
    const uint8_t *frame; /* the response's first byte: batches are placed by offset in it */
    size_t verified;      /* every batch ending at or before this offset has a valid CRC */
    int prefix;           /* nf_verify_prefix: only CRCs, over the bytes here so far */
} scan_room;

typedef struct {
    nc_watch w;
    int tp;
} link_watch;

/* The key callback with links: traceparent noted (the plan does not watch it), any watched
 * key stops the walk. */
static int link_key(void *arg, const uint8_t *key, size_t len) {
    link_watch *k = arg;
    if (len == HEADER_TRACEPARENT_LEN && memcmp(key, HEADER_TRACEPARENT, len) == 0) {
        k->tp = 1;
        return 0;
    }
    return nc_watched_key(&k->w, key, len);
}

/* Note record r of batch b (its records in `records`; number `index` of `count`) for the
 * memory when its first traceparent is valid. 0: out of memory. */
static int note_traced(const uint8_t *b, const uint8_t *records, const sc_rec *r,
                       int64_t index, int64_t count, scan_room *room) {
    size_t p = r->first;
    const uint8_t *value = NULL;
    int64_t n = -1;
    for (uint64_t h = 0; h < r->count; h++) {
        uint64_t z;
        sc_uvarint(records, &p, r->end, &z);
        const uint8_t *key = records + p;
        size_t key_len = (size_t)(z >> 1);
        p += key_len;
        sc_uvarint(records, &p, r->end, &z);
        int64_t vn = z == 1 ? -1 : (int64_t)(z >> 1);
        if (key_len == HEADER_TRACEPARENT_LEN && memcmp(key, HEADER_TRACEPARENT, key_len) == 0) {
            value = vn < 0 ? NULL : records + p;
            n = vn;
            break;
        }
        p += vn < 0 ? 0 : (size_t)vn;
    }
    if (!nt_valid_traceparent(value, n)) {
        return 1;
    }
    /* The offset as the Python member takes it: the base offset plus the record's index
     * when the deltas run 0..n-1 (the last is n-1), else plus its own delta. */
    int64_t base = (int64_t)((uint64_t)be32at(b) << 32 | be32at(b + 4));
    int64_t delta = index;
    if ((int64_t)(int32_t)be32at(b + 23) != count - 1) {
        size_t q = r->body + 1; /* attributes, then the timestamp and offset deltas */
        uint64_t z;
        sc_uvarint(records, &q, r->end, &z);
        sc_uvarint(records, &q, r->end, &z);
        delta = (int64_t)(z >> 1) ^ -(int64_t)(z & 1);
    }
    if (room->npending == room->pending_cap) {
        size_t cap = room->pending_cap ? 2 * room->pending_cap : 64;
        pending_t *grown = realloc(room->pending, cap * sizeof *grown);
        if (grown == NULL) {
            return 0;
        }
        room->pending = grown;
        room->pending_cap = cap;
    }
    pending_t *e = &room->pending[room->npending++];
    memcpy(e->trace, value + 3, LM_TRACE);
    e->topic = room->topic;
    e->topic_len = room->topic_len;
    e->partition = room->partition;
    e->offset = (int64_t)((uint64_t)base + (uint64_t)delta);
    return 1;
}

/* The records of the compressed batch b of `size` bytes decompressed into room->plain:
 * NULL, or why not. */
static const char *decompress_batch(const uint8_t *b, size_t size, int codec,
                                    const nc_plan *plan, scan_room *room) {
    if (!(NK_NATIVE_CODECS & (1u << codec))) {
        return "a compression codec the engine does not read";
    }
    int64_t limit = plan->max_batch_decompressed < room->left ? plan->max_batch_decompressed
                                                              : room->left;
    if (limit <= 0) {
        return "a compressed batch over the decompression limits";
    }
    const char *why = NULL;
    room->plain.len = 0;
    int r = nk_decompress(codec, b + BATCH_HEADER, size - BATCH_HEADER, (size_t)limit,
                          &room->plain, &why);
    if (r == NK_TOO_LARGE) {
        return "a compressed batch over the decompression limits";
    }
    if (r == NK_NOMEM) {
        room->nomem = 1;
        return "out of memory";
    }
    if (r != NK_OK) {
        return why;
    }
    room->left -= (int64_t)room->plain.len;
    return NULL;
}

/* One records field: NULL when the chain would leave it unchanged, else why not. */
static const char *scan_records(const uint8_t *f, size_t n, const nc_plan *plan,
                                nc_counts *counts, scan_room *scratch) {
    size_t pos = 0;
    while (pos < n) {
        size_t room = n - pos;
        if (room < MAGIC_AT + 1) {
            return NULL; /* a partial batch: not even its magic byte */
        }
        const uint8_t *b = f + pos;
        int64_t length = (int32_t)be32at(b + 8);
        if (length < LEGACY_MIN_LENGTH) {
            return "a record batch length out of range";
        }
        if ((uint64_t)length + LENGTH_OVERHEAD > room) {
            return NULL; /* the trailing partial batch a Fetch response may end with */
        }
        size_t size = (size_t)length + LENGTH_OVERHEAD;
        if (b[MAGIC_AT] != 2) {
            return "a batch of magic 0 or 1";
        }
        if (size < BATCH_HEADER) {
            return "a record batch shorter than its header";
        }
        unsigned attributes = (unsigned)b[21] << 8 | b[22];
        size_t batch_end = (size_t)(b - scratch->frame) + size;
        /* As the Python path, which checks it before it reads any record; once per batch,
         * whether by nf_verify_prefix as the response arrived or now. */
        if (!(attributes & 0x20) && batch_end > scratch->verified &&
            sc_crc32c(0, b + 21, size - 21) != be32at(b + 17)) {
            return "a record batch CRC mismatch";
        }
        if (scratch->prefix) {
            if (batch_end > scratch->verified) {
                scratch->verified = batch_end;
            }
        } else if (!(attributes & 0x20)) { /* control batches are never touched */
            int64_t count = (int32_t)be32at(b + 57);
            if (count <= 0) {
                return "an empty batch";
            }
            int codec = (int)(attributes & 7);
            const uint8_t *records = b;
            size_t at = BATCH_HEADER, end = size;
            if (codec) {
                const char *no = decompress_batch(b, size, codec, plan, scratch);
                if (no != NULL) {
                    return no;
                }
                records = scratch->plain.buf;
                at = 0;
                end = scratch->plain.len;
                counts->compressed[codec]++;
            } else {
                scratch->left -= (int64_t)size;
            }
            int64_t seen = 0;
            while (at < end) {
                sc_rec r;
                link_watch k = {{plan, 0}, 0};
                if (seen >= count ||
                    sc_walk_record(records, &at, end, &r,
                                   plan->links != NULL ? link_key : nc_watched_key,
                                   plan->links != NULL ? (void *)&k : (void *)&k.w)) {
                    return "malformed records";
                }
                if (k.w.hit) {
                    return "a record with a watched header";
                }
                if (k.tp && !note_traced(b, records, &r, seen, count, scratch)) {
                    scratch->nomem = 1;
                    return "out of memory";
                }
                seen++;
            }
            if (seen != count) {
                return "a batch holding fewer records than it declares";
            }
            counts->batches++;
            counts->records += (uint64_t)count;
        }
        pos += size;
    }
    return NULL;
}

/* A nullable string or bytes length: compact (uvarint N+1) or int16/int32; -1 for null. */
static int64_t read_length(sc_reader *r, int compact, int width) {
    if (compact) {
        return sc_read_compact(r);
    }
    return nc_read_int(r, width);
}

static int scan_fetch(const uint8_t *frame, size_t len, int api, int ver, const nc_plan *plan,
                      int check_tags, nc_counts *counts, const char **why, scan_room *room);

size_t nf_verify_prefix(const uint8_t *frame, size_t here, size_t len, int api, int ver,
                        const nc_plan *plan, size_t verified) {
    scan_room room = {{NULL, 0, 0}, 0, 0, NULL, 0, 0, NULL, 0, 0, frame, verified, 1};
    nc_counts counts;
    const char *why;
    if (here > len) {
        return verified;
    }
    (void)scan_fetch(frame, here, api, ver, plan, 0, &counts, &why, &room);
    return room.verified;
}

int nf_scan_fetch(const uint8_t *frame, size_t len, int api, int ver, const nc_plan *plan,
                  int check_tags, nc_counts *counts, const char **why) {
    return nf_scan_fetch_verified(frame, len, api, ver, plan, check_tags, 0, counts, why);
}

int nf_scan_fetch_verified(const uint8_t *frame, size_t len, int api, int ver,
                           const nc_plan *plan, int check_tags, size_t verified,
                           nc_counts *counts, const char **why) {
    scan_room room = {{NULL, 0, 0}, plan->max_request_decompressed, 0, NULL, 0, 0, NULL, 0, 0,
                      frame, verified, 0};
    int r = scan_fetch(frame, len, api, ver, plan, check_tags, counts, why, &room);
    if (r == NC_OK && room.npending > 0) { /* it passes: what it carried is remembered */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts); /* Python's time.monotonic */
        double now = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
        int64_t evicted, expired;
        counts->remembered += (uint64_t)lm_remember_many(
            plan->links, plan->link_scope, plan->link_scope_len, room.pending, room.npending,
            now, &evicted, &expired);
        counts->evicted += (uint64_t)evicted;
        counts->expired += (uint64_t)expired;
    }
    nk_buf_free(&room.plain);
    free(room.pending);
    return r;
}

/* The topic id at the reader, known to the plan: the room reads its topic's name from then
 * on. 0 (and *why) when it goes to Python. */
static int topic_by_id(sc_reader *r, const nc_plan *plan, scan_room *room, const char **why) {
    const uint8_t *id = r->p + r->pos;
    sc_read_skip(r, 16);
    if (r->bad) {
        return 0;
    }
    int64_t known = nc_id_index(plan, id);
    if (known == NC_UNKNOWN_ID) {
        *why = "a topic id Herald has not learnt";
        return 0;
    }
    if (plan->id_names != NULL) {
        room->topic = plan->id_names[known];
        room->topic_len = plan->id_name_lens[known];
    } else if (plan->links != NULL) {
        *why = "a topic id whose name the plan does not give";
        return 0;
    }
    return 1;
}

/* A partition's records field of `n` bytes at the reader (n < 0: null): NC_OK and the reader
 * past it when the chain would leave it unchanged, else NC_PYTHON or NC_NOMEM (*why). For
 * nf_verify_prefix, a field that goes on past the bytes here has its whole batches checked,
 * and the walk ends there (NC_PYTHON). */
static int partition_records(sc_reader *r, int64_t n, const nc_plan *plan, nc_counts *counts,
                             const char **why, scan_room *room) {
    if (!r->bad && room->prefix && n > 0 && (uint64_t)n > r->end - r->pos) {
        (void)scan_records(r->p + r->pos, r->end - r->pos, plan, counts, room);
        return NC_PYTHON;
    }
    if (r->bad || n < -1 || (uint64_t)(n < 0 ? 0 : n) > r->end - r->pos) {
        return NC_PYTHON;
    }
    if (n > 0) {
        const char *no = scan_records(r->p + r->pos, (size_t)n, plan, counts, room);
        if (no != NULL) {
            *why = no;
            return room->nomem ? NC_NOMEM : NC_PYTHON;
        }
        r->pos += (size_t)n;
    }
    return NC_OK;
}

/* A compact nullable string the Python codec reads (at most 32767 bytes), skipped: 0 when it
 * is not one. */
static int skip_string(sc_reader *r) {
    int64_t n = sc_read_compact(r);
    sc_read_skip(r, n < 0 ? 0 : (uint64_t)n);
    return !r->bad && n <= 32767;
}

/* A ShareFetch response (NR_SHARE_FETCH) after its response header, as scan_fetch reads a
 * Fetch response. */
static int scan_share_fetch(sc_reader *r, int ver, const nc_plan *plan, int check_tags,
                            nc_counts *counts, const char **why, scan_room *room) {
    size_t len = r->end;
    *why = "a malformed ShareFetch response";
    if (ver < NF_SHARE_MIN_VERSION || ver > NF_SHARE_MAX_VERSION) {
        *why = "a ShareFetch version the scan does not read";
        return NC_PYTHON;
    }
    sc_read_skip(r, 6); /* throttle time, error code */
    if (!skip_string(r)) {
        return NC_PYTHON;
    }
    sc_read_skip(r, 4); /* acquisition lock timeout */
    int64_t topics;
    if (!nc_read_count(r, 1, &topics)) {
        return NC_PYTHON;
    }
    for (int64_t t = 0; t < topics && !r->bad; t++) {
        if (!topic_by_id(r, plan, room, why)) {
            return NC_PYTHON;
        }
        int64_t parts;
        if (!nc_read_count(r, 1, &parts)) {
            return NC_PYTHON;
        }
        for (int64_t p = 0; p < parts && !r->bad; p++) {
            room->partition = (int32_t)nc_read_int(r, 4);
            sc_read_skip(r, 2); /* error code */
            if (!skip_string(r)) {
                return NC_PYTHON;
            }
            sc_read_skip(r, 2); /* acknowledge error code */
            if (!skip_string(r)) {
                return NC_PYTHON;
            }
            sc_read_skip(r, 8); /* current leader: id, epoch */
            sc_read_tagged(r);
            int64_t n = sc_read_compact(r);
            if (n < 0 && !r->bad) {
                return NC_PYTHON; /* null records: not a field of these versions */
            }
            int done = partition_records(r, n, plan, counts, why, room);
            if (done != NC_OK) {
                return done;
            }
            int64_t acquired;
            if (!nc_read_count(r, 1, &acquired)) {
                return NC_PYTHON;
            }
            for (int64_t a = 0; a < acquired && !r->bad; a++) {
                sc_read_skip(r, 18); /* first and last offsets, delivery count */
                sc_read_tagged(r);
            }
            sc_read_tagged(r);
        }
        sc_read_tagged(r);
    }
    int64_t endpoints;
    if (!nc_read_count(r, 1, &endpoints)) {
        return NC_PYTHON;
    }
    if (endpoints > 0) {
        *why = "leader hints (node endpoints)";
        return NC_PYTHON;
    }
    size_t at = r->pos;
    uint64_t tags = sc_read_uvarint(r);
    if (!r->bad && tags > 0 && check_tags) {
        *why = "top-level tagged fields";
        return NC_PYTHON;
    }
    r->pos = at;
    sc_read_tagged(r);
    if (r->bad || r->pos != len) {
        *why = "a malformed ShareFetch response";
        return NC_PYTHON;
    }
    return NC_OK;
}

static int scan_fetch(const uint8_t *frame, size_t len, int api, int ver, const nc_plan *plan,
                      int check_tags, nc_counts *counts, const char **why, scan_room *room) {
    sc_reader r = {frame, 0, len, 0};
    memset(counts, 0, sizeof *counts);
    *why = "a malformed Fetch response";
    if (api == NR_SHARE_FETCH) {
        if (len < 9 || (!room->prefix && (uint64_t)be32at(frame) + 4 != len)) {
            *why = "a malformed ShareFetch response";
            return NC_PYTHON;
        }
        sc_read_skip(&r, 8); /* size, correlation id */
        sc_read_tagged(&r);  /* response header v1 */
        return scan_share_fetch(&r, ver, plan, check_tags, counts, why, room);
    }
    if (api != NR_FETCH) {
        *why = "an API the scan does not read";
        return NC_PYTHON;
    }
    if (ver < NF_MIN_VERSION || ver > NF_MAX_VERSION) {
        *why = "a Fetch version the scan does not read";
        return NC_PYTHON;
    }
    if (len < 8 || (!room->prefix && (uint64_t)be32at(frame) + 4 != len)) {
        return NC_PYTHON;
    }
    int flexible = ver >= FETCH_FLEXIBLE_VERSION;
    sc_read_skip(&r, 8); /* size, correlation id */
    if (flexible) {
        sc_read_tagged(&r); /* response header v1 */
    }
    sc_read_skip(&r, ver >= FETCH_SESSION_VERSION ? 10 : 4); /* throttle time[, error, session] */
    int64_t topics;
    if (!nc_read_count(&r, flexible, &topics)) {
        return NC_PYTHON;
    }
    for (int64_t t = 0; t < topics && !r.bad; t++) {
        if (ver >= TOPIC_ID_VERSION) {
            if (!topic_by_id(&r, plan, room, why)) {
                return NC_PYTHON;
            }
        } else {
            int64_t n = read_length(&r, flexible, 2);
            const uint8_t *name = frame + r.pos;
            sc_read_skip(&r, n < 0 ? 0 : (uint64_t)n);
            if (n < 0 || r.bad || !nc_ascii(name, (size_t)n)) {
                *why = "a topic name that is null or not ASCII";
                return NC_PYTHON; /* the Python codec decides what such a name is */
            }
            room->topic = name;
            room->topic_len = (size_t)n;
        }
        int64_t parts;
        if (!nc_read_count(&r, flexible, &parts)) {
            return NC_PYTHON;
        }
        for (int64_t p = 0; p < parts && !r.bad; p++) {
            /* index, error, high watermark, last stable[, log start] offsets */
            room->partition = (int32_t)nc_read_int(&r, 4);
            sc_read_skip(&r, ver >= FETCH_LOG_START_OFFSET_VERSION ? 26 : 18);
            int64_t aborted = flexible ? sc_read_compact(&r) : nc_read_int(&r, 4);
            for (int64_t a = 0; a < aborted && !r.bad; a++) {
                sc_read_skip(&r, 16); /* producer id, first offset */
                if (flexible) {
                    sc_read_tagged(&r);
                }
            }
            if (aborted < -1) {
                return NC_PYTHON;
            }
            if (ver >= FETCH_PREFERRED_READ_REPLICA_VERSION) {
                sc_read_skip(&r, 4); /* preferred read replica */
            }
            int64_t n = read_length(&r, flexible, 4);
            int done = partition_records(&r, n, plan, counts, why, room);
            if (done != NC_OK) {
                return done;
            }
            if (flexible) {
                sc_read_tagged(&r);
            }
        }
        if (flexible) {
            sc_read_tagged(&r);
        }
    }
    if (flexible) {
        size_t at = r.pos;
        uint64_t tags = sc_read_uvarint(&r);
        if (!r.bad && tags > 0 && check_tags) {
            *why = "top-level tagged fields (leader hints)";
            return NC_PYTHON;
        }
        r.pos = at;
        sc_read_tagged(&r);
    }
    if (r.bad || r.pos != len) {
        *why = "a malformed Fetch response";
        return NC_PYTHON;
    }
    return NC_OK;
}
