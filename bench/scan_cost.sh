#!/usr/bin/env bash
# The native Fetch scan's instructions per MB under callgrind (bench/scan_cost.c says what it
# scans): instruction counts do not depend on what else the machine runs.
#   bench/scan_cost.sh [--no-links] [--traces N] [responses, default 200]
# Prints the driver's line, nf_scan_fetch's inclusive instructions per MB and per record, and
# the functions the whole run spends most in (self counts: the driver's resealing is in main
# and sc_crc32c, about half of the latter).
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/scan_cost
mkdir -p "$out"
# setup.py's -O2, with the flags Python builds its extensions with.
"${CC:-cc}" -O2 -g -fwrapv -fno-strict-aliasing -Wall -Iprotocol -Iproxy/native \
  -o "$out/scan_cost" bench/scan_cost.c protocol/stamp_core.c protocol/link_memory.c \
  proxy/native/relay_stamp.c proxy/native/relay_fetch.c proxy/native/relay_trace.c \
  proxy/native/relay_codec.c -lz -lsnappy -llz4 -lzstd -pthread
valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.out" "$out/scan_cost" "$@" \
  2>"$out/valgrind.log" | tee "$out/driver.txt"
callgrind_annotate --inclusive=yes "$out/callgrind.out" >"$out/inclusive.txt" 2>/dev/null
callgrind_annotate "$out/callgrind.out" >"$out/self.txt" 2>/dev/null
python3 - "$out" <<'PY'
import re, sys
out = sys.argv[1]
m = re.match(r"(\d+) responses of (\d+) bytes \((\d+) records\)", open(f"{out}/driver.txt").read())
responses, size, records = (int(g) for g in m.groups())
def rows(name):
    for line in open(f"{out}/{name}.txt"):
        hit = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(\S+)", line)
        if hit:
            yield int(hit.group(1).replace(",", "")), hit.group(2).split(":")[-1]
scan = sum(n for n, fn in rows("inclusive") if fn == "nf_scan_fetch")
mb = responses * size / 1e6
print(f"nf_scan_fetch: {scan / mb:,.0f} instructions per MB, "
      f"{scan / (responses * records):,.0f} per record")
print("self, per MB:")
for n, fn in list(rows("self"))[1:13]:
    print(f"  {n / mb:>12,.0f}  {fn}")
PY
