#!/usr/bin/env bash
# Checks a directory of TPC workload files (trinodb/trino's benchmark
# queries; docs/workloads.md) against the checksums in
# testing/workloads.sha256: every listed file present and unchanged, and no
# other tpch/*.sql or tpcds/*.sql beside them (the files held back for
# evaluation must stay out).
#
#   scripts/check-workloads.sh DIR      # e.g. ../shared/workloads
#
# Exits 0 when DIR matches, 1 otherwise, naming each difference.
set -euo pipefail
dir=${1:?usage: scripts/check-workloads.sh DIR}
sums="$(cd "$(dirname "$0")/.." && pwd)/testing/workloads.sha256"
if [ ! -d "$dir/tpch" ] || [ ! -d "$dir/tpcds" ]; then
  echo "check-workloads: $dir has no tpch/ and tpcds/ folders; see docs/workloads.md" >&2
  exit 1
fi
cd "$dir"
status=0
# Missing or changed files: sha256sum names each (pipefail keeps its status).
if ! sha256sum --quiet --strict -c "$sums" 2>&1 | sed 's/^/check-workloads: /' >&2; then
  status=1
fi
extra=$(comm -13 <(awk '{print $2}' "$sums" | sort) <(ls tpch/*.sql tpcds/*.sql 2>/dev/null | sort))
if [ -n "$extra" ]; then
  echo "check-workloads: files not in testing/workloads.sha256 (held back for evaluation; remove them):" >&2
  echo "$extra" | sed 's/^/  /' >&2
  status=1
fi
n=$(wc -l <"$sums")
if [ $status -eq 0 ]; then
  echo "check-workloads: $dir: all $n files match testing/workloads.sha256"
else
  echo "check-workloads: $dir does not match testing/workloads.sha256; see docs/workloads.md" >&2
fi
exit $status
