#!/usr/bin/env bash
# Build the compatibility matrix's clients that are not Python: franz-go, Sarama and kafka-go
# in one Go program (tests/clients/go, modules from the Go module proxy at the versions its
# go.mod pins) and KafkaJS (tests/clients/js, from the npm registry at the version its
# package-lock.json pins). Cached under the cache folder, rebuilt only when their sources
# change; tests/support/foreign_clients.py finds them through the .path files it writes.
#
#   bash scripts/build-clients.sh      # prints where each one is
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${HERALD_CACHE_DIR:-$PWD/.cache}
out=$cache/clients
mkdir -p "$out"
rm -f "$out/go.path" "$out/js.path"  # written again below once both are built
stamp() { cat "$@" | sha256sum | cut -c1-16; }

go_src=tests/clients/go
go_bin=$out/go/compat-clients-$(stamp "$go_src"/go.mod "$go_src"/go.sum "$go_src"/*.go)
if [ ! -x "$go_bin" ]; then
  command -v go >/dev/null || { echo "build-clients: 'go' is required for the Go clients" >&2; exit 1; }
  echo "build-clients: building the Go clients (franz-go, Sarama, kafka-go) ..."
  mkdir -p "$out/go"
  (cd "$go_src" && GOPATH="$cache/go" GOMODCACHE="$cache/go/mod" GOCACHE="$cache/go/build" \
    GOFLAGS="-modcacherw -buildvcs=false -mod=readonly" GOTOOLCHAIN=local CGO_ENABLED=0 \
    go build -trimpath -o "$go_bin.tmp" .)
  mv "$go_bin.tmp" "$go_bin"
fi

js_src=tests/clients/js
js_dir=$out/js-$(stamp "$js_src"/package.json "$js_src"/package-lock.json)
if [ ! -d "$js_dir/node_modules/kafkajs" ]; then
  command -v npm >/dev/null || { echo "build-clients: 'npm' is required for KafkaJS" >&2; exit 1; }
  echo "build-clients: installing KafkaJS ..."
  rm -rf "$js_dir.tmp" && mkdir -p "$js_dir.tmp"
  cp "$js_src"/package.json "$js_src"/package-lock.json "$js_dir.tmp/"
  (cd "$js_dir.tmp" && npm ci --no-audit --no-fund --cache "$cache/npm" >/dev/null)
  rm -rf "$js_dir" && mv "$js_dir.tmp" "$js_dir"
fi
# Where the tests find them (tests/support/foreign_clients.py).
echo "$go_bin" >"$out/go.path"
echo "$js_dir/node_modules" >"$out/js.path"
echo "build-clients: $go_bin, $js_dir/node_modules"
