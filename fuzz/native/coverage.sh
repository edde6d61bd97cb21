#!/usr/bin/env bash
# Line and branch coverage of the engine's sources reached by fuzz corpora: each target built
# with clang's source-based coverage (no sanitizers), run once over every input of its corpus,
# and llvm-cov's report. Usage: fuzz/native/coverage.sh CORPUS_ROOT [out-dir]
# (CORPUS_ROOT/<target>/ for each target, e.g. fuzz/corpus or a long run's corpus folder)
set -euo pipefail
cd "$(dirname "$0")/../.."
corpora=$(realpath "${1:?corpus root}")
out=$(realpath -m "${2:-build/fuzz-coverage}")
llvm_version=$(clang --version | grep -o 'version [0-9]*' | grep -o '[0-9]*$')
profdata=$(command -v llvm-profdata || command -v "llvm-profdata-$llvm_version")
cov=$(command -v llvm-cov || command -v "llvm-cov-$llvm_version")
mkdir -p "$out"
rm -f "$out"/*.profraw
flags=(-g -O1 -fsanitize=fuzzer -fprofile-instr-generate -fcoverage-mapping
       -Iprotocol -Iproxy/native -Ifuzz/native)
core=(protocol/stamp_core.c protocol/link_memory.c proxy/native/relay_stamp.c
      proxy/native/relay_fetch.c proxy/native/relay_trace.c proxy/native/relay_frames.c
      proxy/native/relay_codec.c)
codec_libs=(-lz -lsnappy -llz4 -lzstd) # as build.sh links them
objects=()
for target in fuzz_frames fuzz_fetch_walk fuzz_trace fuzz_stamp fuzz_fetch_scan fuzz_codec \
              fuzz_engine fuzz_links fuzz_tls; do
  [ -d "$corpora/$target" ] || continue
  extra=()
  case $target in
  fuzz_engine | fuzz_tls) extra=(proxy/native/relay_engine.c proxy/native/relay_tls.c -lssl -lcrypto) ;;
  esac
  clang "${flags[@]}" -o "$out/$target" "fuzz/native/$target.c" "${core[@]}" "${extra[@]}" \
    "${codec_libs[@]}" -pthread
  rm -f "$out/$target".*.profraw
  LLVM_PROFILE_FILE="$out/$target.%p.profraw" nice -n 10 "$out/$target" -runs=0 \
    "$corpora/$target" >"$out/$target.log" 2>&1
  objects+=("$target")
done
"$profdata" merge -sparse "$out"/*.profraw -o "$out/all.profdata"
first=${objects[0]}
rest=()
for o in "${objects[@]:1}"; do rest+=(-object "$out/$o"); done
"$cov" report "$out/$first" "${rest[@]}" -instr-profile="$out/all.profdata" \
  protocol/stamp_core.c protocol/link_memory.c proxy/native/relay_frames.c \
  proxy/native/relay_stamp.c proxy/native/relay_fetch.c proxy/native/relay_trace.c \
  proxy/native/relay_codec.c proxy/native/relay_tls.c proxy/native/relay_engine.c
