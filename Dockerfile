# Prestroid proxy image. Mirrors `make build`; the local Trino harness and
# tests are not part of the image.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
# ONNX Runtime for the estimator: the pinned library `make ort` installs
# (npm package onnxruntime-node@1.30.0, checksummed by the script).
COPY scripts/install-ort.sh scripts/install-ort.sh
RUN apt-get update && apt-get install -y --no-install-recommends npm openssl && rm -rf /var/lib/apt/lists/* \
 && PRESTROID_CACHE=/opt/prestroid scripts/install-ort.sh
COPY . .
RUN CGO_ENABLED=1 go build -trimpath -o /out/prestroid ./cmd/prestroid

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
