/* TLS on the engine's sockets.
 *
 * Python makes every TLS handshake (its ssl module, the certificates, the principal, SASL
 * after it) and then hands the connection to the engine as it is: the same OpenSSL `SSL`,
 * on the same descriptor. The engine reads records with SSL_read_ex and writes them with
 * SSL_write_ex (into a write BIO of its own while it holds the connection, so that many records
 * go out with one send), and hands the connection back as it found it, its socket BIO again
 * and every record sent, with whatever it had read and not forwarded returned in plaintext as
 * for any session (relay_engine.c). No second TLS
 * state exists, so nothing has to be copied or kept in step: sequence numbers, keys, key
 * updates and session tickets are OpenSSL's business as they are on the Python path.
 *
 * The kernel's TLS (the `tls` upper layer protocol, kTLS) would let splice(2) go on serving
 * TLS sessions; a kernel without it (this one: /proc/sys/net/ipv4/tcp_available_ulp has no
 * `tls`, and setting TCP_ULP "tls" on a socket fails with ENOENT) leaves userspace TLS as the
 * only way, and that is what this file is. docs/performance.md says how to check a host.
 *
 * The engine thread uses an SSL only between nt_adopt and nt_hand_back, while Python waits
 * for the session (it is parked in `NativeRelay.relay`), so the two never use one at once.
 * OpenSSL's error queue is per thread: each call clears it first and reads its own errors.
 */
#include "relay_tls.h"

#include <errno.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

const char *nt_check(struct ssl_st *ssl, const void *owner, int fd) {
    if (ssl == NULL) {
        return "no TLS connection";
    }
    if (SSL_get_app_data(ssl) != owner) {
        return "not the SSL of the ssl module's object (an ssl module of another layout?)";
    }
    if (fd < 0 || SSL_get_rfd(ssl) != fd || SSL_get_wfd(ssl) != fd) {
        return "the TLS connection is not on the session's descriptor";
    }
    if (!SSL_is_init_finished(ssl)) {
        return "the TLS handshake is not complete";
    }
    if (SSL_get_shutdown(ssl) != 0) {
        return "the TLS connection is shutting down";
    }
    /* After a read that found nothing, it says SSL_READING: nothing is half done then. A
     * write that did not finish must be finished with the same bytes, by whoever began it. */
    if (SSL_want(ssl) == SSL_WRITING) {
        return "a TLS write is half done";
    }
    return NULL;
}

/* What a read takes from the socket at most, read-ahead on: several records per system call.
 * OpenSSL sizes its read buffer when it makes it, so the engine lets it release the buffer
 * once empty (SSL_MODE_RELEASE_BUFFERS) and make the next one this large. */
#define READ_BUFFER (128 * 1024)

/* ---- the engine's write BIO: records are appended to a buffer, sent by nt_write and nt_drain
 * many at a time. A write into it never fails but for memory, so OpenSSL never has a record
 * half written; what the socket does not take stays in the buffer, in order. */

struct nt_out {
    uint8_t *buf;
    size_t off, len, cap; /* unsent: buf[off, len) */
};

static int out_write(BIO *b, const char *data, size_t n, size_t *written) {
    struct nt_out *o = BIO_get_data(b);
    *written = 0;
    if (o->off == o->len) {
        o->off = o->len = 0;
    }
    if (n > o->cap - o->len) {
        if (o->off > 0) {
            memmove(o->buf, o->buf + o->off, o->len - o->off);
            o->len -= o->off;
            o->off = 0;
        }
        if (n > o->cap - o->len) {
            size_t cap = o->cap * 2 > o->len + n ? o->cap * 2 : o->len + n;
            uint8_t *grown = realloc(o->buf, cap);
            if (grown == NULL) {
                return 0; /* an error for OpenSSL (SSL_ERROR_SYSCALL): the session ends */
            }
            o->buf = grown;
            o->cap = cap;
        }
    }
    memcpy(o->buf + o->len, data, n);
    o->len += n;
    *written = n;
    return 1;
}

static long out_ctrl(BIO *b, int cmd, long num, void *ptr) {
    (void)num;
    (void)ptr;
    struct nt_out *o = BIO_get_data(b);
    switch (cmd) {
    case BIO_CTRL_FLUSH:
        return 1; /* the engine sends: nt_drain */
    case BIO_CTRL_WPENDING:
        return (long)(o->len - o->off);
    default:
        return 0;
    }
}

static int out_destroy(BIO *b) {
    struct nt_out *o = BIO_get_data(b);
    if (o != NULL) {
        free(o->buf);
        free(o);
        BIO_set_data(b, NULL);
    }
    return 1;
}

static BIO_METHOD *out_method;
static pthread_once_t out_once = PTHREAD_ONCE_INIT;

static void make_out_method(void) {
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "herald records");
    if (m != NULL && (!BIO_meth_set_write_ex(m, out_write) || !BIO_meth_set_ctrl(m, out_ctrl) ||
                      !BIO_meth_set_destroy(m, out_destroy))) {
        BIO_meth_free(m);
        m = NULL;
    }
    out_method = m;
}

/* Records encrypted per nt_write at most, before they are sent: 16 records of 16 KiB. */
#define NT_BATCH (256 * 1024)

/* A write BIO of the engine's, or NULL (then the socket BIO stays: one record per send). */
static BIO *new_out(struct nt_out **out) {
    pthread_once(&out_once, make_out_method);
    if (out_method == NULL) {
        return NULL;
    }
    struct nt_out *o = calloc(1, sizeof *o);
    BIO *b = o != NULL ? BIO_new(out_method) : NULL;
    if (b == NULL) {
        free(o);
        return NULL;
    }
    BIO_set_data(b, o);
    BIO_set_init(b, 1);
    *out = o;
    return b;
}

void nt_adopt(struct ssl_st *ssl, nt_saved *saved) {
    SSL_up_ref(ssl);
    long had = SSL_get_mode(ssl);
    saved->added_mode = (SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_RELEASE_BUFFERS) & ~had;
    if (saved->added_mode) {
        SSL_set_mode(ssl, saved->added_mode);
    }
    saved->read_ahead = SSL_get_read_ahead(ssl);
    SSL_set_read_ahead(ssl, 1);
    SSL_set_default_read_buffer_len(ssl, READ_BUFFER);
    saved->sock = NULL;
    saved->out = NULL;
    saved->held = 0;
    BIO *out = new_out(&saved->out);
    if (out != NULL) {
        /* SSL_set0_wbio lets go of the connection's reference to its write BIO (the socket
         * BIO, also its read BIO): the engine keeps one to put it back. */
        saved->sock = SSL_get_wbio(ssl);
        BIO_up_ref(saved->sock);
        SSL_set0_wbio(ssl, out);
    }
}

size_t nt_unsent(const nt_saved *saved) {
    return saved->out != NULL ? saved->out->len - saved->out->off : 0;
}

int nt_drain(nt_saved *saved, int fd, char *why, size_t why_len) {
    struct nt_out *o = saved->out;
    while (o != NULL && o->off < o->len) {
        ssize_t n = send(fd, o->buf + o->off, o->len - o->off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            o->off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return NT_AGAIN;
        }
        snprintf(why, why_len, "%s", n < 0 ? strerror(errno) : "connection reset");
        return NT_ERROR;
    }
    if (o != NULL) {
        o->off = o->len = 0;
    }
    return NT_DATA;
}

/* Put the socket BIO back (the connection frees the engine's write BIO and its buffer). */
static void restore_wbio(struct ssl_st *ssl, nt_saved *saved) {
    if (saved->sock != NULL) {
        SSL_set0_wbio(ssl, saved->sock); /* the engine's reference is the connection's again */
        saved->sock = NULL;
        saved->out = NULL;
    }
}

size_t nt_hand_back(struct ssl_st *ssl, nt_saved *saved, int fd) {
    char why[8];
    (void)nt_drain(saved, fd, why, sizeof why);
    size_t lost = nt_unsent(saved);
    restore_wbio(ssl, saved);
    if (saved->added_mode) {
        SSL_clear_mode(ssl, saved->added_mode);
    }
    SSL_set_read_ahead(ssl, saved->read_ahead);
    SSL_set_default_read_buffer_len(ssl, 0); /* Python never sets one: OpenSSL's own size */
    return lost;
}

void nt_release(struct ssl_st *ssl, nt_saved *saved) {
    restore_wbio(ssl, saved);
    SSL_free(ssl); /* the engine's reference; Python's keeps the connection */
}

/* What went wrong, from the error queue (or errno for a system call). */
static void describe(int err, char *why, size_t why_len) {
    unsigned long code = ERR_peek_last_error();
    if (err == SSL_ERROR_SYSCALL && code == 0) {
        snprintf(why, why_len, "%s", errno != 0 ? strerror(errno) : "connection reset");
    } else {
        const char *reason = code != 0 ? ERR_reason_error_string(code) : NULL;
        snprintf(why, why_len, "TLS: %s", reason != NULL ? reason : "protocol error");
    }
    ERR_clear_error();
}

/* One SSL_read_ex: as nt_read, for one record at most. */
static int read_record(struct ssl_st *ssl, uint8_t *buf, size_t n, size_t *got,
                       int *wants_write, char *why, size_t why_len) {
    *got = 0;
    ERR_clear_error();
    errno = 0;
    int ok = SSL_read_ex(ssl, buf, n, got);
    if (ok) {
        return NT_DATA;
    }
    int err = SSL_get_error(ssl, 0);
    switch (err) {
    case SSL_ERROR_WANT_READ:
        return NT_AGAIN;
    case SSL_ERROR_WANT_WRITE:
        *wants_write = 1;
        return NT_AGAIN;
    case SSL_ERROR_ZERO_RETURN:
        return NT_EOF; /* close_notify */
    case SSL_ERROR_SYSCALL:
        if (ERR_peek_error() == 0 && (errno == 0 || errno == ECONNRESET)) {
            ERR_clear_error();
            return NT_EOF; /* the socket ended without close_notify (OpenSSL before 3) */
        }
        break;
    case SSL_ERROR_SSL:
        /* The peer closed its socket without close_notify, as many clients do: the stream
         * is over, exactly as a plaintext socket's end. */
        if (ERR_GET_REASON(ERR_peek_error()) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
            ERR_clear_error();
            return NT_EOF;
        }
        break;
    default:
        break;
    }
    describe(err, why, why_len);
    return NT_ERROR;
}

int nt_read(struct ssl_st *ssl, nt_saved *saved, uint8_t *buf, size_t n, size_t *got,
            int *drained, int *wants_write, char *why, size_t why_len) {
    *got = 0;
    *drained = 0;
    *wants_write = 0;
    if (saved->held != 0) {
        int r = saved->held;
        saved->held = 0;
        snprintf(why, why_len, "%s", saved->held_why);
        return r;
    }
    /* Each SSL_read_ex gives one record's plaintext; the records read ahead are decrypted
     * here, not one per turn of the engine. A read that finds nothing whole costs what the
     * next call would have (one recv that says EAGAIN). */
    while (*got < n) {
        size_t one = 0;
        int r = read_record(ssl, buf + *got, n - *got, &one, wants_write, why, why_len);
        if (r == NT_DATA) {
            *got += one;
            continue;
        }
        if (*got == 0) {
            return r;
        }
        if (r == NT_AGAIN) {
            *drained = !*wants_write;
        } else {
            saved->held = r;
            snprintf(saved->held_why, sizeof saved->held_why, "%s", why);
        }
        break;
    }
    return NT_DATA;
}

int nt_write(struct ssl_st *ssl, nt_saved *saved, int fd, const uint8_t *buf, size_t n,
             size_t *put, int *wants_read, char *why, size_t why_len) {
    *put = 0;
    *wants_read = 0;
    int r = nt_drain(saved, fd, why, why_len);
    if (r != NT_DATA) {
        return r; /* records still unsent: nothing more is encrypted before they go */
    }
    ERR_clear_error();
    errno = 0;
    /* Into the engine's buffer, record after record (a partial write returns after each),
     * then one send for them all; on the socket BIO, one record and its send. */
    do {
        size_t wrote = 0;
        if (!SSL_write_ex(ssl, buf + *put, n - *put, &wrote)) {
            int err = SSL_get_error(ssl, 0);
            if (err == SSL_ERROR_WANT_WRITE && *put == 0) {
                return NT_AGAIN;
            }
            if (err == SSL_ERROR_WANT_READ && *put == 0) {
                *wants_read = 1;
                return NT_AGAIN;
            }
            if (err == SSL_ERROR_WANT_WRITE || err == SSL_ERROR_WANT_READ) {
                break; /* what was taken before is sent below */
            }
            describe(err, why, why_len);
            return NT_ERROR;
        }
        *put += wrote;
    } while (saved->out != NULL && *put < n && nt_unsent(saved) < NT_BATCH);
    r = nt_drain(saved, fd, why, why_len);
    return r == NT_ERROR ? NT_ERROR : NT_DATA; /* the rest goes with the next write or drain */
}

int nt_pending(const struct ssl_st *ssl) {
    return SSL_has_pending(ssl);
}

unsigned long nt_library_version(void) {
    return OpenSSL_version_num();
}
