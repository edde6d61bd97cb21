/* TLS on the engine's sockets: the engine carries on a TLS connection whose handshake Python
 * made (relay_tls.c). No Python here: `_relay.c` finds the connection's `SSL` and checks it
 * with nt_check before the engine adopts it. */
#ifndef HERALD_RELAY_TLS_H
#define HERALD_RELAY_TLS_H

#include <stddef.h>
#include <stdint.h>

struct ssl_st; /* OpenSSL's SSL */

enum { NT_DATA = 1, NT_AGAIN = 0, NT_EOF = -1, NT_ERROR = -2 };

/* NULL when `ssl` is a TLS connection the engine can carry on: its handshake is complete,
 * nothing is half done, it sits on descriptor `fd` (a socket BIO), and its application data
 * pointer is `owner` (what Python's ssl module puts there: proof that the pointer is the
 * SSL of the object it came from). Otherwise why not. */
const char *nt_check(struct ssl_st *ssl, const void *owner, int fd);

/* What the engine changed on a connection while it holds it, to put back. */
typedef struct {
    long added_mode;
    int read_ahead;
} nt_saved;

/* The engine takes a reference of its own, switches on partial writes (so a write says exactly
 * how much of the buffer went out) and read-ahead (a read takes what the socket has, not a
 * record header and then its body: half the system calls). */
void nt_adopt(struct ssl_st *ssl, nt_saved *saved);
/* The engine stops using `ssl`: its settings are Python's again (records read ahead stay in
 * the connection, which Python's next read takes first). The reference stays until
 * nt_release. */
void nt_hand_back(struct ssl_st *ssl, const nt_saved *saved);
void nt_release(struct ssl_st *ssl);

/* Decrypt up to n bytes into buf: NT_DATA (*got > 0), NT_AGAIN (nothing now; *wants_write
 * when the connection must write before it can read, a TLS 1.3 key update answered into a full
 * socket), NT_EOF (close_notify, or the peer closed its socket: the stream is over), NT_ERROR
 * (why says what, in NE_DETAIL-sized why). */
int nt_read(struct ssl_st *ssl, uint8_t *buf, size_t n, size_t *got, int *wants_write,
            char *why, size_t why_len);
/* Encrypt and send from buf: NT_DATA (*put > 0: that much of buf is sent or held by the
 * connection, never to be passed again), NT_AGAIN (*wants_read when it must read first),
 * NT_ERROR. After NT_AGAIN the next call must pass at least the bytes this one did, from the
 * same place in the stream. */
int nt_write(struct ssl_st *ssl, const uint8_t *buf, size_t n, size_t *put, int *wants_read,
             char *why, size_t why_len);
/* Whether the connection holds bytes read from its socket that nobody has taken, decrypted or
 * not: no socket readiness will announce them. After a read that found nothing (NT_AGAIN),
 * what it holds is part of a record still arriving, which the socket does announce. */
int nt_pending(const struct ssl_st *ssl);
/* The OpenSSL the engine is linked with (OpenSSL_version_num). */
unsigned long nt_library_version(void);

#endif
