#!/usr/bin/env bash
# Makes promtool available for the metrics test (testing/metrics runs
# `promtool check metrics` on the proxy's /metrics): the one on PATH, else
# Debian's `prometheus` package (which ships /usr/bin/promtool; installing it
# starts no daemon here). Prints promtool's path.
set -euo pipefail
if ! command -v promtool >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "install-promtool.sh: promtool not found; install Debian's 'prometheus' package (or put promtool on PATH)" >&2
    exit 1
  fi
  echo "install-promtool.sh: installing Debian's prometheus package for promtool" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >&2
fi
command -v promtool
