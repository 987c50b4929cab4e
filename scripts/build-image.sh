#!/usr/bin/env bash
# Builds the Prestroid image from the Dockerfile with podman, without an
# image registry: the two base images the Dockerfile names are made here
# first, from Debian packages, and imported under those names.
#
#   debian:bookworm-slim   `mmdebstrap --variant=minbase bookworm`
#   golang:1.26-bookworm   the same plus ca-certificates, git, gcc, libc6-dev,
#                          make and pkg-config, and the Go toolchain
#                          $GO_VERSION in /usr/local/go (the module
#                          golang.org/toolchain, checked against the
#                          checksum database by `go mod download`)
#
# Both use this host's apt sources and apt settings (Acquire::Check-*,
# Acquire::*::Proxy), so that apt-get inside the build reaches the same
# Debian mirror the host does. The build passes the host's registry
# settings through (the Dockerfile's ARGs: GOPROXY, GOSUMDB, GONOSUMDB,
# GOPRIVATE from `go env`, NPM_REGISTRY from `npm config get registry`) and
# the host's CA bundle as the secret ca_bundle (SSL_CERT_FILE, else Debian's
# bundle): a TLS-intercepting proxy then works inside the build too.
#
# Cached: each base image's root file system is kept as a tarball under
# $PRESTROID_CACHE/image/ keyed by everything it is made from (apt sources
# and settings, packages, Go version, this recipe), and an image already in
# podman's storage with that key is used as it is. The image build reuses
# podman's layers and a Go build cache. A cold run takes a few minutes, a
# warm one seconds.
#
# Usage: scripts/build-image.sh [TAG]   (default prestroid:local)
# PRESTROID_PODMAN names the podman command (default: what
# scripts/install-podman.sh prints). Prints the tag built (last line).
set -euo pipefail
cd "$(dirname "$0")/.."
TAG=${1:-prestroid:local}
GO_VERSION=${GO_VERSION:-1.26.8}
RECIPE=1 # bump when the recipe below changes
GOLANG_PACKAGES=ca-certificates,netbase,git,gcc,libc6-dev,make,pkg-config
CACHE="${PRESTROID_CACHE:-$HOME/.cache/prestroid}"
PODMAN=${PRESTROID_PODMAN:-$(scripts/install-podman.sh)}
mkdir -p "$CACHE/image"
log() { echo "build-image.sh: $*" >&2; }

# The host's apt sources (files, in apt's order) and the settings a mirror
# may need, as mmdebstrap arguments.
sources=()
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
  [ -s "$f" ] && sources+=("$f")
done
[ ${#sources[@]} -gt 0 ] || { log "no apt sources found under /etc/apt"; exit 1; }
aptopts=()
while IFS= read -r line; do
  aptopts+=("--aptopt=$line")
done < <(apt-config dump | grep -E '^Acquire::(Check-Valid-Until|Check-Date|(http|https|ftp)::Proxy) ' || true)

# base NAME PACKAGES [HOOK...]: makes sure image NAME exists, built from the
# host's sources with PACKAGES and the customize hooks.
base() {
  local name=$1 include=$2
  shift 2
  local key
  key=$( {
    echo "recipe $RECIPE $name include=$include go=$GO_VERSION"
    printf '%s\n' "${aptopts[@]}"
    cat "${sources[@]}"
  } | sha256sum | cut -c1-16)
  if [ "$("$PODMAN" image inspect --format '{{index .Labels "org.prestroid.base"}}' "$name" 2>/dev/null)" = "$key" ]; then
    log "$name: up to date ($key)"
    return
  fi
  local safe=${name//[:\/]/_}
  local tar="$CACHE/image/$safe-$key.tar"
  if [ ! -s "$tar" ]; then
    log "$name: mmdebstrap --variant=minbase bookworm${include:+ --include=$include}"
    local args=(--variant=minbase --mode=root --format=tar "${aptopts[@]}")
    [ -z "$include" ] || args+=("--include=$include")
    local h
    for h in "$@"; do args+=("--customize-hook=$h"); done
    local tmp="$tar.tmp.$$"
    # The path is expanded now: the trap runs after this function's locals
    # are gone (and set -u would fail the script on the unset name).
    trap "rm -f '$tmp'" EXIT
    mmdebstrap --quiet "${args[@]}" bookworm "$tmp" "${sources[@]}" >&2
    mv -f "$tmp" "$tar" # atomic: a concurrent run imports a whole tarball or makes its own
    trap - EXIT
    find "$CACHE/image" -maxdepth 1 -name "$safe-*.tar" ! -name "$safe-$key.tar" -delete
  fi
  log "$name: importing $tar"
  local changes=(--change "LABEL org.prestroid.base=$key" --change 'CMD ["bash"]')
  if [ "$name" = "golang:1.26-bookworm" ]; then
    changes+=(
      --change "ENV GOLANG_VERSION=$GO_VERSION"
      --change 'ENV GOTOOLCHAIN=local'
      --change 'ENV GOPATH=/go'
      --change 'ENV PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
      --change 'WORKDIR /go'
    )
  fi
  "$PODMAN" import --quiet "${changes[@]}" "$tar" "docker.io/library/$name" >/dev/null
}

base debian:bookworm-slim ""

toolchain=$(GOFLAGS=-mod=mod go mod download -json "golang.org/toolchain@v0.0.1-go$GO_VERSION.linux-amd64" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -f "$toolchain/bin/go" ] || { log "Go $GO_VERSION toolchain not found (go mod download golang.org/toolchain)"; exit 1; }
base golang:1.26-bookworm "$GOLANG_PACKAGES" \
  "mkdir -p \"\$1/usr/local/go\" \"\$1/go/bin\" \"\$1/go/src\" && cp -a '$toolchain/.' \"\$1/usr/local/go/\" && chmod -R u+w \"\$1/usr/local/go\" && chmod a+x \"\$1\"/usr/local/go/bin/* \"\$1\"/usr/local/go/pkg/tool/*/*"

# The host's registry settings, passed through.
build_args=()
for v in GOPROXY GOSUMDB GONOSUMDB GOPRIVATE; do
  val=$(go env "$v")
  [ -z "$val" ] || build_args+=(--build-arg "$v=$val")
done
if command -v npm >/dev/null 2>&1; then
  reg=$(npm config get registry 2>/dev/null || true)
  [ -z "$reg" ] || build_args+=(--build-arg "NPM_REGISTRY=$reg")
fi
ca=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
[ ! -s "$ca" ] || build_args+=(--secret "id=ca_bundle,src=$ca")

log "podman build -t $TAG"
start=$(date +%s)
"$PODMAN" build --pull=never --layers -f Dockerfile -t "$TAG" "${build_args[@]}" . >&2
log "built $TAG in $(($(date +%s) - start)) s"
# Each build whose sources changed leaves its build stage's last layers
# behind, untagged (about 100 MB each): those older than a week go.
"$PODMAN" image prune --force --filter until=168h >/dev/null
echo "$TAG"
