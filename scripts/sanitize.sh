#!/usr/bin/env bash
# The native engine under AddressSanitizer and UndefinedBehaviorSanitizer (docs/native-safety.md):
#   1. the two extensions (proxy.native._relay, protocol._stamp) built with clang
#      -fsanitize=address,undefined -fno-sanitize-recover=undefined into a copy of the tree,
#      and the tests that exercise them (unit, and against real brokers) run there with the
#      ASan runtime preloaded: any report fails the run;
#   2. each libFuzzer target (fuzz/native/) run for a short while on its seed corpus.
# Installs clang and its runtime from Debian's packages when they are missing (as root);
# builds are cached under the cache folder, keyed by the sources.
# Usage: scripts/sanitize.sh [seconds per fuzz target, default 20; 0: no fuzzing]
set -euo pipefail
cd "$(dirname "$0")/.."
fuzz_seconds=${1:-20}
repo=$PWD
python=${HERALD_PYTHON:-$repo/.venv/bin/python} # the virtualenv scripts/setup.sh made
cache=${HERALD_CACHE_DIR:-$repo/.cache}
export HERALD_CACHE_DIR=$cache # the copy of the tree uses the same Kafka jars

have_clang() {
  command -v clang >/dev/null &&
    [ -f "$(clang -print-file-name=libclang_rt.asan-x86_64.so)" ] &&
    [ -f "$(clang -print-file-name=libclang_rt.fuzzer-x86_64.a)" ]
}
if ! have_clang; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "sanitize: installing clang and its sanitizer runtime ..."
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends clang libclang-rt-dev llvm >/dev/null ||
      { apt-get update -qq && apt-get install -y -q --no-install-recommends clang \
          libclang-rt-dev llvm >/dev/null; }
  fi
  have_clang || { echo "sanitize: clang with libclang-rt-dev is required" >&2; exit 1; }
fi
runtime=$(clang -print-file-name=libclang_rt.asan-x86_64.so)
symbolizer=$(command -v llvm-symbolizer || ls /usr/bin/llvm-symbolizer-* 2>/dev/null | head -1 || true)
key=$(cat setup.py protocol/*.c protocol/*.h proxy/native/*.c proxy/native/*.h fuzz/native/*.c \
        fuzz/native/*.h fuzz/native/build.sh scripts/sanitize.sh | sha256sum | cut -c1-16)
built=$cache/sanitize/$key
mkdir -p "$cache/sanitize"

# ---- 1. the extensions, sanitized, in a copy of the tree ----------------------------------
tree=$repo/build/sanitize/tree
rm -rf "$tree"
mkdir -p "$tree"
tar --exclude=./.git --exclude=./.venv --exclude=./.cache --exclude=./build \
    --exclude='*.so' --exclude=__pycache__ -cf - . | tar -xf - -C "$tree"
if [ ! -d "$built/ext" ]; then
  echo "sanitize: building the extensions with ASan and UBSan ..."
  # -fno-wrapv: Python's own flags make signed overflow defined, which UBSan then ignores.
  (cd "$tree" && CC=clang LDSHARED="clang -shared" \
     CFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-wrapv -fno-omit-frame-pointer -g" \
     LDFLAGS="-fsanitize=address,undefined -shared-libasan" \
     "$python" setup.py build_ext --inplace -q >"$repo/build/sanitize/build.log" 2>&1) ||
    { cat "$repo/build/sanitize/build.log" >&2; exit 1; }
  rm -rf "$built/ext.tmp" && mkdir -p "$built/ext.tmp"
  for so in "$tree"/protocol/_stamp.*.so "$tree"/proxy/native/_relay.*.so; do
    [ -f "$so" ] || { echo "sanitize: $so was not built (setup.py's optional build failed)" >&2
                      cat "$repo/build/sanitize/build.log" >&2; exit 1; }
    cp "$so" "$built/ext.tmp/"
  done
  mv "$built/ext.tmp" "$built/ext"
fi
cp "$built"/ext/_stamp.*.so "$tree/protocol/"
cp "$built"/ext/_relay.*.so "$tree/proxy/native/"
for so in "$tree"/protocol/_stamp.*.so "$tree"/proxy/native/_relay.*.so; do
  symbols=$(nm -D "$so")
  [[ $symbols == *__asan_report_load* && $symbols == *__ubsan_handle* ]] ||
    { echo "sanitize: $so is not built with ASan and UBSan" >&2; exit 1; }
done

logs=$repo/build/sanitize/reports
rm -rf "$logs" && mkdir -p "$logs"
export HERALD_SANITIZER_RUNTIME=$runtime # tests/conftest.py: Herald's processes get it, Java not
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:log_path=$logs/asan:strict_string_checks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$logs/ubsan"
[ -n "$symbolizer" ] && export ASAN_SYMBOLIZER_PATH=$symbolizer
cd "$tree"
# The modules imported are the sanitized ones, from the copy.
LD_PRELOAD=$runtime "$python" - <<'PY'
import pathlib
import protocol._stamp as stamp
import proxy.native._relay as relay
here = pathlib.Path.cwd()
for mod in (stamp, relay):
    path = pathlib.Path(mod.__file__).resolve()
    assert path.is_relative_to(here), f"{mod.__name__} comes from {path}, not {here}"
    print(f"sanitize: {mod.__name__} from {path.relative_to(here)}")
PY
echo "sanitize: the native tests under ASan and UBSan ..."
status=0
# On two workers, whole modules each (tests/support/parallel.py), as the suite runs.
LD_PRELOAD=$runtime "$python" -m pytest -q -p no:cacheprovider -n 2 --no-loadscope-reorder \
  tests/unit/proxy/native/test_native_hostile.py tests/unit/proxy/native/test_native_relay_engine.py \
  tests/unit/proxy/native/test_native_relay_session.py tests/unit/proxy/native/test_native_relay_config.py \
  tests/unit/proxy/native/test_fetch_plan.py tests/unit/proxy/native/test_stamp_plan.py tests/unit/proxy/native/test_relay_trace.py \
  tests/unit/protocol/test_stamping.py tests/unit/proxy/native/test_native_locking.py tests/unit/proxy/native/test_relay_tls.py \
  tests/unit/proxy/native/test_native_codecs.py tests/unit/interceptors/test_link_memory.py tests/unit/interceptors/test_trace_links.py tests/unit/proxy/native/test_native_links.py \
  tests/unit/interceptors/test_parents_lost.py \
  tests/integration/proxy/native/test_native_relay.py tests/integration/proxy/native/test_native_fetch.py \
  tests/unit/proxy/native/test_path_choice.py tests/integration/proxy/native/test_native_sasl.py \
  tests/integration/proxy/native/test_native_stamp.py tests/integration/proxy/native/test_native_tls.py \
  tests/integration/proxy/session/test_hostile_broker.py tests/integration/interceptors/test_causal_links.py || status=$?
cd "$repo"
if compgen -G "$logs/*" >/dev/null; then
  echo "sanitize: sanitizer reports:" >&2
  cat "$logs"/* >&2
  status=1
fi
[ "$status" = 0 ] || { echo "sanitize: FAILED" >&2; exit "$status"; }

# ---- 2. the fuzz targets, briefly ----------------------------------------------------------
if [ "$fuzz_seconds" -gt 0 ]; then
  if [ ! -d "$built/fuzz" ]; then
    echo "sanitize: building the fuzz targets ..."
    rm -rf "$built/fuzz.tmp"
    fuzz/native/build.sh "$built/fuzz.tmp" >/dev/null
    mv "$built/fuzz.tmp" "$built/fuzz"
  fi
  echo "sanitize: each fuzz target for ${fuzz_seconds}s ..."
  fuzz/native/run.sh "$fuzz_seconds" "$built/fuzz" build/sanitize/fuzz
fi
# Older builds go: one key's worth is kept.
find "$cache/sanitize" -mindepth 1 -maxdepth 1 ! -name "$key" -exec rm -rf {} +
echo "sanitize: no sanitizer report"
