/* The native relay engine itself (proxy/native/relay_engine.c), driven over socket pairs.
 *
 * The harness plays the client application, the broker and the Python side at once, on one
 * thread: it runs the engine's turns itself (ne_turn, never the engine's thread) on a clock
 * of its own, so every input replays exactly. The input is a few configuration bytes (the
 * table of what passes, buffer size, in-flight limit, a stamp plan, a fetch plan, limits,
 * deadlines, a prefill) and then a script: the client or the broker writes bytes from the
 * input (or many filler bytes, for frames far larger than the input), either side reads,
 * the engine turns, the clock moves, the proxy drains, Python takes the session back, a side
 * half-closes or closes. Sockets are non-blocking with small buffers at random, so writes
 * are cut short at random points.
 *
 * At every hand-over (and when Python detaches the session) it checks what the engine hands
 * back against what the two sides sent and received:
 *   - the unforwarded client bytes are the last ones the engine read (prefill included), and
 *     the unforwarded broker bytes the last ones it read from the broker;
 *   - the client received a prefix of what the broker sent, as many bytes as the engine
 *     says it wrote; without stamping, the broker received a prefix of what the client sent;
 *   - after a hand-over Python resumes from (a reason of kind "resume": "request", "response",
 *     "client_eof", "drain", "reauth"),
 *     everything the engine approved was written: nothing is lost or sent twice.
 * Python then gives a session with nothing in flight back to the engine, having handled
 * its first frame, with the rest as prefill, as proxy/session/session.py does.
 *
 * At the end the session must end within its deadlines: with a partial request the frame
 * deadline, else the idle deadline, which requests in flight hold off only while the broker
 * may still answer them and the client may still want the answers. Then everything must be
 * released: the engine freed (LeakSanitizer), and as many descriptors open as before the
 * input (its splice pipes closed).
 */
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"
#include "engine_harness.h"
#include "relay_engine.h"

#define BIG_WRITE (1 << 20)
#define MAX_STREAM (8 << 20)

typedef struct {
    ne_engine *e;
    int app, client_end, upstream_end, broker; /* app: the client; broker: the upstream */
    int app_open, broker_open, app_wr_open;
    long long sid;
    int running; /* registered and not taken */
    uint8_t table[NE_TABLE_SIZE];
    size_t buffer_size, max_in_flight;
    int64_t max_frame;
    double idle_s, frame_s, handover_s; /* handover_s > 0: re-authentication due after it */
    int stamping, scanning, plan_which;
    /* streams */
    bytes_t app_sent, broker_sent;
    size_t app_read_pos;    /* bytes of app_sent the engine read in earlier phases */
    size_t broker_read_pos; /* bytes of broker_sent the engine read in earlier phases */
    /* this phase */
    bytes_t prefill, app_rx, broker_rx;
    size_t app_rx_checked, broker_rx_checked;
    size_t app_rx_total; /* of all phases: the client's view of the broker's stream */
    uint8_t fill_byte; /* the next filler write's byte */
    size_t grow_limit; /* the engine's growth pool */
    size_t stamp_cap;
} rig_t;

static void nonblocking(int fd) {
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static void small_buffers(int fd) {
    int size = 4096;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
}

static size_t write_some(int fd, const uint8_t *p, size_t n) {
    size_t done = 0;
    while (done < n) {
        ssize_t w = send(fd, p + done, n - done, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w <= 0) {
            break;
        }
        done += (size_t)w;
    }
    return done;
}

/* Everything readable now, appended to `into`. */
static void read_all(int fd, bytes_t *into) {
    uint8_t buf[65536];
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n <= 0) {
            return;
        }
        append(into, buf, (size_t)n);
    }
}

static void turn(rig_t *r) {
    int next;
    ne_turn(r->e, 0, &next);
}

/* The bytes the client and the broker received this phase must be what the other side sent,
 * in order (no stamping: requests pass unchanged; responses always do). */
static void check_received(rig_t *r) {
    if (r->app_rx.len > r->app_rx_checked) {
        size_t from = r->app_rx_total + r->app_rx_checked;
        size_t n = r->app_rx.len - r->app_rx_checked;
        FUZZ_CHECK(from + n <= r->broker_sent.len &&
                       memcmp(at(&r->app_rx, r->app_rx_checked), at(&r->broker_sent, from), n) == 0,
                   "the client received bytes the broker did not send there (at %zu)", from);
        r->app_rx_checked = r->app_rx.len;
    }
}

static void read_sides(rig_t *r) {
    if (r->app_open) {
        read_all(r->app, &r->app_rx);
    }
    if (r->broker_open) {
        read_all(r->broker, &r->broker_rx);
    }
    check_received(r);
}

static void register_session(rig_t *r) {
    nc_plan stamp, fetch;
    ne_session_args a = {0};
    a.id = ++r->sid;
    a.client_fd = r->client_end;
    a.upstream_fd = r->upstream_end;
    a.table = r->table;
    a.max_frame = r->max_frame;
    a.max_in_flight = r->max_in_flight;
    a.buffer_size = r->buffer_size;
    a.idle_s = r->idle_s;
    a.frame_s = r->frame_s;
    a.handover_s = r->handover_s;
    a.prefill = at(&r->prefill, 0);
    a.prefill_len = r->prefill.len;
    a.frame_age = 0;
    if (r->stamping) {
        stamp_plan(&stamp, r->plan_which);
        a.stamp = &stamp;
        a.stamp_key = 1;
        a.stamp_cap = r->stamp_cap;
    }
    if (r->scanning) {
        fetch_plan(&fetch);
        a.fetch = &fetch;
        a.fetch_key = 2;
        a.fetch_cap = 512 * 1024;
    }
    int rc = ne_register(r->e, &a);
    FUZZ_CHECK(rc == NE_OK, "register: %d", rc);
    if (r->stamping) {
        nc_plan_free(&stamp);
    }
    if (r->scanning) {
        nc_plan_free(&fetch);
    }
    r->running = 1;
    ne_counters c;
    FUZZ_CHECK(ne_collect(r->e, &c) == NE_OK, "collect"); /* this phase's counters from 0 */
    ne_counters_free(&c);
}

/* Whether Python carries on after a hand-over for `reason`: the engine says (NE_REASON_KINDS). */
static int resumes(const char *reason) {
    for (int i = 1; i < NE_N_REASONS; i++) {
        if (!strcmp(reason, NE_REASONS[i])) {
            return !strcmp(NE_REASON_KINDS[i], HANDOVER_KIND_RESUME);
        }
    }
    FUZZ_CHECK(0, "a reason the engine does not list: %s", reason);
    return 0;
}

/* The size of the whole frame at the start of `b`, or 0 when it is not all there. */
static size_t whole_frame(const bytes_t *b) {
    if (b->len < 4) {
        return 0;
    }
    int32_t size = (int32_t)((uint32_t)b->p[0] << 24 | (uint32_t)b->p[1] << 16 |
                             (uint32_t)b->p[2] << 8 | b->p[3]);
    if (size < 0 || (size_t)size + 4 > b->len) {
        return 0;
    }
    return (size_t)size + 4;
}

/* Python takes the session back: check what the engine hands over; give it back to the
 * engine when Python would. */
static void take_back(rig_t *r, int may_resume) {
    ne_handover h;
    int rc = ne_take(r->e, r->sid, &h);
    FUZZ_CHECK(rc == NE_OK, "take: %d", rc);
    r->running = 0;
    FUZZ_CHECK(ne_grown(r->e) == 0, "the taken session's growth (%zu) is not the pool's again",
               ne_grown(r->e));

    ne_counters c;
    FUZZ_CHECK(ne_collect(r->e, &c) == NE_OK, "collect");
    size_t from_client = (size_t)c.bytes[BYTES_CLIENT_TO_PROXY];
    size_t to_upstream = (size_t)c.bytes[BYTES_PROXY_TO_UPSTREAM];
    size_t from_upstream = (size_t)c.bytes[BYTES_UPSTREAM_TO_PROXY];
    size_t to_client = (size_t)c.bytes[BYTES_PROXY_TO_CLIENT];
    ne_counters_free(&c);
    FUZZ_CHECK(h.reason != NULL && h.reason[0] != '\0', "a hand-over without a reason");
    /* What the engine saw of the client in this phase: the prefill, then what it read. */
    FUZZ_CHECK(r->app_read_pos + from_client <= r->app_sent.len, "read more than was sent");
    bytes_t seen = {0};
    append(&seen, at(&r->prefill, 0), r->prefill.len);
    append(&seen, at(&r->app_sent, r->app_read_pos), from_client);
    FUZZ_CHECK(h.client_len <= seen.len &&
                   memcmp(h.client, at(&seen, seen.len - h.client_len), h.client_len) == 0,
               "%s: the client bytes handed back (%zu) are not the last read (%zu)", h.reason,
               h.client_len, seen.len);
    FUZZ_CHECK(r->broker_read_pos + from_upstream <= r->broker_sent.len,
               "read more than the broker sent");
    const uint8_t *up_seen = at(&r->broker_sent, r->broker_read_pos);
    FUZZ_CHECK(h.upstream_len <= from_upstream &&
                   memcmp(h.upstream, up_seen + from_upstream - h.upstream_len,
                          h.upstream_len) == 0,
               "%s: the broker bytes handed back (%zu) are not the last read (%zu)", h.reason,
               h.upstream_len, from_upstream);
    read_sides(r); /* the engine writes nothing more: all it wrote is readable now */
    FUZZ_CHECK(!r->app_open || r->app_rx.len == to_client, "the client got %zu of %zu bytes",
               r->app_rx.len, to_client);
    if (!r->stamping && r->broker_open) {
        FUZZ_CHECK(r->broker_rx.len == to_upstream &&
                       to_upstream <= seen.len &&
                       memcmp(at(&r->broker_rx, 0), at(&seen, 0), r->broker_rx.len) == 0,
                   "the broker got bytes the client did not send (%zu of %zu)",
                   r->broker_rx.len, to_upstream);
    }
    if (resumes(h.reason)) {
        FUZZ_CHECK(to_client + h.upstream_len == from_upstream,
                   "%s: %zu of the broker's %zu bytes lost or sent twice (handed back %zu)",
                   h.reason, to_client, from_upstream, h.upstream_len);
        FUZZ_CHECK(r->stamping || to_upstream + h.client_len == seen.len,
                   "%s: %zu of the client's %zu bytes lost or sent twice (handed back %zu)",
                   h.reason, to_upstream, seen.len, h.client_len);
        FUZZ_CHECK(h.tail <= h.upstream_len, "a tail of %zu in %zu bytes", h.tail,
                   h.upstream_len);
    }
    r->app_read_pos += from_client;
    r->broker_read_pos += from_upstream;
    r->app_rx_total += r->app_rx.len;
    r->app_rx.len = r->app_rx_checked = 0;
    r->broker_rx.len = r->broker_rx_checked = 0;
    /* Python handles the first frame, then hands the session back with the rest, when
     * nothing is in flight and the client may still send (proxy/session/session.py). */
    bytes_t rest = {0};
    int again = may_resume && resumes(h.reason) &&
                strcmp(h.reason, NE_REASONS[HANDOVER_CLIENT_EOF]) != 0 && h.n_in_flight == 0 &&
                h.upstream_len == 0 && h.tail == 0;
    if (again) {
        bytes_t got = {0};
        append(&got, h.client, h.client_len);
        size_t first = whole_frame(&got);
        if (first > 0 && got.len - first <= r->buffer_size) {
            append(&rest, at(&got, first), got.len - first);
        } else {
            again = 0;
        }
        free(got.p);
    }
    free(seen.p);
    ne_handover_free(&h);
    r->prefill.len = 0;
    if (again) {
        append(&r->prefill, at(&rest, 0), rest.len);
        register_session(r);
    }
    free(rest.p);
}

/* Hand-overs announced: take ours back. */
static void events(rig_t *r, int may_resume) {
    long long *ids;
    size_t n;
    FUZZ_CHECK(ne_events(r->e, &ids, &n) == NE_OK, "events");
    int ours = 0;
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(ids[i] == r->sid && r->running, "an event for session %lld", ids[i]);
        ours = 1;
    }
    free(ids);
    if (ours) {
        take_back(r, may_resume);
    }
}

static void turns(rig_t *r, int n, int may_resume) {
    for (int i = 0; i < n && r->running; i++) {
        turn(r);
        read_sides(r);
        events(r, may_resume);
    }
}

/* Whatever the session is doing, it ends within its deadlines once nothing more happens: the
 * frame deadline with a partial request, the idle deadline otherwise; requests in flight
 * keep it busy only while the broker may still answer them (the oldest younger than the idle
 * deadline) and the client may still want the answers. So after twice the idle deadline of
 * silence every session has ended, and as soon as the client leaves, within one. */
static void must_end(rig_t *r) {
    turns(r, 8, 0);
    if (r->running && (r->fill_byte & 1) && r->app_open) {
        close(r->app); /* the client gives up */
        r->app_open = r->app_wr_open = 0;
        turns(r, 4, 0);
        if (r->running) {
            fake_now += r->idle_s + 1;
            turns(r, 4, 0);
            FUZZ_CHECK(!r->running, "a session whose client left outlived its idle deadline");
        }
    }
    for (int round = 0; round < 2 && r->running; round++) {
        fake_now += r->idle_s + r->frame_s + 1;
        turns(r, 4, 0);
    }
    FUZZ_CHECK(!r->running, "a session outlived twice its deadlines of silence");
}

/* The table: eight (api key, version, value) triples from the input, the value 0-6
 * (T_PYTHON..T_SCAN_UNLESS_TAGGED) whatever the pair: the engine must cope with any table. */
#define PAIRS 8

static uint8_t filler[BIG_WRITE];

/* As in Python, which ignores SIGPIPE from its start: a splice(2) into a socket whose peer
 * closed then fails with EPIPE instead of killing the process (send has MSG_NOSIGNAL). */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int baseline = open_fds();
    fuzz_in in = {data, size, 0};
    rig_t r = {0};
    fake_now = 1000.0;
    uint8_t c0 = in_byte(&in), c1 = in_byte(&in), c2 = in_byte(&in);
    for (int i = 0; i < PAIRS; i++) {
        int api = in_byte(&in) % NE_MAX_API, ver = in_byte(&in) % NE_MAX_VER;
        r.table[api * NE_MAX_VER + ver] = in_byte(&in) % NE_T_COUNT;
    }
    r.buffer_size = (size_t)4096 << (c0 & 3);
    /* 1 to 22: below, at and past the in-flight table's first size (8), which grows. */
    r.max_in_flight = 1 + ((c0 >> 2) & 7) * 3;
    r.stamping = (c1 & 1) != 0;
    r.scanning = (c1 & 2) != 0;
    r.plan_which = (c1 >> 2) & 7;
    r.max_frame = (c1 & 0x20) ? 1 << 16 : 8 << 20;
    static const size_t pools[] = {SIZE_MAX, 0, 64 * 1024, 256 * 1024};
    r.grow_limit = pools[c1 >> 6]; /* the engine's growth pool: unbounded, spent, small */
    r.stamp_cap = 256 * 1024;
    r.idle_s = 1 + (c2 & 7);
    r.frame_s = 1 + ((c2 >> 3) & 7);
    r.handover_s = (c2 & 0x40) ? 0.5 + ((c2 >> 7) & 1) * 4 : 0; /* re-authentication due */
    size_t got;
    const uint8_t *prefill = in_bytes(&in, in_byte(&in) % 64, &got);
    append(&r.prefill, prefill, got);

    int app_pair[2], up_pair[2];
    FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, app_pair) == 0 &&
                   socketpair(AF_UNIX, SOCK_STREAM, 0, up_pair) == 0,
               "socketpair");
    r.app = app_pair[0];
    r.client_end = app_pair[1];
    r.upstream_end = up_pair[0];
    r.broker = up_pair[1];
    r.app_open = r.broker_open = r.app_wr_open = 1;
    for (int i = 0; i < 2; i++) {
        nonblocking(app_pair[i]);
        nonblocking(up_pair[i]);
    }
    if (c0 & 0x20) {
        small_buffers(r.app);
        small_buffers(r.client_end);
    }
    if (c0 & 0x40) {
        small_buffers(r.broker);
        small_buffers(r.upstream_end);
    }
    static const double bounds[] = {0.001, 0.01, 0.1, 1.0};
    r.e = ne_create(bounds, 4);
    FUZZ_CHECK(r.e != NULL, "ne_create");
    ne_set_clock(r.e, fake_clock, NULL);
    ne_set_grow_limit(r.e, r.grow_limit);
    register_session(&r);

    for (int steps = 0; steps < 400 && in.pos < in.len && r.running; steps++) {
        /* The pool bounds the growth; a stamped request's buffer, sized after the check, may
         * pass it by what doubling adds. */
        size_t grown = ne_grown(r.e);
        FUZZ_CHECK(r.grow_limit == SIZE_MAX || grown <= r.grow_limit + 2 * r.stamp_cap,
                   "the buffers grew by %zu past the pool of %zu", grown, r.grow_limit);
        uint8_t op = in_byte(&in);
        switch (op % 10) {
        case 0: /* the client writes bytes of the input */
        case 1: { /* the broker writes bytes of the input */
            const uint8_t *p = in_bytes(&in, 1 + in_u16(&in) % 4096, &got);
            int app = op % 10 == 0;
            if (app ? r.app_wr_open : r.broker_open) {
                size_t n = write_some(app ? r.app : r.broker, p, got);
                append(app ? &r.app_sent : &r.broker_sent, p, n);
            }
            break;
        }
        case 2: /* the client writes many filler bytes (the body of a large frame) */
        case 3: { /* the broker does */
            size_t n = ((size_t)in_u16(&in) * 64) % BIG_WRITE;
            int app = op % 10 == 2;
            bytes_t *sent = app ? &r.app_sent : &r.broker_sent;
            if ((app ? r.app_wr_open : r.broker_open) && sent->len + n < MAX_STREAM) {
                memset(filler, r.fill_byte++, n);
                n = write_some(app ? r.app : r.broker, filler, n);
                append(sent, filler, n);
            }
            break;
        }
        case 4:
            turns(&r, 1 + op / 10 % 4, 1);
            break;
        case 5:
            fake_now += (op / 10) * 0.1;
            break;
        case 6:
        case 7:
            read_sides(&r);
            break;
        case 8:
            switch (op / 10 % 6) {
            case 0:
                ne_stop(r.e, r.sid);
                break;
            case 1:
                read_sides(&r);
                take_back(&r, 0); /* Python detaches it (a cancelled session) */
                break;
            case 2:
                if (r.app_wr_open) {
                    shutdown(r.app, SHUT_WR);
                    r.app_wr_open = 0;
                }
                break;
            case 3:
                if (r.app_open) {
                    close(r.app);
                    r.app_open = r.app_wr_open = 0;
                }
                break;
            case 4:
                if (r.broker_open) {
                    close(r.broker);
                    r.broker_open = 0;
                }
                break;
            default:
                turns(&r, 8, 1);
                break;
            }
            break;
        default:
            turns(&r, 1, 1);
            break;
        }
    }
    if (r.running) {
        must_end(&r);
    }
    ne_destroy(r.e);
    close(r.client_end);
    close(r.upstream_end);
    if (r.app_open) {
        close(r.app);
    }
    if (r.broker_open) {
        close(r.broker);
    }
    free(r.app_sent.p);
    free(r.broker_sent.p);
    free(r.prefill.p);
    free(r.app_rx.p);
    free(r.broker_rx.p);
    int now_open = open_fds();
    FUZZ_CHECK(now_open == baseline, "%d descriptors open, %d before", now_open, baseline);
    return 0;
}
