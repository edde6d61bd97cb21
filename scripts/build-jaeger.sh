#!/usr/bin/env bash
# Build Jaeger v2 from the Go module proxy, for the test that shows Herald's traces stitched in
# a real APM (tests/integration/proxy/observability/test_jaeger.py). Jaeger's Go module keeps
# v1.x versions; its cmd/jaeger is the v2 binary (an OpenTelemetry Collector distribution).
# Version: deploy/tools.env. Cached in .cache/go/bin, rebuilt only when the version changes;
# a cold build takes about 4 minutes of both cores. It runs at the lowest CPU priority, so
# that scripts/test.sh can build it beside the suite.
#
#   bash scripts/build-jaeger.sh      # writes .cache/go/jaeger.status: built | failed N
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/go-tool-build.sh
. scripts/go-tool-build.sh jaeger
jaeger=$bin/jaeger-$JAEGER_VERSION
if [ ! -x "$jaeger" ]; then
  echo "build-jaeger: jaeger $JAEGER_VERSION"
  work=$cache/go/src-jaeger
  rm -rf "$work" && mkdir -p "$work" && cd "$work"
  go mod init herald.test/jaeger >/dev/null 2>&1
  # `go install pkg@version` refuses a module with replace directives: a module of our own
  # requires Jaeger's and repeats its one replace.
  mod=$(go mod download -json "github.com/jaegertracing/jaeger@$JAEGER_VERSION" |
        sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
  grep '^replace ' "$mod" | while read -r _ from _ to version; do
    go mod edit -replace "$from=$to@$version"
  done
  go mod edit -require "github.com/jaegertracing/jaeger@$JAEGER_VERSION"
  printf '//go:build tools\n\npackage tools\n\nimport _ "github.com/jaegertracing/jaeger/cmd/jaeger"\n' >tools.go
  nice -n 19 go mod tidy
  # Without the compiler's optimisations (scripts/go-build-flags.sh): the test sends Jaeger a
  # few spans, and the build takes 30% less CPU (518 against 742 CPU-seconds, cold).
  nice -n 19 go build "${go_build_flags[@]}" "-gcflags=$go_gcflags_test_server" -o "$jaeger.tmp" \
    github.com/jaegertracing/jaeger/cmd/jaeger
  mv "$jaeger.tmp" "$jaeger"
  cd - >/dev/null
fi
echo built >"$status"
echo "build-jaeger: $jaeger"
