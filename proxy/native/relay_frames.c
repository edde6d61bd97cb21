/* What the native relay reads of the frames it forwards (see relay_frames.h): the `acks` of a
 * Produce request, the top-level tagged fields of a Produce response, and the structure of a
 * Fetch v16+ response as it streams past.
 *
 * Safety: every read is bounded by `limit` (the bytes present) or the frame's length; a
 * position past `limit` (a length that ran ahead of what has arrived) reads nothing. The
 * Fetch walk is held to protocol/fetch_tail.py, the Python path's walk: it refuses what that
 * one refuses, so a hostile broker gets the same answer on both paths (the session closes).
 */
#include "contracts/features.h"
#include "relay_frames.h"

#include "stamp_core.h"

int nr_uvarint(const uint8_t *p, size_t *pos, size_t limit, uint64_t *out) {
    if (sc_uvarint(p, pos, limit, out)) {
        return NR_READ;
    }
    /* *pos may be past limit: a length before the varint ran ahead of the bytes read. */
    return *pos < limit && limit - *pos >= 10 ? NR_UNREADABLE : NR_NEED_MORE;
}

static int16_t be16(const uint8_t *p) {
    return (int16_t)(((uint16_t)p[0] << 8) | (uint16_t)p[1]);
}

int nr_produce_acks(const uint8_t *p, size_t avail, int ver, int16_t *acks) {
    size_t pos = 12;
    if (avail < pos + 2) {
        return NR_NEED_MORE;
    }
    int16_t n = be16(p + pos);
    pos += 2 + (n > 0 ? (size_t)n : 0);
    uint64_t count, tag, size;
    int r;
    if (ver >= PRODUCE_FLEXIBLE_VERSION) { /* request header v2: tagged fields */
        if ((r = nr_uvarint(p, &pos, avail, &count)) != NR_READ) {
            return r;
        }
        for (uint64_t i = 0; i < count; i++) {
            if ((r = nr_uvarint(p, &pos, avail, &tag)) != NR_READ ||
                (r = nr_uvarint(p, &pos, avail, &size)) != NR_READ) {
                return r;
            }
            if (size > (1u << 30)) {
                return NR_UNREADABLE;
            }
            pos += size;
        }
    }
    if (ver >= PRODUCE_TRANSACTIONAL_ID_VERSION) {
        if (ver >= PRODUCE_FLEXIBLE_VERSION) {
            uint64_t len;
            if ((r = nr_uvarint(p, &pos, avail, &len)) != NR_READ) {
                return r;
            }
            if (len > (1u << 30)) {
                return NR_UNREADABLE;
            }
            pos += len > 0 ? len - 1 : 0;
        } else {
            if (avail < pos + 2) {
                return NR_NEED_MORE;
            }
            int16_t tl = be16(p + pos);
            pos += 2 + (tl > 0 ? (size_t)tl : 0);
        }
    }
    if (avail < pos + 2) {
        return NR_NEED_MORE;
    }
    *acks = be16(p + pos);
    return NR_READ;
}

/* A compact array or nullable field's length: uvarint N+1, 0 for null (read as 0). */
static uint64_t compact(sc_reader *r) {
    uint64_t n = sc_read_uvarint(r);
    return n > 0 ? n - 1 : 0;
}

int64_t nr_top_level_tags(const uint8_t *frame, size_t len, int api, int ver) {
    if (api != NR_PRODUCE || ver < PRODUCE_NODE_ENDPOINTS_VERSION || ver > NR_PRODUCE_MAX_VERSION || len < 8) {
        return NR_UNREADABLE;
    }
    sc_reader w = {frame, 8, len, 0}; /* after the size and the correlation id */
    sc_read_tagged(&w);               /* response header v1 */
    for (uint64_t t = compact(&w); t > 0 && !w.bad; t--) {
        sc_read_skip(&w, ver >= TOPIC_ID_VERSION ? 16 : compact(&w)); /* topic id, or name */
        for (uint64_t n = compact(&w); n > 0 && !w.bad; n--) {
            sc_read_skip(&w, 30); /* index, error, base offset, append time, log start */
            for (uint64_t r = compact(&w); r > 0 && !w.bad; r--) {
                sc_read_skip(&w, 4);          /* batch index */
                sc_read_skip(&w, compact(&w)); /* its message */
                sc_read_tagged(&w);
            }
            sc_read_skip(&w, compact(&w)); /* error message */
            sc_read_tagged(&w);
        }
        sc_read_tagged(&w);
    }
    sc_read_skip(&w, 4); /* throttle time */
    uint64_t count = sc_read_uvarint(&w);
    if (w.bad) {
        return NR_UNREADABLE;
    }
    if (count == 0 && w.pos != w.end) {
        return NR_UNREADABLE; /* trailing bytes: let the Python codec say what is wrong */
    }
    return count > INT64_MAX ? NR_UNREADABLE : (int64_t)count;
}

/* ---- the streamed Fetch v16+ walk ------------------------------------------------------- */

/* A varint of the walk, as protocol/fetch_tail.py `_varint` reads it: at most five bytes.
 * NR_READ, NR_NEED_MORE or NR_UNREADABLE. */
static int varint5(const uint8_t *b, size_t *pos, size_t limit, uint64_t *out) {
    uint64_t v = 0;
    size_t p = *pos;
    for (int i = 0; i < 5; i++) {
        if (p >= limit) {
            return NR_NEED_MORE;
        }
        uint8_t byte = b[p++];
        v |= (uint64_t)(byte & 0x7F) << (7 * i);
        if (byte < 0x80) {
            *pos = p;
            *out = v;
            return NR_READ;
        }
    }
    return NR_UNREADABLE;
}

/* Skip `skip` bytes, then a tagged-field section, then go on at `after`. */
static void tagged_then(nr_fwalk *w, uint64_t skip, int after) {
    w->skip = skip;
    w->phase = NR_F_TAGGED;
    w->tag_step = 0;
    w->after = after;
}

void nr_fetch_walk_start(nr_fwalk *w) {
    *w = (nr_fwalk){0};
    tagged_then(w, 0, NR_F_FIXED);
}

int nr_fetch_walk(nr_fwalk *w, const uint8_t *b, size_t *pos, size_t limit,
                  uint64_t frame_left) {
    if (*pos > limit || limit - *pos > frame_left) {
        return NR_W_BAD; /* not called as documented: refuse rather than read past */
    }
    const size_t start = *pos;
    uint64_t v = 0;
    for (;;) {
        uint64_t left = frame_left - (*pos - start); /* of the frame, from *pos on */
        if (w->skip) {
            if (w->skip > left) {
                return NR_W_BAD; /* runs past the end of the frame */
            }
            size_t have = limit - *pos;
            if (w->skip > have) {
                w->skip -= have;
                *pos = limit;
                return NR_W_MORE;
            }
            *pos += (size_t)w->skip;
            w->skip = 0;
            left = frame_left - (*pos - start);
        }
        int needs_varint = w->phase == NR_F_TOPICS || w->phase == NR_F_PARTS ||
                           w->phase == NR_F_ABORTED || w->phase == NR_F_RECORDS ||
                           (w->phase == NR_F_TAGGED && w->tag_step != 3);
        if (needs_varint) {
            int r = varint5(b, pos, limit, &v);
            if (r == NR_NEED_MORE) {
                /* All the frame has left is here and the varint still does not end. */
                return limit - *pos >= left ? NR_W_BAD : NR_W_MORE;
            }
            if (r == NR_UNREADABLE) {
                return NR_W_BAD;
            }
        }
        switch (w->phase) {
        case NR_F_FIXED: /* throttle time, error code, session id */
            w->skip = 10;
            w->phase = NR_F_TOPICS;
            break;
        case NR_F_TOPICS:
            if (v == 0) {
                return NR_W_BAD; /* a null responses array */
            }
            w->topics = v - 1;
            w->phase = w->topics ? NR_F_TOPIC_ID : NR_F_TOP_TAGS;
            break;
        case NR_F_TOPIC_ID:
            w->skip = 16;
            w->phase = NR_F_PARTS;
            break;
        case NR_F_PARTS:
            w->parts = v > 0 ? v - 1 : 0;
            if (w->parts) {
                w->phase = NR_F_PART_FIXED;
            } else {
                tagged_then(w, 0, NR_F_AFTER_TOPIC_TAGS);
            }
            break;
        case NR_F_PART_FIXED: /* index, error, high watermark, last stable, log start */
            w->skip = 30;
            w->phase = NR_F_ABORTED;
            break;
        case NR_F_ABORTED:
            w->aborted = v > 0 ? v - 1 : 0;
            w->phase = w->aborted ? NR_F_ABORTED_ITEM : NR_F_PREFERRED;
            break;
        case NR_F_ABORTED_ITEM: /* producer id, first offset, then its tagged fields */
            tagged_then(w, 16, NR_F_AFTER_ABORTED_TAGS);
            break;
        case NR_F_AFTER_ABORTED_TAGS:
            w->phase = --w->aborted ? NR_F_ABORTED_ITEM : NR_F_PREFERRED;
            break;
        case NR_F_PREFERRED:
            w->skip = 4;
            w->phase = NR_F_RECORDS;
            break;
        case NR_F_RECORDS:
            tagged_then(w, v > 0 ? v - 1 : 0, NR_F_AFTER_PART_TAGS);
            break;
        case NR_F_AFTER_PART_TAGS:
            if (--w->parts) {
                w->phase = NR_F_PART_FIXED;
            } else {
                tagged_then(w, 0, NR_F_AFTER_TOPIC_TAGS);
            }
            break;
        case NR_F_AFTER_TOPIC_TAGS:
            w->phase = --w->topics ? NR_F_TOPIC_ID : NR_F_TOP_TAGS;
            break;
        case NR_F_TAGGED:
            if (w->tag_step == 0) { /* the count */
                w->tags = v;
                w->tag_step = w->tags ? 1 : 3;
            } else if (w->tag_step == 1) { /* a tag */
                w->tag_step = 2;
            } else if (w->tag_step == 2) { /* its size, then its bytes */
                w->skip = v;
                w->tag_step = --w->tags ? 1 : 3;
            } else { /* done */
                w->phase = w->after;
            }
            break;
        case NR_F_TOP_TAGS:
            /* The tagged fields take one byte at least: a frame that ends here is short. */
            return left > 0 ? NR_W_TAIL : NR_W_BAD;
        default:
            return NR_W_BAD;
        }
    }
}
