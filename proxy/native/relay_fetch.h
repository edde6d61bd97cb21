/* Scanning Fetch responses in the native relay: see relay_fetch.c. */
#ifndef HERALD_RELAY_FETCH_H
#define HERALD_RELAY_FETCH_H

#include "relay_stamp.h"

#define NF_MIN_VERSION 4
#define NF_MAX_VERSION 18
/* The batch codecs (protocol/compression.py's names) whose batches the scan reads: a response
 * holding a batch in another goes to Python. */
#define NF_SCAN_CODECS {"none"}

/* Scan one whole Fetch response frame (size prefix included) of version `ver`: NC_OK when
 * the fetch chain would leave it byte for byte as it is (counts: the batches and records the
 * chain would have seen), NC_PYTHON otherwise (*why says why). With `check_tags`, top-level
 * tagged fields (leader hints) also send it to Python. Reads nothing outside frame[0..len). */
int nf_scan_fetch(const uint8_t *frame, size_t len, int ver, const nc_plan *plan,
                  int check_tags, nc_counts *counts, const char **why);

#endif
