#!/usr/bin/env bash
# Makes Chromium available for the web console's browser test
# (testing/e2e/console drives headless Chromium with chromedp): the one on
# PATH (chromium, chromium-browser, google-chrome), else Debian's `chromium`
# package at the version pinned below when apt offers it (else the
# candidate, whose version is printed). The test starts its own headless
# browser with a temporary profile. Prints the browser's path.
set -euo pipefail
PIN=156.0.8078.114-1~deb12u1   # Debian 12 (bookworm-security)
for b in chromium chromium-browser google-chrome; do
  if command -v "$b" >/dev/null 2>&1; then
    command -v "$b"
    exit 0
  fi
done
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "install-chromium.sh: chromium not found; install Debian's 'chromium' package (or put chromium on PATH)" >&2
  exit 1
fi
pkg=chromium
if apt-cache madison chromium 2>/dev/null | grep -qF " $PIN "; then
  pkg="chromium=$PIN"
else
  apt-get update -qq >&2
  if apt-cache madison chromium 2>/dev/null | grep -qF " $PIN "; then
    pkg="chromium=$PIN"
  else
    echo "install-chromium.sh: $PIN not offered; installing the candidate $(apt-cache policy chromium | awk '/Candidate/ {print $2}')" >&2
  fi
fi
echo "install-chromium.sh: installing Debian's $pkg" >&2
# Wait for another apt (a concurrent install) instead of failing on its lock.
DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "$pkg" >&2
command -v chromium
