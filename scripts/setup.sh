#!/usr/bin/env bash
# Idempotent setup: a virtualenv in .venv/ with Herald and its test tools from PyPI, and the
# Apache Kafka jars from Maven Central in .cache/. Fast when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in java mvn; do
  command -v "$tool" >/dev/null || { echo "setup: '$tool' is required (Java 17 and Maven)" >&2; exit 1; }
done
PYTHON=${PYTHON:-python3}
# The native relay links the system's codec libraries (setup.py CODEC_LIBRARIES) to stamp and
# scan compressed batches, and the system OpenSSL (the libssl.so.3 Python's ssl module loads)
# to carry TLS sessions on: their headers come with Debian's -dev packages.
codec_headers=(/usr/include/zlib.h /usr/include/snappy-c.h /usr/include/lz4.h /usr/include/zstd.h
               /usr/include/openssl/ssl.h)
for header in "${codec_headers[@]}"; do
  if [ ! -f "$header" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      packages=(zlib1g-dev libsnappy-dev liblz4-dev libzstd-dev libssl-dev)
      apt-get install -y -q "${packages[@]}" >/dev/null || { apt-get update -q >/dev/null &&
        apt-get install -y -q "${packages[@]}" >/dev/null; }
    else
      echo "setup: $header is missing; install zlib1g-dev libsnappy-dev liblz4-dev" \
        "libzstd-dev libssl-dev (the native relay's codecs and TLS)" >&2
    fi
    break
  fi
done
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.herald-installed
# The native stamper and relay are compiled at install time: a change to their source
# reinstalls.
want=$(cat pyproject.toml setup.py protocol/*.c protocol/*.h protocol/contracts/*.h proxy/native/*.c proxy/native/*.h | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[test,pipeline]'
  echo "$want" > "$stamp"
fi
# Strict (CI, .ci/run): the native parts must be built, and the engine must run the OpenSSL
# Python's ssl module runs (tests/support/native_parts.py says which part is missing and why).
if [ "${HERALD_TEST_STRICT:-}" = 1 ]; then
  .venv/bin/python - <<'PY' || { rm -f "$stamp"; exit 1; }
import sys
from tests.support.native_parts import missing
if absent := missing():
    sys.exit("setup: HERALD_TEST_STRICT=1 and a native part is missing:\n  " + "\n  ".join(absent))
PY
fi
.venv/bin/python - <<'PY'
from protocol.kafka_versions import KAFKA_VERSION
from proxy.devtools.kafka_dist import kafka_libs
print(f"setup: Kafka {KAFKA_VERSION} jars in {kafka_libs(KAFKA_VERSION)}")
PY

# Tools the deploy/ tests use, versions in deploy/tools.env, cached under the cache folder:
# helm built from the Go module proxy, checkov from PyPI in a virtualenv of its own (its pinned
# dependencies would otherwise fight Herald's), iproute2 for the simulated pod.
# shellcheck source=/dev/null
. deploy/tools.env
# shellcheck source=scripts/go-build-flags.sh
. scripts/go-build-flags.sh
cache=${HERALD_CACHE_DIR:-$PWD/.cache}
mkdir -p "$cache"
# These are built in the background, beside the rest of setup (they share nothing with it),
# and waited for at its end.
helm_bin="$cache/go/bin/helm-$HELM_VERSION"
build_helm() {
  command -v go >/dev/null || { echo "setup: 'go' is required to build helm" >&2; return 1; }
  echo "setup: building helm $HELM_VERSION from the Go module proxy ..."
  local tmp_bin
  tmp_bin=$(mktemp -d)
  GOPATH="$cache/go" GOMODCACHE="$cache/go/mod" GOCACHE="$cache/go/build" GOFLAGS=-modcacherw \
    GOBIN="$tmp_bin" go install "${go_build_flags[@]}" "-gcflags=$go_gcflags_optimised" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  mkdir -p "$cache/go/bin"
  mv "$tmp_bin/helm" "$helm_bin"
  rm -rf "$tmp_bin"
}
checkov_venv="$cache/tools/checkov-$CHECKOV_VERSION"
install_checkov() {
  echo "setup: installing checkov $CHECKOV_VERSION ..."
  "$PYTHON" -m venv "$checkov_venv"
  "$checkov_venv/bin/python" -m pip install -q "checkov==$CHECKOV_VERSION"
}
tool_jobs=()
[ -x "$helm_bin" ] || { build_helm & tool_jobs+=("$!"); }
# The compatibility matrix's Go and JavaScript clients (scripts/build-clients.sh; cached).
{ bash scripts/build-clients.sh >"$cache/clients-build.log" 2>&1 ||
  { cat "$cache/clients-build.log" >&2; exit 1; }; } & tool_jobs+=("$!")
[ -x "$checkov_venv/bin/checkov" ] || { install_checkov & tool_jobs+=("$!"); }
if ! command -v ip >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get install -y -q iproute2 >/dev/null || { apt-get update -q >/dev/null &&
    apt-get install -y -q iproute2 >/dev/null; }
fi

# The analytics pipeline: Spark's Kafka connector, resolved from Maven Central by Spark's own
# package mechanism into the Ivy cache (pipeline/connector.py), and Chromium (Debian's package),
# which the tests use to render the HTML report.
.venv/bin/python -m pipeline.connector
# Class archives (configuration/jvm_archive.py), made once per Kafka release and PySpark
# install: Kafka's broker and tools and Spark's driver then start from the classes a first
# run loaded, with a quarter to a half less CPU. Made in the background, beside the rest. An
# archive only saves CPU, so one that cannot be made is reported and setup goes on.
# HERALD_SPARK_ARCHIVE_LATER=1 leaves Spark's out (its training plays the demo and runs both
# jobs, about 4 minutes): scripts/test.sh then makes it beside the suite instead.
make_archives() {
  local status=0
  .venv/bin/python -m proxy.devtools.kafka_archive || status=$?
  if [ "${HERALD_SPARK_ARCHIVE_LATER:-0}" != 1 ]; then
    .venv/bin/python scripts/spark_archive.py || status=$?
  fi
  return "$status"
}
{ make_archives >"$cache/jvm-archives.log" 2>&1 ||
  { tail -n 20 "$cache/jvm-archives.log" >&2
    echo "setup: making a class archive failed (above; $cache/jvm-archives.log); the JVMs start without it" >&2; }; } &
archive_job=$!
if ! command -v chromium >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core >/dev/null \
      || apt-get install -y -q -f --no-install-recommends chromium fonts-dejavu-core >/dev/null
  else
    echo "setup: chromium is missing; install Debian's 'chromium' package (report tests)" >&2
  fi
fi

# Debian packages some tests or benchmarks run: installed as root with apt-get (the package
# lists refreshed only if the first try fails), else named for the user to install.
debian_package() {  # package, what needs it
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends "$1" >/dev/null \
      || { apt-get update -qq && apt-get install -y -q --no-install-recommends "$1" >/dev/null; }
  else
    echo "setup: $1 is missing; install Debian's '$1' package ($2)" >&2
  fi
}

# Prometheus (Debian's package: prometheus and promtool): the stream's metrics are tested by
# a real Prometheus scraping them, and the example alert rules by `promtool`.
if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null; then
  debian_package prometheus "metrics tests"
fi

# HAProxy (Debian's package): the TLS relay bench/bench_production.py measures as the floor of
# Herald's TLS profiles (bench/haproxy_floor.py). Only the benchmark needs it.
if ! command -v haproxy >/dev/null; then
  debian_package haproxy "production benchmark"
fi

for job in "${tool_jobs[@]}"; do
  wait "$job" || { echo "setup: building the deploy tools or clients failed (above)" >&2; exit 1; }
done
wait "$archive_job"
echo "setup: helm $HELM_VERSION, checkov $CHECKOV_VERSION in $cache"
tail -n 1 "$cache/clients-build.log"
grep -h "archive:" "$cache/jvm-archives.log" || true
