#!/usr/bin/env bash
# `make run`: the local Trino plus the proxy in front of it. Ctrl-C (or
# SIGTERM) stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
TRINO_PORT=${TRINO_PORT:-8081}
LISTEN=${PRESTROID_LISTEN:-127.0.0.1:8080}
export TRINO_PORT

testing/trino/trino.sh up
proxy_pid=
cleanup() {
  trap - INT TERM EXIT
  [ -n "$proxy_pid" ] && kill -TERM "$proxy_pid" 2>/dev/null && wait "$proxy_pid" 2>/dev/null || true
  testing/trino/trino.sh down
}
trap cleanup INT TERM EXIT

./bin/prestroid serve --listen "$LISTEN" --upstream "http://127.0.0.1:$TRINO_PORT" "$@" &
proxy_pid=$!
cat <<MSG

Prestroid is listening on http://$LISTEN in front of Trino on http://127.0.0.1:$TRINO_PORT.
Connect any Trino client to the proxy, e.g.
  trino --server http://$LISTEN
  java -jar $(testing/trino/trino.sh cli-jar) --server http://$LISTEN
Ctrl-C stops the proxy and Trino.

MSG
wait "$proxy_pid"
