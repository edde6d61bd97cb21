#!/usr/bin/env bash
# Build a real Kubernetes API server (kube-apiserver) and etcd from the Go module proxy, for
# the tests that run Herald's admission webhook behind them
# (tests/k8s/proxy/k8s/test_webhook_apiserver.py). Versions: deploy/tools.env. The binaries are
# cached in .cache/go/bin and rebuilt only when a version changes; a cold build takes about
# 10 minutes of one core (kube-apiserver is large). It runs at the lowest CPU priority, so that
# scripts/test.sh can build it beside the test suite, on every core the suite leaves idle (the
# suite's last modules wait for it: held to one core, it was what they waited on).
#
#   bash scripts/build-apiserver.sh      # writes .cache/go/apiserver.status: built | failed N
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/go-tool-build.sh
. scripts/go-tool-build.sh apiserver
apiserver=$bin/kube-apiserver-$KUBE_APISERVER_VERSION
etcd=$bin/etcd-$ETCD_VERSION
work=$cache/go/src-apiserver
build() {  # OUT PACKAGE (in the module at $PWD; scripts/go-build-flags.sh says how)
  nice -n 19 go mod tidy
  nice -n 19 go build "${go_build_flags[@]}" "-gcflags=$go_gcflags_test_server" -o "$1.tmp" "$2"
  mv "$1.tmp" "$1"
}

if [ ! -x "$etcd" ]; then
  echo "build-apiserver: etcd $ETCD_VERSION"
  rm -rf "$work/etcd" && mkdir -p "$work/etcd" && cd "$work/etcd"
  go mod init herald.test/etcd >/dev/null 2>&1
  printf 'package main\n\nimport (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\nfunc main() { etcdmain.Main(os.Args) }\n' >main.go
  go mod edit -require "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
  build "$etcd" .
  cd - >/dev/null
fi

if [ ! -x "$apiserver" ]; then
  echo "build-apiserver: kube-apiserver $KUBE_APISERVER_VERSION"
  rm -rf "$work/apiserver" && mkdir -p "$work/apiserver" && cd "$work/apiserver"
  go mod init herald.test/apiserver >/dev/null 2>&1
  # k8s.io/kubernetes points its k8s.io/* modules at its own staging folders, which its module
  # does not carry: each is replaced by the version published with it (v0.MINOR.PATCH).
  mod=$(go mod download -json "k8s.io/kubernetes@$KUBE_APISERVER_VERSION" |
        sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
  staging=v0.${KUBE_APISERVER_VERSION#v1.}
  for module in $(awk '/=> \.\/staging\/src\//{print $1}' "$mod"); do
    go mod edit -replace "$module=$module@$staging"
  done
  go mod edit -require "k8s.io/kubernetes@$KUBE_APISERVER_VERSION"
  printf '//go:build tools\n\npackage tools\n\nimport _ "k8s.io/kubernetes/cmd/kube-apiserver"\n' >tools.go
  build "$apiserver" k8s.io/kubernetes/cmd/kube-apiserver
  cd - >/dev/null
fi
echo built >"$status"
echo "build-apiserver: $apiserver, $etcd"
