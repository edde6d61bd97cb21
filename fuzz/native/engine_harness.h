/* What the two targets that drive the whole engine over socket pairs (fuzz_engine.c,
 * fuzz_tls.c) share: a growing byte buffer for what each peer sent and received, the fake
 * clock the engine reads, so that a run never sleeps and never depends on time, and a count of
 * the process's open descriptors, so that a run can check it leaked none. */
#ifndef HERALD_FUZZ_ENGINE_HARNESS_H
#define HERALD_FUZZ_ENGINE_HARNESS_H

#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

typedef struct {
    uint8_t *p;
    size_t len, cap;
} bytes_t;

static void append(bytes_t *b, const uint8_t *p, size_t n) {
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        FUZZ_CHECK(b->p != NULL, "out of memory");
    }
    if (n > 0) {
        memcpy(b->p + b->len, p, n);
    }
    b->len += n;
}

/* b->p + off, where an empty b may have no buffer yet. */
static const uint8_t *at(const bytes_t *b, size_t off) {
    static const uint8_t none[1];
    return b->p != NULL ? b->p + off : none;
}

/* How many descriptors the process has open (-1: unknown). */
static int open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (d == NULL) {
        return -1;
    }
    while (readdir(d) != NULL) {
        n++;
    }
    closedir(d);
    return n;
}

static double fake_now;

static double fake_clock(void *unused) {
    (void)unused;
    return fake_now;
}

#endif
