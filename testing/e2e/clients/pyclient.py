"""Runs queries with the Python `trino` client (PyPI) and prints the results.

Input (stdin): {"server": URL, "user": U, "queries": [{"name": N, "sql": S}, ...]}
Output (stdout): {N: {"columns": [...], "rows": [sorted row strings]} | {"error": {...}}}
Used by the e2e tests to compare the proxy with direct Trino.
"""
import json
import os
import sys
from urllib.parse import urlparse

import trino
from trino.exceptions import TrinoQueryError

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from pyrows import norm  # noqa: E402


def main():
    spec = json.load(sys.stdin)
    u = urlparse(spec["server"])
    conn = trino.dbapi.connect(host=u.hostname, port=u.port, http_scheme=u.scheme,
                               user=spec.get("user", "e2e-python"), source="prestroid-e2e-python")
    out = {}
    for q in spec["queries"]:
        cur = conn.cursor()
        try:
            cur.execute(q["sql"])
            rows = cur.fetchall()
            cols = [d[0] for d in cur.description]
            out[q["name"]] = {"columns": cols, "rows": sorted(repr(norm(r)) for r in rows)}
        except TrinoQueryError as e:
            out[q["name"]] = {"error": {"name": e.error_name, "type": e.error_type,
                                        "code": e.error_code, "message": e.message}}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
