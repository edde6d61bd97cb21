#!/usr/bin/env bash
# Run every native fuzz target for a while, as many at once as the machine has cores
# (FUZZ_JOBS to choose), each on a copy of its seed corpus (fuzz/corpus/<target>): any crash,
# sanitizer report, failed check, leak or timeout fails the run, and the input that did it
# is left in the work folder.
# Usage: fuzz/native/run.sh SECONDS_PER_TARGET [build-dir] [work-dir] [target...]
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:?seconds per target}
build=$(realpath -m "${2:-build/fuzz}")
work=$(realpath -m "${3:-build/fuzz-work}")
shift $(( $# < 3 ? $# : 3 ))
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(fuzz_frames fuzz_fetch_walk fuzz_trace fuzz_stamp fuzz_fetch_scan fuzz_codec
           fuzz_engine fuzz_links fuzz_tls)
fi
jobs=${FUZZ_JOBS:-$(nproc)}
fuzz_one() {  # TARGET: its run, and one line saying how it went
  local target=$1 corpus="$work/corpus/$1" log="$work/$1.log"
  rm -rf "$corpus" "$work/$target"
  mkdir -p "$corpus" "$work/$target"
  cp fuzz/corpus/"$target"/* "$corpus"/
  # -timeout: an input that takes this long is a hang (a session that never ends, a loop).
  if (cd "$work/$target" && nice -n 10 "$build/$target" -max_total_time="$seconds" \
        -timeout=25 -rss_limit_mb=2048 -print_final_stats=1 "$corpus") >"$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$' || true)
    cov=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 || true)
    echo "$target: ${runs:-?} inputs, $cov, no finding"
  else
    echo "$target: FAILED, see $log and $work/$target/" >&2
    grep -E 'ERROR|runtime error|fuzz check failed|SUMMARY' "$log" | head -5 >&2 || true
    return 1
  fi
}
status=0
running=()
for target in "${targets[@]}"; do
  fuzz_one "$target" &
  running+=("$!")
  if [ ${#running[@]} -ge "$jobs" ]; then
    wait "${running[0]}" || status=1
    running=("${running[@]:1}")
  fi
done
for pid in "${running[@]}"; do
  wait "$pid" || status=1
done
exit $status
