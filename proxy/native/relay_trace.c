/* The W3C trace context checks the engine makes before it keeps a record's own traceparent,
 * with interceptors/tracing.py as the reference (`valid_traceparent`, `parse_tracestate`;
 * tests/unit/proxy/native/test_relay_trace.py holds the two to the same answers).
 *
 * Safety: every read is bounded by the value's length. */
#include "relay_trace.h"

#include <string.h>

#define TP_LEN 55
#define MAX_MEMBERS 32

/* Per byte: HEX for a lowercase hex digit, NOT_ZERO for one other than '0'. */
enum { HEX = 1, NOT_ZERO = 2 };
static const uint8_t HEX_CLASS[256] = {
    ['0'] = HEX,
    ['1' ... '9'] = HEX | NOT_ZERO,
    ['a' ... 'f'] = HEX | NOT_ZERO,
};

/* Of p[0..n): HEX when every byte is a lowercase hex digit, with NOT_ZERO when one is not
 * '0' (a table lookup a byte, no branch: every traced record's traceparent passes here). */
static unsigned hex_digits(const uint8_t *p, size_t n) {
    unsigned all = HEX, any = 0;
    for (size_t i = 0; i < n; i++) {
        all &= HEX_CLASS[p[i]];
        any |= HEX_CLASS[p[i]];
    }
    return all | (any & NOT_ZERO);
}

/* version-traceid-parentid-flags: lowercase hex, dashes at 2, 35 and 52. Version 00 is exactly
 * 55 bytes; a higher version may go on after a dash; version ff and all-zero ids are invalid. */
int nt_valid_traceparent(const uint8_t *v, int64_t len) {
    if (v == NULL || len < TP_LEN) {
        return 0;
    }
    if (v[2] != '-' || v[35] != '-' || v[52] != '-') {
        return 0;
    }
    int v00 = v[0] == '0' && v[1] == '0';
    if (len > TP_LEN && (v00 || v[55] != '-')) {
        return 0;
    }
    if (v[0] == 'f' && v[1] == 'f') {
        return 0;
    }
    unsigned trace = hex_digits(v + 3, 32), span = hex_digits(v + 36, 16);
    return (hex_digits(v, 2) & hex_digits(v + 53, 2) & trace & span & HEX) &&
           (trace & span & NOT_ZERO); /* no all-zero id */
}

/* [a-z0-9_*\/-]: what follows the first character of a key's parts */
static int key_char(uint8_t c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '*' ||
           c == '/' || c == '-';
}

static int lower(uint8_t c) {
    return c >= 'a' && c <= 'z';
}

static int all_key_chars(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (!key_char(p[i])) {
            return 0;
        }
    }
    return 1;
}

/* simple-key: [a-z] then up to 255 key chars; multi-tenant-key: [a-z0-9] then up to 240 key
 * chars, '@', [a-z] then up to 13 key chars. */
static int valid_key(const uint8_t *k, size_t n) {
    const uint8_t *at = memchr(k, '@', n);
    if (at == NULL) {
        return n >= 1 && n <= 256 && lower(k[0]) && all_key_chars(k + 1, n - 1);
    }
    size_t tenant = (size_t)(at - k), system = n - tenant - 1;
    return tenant >= 1 && tenant <= 241 && (lower(k[0]) || (k[0] >= '0' && k[0] <= '9')) &&
           all_key_chars(k + 1, tenant - 1) && system >= 1 && system <= 14 && lower(at[1]) &&
           all_key_chars(at + 2, system - 1);
}

/* 1 to 256 printable ASCII characters other than ',' and '=', the last not a space. */
static int valid_value(const uint8_t *p, size_t n) {
    if (n < 1 || n > 256 || p[n - 1] == ' ') {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (p[i] < 0x20 || p[i] > 0x7e || p[i] == ',' || p[i] == '=') {
            return 0;
        }
    }
    return 1;
}

/* A comma list of at most 32 key=value members, each trimmed of spaces and tabs; empty
 * members are allowed, a key at most once, ASCII only. */
int nt_valid_tracestate(const uint8_t *v, int64_t len) {
    if (v == NULL || len < 0) {
        return 0;
    }
    size_t n = (size_t)len;
    const uint8_t *keys[MAX_MEMBERS];
    size_t key_lens[MAX_MEMBERS];
    size_t members = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i] >= 0x80) {
            return 0;
        }
    }
    size_t start = 0;
    while (start <= n) {
        const uint8_t *comma = memchr(v + start, ',', n - start);
        size_t end = comma != NULL ? (size_t)(comma - v) : n;
        size_t a = start, b = end;
        while (a < b && (v[a] == ' ' || v[a] == '\t')) {
            a++;
        }
        while (b > a && (v[b - 1] == ' ' || v[b - 1] == '\t')) {
            b--;
        }
        if (a < b) {
            const uint8_t *eq = memchr(v + a, '=', b - a);
            if (eq == NULL) {
                return 0;
            }
            size_t klen = (size_t)(eq - (v + a));
            if (!valid_key(v + a, klen) || !valid_value(eq + 1, b - a - klen - 1)) {
                return 0;
            }
            if (members == MAX_MEMBERS) {
                return 0;
            }
            for (size_t m = 0; m < members; m++) {
                if (key_lens[m] == klen && memcmp(keys[m], v + a, klen) == 0) {
                    return 0;
                }
            }
            keys[members] = v + a;
            key_lens[members++] = klen;
        }
        start = end + 1;
    }
    return 1;
}
