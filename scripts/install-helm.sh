#!/usr/bin/env bash
# Makes helm available for the chart test (testing/helm: helm lint and helm
# template of deploy/helm/prestroid): built from its Go module at a pinned
# version and cached under $PRESTROID_CACHE/helm/VERSION/, so only the first
# run builds it (a few minutes of CPU on 2 cores; 13.5 minutes of wall time
# at a load average of 35). Prints helm's path.
set -euo pipefail
HELM_VERSION=v3.21.4
cache="${PRESTROID_CACHE:-$HOME/.cache/prestroid}/helm/$HELM_VERSION"
if [ ! -x "$cache/helm" ]; then
  command -v go >/dev/null 2>&1 || { echo "install-helm.sh: go not found" >&2; exit 1; }
  echo "install-helm.sh: building helm $HELM_VERSION from its Go module into $cache" >&2
  mkdir -p "$cache"
  GOBIN="$cache" GOFLAGS=-trimpath go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
fi
echo "$cache/helm"
