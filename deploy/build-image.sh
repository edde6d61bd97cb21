#!/usr/bin/env bash
# Build Herald's container image (deploy/Dockerfile) using package registries only: no base
# image is pulled from an image registry. A Debian 12 root file system made by debootstrap
# (from Debian's archive) becomes the base image, and buildah (a Debian package, no daemon)
# builds the Dockerfile on it; pip inside the build reaches PyPI.
#
#   bash deploy/build-image.sh [TAG]          (default herald:0.1.0; run as root)
#
# Then tests/k8s/deploy/test_image.py runs the image (podman with runc) in front of a real broker.
# RUN steps use chroot isolation: it needs neither cgroups nor a container runtime, so the
# build works inside a VM or a CI container that cannot start nested containers.
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${1:-herald:0.1.0}
cache=${HERALD_CACHE_DIR:-$PWD/.cache}/image
suite=bookworm
base=localhost/herald-base:$suite

need=()
for tool in debootstrap buildah podman runc; do
  command -v "$tool" >/dev/null || need+=("$tool")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "build-image: installing ${need[*]} (Debian packages)"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null
fi

if ! podman image exists "$base"; then
  rootfs=$cache/rootfs-$suite
  if [ ! -x "$rootfs/usr/bin/apt-get" ]; then
    echo "build-image: debootstrap $suite into $rootfs"
    rm -rf "$rootfs"
    mkdir -p "$cache"
    debootstrap --variant=minbase "$suite" "$rootfs" http://deb.debian.org/debian
  fi
  echo "build-image: importing $rootfs as $base"
  tar -C "$rootfs" --exclude='./var/cache/apt/archives/*.deb' --exclude='./dev/*' \
      --exclude='./proc/*' --exclude='./sys/*' -c . | podman import - "$base"
fi

# Where TLS to PyPI is intercepted by a proxy, the build needs this machine's CA bundle.
secret=()
for bundle in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt; do
  if [ -f "$bundle" ]; then secret=(--secret "id=ca,src=$bundle"); break; fi
done
buildah bud --isolation chroot --network host --layers "${secret[@]}" \
  --build-arg "BASE=$base" -f deploy/Dockerfile -t "$tag" .
podman image inspect "$tag" --format 'build-image: {{.Id}} {{.Size}} bytes, user {{.Config.User}}'
