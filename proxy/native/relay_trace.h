/* W3C trace context checks for the native relay's Produce stamping: see relay_trace.c. */
#ifndef HERALD_RELAY_TRACE_H
#define HERALD_RELAY_TRACE_H

#include <stddef.h>
#include <stdint.h>

/* 1 when the header value v (len bytes; len < 0: a null value) is a traceparent a vendor must
 * honour, by interceptors/tracing.py `valid_traceparent`'s rules. */
int nt_valid_traceparent(const uint8_t *v, int64_t len);

/* 1 when v is a tracestate `parse_tracestate` accepts (returns members for, not None). */
int nt_valid_tracestate(const uint8_t *v, int64_t len);

#endif
