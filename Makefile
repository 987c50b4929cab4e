# Prestroid. Quick start: `make run`, then `make test`.
SHELL := /bin/bash
GO ?= go
# The TPC workload queries (trinodb/trino's benchmark queries, not in the
# repository; docs/workloads.md): ../shared/workloads beside the checkout,
# else beside the local repository it was cloned from (git clone . /tmp/x);
# any other clone sets WORKLOADS=/path/to/workloads.
ORIGIN_DIR := $(shell git config --get remote.origin.url 2>/dev/null | grep '^/')
WORKLOADS ?= $(firstword $(wildcard $(CURDIR)/../shared/workloads $(if $(ORIGIN_DIR),$(ORIGIN_DIR)/../shared/workloads)) $(CURDIR)/../shared/workloads)
TRINO_PORT ?= 8081
TRINO := testing/trino/trino.sh
PRESTO_PORT ?= 8091
PRESTO := testing/presto/presto.sh
VENV := .venv
PY := $(VENV)/bin/python
# Pinned Python packages used by the tests (real clients).
PY_TEST_DEPS := trino==0.340.0 presto-python-client==0.8.4 'moto[server]==5.2.5'

export PRESTROID_CACHE ?= $(HOME)/.cache/prestroid
# pip keeps downloaded wheels here (torch alone brings ~3 GB), so a fresh
# clone's `make test` installs from the cache instead of downloading again.
export PIP_CACHE_DIR ?= $(PRESTROID_CACHE)/pip

.PHONY: build test test-unit unit-test test-e2e run trino-up trino-down trino-fetch presto-up presto-down presto-fetch venv fuzz bench vet clean

build:
	$(GO) build -o bin/prestroid ./cmd/prestroid

vet:
	$(GO) vet ./...
	$(GO) -C testing/helm vet ./...

trino-fetch:
	$(TRINO) fetch

trino-up:
	TRINO_PORT=$(TRINO_PORT) $(TRINO) up

trino-down:
	TRINO_PORT=$(TRINO_PORT) $(TRINO) down

# A real PrestoDB 0.296 coordinator (tpch catalog) on 127.0.0.1:$(PRESTO_PORT).
presto-fetch:
	$(PRESTO) fetch

presto-up:
	PRESTO_PORT=$(PRESTO_PORT) $(PRESTO) up

presto-down:
	PRESTO_PORT=$(PRESTO_PORT) $(PRESTO) down

$(PY):
	python3 -m venv $(VENV)

# Installs or updates the pinned test dependencies (a no-op when present).
venv: $(PY)
	$(VENV)/bin/pip install -q $(PY_TEST_DEPS)

# promtool for testing/metrics (`promtool check metrics`): on PATH, else
# Debian's prometheus package.
.PHONY: promtool
promtool:
	$(eval PRESTROID_PROMTOOL := $(shell scripts/install-prometheus.sh promtool))
	@test -n "$(PRESTROID_PROMTOOL)" || { echo "promtool is needed by make test (scripts/install-prometheus.sh promtool)"; exit 1; }

# prometheus for testing/dashboard (a real Prometheus scraping the proxy,
# every panel of deploy/grafana/prestroid.json evaluated): on PATH, else
# Debian's prometheus package (the one promtool comes from).
.PHONY: prometheus
prometheus:
	$(eval PRESTROID_PROMETHEUS := $(shell scripts/install-prometheus.sh))
	@test -n "$(PRESTROID_PROMETHEUS)" || { echo "prometheus is needed by make test (scripts/install-prometheus.sh)"; exit 1; }

# helm for testing/helm (helm lint and template of deploy/helm/prestroid),
# built from its Go module at a pinned version, cached in PRESTROID_CACHE.
.PHONY: helm
helm:
	$(eval PRESTROID_HELM := $(shell scripts/install-helm.sh))
	@test -n "$(PRESTROID_HELM)" || { echo "helm is needed by make test (scripts/install-helm.sh)"; exit 1; }

# redis-server for the shared-admission tests (proxy's Redis store,
# testing/e2e/replicas): on PATH, else Debian's redis-server package. The
# tests start their own server on a free port (testing/redistest).
.PHONY: redis
redis:
	$(eval PRESTROID_REDIS_SERVER := $(shell scripts/install-redis.sh))
	@test -n "$(PRESTROID_REDIS_SERVER)" || { echo "redis-server is needed by make test (scripts/install-redis.sh)"; exit 1; }

# Chromium for the web console's browser test (testing/e2e/console drives
# it headless with chromedp): on PATH, else Debian's chromium package.
.PHONY: chromium
chromium:
	$(eval PRESTROID_CHROMIUM := $(shell scripts/install-chromium.sh))
	@test -n "$(PRESTROID_CHROMIUM)" || { echo "chromium is needed by make test (scripts/install-chromium.sh)"; exit 1; }

# Trino Gateway 18 and PostgreSQL for testing/e2e/gateway (Prestroid as the
# gateway's external routing service): the gateway-ha jar through mvn into
# $(PRESTROID_CACHE)/trino-gateway/, Debian's postgresql-15 (the test runs
# its own throwaway cluster, testing/pgtest).
.PHONY: trino-gateway
trino-gateway:
	$(eval PRESTROID_GATEWAY_JAR := $(shell scripts/install-trino-gateway.sh))
	$(eval PRESTROID_PG_BIN := $(shell scripts/install-postgres.sh))
	@test -n "$(PRESTROID_GATEWAY_JAR)" && test -n "$(PRESTROID_PG_BIN)" || { echo "Trino Gateway and PostgreSQL are needed by make test (scripts/install-trino-gateway.sh, scripts/install-postgres.sh)"; exit 1; }

# Says how to point at the TPC workload files when they are absent. A
# warning, not a failure: the tests that read them fail or skip with the
# same advice, and a narrowed run (TEST_FLAGS='-run …') may not need them.
.PHONY: workloads
workloads:
	@ls $(WORKLOADS)/tpch/*.sql $(WORKLOADS)/tpcds/*.sql >/dev/null 2>&1 || \
	  echo "warning: no TPC workload files at $(WORKLOADS): run make test WORKLOADS=DIR with a copy of trinodb/trino's benchmark queries; see docs/workloads.md (scripts/check-workloads.sh DIR checks one)" >&2

# The container image: the Dockerfile built with podman (no Docker engine
# or image registry needed) and run in front of the harness Trino by
# testing/e2e/image, as `podman run` and as the Helm chart's rendered
# Deployment under `podman play kube`. scripts/install-podman.sh installs
# Debian's podman (PRESTROID_PODMAN: a wrapper with runc and no default
# ulimits); scripts/build-image.sh makes the base images the Dockerfile
# names from Debian packages (cached in $(PRESTROID_CACHE)/image/) and
# builds IMAGE with the host's registry settings passed through. `make test`
# builds the image too and runs testing/e2e/image with the other packages.
# Cold (no base images, no layers, no Go build cache): 4.4 minutes on 2
# cores; warm: seconds (a few more to compile what changed). See
# docs/image.md.
IMAGE ?= prestroid:local
.PHONY: podman image image-test
podman:
	$(eval PRESTROID_PODMAN := $(shell scripts/install-podman.sh))
	@test -n "$(PRESTROID_PODMAN)" || { echo "podman is needed by make image-test (scripts/install-podman.sh)"; exit 1; }

image: podman
	PRESTROID_PODMAN=$(PRESTROID_PODMAN) scripts/build-image.sh $(IMAGE)

image-test: image helm
	TRINO_PORT=$(TRINO_PORT) $(TRINO) up
	$(TEST_ENV) $(GO) test -count=1 -timeout 10m $(TEST_FLAGS) ./testing/e2e/image

# Unit tests only: no Trino needed (integration tests skip themselves).
test-unit unit-test:
	$(GO) test ./...
	$(GO) -C testing/helm test ./...

# The environment that turns the integration tests on (they fail, not skip,
# when PRESTROID_TRINO_URL is set and Trino misbehaves). PRESTROID_PROMTOOL
# (promtool for the metrics test), PRESTROID_PROMETHEUS (the dashboard
# test), PRESTROID_HELM (the chart test, module testing/helm),
# PRESTROID_REDIS_SERVER (the Redis tests), PRESTROID_CHROMIUM (the
# console's browser test), PRESTROID_GATEWAY_JAR and PRESTROID_PG_BIN (the
# Trino Gateway test), PRESTROID_PODMAN and PRESTROID_IMAGE (the container
# image test) are passed on when set; `make test` sets them (the promtool,
# prometheus, helm, redis, chromium, trino-gateway and image targets).
TEST_ENV = PRESTROID_ORT_LIB=$(ORT_LIB) \
	PRESTROID_TRINO_URL=http://127.0.0.1:$(TRINO_PORT) \
	PRESTROID_TRINO_CLI=$$($(TRINO) cli-jar) \
	PRESTROID_PRESTO_URL=http://127.0.0.1:$(PRESTO_PORT) \
	PRESTROID_PRESTO_CLI=$$($(PRESTO) cli-jar) \
	PRESTROID_PRESTO_JDBC=$$($(PRESTO) jdbc-jar) \
	PRESTROID_PYTHON=$(CURDIR)/$(PY) \
	PRESTROID_WORKLOADS=$(WORKLOADS) \
	PRESTROID_BIN=$(CURDIR)/bin/prestroid \
	$(if $(PRESTROID_PROMTOOL),PRESTROID_PROMTOOL=$(PRESTROID_PROMTOOL)) \
	$(if $(PRESTROID_PROMETHEUS),PRESTROID_PROMETHEUS=$(PRESTROID_PROMETHEUS)) \
	$(if $(PRESTROID_HELM),PRESTROID_HELM=$(PRESTROID_HELM)) \
	$(if $(PRESTROID_REDIS_SERVER),PRESTROID_REDIS_SERVER=$(PRESTROID_REDIS_SERVER)) \
	$(if $(PRESTROID_CHROMIUM),PRESTROID_CHROMIUM=$(PRESTROID_CHROMIUM)) \
	$(if $(PRESTROID_GATEWAY_JAR),PRESTROID_GATEWAY_JAR=$(PRESTROID_GATEWAY_JAR)) \
	$(if $(PRESTROID_PG_BIN),PRESTROID_PG_BIN=$(PRESTROID_PG_BIN)) \
	$(if $(PRESTROID_PODMAN),PRESTROID_PODMAN=$(PRESTROID_PODMAN) PRESTROID_IMAGE=$(IMAGE))
# go test runs up to TEST_P packages at once, starting them in the order
# given: the long poles first (the client workloads, the trainer's tiny
# training, the tests that start a second Trino), so that the short ones
# fill in around them; within a package, up to TEST_PARALLEL tests marked
# t.Parallel run at once (go test's default for both is GOMAXPROCS, 2 here).
# Most e2e tests wait on Trino or on a JVM, so more than the 2 cores pay
# off, up to a point: with 4 packages, the three client tests and both
# trainer tests in parallel, a run took longer than the serial suite (the
# client tests each saturate Trino, and PyTorch threads spin). The
# trainer's pytest suite runs beside go test on one thread.
TEST_P ?= 3
# The harness Trino's heap for the suite (trino.sh's default is 2G): the
# client workload tests keep it busy for minutes and G1 then takes a tenth
# of its CPU; a Trino already running on TRINO_PORT keeps its own.
TEST_TRINO_HEAP ?= 3G
TEST_PARALLEL ?= 4
# The load test (200 concurrent clients) saturates the suite's Trino for a
# minute or more: it runs alone, after the other packages, so that it slows
# no other test's queries.
TEST_ALONE := testing/e2e/load
TEST_FIRST := ./testing/e2e/clients ./testing/trainer ./testing/e2e/spooling ./testing/e2e/routing ./testing/e2e/security ./testing/e2e/parquet ./testing/e2e/faults ./testing/e2e/gateway ./testing/soak
# Extra go test flags, e.g. make test-e2e TEST_FLAGS='-run Spooling -v'.
TEST_FLAGS ?=

# The full suite against a real Trino started by the harness: every Go
# package (the e2e ones by concern under testing/e2e/) and, at the same
# time, the trainer's pytest suite (its output follows go test's).
test: workloads build vet venv ort trainer-venv promtool prometheus helm redis chromium trino-gateway image
	TRINO_HEAP=$(TEST_TRINO_HEAP) TRINO_PORT=$(TRINO_PORT) $(TRINO) up
	PRESTO_PORT=$(PRESTO_PORT) $(PRESTO) up
	@mkdir -p out
	OMP_NUM_THREADS=1 $(VENV)/bin/python -m pytest -q trainer/tests >out/pytest.log 2>&1 & pytest=$$!; \
	$(TEST_ENV) $(GO) test -count=1 -timeout 50m -p $(TEST_P) -parallel $(TEST_PARALLEL) $(TEST_FLAGS) $(TEST_FIRST) $$($(GO) list ./... | grep -v '$(TEST_ALONE)$$'); go=$$?; \
	$(TEST_ENV) $(GO) test -count=1 -timeout 10m $(TEST_FLAGS) ./$(TEST_ALONE); alone=$$?; \
	$(TEST_ENV) $(GO) -C testing/helm test -count=1 -timeout 5m $(TEST_FLAGS) ./...; helm=$$?; \
	wait $$pytest; py=$$?; echo "--- pytest trainer/tests"; cat out/pytest.log; \
	[ $$go -eq 0 ] && [ $$alone -eq 0 ] && [ $$helm -eq 0 ] && [ $$py -eq 0 ]

# Only the end-to-end tests (testing/e2e/...): real Trino, proxy, clients.
test-e2e: workloads build venv ort redis chromium trino-gateway
	TRINO_PORT=$(TRINO_PORT) $(TRINO) up
	PRESTO_PORT=$(PRESTO_PORT) $(PRESTO) up
	$(TEST_ENV) $(GO) test -count=1 -timeout 50m -p $(TEST_P) -parallel $(TEST_PARALLEL) $(TEST_FLAGS) ./testing/e2e/clients ./testing/e2e/...

# The full soak with faults (testing/soak, docs/testing.md "Soak"): 10,000
# queries (45 minutes of issuing at most), from the Go, Python and CLI
# clients through two replicas sharing Redis, while a replica is killed
# (-9) and started again, Redis is stopped for 30 s and the soak's own
# Trino (on SOAK_TRINO_PORT, 2G heap) is killed and started again; about
# 30 minutes in all on a quiet machine. make test runs its short version (the suite's Trino,
# no Trino restart, a 5 s Redis stop). SOAK_FLAGS adds flags, e.g.
# SOAK_FLAGS='-soak.queries=2000 -soak.duration=5m'.
SOAK_TRINO_PORT ?= 8131
SOAK_FLAGS ?=
.PHONY: soak
soak: workloads build venv ort redis
	$(TEST_ENV) $(GO) test -count=1 -timeout 75m -run TestSoak -v ./testing/soak -soak.full -soak.trino-port=$(SOAK_TRINO_PORT) $(SOAK_FLAGS)

# Local Trino plus the proxy on 127.0.0.1:8080; Ctrl-C stops both.
run: build ort
	TRINO_PORT=$(TRINO_PORT) scripts/run.sh

fuzz:
	$(GO) test ./proxy/protocol -run '^$$' -fuzz FuzzRouteToken -fuzztime 30s
	$(GO) test ./proxy/protocol -run '^$$' -fuzz FuzzRewriteURIs -fuzztime 30s
	$(GO) test ./proxy/frontdoor -run '^$$' -fuzz FuzzBareLFGuard -fuzztime 30s
	$(GO) test ./proxy/guardrail -run '^$$' -fuzz FuzzSnippet -fuzztime 30s

bench: build
	./bin/prestroid bench proxy

clean:
	rm -rf bin

# ONNX Runtime shared library for the estimator (estimator/onnx), cached
# under $(PRESTROID_CACHE)/ort/1.30.0/; tests read PRESTROID_ORT_LIB.
ORT_LIB := $(PRESTROID_CACHE)/ort/1.30.0/libonnxruntime.so.1
.PHONY: ort
ort:
	scripts/install-ort.sh

# Trainer (trainer/): the Python training stack installed into the
# project venv. PyPI's torch wheel pulls about 3.1 GB of CUDA wheels on Linux
# (first install: ~9 min on a loaded 2-core machine, 6 GB venv); keep pip's
# cache (~/.cache/pip) between CI runs so that only the first run downloads.
.PHONY: trainer-venv trainer-test
trainer-venv: $(PY)
	$(VENV)/bin/pip install -q -e 'trainer[test]'

# Python unit tests of the trainer (tensor reader, model shapes, ONNX parity).
trainer-test: trainer-venv
	$(VENV)/bin/python -m pytest -q trainer/tests
