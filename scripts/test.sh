#!/usr/bin/env bash
# Set up, then run the lint and the whole test suite (unit, property, differential,
# integration against real brokers, the container image itself), then the native engine's
# tests under ASan and UBSan and its fuzz targets for a short while (scripts/sanitize.sh,
# docs/native-safety.md). Three builds run beside setup and the suite, and the tests that need
# them wait for them (tests/support/background_builds.py): a real Kubernetes API server for
# the webhook's tests (scripts/build-apiserver.sh, from before setup), Jaeger for the APM test
# (scripts/build-jaeger.sh, from before setup) and the container image (deploy/build-image.sh,
# once setup is done). Extra arguments go to pytest, and then only
# pytest runs (HERALD_IMAGE_BUILD=1 builds the image all the same, HERALD_APISERVER_BUILD=1
# the API server, HERALD_JAEGER_BUILD=1 Jaeger); HERALD_SANITIZE=0 leaves the sanitizer part
# out, HERALD_IMAGE_BUILD=0 the image build, HERALD_APISERVER_BUILD=0 the API server,
# HERALD_JAEGER_BUILD=0 Jaeger; HERALD_TEST_WORKERS sets the number of parallel workers
# (below).
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${HERALD_CACHE_DIR:-$PWD/.cache}
jobs=()
# A real API server for the webhook's tests (cached). A cold build of kube-apiserver alone takes
# about 750 CPU-seconds, at the lowest CPU priority on whatever the suite leaves idle: begun
# before setup, which mostly waits on downloads.
build_apiserver=0
[ $# -eq 0 ] && build_apiserver=1
if [ "${HERALD_APISERVER_BUILD:-$build_apiserver}" = 1 ]; then
  mkdir -p "$cache/go"
  echo "test: building kube-apiserver and etcd beside setup and the suite if missing (scripts/build-apiserver.sh > $cache/go/apiserver-build.log)"
  bash scripts/build-apiserver.sh >"$cache/go/apiserver-build.log" 2>&1 &
  jobs+=("$!:$cache/go/apiserver.status:API server:$cache/go/apiserver-build.log")
fi
# Jaeger v2, for the APM test (cached; a cold build takes about 4 minutes of both cores, at the
# lowest CPU priority beside setup and the suite).
if [ "${HERALD_JAEGER_BUILD:-$build_apiserver}" = 1 ]; then
  mkdir -p "$cache/go"
  echo "test: building Jaeger beside setup and the suite if missing (scripts/build-jaeger.sh > $cache/go/jaeger-build.log)"
  bash scripts/build-jaeger.sh >"$cache/go/jaeger-build.log" 2>&1 &
  jobs+=("$!:$cache/go/jaeger.status:Jaeger:$cache/go/jaeger-build.log")
fi
# The whole suite on parallel workers: Spark's class archive (scripts/spark_archive.py) is
# made beside the suite rather than in setup, at the lowest CPU priority, since on a fresh
# machine its 4 minutes of training would come before every test; the drivers that start
# before it is there start without it, as they would without an archive, and its test waits
# for it (tests/pipeline/test_session.py). Its trainer takes the ports of a slice no worker
# uses (tests/support/parallel.py).
workers=${HERALD_TEST_WORKERS:-$([ $# -eq 0 ] && echo 3 || echo 0)}
spark_archive_later=0
[ $# -eq 0 ] && [ "$workers" -gt 0 ] && spark_archive_later=1
HERALD_SPARK_ARCHIVE_LATER=$spark_archive_later bash scripts/setup.sh
if [ "$spark_archive_later" = 1 ]; then
  record=$cache/jvm-archives
  mkdir -p "$record"
  echo "test: making Spark's class archive beside the suite if missing (scripts/spark_archive.py > $cache/spark-archive.log)"
  echo "building $$" >"$record/spark.status"  # until the trainer's own process says so
  (
    echo "building $BASHPID" >"$record/spark.status"
    if HERALD_PORT_SHARE="$workers/$((workers + 1))" nice -n 19 .venv/bin/python scripts/spark_archive.py \
        >"$cache/spark-archive.log" 2>&1; then status=built; else status="failed $?"; fi
    echo "$status" >"$record/spark.status.tmp" && mv "$record/spark.status.tmp" "$record/spark.status"
  ) &
  jobs+=("$!:$record/spark.status:Spark's class archive:$cache/spark-archive.log")
fi
.venv/bin/ruff check .
.venv/bin/mypy  # strict, over the packages pyproject.toml's [tool.mypy] lists
# The image (deploy/build-image.sh; reused while its inputs are unchanged), beside the suite.
# A failed build does not stop the suite: its outcome is recorded for
# tests/k8s/deploy/test_image.py, which reports the build's error (and fails under
# HERALD_TEST_STRICT=1).
build_image=0
[ $# -eq 0 ] && build_image=1
if [ "${HERALD_IMAGE_BUILD:-$build_image}" = 1 ]; then
  record=$cache/image
  mkdir -p "$record"
  echo "test: building the image beside the suite if its inputs changed (deploy/build-image.sh > $record/build.log)"
  echo "building $$" >"$record/build.status"  # until the build's own process says so
  (
    echo "building $BASHPID" >"$record/build.status"
    start=$SECONDS
    if bash deploy/build-image.sh >"$record/build.log" 2>&1; then status=built; else status="failed $?"; fi
    echo "$status" >"$record/build.status.tmp" && mv "$record/build.status.tmp" "$record/build.status"
    echo "test: image $status in $((SECONDS - start)) s: $(grep '^build-image: ' "$record/build.log" | tail -n 1)"
  ) &
  jobs+=("$!:$record/build.status:image:$record/build.log")
fi
# The whole suite runs on HERALD_TEST_WORKERS pytest-xdist workers (default 3: most of a test
# waits on brokers and clients, so three keep two cores busy), whole modules each
# (tests/support/parallel.py); 0 runs it in this process. With arguments, one process unless
# HERALD_TEST_WORKERS says otherwise.
parallel=()
[ "$workers" -gt 0 ] && parallel=(-n "$workers" --no-loadscope-reorder)
# The whole suite lists its slowest tests, so a run that grew shows where, and the reason of
# each expected failure (a class archive this machine could not make).
[ $# -eq 0 ] && parallel+=(--durations=30 -rx)
status=0
start=$SECONDS
.venv/bin/python -m pytest -q -p no:cacheprovider "${parallel[@]}" "$@" || status=$?
echo "test: pytest took $((SECONDS - start)) s on ${workers} worker(s) (0: in one process)"
for job in "${jobs[@]}"; do
  IFS=: read -r pid record what log <<<"$job"
  wait "$pid" || true
  echo "test: $what $(cat "$record"): $(tail -n 1 "$log")"
done
[ "$status" = 0 ] || exit "$status"
if [ $# -eq 0 ] && [ "${HERALD_SANITIZE:-1}" != 0 ]; then
  bash scripts/sanitize.sh
fi
