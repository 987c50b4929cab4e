"""Runs statements with PrestoDB's Python client (presto-python-client,
`import prestodb`) and prints what an application sees.

Input (stdin): {"server": URL, "user": U, "steps": [{"name": N, "sql": S, "tx": "commit"|"rollback"?}, ...]}
Steps without "tx" run in order on one cursor, so session state set by one
(USE, SET SESSION, PREPARE) carries to the next, as it does for the CLI.
A step with "tx" runs in a transaction of its own (the client's
isolation_level), ended by commit or rollback.
Output (stdout): {N: {"columns": [...], "rows": [row reprs, sorted unless ORDER BY]} | {"error": {...}}}
Used by the e2e tests to compare the proxy with a direct connection.
"""
import json
import os
import sys
from urllib.parse import urlparse

import prestodb
from prestodb.exceptions import PrestoQueryError
from prestodb.transaction import IsolationLevel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from pyrows import norm  # noqa: E402


def result(cur, sql):
    rows = [repr(norm(r)) for r in cur.fetchall()]
    if "ORDER BY" not in sql.upper():
        rows.sort()
    return {"columns": [[d[0], d[1]] for d in cur.description or []], "rows": rows}


def main():
    spec = json.load(sys.stdin)
    u = urlparse(spec["server"])

    def connect(**kw):
        return prestodb.dbapi.connect(host=u.hostname, port=u.port, http_scheme=u.scheme, user=spec["user"],
                                      catalog="tpch", schema="tiny", source="prestroid-e2e-python", **kw)

    cur = connect().cursor()
    out = {}
    for s in spec["steps"]:
        try:
            if "tx" in s:
                conn = connect(isolation_level=IsolationLevel.READ_COMMITTED)
                c = conn.cursor()
                c.execute(s["sql"])
                out[s["name"]] = result(c, s["sql"])
                conn.commit() if s["tx"] == "commit" else conn.rollback()
                conn.close()
                continue
            cur.execute(s["sql"])
            out[s["name"]] = result(cur, s["sql"])
        except PrestoQueryError as e:
            out[s["name"]] = {"error": {"name": e.error_name, "type": e.error_type,
                                        "code": e.error_code, "message": e.message}}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
