/* TLS on the engine's sockets.
 *
 * Python makes every TLS handshake (its ssl module, the certificates, the principal, SASL
 * after it) and then hands the connection to the engine as it is: the same OpenSSL `SSL`,
 * on the same descriptor. The engine reads records with SSL_read_ex and writes them with
 * SSL_write_ex, and hands the connection back as it found it, with whatever it had read and
 * not forwarded returned in plaintext as for any session (relay_engine.c). No second TLS
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
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <string.h>

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
}

void nt_hand_back(struct ssl_st *ssl, const nt_saved *saved) {
    if (saved->added_mode) {
        SSL_clear_mode(ssl, saved->added_mode);
    }
    SSL_set_read_ahead(ssl, saved->read_ahead);
    SSL_set_default_read_buffer_len(ssl, 0); /* Python never sets one: OpenSSL's own size */
}

void nt_release(struct ssl_st *ssl) {
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

int nt_read(struct ssl_st *ssl, uint8_t *buf, size_t n, size_t *got, int *wants_write,
            char *why, size_t why_len) {
    *got = 0;
    *wants_write = 0;
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

int nt_write(struct ssl_st *ssl, const uint8_t *buf, size_t n, size_t *put, int *wants_read,
             char *why, size_t why_len) {
    *put = 0;
    *wants_read = 0;
    ERR_clear_error();
    errno = 0;
    int ok = SSL_write_ex(ssl, buf, n, put);
    if (ok) {
        return NT_DATA;
    }
    int err = SSL_get_error(ssl, 0);
    if (err == SSL_ERROR_WANT_WRITE) {
        return NT_AGAIN;
    }
    if (err == SSL_ERROR_WANT_READ) {
        *wants_read = 1;
        return NT_AGAIN;
    }
    describe(err, why, why_len);
    return NT_ERROR;
}

int nt_pending(const struct ssl_st *ssl) {
    return SSL_has_pending(ssl);
}

unsigned long nt_library_version(void) {
    return OpenSSL_version_num();
}
