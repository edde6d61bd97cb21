# Sourced by the scripts that build a test server from the Go module proxy
# (scripts/build-apiserver.sh, scripts/build-jaeger.sh), with the build's name:
#
#   . scripts/go-tool-build.sh NAME
#
# Sets `cache`, `bin` (where the binaries go) and Go's environment (modules and build cache
# in the cache folder, no cgo, the machine's Go), and keeps $cache/go/NAME.status for the
# tests that wait for the build (tests/support/background_builds.py): `building PID` now,
# `failed N` if the script exits with an error; the script writes `built` itself.
# shellcheck source=/dev/null
. deploy/tools.env
# shellcheck source=scripts/go-build-flags.sh
. scripts/go-build-flags.sh
cache=${HERALD_CACHE_DIR:-$PWD/.cache}
bin=$cache/go/bin
status=$cache/go/$1.status
mkdir -p "$bin"
echo "building $$" >"$status"
trap 'code=$?; [ "$code" = 0 ] || echo "failed $code" >"$status"' EXIT
command -v go >/dev/null || { echo "build-$1: 'go' is required" >&2; exit 1; }
export GOPATH=$cache/go GOMODCACHE=$cache/go/mod GOCACHE=$cache/go/build GOFLAGS="-modcacherw -buildvcs=false"
export CGO_ENABLED=0 GOTOOLCHAIN=local
