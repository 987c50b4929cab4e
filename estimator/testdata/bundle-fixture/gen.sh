#!/usr/bin/env bash
# Regenerates the UNTRAINED test bundle in this directory (random weights; a
# fixture for the Go loader and ONNX session tests, never a model to serve).
# Needs Go and a Python with onnx==1.23.2, numpy, onnxruntime==1.31.1:
#   python3 -m venv /tmp/onnxvenv && /tmp/onnxvenv/bin/pip install onnx==1.23.2 numpy onnxruntime==1.31.1
#   PYTHON=/tmp/onnxvenv/bin/python estimator/testdata/bundle-fixture/gen.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
DIR=estimator/testdata/bundle-fixture
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
go run ./$DIR/gen_inputs.go "$DIR" "$WORK"
"${PYTHON:-python3}" "$DIR/gen_model.py" "$DIR" "$WORK"
