#!/usr/bin/env bash
# Makes redis-server available for the tests of shared admission (proxy's
# Redis store, testing/e2e/replicas): the one on PATH, else Debian's
# `redis-server` package at the version pinned below when apt offers it
# (else the candidate, whose version is printed). Installing the package may
# start its own daemon on 6379; the tests never use it: they start their own
# redis-server on a free port with a temporary directory and no persistence
# (testing/redistest). Prints redis-server's path.
set -euo pipefail
PIN=5:7.0.15-1~deb12u10   # Debian 12 (bookworm-security), Redis 7.0.15
if ! command -v redis-server >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "install-redis.sh: redis-server not found; install Debian's 'redis-server' package (or put redis-server on PATH)" >&2
    exit 1
  fi
  pkg=redis-server
  if apt-cache madison redis-server 2>/dev/null | grep -qF " $PIN "; then
    pkg="redis-server=$PIN"
  else
    apt-get update -qq >&2
    if apt-cache madison redis-server 2>/dev/null | grep -qF " $PIN "; then
      pkg="redis-server=$PIN"
    else
      echo "install-redis.sh: $PIN not offered; installing the candidate $(apt-cache policy redis-server | awk '/Candidate/ {print $2}')" >&2
    fi
  fi
  echo "install-redis.sh: installing Debian's $pkg" >&2
  # Wait for another apt (a concurrent install) instead of failing on its lock.
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "$pkg" >&2
fi
command -v redis-server
