#!/usr/bin/env bash
# Build Herald's container image (deploy/Dockerfile) using package registries only: no base
# image is pulled from an image registry. A Debian 12 root file system made by debootstrap
# (from Debian's archive) becomes the base image, and buildah (a Debian package, no daemon)
# builds the Dockerfile on it; pip inside the build reaches PyPI.
#
#   bash deploy/build-image.sh [TAG]    (default $HERALD_IMAGE, else herald:0.1.0; run as root)
#   bash deploy/build-image.sh --archive  (print the Debian archive it would use, and stop)
#
# The Debian archive is the one this machine's apt already uses (its sources and its
# Acquire::http(s)::Proxy), for debootstrap and for the Dockerfile's apt steps alike. The image
# carries a label with a hash of everything that goes into it (the files the Dockerfile copies,
# the Dockerfile, this script, the archive): when the image under TAG has the same hash, nothing
# is built, so calling this before every test run costs a second once the image exists.
#
# Then tests/k8s/deploy/test_image.py runs the image (podman with runc) in front of a real broker.
# RUN steps use chroot isolation: it needs neither cgroups nor a container runtime, so the
# build works inside a VM or a CI container that cannot start nested containers.
set -euo pipefail
cd "$(dirname "$0")/.."
only_archive=
[ "${1:-}" = --archive ] && { only_archive=1; shift; }
tag=${1:-${HERALD_IMAGE:-herald:0.1.0}}
# The stream's image (the Dockerfile's `pipeline` target), built beside Herald's.
pipeline_tag=${HERALD_PIPELINE_IMAGE:-herald-pipeline:0.1.0}
cache=${HERALD_CACHE_DIR:-$PWD/.cache}/image
suite=bookworm
base=localhost/herald-base:$suite
label=io.herald.build-inputs

die() { echo "build-image: $*" >&2; exit 1; }

command -v apt-config >/dev/null ||
  die "no apt here (apt-config is missing): the Debian archive is taken from apt's sources"

# ---- the Debian archive, from this machine's apt sources ---------------------------------------
# Every `deb` source as "URI SUITE COMPONENTS...", in apt's order: the sources list, then the
# parts folder's *.list (one-line form) and *.sources (deb822 form) files by name.
sourcelist= sourceparts=
eval "$(apt-config shell sourcelist Dir::Etc::sourcelist/f sourceparts Dir::Etc::sourceparts/d)"
apt_sources() {
  local files=() file
  [ -f "$sourcelist" ] && files+=("$sourcelist")
  while IFS= read -r file; do
    [ -f "$file" ] && files+=("$file")
  done < <(printf '%s\n' "$sourceparts"*.list "$sourceparts"*.sources | LC_ALL=C sort)
  for file in "${files[@]}"; do
    case $file in
      *.sources) awk '
        function flush(  n, m, u, s, i, j, uris, suites) {
          if (types ~ /(^|[ \t])deb([ \t]|$)/ && enabled !~ /^(no|false|0)$/) {
            n = split(uri, uris, /[ \t]+/); m = split(suite, suites, /[ \t]+/)
            for (i = 1; i <= n; i++) for (j = 1; j <= m; j++)
              if (uris[i] != "" && suites[j] != "") print uris[i], suites[j], comps
          }
          types = uri = suite = comps = enabled = ""
        }
        /^#/ { next }
        /^[ \t]*$/ { flush(); next }
        /^[ \t]/ { next }
        { key = tolower($1); sub(/^[^:]*:[ \t]*/, ""); v = $0 }
        key == "types:" { types = v } key == "uris:" { uri = v } key == "suites:" { suite = v }
        key == "components:" { comps = v } key == "enabled:" { enabled = tolower(v) }
        END { flush() }' "$file" ;;
      *) awk '
        { sub(/#.*/, "") }
        $1 == "deb" {
          i = 2
          if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
          line = $i; for (j = i + 1; j <= NF; j++) line = line " " $j
          if (NF >= i + 1) print line
        }' "$file" ;;
    esac
  done
}

debian_suite='(buster|bullseye|bookworm|trixie|forky|duke|sid|oldoldstable|oldstable|stable|testing|unstable)'
sources=$(apt_sources)
# The main archive: the first source of a Debian release with `main` (not its -updates,
# -security or -backports); the security archive: the first of a release's -security.
mirror=$(awk -v re="^$debian_suite\$" '$2 ~ re && / main( |$)/ { print $1; exit }' <<<"$sources")
security=$(awk -v re="^$debian_suite-security\$" '$2 ~ re { print $1; exit }' <<<"$sources")
if [ -z "$mirror" ]; then
  die "no Debian archive in this machine's apt sources ($sourcelist, ${sourceparts}*.list," \
      "${sourceparts}*.sources): the build needs a \`deb <mirror> <Debian release> main\` source" \
      "there, the mirror debootstrap and the image's apt use"
fi
mirror=${mirror%/}
security=${security%/}
proxy_key=Acquire::http::Proxy
[[ $mirror == https:* ]] && proxy_key=Acquire::https::Proxy
eval "$(apt-config shell apt_proxy "$proxy_key")"
apt_proxy=${apt_proxy:-}
[[ $apt_proxy == DIRECT ]] && apt_proxy=
echo "build-image: Debian archive $mirror${security:+, security $security}${apt_proxy:+, through $apt_proxy} (this machine's apt sources)"
[ -n "$security" ] || echo "build-image: no -security source in apt's sources: the image gets no security archive"
[ -z "$only_archive" ] || exit 0
[ "$(id -u)" = 0 ] || die "needs root (debootstrap and buildah's chroot isolation); run it as root"

# ---- Spark's Kafka connector, as setup resolved it into the cache (pipeline/deps.py) ------------
# Staged in image-jars/ (the build context), for the stream's image.
python=${HERALD_PYTHON:-.venv/bin/python}
[ -x "$python" ] || die "no $python: run scripts/setup.sh first (the stream's image takes" \
  "Spark's Kafka connector from the cache it fills)"
jars=$("$python" -c 'from pipeline.deps import cached_jars; print(" ".join(cached_jars() or []))')
[ -n "$jars" ] || die "Spark's Kafka connector is not in the cache: run scripts/setup.sh first"
rm -rf image-jars && mkdir image-jars
# shellcheck disable=SC2086
cp $jars image-jars/

# ---- nothing to do when both images have these very inputs -------------------------------------
inputs=$({
  echo "$mirror $security"
  find pyproject.toml setup.py README.md proxy.yaml protocol configuration interceptors proxy herald pipeline \
       image-jars deploy/Dockerfile deploy/build-image.sh -type f \
       ! -path '*/__pycache__/*' ! -name '*.pyc' ! -name '*.so' ! -path '*.egg-info/*' -print0 |
    LC_ALL=C sort -z | xargs -0 sha256sum
} | sha256sum | cut -d' ' -f1)
current() {  # TAG: built from these inputs
  podman image exists "$1" &&
    [ "$(podman image inspect --format "{{index .Labels \"$label\"}}" "$1")" = "$inputs" ]
}
if command -v podman >/dev/null && current "$tag" && current "$pipeline_tag"; then
  echo "build-image: $tag and $pipeline_tag are up to date (inputs $inputs)"
  exit 0
fi

need=()
for tool in debootstrap buildah podman runc; do
  command -v "$tool" >/dev/null || need+=("$tool")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "build-image: installing ${need[*]} (Debian packages)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q "${need[@]}" >/dev/null ||
    { apt-get update -q >/dev/null && apt-get install -y -q "${need[@]}" >/dev/null; } ||
    die "could not install ${need[*]} with apt-get (see its messages above)"
fi

if ! podman image exists "$base"; then
  rootfs=$cache/rootfs-$suite
  if [ ! -x "$rootfs/usr/bin/apt-get" ]; then
    echo "build-image: debootstrap $suite from $mirror into $rootfs"
    rm -rf "$rootfs"
    mkdir -p "$cache"
    include=()
    [[ $mirror == https:* ]] && include=(--include=ca-certificates)
    # debootstrap fetches with wget, which reads the proxy from the environment.
    if ! env ${apt_proxy:+http_proxy=$apt_proxy https_proxy=$apt_proxy} \
         debootstrap --variant=minbase "${include[@]}" "$suite" "$rootfs" "$mirror"; then
      log=$rootfs/debootstrap/debootstrap.log
      [ -f "$log" ] && tail -n 5 "$log" >&2
      die "debootstrap $suite from $mirror failed (is the mirror reachable from here?)"
    fi
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
build() {  # TARGET TAG
  local previous
  previous=$(podman image inspect --format '{{.Id}}' "$2" 2>/dev/null || true)
  buildah bud --isolation chroot --network host --layers "${secret[@]}" \
    --build-arg "BASE=$base" --build-arg "DEBIAN_MIRROR=$mirror" \
    --build-arg "DEBIAN_SECURITY=$security" --build-arg "APT_PROXY=$apt_proxy" \
    --label "$label=$inputs" -f deploy/Dockerfile --target "$1" -t "$2" . ||
    die "buildah could not build deploy/Dockerfile's $1 target (see its messages above)"
  # The image this one replaces keeps no name: remove it (unless a container still uses it).
  if [ -n "$previous" ] && [ "$(podman image inspect --format '{{.Id}}' "$2")" != "$previous" ] &&
     [ -z "$(podman image inspect --format '{{join .RepoTags " "}}' "$previous")" ]; then
    podman rmi "$previous" >/dev/null 2>&1 || true
  fi
}
build pipeline "$pipeline_tag"
podman image inspect "$pipeline_tag" \
  --format "build-image: $pipeline_tag {{.Id}} {{.Size}} bytes, user {{.Config.User}}"
build run "$tag"
podman image inspect "$tag" --format 'build-image: {{.Id}} {{.Size}} bytes, user {{.Config.User}}'
