#!/usr/bin/env bash
# Local PrestoDB harness, beside testing/trino/trino.sh: assembles a real
# PrestoDB coordinator from pinned Maven artifacts (pom.xml beside this
# script, every file checked against artifacts.sha256), writes a minimal
# single-node etc/ with the tpch catalog and runs it on 127.0.0.1:$PRESTO_PORT.
#
#   presto.sh fetch           download and assemble the server and clients (cached)
#   presto.sh up              start an instance on $PRESTO_PORT (default 8091); idempotent;
#                             returns once the coordinator has an active worker and
#                             answers a query
#   presto.sh down            stop the instance on $PRESTO_PORT
#   presto.sh status          print the instance's /v1/info
#   presto.sh cli [ARGS...]   run the PrestoDB CLI jar
#   presto.sh cli-jar         print the path of the CLI jar
#   presto.sh jdbc-jar        print the path of the JDBC driver jar
#   presto.sh version         print the PrestoDB version
#
# Environment:
#   PRESTO_PORT          HTTP port of the instance (default 8091); every port is an
#                        independent instance with its own etc/ and data dir.
#   PRESTROID_CACHE      cache directory (default ~/.cache/prestroid)
#   PRESTO_JAVA_HOME     JDK for the server and clients (default the machine's Java
#                        17: PrestoDB 0.296 refuses to start on any other version)
#   PRESTO_HEAP          JVM heap (default 2G)
#   PRESTO_EXTRA_CONFIG  file whose lines are appended to config.properties
#   PRESTO_START_TIMEOUT seconds to wait for startup (default 300)
set -euo pipefail

# The one place the PrestoDB version is written. No presto-server tarball of a
# recent release is served by the Maven registry reachable here; 0.296's
# presto-main closure plus its tpch plugin zip (the only plugin zip served
# at 0.296) make a working coordinator. The CLI's newest served release is
# 0.287; it speaks the same protocol.
PRESTO_VERSION=0.296
PRESTO_CLI_VERSION=0.287

here=$(cd "$(dirname "$0")" && pwd)
cache=${PRESTROID_CACHE:-$HOME/.cache/prestroid}
dist=$cache/presto/$PRESTO_VERSION
port=${PRESTO_PORT:-8091}
inst=$cache/presto-instances/$port
heap=${PRESTO_HEAP:-2G}

die() { echo "presto.sh: $*" >&2; exit 1; }

java_home() {
  if [ -n "${PRESTO_JAVA_HOME:-}" ]; then echo "$PRESTO_JAVA_HOME"; return; fi
  local d
  for d in /usr/lib/jvm/java-17-openjdk-amd64 /usr/lib/jvm/java-17-openjdk-arm64 /usr/lib/jvm/temurin-17-jdk-amd64; do
    [ -x "$d/bin/java" ] && { echo "$d"; return; }
  done
  die "no Java 17 found (set PRESTO_JAVA_HOME): PrestoDB $PRESTO_VERSION runs on Java 17 only"
}

mvn_quiet() { # args...: mvn, log shown only on failure
  if ! mvn -B -q "$@" >"$cache/presto-mvn.log" 2>&1; then
    cat "$cache/presto-mvn.log" >&2
    die "mvn $* failed"
  fi
}

fetch() {
  [ -f "$dist/.complete" ] && return 0
  command -v mvn >/dev/null || die "mvn is needed to download PrestoDB"
  mkdir -p "$cache"
  echo "presto.sh: assembling PrestoDB $PRESTO_VERSION with mvn (once; cached in $cache)" >&2
  local tmp=$dist.tmp
  rm -rf "$tmp" && mkdir -p "$tmp/lib" "$tmp/dl" "$tmp/server/plugin"
  mvn_quiet -f "$here/pom.xml" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp/lib"
  mvn_quiet dependency:copy -Dartifact="com.facebook.presto:presto-tpch:$PRESTO_VERSION:zip" -DoutputDirectory="$tmp/dl"
  mvn_quiet dependency:copy -Dartifact="com.facebook.presto:presto-cli:$PRESTO_CLI_VERSION:jar:executable" -DoutputDirectory="$tmp/dl"
  mvn_quiet dependency:copy -Dartifact="com.facebook.presto:presto-jdbc:$PRESTO_VERSION" -DoutputDirectory="$tmp/dl"
  # Every file pinned, and nothing beyond the pinned set.
  (cd "$tmp" && grep -v '^#' "$here/artifacts.sha256" | sha256sum --quiet -c -) ||
    die "downloaded files differ from testing/presto/artifacts.sha256"
  local want got
  want=$(grep -vc '^#' "$here/artifacts.sha256")
  got=$(cd "$tmp" && find lib dl -type f | wc -l)
  [ "$want" = "$got" ] || die "resolved $got files, artifacts.sha256 pins $want"
  mv "$tmp/lib" "$tmp/server/lib"
  unzip -q "$tmp/dl/presto-tpch-$PRESTO_VERSION.zip" -d "$tmp/server/plugin"
  mv "$tmp/server/plugin/presto-tpch-$PRESTO_VERSION" "$tmp/server/plugin/tpch"
  mv "$tmp/dl/presto-cli-$PRESTO_CLI_VERSION-executable.jar" "$tmp/presto-cli.jar"
  mv "$tmp/dl/presto-jdbc-$PRESTO_VERSION.jar" "$tmp/presto-jdbc.jar"
  rm -rf "$tmp/dl" "$dist" && mv "$tmp" "$dist"
  touch "$dist/.complete"
}

write_etc() {
  local etc=$inst/etc heap_mb
  case "$heap" in
    *[gG]) heap_mb=$(( ${heap%[gG]} * 1024 )) ;;
    *[mM]) heap_mb=${heap%[mM]} ;;
    *) die "PRESTO_HEAP=$heap: want e.g. 2G or 1536M" ;;
  esac
  local query_mem=$(( heap_mb / 2 ))
  rm -rf "$etc" && mkdir -p "$etc/catalog" "$inst/data"
  # No launcher here: node.* settings go in config.properties, except the
  # data dir, which only the launcher's system property sets.
  cat >"$etc/config.properties" <<EOF
node.environment=prestroid
node.id=prestroid-presto-$port
node.bind-ip=127.0.0.1
node.internal-address=127.0.0.1
coordinator=true
node-scheduler.include-coordinator=true
http-server.http.port=$port
discovery-server.enabled=true
discovery.uri=http://127.0.0.1:$port
query.max-memory=${query_mem}MB
query.max-memory-per-node=${query_mem}MB
query.max-total-memory-per-node=${query_mem}MB
EOF
  if [ -n "${PRESTO_EXTRA_CONFIG:-}" ]; then cat "$PRESTO_EXTRA_CONFIG" >>"$etc/config.properties"; fi
  printf 'com.facebook.presto=WARN\n' >"$etc/log.properties"
  printf 'connector.name=tpch\ntpch.splits-per-node=4\n' >"$etc/catalog/tpch.properties"
}

info() { curl -fsS --max-time 2 "http://127.0.0.1:$port/v1/info" 2>/dev/null; }

# Ready when the coordinator has finished starting, sees an active worker
# (itself: a query sent before that fails with NO_NODES_AVAILABLE) and
# answers a query.
ready() {
  info | grep -q '"starting":false' || return 1
  curl -fsS --max-time 2 "http://127.0.0.1:$port/v1/cluster" 2>/dev/null | grep -q '"activeWorkers":[1-9]' || return 1
  python3 - "http://127.0.0.1:$port" <<'PY' >/dev/null 2>&1
import json, sys, urllib.request
base = sys.argv[1]
headers = {"X-Presto-User": "harness"}
def get(req):
    return json.load(urllib.request.urlopen(req, timeout=10))
r = get(urllib.request.Request(base + "/v1/statement", data=b"SELECT count(*) FROM tpch.tiny.region",
                               headers=headers, method="POST"))
while r.get("nextUri"):
    r = get(urllib.request.Request(r["nextUri"], headers=headers))
sys.exit(1 if r.get("error") else 0)
PY
}

pid_alive() { [ -f "$inst/pid" ] && kill -0 "$(cat "$inst/pid")" 2>/dev/null; }

up() {
  local jh; jh=$(java_home)
  fetch
  if pid_alive && ready; then echo "presto.sh: PrestoDB already up on 127.0.0.1:$port" >&2; return 0; fi
  if ! pid_alive && info >/dev/null; then die "port $port is taken by another process"; fi
  if ! pid_alive; then
    write_etc
    (
      cd "$inst"
      nohup "$jh/bin/java" -server "-Xmx$heap" -XX:+UseG1GC -XX:+ExitOnOutOfMemoryError \
        -Djdk.attach.allowAttachSelf=true -Dfile.encoding=UTF-8 \
        "-Dnode.data-dir=$inst/data" "-Dconfig=$inst/etc/config.properties" \
        "-Dlog.levels-file=$inst/etc/log.properties" "-Dcatalog.config-dir=$inst/etc/catalog" \
        "-Dplugin.dir=$dist/server/plugin" \
        -cp "$dist/server/lib/*" com.facebook.presto.server.PrestoServer \
        >"$inst/server.log" 2>&1 &
      echo $! >"$inst/pid"
    )
  fi
  local deadline=$(( $(date +%s) + ${PRESTO_START_TIMEOUT:-300} ))
  until ready; do
    if ! pid_alive; then tail -n 40 "$inst/server.log" >&2; die "PrestoDB on port $port exited during startup (log: $inst/server.log)"; fi
    [ "$(date +%s)" -lt "$deadline" ] || die "PrestoDB on port $port not ready after ${PRESTO_START_TIMEOUT:-300}s (log: $inst/server.log)"
    sleep 1
  done
  echo "presto.sh: PrestoDB $PRESTO_VERSION up on http://127.0.0.1:$port" >&2
}

down() {
  if pid_alive; then
    local pid; pid=$(cat "$inst/pid")
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$inst/pid"
  echo "presto.sh: PrestoDB on port $port stopped" >&2
}

case "${1:-}" in
  fetch) fetch ;;
  up) up ;;
  down) down ;;
  status) info || die "no PrestoDB answering on port $port" ;;
  cli) shift; fetch; exec "$(java_home)/bin/java" -jar "$dist/presto-cli.jar" "$@" ;;
  cli-jar) fetch; echo "$dist/presto-cli.jar" ;;
  jdbc-jar) fetch; echo "$dist/presto-jdbc.jar" ;;
  version) echo "$PRESTO_VERSION" ;;
  *) sed -n '2,27p' "$0"; exit 2 ;;
esac
