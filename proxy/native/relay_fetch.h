/* Scanning Fetch responses in the native relay: see relay_fetch.c. */
#ifndef HERALD_RELAY_FETCH_H
#define HERALD_RELAY_FETCH_H

#include "contracts/features.h"
#include "relay_frames.h"
#include "relay_stamp.h"

#define NF_MIN_VERSION 4
#define NF_MAX_VERSION 18
/* ShareFetch (NR_SHARE_FETCH) from the first version with the acquisition lock timeout: v0
 * was Kafka 4.0's early access, whose records field may be null. */
#define NF_SHARE_MIN_VERSION SHARE_FETCH_LOCK_TIMEOUT_VERSION
#define NF_SHARE_MAX_VERSION 2
/* The batch codecs the scan reads are relay_codec.h's NK_NATIVE_CODECS: a response holding a
 * batch in another goes to Python. */

/* Scan one whole Fetch (or ShareFetch: `api`) response frame (size prefix included) of
 * version `ver`: NC_OK when
 * the fetch chain would leave it byte for byte as it is (counts: the batches and records the
 * chain would have seen, and the compressed ones it read by codec), NC_PYTHON otherwise
 * (*why says why), NC_NOMEM. With `check_tags`, top-level tagged fields (leader hints) also
 * send it to Python; a ShareFetch response's leader hints are a field of their own
 * (NodeEndpoints), and one that has any always goes to Python, which rewrites them. Reads
 * nothing outside frame[0..len). */
int nf_scan_fetch(const uint8_t *frame, size_t len, int api, int ver, const nc_plan *plan,
                  int check_tags, nc_counts *counts, const char **why);

/* The batch CRCs of a response as it arrives, while its bytes are still in the CPU's cache
 * (a whole response of megabytes is not by the time it is here whole): `here` of its `len`
 * bytes are read. The response is walked as nf_scan_fetch walks it, over those bytes only,
 * and every whole batch from the first on whose CRC is valid is passed; it stops at the
 * first one that is not (nf_scan_fetch finds it again) or at the first byte not here.
 * Returns the offset where the last batch so passed ends, at least `verified` (the last
 * call's answer for this response: those batches are not checked again): every batch that
 * ends at or before it was checked. */
size_t nf_verify_prefix(const uint8_t *frame, size_t here, size_t len, int api, int ver,
                        const nc_plan *plan, size_t verified);

/* nf_scan_fetch for a response whose batches ending at or before `verified` (from
 * nf_verify_prefix over the same bytes) have valid CRCs: those are not checked again. */
int nf_scan_fetch_verified(const uint8_t *frame, size_t len, int api, int ver,
                           const nc_plan *plan, int check_tags, size_t verified,
                           nc_counts *counts, const char **why);

#endif
