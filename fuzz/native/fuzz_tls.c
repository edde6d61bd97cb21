/* The relay engine carrying TLS connections (proxy/native/relay_tls.c through
 * relay_engine.c), driven over socket pairs on one thread and a clock of its own.
 *
 * At start-up the harness makes a self-signed certificate (P-256) once. Per input it opens a
 * socket pair per side, makes one side TLS or both (TLS 1.2 or 1.3 per side, from the input),
 * completes the handshakes itself, checks the engine's SSLs with nt_check as `_relay.c` does
 * (application data pointing at their owner, on the session's descriptor) and registers the
 * session. The client application and the broker are peers whose SSLs write into memory: what
 * they encrypt waits in a wire buffer the harness sends from, whole or in pieces. The input is
 * a script: Kafka frames (well-formed, or any bytes) encrypted by a peer, raw garbage bytes
 * put on a wire (corrupted records), partial sends, TLS 1.3 key updates, close_notify, a
 * half-close or a close without close_notify, engine turns, time passing, reads by the peers.
 *
 * What must hold: what each peer decrypts is a prefix of what the other side sent in
 * plaintext (no stamping: requests and responses pass unchanged; no garbage can authenticate,
 * so this holds for corrupted streams too); a peer's TLS stream from the engine is never
 * broken; at a hand-over the bytes handed back are the last ones the engine read and, when
 * Python resumes, nothing was lost or sent twice, and the TLS connections are Python's again
 * (what it reads continues each peer's stream, what it writes reaches the peer); the session
 * ends within its deadlines; then the engine, its memory, its references to the SSLs and its
 * descriptors are released.
 */
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"
#include "engine_harness.h"
#include "relay_engine.h"
#include "relay_tls.h"

enum { APP = 0, BROKER = 1 }; /* the peers: the client application, the broker */

typedef struct {
    int fd;        /* the peer's end of its socket pair */
    int end;       /* the engine's end */
    int open;      /* fd not closed */
    int wr_open;   /* fd may still send */
    SSL *ssl;      /* the peer's TLS connection (memory BIOs), NULL when plaintext */
    SSL *engine;   /* the engine's end of it (a socket BIO on `end`) */
    BIO *rbio, *wbio;
    int tls13;
    int shut;      /* the peer sent close_notify */
    int garbled;   /* the peer put garbage on its wire: the engine may answer with an alert */
    int broken;    /* the peer's read failed (after its shutdown, a half-close, garbage) */
    bytes_t sent;  /* plaintext the peer wrote */
    bytes_t wire;  /* bytes for the socket, not yet sent: wire.p[wire_off, wire.len) */
    size_t wire_off;
    bytes_t rx;    /* plaintext the peer received */
    int32_t corr;  /* the next correlation id the peer writes */
} peer_t;

typedef struct {
    ne_engine *e;
    peer_t p[2];
    long long sid;
    int running;
    uint8_t table[NE_TABLE_SIZE];
    size_t buffer_size, max_in_flight;
    double idle_s, frame_s;
    int owner[2]; /* what the engine's SSLs' application data point at */
} rig_t;

static SSL_CTX *server_ctx, *client_ctx;

static SSL_CTX *make_ctx(int server, EVP_PKEY *key, X509 *cert) {
    SSL_CTX *ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
    FUZZ_CHECK(ctx != NULL, "SSL_CTX_new");
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
    if (server) {
        FUZZ_CHECK(SSL_CTX_use_certificate(ctx, cert) == 1 && SSL_CTX_use_PrivateKey(ctx, key) == 1,
                   "certificate");
        SSL_CTX_set_num_tickets(ctx, 1); /* a TLS 1.3 ticket after the handshake, read later */
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    /* As Python's ssl module sets it. */
    SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_AUTO_RETRY);
    return ctx;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    signal(SIGPIPE, SIG_IGN);
    EVP_PKEY *key = EVP_EC_gen("P-256");
    X509 *cert = X509_new();
    FUZZ_CHECK(key != NULL && cert != NULL, "a key");
    X509_set_version(cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
    X509_gmtime_adj(X509_getm_notBefore(cert), 0);
    X509_gmtime_adj(X509_getm_notAfter(cert), 3600L * 24 * 365);
    X509_set_pubkey(cert, key);
    X509_NAME *name = X509_get_subject_name(cert);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"broker", -1, -1,
                               0);
    X509_set_issuer_name(cert, name);
    FUZZ_CHECK(X509_sign(cert, key, EVP_sha256()) > 0, "self-signing");
    server_ctx = make_ctx(1, key, cert);
    client_ctx = make_ctx(0, NULL, NULL);
    X509_free(cert);
    EVP_PKEY_free(key);
    return 0;
}

static void small_buffers(int fd) {
    int size = 4096;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
}

/* What the peer's SSL wrote into memory goes on its wire. */
static void to_wire(peer_t *p) {
    if (p->ssl == NULL) {
        return;
    }
    uint8_t buf[16384];
    int n;
    while ((n = BIO_read(p->wbio, buf, sizeof buf)) > 0) {
        append(&p->wire, buf, (size_t)n);
    }
}

/* Up to `n` bytes of the wire to the socket, as far as it takes them. */
static void send_wire(peer_t *p, size_t n) {
    to_wire(p);
    if (!p->wr_open) {
        return;
    }
    size_t left = p->wire.len - p->wire_off;
    if (n > left) {
        n = left;
    }
    while (n > 0) {
        ssize_t w = send(p->fd, p->wire.p + p->wire_off, n, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w <= 0) {
            break;
        }
        p->wire_off += (size_t)w;
        n -= (size_t)w;
    }
}

/* Plaintext from the peer: encrypted into its wire (or as it is on a plaintext side). */
static void peer_write(peer_t *p, const uint8_t *buf, size_t n) {
    if (!p->wr_open || p->shut || n == 0) {
        return;
    }
    if (p->ssl != NULL) {
        size_t put = 0;
        ERR_clear_error();
        FUZZ_CHECK(SSL_write_ex(p->ssl, buf, n, &put) == 1 && put == n, "a peer's write");
        to_wire(p);
    } else {
        append(&p->wire, buf, n);
    }
    append(&p->sent, buf, n);
}

/* What the peer can read now, decrypted, appended to rx; checked against what the other side
 * sent. */
static void peer_read(rig_t *r, int side) {
    peer_t *p = &r->p[side];
    if (!p->open) {
        return;
    }
    uint8_t buf[65536];
    for (;;) {
        ssize_t n = recv(p->fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n <= 0) {
            break;
        }
        if (p->ssl != NULL) {
            FUZZ_CHECK(BIO_write(p->rbio, buf, (int)n) == (int)n, "BIO_write");
        } else {
            append(&p->rx, buf, (size_t)n);
        }
    }
    while (p->ssl != NULL && !p->broken) {
        size_t got = 0;
        ERR_clear_error();
        int rc = SSL_read_ex(p->ssl, buf, sizeof buf, &got);
        if (rc == 1) {
            append(&p->rx, buf, got);
            continue;
        }
        int err = SSL_get_error(p->ssl, rc);
        if (err == SSL_ERROR_SSL || err == SSL_ERROR_SYSCALL) {
            /* The engine writes only records OpenSSL made: a broken stream is a finding,
             * unless the peer sent garbage or ended its stream without close_notify (OpenSSL
             * answers both with an alert) or had closed its own side (reading on is then not
             * promised). */
            FUZZ_CHECK(p->shut || p->garbled || !p->wr_open, "the TLS stream from the engine is broken (%d): %s", err,
                       ERR_reason_error_string(ERR_peek_last_error()));
            p->broken = 1;
        }
        break;
    }
    to_wire(p); /* a key update's answer */
    const peer_t *o = &r->p[1 - side];
    FUZZ_CHECK(p->rx.len <= o->sent.len && memcmp(at(&p->rx, 0), at(&o->sent, 0), p->rx.len) == 0,
               "peer %d received bytes the other side did not send (%zu of %zu)", side,
               p->rx.len, o->sent.len);
}

static void read_peers(rig_t *r) {
    peer_read(r, APP);
    peer_read(r, BROKER);
}

/* Both ends of a side's TLS connection handshake over its socket pair. */
static void handshake(peer_t *p, int tls13, int peer_is_server) {
    p->ssl = SSL_new(peer_is_server ? server_ctx : client_ctx);
    p->engine = SSL_new(peer_is_server ? client_ctx : server_ctx);
    FUZZ_CHECK(p->ssl != NULL && p->engine != NULL, "SSL_new");
    int v = tls13 ? TLS1_3_VERSION : TLS1_2_VERSION;
    SSL_set_max_proto_version(p->ssl, v);
    SSL_set_min_proto_version(p->ssl, v);
    p->tls13 = tls13;
    p->rbio = BIO_new(BIO_s_mem());
    p->wbio = BIO_new(BIO_s_mem());
    FUZZ_CHECK(p->rbio != NULL && p->wbio != NULL, "BIO_new");
    BIO_set_mem_eof_return(p->rbio, -1); /* empty: retry, not end of stream */
    SSL_set_bio(p->ssl, p->rbio, p->wbio);
    FUZZ_CHECK(SSL_set_fd(p->engine, p->end) == 1, "SSL_set_fd");
    if (peer_is_server) {
        SSL_set_accept_state(p->ssl);
        SSL_set_connect_state(p->engine);
    } else {
        SSL_set_connect_state(p->ssl);
        SSL_set_accept_state(p->engine);
    }
    int done_peer = 0, done_engine = 0;
    for (int round = 0; round < 32 && !(done_peer && done_engine); round++) {
        ERR_clear_error();
        if (!done_engine) {
            int rc = SSL_do_handshake(p->engine);
            done_engine = rc == 1;
            FUZZ_CHECK(rc == 1 || SSL_get_error(p->engine, rc) == SSL_ERROR_WANT_READ,
                       "handshake (engine's end)");
        }
        ERR_clear_error();
        if (!done_peer) {
            uint8_t buf[16384];
            ssize_t n;
            while ((n = recv(p->fd, buf, sizeof buf, MSG_DONTWAIT)) > 0) {
                BIO_write(p->rbio, buf, (int)n);
            }
            int rc = SSL_do_handshake(p->ssl);
            done_peer = rc == 1;
            FUZZ_CHECK(rc == 1 || SSL_get_error(p->ssl, rc) == SSL_ERROR_WANT_READ,
                       "handshake (peer)");
        }
        send_wire(p, SIZE_MAX);
    }
    FUZZ_CHECK(done_peer && done_engine, "the handshake did not complete");
    FUZZ_CHECK(p->wire_off == p->wire.len, "handshake bytes left unsent");
    p->wire.len = p->wire_off = 0;
}

/* Python carries on with a TLS side the engine handed back (a resumable hand-over): the
 * connection is as Python left it, so what Python reads from it continues the peer's stream
 * right after the bytes the engine read (`from` of them). Only on a side whose peer is open
 * and sent nothing but records of its own. */
static void python_reads(rig_t *r, int side, size_t from) {
    peer_t *p = &r->p[side];
    if (p->ssl == NULL || !p->open || !p->wr_open || p->shut || p->garbled || p->broken) {
        return;
    }
    uint8_t buf[16384];
    size_t got = 0;
    for (int round = 0; round < 64; round++) {
        send_wire(p, SIZE_MAX);
        ERR_clear_error();
        int rc = SSL_read_ex(p->engine, buf, sizeof buf, &got);
        if (rc == 1) {
            FUZZ_CHECK(from + got <= p->sent.len &&
                           memcmp(buf, at(&p->sent, from), got) == 0,
                       "Python read bytes of peer %d's stream out of place (at %zu)", side,
                       from);
            from += got;
            continue;
        }
        int err = SSL_get_error(p->engine, rc);
        if (err == SSL_ERROR_WANT_WRITE) { /* a key update's answer, the socket full */
            peer_read(r, side);
            continue;
        }
        FUZZ_CHECK(err == SSL_ERROR_WANT_READ,
                   "Python's read after the hand-over failed (%d): %s", err,
                   ERR_reason_error_string(ERR_peek_last_error()));
        if (p->wire_off == p->wire.len) {
            break;
        }
    }
    FUZZ_CHECK(p->wire_off < p->wire.len || from == p->sent.len,
               "Python read %zu of peer %d's %zu bytes", from, side, p->sent.len);
}

/* Then Python writes on it: the peer gets it whole, after what the engine forwarded (the
 * rest of the other side's stream is Python's business now). */
static void python_writes(rig_t *r, int side) {
    peer_t *p = &r->p[side], *o = &r->p[1 - side];
    if (p->ssl == NULL || !p->open || p->shut || p->broken) {
        return;
    }
    static const uint8_t note[] = "after the hand-over";
    size_t put = 0;
    ERR_clear_error();
    if (SSL_write_ex(p->engine, note, sizeof note, &put) == 1) {
        o->sent.len = p->rx.len;
        append(&o->sent, note, put);
        peer_read(r, side);
        /* (broken: an alert answered its garbage or its end, peer_read allowed it) */
        FUZZ_CHECK(p->broken || p->rx.len == o->sent.len, "peer %d got %zu of %zu bytes after the hand-over",
                   side, p->rx.len, o->sent.len);
    }
}

/* Python takes the session back: what the engine hands over must be what it read last, and
 * nothing lost when Python resumes. The script then ends (no resumption here). */
static void take_back(rig_t *r) {
    ne_handover h;
    FUZZ_CHECK(ne_take(r->e, r->sid, &h) == NE_OK, "take");
    r->running = 0;
    ne_counters c;
    FUZZ_CHECK(ne_collect(r->e, &c) == NE_OK, "collect");
    size_t from_client = (size_t)c.bytes[BYTES_CLIENT_TO_PROXY];
    size_t to_upstream = (size_t)c.bytes[BYTES_PROXY_TO_UPSTREAM];
    size_t from_upstream = (size_t)c.bytes[BYTES_UPSTREAM_TO_PROXY];
    size_t to_client = (size_t)c.bytes[BYTES_PROXY_TO_CLIENT];
    ne_counters_free(&c);
    FUZZ_CHECK(h.reason != NULL && h.reason[0] != '\0', "a hand-over without a reason");
    const peer_t *app = &r->p[APP], *broker = &r->p[BROKER];
    FUZZ_CHECK(from_client <= app->sent.len && from_upstream <= broker->sent.len,
               "%s: read more than was sent (%zu of %zu, %zu of %zu)", h.reason, from_client,
               app->sent.len, from_upstream, broker->sent.len);
    FUZZ_CHECK(h.client_len <= from_client &&
                   memcmp(h.client, at(&app->sent, from_client - h.client_len), h.client_len) ==
                       0,
               "%s: the client bytes handed back are not the last read", h.reason);
    FUZZ_CHECK(h.upstream_len <= from_upstream &&
                   memcmp(h.upstream, at(&broker->sent, from_upstream - h.upstream_len),
                          h.upstream_len) == 0,
               "%s: the broker bytes handed back are not the last read", h.reason);
    read_peers(r);
    int i;
    for (i = 1; i < NE_N_REASONS && strcmp(h.reason, NE_REASONS[i]) != 0; i++) {
    }
    FUZZ_CHECK(i < NE_N_REASONS, "a reason the engine does not list: %s", h.reason);
    if (!strcmp(NE_REASON_KINDS[i], HANDOVER_KIND_RESUME)) {
        FUZZ_CHECK(to_client + h.upstream_len == from_upstream,
                   "%s: %zu of the broker's %zu bytes lost or sent twice (handed back %zu)",
                   h.reason, to_client, from_upstream, h.upstream_len);
        FUZZ_CHECK(to_upstream + h.client_len == from_client,
                   "%s: %zu of the client's %zu bytes lost or sent twice (handed back %zu)",
                   h.reason, to_upstream, from_client, h.client_len);
        /* The engine hands a resumable session back with its records all sent. */
        FUZZ_CHECK(!app->open || app->shut || app->broken || app->rx.len == to_client,
                   "%s: the client got %zu of %zu bytes", h.reason, app->rx.len, to_client);
        FUZZ_CHECK(!broker->open || broker->shut || broker->broken ||
                       broker->rx.len == to_upstream,
                   "%s: the broker got %zu of %zu bytes", h.reason, broker->rx.len,
                   to_upstream);
        python_reads(r, APP, from_client);
        python_reads(r, BROKER, from_upstream);
        python_writes(r, APP);
        python_writes(r, BROKER);
    }
    ne_handover_free(&h);
}

static void events(rig_t *r) {
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
        take_back(r);
    }
}

static void turns(rig_t *r, int n) {
    for (int i = 0; i < n && r->running; i++) {
        int next;
        ne_turn(r->e, 0, &next);
        read_peers(r);
        events(r);
    }
}

/* A Kafka frame: a request (api key, version, correlation id, client id) from the client, a
 * response (correlation id) from the broker, its body from the input. */
static void write_frame(rig_t *r, int side, fuzz_in *in) {
    peer_t *p = &r->p[side];
    uint8_t head[14];
    size_t got, hlen;
    uint8_t api = in_byte(in) % 4 == 0 ? 18 : in_byte(in) % 75, ver = in_byte(in) % 16;
    const uint8_t *body = in_bytes(in, in_u16(in) % 2048, &got);
    int32_t corr = p->corr++;
    if (side == APP) {
        hlen = 14;
        head[4] = 0;
        head[5] = api;
        head[6] = 0;
        head[7] = ver;
        head[12] = 0xff; /* client id: null */
        head[13] = 0xff;
    } else {
        hlen = 8;
    }
    uint32_t size = (uint32_t)(hlen - 4 + got);
    uint8_t *c = side == APP ? head + 8 : head + 4;
    c[0] = (uint8_t)(corr >> 24);
    c[1] = (uint8_t)(corr >> 16);
    c[2] = (uint8_t)(corr >> 8);
    c[3] = (uint8_t)corr;
    head[0] = (uint8_t)(size >> 24);
    head[1] = (uint8_t)(size >> 16);
    head[2] = (uint8_t)(size >> 8);
    head[3] = (uint8_t)size;
    bytes_t frame = {0};
    append(&frame, head, hlen);
    append(&frame, body, got);
    peer_write(p, frame.p, frame.len); /* one record */
    free(frame.p);
}

static void close_peer(peer_t *p) {
    if (p->open) {
        close(p->fd);
        p->open = p->wr_open = 0;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int baseline = open_fds();
    fuzz_in in = {data, size, 0};
    rig_t r = {0};
    fake_now = 1000.0;
    uint8_t c0 = in_byte(&in), c1 = in_byte(&in);
    int which = c0 % 3; /* 0: both sides TLS; 1: the client's only; 2: the broker's only */
    r.buffer_size = (size_t)4096 << (c1 & 3);
    r.max_in_flight = 1 + ((c1 >> 2) & 7);
    r.idle_s = 1 + ((c1 >> 5) & 3);
    r.frame_s = 1 + ((c1 >> 7) & 1);
    /* Every request passes but ApiVersions (Python's, a hand-over) and, when the input says
     * so, one more pair. */
    memset(r.table, NE_T_PASS, sizeof r.table);
    for (int v = 0; v < NE_MAX_VER; v++) {
        r.table[18 * NE_MAX_VER + v] = NE_T_PYTHON;
    }
    int api = in_byte(&in) % NE_MAX_API, ver = in_byte(&in) % NE_MAX_VER;
    r.table[api * NE_MAX_VER + ver] = in_byte(&in) % 3; /* python, pass, unless_tagged */

    for (int side = 0; side < 2; side++) {
        peer_t *p = &r.p[side];
        int pair[2];
        FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0, "socketpair");
        p->fd = pair[0];
        p->end = pair[1];
        p->open = p->wr_open = 1;
        p->corr = 1;
        for (int i = 0; i < 2; i++) {
            fcntl(pair[i], F_SETFL, fcntl(pair[i], F_GETFL) | O_NONBLOCK);
            if (c0 & (0x10 << side)) {
                small_buffers(pair[i]);
            }
        }
        if (which == 0 || which == side + 1) {
            handshake(p, (c0 >> (2 + side)) & 1, side == BROKER);
            SSL_set_app_data(p->engine, &r.owner[side]);
            const char *why = nt_check(p->engine, &r.owner[side], p->end);
            FUZZ_CHECK(why == NULL, "nt_check refuses a complete handshake: %s", why);
        }
    }

    static const double bounds[] = {0.001, 0.01, 0.1, 1.0};
    r.e = ne_create(bounds, 4);
    FUZZ_CHECK(r.e != NULL, "ne_create");
    ne_set_clock(r.e, fake_clock, NULL);
    ne_session_args a = {0};
    a.id = r.sid = 1;
    a.client_fd = r.p[APP].end;
    a.upstream_fd = r.p[BROKER].end;
    a.table = r.table;
    a.max_frame = 1 << 16;
    a.max_in_flight = r.max_in_flight;
    a.buffer_size = r.buffer_size;
    a.idle_s = r.idle_s;
    a.frame_s = r.frame_s;
    a.prefill = (const uint8_t *)"";
    a.client_tls = r.p[APP].engine;
    a.upstream_tls = r.p[BROKER].engine;
    FUZZ_CHECK(ne_register(r.e, &a) == NE_OK, "register");
    r.running = 1;

    for (int steps = 0; steps < 200 && in.pos < in.len && r.running; steps++) {
        uint8_t op = in_byte(&in);
        int side = (op >> 4) & 1;
        peer_t *p = &r.p[side];
        size_t got;
        switch (op & 15) {
        case 0:
        case 1:
            write_frame(&r, side, &in);
            send_wire(p, SIZE_MAX);
            break;
        case 2: { /* any bytes, as plaintext: frames of any shape */
            const uint8_t *b = in_bytes(&in, 1 + in_byte(&in) % 64, &got);
            peer_write(p, b, got);
            break;
        }
        case 3: { /* garbage on the wire, records or not (bytes as they are when plaintext) */
            const uint8_t *b = in_bytes(&in, 1 + in_byte(&in) % 64, &got);
            to_wire(p);
            append(&p->wire, b, got);
            if (p->ssl != NULL) {
                p->garbled = 1;
            } else {
                append(&p->sent, b, got); /* on a plaintext side, just bytes */
            }
            break;
        }
        case 4: /* some of the wire: a record cut short */
            send_wire(p, 1 + in_u16(&in) % 1024);
            break;
        case 5:
        case 6:
            send_wire(&r.p[APP], SIZE_MAX);
            send_wire(&r.p[BROKER], SIZE_MAX);
            turns(&r, 1 + (op >> 5));
            break;
        case 7:
            read_peers(&r);
            break;
        case 8: /* close_notify */
            if (p->ssl != NULL && !p->shut && p->wr_open) {
                ERR_clear_error();
                SSL_shutdown(p->ssl);
                p->shut = 1;
                send_wire(p, SIZE_MAX);
            }
            break;
        case 9: /* a half-close */
            if (p->wr_open) {
                send_wire(p, SIZE_MAX);
                shutdown(p->fd, SHUT_WR);
                p->wr_open = 0;
            }
            break;
        case 10: /* a close, what is on the wire sent first or not */
            if (op & 0x20) {
                send_wire(p, SIZE_MAX);
            }
            close_peer(p);
            break;
        case 11: /* a TLS 1.3 key update, the engine to answer it or not */
            if (p->ssl != NULL && p->tls13 && !p->shut && p->wr_open) {
                ERR_clear_error();
                FUZZ_CHECK(SSL_key_update(p->ssl, (op & 0x20) ? SSL_KEY_UPDATE_REQUESTED
                                                               : SSL_KEY_UPDATE_NOT_REQUESTED) ==
                               1,
                           "key update");
                SSL_do_handshake(p->ssl); /* writes the KeyUpdate message */
                send_wire(p, SIZE_MAX);
            }
            break;
        case 12:
            fake_now += (op >> 5) * 0.25;
            break;
        case 13:
            ne_stop(r.e, r.sid);
            break;
        default:
            turns(&r, 1);
            break;
        }
    }
    /* Everything sent, then the session must end within its deadlines. */
    send_wire(&r.p[APP], SIZE_MAX);
    send_wire(&r.p[BROKER], SIZE_MAX);
    turns(&r, 8);
    for (int round = 0; round < 3 && r.running; round++) {
        fake_now += r.idle_s + r.frame_s + 1;
        turns(&r, 4);
        if (round == 1 && r.running) {
            close_peer(&r.p[APP]); /* the client leaves */
        }
    }
    FUZZ_CHECK(!r.running, "a session outlived its deadlines");
    ne_destroy(r.e);
    for (int side = 0; side < 2; side++) {
        peer_t *p = &r.p[side];
        SSL_free(p->ssl); /* its BIOs with it */
        SSL_free(p->engine);
        close_peer(p);
        close(p->end);
        free(p->sent.p);
        free(p->wire.p);
        free(p->rx.p);
    }
    ERR_clear_error();
    int now_open = open_fds();
    FUZZ_CHECK(now_open == baseline, "%d descriptors open, %d before", now_open, baseline);
    return 0;
}
