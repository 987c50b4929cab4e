"""Prestroid trainer: Word2Vec predicate vectors, Tree-CNN cost models,
baselines, evaluation and ONNX model bundles.

Featurization is done in Go (`prestroid train`); this package reads the
tensors it writes (estimator/TENSORS.md) and writes model bundles
(estimator/BUNDLE.md).

    python -m trainer.w2v    corpus.txt -> tokens.vec
    python -m trainer.train  workdir tensors -> bundle directory
    python -m trainer.eval   bundle + test tensors -> metrics JSON, report
    python -m trainer.bench  input bytes per batch and epoch time (Fig 6)
"""
