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
 * A side may be TLS (relay_tls.c): the engine reads and writes plaintext through the very TLS
 * connection Python's handshake made, and gives it back as it was. Such a side cannot splice
 * (its bytes on the wire are not the frames), and bytes the connection read from the socket
 * but the engine did not take yet are announced by no readiness: a session whose connection
 * holds some is served again after the turn (`again`).
 *
 * The descriptors stay Python's: the engine never closes them. Every buffer is bounded
 * (reading a side stops while its buffer is full: backpressure), and frame sizes are checked
 * against the limit before anything is forwarded.
 *
 * Nothing here touches Python objects: `_relay.c` wraps this as `proxy.native._relay.Engine`,
 * and fuzz/native/fuzz_engine.c drives it over socket pairs on a clock of its own.
 *
 * Locking: the engine mutex guards the sessions, the events and the counters. The thread
 * takes it for one epoll event at a time, and lets go of it while it stamps or scans a frame
 * (up to megabytes of walking and CRC32C): Python's calls (the wrapper makes them without the
 * GIL) wait at most for one event's socket work, never for a batch of them, so a client
 * cannot stall the event loop by sending large frames. While a session's frame is worked on
 * unlocked it is marked `busy`; `ne_take` waits for that to end, and nothing else Python may
 * call touches a session's buffers. Session structs are freed only by the thread, at the end
 * of a turn, so an event already returned by epoll_wait never points at freed memory.
 */
#define _GNU_SOURCE
#include "relay_engine.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "contracts/native_relay.h"
#include "relay_fetch.h"
#include "relay_frames.h"
#include "relay_tls.h"
#include "stamp_core.h"

#define MAX_API NE_MAX_API
#define MAX_VER NE_MAX_VER
#define TABLE_SIZE NE_TABLE_SIZE
#define MAX_BOUNDS NE_MAX_BOUNDS
#define PRODUCE NR_PRODUCE
#define FETCH NR_FETCH

/* A session's state: REGISTERED (not started by the engine's thread yet), ACTIVE (relaying),
 * STOPPING (finishing the frames begun before a hand-over), HANDED (waiting for Python to
 * take it), DEAD (taken). */
enum { REGISTERED = 0, ACTIVE = 1, STOPPING = 2, HANDED = 3, DEAD = 4 };
enum { CLIENT = 0, UPSTREAM = 1 };

/* The hand-over reasons, their names and kinds: protocol/contracts/native_relay.h. */
const char *const NE_REASONS[] = HANDOVER_NAMES;
const char *const NE_REASON_KINDS[] = HANDOVER_KINDS;
const int NE_N_REASONS = HANDOVER_COUNT;
_Static_assert(sizeof NE_REASONS / sizeof *NE_REASONS == HANDOVER_COUNT,
               "a reason without a name");
_Static_assert(sizeof NE_REASON_KINDS / sizeof *NE_REASON_KINDS == HANDOVER_COUNT,
               "a reason without a kind");

/* Table values (relay_engine.h): a pair may not pass, passes, or passes when its response
 * carries no top-level tagged fields (the only thing a filter reads in it: leader hints);
 * T_STAMP* stamp the request first (Produce, for a session with a stamp plan: relay_stamp.c);
 * T_SCAN* pass the response when a scan finds nothing the fetch chain would change (Fetch or
 * ShareFetch, for a session with a fetch plan: relay_fetch.c), and its top-level tagged fields
 * empty for the second. */
enum {
    T_PYTHON = NE_T_PYTHON, T_PASS = NE_T_PASS, T_UNLESS_TAGGED = NE_T_UNLESS_TAGGED,
    T_STAMP = NE_T_STAMP, T_STAMP_UNLESS_TAGGED = NE_T_STAMP_UNLESS_TAGGED, T_SCAN = NE_T_SCAN,
    T_SCAN_UNLESS_TAGGED = NE_T_SCAN_UNLESS_TAGGED,
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
    int splicing;       /* SPLICE_UNTRIED, SPLICE_READY (pipe made) or SPLICE_OFF */
    size_t pipe_cap;
    size_t piped;       /* bytes in the pipe not yet written: they precede buf[0] */
} dir_t;

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
    char detail[NE_DETAIL];
    uint8_t table[TABLE_SIZE];
    int64_t max_frame;
    size_t max_in_flight;
    double idle_s, frame_s, last_active, frame_started; /* frame_started 0: none */
    double handover_at; /* > 0: hand over ("reauth") at the first frame boundary after it */
    dir_t req, resp;
    pending_t *fifo;
    size_t fcap, fhead, fcount, fstarted;
    uint32_t mask[2];
    int registered;
    int stop_requested;
    int client_eof;     /* the client will send nothing more (end of stream, or RDHUP) */
    int busy;           /* a frame of it is being stamped or scanned without the lock */
    uint64_t forwarded; /* requests passed natively in this phase */
    nr_fwalk walk;      /* the streamed Fetch response being walked, when `walking` */
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
    size_t stamped_booked; /* of the engine's growth, what `stamped` holds */
    int growth_released;   /* taken back: its growth is the pool's again */
    uint64_t stamped_at; /* stream offset + 1 of the frame `stamped` holds while it waits for
                          * room in the buffer; 0: none */
    nc_counts stamped_counts;
    int scanning;        /* has a fetch plan */
    size_t fetch_cap;    /* the response buffer may grow to this for a response to scan */
    uint64_t verified_at; /* the response being read to scan (stream offset of its first byte
                           * plus one; 0: none), and how far its batch CRCs were checked as it
                           * arrived (nf_verify_prefix) */
    size_t verified, verified_here; /* and over how many of its bytes */
    nc_plan fetch_plan;
    long long fetch_key; /* whose counters its scans add to (proxy/native/fetch_plan.py) */
    struct ssl_st *tls[2];  /* NULL: plaintext side; else its TLS connection (relay_tls.c) */
    nt_saved tls_saved[2];  /* what the engine changed on it (nt_adopt) */
    int tls_idle[2];        /* its last read found nothing: what it holds is a partial record */
    int read_wants_write[2]; /* a TLS read on that side waits for it to be writable */
    int write_wants_read[2]; /* a TLS write to that side waits for it to be readable */
    char tls_why[NE_DETAIL]; /* what the last TLS error was */
    int again;               /* a TLS side holds bytes no readiness announces: serve again */
    struct session *next;
} session_t;

typedef struct {
    uint64_t requests;
    uint64_t lat[MAX_BOUNDS + 1], up[MAX_BOUNDS + 1];
    double lat_sum, up_sum;
    int dirty;
} pair_stats_t;

struct ne_engine {
    pthread_mutex_t mu;
    pthread_cond_t unbusy; /* a session's unlocked work ended (ne_take waits for it) */
    int taking;            /* ne_take calls waiting on `unbusy` */
    pthread_t thread;
    int started;
    int quit;
    int ep;
    int wake_fd;   /* Python -> thread */
    int notify_fd; /* thread -> Python */
    session_t *active;
    session_t *graveyard;
    /* A turn walks every session only when one may need it: `scan_at` is the soonest time a
     * deadline may pass (check_deadlines; lowered by whatever sets an earlier one), and
     * `again_any` says a TLS side holds bytes no readiness will announce. Held idle sessions
     * cost a turn nothing, however many there are. */
    double scan_at;
    int again_any;
    /* Turns taken, and of them those that walked every session for deadlines and for TLS
     * bytes: what `scan_at` and `again_any` save, observable (ne_walks). */
    uint64_t walks[NE_WALK_KINDS];
    /* What session buffers may grow by in all past their base size, for a large frame to
     * stamp or scan (Python books it in the memory budget once), and what they have grown by:
     * idle sessions book nothing beyond their base buffers. */
    size_t grow_limit;
    size_t grown;
    long long *events;
    size_t nevents, events_cap;
    size_t unannounced; /* registered sessions not handed over yet: each may add one event */
    int nbounds;
    double bounds[MAX_BOUNDS];
    uint64_t bytes[BYTES_N]; /* by direction (contracts/native_relay.h) */
    uint64_t spliced;  /* of the bytes read from either side, those spliced: never reset */
    uint64_t tls_bytes[BYTES_N]; /* of each of bytes[], those through TLS sides: never reset */
    pair_stats_t *stats[MAX_API];
    ne_stamp_counts *stamp_stats;
    size_t nstamp_stats, stamp_stats_cap;
    uint64_t rng[4]; /* xoshiro256**: the ids the engine stamps */
    ne_clock_fn clock;
    void *clock_arg;
};

static double monotonic(void *unused) {
    (void)unused;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double now_s(ne_engine *e) {
    return e->clock(e->clock_arg);
}

/* A deadline at `t` that may come before the next walk of every session's deadlines. */
static void deadline_at(ne_engine *e, double t) {
    if (t < e->scan_at) {
        e->scan_at = t;
    }
}

static pair_stats_t *stats_for(ne_engine *e, int api, int ver) {
    pair_stats_t *row = e->stats[api];
    if (row == NULL) {
        row = e->stats[api] = calloc(MAX_VER, sizeof(pair_stats_t));
        if (row == NULL) {
            return NULL;
        }
    }
    return &row[ver];
}

static int bucket(ne_engine *e, double seconds) {
    /* bisect_left: the first bound >= seconds */
    int i = 0;
    while (i < e->nbounds && e->bounds[i] < seconds) {
        i++;
    }
    return i;
}

/* One latency observation for the entry's (api, version): the upstream one when the
 * response's header arrives, the client-facing one when its last byte was written. */
static void observe(ne_engine *e, const pending_t *entry, double now, int upstream) {
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

/* Announce a session's hand-over. The slot is always there: ne_register reserved one for
 * every session not announced yet (`unannounced`), and a session is announced at most once
 * before Python takes it, so this never allocates and never loses a session. */
static void push_event(ne_engine *e, long long id) {
    if (e->nevents < e->events_cap) {
        e->events[e->nevents++] = id;
    }
    uint64_t one = 1;
    ssize_t ignored = write(e->notify_fd, &one, sizeof one);
    (void)ignored;
}

static void unregister(ne_engine *e, session_t *s) {
    if (s->registered) {
        epoll_ctl(e->ep, EPOLL_CTL_DEL, s->fd[CLIENT], NULL);
        epoll_ctl(e->ep, EPOLL_CTL_DEL, s->fd[UPSTREAM], NULL);
        s->registered = 0;
    }
}

/* The native phase is over: the session waits for Python to take it. */
static void hand_over(ne_engine *e, session_t *s) {
    if (s->state == HANDED || s->state == DEAD) {
        return;
    }
    unregister(e, s);
    s->state = HANDED;
    e->unannounced--;
    push_event(e, s->id);
}

/* End at once (the state is not consistent enough to resume in Python). */
static void fail(ne_engine *e, session_t *s, int reason, const char *detail) {
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

/* Let go of the engine lock while a frame of `s` is worked on (see Locking above). */
static void unlock_for_work(ne_engine *e, session_t *s) {
    s->busy = 1;
    pthread_mutex_unlock(&e->mu);
}

static void relock_after_work(ne_engine *e, session_t *s) {
    pthread_mutex_lock(&e->mu);
    s->busy = 0;
    if (e->taking > 0) {
        pthread_cond_broadcast(&e->unbusy);
    }
}

enum { D_PASS, D_NEED, D_WAIT, D_STOP };

/* The in-flight table holds FIFO_START entries at first and doubles as it fills, up to the
 * session's max_in_flight: a held connection with a request or two in flight at a time keeps
 * a few hundred bytes, not max_in_flight entries of 32 bytes each. The ring is laid out from
 * its head again as it grows. 0: out of memory (the table is as it was). */
#define FIFO_START 8

static int grow_fifo(session_t *s) {
    size_t cap = s->fcap * 2 < s->max_in_flight ? s->fcap * 2 : s->max_in_flight;
    pending_t *grown = malloc(cap * sizeof *grown);
    if (grown == NULL) {
        return 0;
    }
    for (size_t i = 0; i < s->fcount; i++) {
        grown[i] = s->fifo[(s->fhead + i) % s->fcap];
    }
    free(s->fifo);
    s->fifo = grown;
    s->fcap = cap;
    s->fhead = 0;
    return 1;
}

/* May the request frame starting at p pass natively? */
static int decide_request(session_t *s, const uint8_t *p, size_t avail, int *expects,
                          uint64_t *total, int16_t *api_out, int16_t *ver_out,
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
    if (scan && ((api != FETCH && api != NR_SHARE_FETCH) || !s->scanning)) {
        return D_STOP;
    }
    int answered = 1;
    if (api == PRODUCE) {
        int16_t acks = 1;
        size_t seen = avail < whole ? avail : whole;
        int r = nr_produce_acks(p, seen, ver, &acks);
        if (r == NR_UNREADABLE || (r == NR_NEED_MORE && seen == whole)) {
            return D_STOP;
        }
        if (r == NR_NEED_MORE) {
            return D_NEED;
        }
        answered = acks != 0;
    }
    if (answered) {
        if (s->fcount >= s->max_in_flight || (s->fcount == s->fcap && !grow_fifo(s))) {
            return D_WAIT; /* out of memory too: the answers pending make room */
        }
        for (size_t i = 0; i < s->fcount; i++) {
            if (s->fifo[(s->fhead + i) % s->fcap].corr == corr) {
                return D_STOP; /* a reused correlation id: Python closes with its reason */
            }
        }
    }
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

static uint64_t next_random(ne_engine *e) {
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
 * neither id may be zero (W3C): such a chunk is drawn again, as interceptors/ids.py does.
 * Only the engine's thread draws, so the generator needs no lock. */
static int engine_draw(void *arg, int stream, uint8_t *dst, size_t n) {
    ne_engine *e = arg;
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

static void count_stamped(ne_engine *e, long long key, const nc_counts *counts) {
    for (size_t i = 0; i < e->nstamp_stats; i++) {
        if (e->stamp_stats[i].key == key) {
            nc_counts_add(&e->stamp_stats[i].counts, counts);
            return;
        }
    }
    if (e->nstamp_stats == e->stamp_stats_cap) {
        size_t cap = e->stamp_stats_cap ? 2 * e->stamp_stats_cap : 8;
        ne_stamp_counts *grown = realloc(e->stamp_stats, cap * sizeof *grown);
        if (grown == NULL) {
            return; /* the counts are lost, not the request */
        }
        e->stamp_stats = grown;
        e->stamp_stats_cap = cap;
    }
    ne_stamp_counts *row = &e->stamp_stats[e->nstamp_stats++];
    row->key = key;
    row->counts = *counts;
}

enum { S_DONE, S_WAIT, S_PYTHON };

/* Room left in the engine's growth pool. */
static size_t growth_room(const ne_engine *e) {
    return e->grown < e->grow_limit ? e->grow_limit - e->grown : 0;
}

/* Let a buffer grow to `cap` (once), from the engine's growth pool. 1 when it grew; 0 when
 * it could not (the pool is spent: Python takes the frame). It moves the buffer: callers
 * take pointers into it only after this. */
static int grow_to(ne_engine *e, dir_t *d, size_t cap) {
    if (d->cap >= cap || cap - d->cap > growth_room(e)) {
        return 0;
    }
    uint8_t *grown = realloc(d->buf, cap);
    if (grown == NULL) {
        return 0;
    }
    e->grown += cap - d->cap;
    d->buf = grown;
    d->cap = cap;
    return 1;
}

/* Let the request buffer grow to the session's stamp_cap. */
static int grow_for_stamping(ne_engine *e, session_t *s) {
    return grow_to(e, &s->req, s->stamp_cap);
}

/* The Produce request frame of *total bytes at d->parsed, stamped in place: S_DONE (with
 * *total its new size), S_WAIT (not all read yet, or no room for it yet), or S_PYTHON (the
 * request is not one the engine stamps; it is left as it arrived). Clients send requests of
 * up to about 1 MiB at full speed: the buffer grows to hold one whole, and its stamped form.
 * The stamped form is usually longer, but may be shorter: the stamp writes every varint in
 * its shortest form, as Python does, and a client may have written them longer. */
static int stamp_request(ne_engine *e, session_t *s, uint64_t *total) {
    dir_t *d = &s->req;
    if (*total > d->cap && (*total > s->stamp_cap || !grow_for_stamping(e, s))) {
        return S_PYTHON;
    }
    if (d->len - d->parsed < *total) {
        return S_WAIT;
    }
    size_t old_len = (size_t)*total;
    uint64_t frame_at = d->off + d->parsed + 1;
    if (s->stamped_at != frame_at) { /* not stamped already, waiting for room */
        /* A larger frame could not be held here anyway; nor one the growth pool has no
         * room left for. */
        size_t limit = s->stamp_cap;
        if (s->stamped.cap + growth_room(e) < limit) {
            limit = s->stamped.cap + growth_room(e);
        }
        if (limit < old_len) {
            return S_PYTHON;
        }
        s->stamped.limit = limit;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t now_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
        const char *why;
        const uint8_t *frame = d->buf + d->parsed; /* after any growth above */
        unlock_for_work(e, s);
        int r = nc_stamp_produce(frame, old_len, &s->plan, engine_draw, e, now_ms, &s->stamped,
                                 &s->stamped_counts, &why);
        relock_after_work(e, s);
        if (s->stamped.cap > s->stamped_booked) { /* its growth comes from the pool */
            e->grown += s->stamped.cap - s->stamped_booked;
            s->stamped_booked = s->stamped.cap;
        }
        if (r != NC_OK) {
            return S_PYTHON;
        }
        s->stamped_at = frame_at;
    }
    size_t new_len = s->stamped.len;
    if (new_len > old_len) { /* make room for what it grew by */
        size_t grown = new_len - old_len;
        if (d->len + grown > d->cap && d->sent > 0) {
            memmove(d->buf, d->buf + d->sent, d->len - d->sent);
            d->off += d->sent;
            d->len -= d->sent;
            d->parsed -= d->sent;
            d->sent = 0;
        }
        if (d->len + grown > d->cap) {
            grow_for_stamping(e, s);
        }
        if (d->len + grown > d->cap) {
            /* what follows the frame leaves no room: wait for what precedes it to go out,
             * or let Python take it when nothing does */
            if (d->parsed > 0) {
                return S_WAIT;
            }
            s->stamped_at = 0;
            return S_PYTHON;
        }
    }
    uint8_t *at = d->buf + d->parsed; /* after any growth above */
    memmove(at + new_len, at + old_len, d->len - d->parsed - old_len);
    memcpy(at, s->stamped.buf, new_len);
    d->len = d->len - old_len + new_len;
    *total = new_len;
    s->stamped_at = 0;
    count_stamped(e, s->stamp_key, &s->stamped_counts);
    return S_DONE;
}

/* Herald's own re-authentication (`handover_at`), once due, stops an active session: 1 when
 * it began the stop. A frame under way still passes whole; the hand-over follows it. */
static int begin_reauth_if_due(session_t *s, double now) {
    if (s->handover_at > 0 && now >= s->handover_at && s->state == ACTIVE) {
        s->handover_at = 0;
        begin_stop(s, HANDOVER_REAUTH);
        return 1;
    }
    return 0;
}

static void parse_requests(ne_engine *e, session_t *s, double now) {
    dir_t *d = &s->req;
    for (;;) {
        if (d->remaining) {
            if (!advance(d)) {
                return;
            }
            continue;
        }
        /* At a frame boundary a due re-authentication stops the session, whether or not the
         * deadline scan has run since it fell due: bytes read before the scan must not carry
         * the session past it. */
        begin_reauth_if_due(s, now);
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
        int r = decide_request(s, d->buf + d->parsed, avail, &expects, &total, &api, &ver,
                               &corr, &check, &stamp, &scan);
        if (r == D_NEED) {
            if (d->parsed == 0 && d->len == d->cap) {
                begin_stop(s, HANDOVER_REQUEST); /* its header does not fit: Python reads it */
            }
            return;
        }
        if (r == D_WAIT) {
            return;
        }
        if (r == D_STOP) {
            begin_stop(s, HANDOVER_REQUEST);
            return;
        }
        if (stamp) {
            int done = stamp_request(e, s, &total);
            s->stamp_wait = done == S_WAIT ? total : 0;
            if (done == S_WAIT) {
                return;
            }
            if (done == S_PYTHON) {
                begin_stop(s, HANDOVER_REQUEST);
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
            deadline_at(e, now + 1.0); /* busy: its idle clock is pushed on once a second */
        }
        s->forwarded++;
        d->remaining = total;
    }
}

/* The Fetch (or ShareFetch) response of `whole` bytes at d->parsed: S_DONE when it passes as
 * it is (what the chain would have seen is counted), S_WAIT until it is here whole, S_PYTHON
 * when Python must run the chain over it (or it is larger than the session may buffer). */
static int scan_response(ne_engine *e, session_t *s, const pending_t *entry, uint64_t whole) {
    dir_t *d = &s->resp;
    if (whole > d->cap && (whole > s->fetch_cap || !grow_to(e, d, s->fetch_cap))) {
        return S_PYTHON;
    }
    uint64_t frame_at = d->off + d->parsed + 1;
    if (s->verified_at != frame_at) {
        s->verified_at = frame_at;
        s->verified = s->verified_here = 0;
    }
    const uint8_t *frame = d->buf + d->parsed; /* after any growth above */
    int ver = entry->ver, check = entry->check;
    size_t here = d->len - d->parsed;
    if (here < whole) {
        /* Its batches' CRCs now, while what was just read is in the CPU's cache: checked
         * once the response is whole, megabytes of it are not, and the check read it from
         * memory again. */
        if (here > s->verified_here) {
            s->verified_here = here;
            unlock_for_work(e, s);
            s->verified = nf_verify_prefix(frame, here, (size_t)whole, entry->api, ver,
                                           &s->fetch_plan, s->verified);
            relock_after_work(e, s);
        }
        return S_WAIT; /* room is made once what precedes it is written */
    }
    nc_counts counts;
    const char *why;
    size_t verified = s->verified;
    s->verified_at = 0;
    unlock_for_work(e, s);
    int r = nf_scan_fetch_verified(frame, (size_t)whole, entry->api, ver, &s->fetch_plan, check,
                                   verified, &counts, &why);
    relock_after_work(e, s);
    if (r != NC_OK) {
        return S_PYTHON;
    }
    count_stamped(e, s->fetch_key, &counts);
    return S_DONE;
}

/* A streamed Fetch v16+ response: walk what is here, approve what the walk passed, and once
 * it reaches the top-level tagged fields, pass them when empty or hand the tail to Python.
 * 1 when the walk is over and the response's last byte passes. */
static int walk_response(ne_engine *e, session_t *s) {
    dir_t *d = &s->resp;
    size_t end = (size_t)(s->frame_end - d->off); /* where the frame ends, in buf */
    size_t limit = d->len < end ? d->len : end;
    size_t pos = d->parsed;
    int r = nr_fetch_walk(&s->walk, d->buf, &pos, limit, end - d->parsed);
    d->remaining -= pos - d->parsed;
    d->parsed = pos;
    if (r == NR_W_MORE) {
        return 0;
    }
    size_t tail = end - d->parsed;
    if (r == NR_W_TAIL && tail == 1 && d->len > d->parsed) {
        if (d->buf[d->parsed] == 0) {
            s->walking = 0; /* no tagged fields: the last byte passes too */
            return 1;
        }
        r = NR_W_BAD; /* cannot be: one byte of a non-empty tagged section */
    }
    if (r == NR_W_BAD) {
        /* As the Python path, whose walk (protocol/fetch_tail.py) refuses the same bytes:
         * the response has begun, so the session cannot go on. */
        fail(e, s, HANDOVER_UPSTREAM_BAD, "upstream sent a malformed Fetch response: its structure "
                                   "does not fit its frame");
        return 0;
    }
    if (tail == 1) {
        return 0; /* its last byte is still to come */
    }
    /* Leader hints: Python rewrites the tail, which must be here whole first. */
    if (tail > d->cap) {
        fail(e, s, HANDOVER_UPSTREAM_BAD, "upstream sent a Fetch response with a tail larger than "
                                   "the relay's buffer");
        return 0;
    }
    if (d->len - d->parsed < tail) {
        return 0; /* room is made once what is approved is written */
    }
    s->tail = tail;
    s->walking = 0;
    d->remaining = 0;
    begin_stop(s, HANDOVER_RESPONSE);
    s->reason = HANDOVER_RESPONSE; /* whatever stopped it first: Python must send the tail */
    return 0;
}

static void parse_responses(ne_engine *e, session_t *s, double now) {
    dir_t *d = &s->resp;
    for (;;) {
        if (s->walking) {
            if (!walk_response(e, s)) {
                return;
            }
            continue;
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
        int32_t size = be32(d->buf + d->parsed);
        int32_t corr = be32(d->buf + d->parsed + 4);
        char why[NE_DETAIL];
        if (size < 4 || (int64_t)size > s->max_frame) {
            snprintf(why, sizeof why, "upstream sent a bad frame: frame size %d", (int)size);
            fail(e, s, HANDOVER_UPSTREAM_BAD, why);
            return;
        }
        if (s->fstarted >= s->fcount) {
            snprintf(why, sizeof why, "upstream answered correlation id %d, expected None",
                     (int)corr);
            fail(e, s, HANDOVER_UPSTREAM_BAD, why);
            return;
        }
        pending_t *entry = &s->fifo[(s->fhead + s->fstarted) % s->fcap];
        if (entry->corr != corr) {
            snprintf(why, sizeof why, "upstream answered correlation id %d, expected %d",
                     (int)corr, (int)entry->corr);
            fail(e, s, HANDOVER_UPSTREAM_BAD, why);
            return;
        }
        uint64_t whole = (uint64_t)size + 4;
        if (entry->scan) {
            int r = scan_response(e, s, entry, whole);
            if (r == S_WAIT) {
                return;
            }
            if (r == S_PYTHON) {
                begin_stop(s, HANDOVER_RESPONSE); /* Python reads it, from its first byte */
                return;
            }
            observe(e, entry, now, 1);
            s->fstarted++;
            d->remaining = whole;
            continue;
        }
        if (entry->check && entry->api == FETCH) {
            /* Fetch: walked as it streams past. The header is passed (8 bytes); header tagged
             * fields are part of the walk. */
            nr_fetch_walk_start(&s->walk);
            s->walking = 1;
            s->frame_end = d->off + d->parsed + whole;
            observe(e, entry, now, 1);
            s->fstarted++;
            d->parsed += 8;
            d->remaining = whole - 8;
            continue;
        }
        if (entry->check) {
            if (whole > d->cap) {
                begin_stop(s, HANDOVER_RESPONSE); /* too large to read here: Python streams it */
                return;
            }
            if (avail < whole) {
                return; /* read whole before it passes */
            }
            if (nr_top_level_tags(d->buf + d->parsed, (size_t)whole, entry->api, entry->ver) !=
                0) {
                begin_stop(s, HANDOVER_RESPONSE); /* leader hints (or unreadable): Python's */
                return;
            }
        }
        observe(e, entry, now, 1);
        s->fstarted++;
        d->remaining = whole;
    }
}

/* Responses whose last byte reached the client: time them and free their slots. */
static void complete_responses(ne_engine *e, session_t *s, double now) {
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

/* What a read or a write did (read_into, splice_in, pull, write_result, flush). */
enum {
    IO_NO_SPLICE = -3, /* the socket cannot splice: the caller reads instead */
    IO_ERROR = -2,     /* errno set; EPROTO with s->tls_why for a TLS error */
    IO_EOF = -1,       /* the peer ended its stream */
    IO_WAIT = 0,       /* nothing now (a write: the rest waits for EPOLLOUT) */
    IO_DONE = 1,       /* data read; a write: everything out */
};

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

/* One read into d from `side` of at most `limit` bytes (0: as many as fit): IO_DONE, IO_WAIT,
 * IO_EOF or IO_ERROR. */
static int read_into(ne_engine *e, session_t *s, dir_t *d, int side, int counter,
                     size_t limit) {
    compact(d);
    size_t space = d->cap - d->len;
    if (limit > 0 && limit < space) {
        space = limit;
    }
    if (space == 0) {
        return IO_WAIT;
    }
    if (s->tls[side] != NULL) {
        size_t got = 0;
        int drained = 0;
        int r = nt_read(s->tls[side], &s->tls_saved[side], d->buf + d->len, space, &got,
                        &drained, &s->read_wants_write[side], s->tls_why, sizeof s->tls_why);
        s->tls_idle[side] = r == NT_AGAIN || drained;
        if (r == NT_DATA) {
            d->len += got;
            e->bytes[counter] += got;
            e->tls_bytes[counter] += got;
            return IO_DONE;
        }
        if (r == NT_AGAIN) {
            return IO_WAIT;
        }
        if (r == NT_EOF) {
            return IO_EOF;
        }
        errno = EPROTO;
        return IO_ERROR;
    }
    int fd = s->fd[side];
    ssize_t n = recv(fd, d->buf + d->len, space, MSG_DONTWAIT);
    if (n > 0) {
        d->len += (size_t)n;
        e->bytes[counter] += (uint64_t)n;
        return IO_DONE;
    }
    if (n == 0) {
        return IO_EOF;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        return IO_WAIT;
    }
    return IO_ERROR;
}

/* ---- splicing: frame bytes no check reads go socket to pipe to socket, never copied into
 * the engine's buffers (a plain Fetch response's records, a passing Produce request's body) */

#define SPLICE_MIN (32 * 1024) /* below this, one recv into the buffer costs less */
#define PIPE_SIZE (1024 * 1024)

/* Whether a direction splices (dir_t.splicing): not tried yet, its pipe is made, or it cannot
 * (no pipe, a blocking socket, a socket that refused to splice, a TLS side). */
enum { SPLICE_OFF = -1, SPLICE_UNTRIED = 0, SPLICE_READY = 1 };

/* Make d's pipe once; a direction that cannot have one (no descriptors left, a blocking
 * socket) reads into its buffer as before. */
static int make_pipe(dir_t *d, int from_fd) {
    if (d->splicing == SPLICE_UNTRIED) {
        int flags = fcntl(from_fd, F_GETFL);
        if (flags < 0 || !(flags & O_NONBLOCK) || pipe2(d->pipe, O_NONBLOCK | O_CLOEXEC) != 0) {
            d->splicing = SPLICE_OFF;
            return 0;
        }
        (void)fcntl(d->pipe[1], F_SETPIPE_SZ, PIPE_SIZE); /* the default 64 KiB if refused */
        int size = fcntl(d->pipe[1], F_GETPIPE_SZ);
        d->pipe_cap = size > 0 ? (size_t)size : 65536;
        d->splicing = SPLICE_READY;
    }
    return d->splicing == SPLICE_READY;
}

/* How many of the coming bytes of d may be spliced: bytes of the frame in progress that
 * pass unread (the rest of a passing frame, or the records a walked Fetch response skips),
 * when nothing buffered must be written before them. 0: read into the buffer. */
static uint64_t splice_budget(session_t *s, dir_t *d, int from_fd) {
    if (d->splicing == SPLICE_OFF || d->sent != d->len || d->piped > 0) {
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

/* One splice of up to `budget` bytes from fd into d's pipe; returns as read_into does, or
 * IO_NO_SPLICE. */
static int splice_in(ne_engine *e, session_t *s, dir_t *d, int fd, int counter, uint64_t budget,
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
        return IO_DONE;
    }
    *more = 0;
    if (n == 0) {
        return IO_EOF;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        return IO_WAIT;
    }
    if (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP) {
        d->splicing = SPLICE_OFF;
        return IO_NO_SPLICE;
    }
    return IO_ERROR;
}

/* Read what may come into d, spliced where it passes unread: as read_into; `more` says the
 * socket may hold more now. */
static int pull(ne_engine *e, session_t *s, dir_t *d, int side, int counter, int *more) {
    int fd = s->fd[side];
    uint64_t budget = splice_budget(s, d, fd);
    if (budget > 0) {
        int r = splice_in(e, s, d, fd, counter, budget, more);
        if (r != IO_NO_SPLICE) {
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
    int r = read_into(e, s, d, side, counter, limit);
    /* a short read drained the socket; a TLS read, the records its connection held whole */
    *more = r == IO_DONE && ((s->tls[side] != NULL && !s->tls_idle[side]) || d->len == d->cap ||
                       (limit > 0 && d->len - before == limit));
    return r;
}

/* What a write that returned n means: IO_DONE go on, IO_WAIT wait for EPOLLOUT, IO_ERROR. */
static int write_result(ssize_t n) {
    if (n > 0 || (n < 0 && errno == EINTR)) {
        return IO_DONE;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return IO_WAIT;
    }
    if (n == 0) {
        errno = EPIPE;
    }
    return IO_ERROR;
}

/* Write what is approved, the pipe's bytes first (they precede the buffer's): IO_DONE all out,
 * IO_WAIT some left (wait for EPOLLOUT), IO_ERROR. splice(2) has no MSG_NOSIGNAL: into a socket
 * whose peer closed it raises SIGPIPE, which Python ignores from its start (so the call
 * fails with EPIPE, a socket error, as send's does). */
static int flush(ne_engine *e, session_t *s, dir_t *d, int side, int counter) {
    int fd = s->fd[side];
    while (d->piped > 0) {
        ssize_t n = splice(d->pipe[0], NULL, fd, NULL, d->piped,
                           SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        int r = write_result(n);
        if (r != IO_DONE) {
            return r;
        }
        if (n > 0) {
            d->piped -= (size_t)n;
            e->bytes[counter] += (uint64_t)n;
        }
    }
    struct ssl_st *tls = s->tls[side];
    s->write_wants_read[side] = 0;
    while (tls != NULL && d->sent < d->parsed) {
        /* What a blocked write passed is passed again (and more): d->sent moves only when
         * the connection took the bytes, and nothing before d->parsed changes. */
        size_t put = 0;
        int r = nt_write(tls, &s->tls_saved[side], fd, d->buf + d->sent, d->parsed - d->sent,
                         &put, &s->write_wants_read[side], s->tls_why, sizeof s->tls_why);
        if (r == NT_AGAIN) {
            return IO_WAIT;
        }
        if (r != NT_DATA) {
            errno = EPROTO;
            return IO_ERROR;
        }
        d->sent += put;
        e->bytes[counter] += put;
        e->tls_bytes[counter] += put;
    }
    /* Records encrypted and not sent yet (the last write's rest, a read's answer): they go
     * before anything else, and the session is not handed back before they are out. */
    if (tls != NULL && nt_unsent(&s->tls_saved[side]) > 0) {
        int r = nt_drain(&s->tls_saved[side], fd, s->tls_why, sizeof s->tls_why);
        if (r == NT_AGAIN) {
            return IO_WAIT;
        }
        if (r != NT_DATA) {
            errno = EPROTO;
            return IO_ERROR;
        }
    }
    while (d->sent < d->parsed) {
        ssize_t n = send(fd, d->buf + d->sent, d->parsed - d->sent, MSG_DONTWAIT | MSG_NOSIGNAL);
        int r = write_result(n);
        if (r != IO_DONE) {
            return r;
        }
        if (n > 0) {
            d->sent += (size_t)n;
            e->bytes[counter] += (uint64_t)n;
        }
    }
    compact(d);
    return IO_DONE;
}

static void socket_error(ne_engine *e, session_t *s, const char *side, int err) {
    char why[NE_DETAIL];
    if (err == EPROTO && s->tls_why[0] != '\0') {
        snprintf(why, sizeof why, "TLS error on the %s connection: %.120s", side,
                 s->tls_why);
    } else {
        snprintf(why, sizeof why, "socket error on the %s connection: %s", side,
                 strerror(err));
    }
    fail(e, s, HANDOVER_SOCKET_ERROR, why);
}

/* A TLS side whose connection holds bytes read from its socket that the engine has not
 * taken, whole records among them, or an end or error found after data: no readiness will
 * announce them. */
static int tls_pending(session_t *s, int side) {
    return s->tls[side] != NULL && (s->tls_saved[side].held != 0 ||
                                    (!s->tls_idle[side] && nt_pending(s->tls[side])));
}

/* A TLS side with records encrypted and not sent yet. */
static int tls_unsent(session_t *s, int side) {
    return s->tls[side] != NULL && nt_unsent(&s->tls_saved[side]) > 0;
}

/* Whether a direction may read now: ACTIVE, or STOPPING with a frame to finish; never while
 * its pipe holds bytes (they go out first), nor past a frame waiting to be stamped. */
static int may_read(session_t *s, dir_t *d) {
    if (d == &s->req && s->stamp_wait > 0 && d->len - d->parsed >= s->stamp_wait) {
        return 0; /* a frame to stamp is here whole: its room comes from what goes out */
    }
    return d->piped == 0 && (s->state == ACTIVE || (s->state == STOPPING && d->remaining > 0));
}

static void set_interest(ne_engine *e, session_t *s) {
    uint32_t want[2];
    /* EPOLLRDHUP: a client that closes is seen even while its requests are not read (they
     * are Python's), so a silent broker cannot hold the session (check_deadlines). */
    int read_client = may_read(s, &s->req) && s->req.len < s->req.cap;
    int read_upstream = may_read(s, &s->resp) && s->resp.len < s->resp.cap;
    int write_client = s->resp.sent < s->resp.parsed || s->resp.piped > 0 ||
                       tls_unsent(s, CLIENT);
    int write_upstream = s->req.sent < s->req.parsed || s->req.piped > 0 ||
                         tls_unsent(s, UPSTREAM);
    /* A TLS read may wait for its socket to take a write, a TLS write for a read. */
    want[CLIENT] = (read_client || (write_client && s->write_wants_read[CLIENT]) ? EPOLLIN : 0) |
                   (s->client_eof ? 0 : EPOLLRDHUP) |
                   (write_client || (read_client && s->read_wants_write[CLIENT]) ? EPOLLOUT : 0);
    want[UPSTREAM] =
        (read_upstream || (write_upstream && s->write_wants_read[UPSTREAM]) ? EPOLLIN : 0) |
        (write_upstream || (read_upstream && s->read_wants_write[UPSTREAM]) ? EPOLLOUT : 0);
    s->again = (read_client && tls_pending(s, CLIENT)) ||
               (read_upstream && tls_pending(s, UPSTREAM));
    e->again_any |= s->again;
    for (int side = 0; side < 2; side++) {
        if (want[side] != s->mask[side]) {
            struct epoll_event ev = {.events = want[side], .data.ptr = &s->ep[side]};
            epoll_ctl(e->ep, EPOLL_CTL_MOD, s->fd[side], &ev);
            s->mask[side] = want[side];
        }
    }
}

/* Move what can move for one session. `readable` says which sides epoll reported. */
static void service(ne_engine *e, session_t *s, int readable_client, int readable_upstream) {
    double now = now_s(e);
    for (int round = 0; round < 8 && (s->state == ACTIVE || s->state == STOPPING); round++) {
        int progress = 0;
        readable_client |= tls_pending(s, CLIENT);
        readable_upstream |= tls_pending(s, UPSTREAM);
        if (readable_client && may_read(s, &s->req)) {
            int more = 0;
            int r = pull(e, s, &s->req, CLIENT, BYTES_CLIENT_TO_PROXY, &more);
            if (r == IO_ERROR) {
                socket_error(e, s, "client", errno);
                return;
            }
            if (r == IO_EOF) {
                s->client_eof = 1;
                if (s->req.remaining > 0 || s->req.len > s->req.parsed) {
                    fail(e, s, HANDOVER_CLIENT_CLOSED, "client closed the connection");
                    return;
                }
                begin_stop(s, HANDOVER_CLIENT_EOF);
                readable_client = 0;
            } else if (r == IO_DONE) {
                progress = 1;
                s->last_active = now;
                readable_client = more;
            } else {
                readable_client = 0;
            }
            size_t start_parsed = s->req.parsed;
            uint64_t start_off = s->req.off;
            parse_requests(e, s, now);
            if (r == IO_DONE) {
                int completed = s->req.off + s->req.parsed > start_off + start_parsed &&
                                s->req.remaining == 0;
                int partial = s->req.remaining > 0 || s->req.len > s->req.parsed;
                if (!partial) {
                    s->frame_started = 0;
                } else if (completed || s->frame_started == 0) {
                    s->frame_started = now;
                    deadline_at(e, now + s->frame_s);
                }
            }
        } else {
            parse_requests(e, s, now);
        }
        int w = flush(e, s, &s->req, UPSTREAM, BYTES_PROXY_TO_UPSTREAM);
        if (w == IO_ERROR) {
            socket_error(e, s, "upstream", errno);
            return;
        }
        if (readable_upstream && may_read(s, &s->resp)) {
            int more = 0;
            int r = pull(e, s, &s->resp, UPSTREAM, BYTES_UPSTREAM_TO_PROXY, &more);
            if (r == IO_ERROR) {
                socket_error(e, s, "upstream", errno);
                return;
            }
            if (r == IO_EOF) {
                fail(e, s, HANDOVER_UPSTREAM_CLOSED, "upstream closed the connection");
                return;
            }
            if (r == IO_DONE) {
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
        w = flush(e, s, &s->resp, CLIENT, BYTES_PROXY_TO_CLIENT);
        if (w == IO_ERROR) {
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
        s->resp.piped == 0 && !tls_unsent(s, CLIENT) && !tls_unsent(s, UPSTREAM) &&
        (s->fstarted == 0 || (s->tail > 0 && s->fstarted == 1))) {
        hand_over(e, s);
        return;
    }
    if (s->state == ACTIVE || s->state == STOPPING) {
        set_interest(e, s);
    }
}

/* epoll_wait's timeout until `t` (NE_NO_TIMEOUT: none). */
static int timeout_until(double t, double now) {
    if (t == INFINITY) {
        return NE_NO_TIMEOUT;
    }
    double ms = (t - now) * 1000.0 + 1.0;
    return ms < 1 ? 1 : (ms > 60000 ? 60000 : (int)ms);
}

static void check_deadlines(ne_engine *e, double now, int *timeout_ms) {
    double soonest = -1;
    for (session_t *s = e->active; s != NULL; s = s->next) {
        if (s->state != ACTIVE && s->state != STOPPING) {
            continue;
        }
        /* Busy is not idle: requests in flight keep a session busy, but only while the
         * broker may still answer them (the oldest is younger than the idle deadline) and the
         * client may still want the answers (it has not closed its side). A broker that never
         * answers cannot hold a session, as in Python (connection_guard.awaiting_answer). */
        int busy = s->fcount > 0 && !s->client_eof &&
                   now - s->fifo[s->fhead].received < s->idle_s;
        if (busy) {
            s->last_active = now;
        }
        if (s->frame_started > 0 && now >= s->frame_started + s->frame_s) {
            char why[NE_DETAIL];
            snprintf(why, sizeof why, MESSAGE_FRAME_TIMEOUT, s->frame_s);
            fail(e, s, HANDOVER_FRAME_TIMEOUT, why);
            continue;
        }
        if (!busy && now >= s->last_active + s->idle_s) {
            char why[NE_DETAIL];
            snprintf(why, sizeof why, MESSAGE_IDLE_TIMEOUT, s->idle_s);
            fail(e, s, HANDOVER_IDLE_TIMEOUT, why);
            continue;
        }
        if (begin_reauth_if_due(s, now)) {
            service(e, s, 0, 0); /* hands over now when no frame is under way */
            if (s->state != STOPPING) {
                continue;
            }
        }
        double next = busy ? now + 1.0 : s->last_active + s->idle_s;
        if (s->frame_started > 0 && s->frame_started + s->frame_s < next) {
            next = s->frame_started + s->frame_s;
        }
        if (s->handover_at > 0 && s->handover_at < next) {
            next = s->handover_at;
        }
        if (soonest < 0 || next < soonest) {
            soonest = next;
        }
    }
    e->scan_at = soonest < 0 ? INFINITY : soonest;
    *timeout_ms = timeout_until(e->scan_at, now);
}

static void close_pipe(dir_t *d) {
    if (d->splicing == SPLICE_READY) {
        close(d->pipe[0]);
        close(d->pipe[1]);
        d->splicing = SPLICE_UNTRIED;
    }
}

/* What a session's buffers grew by goes back to the pool (once: its counts are cleared). */
static void release_growth(ne_engine *e, session_t *s) {
    size_t grown = (s->req.cap - s->base_cap) + (s->resp.cap - s->base_cap) + s->stamped_booked;
    if (grown > 0 && !s->growth_released) {
        e->grown -= grown < e->grown ? grown : e->grown;
    }
    s->growth_released = 1;
}

static void free_session(ne_engine *e, session_t *s) {
    release_growth(e, s);
    close_pipe(&s->req);
    close_pipe(&s->resp);
    for (int side = 0; side < 2; side++) {
        if (s->tls[side] != NULL) {
            nt_release(s->tls[side], &s->tls_saved[side]);
        }
    }
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

static void start_session(ne_engine *e, session_t *s) {
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
    /* Its deadlines join this turn's walk. Not at registration: a walk that runs between the
     * registration and the wake-up that starts the session skips it (it is not active yet),
     * and its deadlines (idle, frame, re-authentication) would wait for the next walk
     * something else asks for. */
    e->scan_at = 0;
    if (s->stop_requested) {
        begin_stop(s, HANDOVER_DRAIN);
    }
    service(e, s, 1, 0); /* bytes Python handed over, then whatever is waiting */
}

/* Free the sessions taken since the last turn (no event of this turn points at them now). */
static void bury(ne_engine *e) {
    while (e->graveyard != NULL) {
        session_t *dead = e->graveyard;
        e->graveyard = dead->next;
        free_session(e, dead);
    }
}

/* Serve one epoll event, holding the lock. */
static void handle(ne_engine *e, const struct epoll_event *event) {
    endpoint_t *ep = event->data.ptr;
    if (ep == NULL) { /* wake-up from Python: new sessions, stop requests */
        uint64_t v;
        ssize_t ignored = read(e->wake_fd, &v, sizeof v);
        (void)ignored;
        /* `s` stays linked while it is served, even while its frame is worked on unlocked
         * (ne_take waits for that), so `s->next` is read from a live session; a session
         * registered meanwhile is started on the wake-up its registration sends. */
        for (session_t *s = e->active; s != NULL; s = s->next) {
            if (s->state == REGISTERED) {
                start_session(e, s);
            } else if (s->state == STOPPING) {
                service(e, s, 0, 0);
            }
        }
        return;
    }
    session_t *s = ep->s;
    if (s->state != ACTIVE && s->state != STOPPING) {
        return;
    }
    uint32_t ev = event->events;
    if (ep->side == CLIENT && (ev & EPOLLRDHUP)) {
        s->client_eof = 1;
    }
    int in = (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0 ||
             (s->read_wants_write[ep->side] && (ev & EPOLLOUT));
    service(e, s, ep->side == CLIENT && in, ep->side == UPSTREAM && in);
}

void ne_turn(ne_engine *e, int timeout_ms, int *next_timeout_ms) {
    struct epoll_event events[64];
    int n = epoll_wait(e->ep, events, 64, timeout_ms);
    for (int i = 0; i < n; i++) {
        pthread_mutex_lock(&e->mu);
        int quit = e->quit;
        if (!quit) {
            handle(e, &events[i]);
        }
        pthread_mutex_unlock(&e->mu);
        if (quit) {
            break;
        }
    }
    pthread_mutex_lock(&e->mu);
    /* TLS sides holding bytes that no readiness announces (a turn's rounds ran out, or room
     * was made after they were read from the socket). */
    int again = 0;
    e->walks[NE_WALK_TURNS]++;
    if (e->again_any) {
        e->walks[NE_WALK_TLS]++;
        e->again_any = 0;
        for (session_t *s = e->active; s != NULL && !e->quit; s = s->next) {
            if (s->again && (s->state == ACTIVE || s->state == STOPPING)) {
                service(e, s, 1, 1);
                again |= s->again && (s->state == ACTIVE || s->state == STOPPING);
            }
        }
        e->again_any = again;
    }
    double now = now_s(e);
    if (now >= e->scan_at) {
        e->walks[NE_WALK_DEADLINES]++;
        check_deadlines(e, now, next_timeout_ms);
    } else {
        *next_timeout_ms = timeout_until(e->scan_at, now);
    }
    if (again) {
        *next_timeout_ms = 0;
    }
    bury(e);
    pthread_mutex_unlock(&e->mu);
}

static void *run_engine(void *arg) {
    ne_engine *e = arg;
    int timeout_ms = NE_NO_TIMEOUT;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        int quit = e->quit;
        pthread_mutex_unlock(&e->mu);
        if (quit) {
            break;
        }
        ne_turn(e, timeout_ms, &timeout_ms);
    }
    return NULL;
}

/* ---- the interface ----------------------------------------------------------------------- */

static void wake(ne_engine *e) {
    uint64_t one = 1;
    ssize_t ignored = write(e->wake_fd, &one, sizeof one);
    (void)ignored;
}

ne_engine *ne_create(const double *bounds, int nbounds) {
    if (nbounds < 0 || nbounds > MAX_BOUNDS) {
        errno = EINVAL;
        return NULL;
    }
    ne_engine *e = calloc(1, sizeof *e);
    if (e == NULL) {
        return NULL;
    }
    e->ep = e->wake_fd = e->notify_fd = -1;
    memcpy(e->bounds, bounds, (size_t)nbounds * sizeof(double));
    e->nbounds = nbounds;
    e->clock = monotonic;
    e->grow_limit = SIZE_MAX;
    if (getrandom(e->rng, sizeof e->rng, 0) != (ssize_t)sizeof e->rng) {
        goto fail;
    }
    e->ep = epoll_create1(EPOLL_CLOEXEC);
    e->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    e->notify_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (e->ep < 0 || e->wake_fd < 0 || e->notify_fd < 0) {
        goto fail;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(e->ep, EPOLL_CTL_ADD, e->wake_fd, &ev) != 0) {
        goto fail;
    }
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->unbusy, NULL);
    return e;
fail:;
    int err = errno;
    if (e->ep >= 0) close(e->ep);
    if (e->wake_fd >= 0) close(e->wake_fd);
    if (e->notify_fd >= 0) close(e->notify_fd);
    free(e);
    errno = err;
    return NULL;
}

void ne_set_clock(ne_engine *e, ne_clock_fn fn, void *arg) {
    e->clock = fn != NULL ? fn : monotonic;
    e->clock_arg = arg;
}

int ne_start(ne_engine *e) {
    if (e->started) {
        return NE_OK;
    }
    if (pthread_create(&e->thread, NULL, run_engine, e) != 0) {
        return NE_SYSTEM;
    }
    e->started = 1;
    return NE_OK;
}

int ne_notify_fd(const ne_engine *e) {
    return e->notify_fd;
}

void ne_close(ne_engine *e) {
    if (e->started) {
        pthread_mutex_lock(&e->mu);
        e->quit = 1;
        pthread_mutex_unlock(&e->mu);
        wake(e);
        pthread_join(e->thread, NULL);
        e->started = 0;
    }
    pthread_mutex_lock(&e->mu);
    for (session_t *s = e->active; s != NULL;) {
        session_t *next = s->next;
        free_session(e, s);
        s = next;
    }
    e->active = NULL;
    e->unannounced = 0;
    bury(e);
    pthread_mutex_unlock(&e->mu);
}

void ne_destroy(ne_engine *e) {
    if (e == NULL) {
        return;
    }
    ne_close(e);
    for (int a = 0; a < MAX_API; a++) {
        free(e->stats[a]);
    }
    free(e->events);
    free(e->stamp_stats);
    close(e->ep);
    close(e->wake_fd);
    close(e->notify_fd);
    pthread_cond_destroy(&e->unbusy);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

static session_t *find(ne_engine *e, long long id, session_t ***link_out) {
    session_t **link = &e->active;
    while (*link != NULL && (*link)->id != id) {
        link = &(*link)->next;
    }
    if (link_out != NULL) {
        *link_out = link;
    }
    return *link;
}

void ne_set_grow_limit(ne_engine *e, size_t limit) {
    pthread_mutex_lock(&e->mu);
    e->grow_limit = limit;
    pthread_mutex_unlock(&e->mu);
}

int ne_register(ne_engine *e, ne_session_args *a) {
    if (a->buffer_size < 4096 || a->prefill_len > a->buffer_size || a->max_in_flight < 1) {
        return NE_INVALID;
    }
    session_t *s = calloc(1, sizeof(session_t));
    if (s == NULL) {
        return NE_NOMEM;
    }
    s->id = a->id;
    s->fd[CLIENT] = a->client_fd;
    s->fd[UPSTREAM] = a->upstream_fd;
    memcpy(s->table, a->table, TABLE_SIZE);
    s->max_frame = a->max_frame;
    s->max_in_flight = a->max_in_flight;
    s->idle_s = a->idle_s;
    s->frame_s = a->frame_s;
    s->req.cap = s->resp.cap = s->base_cap = a->buffer_size;
    s->req.buf = malloc(a->buffer_size);
    s->resp.buf = malloc(a->buffer_size);
    s->fcap = a->max_in_flight < FIFO_START ? a->max_in_flight : FIFO_START;
    s->fifo = calloc(s->fcap, sizeof(pending_t));
    if (s->req.buf == NULL || s->resp.buf == NULL || s->fifo == NULL) {
        free_session(e, s);
        return NE_NOMEM;
    }
    if (a->prefill_len > 0) {
        memcpy(s->req.buf, a->prefill, a->prefill_len);
    }
    s->req.len = a->prefill_len;
    s->ep[CLIENT].s = s->ep[UPSTREAM].s = s;
    s->ep[CLIENT].side = CLIENT;
    s->ep[UPSTREAM].side = UPSTREAM;
    pthread_mutex_lock(&e->mu);
    if (find(e, a->id, NULL) != NULL) {
        pthread_mutex_unlock(&e->mu);
        free_session(e, s);
        return NE_EXISTS;
    }
    /* A slot for the event that will announce this session's hand-over (push_event). */
    size_t need = e->nevents + e->unannounced + 1;
    if (need > e->events_cap) {
        size_t cap = e->events_cap ? e->events_cap : 64;
        while (cap < need) {
            cap *= 2;
        }
        long long *grown = realloc(e->events, cap * sizeof(long long));
        if (grown == NULL) {
            pthread_mutex_unlock(&e->mu);
            free_session(e, s);
            return NE_NOMEM;
        }
        e->events = grown;
        e->events_cap = cap;
    }
    /* The plans now belong to the session. */
    if (a->stamp != NULL) {
        s->plan = *a->stamp;
        memset(a->stamp, 0, sizeof *a->stamp);
        s->stamping = 1;
        s->stamp_key = a->stamp_key;
        s->stamp_cap = a->stamp_cap > a->buffer_size ? a->stamp_cap : a->buffer_size;
    }
    if (a->fetch != NULL) {
        s->fetch_plan = *a->fetch;
        memset(a->fetch, 0, sizeof *a->fetch);
        s->scanning = 1;
        s->fetch_key = a->fetch_key;
        s->fetch_cap = a->fetch_cap > a->buffer_size ? a->fetch_cap : a->buffer_size;
    }
    /* The TLS connections: the engine's from now on, until ne_take. Their bytes on the wire
     * are not the frames, so neither direction splices. */
    struct ssl_st *tls[2] = {a->client_tls, a->upstream_tls};
    for (int side = 0; side < 2; side++) {
        if (tls[side] != NULL) {
            s->tls[side] = tls[side];
            nt_adopt(tls[side], &s->tls_saved[side]);
            s->req.splicing = s->resp.splicing = SPLICE_OFF;
        }
    }
    s->last_active = now_s(e);
    if (a->handover_s > 0) {
        s->handover_at = s->last_active + a->handover_s;
    }
    if (a->prefill_len > 0) { /* its deadline runs from when it began, not from now */
        s->frame_started = s->last_active - (a->frame_age > 0 ? a->frame_age : 0);
    }
    e->unannounced++;
    s->next = e->active;
    e->active = s;
    pthread_mutex_unlock(&e->mu);
    wake(e);
    return NE_OK;
}

int ne_stop(ne_engine *e, long long id) {
    pthread_mutex_lock(&e->mu);
    session_t *s = find(e, id, NULL);
    int found = s != NULL;
    if (s != NULL) {
        s->stop_requested = 1;
        begin_stop(s, HANDOVER_DRAIN);
    }
    pthread_mutex_unlock(&e->mu);
    if (found) {
        wake(e);
    }
    return found;
}

int ne_events(ne_engine *e, long long **ids, size_t *n) {
    uint64_t v = 0;
    ssize_t ignored = read(e->notify_fd, &v, sizeof v);
    (void)ignored;
    *ids = NULL;
    *n = 0;
    pthread_mutex_lock(&e->mu);
    if (e->nevents > 0) {
        *ids = malloc(e->nevents * sizeof(long long));
        if (*ids == NULL) {
            pthread_mutex_unlock(&e->mu);
            uint64_t one = 1; /* the events stay queued: ask to be called again */
            ignored = write(e->notify_fd, &one, sizeof one);
            return NE_NOMEM;
        }
        memcpy(*ids, e->events, e->nevents * sizeof(long long));
        *n = e->nevents;
        e->nevents = 0;
    }
    pthread_mutex_unlock(&e->mu);
    return NE_OK;
}

/* Move a direction's buffer out of a session that is being taken: the bytes from `from` on. */
static void take_bytes(dir_t *d, size_t from, uint8_t **buf, const uint8_t **bytes,
                       size_t *len) {
    *buf = d->buf;
    *bytes = d->buf + from;
    *len = d->len - from;
    d->buf = NULL;
}

int ne_take(ne_engine *e, long long id, ne_handover *out) {
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&e->mu);
    session_t **link;
    session_t *s = find(e, id, &link);
    while (s != NULL && s->busy) { /* its frame is being worked on without the lock */
        e->taking++;
        pthread_cond_wait(&e->unbusy, &e->mu);
        e->taking--;
        s = find(e, id, &link);
    }
    if (s == NULL) {
        pthread_mutex_unlock(&e->mu);
        return NE_MISSING;
    }
    ne_entry *entries = malloc((s->fcount ? s->fcount : 1) * sizeof(ne_entry));
    if (entries == NULL) {
        pthread_mutex_unlock(&e->mu);
        return NE_NOMEM;
    }
    if (s->state != HANDED) {
        unregister(e, s);
        s->reason = HANDOVER_DETACHED;
        s->state = HANDED;
        e->unannounced--;
    }
    *link = s->next;
    s->state = DEAD;
    for (int side = 0; side < 2; side++) { /* Python's again, as it left them */
        if (s->tls[side] != NULL) {
            (void)nt_hand_back(s->tls[side], &s->tls_saved[side], s->fd[side]);
        }
    }
    for (size_t i = 0; i < s->fcount; i++) {
        pending_t *p = &s->fifo[(s->fhead + i) % s->fcap];
        entries[i] = (ne_entry){p->corr, p->api, p->ver, p->received};
    }
    out->in_flight = entries;
    out->n_in_flight = s->fcount;
    out->reason = NE_REASONS[s->reason];
    memcpy(out->detail, s->detail, sizeof out->detail);
    out->forwarded = s->forwarded;
    out->tail = s->tail;
    out->frame_age = s->req.len > s->req.parsed && s->frame_started > 0
                         ? now_s(e) - s->frame_started
                         : -1.0;
    take_bytes(&s->req, s->req.parsed, &out->client_buf, &out->client, &out->client_len);
    take_bytes(&s->resp, s->resp.parsed, &out->upstream_buf, &out->upstream,
               &out->upstream_len);
    release_growth(e, s); /* its buffers are dead: the pool has them back now */
    s->next = e->graveyard;
    e->graveyard = s;
    pthread_mutex_unlock(&e->mu);
    wake(e); /* frees it after the thread's current turn */
    return NE_OK;
}

void ne_handover_free(ne_handover *h) {
    free(h->client_buf);
    free(h->upstream_buf);
    free(h->in_flight);
    memset(h, 0, sizeof *h);
}

int ne_collect(ne_engine *e, ne_counters *out) {
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&e->mu);
    size_t dirty = 0;
    for (int a = 0; a < MAX_API; a++) {
        for (int v = 0; e->stats[a] != NULL && v < MAX_VER; v++) {
            dirty += e->stats[a][v].dirty != 0;
        }
    }
    if (dirty > 0 && (out->pairs = malloc(dirty * sizeof(ne_pair_counts))) == NULL) {
        pthread_mutex_unlock(&e->mu);
        return NE_NOMEM;
    }
    memcpy(out->bytes, e->bytes, sizeof out->bytes);
    memset(e->bytes, 0, sizeof e->bytes);
    out->nbuckets = e->nbounds + 1;
    for (int a = 0; a < MAX_API; a++) {
        for (int v = 0; e->stats[a] != NULL && v < MAX_VER; v++) {
            pair_stats_t *st = &e->stats[a][v];
            if (!st->dirty) {
                continue;
            }
            ne_pair_counts *row = &out->pairs[out->npairs++];
            row->api = a;
            row->ver = v;
            row->requests = st->requests;
            memcpy(row->lat, st->lat, sizeof row->lat);
            memcpy(row->up, st->up, sizeof row->up);
            row->lat_sum = st->lat_sum;
            row->up_sum = st->up_sum;
            memset(st, 0, sizeof *st);
        }
    }
    pthread_mutex_unlock(&e->mu);
    return NE_OK;
}

void ne_counters_free(ne_counters *c) {
    free(c->pairs);
    memset(c, 0, sizeof *c);
}

int ne_collect_stamped(ne_engine *e, ne_stamp_counts **rows, size_t *n) {
    *rows = NULL;
    *n = 0;
    pthread_mutex_lock(&e->mu);
    if (e->nstamp_stats > 0) {
        *rows = malloc(e->nstamp_stats * sizeof **rows);
        if (*rows == NULL) {
            pthread_mutex_unlock(&e->mu);
            return NE_NOMEM;
        }
        memcpy(*rows, e->stamp_stats, e->nstamp_stats * sizeof **rows);
        *n = e->nstamp_stats;
        e->nstamp_stats = 0;
    }
    pthread_mutex_unlock(&e->mu);
    return NE_OK;
}

size_t ne_grown(ne_engine *e) {
    pthread_mutex_lock(&e->mu);
    size_t n = e->grown;
    pthread_mutex_unlock(&e->mu);
    return n;
}

uint64_t ne_spliced(ne_engine *e) {
    pthread_mutex_lock(&e->mu);
    uint64_t n = e->spliced;
    pthread_mutex_unlock(&e->mu);
    return n;
}

void ne_walks(ne_engine *e, uint64_t out[NE_WALK_KINDS]) {
    pthread_mutex_lock(&e->mu);
    memcpy(out, e->walks, sizeof e->walks);
    pthread_mutex_unlock(&e->mu);
}

void ne_tls_bytes(ne_engine *e, uint64_t out[BYTES_N]) {
    pthread_mutex_lock(&e->mu);
    memcpy(out, e->tls_bytes, sizeof e->tls_bytes);
    pthread_mutex_unlock(&e->mu);
}
