#!/usr/bin/env bash
# Makes podman available for the container image test (testing/e2e/image:
# the image built from the Dockerfile by scripts/build-image.sh, run in
# front of a real Trino). Installs Debian's podman and what it runs with at
# the versions pinned below when apt offers them (else the candidates, named
# on stderr): podman, runc, conmon, the CNI plugins, uidmap, catatonit (the
# pause process of `podman play kube`'s pods), and mmdebstrap (which makes
# the base images locally: no image registry is needed).
#
# Podman runs with the runc runtime and no default ulimits: crun (Debian's
# default) cannot set rlimits in some sandboxes, and runc then fails on the
# same defaults. That setting lives in
#   ${PRESTROID_CACHE:-~/.cache/prestroid}/podman/containers.conf
# (the system's containers.conf is not touched), read by the wrapper
#   ${PRESTROID_CACHE:-~/.cache/prestroid}/podman/podman
# which runs /usr/bin/podman with CONTAINERS_CONF pointing at it. The last
# line printed is the wrapper's path: the tests read it as PRESTROID_PODMAN.
# Idempotent: installed packages and an up-to-date wrapper are left alone.
set -euo pipefail
# Debian 12 (bookworm, bookworm-security).
PINS=(
  podman=4.3.1+ds1-8+deb12u1+b3
  runc=1.1.5+ds1-1+deb12u1
  conmon=2.1.6+ds1-1
  containernetworking-plugins=1.1.1+ds1-3+b5
  golang-github-containers-common=0.50.1+ds1-4
  uidmap=1:4.13+dfsg1-1+deb12u2
  mmdebstrap=1.3.5-7
  catatonit=0.1.7-1+b2
)

missing=()
for p in "${PINS[@]}"; do
  name=${p%%=*}
  if ! dpkg-query -W -f='${Status}' "$name" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "install-podman.sh: missing Debian packages: ${missing[*]%%=*} (install them as root, or run this script as root)" >&2
    exit 1
  fi
  offered() { apt-cache madison "${1%%=*}" 2>/dev/null | grep -qF " ${1#*=} "; }
  need_update=0
  for p in "${missing[@]}"; do offered "$p" || need_update=1; done
  [ $need_update = 0 ] || apt-get update -qq >&2
  pkgs=()
  for p in "${missing[@]}"; do
    if offered "$p"; then
      pkgs+=("$p")
    else
      echo "install-podman.sh: $p not offered; installing the candidate $(apt-cache policy "${p%%=*}" | awk '/Candidate/ {print $2}')" >&2
      pkgs+=("${p%%=*}")
    fi
  done
  echo "install-podman.sh: installing Debian's ${pkgs[*]}" >&2
  # Wait for another apt (a concurrent install) instead of failing on its lock.
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${pkgs[@]}" >&2
fi

dir="${PRESTROID_CACHE:-$HOME/.cache/prestroid}/podman"
mkdir -p "$dir"
conf="$dir/containers.conf"
wrapper="$dir/podman"
want_conf='# Written by scripts/install-podman.sh.
[containers]
default_ulimits = []

[engine]
runtime = "runc"
'
want_wrapper="#!/bin/sh
# Written by scripts/install-podman.sh: podman with $conf.
CONTAINERS_CONF='$conf' exec /usr/bin/podman \"\$@\"
"
if [ "$(cat "$conf" 2>/dev/null)" != "${want_conf%$'\n'}" ]; then
  printf '%s' "$want_conf" >"$conf.tmp" && mv -f "$conf.tmp" "$conf"
fi
if [ "$(cat "$wrapper" 2>/dev/null)" != "${want_wrapper%$'\n'}" ]; then
  printf '%s' "$want_wrapper" >"$wrapper.tmp" && chmod 0755 "$wrapper.tmp" && mv -f "$wrapper.tmp" "$wrapper"
fi
"$wrapper" info --format '{{.Host.OCIRuntime.Name}}' >/dev/null 2>&1 || {
  echo "install-podman.sh: $wrapper info fails:" >&2
  "$wrapper" info >&2 || true
  exit 1
}
echo "$wrapper"
