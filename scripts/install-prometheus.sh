#!/usr/bin/env bash
# Makes the Prometheus server available for the dashboard test
# (testing/dashboard starts one, scraping the proxy, and evaluates every
# panel of deploy/grafana/prestroid.json through its HTTP API): the one on
# PATH, else Debian's `prometheus` package (the same package as promtool,
# scripts/install-promtool.sh; installing it starts no daemon in a
# container without systemd). Prints prometheus's path.
set -euo pipefail
if ! command -v prometheus >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "install-prometheus.sh: prometheus not found; install Debian's 'prometheus' package (or put prometheus on PATH)" >&2
    exit 1
  fi
  echo "install-prometheus.sh: installing Debian's prometheus package" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >&2
fi
command -v prometheus
