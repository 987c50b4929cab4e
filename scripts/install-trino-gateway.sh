#!/usr/bin/env bash
# Makes Trino Gateway available for testing/e2e/gateway: the release pinned
# below (io.trino.gateway:gateway-ha, classifier jar-with-dependencies),
# downloaded once with mvn into $PRESTROID_CACHE/trino-gateway/VERSION/ (as
# testing/trino/trino.sh caches Trino). It runs on Java 25 (the test takes
# TRINO_JAVA_HOME, default /usr/lib/jvm/temurin-25-jdk-amd64, like the
# harness) and needs a database: the test starts its own PostgreSQL
# (scripts/install-postgres.sh). Prints the jar's path.
set -euo pipefail
VERSION=18
cache=${PRESTROID_CACHE:-$HOME/.cache/prestroid}
dir=$cache/trino-gateway/$VERSION
jar=$dir/gateway-ha-$VERSION-jar-with-dependencies.jar
if [ ! -s "$jar" ]; then
  command -v mvn >/dev/null || { echo "install-trino-gateway.sh: mvn is needed to download Trino Gateway $VERSION" >&2; exit 1; }
  mkdir -p "$dir"
  echo "install-trino-gateway.sh: downloading io.trino.gateway:gateway-ha:$VERSION (jar-with-dependencies, ~90 MB)" >&2
  if ! mvn -B -q dependency:copy -Dartifact="io.trino.gateway:gateway-ha:$VERSION:jar:jar-with-dependencies" \
      -DoutputDirectory="$dir" -Dmdep.useBaseVersion=true >"$dir/mvn.log" 2>&1; then
    cat "$dir/mvn.log" >&2
    echo "install-trino-gateway.sh: could not download gateway-ha $VERSION with mvn" >&2
    exit 1
  fi
fi
echo "$jar"
