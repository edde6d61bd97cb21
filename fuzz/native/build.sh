#!/usr/bin/env bash
# Build the libFuzzer targets of the native engine (fuzz/README.md) into a folder (default
# build/fuzz): each one with the C sources it calls, coverage-guided, under ASan and UBSan,
# no Python. Usage: fuzz/native/build.sh [out-dir]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build/fuzz}
cc=${CC:-clang}
mkdir -p "$out"
flags=(-g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=undefined -Wall -Werror -Iprotocol -Iproxy/native -Ifuzz/native)
core=(protocol/stamp_core.c protocol/link_memory.c proxy/native/relay_stamp.c proxy/native/relay_fetch.c
      proxy/native/relay_trace.c proxy/native/relay_frames.c proxy/native/relay_codec.c)
codec_libs=(-lz -lsnappy -llz4 -lzstd) # the system's codec libraries, as setup.py links them
for target in frames fetch_walk trace stamp fetch_scan codec engine links tls; do
  extra=()
  # The engine carries TLS sessions through the system OpenSSL (relay_tls.c); fuzz_tls makes
  # its peers' connections with it too.
  case $target in
  engine | tls) extra=(proxy/native/relay_engine.c proxy/native/relay_tls.c -lssl -lcrypto) ;;
  esac
  "$cc" "${flags[@]}" -o "$out/fuzz_$target" "fuzz/native/fuzz_$target.c" "${core[@]}" \
    "${extra[@]}" "${codec_libs[@]}" -pthread
done
echo "fuzz targets in $out: $(cd "$out" && ls fuzz_* | tr '\n' ' ')"
