/* The native relay engine without Python: see relay_engine.c. `proxy/native/_relay.c` wraps it
 * as `proxy.native._relay.Engine`; the fuzz target fuzz/native/fuzz_engine.c drives it over
 * socket pairs on a clock of its own. */
#ifndef HERALD_RELAY_ENGINE_H
#define HERALD_RELAY_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "contracts/native_relay.h"
#include "relay_stamp.h"

struct ssl_st; /* OpenSSL's SSL: see relay_tls.h */

#define NE_MAX_API 128
#define NE_MAX_VER 32
#define NE_TABLE_SIZE (NE_MAX_API * NE_MAX_VER)
#define NE_MAX_BOUNDS 32
#define NE_DETAIL 160

typedef struct ne_engine ne_engine;

enum { NE_OK = 0, NE_NOMEM, NE_EXISTS, NE_MISSING, NE_INVALID, NE_SYSTEM };

/* Hand-over reasons (HANDOVER_NAMES), and for each what it means to the Python side
 * (NE_REASON_KINDS, same order: HANDOVER_KINDS), both from contracts/native_relay.h, where
 * protocol/contracts/native_relay.py explains each kind. NE_N_REASONS entries each; index 0
 * (HANDOVER_NONE) is no reason. proxy/native/path_choice.py reads them through
 * `_relay.capabilities()` and restates none of them. */
extern const char *const NE_REASONS[];
extern const char *const NE_REASON_KINDS[];
extern const int NE_N_REASONS;

/* What a table byte (NE_TABLE_SIZE of them, one per api key and version) tells the engine to
 * do with that pair's requests; NE_TABLE_VALUE_NAMES names them, in order, for Python. */
enum {
    NE_T_PYTHON = 0,          /* the request goes to Python */
    NE_T_PASS,                /* it passes, and so does its response */
    NE_T_UNLESS_TAGGED,       /* it passes; its response passes without top-level tags */
    NE_T_STAMP,               /* stamped (Produce, with a stamp plan); the response passes */
    NE_T_STAMP_UNLESS_TAGGED, /* stamped; the response passes without top-level tags */
    NE_T_SCAN,                /* it passes; its response is scanned (Fetch, a fetch plan) */
    NE_T_SCAN_UNLESS_TAGGED,  /* scanned, and passes only without top-level tags */
    NE_T_COUNT,
};
#define NE_TABLE_VALUE_NAMES                                                                 \
    {"python", "pass", "unless_tagged", "stamp", "stamp_unless_tagged", "scan",             \
     "scan_unless_tagged"}

/* 1 when the engine carries TLS sessions itself (their records encrypted and decrypted on
 * its thread, relay_tls.c); 0: a session with TLS on either side stays in Python. Usable only
 * when the engine's OpenSSL is the one Python's ssl module runs (capabilities()'s
 * "openssl_version", checked in proxy/native/capabilities.py). */
#ifndef NE_TLS
#define NE_TLS 1
#endif

/* A session handed to the engine. The engine copies what it keeps, but for the plans, whose
 * contents it takes over (the caller's structs are left empty) once ne_register succeeds. */
typedef struct {
    long long id;
    int client_fd, upstream_fd; /* plaintext, non-blocking; they stay the caller's */
    const uint8_t *table;       /* NE_TABLE_SIZE bytes: what each (api, version) may do */
    int64_t max_frame;
    size_t max_in_flight, buffer_size;
    double idle_s, frame_s;
    const uint8_t *prefill; /* bytes read from the client, not forwarded, from a frame start */
    size_t prefill_len;
    double frame_age; /* seconds since the prefilled partial frame began */
    nc_plan *stamp;   /* NULL: Produce requests are not stamped */
    long long stamp_key;
    size_t stamp_cap;
    nc_plan *fetch; /* NULL: Fetch responses are not scanned */
    long long fetch_key;
    size_t fetch_cap;
    double handover_s; /* > 0: hand over ("reauth") at the first frame boundary this many
                        * seconds after registering: Herald's own re-authentication is due */
    /* NULL: that side is plaintext. Else its TLS connection, handshake done, on that
     * descriptor (checked with nt_check): the engine reads and writes through it, takes a
     * reference of its own, and hands it back as Python left it at ne_take. */
    struct ssl_st *client_tls, *upstream_tls;
} ne_session_args;

typedef struct {
    int32_t corr;
    int16_t api, ver;
    double received;
} ne_entry;

/* What a session hands back (ne_take); ne_handover_free releases it. */
typedef struct {
    const char *reason;
    char detail[NE_DETAIL];
    uint8_t *client_buf, *upstream_buf; /* own the bytes below */
    const uint8_t *client, *upstream;   /* unforwarded bytes, each from a frame boundary */
    size_t client_len, upstream_len;
    ne_entry *in_flight;
    size_t n_in_flight;
    uint64_t forwarded;
    size_t tail;
    double frame_age; /* >= 0: seconds since the partial request in `client` began */
} ne_handover;

/* Counters of one (api, version) since the last collect. */
typedef struct {
    int api, ver;
    uint64_t requests;
    uint64_t lat[NE_MAX_BOUNDS + 1], up[NE_MAX_BOUNDS + 1];
    double lat_sum, up_sum;
} ne_pair_counts;

typedef struct {
    long long key;
    nc_counts counts;
} ne_stamp_counts;

typedef struct {
    uint64_t bytes[BYTES_N]; /* by direction (contracts/native_relay.h) */
    ne_pair_counts *pairs;
    size_t npairs;
    int nbuckets;
} ne_counters;

/* A monotonic clock in seconds; the default reads CLOCK_MONOTONIC. */
typedef double (*ne_clock_fn)(void *arg);

/* An engine with no thread yet (NULL with errno set). `bounds`: the latency buckets. */
ne_engine *ne_create(const double *bounds, int nbounds);
/* What session buffers may grow by in all past their base size (`buffer_size`), for large
 * frames to stamp or scan; SIZE_MAX until set. A frame the rest cannot hold goes to Python. */
void ne_set_grow_limit(ne_engine *e, size_t limit);
/* Its thread, which runs ne_turn until ne_destroy: NE_OK or NE_SYSTEM. */
int ne_start(ne_engine *e);
/* Stop the thread and free every session; the counters stay readable. */
void ne_close(ne_engine *e);
/* ne_close, then free the engine. */
void ne_destroy(ne_engine *e);
/* Readable when ne_events has news. */
int ne_notify_fd(const ne_engine *e);
/* Before ne_start only: the clock deadlines are measured on. */
void ne_set_clock(ne_engine *e, ne_clock_fn fn, void *arg);

/* A wait for sockets with no limit (epoll_wait's). */
enum { NE_NO_TIMEOUT = -1 };

/* One batch of the engine's work: wait up to timeout_ms (NE_NO_TIMEOUT: no limit) for
 * sockets, serve them, check deadlines. *next_timeout_ms: the wait the next turn needs for
 * its deadlines (NE_NO_TIMEOUT when none is due). The thread runs this in a loop; a caller
 * without the thread (a fuzz target) calls it. */
void ne_turn(ne_engine *e, int timeout_ms, int *next_timeout_ms);

int ne_register(ne_engine *e, ne_session_args *a);
/* Ask a session to hand over at its next frame boundary: 1 when it is there. */
int ne_stop(ne_engine *e, long long id);
/* The ids of the sessions handed over since the last call, in *ids (malloc'd, freed by the
 * caller; NULL when there are none). NE_OK or NE_NOMEM. */
int ne_events(ne_engine *e, long long **ids, size_t *n);
/* Take a session back (detaching it if it still runs): NE_OK, NE_MISSING or NE_NOMEM. */
int ne_take(ne_engine *e, long long id, ne_handover *out);
void ne_handover_free(ne_handover *h);
/* What was counted since the last call, and reset. NE_OK or NE_NOMEM (nothing reset then). */
int ne_collect(ne_engine *e, ne_counters *out);
void ne_counters_free(ne_counters *c);
/* What was stamped or scanned since the last call, by plan key, and reset. */
int ne_collect_stamped(ne_engine *e, ne_stamp_counts **rows, size_t *n);
/* What session buffers have grown by past their base size, now (see ne_set_grow_limit). */
size_t ne_grown(ne_engine *e);
/* Bytes moved socket to pipe to socket since the engine began. */
uint64_t ne_spliced(ne_engine *e);
/* Turns the engine took, and of them those that walked every session: for deadlines (one
 * was due) and for TLS bytes no readiness announces (a side held some), since it began. */
enum { NE_WALK_TURNS, NE_WALK_DEADLINES, NE_WALK_TLS, NE_WALK_KINDS };
void ne_walks(ne_engine *e, uint64_t out[NE_WALK_KINDS]);
/* Of the bytes counted (by direction, BYTES_* of contracts/native_relay.h), those decrypted
 * or encrypted by the engine on TLS sides, since it began: never reset. */
void ne_tls_bytes(ne_engine *e, uint64_t out[BYTES_N]);

#endif
