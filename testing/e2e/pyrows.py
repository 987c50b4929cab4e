"""Row normalization shared by the Python client scripts of the e2e tests
and the soak (testing/e2e/clients/pyclient.py, testing/e2e/presto/prestoclient.py,
testing/soak/pyworker.py), which import it by path."""


def norm(v):
    """Doubles to 10 significant digits, as the Go side does (e2e.NormFloat):
    Trino's and Presto's double sums vary in their last bits from run to run
    (summation order), in either path."""
    if isinstance(v, float):
        return float("%.10g" % v)
    if isinstance(v, (list, tuple)):
        return [norm(x) for x in v]
    if isinstance(v, dict):
        return {k: norm(x) for k, x in v.items()}
    return v
