#!/usr/bin/env bash
# Installs the ONNX Runtime shared library that estimator/onnx loads
# (github.com/yalue/onnxruntime_go v1.27.0 needs libonnxruntime 1.30.x).
#
# The library comes from the npm package onnxruntime-node@1.30.0 (pinned,
# fetched with `npm pack` from the configured npm registry, tarball checked
# against its sha512 integrity), which carries the CPU build at
# package/bin/napi-v6/linux/x64/libonnxruntime.so.1.
#
# Idempotent: the library is cached at
#   ${PRESTROID_CACHE:-~/.cache/prestroid}/ort/1.30.0/libonnxruntime.so.1
# and reused (after a checksum check) on later runs. The last line printed is
# the library's path; use it as PRESTROID_ORT_LIB (or config key
# estimator.ort_lib, or `prestroid serve --ort-lib`).
#
# GPU: the CUDA build is not in the npm package. It ships inside the Maven
# artifact com.microsoft.onnxruntime:onnxruntime_gpu (same version), as
# ai/onnxruntime/native/linux-x64/libonnxruntime.so plus
# libonnxruntime_providers_shared.so and libonnxruntime_providers_cuda.so;
# unpack the jar (`unzip`) into one directory, point PRESTROID_ORT_LIB at
# libonnxruntime.so there and set estimator.cuda: true. It needs the CUDA and
# cuDNN versions that ONNX Runtime release names.
#
# Usage: scripts/install-ort.sh
set -euo pipefail

VERSION=1.30.0
PKG="onnxruntime-node@${VERSION}"
# npm's "dist.integrity" of the tarball and sha256 of the extracted library.
TGZ_SHA512_B64='twhs1C2C/BFkz1yc5OY0KIU2GUq6DURO7hD4bx5Q2Qy3nAMJwRXW8xU3NVczE29VA9lolLOYepoD8fjTGOfIqw=='
LIB_SHA256='ffb75a925ba05e47b235bb66e3e3911714a80b328a9c9425539feb204aa32a23'
MEMBER='package/bin/napi-v6/linux/x64/libonnxruntime.so.1'

CACHE="${PRESTROID_CACHE:-$HOME/.cache/prestroid}"
DEST="${CACHE}/ort/${VERSION}"
LIB="${DEST}/libonnxruntime.so.1"

case "$(uname -s)-$(uname -m)" in
Linux-x86_64) ;;
*) echo "install-ort: only linux x86_64 is supported by this script (got $(uname -s)-$(uname -m))" >&2; exit 1 ;;
esac

check_lib() {
	[[ -f "$1" ]] && [[ "$(sha256sum "$1" | cut -d' ' -f1)" == "$LIB_SHA256" ]]
}

if check_lib "$LIB"; then
	echo "$LIB"
	exit 0
fi

command -v npm >/dev/null || { echo "install-ort: npm is required (apt-get install npm)" >&2; exit 1; }
mkdir -p "$DEST"
TMP="$(mktemp -d "${DEST}/.tmp.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

echo "install-ort: npm pack ${PKG} (about 110 MB)" >&2
( cd "$TMP" && npm pack --silent "$PKG" >/dev/null )
TGZ="$TMP/onnxruntime-node-${VERSION}.tgz"
[[ -f "$TGZ" ]] || { echo "install-ort: npm pack produced no $TGZ" >&2; exit 1; }

got="$(openssl dgst -sha512 -binary "$TGZ" | base64 -w0)"
if [[ "$got" != "$TGZ_SHA512_B64" ]]; then
	echo "install-ort: ${PKG} tarball integrity mismatch: got sha512-${got}" >&2
	exit 1
fi
tar -xzf "$TGZ" -C "$TMP" "$MEMBER"
if ! check_lib "$TMP/$MEMBER"; then
	echo "install-ort: $MEMBER has an unexpected sha256" >&2
	exit 1
fi
chmod 0644 "$TMP/$MEMBER"
mv -f "$TMP/$MEMBER" "$LIB" # atomic within one file system
echo "install-ort: installed $LIB" >&2
echo "$LIB"
