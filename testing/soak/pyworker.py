"""One Python `trino` client worker of the soak (testing/soak).

Reads one JSON request a line on stdin: {"id": I, "server": URL, "user": U,
"sql": S}; runs S with the Python client (its default retries: 3 attempts on
429/502/503/504 and connection errors) and writes one JSON line on stdout:
{"id": I, "ok": true, "rows": N, "sum": sha256 of the sorted row strings}
or {"id": I, "ok": false, "kind": "trino" | "http" | "other",
"error": "..."}. "trino" is a Trino-shaped error (TrinoQueryError: the
failed QueryResults' errorName and message), "http" an HTTP status the
client gave up on, "other" anything else the client raised.
"""
import hashlib
import json
import os
import sys
from urllib.parse import urlparse

import trino
from trino.exceptions import HttpError, TrinoQueryError

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from pyrows import norm  # noqa: E402


def run(req):
    u = urlparse(req["server"])
    conn = trino.dbapi.connect(host=u.hostname, port=u.port, http_scheme=u.scheme,
                               user=req.get("user", "soak-python"), source="prestroid-soak-python")
    try:
        cur = conn.cursor()
        cur.execute(req["sql"])
        rows = sorted(repr(norm(r)) for r in cur.fetchall())
        h = hashlib.sha256("\n".join(rows).encode()).hexdigest()
        return {"ok": True, "rows": len(rows), "sum": h}
    except TrinoQueryError as e:
        return {"ok": False, "kind": "trino", "error": "%s: %s" % (e.error_name, e.message)}
    except HttpError as e:
        return {"ok": False, "kind": "http", "error": "%s: %s" % (type(e).__name__, e)}
    except Exception as e:  # the client's own errors: connection refused, reset, a bad body
        return {"ok": False, "kind": "other", "error": "%s: %s" % (type(e).__name__, e)}
    finally:
        conn.close()


def main():
    for line in sys.stdin:
        req = json.loads(line)
        out = run(req)
        out["id"] = req["id"]
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
