"""Runs queries with the Python `trino` client (PyPI) and prints the results.

Input (stdin): {"server": URL, "user": U, "queries": [{"name": N, "sql": S}, ...]}
Output (stdout): {N: {"columns": [...], "rows": [sorted row strings]} | {"error": {...}}}
Used by the e2e tests to compare the proxy with direct Trino.
"""
import json
import sys
from urllib.parse import urlparse

import trino
from trino.exceptions import TrinoQueryError


def norm(v):
    """Doubles to 10 significant digits: Trino's double sums vary in their
    last bits from run to run (summation order), in either path."""
    if isinstance(v, float):
        return float("%.10g" % v)
    if isinstance(v, (list, tuple)):
        return [norm(x) for x in v]
    if isinstance(v, dict):
        return {k: norm(x) for k, x in v.items()}
    return v


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
