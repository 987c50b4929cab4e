"""Word2Vec predicate token vectors (docs/design.md §2.3, the paper's §4.2).

Input: one sentence per line (a PRED node's tokens: columns and comparison
operators, values stripped), written by `prestroid train` (step featurize).
Output: word2vec text format (`<count> <dim>` then `<token> <f1> ... <fdim>`),
read by estimator.LoadWord2VecText.

    python -m trainer.w2v --corpus corpus.txt --out tokens.vec --size 100
"""
import argparse
import json
import os
import sys
from collections import Counter

from gensim.models import Word2Vec


def train_vectors(sentences, size, window=5, min_count=10, sg=True, seed=1, epochs=None):
    """Train Word2Vec; returns (KeyedVectors, effective min_count, note).

    min_count is lowered for tiny corpora: when it would drop more than half
    of the distinct tokens, use the largest value that keeps at least half of
    them (at least 1). The note says so.
    """
    counts = Counter(t for s in sentences for t in s)
    note = ""
    eff = min_count
    if counts:
        kept = sum(1 for c in counts.values() if c >= eff)
        if kept < len(counts) / 2:
            # largest threshold that keeps >= half the distinct tokens
            freqs = sorted(counts.values(), reverse=True)
            eff = max(1, min(min_count, freqs[(len(freqs) - 1) // 2]))
            note = (f"min_count lowered from {min_count} to {eff}: the corpus has {len(sentences)} "
                    f"sentences and {len(counts)} distinct tokens, {kept} of them seen >= {min_count} times")
    if epochs is None:
        # small corpora need more passes to move the vectors at all
        epochs = 5 if len(sentences) > 100_000 else 50
    model = Word2Vec(sentences=sentences, vector_size=size, window=window, min_count=eff,
                     sg=1 if sg else 0, seed=seed, workers=1, epochs=epochs)
    return model.wv, eff, note


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--size", type=int, default=100, help="vector size Pf")
    ap.add_argument("--window", type=int, default=5)
    ap.add_argument("--min-count", type=int, default=10)
    ap.add_argument("--cbow", action="store_true", help="CBOW instead of skip-gram")
    ap.add_argument("--epochs", type=int, default=None, help="default: 50 for small corpora, 5 above 100k sentences")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    with open(a.corpus) as f:
        sentences = [line.split() for line in f if line.strip()]
    if not sentences:
        sys.exit("w2v: empty corpus " + a.corpus)
    wv, eff, note = train_vectors(sentences, a.size, a.window, a.min_count, not a.cbow, a.seed, a.epochs)
    if note:
        print("w2v: " + note, file=sys.stderr)
    tmp = a.out + ".tmp"
    wv.save_word2vec_format(tmp, binary=False)
    os.replace(tmp, a.out)
    info = {"sentences": len(sentences), "tokens": len(wv.index_to_key), "size": a.size, "window": a.window,
            "min_count": a.min_count, "effective_min_count": eff, "sg": not a.cbow, "seed": a.seed, "note": note}
    with open(os.path.splitext(a.out)[0] + ".w2v.json", "w") as f:
        json.dump(info, f, indent=2)
    print(f"w2v: {len(wv.index_to_key)} tokens of size {a.size} from {len(sentences)} sentences -> {a.out}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
