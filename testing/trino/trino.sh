#!/usr/bin/env bash
# Local Trino harness: downloads a real Trino from Maven Central (with mvn),
# writes a minimal single-node etc/ and runs it on 127.0.0.1:$TRINO_PORT.
#
#   trino.sh fetch            download and unpack the server, plugins and CLI (cached)
#   trino.sh up               start an instance on $TRINO_PORT (default 8081); idempotent;
#                             returns once /v1/info says "starting": false
#   trino.sh down             stop the instance on $TRINO_PORT
#   trino.sh status           print the instance's /v1/info
#   trino.sh cli [ARGS...]    run the Trino CLI jar (Java 11+)
#   trino.sh cli-jar          print the path of the CLI jar
#   trino.sh cert             print the path of the instance's HTTPS certificate (PEM)
#   trino.sh wipe-lake        remove the stopped instance's hive/iceberg data and metastores
#
# Environment:
#   TRINO_PORT         HTTP port of the instance (default 8081); every port is an
#                      independent instance with its own etc/ and data dir.
#   PRESTROID_CACHE    cache directory (default ~/.cache/prestroid)
#   TRINO_JAVA_HOME    JDK for the server (default /usr/lib/jvm/temurin-25-jdk-amd64)
#   TRINO_HEAP         JVM heap (default 2G)
#   TRINO_EXTRA_CONFIG file whose lines are appended to config.properties
#   TRINO_ETC_OVERLAY  directory copied over the generated etc/ (resource groups,
#                      spooling manager, extra catalogs)
#   TRINO_RESOURCE_GROUPS a resource groups JSON file: Trino's file-based resource
#                      group manager (etc/resource-groups.properties) with a copy of it
#                      as etc/resource-groups.json; its selectors may select on the
#                      X-Trino-Resource-Estimate the proxy sends (selectorResourceEstimate:
#                      executionTime, cpuTime, peakMemory ranges). Default: none (Trino's
#                      built-in "global" group)
#   TRINO_START_TIMEOUT seconds to wait for startup (default 300)
#   TRINO_HTTPS_PORT   also serve HTTPS on this port, with a self-signed certificate
#                      for 127.0.0.1/localhost made with keytool (etc/keystore.p12);
#                      its PEM, for clients' trust stores, is printed by `trino.sh cert`
#   TRINO_PASSWORDS    "user:password[,user:password...]": file password authentication
#                      (PBKDF2 hashes in etc/password.db) on the HTTPS port; needs
#                      TRINO_HTTPS_PORT. Trino then refuses protocol requests on plain
#                      HTTP (403; /v1/info stays open): the readiness check runs over
#                      HTTPS as the first user
#   TRINO_CATALOGS     extra catalogs on the local file system, space or comma
#                      separated: "hive" and/or "iceberg" (default none). Their
#                      plugin zips are fetched once (cached); only instances that
#                      ask for them load them. Data and metastores live under the
#                      instance's data dir ($PRESTROID_CACHE/instances/PORT/data/lake)
#                      and survive restarts; `trino.sh wipe-lake` removes them.
#   TRINO_HIVE_MAX_PARTITIONS hive.max-partitions-per-writers of the hive catalog
#                      (default 2000: TPC-DS fact tables partitioned by date key
#                      have ~1,830 partitions)
set -euo pipefail

# The one place the Trino version is written. 483 is not served by the Maven
# registry reachable here (nor 477-482): 476 is the newest release whose
# server tarball and plugin zips are.
TRINO_VERSION=476

cache=${PRESTROID_CACHE:-$HOME/.cache/prestroid}
dist=$cache/trino/$TRINO_VERSION
port=${TRINO_PORT:-8081}
inst=$cache/instances/$port
java_home=${TRINO_JAVA_HOME:-/usr/lib/jvm/temurin-25-jdk-amd64}
heap=${TRINO_HEAP:-2G}
lake=$inst/data/lake
catalogs=$(echo "${TRINO_CATALOGS:-}" | tr ',' ' ')
for c in $catalogs; do
  case "$c" in hive|iceberg) ;; *) echo "trino.sh: TRINO_CATALOGS: unknown catalog '$c' (want hive and/or iceberg)" >&2; exit 2 ;; esac
done

die() { echo "trino.sh: $*" >&2; exit 1; }

need_java() {
  [ -x "$java_home/bin/java" ] || die "JDK 25 not found at $java_home (set TRINO_JAVA_HOME): Trino $TRINO_VERSION needs Java 24.0.1 or newer"
}

mvn_copy() { # artifact outdir
  local art=$1 out=$2
  mkdir -p "$out"
  if ! mvn -B -q dependency:copy -Dartifact="$art" -DoutputDirectory="$out" -Dmdep.useBaseVersion=true >"$cache/mvn.log" 2>&1; then
    cat "$cache/mvn.log" >&2
    die "could not download $art with mvn"
  fi
}

fetch() {
  need_java
  mkdir -p "$cache"
  if [ -f "$dist/.complete" ]; then return 0; fi
  command -v mvn >/dev/null || die "mvn is needed to download Trino"
  local dl=$cache/downloads
  echo "trino.sh: downloading Trino $TRINO_VERSION with mvn (once; cached in $cache)" >&2
  mvn_copy "io.trino:trino-server-core:$TRINO_VERSION:tar.gz" "$dl"
  mvn_copy "io.trino:trino-tpch:$TRINO_VERSION:zip" "$dl"
  mvn_copy "io.trino:trino-memory:$TRINO_VERSION:zip" "$dl"
  mvn_copy "io.trino:trino-cli:$TRINO_VERSION:jar:executable" "$dl"
  rm -rf "$dist.tmp" && mkdir -p "$dist.tmp"
  tar -xzf "$dl/trino-server-core-$TRINO_VERSION.tar.gz" -C "$dist.tmp"
  local srv=$dist.tmp/trino-server-core-$TRINO_VERSION
  [ -d "$srv" ] || srv=$(find "$dist.tmp" -maxdepth 1 -mindepth 1 -type d | head -n 1)
  mv "$srv" "$dist.tmp/server"
  for p in tpch memory; do
    unzip -q "$dl/trino-$p-$TRINO_VERSION.zip" -d "$dist.tmp/$p"
    mv "$dist.tmp/$p/trino-$p-$TRINO_VERSION" "$dist.tmp/server/plugin/$p"
    rmdir "$dist.tmp/$p"
  done
  # tpcds: its plugin zip is not served here at any release (nor its jar at
  # this one), so take the plugin directory from the full server tarball,
  # which bundles it, and drop the tarball afterwards.
  mvn_copy "io.trino:trino-server:$TRINO_VERSION:tar.gz" "$dl"
  # (Its entries are hard links into lib/ and other plugins: unpack it whole.)
  tar -xzf "$dl/trino-server-$TRINO_VERSION.tar.gz" -C "$dist.tmp"
  mv "$dist.tmp/trino-server-$TRINO_VERSION/plugin/tpcds" "$dist.tmp/server/plugin/tpcds"
  rm -rf "$dist.tmp/trino-server-$TRINO_VERSION" "$dl/trino-server-$TRINO_VERSION.tar.gz"
  cp "$dl/trino-cli-$TRINO_VERSION-executable.jar" "$dist.tmp/trino-cli.jar"
  rm -rf "$dist" && mv "$dist.tmp" "$dist"
  touch "$dist/.complete"
}

# fetch_plugin NAME: the optional connector plugin trino-NAME (zip from
# Maven), unpacked once under $dist/extra/NAME; instances that ask for it
# load it through their own plugin dir (see write_lake_catalogs), so the
# others keep starting with the base plugins only.
fetch_plugin() {
  local p=$1 dl=$cache/downloads
  [ -f "$dist/extra/$p/.complete" ] && return 0
  command -v mvn >/dev/null || die "mvn is needed to download the $p plugin"
  [ -f "$dl/trino-$p-$TRINO_VERSION.zip" ] || mvn_copy "io.trino:trino-$p:$TRINO_VERSION:zip" "$dl"
  rm -rf "$dist/extra/$p.tmp" "$dist/extra/$p" && mkdir -p "$dist/extra/$p.tmp"
  unzip -q "$dl/trino-$p-$TRINO_VERSION.zip" -d "$dist/extra/$p.tmp"
  mv "$dist/extra/$p.tmp/trino-$p-$TRINO_VERSION" "$dist/extra/$p"
  rmdir "$dist/extra/$p.tmp"
  touch "$dist/extra/$p/.complete"
}

# write_lake_catalogs ETC: the hive and iceberg catalogs of TRINO_CATALOGS,
# both on the local file system rooted at $lake (locations local:///...),
# each with a file metastore whose directory also holds its tables
# ($lake/hive/SCHEMA/TABLE, $lake/iceberg/SCHEMA/TABLE-UUID); iceberg's is
# catalog type testing_file_metastore, the file metastore Trino's own
# tests use (hive_metastore wants a Thrift URI). Tables are Parquet with
# ZSTD. The instance gets its own plugin dir: links to the base plugins
# plus the extra ones.
write_lake_catalogs() {
  local etc=$1
  [ -n "$catalogs" ] || return 0
  mkdir -p "$etc/plugin"
  for d in "$dist/server/plugin"/*; do ln -s "$d" "$etc/plugin/"; done
  echo "plugin.dir=$etc/plugin" >>"$etc/config.properties"
  for c in $catalogs; do
    ln -sfn "$dist/extra/$c" "$etc/plugin/$c"
    mkdir -p "$lake/$c"
  done
  if [[ " $catalogs " == *" hive "* ]]; then
    cat >"$etc/catalog/hive.properties" <<EOF
connector.name=hive
hive.metastore=file
hive.metastore.catalog.dir=local:///hive
fs.native-local.enabled=true
local.location=$lake
hive.storage-format=PARQUET
hive.compression-codec=ZSTD
hive.max-partitions-per-writers=${TRINO_HIVE_MAX_PARTITIONS:-2000}
EOF
  fi
  if [[ " $catalogs " == *" iceberg "* ]]; then
    cat >"$etc/catalog/iceberg.properties" <<EOF
connector.name=iceberg
iceberg.catalog.type=testing_file_metastore
hive.metastore.catalog.dir=local:///iceberg
fs.native-local.enabled=true
local.location=$lake
iceberg.file-format=PARQUET
iceberg.compression-codec=ZSTD
EOF
  fi
}

write_etc() {
  local etc=$inst/etc
  # Half the heap for queries leaves Trino's default 30% headroom free.
  local heap_mb
  case "$heap" in
    *[gG]) heap_mb=$(( ${heap%[gG]} * 1024 )) ;;
    *[mM]) heap_mb=${heap%[mM]} ;;
    *) die "TRINO_HEAP=$heap: want e.g. 2G or 1536M" ;;
  esac
  local query_mem=$(( heap_mb / 2 ))
  rm -rf "$etc" && mkdir -p "$etc/catalog" "$inst/data"
  cat >"$etc/node.properties" <<EOF
node.environment=prestroid
node.id=prestroid-$port
node.data-dir=$inst/data
node.internal-address=127.0.0.1
EOF
  cat >"$etc/jvm.config" <<EOF
-server
-Xmx$heap
-XX:+UseG1GC
-XX:+ExitOnOutOfMemoryError
-Djdk.attach.allowAttachSelf=true
-Djdk.nio.maxCachedBufferSize=2000000
-Dfile.encoding=UTF-8
--add-modules=jdk.incubator.vector
--enable-native-access=ALL-UNNAMED
--sun-misc-unsafe-memory-access=allow
-XX:+EnableDynamicAgentLoading
EOF
  cat >"$etc/config.properties" <<EOF
coordinator=true
node-scheduler.include-coordinator=true
http-server.http.port=$port
discovery.uri=http://127.0.0.1:$port
query.max-memory=${query_mem}MB
query.max-memory-per-node=${query_mem}MB
EOF
  if [ -n "${TRINO_HTTPS_PORT:-}" ]; then write_https "$etc"; fi
  if [ -n "${TRINO_EXTRA_CONFIG:-}" ]; then cat "$TRINO_EXTRA_CONFIG" >>"$etc/config.properties"; fi
  echo "io.trino=WARN" >"$etc/log.properties"
  printf 'connector.name=tpch\ntpch.splits-per-node=4\n' >"$etc/catalog/tpch.properties"
  printf 'connector.name=tpcds\ntpcds.splits-per-node=4\n' >"$etc/catalog/tpcds.properties"
  printf 'connector.name=memory\nmemory.max-data-per-node=512MB\n' >"$etc/catalog/memory.properties"
  write_lake_catalogs "$etc"
  if [ -n "${TRINO_RESOURCE_GROUPS:-}" ]; then
    [ -f "$TRINO_RESOURCE_GROUPS" ] || die "TRINO_RESOURCE_GROUPS=$TRINO_RESOURCE_GROUPS: no such file"
    cp "$TRINO_RESOURCE_GROUPS" "$etc/resource-groups.json"
    printf 'resource-groups.configuration-manager=file\nresource-groups.config-file=%s\n' "$etc/resource-groups.json" >"$etc/resource-groups.properties"
  fi
  if [ -n "${TRINO_ETC_OVERLAY:-}" ]; then cp -r "$TRINO_ETC_OVERLAY"/. "$etc/"; fi
}

# HTTPS (TRINO_HTTPS_PORT) with a fresh self-signed keystore, and file
# password authentication (TRINO_PASSWORDS) on it.
write_https() {
  local etc=$1 pass
  pass=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
  "$java_home/bin/keytool" -genkeypair -noprompt -alias trino -keyalg RSA -keysize 2048 -validity 30 \
    -dname "CN=localhost" -ext "SAN=ip:127.0.0.1,dns:localhost" \
    -storetype PKCS12 -keystore "$etc/keystore.p12" -storepass "$pass" -keypass "$pass" >/dev/null 2>&1 \
    || die "keytool could not make a keystore"
  "$java_home/bin/keytool" -exportcert -rfc -alias trino -keystore "$etc/keystore.p12" -storepass "$pass" \
    >"$etc/https-cert.pem" 2>/dev/null || die "keytool could not export the certificate"
  cat >>"$etc/config.properties" <<EOF
http-server.https.enabled=true
http-server.https.port=$TRINO_HTTPS_PORT
http-server.https.keystore.path=$etc/keystore.p12
http-server.https.keystore.key=$pass
internal-communication.shared-secret=$(head -c 32 /dev/urandom | base64 | tr -d '\n')
EOF
  if [ -n "${TRINO_PASSWORDS:-}" ]; then
    # Trino's PBKDF2 format: user:iterations:salt-hex:hash-hex, checked with
    # PBKDF2WithHmacSHA1 (io.trino.plugin.password.file.EncryptionUtil).
    TRINO_PASSWORDS=$TRINO_PASSWORDS python3 - >"$etc/password.db" <<'PY'
import hashlib, os
for pair in os.environ["TRINO_PASSWORDS"].split(","):
    user, _, password = pair.partition(":")
    salt = os.urandom(16)
    digest = hashlib.pbkdf2_hmac("sha1", password.encode(), salt, 1000, 32)
    print("%s:1000:%s:%s" % (user, salt.hex(), digest.hex()))
PY
    printf 'password-authenticator.name=file\nfile.password-file=%s\n' "$etc/password.db" >"$etc/password-authenticator.properties"
    echo "http-server.authentication.type=PASSWORD" >>"$etc/config.properties"
  fi
}

info() { curl -fsS --max-time 2 "http://127.0.0.1:$port/v1/info" 2>/dev/null; }

# Ready means started and able to run a query on a connector: right after
# "starting": false the node may not yet have announced itself ("No nodes
# available"), and a system table answers before the tpch catalog's node
# set is known (splits then fail with "nodes is empty").
#
# With TRINO_PASSWORDS, Trino answers 403 on plain HTTP ("Authentication
# over HTTP is not enabled"; /v1/info stays open), so the query goes over
# HTTPS as the first user, trusting the instance's own certificate.
ready() {
  info | grep -q '"starting":false' || return 1
  local base="http://127.0.0.1:$port" auth="" ca=""
  if [ -n "${TRINO_PASSWORDS:-}" ] && [ -n "${TRINO_HTTPS_PORT:-}" ]; then
    base="https://127.0.0.1:$TRINO_HTTPS_PORT" auth=${TRINO_PASSWORDS%%,*} ca=$inst/etc/https-cert.pem
  fi
  python3 - "$base" "$auth" "$ca" <<'PY' >/dev/null 2>&1
import base64, json, ssl, sys, urllib.request
base, auth, ca = sys.argv[1:4]
headers = {"X-Trino-User": auth.partition(":")[0] or "harness"}
if auth:
    headers["Authorization"] = "Basic " + base64.b64encode(auth.encode()).decode()
ctx = ssl.create_default_context(cafile=ca) if ca else None
def get(req):
    return json.load(urllib.request.urlopen(req, timeout=10, context=ctx))
r = get(urllib.request.Request(base + "/v1/statement", data=b"SELECT count(*) FROM tpch.tiny.region",
                               headers=headers, method="POST"))
while r.get("nextUri"):
    r = get(urllib.request.Request(r["nextUri"], headers=headers))
sys.exit(1 if r.get("error") else 0)
PY
}

pid_alive() { [ -f "$inst/pid" ] && kill -0 "$(cat "$inst/pid")" 2>/dev/null; }

up() {
  need_java
  fetch
  for c in $catalogs; do fetch_plugin "$c"; done
  if pid_alive && ready; then echo "trino.sh: Trino already up on 127.0.0.1:$port" >&2; return 0; fi
  if ! pid_alive && info >/dev/null; then die "port $port is taken by another process"; fi
  if ! pid_alive; then
    write_etc
    mkdir -p "$inst"
    (
      cd "$inst"
      export JAVA_HOME=$java_home PATH=$java_home/bin:$PATH
      nohup "$dist/server/bin/launcher" run --etc-dir="$inst/etc" --data-dir="$inst/data" \
        >"$inst/server.log" 2>&1 &
      echo $! >"$inst/pid"
    )
  fi
  local deadline=$(( $(date +%s) + ${TRINO_START_TIMEOUT:-300} ))
  until ready; do
    if ! pid_alive; then tail -n 40 "$inst/server.log" >&2; die "Trino on port $port exited during startup (log: $inst/server.log)"; fi
    [ "$(date +%s)" -lt "$deadline" ] || die "Trino on port $port not ready after ${TRINO_START_TIMEOUT:-300}s (log: $inst/server.log)"
    sleep 1
  done
  echo "trino.sh: Trino $TRINO_VERSION up on http://127.0.0.1:$port" >&2
}

down() {
  if pid_alive; then
    local pid; pid=$(cat "$inst/pid")
    pkill -TERM -P "$pid" 2>/dev/null || true
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  # The launcher execs java; make sure nothing of this instance survives.
  pkill -KILL -f -- "--data-dir=$inst/data" 2>/dev/null || true
  rm -f "$inst/pid"
  echo "trino.sh: Trino on port $port stopped" >&2
}

case "${1:-}" in
  fetch) fetch; for c in $catalogs; do fetch_plugin "$c"; done ;;
  up) up ;;
  down) down ;;
  status) info || die "no Trino answering on port $port" ;;
  cli) shift; fetch; exec java -jar "$dist/trino-cli.jar" "$@" ;;
  cli-jar) fetch; echo "$dist/trino-cli.jar" ;;
  cert) [ -f "$inst/etc/https-cert.pem" ] || die "no HTTPS certificate for port $port (TRINO_HTTPS_PORT)"; echo "$inst/etc/https-cert.pem" ;;
  version) echo "$TRINO_VERSION" ;;
  wipe-lake) ! pid_alive || die "stop the instance on port $port first"; rm -rf "$lake"; echo "trino.sh: removed $lake" >&2 ;;
  *) sed -n '2,47p' "$0"; exit 2 ;;
esac
