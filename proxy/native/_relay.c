/* Native passthrough relay: moves the Kafka frames no filter reads without waking trio.
 *
 * One engine owns one background thread with its own epoll set and serves many sessions.
 * A session hands the engine its client and upstream descriptors (plaintext only) and a table
 * of which (api key, version) pairs may pass natively. The engine reads request frames,
 * forwards the passable ones unchanged and keeps an in-flight FIFO (correlation id, api key,
 * version, receive time); responses are matched to the oldest entry and forwarded.
 *
 * The first request that may not pass (or cannot be read, or is too large) stops the
 * session at a frame boundary: the engine finishes the frames it has begun in both
 * directions, stops reading, and queues an event for Python (an eventfd the trio side waits
 * on). Python takes back the state (unforwarded client bytes, unread response bytes, the
 * FIFO) and carries on with its own pumps. End of stream, socket errors, bad responses and
 * the idle and frame deadlines end the native phase the same way, with a reason.
 *
 * The descriptors stay Python's: the engine never closes them. Every buffer is bounded
 * (reading a side stops while its buffer is full: backpressure), and frame sizes are checked
 * against the limit before anything is forwarded.
 *
 * Locking: the thread handles each batch of epoll events holding the engine mutex; Python's
 * calls take the same mutex briefly. Session structs are freed only by the thread, after a
 * batch, so an event already returned by epoll_wait never points at freed memory.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "contracts/features.h"
#include "relay_fetch.h"
#include "relay_stamp.h"
#include "stamp_core.h"

#define MAX_API 128
#define MAX_VER 32
#define TABLE_SIZE (MAX_API * MAX_VER)
#define MAX_BOUNDS 32
#define PRODUCE 0
#define FETCH 1

enum { ACTIVE = 1, STOPPING = 2, HANDED = 3, DEAD = 4 };
enum { CLIENT = 0, UPSTREAM = 1 };

/* Why a native phase ended; the Python side maps each to what it does next. */
static const char *const REASONS[] = {
    "", "request", "client_eof", "drain", "idle_timeout", "frame_timeout",
    "client_closed", "upstream_closed", "upstream_bad", "socket_error", "detached", "response",
};
enum {
    R_NONE, R_REQUEST, R_CLIENT_EOF, R_DRAIN, R_IDLE, R_FRAME, R_CLIENT_CLOSED,
    R_UPSTREAM_CLOSED, R_UPSTREAM_BAD, R_SOCKET, R_DETACHED, R_RESPONSE,
};

/* Table values: a pair may not pass, passes, or passes when its response carries no
 * top-level tagged fields (the only thing a filter reads in it: leader hints); T_STAMP* stamp
 * the request first (Produce, for a session with a stamp plan: relay_stamp.c); T_SCAN* pass
 * the response when a scan finds nothing the fetch chain would change (Fetch, for a session
 * with a fetch plan: relay_fetch.c), and its top-level tagged fields empty for the second. */
enum {
    T_PYTHON = 0, T_PASS = 1, T_UNLESS_TAGGED = 2, T_STAMP = 3, T_STAMP_UNLESS_TAGGED = 4,
    T_SCAN = 5, T_SCAN_UNLESS_TAGGED = 6,
};

typedef struct {
    int32_t corr;
    int16_t api, ver;
    int check; /* T_UNLESS_TAGGED: the response is read before it passes */
    int scan;  /* T_SCAN*: the response is buffered whole and scanned before it passes */
    double received;
    uint64_t end; /* stream offset after the response's last byte; 0 until it is known */
} pending_t;

typedef struct {
    uint8_t *buf;
    size_t cap, len;
    size_t sent;        /* bytes of buf written to the other side */
    size_t parsed;      /* bytes of buf approved for forwarding */
    uint64_t remaining; /* bytes of the current frame beyond `parsed` */
    uint64_t off;       /* stream offset of buf[0] (bytes spliced past it included) */
    int pipe[2];        /* for splicing; made on first use */
    int splicing;       /* 1 pipe made, -1 splice unavailable, 0 not tried */
    size_t pipe_cap;
    size_t piped;       /* bytes in the pipe not yet written: they precede buf[0] */
} dir_t;

/* Where a walk over a streamed Fetch v16+ response is: the walk needs only the structure
 * bytes in the buffer and counts record bytes past, so a response of any size streams. */
enum {
    F_FIXED, F_TOPICS, F_TOPIC_ID, F_PARTS, F_PART_FIXED, F_ABORTED, F_ABORTED_ITEM,
    F_PREFERRED, F_RECORDS, F_AFTER_ABORTED_TAGS, F_AFTER_PART_TAGS, F_AFTER_TOPIC_TAGS,
    F_TAGGED, F_TOP_TAGS,
};

typedef struct {
    int phase, after;          /* `after`: where F_TAGGED returns to */
    int tag_step;              /* in F_TAGGED: 0 count, 1 tag, 2 size */
    uint64_t tags, topics, parts, aborted, skip;
} fwalk_t;

struct session;
typedef struct {
    struct session *s;
    int side;
} endpoint_t;

typedef struct session {
    long long id;
    int fd[2];
    int state;
    int reason;
    char detail[160];
    uint8_t table[TABLE_SIZE];
    int64_t max_frame;
    size_t max_in_flight;
    double idle_s, frame_s, last_active, frame_started; /* frame_started 0: none */
    dir_t req, resp;
    pending_t *fifo;
    size_t fcap, fhead, fcount, fstarted;
    uint32_t mask[2];
    int registered;
    int stop_requested;
    uint64_t forwarded; /* requests passed natively in this phase */
    fwalk_t walk;       /* the streamed Fetch response being walked, when `walking` */
    int walking;
    uint64_t frame_end; /* stream offset where the walked response ends */
    size_t tail;        /* at a hand-over: bytes of the first response's tail for Python */
    endpoint_t ep[2];
    int stamping;       /* has a stamp plan */
    size_t stamp_cap;   /* the request buffer may grow to this for a frame to stamp */
    uint64_t stamp_wait; /* the whole size of a frame waiting to be read whole and stamped */
    size_t base_cap;     /* the buffers' size before any growth */
    nc_plan plan;
    long long stamp_key; /* whose counters its stamping adds to (proxy/native/stamp_plan.py) */
    nc_buf stamped;      /* the last stamped frame */
    uint64_t stamped_at; /* stream offset + 1 of the frame `stamped` holds while it waits for
                          * room in the buffer; 0: none */
    nc_counts stamped_counts;
    int scanning;        /* has a fetch plan */
    size_t fetch_cap;    /* the response buffer may grow to this for a response to scan */
    nc_plan fetch_plan;
    long long fetch_key; /* whose counters its scans add to (proxy/native/fetch_plan.py) */
    struct session *next;
} session_t;

typedef struct {
    uint64_t requests;
    uint64_t lat[MAX_BOUNDS + 1], up[MAX_BOUNDS + 1];
    double lat_sum, up_sum;
    int dirty;
} pair_stats_t;

/* What was stamped for one stamp key since the last collect. */
typedef struct {
    long long key;
    nc_counts counts;
} stamp_stats_t;

typedef struct {
    PyObject_HEAD
    pthread_mutex_t mu;
    pthread_t thread;
    int started;
    int quit;
    int ep;
    int wake_fd;   /* Python -> thread */
    int notify_fd; /* thread -> Python */
    session_t *active;
    session_t *graveyard;
    long long *events;
    size_t nevents, events_cap;
    int nbounds;
    double bounds[MAX_BOUNDS];
    uint64_t bytes[4]; /* client->proxy, proxy->upstream, upstream->proxy, proxy->client */
    uint64_t spliced;  /* of bytes[0] and bytes[2], those spliced: never reset */
    pair_stats_t *stats[MAX_API];
    stamp_stats_t *stamp_stats;
    size_t nstamp_stats, stamp_stats_cap;
    uint64_t rng[4]; /* xoshiro256**: the ids the engine stamps */
} engine_t;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static pair_stats_t *stats_for(engine_t *e, int api, int ver) {
    pair_stats_t *row = e->stats[api];
    if (row == NULL) {
        row = e->stats[api] = calloc(MAX_VER, sizeof(pair_stats_t));
        if (row == NULL) {
            return NULL;
        }
    }
    return &row[ver];
}

static int bucket(engine_t *e, double seconds) {
    /* bisect_left: the first bound >= seconds */
    int i = 0;
    while (i < e->nbounds && e->bounds[i] < seconds) {
        i++;
    }
    return i;
}

/* One latency observation for the entry's (api, version): the upstream one when the
 * response's header arrives, the client-facing one when its last byte was written. */
static void observe(engine_t *e, const pending_t *entry, double now, int upstream) {
    pair_stats_t *st = stats_for(e, entry->api, entry->ver);
    if (st == NULL) {
        return;
    }
    double t = now - entry->received;
    if (upstream) {
        st->up[bucket(e, t)]++;
        st->up_sum += t;
    } else {
        st->lat[bucket(e, t)]++;
        st->lat_sum += t;
    }
    st->dirty = 1;
}

static void push_event(engine_t *e, long long id) {
    if (e->nevents == e->events_cap) {
        size_t cap = e->events_cap ? e->events_cap * 2 : 64;
        long long *grown = realloc(e->events, cap * sizeof(long long));
        if (grown == NULL) {
            return; /* the session stays handed over; Python's detach still finds it */
        }
        e->events = grown;
        e->events_cap = cap;
    }
    e->events[e->nevents++] = id;
    uint64_t one = 1;
    ssize_t ignored = write(e->notify_fd, &one, sizeof one);
    (void)ignored;
}

static void unregister(engine_t *e, session_t *s) {
    if (s->registered) {
        epoll_ctl(e->ep, EPOLL_CTL_DEL, s->fd[CLIENT], NULL);
        epoll_ctl(e->ep, EPOLL_CTL_DEL, s->fd[UPSTREAM], NULL);
        s->registered = 0;
    }
}

/* The native phase is over: the session waits for Python to take it. */
static void hand_over(engine_t *e, session_t *s) {
    if (s->state == HANDED || s->state == DEAD) {
        return;
    }
    unregister(e, s);
    s->state = HANDED;
    push_event(e, s->id);
}

/* End at once (the state is not consistent enough to resume in Python). */
static void fail(engine_t *e, session_t *s, int reason, const char *detail) {
    if (s->state == HANDED || s->state == DEAD) {
        return;
    }
    s->reason = reason;
    snprintf(s->detail, sizeof s->detail, "%s", detail);
    hand_over(e, s);
}

/* Stop taking new frames; hand over once the frames begun are through. */
static void begin_stop(session_t *s, int reason) {
    if (s->state == ACTIVE) {
        s->state = STOPPING;
        s->reason = reason;
    }
}

static int32_t be32(const uint8_t *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
                     (uint32_t)p[3]);
}

static int16_t be16(const uint8_t *p) {
    return (int16_t)(((uint16_t)p[0] << 8) | (uint16_t)p[1]);
}

/* Unsigned varint at *pos below limit: 1 read, 0 need more bytes, -1 malformed (ten bytes
 * present and still no end). */
static int uvarint(const uint8_t *p, size_t *pos, size_t limit, uint64_t *out) {
    if (sc_uvarint(p, pos, limit, out)) {
        return 1;
    }
    return limit - *pos >= 10 ? -1 : 0;
}

enum { D_PASS, D_NEED, D_WAIT, D_STOP };

/* acks of a Produce request (see protocol/peek.py): header v1 (v<9) or v2, then the
 * TransactionalId (v3+), then acks. 1 read into *acks, 0 need more, -1 unreadable. */
static int produce_acks(const uint8_t *p, size_t avail, int ver, int16_t *acks) {
    size_t pos = 12;
    if (avail < pos + 2) {
        return 0;
    }
    int16_t n = be16(p + pos);
    pos += 2 + (n > 0 ? (size_t)n : 0);
    uint64_t count, tag, size;
    int r;
    if (ver >= PRODUCE_FLEXIBLE_VERSION) { /* request header v2: tagged fields */
        if ((r = uvarint(p, &pos, avail, &count)) <= 0) {
            return r;
        }
        for (uint64_t i = 0; i < count; i++) {
            if ((r = uvarint(p, &pos, avail, &tag)) <= 0 ||
                (r = uvarint(p, &pos, avail, &size)) <= 0) {
                return r;
            }
            if (size > (1u << 30)) {
                return -1;
            }
            pos += size;
        }
    }
    if (ver >= PRODUCE_TRANSACTIONAL_ID_VERSION) {
        if (ver >= PRODUCE_FLEXIBLE_VERSION) {
            uint64_t len;
            if ((r = uvarint(p, &pos, avail, &len)) <= 0) {
                return r;
            }
            if (len > (1u << 30)) {
                return -1;
            }
            pos += len > 0 ? len - 1 : 0;
        } else {
            if (avail < pos + 2) {
                return 0;
            }
            int16_t tl = be16(p + pos);
            pos += 2 + (tl > 0 ? (size_t)tl : 0);
        }
    }
    if (avail < pos + 2) {
        return 0;
    }
    *acks = be16(p + pos);
    return 1;
}

/* May the request frame starting at p pass natively? */
static int decide_request(engine_t *e, session_t *s, const uint8_t *p, size_t avail,
                          int *expects, uint64_t *total, int16_t *api_out, int16_t *ver_out,
                          int32_t *corr_out, int *check_out, int *stamp_out, int *scan_out) {
    if (avail < 4) {
        return D_NEED;
    }
    int32_t size = be32(p);
    if (size < 8 || (int64_t)size > s->max_frame) {
        return D_STOP; /* Python refuses it with its usual reason */
    }
    size_t whole = (size_t)size + 4;
    if (avail < 12) {
        return D_NEED;
    }
    int16_t api = be16(p + 4), ver = be16(p + 6);
    int32_t corr = be32(p + 8);
    if (api < 0 || api >= MAX_API || ver < 0 || ver >= MAX_VER || !s->table[api * MAX_VER + ver]) {
        return D_STOP;
    }
    int value = s->table[api * MAX_VER + ver];
    int stamp = value == T_STAMP || value == T_STAMP_UNLESS_TAGGED;
    if (stamp && (api != PRODUCE || !s->stamping)) {
        return D_STOP;
    }
    int scan = value == T_SCAN || value == T_SCAN_UNLESS_TAGGED;
    if (scan && (api != FETCH || !s->scanning)) {
        return D_STOP;
    }
    int answered = 1;
    if (api == PRODUCE) {
        int16_t acks = 1;
        size_t seen = avail < whole ? avail : whole;
        int r = produce_acks(p, seen, ver, &acks);
        if (r < 0 || (r == 0 && seen == whole)) {
            return D_STOP;
        }
        if (r == 0) {
            return D_NEED;
        }
        answered = acks != 0;
    }
    if (answered) {
        if (s->fcount >= s->max_in_flight) {
            return D_WAIT;
        }
        for (size_t i = 0; i < s->fcount; i++) {
            if (s->fifo[(s->fhead + i) % s->fcap].corr == corr) {
                return D_STOP; /* a reused correlation id: Python closes with its reason */
            }
        }
    }
    (void)e;
    *expects = answered;
    *check_out = value == T_UNLESS_TAGGED || value == T_STAMP_UNLESS_TAGGED ||
                 value == T_SCAN_UNLESS_TAGGED;
    *stamp_out = stamp;
    *scan_out = scan;
    *total = whole;
    *api_out = api;
    *ver_out = ver;
    *corr_out = corr;
    return D_PASS;
}

/* Approve the buffered bytes of the frame in progress; 1 when its last byte is approved. */
static int advance(dir_t *d) {
    size_t take = d->len - d->parsed;
    if (take > d->remaining) {
        take = (size_t)d->remaining;
    }
    d->parsed += take;
    d->remaining -= take;
    return d->remaining == 0;
}

/* ---- stamping Produce requests (relay_stamp.c) ------------------------------------------ */

static uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

static uint64_t next_random(engine_t *e) {
    uint64_t *r = e->rng;
    uint64_t out = rotl(r[1] * 5, 7) * 9, t = r[1] << 17;
    r[2] ^= r[0];
    r[3] ^= r[1];
    r[1] ^= r[2];
    r[0] ^= r[3];
    r[2] ^= t;
    r[3] = rotl(r[3], 45);
    return out;
}

static int all_zero(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (p[i]) {
            return 0;
        }
    }
    return 1;
}

/* The engine's random bytes. Trace contexts come in 24-byte chunks (trace id, span id), and
 * neither id may be zero (W3C): such a chunk is drawn again, as interceptors/ids.py does. */
static int engine_draw(void *arg, int stream, uint8_t *dst, size_t n) {
    engine_t *e = arg;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = next_random(e);
        size_t take = n - i < 8 ? n - i : 8;
        memcpy(dst + i, &v, take);
    }
    if (stream == NC_TRACE_DRAWS) {
        for (size_t c = 0; c + 24 <= n; c += 24) {
            while (all_zero(dst + c, 16) || all_zero(dst + c + 16, 8)) {
                for (size_t i = 0; i < 24; i += 8) {
                    uint64_t v = next_random(e);
                    memcpy(dst + c + i, &v, 8);
                }
            }
        }
    }
    return 1;
}

static void count_stamped(engine_t *e, long long key, const nc_counts *counts) {
    for (size_t i = 0; i < e->nstamp_stats; i++) {
        if (e->stamp_stats[i].key == key) {
            nc_counts_add(&e->stamp_stats[i].counts, counts);
            return;
        }
    }
    if (e->nstamp_stats == e->stamp_stats_cap) {
        size_t cap = e->stamp_stats_cap ? 2 * e->stamp_stats_cap : 8;
        stamp_stats_t *grown = realloc(e->stamp_stats, cap * sizeof *grown);
        if (grown == NULL) {
            return; /* the counts are lost, not the request */
        }
        e->stamp_stats = grown;
        e->stamp_stats_cap = cap;
    }
    stamp_stats_t *row = &e->stamp_stats[e->nstamp_stats++];
    row->key = key;
    row->counts = *counts;
}

enum { S_DONE, S_WAIT, S_PYTHON };

/* Let a buffer grow to `cap` (once: Python booked that much). 1 when it grew. */
static int grow_to(dir_t *d, size_t cap) {
    if (d->cap >= cap) {
        return 0;
    }
    uint8_t *grown = realloc(d->buf, cap);
    if (grown == NULL) {
        return 0;
    }
    d->buf = grown;
    d->cap = cap;
    return 1;
}

/* Let the request buffer grow to the session's stamp_cap. */
static int grow_for_stamping(session_t *s) {
    return grow_to(&s->req, s->stamp_cap);
}

/* The Produce request frame of *total bytes at d->parsed, stamped in place: S_DONE (with
 * *total its new size), S_WAIT (not all read yet, or no room for it yet), or S_PYTHON (the
 * request is not one the engine stamps; it is left as it arrived). Clients send requests of
 * up to about 1 MiB at full speed: the buffer grows to hold one whole, and its stamped form. */
static int stamp_request(engine_t *e, session_t *s, uint64_t *total) {
    dir_t *d = &s->req;
    if (*total > d->cap && (*total > s->stamp_cap || !grow_for_stamping(s))) {
        return S_PYTHON;
    }
    if (d->len - d->parsed < *total) {
        return S_WAIT;
    }
    uint64_t frame_at = d->off + d->parsed + 1;
    if (s->stamped_at != frame_at) { /* not stamped already, waiting for room */
        s->stamped.limit = s->stamp_cap; /* a larger frame could not be held here anyway */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t now_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
        const char *why;
        int r = nc_stamp_produce(d->buf + d->parsed, (size_t)*total, &s->plan, engine_draw, e,
                                 now_ms, &s->stamped, &s->stamped_counts, &why);
        if (r != NC_OK) {
            return S_PYTHON;
        }
        s->stamped_at = frame_at;
    }
    size_t grown = s->stamped.len - (size_t)*total;
    if (d->len + grown > d->cap && d->sent > 0) {
        memmove(d->buf, d->buf + d->sent, d->len - d->sent);
        d->off += d->sent;
        d->len -= d->sent;
        d->parsed -= d->sent;
        d->sent = 0;
    }
    if (d->len + grown > d->cap) {
        grow_for_stamping(s);
    }
    if (d->len + grown > d->cap) {
        /* what follows the frame leaves no room: wait for what precedes it to go out, or
         * let Python take it when nothing does */
        if (d->parsed > 0) {
            return S_WAIT;
        }
        s->stamped_at = 0;
        return S_PYTHON;
    }
    uint8_t *at = d->buf + d->parsed;
    memmove(at + s->stamped.len, at + *total, d->len - d->parsed - (size_t)*total);
    memcpy(at, s->stamped.buf, s->stamped.len);
    d->len += grown;
    *total = s->stamped.len;
    s->stamped_at = 0;
    count_stamped(e, s->stamp_key, &s->stamped_counts);
    return S_DONE;
}

static void parse_requests(engine_t *e, session_t *s, double now) {
    dir_t *d = &s->req;
    for (;;) {
        if (d->remaining) {
            if (!advance(d)) {
                return;
            }
            continue;
        }
        if (s->state != ACTIVE) {
            return;
        }
        size_t avail = d->len - d->parsed;
        if (avail == 0) {
            return;
        }
        int expects = 0;
        uint64_t total = 0;
        int16_t api = 0, ver = 0;
        int32_t corr = 0;
        int check = 0, stamp = 0, scan = 0;
        int r = decide_request(e, s, d->buf + d->parsed, avail, &expects, &total, &api, &ver,
                               &corr, &check, &stamp, &scan);
        if (r == D_NEED) {
            if (d->parsed == 0 && d->len == d->cap) {
                begin_stop(s, R_REQUEST); /* its header does not fit: Python reads it */
            }
            return;
        }
        if (r == D_WAIT) {
            return;
        }
        if (r == D_STOP) {
            begin_stop(s, R_REQUEST);
            return;
        }
        if (stamp) {
            int done = stamp_request(e, s, &total);
            s->stamp_wait = done == S_WAIT ? total : 0;
            if (done == S_WAIT) {
                return;
            }
            if (done == S_PYTHON) {
                begin_stop(s, R_REQUEST);
                return;
            }
        }
        pair_stats_t *st = stats_for(e, api, ver);
        if (st != NULL) {
            st->requests++;
            st->dirty = 1;
        }
        if (expects) {
            pending_t *slot = &s->fifo[(s->fhead + s->fcount) % s->fcap];
            slot->corr = corr;
            slot->api = api;
            slot->ver = ver;
            slot->check = check;
            slot->scan = scan;
            slot->received = now;
            slot->end = 0;
            s->fcount++;
        }
        s->forwarded++;
        d->remaining = total;
    }
}

static int64_t top_level_tags(const uint8_t *frame, size_t len, int api, int ver);

enum { W_MORE, W_TAIL, W_BAD };

/* Skip `skip` bytes, then a tagged-field section, then go on at `after`. */
static void tagged_then(fwalk_t *w, uint64_t skip, int after) {
    w->skip = skip;
    w->phase = F_TAGGED;
    w->tag_step = 0;
    w->after = after;
}

/* Walk a Fetch v16+ response from *pos over the bytes below `limit`. Returns W_MORE when it
 * needs bytes not yet read (everything before *pos is structure it has passed), W_TAIL when
 * *pos is the start of the top-level tagged fields, W_BAD when the bytes cannot be one. */
static int fetch_walk(fwalk_t *w, const uint8_t *b, size_t *pos, size_t limit) {
    uint64_t v = 0;
    for (;;) {
        if (w->skip) {
            size_t have = limit - *pos;
            if (w->skip > have) {
                w->skip -= have;
                *pos = limit;
                return W_MORE;
            }
            *pos += (size_t)w->skip;
            w->skip = 0;
        }
        int needs_varint = w->phase == F_TOPICS || w->phase == F_PARTS ||
                           w->phase == F_ABORTED || w->phase == F_RECORDS ||
                           (w->phase == F_TAGGED && w->tag_step != 3);
        if (needs_varint) {
            int r = uvarint(b, pos, limit, &v);
            if (r == 0) {
                return W_MORE;
            }
            if (r < 0 || v > (1ull << 40)) {
                return W_BAD;
            }
        }
        switch (w->phase) {
        case F_FIXED: /* throttle time, error code, session id */
            w->skip = 10;
            w->phase = F_TOPICS;
            break;
        case F_TOPICS:
            w->topics = v > 0 ? v - 1 : 0;
            w->phase = w->topics ? F_TOPIC_ID : F_TOP_TAGS;
            break;
        case F_TOPIC_ID:
            w->skip = 16;
            w->phase = F_PARTS;
            break;
        case F_PARTS:
            w->parts = v > 0 ? v - 1 : 0;
            if (w->parts) {
                w->phase = F_PART_FIXED;
            } else {
                tagged_then(w, 0, F_AFTER_TOPIC_TAGS);
            }
            break;
        case F_PART_FIXED: /* index, error, high watermark, last stable, log start offsets */
            w->skip = 30;
            w->phase = F_ABORTED;
            break;
        case F_ABORTED:
            w->aborted = v > 0 ? v - 1 : 0;
            w->phase = w->aborted ? F_ABORTED_ITEM : F_PREFERRED;
            break;
        case F_ABORTED_ITEM: /* producer id, first offset, then its tagged fields */
            tagged_then(w, 16, F_AFTER_ABORTED_TAGS);
            break;
        case F_AFTER_ABORTED_TAGS:
            w->phase = --w->aborted ? F_ABORTED_ITEM : F_PREFERRED;
            break;
        case F_PREFERRED:
            w->skip = 4;
            w->phase = F_RECORDS;
            break;
        case F_RECORDS:
            tagged_then(w, v > 0 ? v - 1 : 0, F_AFTER_PART_TAGS);
            break;
        case F_AFTER_PART_TAGS:
            if (--w->parts) {
                w->phase = F_PART_FIXED;
            } else {
                tagged_then(w, 0, F_AFTER_TOPIC_TAGS);
            }
            break;
        case F_AFTER_TOPIC_TAGS:
            w->phase = --w->topics ? F_TOPIC_ID : F_TOP_TAGS;
            break;
        case F_TAGGED:
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
        case F_TOP_TAGS:
            return W_TAIL;
        default:
            return W_BAD;
        }
    }
}

/* The Fetch response of `whole` bytes at p (avail of them read): S_DONE when it passes as it
 * is (what the chain would have seen is counted), S_WAIT until it is here whole, S_PYTHON
 * when Python must run the chain over it (or it is larger than the session may buffer). */
static int scan_response(engine_t *e, session_t *s, const pending_t *entry, const uint8_t *p,
                         size_t avail, uint64_t whole) {
    dir_t *d = &s->resp;
    if (whole > d->cap && (whole > s->fetch_cap || !grow_to(d, s->fetch_cap))) {
        return S_PYTHON;
    }
    if (avail < whole) {
        return S_WAIT; /* room is made once what precedes it is written */
    }
    nc_counts counts;
    const char *why;
    if (nf_scan_fetch(p, (size_t)whole, entry->ver, &s->fetch_plan, entry->check, &counts,
                      &why) != NC_OK) {
        return S_PYTHON;
    }
    count_stamped(e, s->fetch_key, &counts);
    return S_DONE;
}

static void parse_responses(engine_t *e, session_t *s, double now) {
    dir_t *d = &s->resp;
    for (;;) {
        if (s->walking) {
            /* Approve what the walk has passed; the tail waits for its verdict. */
            size_t pos = d->parsed;
            size_t limit = d->len;
            if (d->off + limit > s->frame_end) {
                limit = (size_t)(s->frame_end - d->off);
            }
            int r = fetch_walk(&s->walk, d->buf, &pos, limit);
            d->remaining -= pos - d->parsed;
            d->parsed = pos;
            if (r == W_MORE) {
                return;
            }
            size_t tail = (size_t)(s->frame_end - d->off) - d->parsed;
            if (r == W_TAIL && tail == 1 && d->len > d->parsed) {
                if (d->buf[d->parsed] != 0) {
                    r = W_BAD; /* cannot be: one byte of a non-empty tagged section */
                } else {
                    s->walking = 0; /* no tagged fields: the last byte passes too */
                    continue;
                }
            }
            if (r == W_TAIL && tail == 1) {
                return; /* its last byte is still to come */
            }
            /* Leader hints (or bytes this walk cannot place): Python finishes the frame
             * from its tail, which must be here whole first. */
            if (tail > d->cap) {
                fail(e, s, R_UPSTREAM_BAD, "upstream sent a Fetch response with a tail "
                                           "larger than the relay's buffer");
                return;
            }
            if (d->len - d->parsed < tail) {
                return; /* room is made once what is approved is written */
            }
            s->tail = tail;
            s->walking = 0;
            d->remaining = 0;
            begin_stop(s, R_RESPONSE);
            s->reason = R_RESPONSE; /* whatever stopped it first: Python must send the tail */
            return;
        }
        if (d->remaining) {
            if (!advance(d)) {
                return;
            }
            s->fifo[(s->fhead + s->fstarted - 1) % s->fcap].end = d->off + d->parsed;
            continue;
        }
        if (s->state != ACTIVE) {
            return;
        }
        size_t avail = d->len - d->parsed;
        if (avail < 8) {
            return;
        }
        const uint8_t *p = d->buf + d->parsed;
        int32_t size = be32(p);
        int32_t corr = be32(p + 4);
        char why[160];
        if (size < 4 || (int64_t)size > s->max_frame) {
            snprintf(why, sizeof why, "upstream sent a bad frame: frame size %d", (int)size);
            fail(e, s, R_UPSTREAM_BAD, why);
            return;
        }
        if (s->fstarted >= s->fcount) {
            snprintf(why, sizeof why, "upstream answered correlation id %d, expected None",
                     (int)corr);
            fail(e, s, R_UPSTREAM_BAD, why);
            return;
        }
        pending_t *entry = &s->fifo[(s->fhead + s->fstarted) % s->fcap];
        if (entry->corr != corr) {
            snprintf(why, sizeof why, "upstream answered correlation id %d, expected %d",
                     (int)corr, (int)entry->corr);
            fail(e, s, R_UPSTREAM_BAD, why);
            return;
        }
        if (entry->scan) {
            int r = scan_response(e, s, entry, p, avail, (uint64_t)size + 4);
            if (r == S_WAIT) {
                return;
            }
            if (r == S_PYTHON) {
                begin_stop(s, R_RESPONSE); /* Python reads it, from its first byte */
                return;
            }
            observe(e, entry, now, 1);
            s->fstarted++;
            d->remaining = (uint64_t)size + 4;
            continue;
        }
        if (entry->check && entry->api == FETCH) {
            /* Fetch: walked as it streams past. The header is passed (8 bytes); header tagged
             * fields are part of the walk. */
            memset(&s->walk, 0, sizeof s->walk);
            tagged_then(&s->walk, 0, F_FIXED);
            s->walking = 1;
            s->frame_end = d->off + d->parsed + (uint64_t)size + 4;
            observe(e, entry, now, 1);
            s->fstarted++;
            d->parsed += 8;
            d->remaining = (uint64_t)size + 4 - 8;
            continue;
        }
        if (entry->check) {
            if ((uint64_t)size + 4 > d->cap) {
                begin_stop(s, R_RESPONSE); /* too large to read here: Python streams it */
                return;
            }
            if (avail < (size_t)size + 4) {
                return; /* read whole before it passes */
            }
            if (top_level_tags(p, (size_t)size + 4, entry->api, entry->ver) != 0) {
                begin_stop(s, R_RESPONSE); /* leader hints (or unreadable): Python's */
                return;
            }
        }
        observe(e, entry, now, 1);
        s->fstarted++;
        d->remaining = (uint64_t)size + 4;
    }
}

/* A bounded reader over one buffered frame; any overrun sets `bad`. */
typedef sc_reader walk_t;
#define w_uvarint sc_read_uvarint
#define w_skip sc_read_skip
#define w_tagged sc_read_tagged

/* A compact array or nullable field's length: uvarint N+1, 0 for null (read as 0). */
static uint64_t w_compact(walk_t *w) {
    uint64_t n = w_uvarint(w);
    return n > 0 ? n - 1 : 0;
}

/* The number of top-level tagged fields of a Produce v10-13 response frame (size prefix
 * included, read whole: Produce responses are small), or -1 when the frame cannot be read as
 * one. The layout is that of protocol/messages/produce_response.py; Fetch responses, which
 * can be of any size, are walked as they stream (`fetch_walk`). */
static int64_t top_level_tags(const uint8_t *frame, size_t len, int api, int ver) {
    walk_t w = {frame, 8, len, 0}; /* after the size and the correlation id */
    w_tagged(&w);                  /* response header v1 */
    if (api == PRODUCE && ver >= PRODUCE_NODE_ENDPOINTS_VERSION && ver <= 13) {
        for (uint64_t t = w_compact(&w); t > 0 && !w.bad; t--) {
            w_skip(&w, ver >= TOPIC_ID_VERSION ? 16 : w_compact(&w)); /* topic id, or name */
            for (uint64_t n = w_compact(&w); n > 0 && !w.bad; n--) {
                w_skip(&w, 30); /* index, error, base offset, append time, log start */
                for (uint64_t r = w_compact(&w); r > 0 && !w.bad; r--) {
                    w_skip(&w, 4);               /* batch index */
                    w_skip(&w, w_compact(&w));   /* its message */
                    w_tagged(&w);
                }
                w_skip(&w, w_compact(&w)); /* error message */
                w_tagged(&w);
            }
            w_tagged(&w);
        }
        w_skip(&w, 4); /* throttle time */
    } else {
        return -1;
    }
    uint64_t count = w_uvarint(&w);
    if (w.bad) {
        return -1;
    }
    if (count == 0 && w.pos != w.end) {
        return -1; /* trailing bytes: let the Python codec say what is wrong */
    }
    return (int64_t)count;
}

/* Responses whose last byte reached the client: time them and free their slots. */
static void complete_responses(engine_t *e, session_t *s, double now) {
    uint64_t written = s->resp.off + s->resp.sent - s->resp.piped;
    while (s->fstarted > 0) {
        pending_t *entry = &s->fifo[s->fhead];
        if (entry->end == 0 || entry->end > written) {
            break;
        }
        observe(e, entry, now, 0);
        s->fhead = (s->fhead + 1) % s->fcap;
        s->fcount--;
        s->fstarted--;
        if (s->fcount == 0) {
            s->last_active = now;
        }
    }
}

static void compact(dir_t *d) {
    if (d->sent == 0) {
        return;
    }
    if (d->sent == d->len) {
        d->off += d->len;
        d->len = d->parsed = d->sent = 0;
    } else if (d->len == d->cap) {
        memmove(d->buf, d->buf + d->sent, d->len - d->sent);
        d->off += d->sent;
        d->len -= d->sent;
        d->parsed -= d->sent;
        d->sent = 0;
    }
}

/* One read into d of at most `limit` bytes (0: as many as fit): 1 data, 0 nothing now, -1 end
 * of stream, -2 error (errno set). */
static int read_into(engine_t *e, dir_t *d, int fd, int counter, size_t limit) {
    compact(d);
    size_t space = d->cap - d->len;
    if (limit > 0 && limit < space) {
        space = limit;
    }
    if (space == 0) {
        return 0;
    }
    ssize_t n = recv(fd, d->buf + d->len, space, MSG_DONTWAIT);
    if (n > 0) {
        d->len += (size_t)n;
        e->bytes[counter] += (uint64_t)n;
        return 1;
    }
    if (n == 0) {
        return -1;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        return 0;
    }
    return -2;
}

/* ---- splicing: frame bytes no check reads go socket to pipe to socket, never copied into
 * the engine's buffers (a plain Fetch response's records, a passing Produce request's body) */

#define SPLICE_MIN (32 * 1024) /* below this, one recv into the buffer costs less */
#define PIPE_SIZE (1024 * 1024)

/* Make d's pipe once; a direction that cannot have one (no descriptors left, a blocking
 * socket) reads into its buffer as before. */
static int make_pipe(dir_t *d, int from_fd) {
    if (d->splicing == 0) {
        int flags = fcntl(from_fd, F_GETFL);
        if (flags < 0 || !(flags & O_NONBLOCK) || pipe2(d->pipe, O_NONBLOCK | O_CLOEXEC) != 0) {
            d->splicing = -1;
            return 0;
        }
        (void)fcntl(d->pipe[1], F_SETPIPE_SZ, PIPE_SIZE); /* the default 64 KiB if refused */
        int size = fcntl(d->pipe[1], F_GETPIPE_SZ);
        d->pipe_cap = size > 0 ? (size_t)size : 65536;
        d->splicing = 1;
    }
    return d->splicing > 0;
}

/* How many of the coming bytes of d may be spliced: bytes of the frame in progress that
 * pass unread (the rest of a passing frame, or the records a walked Fetch response skips),
 * when nothing buffered must be written before them. 0: read into the buffer. */
static uint64_t splice_budget(session_t *s, dir_t *d, int from_fd) {
    if (d->splicing < 0 || d->sent != d->len || d->piped > 0) {
        return 0;
    }
    uint64_t n = d->remaining;
    if (d == &s->resp && s->walking) {
        uint64_t to_end = s->frame_end - (d->off + d->len);
        n = s->walk.skip < to_end ? s->walk.skip : to_end;
    }
    if (n < SPLICE_MIN || !make_pipe(d, from_fd)) {
        return 0;
    }
    return n;
}

/* One splice of up to `budget` bytes from fd into d's pipe; returns as read_into does, and
 * -3 when the socket cannot splice (the caller reads instead). */
static int splice_in(engine_t *e, session_t *s, dir_t *d, int fd, int counter, uint64_t budget,
                     int *more) {
    size_t want = budget < d->pipe_cap ? (size_t)budget : d->pipe_cap;
    ssize_t n = splice(fd, NULL, d->pipe[1], NULL, want, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n > 0) {
        compact(d); /* everything buffered was written: the buffer starts afresh after these */
        d->off += (uint64_t)n;
        d->piped += (size_t)n;
        d->remaining -= (uint64_t)n;
        e->bytes[counter] += (uint64_t)n;
        e->spliced += (uint64_t)n;
        if (d == &s->resp && s->walking) {
            s->walk.skip -= (uint64_t)n;
        } else if (d == &s->resp && d->remaining == 0) {
            s->fifo[(s->fhead + s->fstarted - 1) % s->fcap].end = d->off;
        }
        *more = (size_t)n == want;
        return 1;
    }
    *more = 0;
    if (n == 0) {
        return -1;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        return 0;
    }
    if (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP) {
        d->splicing = -1;
        return -3;
    }
    return -2;
}

/* Read what may come into d, spliced where it passes unread: as read_into; `more` says the
 * socket may hold more now. */
static int pull(engine_t *e, session_t *s, dir_t *d, int fd, int counter, int *more) {
    uint64_t budget = splice_budget(s, d, fd);
    if (budget > 0) {
        int r = splice_in(e, s, d, fd, counter, budget, more);
        if (r != -3) {
            return r;
        }
    }
    /* In a session that stamps, requests are read no further than the one to stamp (first
     * its head, in a read no larger than the buffer's first size; then up to its end): the
     * buffer's room past it is where it grows when stamped. */
    size_t limit = 0;
    if (d == &s->req && s->stamping) {
        size_t unparsed = d->len - d->parsed;
        if (s->stamp_wait > unparsed) {
            limit = (size_t)(s->stamp_wait - unparsed);
        } else if (s->stamp_wait == 0 && d->remaining == 0 && unparsed < s->base_cap) {
            limit = s->base_cap - unparsed;
        }
    }
    size_t before = d->len;
    int r = read_into(e, d, fd, counter, limit);
    /* a short read drained the socket */
    *more = r == 1 && (d->len == d->cap || (limit > 0 && d->len - before == limit));
    return r;
}

/* What a write that returned n means: 1 go on, 0 wait for EPOLLOUT, -2 error (errno set). */
static int write_result(ssize_t n) {
    if (n > 0 || (n < 0 && errno == EINTR)) {
        return 1;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return 0;
    }
    if (n == 0) {
        errno = EPIPE;
    }
    return -2;
}

/* Write what is approved, the pipe's bytes first (they precede the buffer's): 1 all out,
 * 0 some left (wait for EPOLLOUT), -2 error. */
static int flush(engine_t *e, dir_t *d, int fd, int counter) {
    while (d->piped > 0) {
        ssize_t n = splice(d->pipe[0], NULL, fd, NULL, d->piped,
                           SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        int r = write_result(n);
        if (r != 1) {
            return r;
        }
        if (n > 0) {
            d->piped -= (size_t)n;
            e->bytes[counter] += (uint64_t)n;
        }
    }
    while (d->sent < d->parsed) {
        ssize_t n = send(fd, d->buf + d->sent, d->parsed - d->sent, MSG_DONTWAIT | MSG_NOSIGNAL);
        int r = write_result(n);
        if (r != 1) {
            return r;
        }
        if (n > 0) {
            d->sent += (size_t)n;
            e->bytes[counter] += (uint64_t)n;
        }
    }
    compact(d);
    return 1;
}

static void socket_error(engine_t *e, session_t *s, const char *side, int err) {
    char why[160];
    snprintf(why, sizeof why, "socket error on the %s connection: %s", side, strerror(err));
    fail(e, s, R_SOCKET, why);
}

/* Whether a direction may read now: ACTIVE, or STOPPING with a frame to finish; never while
 * its pipe holds bytes (they go out first), nor past a frame waiting to be stamped. */
static int may_read(session_t *s, dir_t *d) {
    if (d == &s->req && s->stamp_wait > 0 && d->len - d->parsed >= s->stamp_wait) {
        return 0; /* a frame to stamp is here whole: its room comes from what goes out */
    }
    return d->piped == 0 && (s->state == ACTIVE || (s->state == STOPPING && d->remaining > 0));
}

static void set_interest(engine_t *e, session_t *s) {
    uint32_t want[2];
    want[CLIENT] = (may_read(s, &s->req) && s->req.len < s->req.cap ? EPOLLIN : 0) |
                   (s->resp.sent < s->resp.parsed || s->resp.piped > 0 ? EPOLLOUT : 0);
    want[UPSTREAM] = (may_read(s, &s->resp) && s->resp.len < s->resp.cap ? EPOLLIN : 0) |
                     (s->req.sent < s->req.parsed || s->req.piped > 0 ? EPOLLOUT : 0);
    for (int side = 0; side < 2; side++) {
        if (want[side] != s->mask[side]) {
            struct epoll_event ev = {.events = want[side], .data.ptr = &s->ep[side]};
            epoll_ctl(e->ep, EPOLL_CTL_MOD, s->fd[side], &ev);
            s->mask[side] = want[side];
        }
    }
}

/* Move what can move for one session. `readable` says which sides epoll reported. */
static void service(engine_t *e, session_t *s, int readable_client, int readable_upstream) {
    double now = now_s();
    for (int round = 0; round < 8 && (s->state == ACTIVE || s->state == STOPPING); round++) {
        int progress = 0;
        if (readable_client && may_read(s, &s->req)) {
            int more = 0;
            int r = pull(e, s, &s->req, s->fd[CLIENT], 0, &more);
            if (r == -2) {
                socket_error(e, s, "client", errno);
                return;
            }
            if (r == -1) {
                if (s->req.remaining > 0 || s->req.len > s->req.parsed) {
                    fail(e, s, R_CLIENT_CLOSED, "client closed the connection");
                    return;
                }
                begin_stop(s, R_CLIENT_EOF);
                readable_client = 0;
            } else if (r == 1) {
                progress = 1;
                s->last_active = now;
                readable_client = more;
            } else {
                readable_client = 0;
            }
            size_t start_parsed = s->req.parsed;
            uint64_t start_off = s->req.off;
            parse_requests(e, s, now);
            if (r == 1) {
                int completed = s->req.off + s->req.parsed > start_off + start_parsed &&
                                s->req.remaining == 0;
                int partial = s->req.remaining > 0 || s->req.len > s->req.parsed;
                if (!partial) {
                    s->frame_started = 0;
                } else if (completed || s->frame_started == 0) {
                    s->frame_started = now;
                }
            }
        } else {
            parse_requests(e, s, now);
        }
        int w = flush(e, &s->req, s->fd[UPSTREAM], 1);
        if (w == -2) {
            socket_error(e, s, "upstream", errno);
            return;
        }
        if (readable_upstream && may_read(s, &s->resp)) {
            int more = 0;
            int r = pull(e, s, &s->resp, s->fd[UPSTREAM], 2, &more);
            if (r == -2) {
                socket_error(e, s, "upstream", errno);
                return;
            }
            if (r == -1) {
                fail(e, s, R_UPSTREAM_CLOSED, "upstream closed the connection");
                return;
            }
            if (r == 1) {
                progress = 1;
                readable_upstream = more;
            } else {
                readable_upstream = 0;
            }
        }
        parse_responses(e, s, now);
        if (s->state == HANDED) {
            return;
        }
        w = flush(e, &s->resp, s->fd[CLIENT], 3);
        if (w == -2) {
            socket_error(e, s, "client", errno);
            return;
        }
        complete_responses(e, s, now);
        /* A freed slot or drained buffer may let waiting requests through. */
        size_t before = s->req.parsed;
        parse_requests(e, s, now);
        if (s->req.parsed != before) {
            progress = 1;
        }
        if (!progress && !readable_client && !readable_upstream) {
            break;
        }
    }
    if (s->state == STOPPING && s->req.remaining == 0 && s->req.sent == s->req.parsed &&
        s->resp.remaining == 0 && s->resp.sent == s->resp.parsed && s->req.piped == 0 &&
        s->resp.piped == 0 &&
        (s->fstarted == 0 || (s->tail > 0 && s->fstarted == 1))) {
        hand_over(e, s);
        return;
    }
    if (s->state == ACTIVE || s->state == STOPPING) {
        set_interest(e, s);
    }
}

static void check_deadlines(engine_t *e, double now, int *timeout_ms) {
    double soonest = -1;
    for (session_t *s = e->active; s != NULL; s = s->next) {
        if (s->state != ACTIVE && s->state != STOPPING) {
            continue;
        }
        if (s->fcount > 0) {
            s->last_active = now; /* busy is not idle */
        }
        if (s->frame_started > 0 && now >= s->frame_started + s->frame_s) {
            char why[160];
            snprintf(why, sizeof why,
                     "limits.frame_timeout_s: a frame was not complete %g s after it began",
                     s->frame_s);
            fail(e, s, R_FRAME, why);
            continue;
        }
        if (s->fcount == 0 && now >= s->last_active + s->idle_s) {
            char why[160];
            snprintf(why, sizeof why, "limits.idle_timeout_s: idle for %g s", s->idle_s);
            fail(e, s, R_IDLE, why);
            continue;
        }
        double next = s->fcount > 0 ? now + 1.0 : s->last_active + s->idle_s;
        if (s->frame_started > 0 && s->frame_started + s->frame_s < next) {
            next = s->frame_started + s->frame_s;
        }
        if (soonest < 0 || next < soonest) {
            soonest = next;
        }
    }
    if (soonest < 0) {
        *timeout_ms = -1;
    } else {
        double ms = (soonest - now) * 1000.0 + 1.0;
        *timeout_ms = ms < 1 ? 1 : (ms > 60000 ? 60000 : (int)ms);
    }
}

static void close_pipe(dir_t *d) {
    if (d->splicing > 0) {
        close(d->pipe[0]);
        close(d->pipe[1]);
        d->splicing = 0;
    }
}

static void free_session(session_t *s) {
    close_pipe(&s->req);
    close_pipe(&s->resp);
    if (s->stamping) {
        nc_plan_free(&s->plan);
    }
    if (s->scanning) {
        nc_plan_free(&s->fetch_plan);
    }
    free(s->stamped.buf);
    free(s->req.buf);
    free(s->resp.buf);
    free(s->fifo);
    free(s);
}

static void start_session(engine_t *e, session_t *s) {
    for (int side = 0; side < 2; side++) {
        struct epoll_event ev = {.events = 0, .data.ptr = &s->ep[side]};
        if (epoll_ctl(e->ep, EPOLL_CTL_ADD, s->fd[side], &ev) != 0) {
            int err = errno;
            if (side == 1) {
                epoll_ctl(e->ep, EPOLL_CTL_DEL, s->fd[CLIENT], NULL);
            }
            s->registered = 0;
            socket_error(e, s, side == CLIENT ? "client" : "upstream", err);
            return;
        }
    }
    s->registered = 1;
    s->state = ACTIVE;
    if (s->stop_requested) {
        begin_stop(s, R_DRAIN);
    }
    service(e, s, 1, 0); /* bytes Python handed over, then whatever is waiting */
}

static void *run_engine(void *arg) {
    engine_t *e = arg;
    struct epoll_event events[64];
    int timeout_ms = -1;
    for (;;) {
        int n = epoll_wait(e->ep, events, 64, timeout_ms);
        pthread_mutex_lock(&e->mu);
        if (e->quit) {
            pthread_mutex_unlock(&e->mu);
            break;
        }
        for (int i = 0; i < n; i++) {
            endpoint_t *ep = events[i].data.ptr;
            if (ep == NULL) { /* wake-up from Python: new sessions, stop requests */
                uint64_t v;
                ssize_t ignored = read(e->wake_fd, &v, sizeof v);
                (void)ignored;
                for (session_t *s = e->active; s != NULL; s = s->next) {
                    if (s->state == 0) {
                        start_session(e, s);
                    } else if (s->state == STOPPING) {
                        service(e, s, 0, 0);
                    }
                }
                continue;
            }
            session_t *s = ep->s;
            if (s->state != ACTIVE && s->state != STOPPING) {
                continue;
            }
            uint32_t ev = events[i].events;
            int in = (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0;
            service(e, s, ep->side == CLIENT && in, ep->side == UPSTREAM && in);
        }
        check_deadlines(e, now_s(), &timeout_ms);
        while (e->graveyard != NULL) {
            session_t *dead = e->graveyard;
            e->graveyard = dead->next;
            free_session(dead);
        }
        pthread_mutex_unlock(&e->mu);
    }
    return NULL;
}

/* ---- Python interface ------------------------------------------------------------------ */

static void wake(engine_t *e) {
    uint64_t one = 1;
    ssize_t ignored = write(e->wake_fd, &one, sizeof one);
    (void)ignored;
}

static int engine_init(engine_t *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"bounds", NULL};
    PyObject *bounds;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O", kwlist, &bounds)) {
        return -1;
    }
    if (self->started) {
        PyErr_SetString(PyExc_RuntimeError, "engine already initialised");
        return -1;
    }
    PyObject *seq = PySequence_Fast(bounds, "bounds must be a sequence of floats");
    if (seq == NULL) {
        return -1;
    }
    Py_ssize_t nb = PySequence_Fast_GET_SIZE(seq);
    if (nb > MAX_BOUNDS) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "too many latency bounds");
        return -1;
    }
    for (Py_ssize_t i = 0; i < nb; i++) {
        self->bounds[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, i));
    }
    Py_DECREF(seq);
    if (PyErr_Occurred()) {
        return -1;
    }
    self->nbounds = (int)nb;
    if (getrandom(self->rng, sizeof self->rng, 0) != (ssize_t)sizeof self->rng) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    self->ep = epoll_create1(EPOLL_CLOEXEC);
    self->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    self->notify_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (self->ep < 0 || self->wake_fd < 0 || self->notify_fd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(self->ep, EPOLL_CTL_ADD, self->wake_fd, &ev) != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    pthread_mutex_init(&self->mu, NULL);
    if (pthread_create(&self->thread, NULL, run_engine, self) != 0) {
        PyErr_SetString(PyExc_OSError, "cannot start the relay thread");
        return -1;
    }
    self->started = 1;
    return 0;
}

static void stop_thread(engine_t *self) {
    if (!self->started) {
        return;
    }
    pthread_mutex_lock(&self->mu);
    self->quit = 1;
    pthread_mutex_unlock(&self->mu);
    wake(self);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(self->thread, NULL);
    Py_END_ALLOW_THREADS
    self->started = 0;
    for (session_t *s = self->active; s != NULL;) {
        session_t *next = s->next;
        free_session(s);
        s = next;
    }
    self->active = NULL;
    for (session_t *s = self->graveyard; s != NULL;) {
        session_t *next = s->next;
        free_session(s);
        s = next;
    }
    self->graveyard = NULL;
}

static void engine_dealloc(engine_t *self) {
    stop_thread(self);
    for (int a = 0; a < MAX_API; a++) {
        free(self->stats[a]);
    }
    free(self->events);
    free(self->stamp_stats);
    if (self->ep > 0) close(self->ep);
    if (self->wake_fd > 0) close(self->wake_fd);
    if (self->notify_fd > 0) close(self->notify_fd);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static session_t *find(engine_t *e, long long id, session_t ***link_out) {
    session_t **link = &e->active;
    while (*link != NULL && (*link)->id != id) {
        link = &(*link)->next;
    }
    if (link_out != NULL) {
        *link_out = link;
    }
    return *link;
}

/* A (plan, key, cap) argument of `register`: 0 with a Python exception set when it is not
 * one; else *has set, and the buffer it concerns may grow to cap (at least buf_size). */
static int plan_arg(PyObject *arg, nc_plan *plan, long long *key, size_t *cap,
                    Py_ssize_t buf_size, int *has) {
    PyObject *wire;
    Py_ssize_t want;
    if (!PyArg_ParseTuple(arg, "OLn", &wire, key, &want) || !nc_plan_parse(wire, plan)) {
        return 0;
    }
    *has = 1;
    *cap = want > buf_size ? (size_t)want : (size_t)buf_size;
    return 1;
}

static PyObject *engine_register(engine_t *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"session_id", "client_fd", "upstream_fd", "table", "max_frame",
                             "max_in_flight", "buffer_size", "idle_timeout", "frame_timeout",
                             "prefill", "stamp", "fetch", "frame_age", NULL};
    long long id;
    int cfd, ufd;
    Py_buffer table, prefill = {0};
    long long max_frame;
    Py_ssize_t max_in_flight, buf_size;
    double idle_s, frame_s;
    PyObject *stamp = Py_None, *fetch = Py_None;
    double frame_age = 0; /* seconds since the prefilled partial frame began */
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Liiy*Lnnddy*|OOd", kwlist, &id, &cfd, &ufd,
                                     &table, &max_frame, &max_in_flight, &buf_size, &idle_s,
                                     &frame_s, &prefill, &stamp, &fetch, &frame_age)) {
        return NULL;
    }
    PyObject *result = NULL;
    if (table.len != TABLE_SIZE) {
        PyErr_Format(PyExc_ValueError, "table must be %d bytes", TABLE_SIZE);
        goto done;
    }
    if (buf_size < 4096 || (size_t)prefill.len > (size_t)buf_size || max_in_flight < 1) {
        PyErr_SetString(PyExc_ValueError, "buffer_size below 4096, prefill above it, or "
                                          "max_in_flight below 1");
        goto done;
    }
    session_t *s = calloc(1, sizeof(session_t));
    if (s == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if ((stamp != Py_None && !plan_arg(stamp, &s->plan, &s->stamp_key, &s->stamp_cap,
                                       buf_size, &s->stamping)) ||
        (fetch != Py_None && !plan_arg(fetch, &s->fetch_plan, &s->fetch_key, &s->fetch_cap,
                                       buf_size, &s->scanning))) {
        free_session(s);
        goto done;
    }
    s->id = id;
    s->fd[CLIENT] = cfd;
    s->fd[UPSTREAM] = ufd;
    memcpy(s->table, table.buf, TABLE_SIZE);
    s->max_frame = max_frame;
    s->max_in_flight = (size_t)max_in_flight;
    s->idle_s = idle_s;
    s->frame_s = frame_s;
    s->last_active = now_s();
    s->req.cap = s->resp.cap = s->base_cap = (size_t)buf_size;
    s->req.buf = malloc((size_t)buf_size);
    s->resp.buf = malloc((size_t)buf_size);
    s->fcap = (size_t)max_in_flight;
    s->fifo = calloc(s->fcap, sizeof(pending_t));
    if (s->req.buf == NULL || s->resp.buf == NULL || s->fifo == NULL) {
        free_session(s);
        PyErr_NoMemory();
        goto done;
    }
    memcpy(s->req.buf, prefill.buf, (size_t)prefill.len);
    s->req.len = (size_t)prefill.len;
    if (prefill.len > 0) { /* its deadline runs from when it began, not from now */
        s->frame_started = s->last_active - (frame_age > 0 ? frame_age : 0);
    }
    s->ep[CLIENT].s = s->ep[UPSTREAM].s = s;
    s->ep[CLIENT].side = CLIENT;
    s->ep[UPSTREAM].side = UPSTREAM;
    pthread_mutex_lock(&self->mu);
    if (find(self, id, NULL) != NULL) {
        pthread_mutex_unlock(&self->mu);
        free_session(s);
        PyErr_Format(PyExc_ValueError, "session %lld is already registered", id);
        goto done;
    }
    s->next = self->active;
    self->active = s;
    pthread_mutex_unlock(&self->mu);
    wake(self);
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&table);
    if (prefill.obj != NULL) {
        PyBuffer_Release(&prefill);
    }
    return result;
}

static PyObject *engine_stop(engine_t *self, PyObject *arg) {
    long long id = PyLong_AsLongLong(arg);
    if (id == -1 && PyErr_Occurred()) {
        return NULL;
    }
    pthread_mutex_lock(&self->mu);
    session_t *s = find(self, id, NULL);
    int found = s != NULL;
    if (s != NULL) {
        s->stop_requested = 1;
        begin_stop(s, R_DRAIN);
    }
    pthread_mutex_unlock(&self->mu);
    if (found) {
        wake(self);
    }
    return PyBool_FromLong(found);
}

static PyObject *engine_events(engine_t *self, PyObject *unused) {
    uint64_t v = 0;
    ssize_t ignored = read(self->notify_fd, &v, sizeof v);
    (void)ignored;
    pthread_mutex_lock(&self->mu);
    PyObject *out = PyList_New((Py_ssize_t)self->nevents);
    if (out != NULL) {
        for (size_t i = 0; i < self->nevents; i++) {
            PyList_SET_ITEM(out, (Py_ssize_t)i, PyLong_FromLongLong(self->events[i]));
        }
        self->nevents = 0;
    }
    pthread_mutex_unlock(&self->mu);
    return out;
}

static PyObject *bytes_of(dir_t *d, size_t from) {
    return PyBytes_FromStringAndSize((const char *)d->buf + from, (Py_ssize_t)(d->len - from));
}

/* Take a session back: (reason, detail, client bytes, upstream bytes, in-flight entries).
 * A session still running is detached at once (reason "detached"). */
static PyObject *engine_take(engine_t *self, PyObject *arg) {
    long long id = PyLong_AsLongLong(arg);
    if (id == -1 && PyErr_Occurred()) {
        return NULL;
    }
    pthread_mutex_lock(&self->mu);
    session_t **link;
    session_t *s = find(self, id, &link);
    if (s == NULL) {
        pthread_mutex_unlock(&self->mu);
        PyErr_Format(PyExc_KeyError, "no session %lld", id);
        return NULL;
    }
    if (s->state != HANDED) {
        unregister(self, s);
        s->reason = R_DETACHED;
        s->state = HANDED;
    }
    *link = s->next;
    s->state = DEAD;
    PyObject *entries = PyList_New(0);
    PyObject *client = bytes_of(&s->req, s->req.parsed);
    PyObject *upstream = bytes_of(&s->resp, s->resp.parsed);
    for (size_t i = 0; entries != NULL && i < s->fcount; i++) {
        pending_t *p = &s->fifo[(s->fhead + i) % s->fcap];
        PyObject *t = Py_BuildValue("(iiid)", (int)p->corr, (int)p->api, (int)p->ver,
                                    p->received);
        if (t == NULL || PyList_Append(entries, t) != 0) {
            Py_XDECREF(t);
            Py_CLEAR(entries);
            break;
        }
        Py_DECREF(t);
    }
    PyObject *out = NULL;
    if (entries != NULL && client != NULL && upstream != NULL) {
        out = Py_BuildValue("(ssOOOKnd)", REASONS[s->reason], s->detail, client, upstream,
                            entries, (unsigned long long)s->forwarded, (Py_ssize_t)s->tail,
                            s->req.len > s->req.parsed && s->frame_started > 0
                                ? now_s() - s->frame_started
                                : -1.0);
    }
    Py_XDECREF(entries);
    Py_XDECREF(client);
    Py_XDECREF(upstream);
    s->next = self->graveyard;
    self->graveyard = s;
    pthread_mutex_unlock(&self->mu);
    wake(self); /* frees it after the thread's current batch */
    return out;
}

static PyObject *counts_tuple(uint64_t *counts, int n) {
    PyObject *t = PyTuple_New(n);
    for (int i = 0; t != NULL && i < n; i++) {
        PyTuple_SET_ITEM(t, i, PyLong_FromUnsignedLongLong(counts[i]));
    }
    return t;
}

/* What was counted since the last call: (bytes by direction, {(api, version): (requests,
 * latency counts, latency sum, upstream counts, upstream sum)}). */
static PyObject *engine_collect(engine_t *self, PyObject *unused) {
    PyObject *pairs = PyDict_New();
    if (pairs == NULL) {
        return NULL;
    }
    pthread_mutex_lock(&self->mu);
    uint64_t bytes[4];
    memcpy(bytes, self->bytes, sizeof bytes);
    memset(self->bytes, 0, sizeof self->bytes);
    int nb = self->nbounds + 1;
    int ok = 1;
    for (int a = 0; ok && a < MAX_API; a++) {
        if (self->stats[a] == NULL) {
            continue;
        }
        for (int v = 0; ok && v < MAX_VER; v++) {
            pair_stats_t *st = &self->stats[a][v];
            if (!st->dirty) {
                continue;
            }
            PyObject *key = Py_BuildValue("(ii)", a, v);
            PyObject *lat = counts_tuple(st->lat, nb);
            PyObject *up = counts_tuple(st->up, nb);
            PyObject *val = NULL;
            if (key != NULL && lat != NULL && up != NULL) {
                val = Py_BuildValue("(KOdOd)", (unsigned long long)st->requests, lat,
                                    st->lat_sum, up, st->up_sum);
            }
            if (val == NULL || PyDict_SetItem(pairs, key, val) != 0) {
                ok = 0;
            }
            Py_XDECREF(key);
            Py_XDECREF(lat);
            Py_XDECREF(up);
            Py_XDECREF(val);
            memset(st, 0, sizeof *st);
        }
    }
    pthread_mutex_unlock(&self->mu);
    if (!ok) {
        Py_DECREF(pairs);
        return NULL;
    }
    PyObject *out = Py_BuildValue("((KKKK)O)", (unsigned long long)bytes[0],
                                  (unsigned long long)bytes[1], (unsigned long long)bytes[2],
                                  (unsigned long long)bytes[3], pairs);
    Py_DECREF(pairs);
    return out;
}

/* What was stamped since the last call, {stamp key: nc_counts_tuple}, and reset. */
static PyObject *engine_collect_stamped(engine_t *self, PyObject *unused) {
    PyObject *out = PyDict_New();
    if (out == NULL) {
        return NULL;
    }
    pthread_mutex_lock(&self->mu);
    for (size_t i = 0; i < self->nstamp_stats && out != NULL; i++) {
        stamp_stats_t *row = &self->stamp_stats[i];
        PyObject *key = PyLong_FromLongLong(row->key);
        PyObject *val = nc_counts_tuple(&row->counts);
        if (key == NULL || val == NULL || PyDict_SetItem(out, key, val) != 0) {
            Py_CLEAR(out);
        }
        Py_XDECREF(key);
        Py_XDECREF(val);
    }
    self->nstamp_stats = 0;
    pthread_mutex_unlock(&self->mu);
    return out;
}

static PyObject *engine_close(engine_t *self, PyObject *unused) {
    stop_thread(self);
    Py_RETURN_NONE;
}

static PyObject *engine_notify_fd(engine_t *self, void *closure) {
    return PyLong_FromLong(self->notify_fd);
}

static PyObject *engine_spliced(engine_t *self, void *closure) {
    pthread_mutex_lock(&self->mu);
    unsigned long long n = (unsigned long long)self->spliced;
    pthread_mutex_unlock(&self->mu);
    return PyLong_FromUnsignedLongLong(n);
}

static PyMethodDef engine_methods[] = {
    {"register", (PyCFunction)(void (*)(void))engine_register, METH_VARARGS | METH_KEYWORDS,
     "Hand a session's descriptors to the engine."},
    {"stop", (PyCFunction)engine_stop, METH_O,
     "Ask a session to hand over at the next frame boundary."},
    {"events", (PyCFunction)engine_events, METH_NOARGS,
     "Ids of the sessions handed over since the last call."},
    {"take", (PyCFunction)engine_take, METH_O,
     "Take a session back (detaching it if it still runs)."},
    {"collect", (PyCFunction)engine_collect, METH_NOARGS,
     "Counters since the last call, and reset them."},
    {"collect_stamped", (PyCFunction)engine_collect_stamped, METH_NOARGS,
     "What was stamped since the last call, by stamp key, and reset."},
    {"close", (PyCFunction)engine_close, METH_NOARGS, "Stop the engine's thread."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef engine_getset[] = {
    {"notify_fd", (getter)engine_notify_fd, NULL, "Readable when events() has news.", NULL},
    {"spliced", (getter)engine_spliced, NULL,
     "Bytes moved socket to socket through a pipe, never copied (since the engine began).",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject engine_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "proxy.native._relay.Engine",
    .tp_basicsize = sizeof(engine_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)engine_init,
    .tp_dealloc = (destructor)engine_dealloc,
    .tp_methods = engine_methods,
    .tp_getset = engine_getset,
    .tp_doc = "A native relay thread serving many plaintext sessions.",
};

static PyMethodDef module_methods[] = {
    {"stamp_produce", nc_py_stamp_produce, METH_VARARGS,
     "stamp_produce(frame, plan, trace_draws, msg_draws, now_ms) -> (new frame, (batches, "
     "records, kept, kept_batches)), or (None, why) when the request goes to Python: the "
     "engine's rewrite"},
    {"valid_traceparent", nt_py_valid_traceparent, METH_O,
     "valid_traceparent(value) -> the engine's interceptors.tracing.valid_traceparent"},
    {"valid_tracestate", nt_py_valid_tracestate, METH_O,
     "valid_tracestate(value) -> whether interceptors.tracing.parse_tracestate accepts it, "
     "as the engine decides"},
    {"scan_fetch", nf_py_scan_fetch, METH_VARARGS,
     "scan_fetch(frame, version, plan, check_tags) -> (batches, records) when the Fetch "
     "response passes as it is, or (None, why) when it goes to Python: the engine's verdict"},
    {"crc32c", nc_py_crc32c, METH_VARARGS,
     "crc32c(data, table=False) -> the CRC32C the engine writes into record batches"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "proxy.native._relay", NULL, -1, module_methods,
};

PyMODINIT_FUNC PyInit__relay(void) {
    if (PyType_Ready(&engine_type) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    Py_INCREF(&engine_type);
    if (PyModule_AddObject(m, "Engine", (PyObject *)&engine_type) < 0 ||
        PyModule_AddIntConstant(m, "MAX_API", MAX_API) < 0 ||
        PyModule_AddIntConstant(m, "MAX_VERSION", MAX_VER) < 0) {
        return NULL;
    }
    return m;
}
