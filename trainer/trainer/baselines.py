"""Baselines of docs/design.md §3, all fitted on the training split, tuned on the
validation split, predicting ln(CPU seconds) for any list of queries.

Each takes the query dicts of queries.jsonl (written by the Go featurizer:
nothing here parses plans) and the normalization (lo, hi).

    trino      Trino's optimizer estimate: sum of the plan's cpuCost, mapped
               to CPU time by isotonic regression (what trino-lb routes on)
    logbin     log binning on O-T-P node count, B tuned on validation
    svr        SVR on SQL-text and plan-operator counts, kernel tuned
    tfidf_gbr  SQL-text TF-IDF + gradient boosting (presto-query-predictor style)
    mscn       MSCN-style set model: table, join and predicate sets
    wcnn       word-CNN over SQL tokens (embedding 100, widths 3/4/5)
"""
import re
from collections import Counter

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .metrics import normalize

ALL = ("trino", "trino_max", "logbin", "svr", "tfidf_gbr", "mscn", "wcnn")


def _y(qs):
    return np.array([q["ln_cpu_s"] for q in qs], np.float64)


def _val_mse(p, qs, lo, hi):
    return float(np.mean((normalize(p, lo, hi) - normalize(_y(qs), lo, hi)) ** 2))


# ---------------------------------------------------------------- trino

def trino(train, val, test, lo, hi, seed=1, field="trino_cpu_cost"):
    """Isotonic (monotone increasing) map from ln(1 + sum of the plan nodes'
    cpuCost) to ln CPU s. Queries without any known estimate get the
    training mean. field="trino_cpu_cost_max" uses the largest single
    estimate instead (the root's, if the estimates are cumulative)."""
    from sklearn.isotonic import IsotonicRegression
    known = [q for q in train if q["trino_cost_known"] > 0]
    mean = float(_y(train).mean())
    if len(known) < 2:
        return np.full(len(test), mean), {"note": "fewer than 2 training queries with estimates"}
    x = np.log1p([q[field] for q in known])
    iso = IsotonicRegression(increasing=True, out_of_bounds="clip").fit(x, _y(known))
    pred = np.array([iso.predict([np.log1p(q[field])])[0] if q["trino_cost_known"] > 0 else mean
                     for q in test])
    return pred, {"with_estimates": f"{sum(q['trino_cost_known'] > 0 for q in test)}/{len(test)}"}


# ---------------------------------------------------------------- log binning

def logbin(train, val, test, lo, hi, seed=1, choices=(1, 2, 3, 5, 8, 10, 15, 20, 30, 50, 100, 1000)):
    """B log-spaced bins over the training node counts; a bin predicts the
    mean ln CPU of its training queries (empty bins: nearest non-empty)."""
    xs = np.log([q["otp_nodes"] for q in train])
    y = _y(train)

    def fit(B):
        edges = np.linspace(xs.min(), xs.max() + 1e-9, B + 1)
        idx = np.clip(np.searchsorted(edges, xs, side="right") - 1, 0, B - 1)
        means = np.full(B, np.nan)
        for b in range(B):
            if (idx == b).any():
                means[b] = y[idx == b].mean()
        full = np.nonzero(~np.isnan(means))[0]
        for b in range(B):               # empty bin -> nearest non-empty bin
            if np.isnan(means[b]):
                means[b] = means[full[np.argmin(np.abs(full - b))]]

        def predict(qs):
            x = np.log([q["otp_nodes"] for q in qs])
            return means[np.clip(np.searchsorted(edges, x, side="right") - 1, 0, B - 1)]
        return predict

    best = min(choices, key=lambda B: _val_mse(fit(B)(val), val, lo, hi)) if val else 10
    return fit(best)(test), {"B": best}


# ---------------------------------------------------------------- SVR

SQL_FEATURES = ("select", "join", "where", "group by", "order by", "having", "union", "intersect", "except",
                "exists", " in ", "like", "between", "case", "over", "with", "distinct", "limit", " and ", " or ",
                "sum(", "count(", "avg(", "min(", "max(")


def _sql_counts(sql):
    s = " ".join(sql.lower().replace('"', "").split())
    return [s.count(k) for k in SQL_FEATURES] + [len(s) / 100.0]


def _count_features(qs, ops):
    rows = []
    for q in qs:
        plan = [q["ops"].get(o, 0) for o in ops]
        rows.append(_sql_counts(q["sql"]) + plan + [len(q["tables"]), len(q["preds"]), len(q["joins"]),
                                                     q["otp_nodes"], q["max_depth"]])
    return np.log1p(np.array(rows, np.float64))


def svr(train, val, test, lo, hi, seed=1):
    """The paper's SVR (Ganapathi et al.): query-text and plan-operator
    instance counts (no cardinalities), kernel and C tuned on validation."""
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVR
    ops = sorted({o for q in train for o in q["ops"]})
    sc = StandardScaler().fit(_count_features(train, ops))
    X = lambda qs: sc.transform(_count_features(qs, ops))
    yt = normalize(_y(train), lo, hi)
    grid = [dict(kernel="rbf", C=c) for c in (0.1, 1, 10)] + \
           [dict(kernel="poly", degree=d, C=c) for d in (2, 3, 4) for c in (0.1, 1)] + \
           [dict(kernel="sigmoid", C=c) for c in (0.1, 1)] + [dict(kernel="linear", C=c) for c in (0.1, 1)]
    den = lambda p: lo + np.asarray(p) * (hi - lo)
    best, best_mse = grid[0], float("inf")
    for g in grid:
        m = SVR(epsilon=0.01, **g).fit(X(train), yt)
        mse = _val_mse(den(m.predict(X(val))), val, lo, hi) if val else 0
        if mse < best_mse:
            best, best_mse = g, mse
    m = SVR(epsilon=0.01, **best).fit(X(train), yt)
    return den(m.predict(X(test))), dict(best)


# ---------------------------------------------------------------- TF-IDF + GBR

def _sql_tokens(sql):
    """Lower-cased SQL words and symbols, numbers and strings folded."""
    sql = re.sub(r"'[^']*'", " <str> ", sql.lower())
    sql = re.sub(r"\b\d+(\.\d+)?\b", " <num> ", sql)
    return re.findall(r"<str>|<num>|[a-z_][a-z0-9_]*|[^\sa-z0-9_]", sql.replace('"', " "))


def tfidf_gbr(train, val, test, lo, hi, seed=1):
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.ensemble import GradientBoostingRegressor
    vec = TfidfVectorizer(analyzer=_sql_tokens, ngram_range=(1, 1), max_features=3000, sublinear_tf=True)
    Xt = vec.fit_transform([q["sql"] for q in train])
    yt = _y(train)
    best, best_mse, best_model = None, float("inf"), None
    for n in (100, 300):
        for depth in (2, 3):
            m = GradientBoostingRegressor(n_estimators=n, max_depth=depth, learning_rate=0.05, subsample=0.8,
                                          random_state=seed).fit(Xt, yt)
            mse = _val_mse(m.predict(vec.transform([q["sql"] for q in val])), val, lo, hi) if val else 0
            if mse < best_mse:
                best, best_mse, best_model = dict(n_estimators=n, max_depth=depth), mse, m
    return best_model.predict(vec.transform([q["sql"] for q in test])), best


# ---------------------------------------------------------------- neural baselines

def _fit_torch(model, batches_train, batches_val, n_train, y_train, y_val, lr, batch, epochs, patience, seed,
               bn_min=1):
    """Adam + Huber, early stopping on validation MSE; returns the model at
    its best epoch. batches_*(idx) -> model output (n, 1)."""
    import copy
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    yt = torch.tensor(y_train, dtype=torch.float32)
    best, state, bad = float("inf"), None, 0
    for _ in range(epochs):
        model.train()
        perm = torch.randperm(n_train, generator=gen)
        for lo_ in range(0, n_train, batch):
            idx = perm[lo_:lo_ + batch]
            if len(idx) <= bn_min:
                continue
            loss = F.huber_loss(batches_train(idx).reshape(-1), yt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            pv = batches_val().reshape(-1).numpy() if len(y_val) else None
        mse = float(np.mean((pv - y_val) ** 2)) if pv is not None else 0.0
        if mse < best - 1e-7:
            best, state, bad = mse, copy.deepcopy(model.state_dict()), 0
        else:
            bad += 1
            if bad >= patience:
                break
    if state is not None:
        model.load_state_dict(state)
    model.eval()
    return model


class SetMLP(nn.Module):
    def __init__(self, fin, h):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(fin, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU())

    def forward(self, x, mask):                        # x (B, M, fin), mask (B, M)
        h = self.net(x) * mask.unsqueeze(-1)
        return h.sum(1) / mask.sum(1, keepdim=True).clamp(min=1)


class MSCN(nn.Module):
    """Kipf et al.'s multi-set network, for cost: table, join and predicate
    sets through small MLPs, averaged per set, concatenated, then an MLP."""

    def __init__(self, ft, fj, fp, h=64, dropout=0.05):
        super().__init__()
        self.t, self.j, self.p = SetMLP(ft, h), SetMLP(fj, h), SetMLP(fp, h)
        self.out = nn.Sequential(nn.Linear(3 * h, h), nn.ReLU(), nn.Dropout(dropout), nn.Linear(h, 1))

    def forward(self, t, tm, j, jm, p, pm):
        return torch.sigmoid(self.out(torch.cat([self.t(t, tm), self.j(j, jm), self.p(p, pm)], -1)))


def _load_vectors(path):
    vecs = {}
    with open(path) as f:
        dim = int(f.readline().split()[1])
        for line in f:
            parts = line.split()
            if len(parts) == dim + 1:
                vecs[parts[0]] = np.array(parts[1:], np.float32)
    return vecs, dim


# quick=True (tests): a few epochs of the neural baselines, short SQL
QUICK = {"mscn_epochs": 10, "wcnn_epochs": 2, "wcnn_max_len": 128}


def mscn(train, val, test, lo, hi, seed=1, vectors=None, quick=False):
    """Sets: tables (one-hot), joins (one-hot operator + mean token vector of
    the criteria), predicates (mean token vector, as the Tree-CNN's
    clause encoding). 0-padded to the largest set."""
    torch.manual_seed(seed)
    vecs, dim = _load_vectors(vectors)
    tables = {t: i for i, t in enumerate(sorted({t for q in train for t in q["tables"]}))}
    jops = {o: i for i, o in enumerate(sorted({j["op"] for q in train for j in q["joins"]}))}

    def mean_vec(tokens):
        vs = [vecs[t] for t in tokens if t in vecs]
        return np.mean(vs, 0) if vs else np.zeros(dim, np.float32)

    def encode(qs):
        M = lambda f: max(1, max(len(f(q)) for q in qs))
        mt, mj, mp = M(lambda q: q["tables"]), M(lambda q: q["joins"]), M(lambda q: q["preds"])
        T = np.zeros((len(qs), mt, len(tables) + 1), np.float32); Tm = np.zeros((len(qs), mt), np.float32)
        J = np.zeros((len(qs), mj, len(jops) + 1 + dim), np.float32); Jm = np.zeros((len(qs), mj), np.float32)
        P = np.zeros((len(qs), mp, dim), np.float32); Pm = np.zeros((len(qs), mp), np.float32)
        for i, q in enumerate(qs):
            for k, t in enumerate(q["tables"]):
                T[i, k, tables.get(t, len(tables))] = 1; Tm[i, k] = 1
            for k, j in enumerate(q["joins"]):
                J[i, k, jops.get(j["op"], len(jops))] = 1
                J[i, k, len(jops) + 1:] = mean_vec(j.get("tokens") or []); Jm[i, k] = 1
            for k, p in enumerate(q["preds"]):
                P[i, k] = mean_vec(p); Pm[i, k] = 1
        return [torch.from_numpy(a) for a in (T, Tm, J, Jm, P, Pm)]

    tr, va, te = encode(train), encode(val) if val else None, encode(test)
    model = MSCN(len(tables) + 1, len(jops) + 1 + dim, dim)
    _fit_torch(model, lambda idx: model(*(a[idx] for a in tr)), lambda: model(*va),
               len(train), normalize(_y(train), lo, hi).astype(np.float32),
               normalize(_y(val), lo, hi).astype(np.float32) if val else np.zeros(0),
               lr=1e-3, batch=64, epochs=QUICK["mscn_epochs"] if quick else 200, patience=20, seed=seed, bn_min=0)
    with torch.no_grad():
        p = model(*te).reshape(-1).numpy()
    return lo + np.clip(p, 0, 1) * (hi - lo), {"hidden": 64, "lr": 1e-3}


class WCNN(nn.Module):
    """Zolaktaf et al.'s word-CNN: embedding 100, convolutions of widths
    3/4/5, max-pooled, dropout 0.5, one output."""

    def __init__(self, vocab, emb=100, kernels=100, widths=(3, 4, 5), dropout=0.5):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb, padding_idx=0)
        self.convs = nn.ModuleList(nn.Conv1d(emb, kernels, w, padding=w // 2) for w in widths)
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(kernels * len(widths), 1)

    def forward(self, ids):                            # (B, L)
        x = self.emb(ids).transpose(1, 2)              # (B, emb, L)
        h = torch.cat([F.relu(c(x)).max(-1).values for c in self.convs], -1)
        return torch.sigmoid(self.out(self.drop(h)))


def wcnn(train, val, test, lo, hi, seed=1, max_len=512, quick=False):
    """SQL truncated to max_len tokens (CPU budget; most TPC queries fit)."""
    torch.manual_seed(seed)
    if quick:
        max_len = QUICK["wcnn_max_len"]
    counts = Counter(t for q in train for t in _sql_tokens(q["sql"]))
    vocab = {t: i + 2 for i, t in enumerate(sorted(counts))}   # 0 pad, 1 unknown

    def encode(qs):
        seqs = [[vocab.get(t, 1) for t in _sql_tokens(q["sql"])][:max_len] for q in qs]
        L = max(5, max(len(s) for s in seqs))
        ids = np.zeros((len(qs), L), np.int64)
        for i, s in enumerate(seqs):
            ids[i, :len(s)] = s
        return torch.from_numpy(ids)

    tr, va, te = encode(train), encode(val) if val else None, encode(test)
    model = WCNN(len(vocab) + 2)
    _fit_torch(model, lambda idx: model(tr[idx]), lambda: model(va),
               len(train), normalize(_y(train), lo, hi).astype(np.float32),
               normalize(_y(val), lo, hi).astype(np.float32) if val else np.zeros(0),
               lr=1e-3, batch=16, epochs=QUICK["wcnn_epochs"] if quick else 30, patience=8, seed=seed, bn_min=0)
    with torch.no_grad():
        p = model(te).reshape(-1).numpy()
    return lo + np.clip(p, 0, 1) * (hi - lo), {"embedding": 100, "kernels": 100, "widths": [3, 4, 5],
                                               "vocab": len(vocab), "max_len": max_len}


def trino_max(train, val, test, lo, hi, seed=1):
    return trino(train, val, test, lo, hi, seed, field="trino_cpu_cost_max")


FUNCS = {"trino": trino, "trino_max": trino_max, "logbin": logbin, "svr": svr, "tfidf_gbr": tfidf_gbr, "mscn": mscn, "wcnn": wcnn}
