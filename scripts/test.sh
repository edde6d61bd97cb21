#!/usr/bin/env bash
# Set up, then run the lint, build the container image, and run the whole test suite (unit,
# property, differential, integration against real brokers, the image itself), then the native
# engine's tests under ASan and UBSan and its fuzz targets for a short while
# (scripts/sanitize.sh, docs/native-safety.md). A real Kubernetes API server for the webhook's
# tests is built beside the suite (scripts/build-apiserver.sh). Extra arguments go to pytest,
# and then only pytest runs (HERALD_IMAGE_BUILD=1 builds the image first all the same,
# HERALD_APISERVER_BUILD=1 the API server); HERALD_SANITIZE=0 leaves the sanitizer part out,
# HERALD_IMAGE_BUILD=0 the image build, HERALD_APISERVER_BUILD=0 the API server;
# HERALD_TEST_WORKERS sets the number of parallel workers (below).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
# The image (deploy/build-image.sh; reused while its inputs are unchanged). A failed build does
# not stop the suite: its outcome is recorded for tests/k8s/deploy/test_image.py, which reports
# the build's error (and fails under HERALD_TEST_STRICT=1).
build_image=0
[ $# -eq 0 ] && build_image=1
if [ "${HERALD_IMAGE_BUILD:-$build_image}" = 1 ]; then
  record=${HERALD_CACHE_DIR:-$PWD/.cache}/image
  mkdir -p "$record"
  rm -f "$record/build.status"
  echo "test: building the image if its inputs changed (deploy/build-image.sh > $record/build.log)"
  start=$SECONDS
  if bash deploy/build-image.sh >"$record/build.log" 2>&1; then
    status=built
  else
    status="failed $?"
  fi
  echo "$status" >"$record/build.status"
  echo "test: image $status in $((SECONDS - start)) s: $(grep '^build-image: ' "$record/build.log" | tail -n 1)"
fi
# A real API server for the webhook's tests (scripts/build-apiserver.sh; cached). A cold build
# takes about 10 minutes of one core, so it runs beside the suite at the lowest CPU priority;
# tests/k8s/proxy/k8s/test_webhook_apiserver.py waits for it (and reports a failed build).
build_apiserver=0
[ $# -eq 0 ] && build_apiserver=1
apiserver_job=
if [ "${HERALD_APISERVER_BUILD:-$build_apiserver}" = 1 ]; then
  gocache=${HERALD_CACHE_DIR:-$PWD/.cache}/go
  mkdir -p "$gocache"
  echo "test: building kube-apiserver and etcd beside the suite if missing (scripts/build-apiserver.sh > $gocache/apiserver-build.log)"
  bash scripts/build-apiserver.sh >"$gocache/apiserver-build.log" 2>&1 &
  apiserver_job=$!
  echo "building $apiserver_job" >"$gocache/apiserver.status"
fi
# The whole suite runs on HERALD_TEST_WORKERS pytest-xdist workers (default 3: most of a test
# waits on brokers and clients, so three keep two cores busy), whole modules each
# (tests/support/parallel.py); 0 runs it in this process. With arguments, one process unless
# HERALD_TEST_WORKERS says otherwise.
workers=${HERALD_TEST_WORKERS:-$([ $# -eq 0 ] && echo 3 || echo 0)}
parallel=()
[ "$workers" -gt 0 ] && parallel=(-n "$workers" --no-loadscope-reorder)
status=0
start=$SECONDS
.venv/bin/python -m pytest -q -p no:cacheprovider "${parallel[@]}" "$@" || status=$?
echo "test: pytest took $((SECONDS - start)) s on ${workers} worker(s) (0: in one process)"
if [ -n "$apiserver_job" ]; then
  wait "$apiserver_job" || true
  echo "test: API server $(cat "$gocache/apiserver.status"): $(tail -n 1 "$gocache/apiserver-build.log")"
fi
[ "$status" = 0 ] || exit "$status"
if [ $# -eq 0 ] && [ "${HERALD_SANITIZE:-1}" != 0 ]; then
  bash scripts/sanitize.sh
fi
