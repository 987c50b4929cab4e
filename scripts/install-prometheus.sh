#!/usr/bin/env bash
# Makes Debian's `prometheus` package's tools available to the tests and
# prints the path of the one asked for:
#   install-prometheus.sh            the Prometheus server (testing/dashboard
#                                    starts one, scraping the proxy, and evaluates
#                                    every panel of deploy/grafana/prestroid.json)
#   install-prometheus.sh promtool   promtool (testing/metrics runs
#                                    `promtool check metrics` on /metrics)
# The tool on PATH if there is one, else the package at the version pinned
# below when apt offers it (else the candidate, whose version is printed).
# Installing it starts no daemon in a container without systemd.
set -euo pipefail
PIN=2.42.0+ds-5+deb12u1   # Debian 12 (bookworm), Prometheus 2.42.0
tool=${1:-prometheus}
case "$tool" in prometheus|promtool) ;; *) echo "install-prometheus.sh: unknown tool '$tool' (prometheus or promtool)" >&2; exit 2 ;; esac
if ! command -v "$tool" >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "install-prometheus.sh: $tool not found; install Debian's 'prometheus' package (or put $tool on PATH)" >&2
    exit 1
  fi
  offered() { apt-cache madison prometheus 2>/dev/null | grep -qF " $PIN "; }
  pkg=prometheus
  if offered || { apt-get update -qq >&2 && offered; }; then
    pkg="prometheus=$PIN"
  else
    echo "install-prometheus.sh: $PIN not offered; installing the candidate $(apt-cache policy prometheus | awk '/Candidate/ {print $2}')" >&2
  fi
  echo "install-prometheus.sh: installing Debian's $pkg for $tool" >&2
  # Wait for another apt (a concurrent install) instead of failing on its lock.
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "$pkg" >&2
fi
command -v "$tool"
