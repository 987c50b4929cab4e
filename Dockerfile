# Prestroid proxy image. Mirrors `make build`; the local Trino harness and
# tests are not part of the image.
FROM golang:1.26-bookworm AS build
# Where the build fetches Go modules and the npm package from. Empty (the
# default) means each tool's own default; a build host behind its own mirrors
# passes its settings, e.g. --build-arg GOPROXY="$(go env GOPROXY)" and
# --build-arg NPM_REGISTRY="$(npm config get registry)", and a CA bundle for a
# TLS-intercepting proxy as the secret ca_bundle
# (--secret id=ca_bundle,src=/etc/ssl/certs/ca-certificates.crt).
# scripts/build-image.sh passes all of these from the host's own settings.
ARG GOPROXY
ARG GOSUMDB
ARG GONOSUMDB
ARG GOPRIVATE
ARG NPM_REGISTRY
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=secret,id=ca_bundle \
    if [ -s /run/secrets/ca_bundle ]; then export SSL_CERT_FILE=/run/secrets/ca_bundle; fi \
 && go mod download
# ONNX Runtime for the estimator: the pinned library `make ort` installs
# (npm package onnxruntime-node@1.30.0, checksummed by the script).
COPY scripts/install-ort.sh scripts/install-ort.sh
RUN --mount=type=secret,id=ca_bundle \
    apt-get update && apt-get install -y --no-install-recommends npm openssl && rm -rf /var/lib/apt/lists/* \
 && if [ -s /run/secrets/ca_bundle ]; then export NODE_EXTRA_CA_CERTS=/run/secrets/ca_bundle; fi \
 && if [ -n "$NPM_REGISTRY" ]; then export npm_config_registry="$NPM_REGISTRY"; fi \
 && PRESTROID_CACHE=/opt/prestroid scripts/install-ort.sh
COPY . .
# The build cache survives between builds (a rebuild after a source change
# compiles only what changed).
RUN --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=1 go build -trimpath -o /out/prestroid ./cmd/prestroid

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/prestroid /usr/local/bin/prestroid
COPY --from=build /opt/prestroid/ort/1.30.0/libonnxruntime.so.1 /usr/local/lib/prestroid/libonnxruntime.so.1
ENV PRESTROID_ORT_LIB=/usr/local/lib/prestroid/libonnxruntime.so.1
USER nobody
EXPOSE 8080
# URIs handed to clients are built from the Host header only when it names an
# accepted host, and a published port's Host (localhost:8080) is not the
# container's address: run with -e PRESTROID_PUBLIC_URL=http://localhost:8080
# (or the URL clients use), or -e PRESTROID_ALLOWED_HOSTS=localhost:8080.
# Configure with a mounted file (--config), PRESTROID_* variables or flags;
# check it with `prestroid serve --config FILE --check-config`. Probes:
# GET /healthz (liveness) and /readyz (readiness) on 8080 and on
# admin_listen. deploy/helm/prestroid and deploy/kubernetes run this image.
ENTRYPOINT ["/usr/local/bin/prestroid", "serve", "--listen", "0.0.0.0:8080"]
