#!/usr/bin/env bash
# Makes PostgreSQL available for testing/e2e/gateway (Trino Gateway keeps its
# backends and query history in a database): Debian's postgresql-15 package
# at the version pinned below when apt offers it (else the candidate, whose
# version is printed), unless it is installed already. The package puts its
# programs in /usr/lib/postgresql/15/bin (not on PATH) and may create and
# start its own cluster on 5432; the test never uses it: it starts a
# throwaway cluster of its own (testing/pgtest: initdb in a temporary
# directory, a free port, no fsync). PostgreSQL refuses to run as root, so
# as root the test runs initdb and postgres as the package's `postgres`
# user. Prints the directory holding initdb and postgres.
set -euo pipefail
MAJOR=15
PIN=15.18-0+deb12u1   # Debian 12 (bookworm), PostgreSQL 15.18
bin=/usr/lib/postgresql/$MAJOR/bin
if [ ! -x "$bin/initdb" ] || [ ! -x "$bin/postgres" ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "install-postgres.sh: $bin/initdb not found; install Debian's 'postgresql-$MAJOR' package" >&2
    exit 1
  fi
  pkg=postgresql-$MAJOR
  if apt-cache madison "$pkg" 2>/dev/null | grep -qF " $PIN "; then
    pkg="$pkg=$PIN"
  else
    apt-get update -qq >&2
    if apt-cache madison "$pkg" 2>/dev/null | grep -qF " $PIN "; then
      pkg="$pkg=$PIN"
    else
      echo "install-postgres.sh: $PIN not offered; installing the candidate $(apt-cache policy "$pkg" | awk '/Candidate/ {print $2}')" >&2
    fi
  fi
  echo "install-postgres.sh: installing Debian's $pkg" >&2
  # Wait for another apt (a concurrent install) instead of failing on its lock.
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "$pkg" >&2
fi
echo "$bin"
