#!/usr/bin/env bash
# Regenerates the UNTRAINED test bundle in this directory (random weights; a
# fixture for the Go loader and ONNX session tests, never a model to serve).
# Needs Go and a Python with onnx==1.23.2, numpy, onnxruntime==1.31.1:
#   python3 -m venv /tmp/onnxvenv && /tmp/onnxvenv/bin/pip install onnx==1.23.2 numpy onnxruntime==1.31.1
#   PYTHON=/tmp/onnxvenv/bin/python estimator/testdata/bundle-fixture/gen.sh
#
# A benchmark-sized untrained bundle (the paper's TPC-DS sizes) elsewhere:
#   OUT=/tmp/bench-bundle FIXTURE_PF=100 FIXTURE_CONV=128 FIXTURE_DENSE=32,8 PYTHON=... gen.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
DIR=estimator/testdata/bundle-fixture
OUT="${OUT:-$DIR}"
mkdir -p "$OUT"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
go run ./$DIR/gen_inputs.go "$OUT" "$WORK"
"${PYTHON:-python3}" "$DIR/gen_model.py" "$OUT" "$WORK"
