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

struct bio_st;    /* OpenSSL's BIO */
struct nt_out;    /* records encrypted and not yet sent (relay_tls.c) */

/* What the engine changed on a connection while it holds it, to put back, and where its
 * records are written meanwhile. */
typedef struct {
    long added_mode;
    int read_ahead;
    struct bio_st *sock; /* Python's socket BIO, while the engine's is the write BIO */
    struct nt_out *out;  /* NULL: records go straight to the socket (no memory for a BIO) */
    int held;            /* what a read found after the data it returned: the next one's */
    char held_why[128];
} nt_saved;

/* The engine takes a reference of its own, switches on partial writes (so a write says exactly
 * how much of the buffer went out) and read-ahead (a read takes what the socket has, not a
 * record header and then its body: half the system calls), and has the connection write its
 * records into a buffer of the engine's, which nt_write and nt_drain send many records at a
 * time (OpenSSL on a socket sends each 16 KiB record with a system call of its own). */
void nt_adopt(struct ssl_st *ssl, nt_saved *saved);
/* The engine stops using `ssl`: its settings and its socket BIO are Python's again (records
 * read ahead stay in the connection, which Python's next read takes first). Records still in
 * the engine's buffer are sent first, as far as socket `fd` takes them without waiting; what
 * it did not take is returned (bytes of records lost: the connection must not be used again).
 * The engine hands a session back to Python only once its buffers are empty (nt_unsent), so
 * only a session that ends can lose any. The reference stays until nt_release. */
size_t nt_hand_back(struct ssl_st *ssl, nt_saved *saved, int fd);
/* Drops the engine's reference (and its buffer, if nt_hand_back was not called). */
void nt_release(struct ssl_st *ssl, nt_saved *saved);

/* Decrypt up to n bytes into buf, record after record: NT_DATA (*got > 0; *drained when the
 * connection then had nothing more whole: the socket announces what comes next), NT_AGAIN
 * (nothing now; *wants_write when the connection must write before it can read), NT_EOF
 * (close_notify, or the peer closed its socket: the stream is over), NT_ERROR (why says
 * what). An end or an error found after data is the next call's answer. */
int nt_read(struct ssl_st *ssl, nt_saved *saved, uint8_t *buf, size_t n, size_t *got,
            int *drained, int *wants_write, char *why, size_t why_len);
/* Encrypt and send from buf on socket fd: NT_DATA (*put > 0: that much of buf is encrypted,
 * sent or held by the connection or the engine's buffer, never to be passed again), NT_AGAIN
 * (the socket takes nothing now; *wants_read when the connection must read first), NT_ERROR.
 * After NT_AGAIN the next call must pass at least the bytes this one did, from the same place
 * in the stream. Records encrypted and not yet sent are sent first; at most NT_BATCH bytes of
 * records are encrypted per call. */
int nt_write(struct ssl_st *ssl, nt_saved *saved, int fd, const uint8_t *buf, size_t n,
             size_t *put, int *wants_read, char *why, size_t why_len);
/* Bytes of records in the engine's buffer not yet sent (written by nt_write, or by a read: a
 * TLS 1.3 key update's answer, an alert). */
size_t nt_unsent(const nt_saved *saved);
/* Send them: NT_DATA (all out), NT_AGAIN (the socket is full), NT_ERROR. */
int nt_drain(nt_saved *saved, int fd, char *why, size_t why_len);
/* Whether the connection holds bytes read from its socket that nobody has taken, decrypted or
 * not: no socket readiness will announce them. After a read that found nothing (NT_AGAIN),
 * what it holds is part of a record still arriving, which the socket does announce. */
int nt_pending(const struct ssl_st *ssl);
/* The OpenSSL the engine is linked with (OpenSSL_version_num). */
unsigned long nt_library_version(void);

#endif
