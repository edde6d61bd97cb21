/* What the native relay reads of the frames it forwards: see relay_frames.c. Nothing here
 * touches Python objects or the engine's state, so the fuzz targets (fuzz/native/) call these
 * readers directly on hostile bytes. */
#ifndef HERALD_RELAY_FRAMES_H
#define HERALD_RELAY_FRAMES_H

#include <stddef.h>
#include <stdint.h>

#define NR_PRODUCE 0
#define NR_FETCH 1
#define NR_SHARE_FETCH 78 /* KIP-932: a share group's fetch, scanned as Fetch is */
/* The newest versions whose responses the engine reads the top-level tagged fields of (from
 * the first with node endpoints, contracts/features.h): Produce responses read whole, Fetch
 * responses walked as they stream past. NR_PRODUCE_MAX_VERSION is also the newest Produce
 * request the stamp walks (relay_stamp.h); Python reads both from `_relay.capabilities()`. */
#define NR_PRODUCE_MAX_VERSION 13
#define NR_FETCH_MAX_VERSION 18

/* What the readers below answer: the bytes cannot be what is read (NR_UNREADABLE), more of
 * them are needed (NR_NEED_MORE), or it is read (NR_READ). */
enum { NR_UNREADABLE = -1, NR_NEED_MORE = 0, NR_READ = 1 };

/* Unsigned varint at *pos below limit (at most ten bytes): NR_READ (*pos moves past it),
 * NR_NEED_MORE, NR_UNREADABLE (ten bytes present and still no end). A *pos at or past limit
 * needs more bytes. */
int nr_uvarint(const uint8_t *p, size_t *pos, size_t limit, uint64_t *out);

/* acks of a Produce request of version `ver` whose first `avail` bytes are at p (size prefix
 * included): header v1 or v2 (from PRODUCE_FLEXIBLE_VERSION), then the TransactionalId (from
 * PRODUCE_TRANSACTIONAL_ID_VERSION), then acks. NR_READ (into *acks), NR_NEED_MORE or
 * NR_UNREADABLE. */
int nr_produce_acks(const uint8_t *p, size_t avail, int ver, int16_t *acks);

/* The number of top-level tagged fields of a Produce response frame of a version from
 * PRODUCE_NODE_ENDPOINTS_VERSION to NR_PRODUCE_MAX_VERSION (size prefix included, read
 * whole), or NR_UNREADABLE when the frame cannot be read as one. */
int64_t nr_top_level_tags(const uint8_t *frame, size_t len, int api, int ver);

/* A walk over a Fetch v16+ response as it streams past: it needs only the structure bytes
 * in the buffer and counts record bytes past, so a response of any size streams. */
enum {
    NR_F_FIXED, NR_F_TOPICS, NR_F_TOPIC_ID, NR_F_PARTS, NR_F_PART_FIXED, NR_F_ABORTED,
    NR_F_ABORTED_ITEM, NR_F_PREFERRED, NR_F_RECORDS, NR_F_AFTER_ABORTED_TAGS,
    NR_F_AFTER_PART_TAGS, NR_F_AFTER_TOPIC_TAGS, NR_F_TAGGED, NR_F_TOP_TAGS,
};

typedef struct {
    int phase, after;          /* `after`: where NR_F_TAGGED returns to */
    int tag_step;              /* in NR_F_TAGGED: 0 count, 1 tag, 2 size, 3 done */
    uint64_t tags, topics, parts, aborted;
    uint64_t skip;             /* bytes to pass over before the next step */
} nr_fwalk;

enum { NR_W_MORE, NR_W_TAIL, NR_W_BAD };

/* Start a walk at the response header's tagged fields (after the correlation id). */
void nr_fetch_walk_start(nr_fwalk *w);

/* Walk from *pos over the bytes below `limit`, the response's remaining bytes from *pos being
 * `frame_left` (limit - *pos of them read). NR_W_MORE: it needs bytes not yet read (everything
 * before *pos is structure it has passed, and w->skip bytes from *pos on pass unread);
 * NR_W_TAIL: *pos is where the top-level tagged fields begin, and at least one byte of the
 * frame is left for them; NR_W_BAD: the bytes cannot be a Fetch response of this frame's size
 * (a varint longer than five bytes, a null topic array, or a structure that runs past the
 * frame's end: what protocol/fetch_tail.py, the reference, refuses). */
int nr_fetch_walk(nr_fwalk *w, const uint8_t *b, size_t *pos, size_t limit,
                  uint64_t frame_left);

#endif
