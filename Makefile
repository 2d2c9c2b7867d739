# Rootline — the two commands a newcomer needs are `make demo` and `make test`.
# Every target installs what it needs first (see scripts/deps.sh).

SHELL    := /bin/bash
GO       ?= go
BIN      := bin/rootline
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X github.com/rootline/rootline/internal/version.Version=$(VERSION)
# Tests that need root/BPF skip with a reason; CI sets ROOTLINE_REQUIRE_BPF=1 to fail such skips.
export ROOTLINE_REQUIRE_BPF

.PHONY: all deps web build demo-services test test-fast test-fuzz test-cross test-unit test-e2e test-ui-e2e test-k8s image test-scaleout demo bench bench-go bench-ingest lint check-generated clean help

all: build

help:
	@echo "make demo    install what is needed, build, run the demo scenario and print what Rootline found"
	@echo "make test    install what is needed and run every test (unit, race, end-to-end)"
	@echo "make test-fast  the Go unit tests with -short, for the edit-compile-test loop: no root, BPF,"
	@echo "             Envoy, JVM, race detector, UI or end-to-end tests (a couple of minutes)"
	@echo "make build   build $(BIN)"
	@echo "make image   build the OCI image without Docker (build/image/oci, build/image/rootline.tar; IMAGE_PUSH=ref pushes)"
	@echo "make bench   run the benchmarks (results go to bench/RESULTS.md by hand)"
	@echo "make lint    go vet + staticcheck"

deps:
	@scripts/deps.sh

# The web UI: npm ci from the committed lock file, then vite into web/dist
# (embedded by go:embed). Rebuilt only when its sources change.
WEB_SRC := $(shell find web/src web/index.html web/package.json web/package-lock.json web/vite.config.ts web/speedscope-plugin.mjs web/tsconfig.json -type f 2>/dev/null)
web/.stamp: $(WEB_SRC)
	cd web && npm ci --no-audit --no-fund --loglevel=error && npm run build
	touch $@

web: deps web/.stamp

build: deps web/.stamp demo-services
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/rootline

# The demo's uninstrumented forwarding service in Go and Java (the Python one
# runs from demo/services/python/svc.py as is).
demo-services: build/demo/java/Svc.class
	$(GO) build -trimpath -o build/demo/svc-go ./demo/services/go

build/demo/java/Svc.class: demo/services/java/Svc.java
	@mkdir -p build/demo/java
	javac -encoding UTF-8 -d build/demo/java $<

test: deps build test-cross test-unit test-fuzz test-e2e test-ui-e2e test-k8s test-scaleout

# The server, the agent's JFR profiler and the UI build off Linux too (for
# development); `rootline run` and the eBPF profilers are Linux-only.
test-cross: deps
	GOOS=darwin GOARCH=arm64 $(GO) build -o /dev/null ./cmd/rootline

# The eBPF accuracy tests (kernel recorder, kernel metrics) compare against
# schedstat and perf on the same run, and the mesh's fault tests measure what a
# fault does to a service's threads (a noisy neighbour's run-queue wait, which
# the other packages' load on the same CPU dilutes): they run after the rest,
# one package at a time, so that the other packages' tests (JVMs, servers) do
# not load the machine under them.
ACCURACY_PKGS := ./internal/profiler/kernel/ ./internal/kmetrics/ ./internal/mesh/
test-unit: web/.stamp
	$(GO) test -race -count=1 -timeout 15m $$($(GO) list ./internal/... ./cmd/... ./web/... | grep -v -e /internal/profiler/kernel -e /internal/kmetrics -e /internal/mesh$$)
	$(GO) test -race -count=1 -timeout 15m -p 1 $(ACCURACY_PKGS)
	cd web && npm test

# The edit-compile-test loop: every Go unit test with -short, which leaves out
# the tests that need root, BPF, Envoy or a JVM (they say so through
# internal/bpftest, even where those are present) and the long ones that check
# testing.Short(); no race detector, UI or end-to-end tests, and never a
# failure for a missing capability. `make test` stays the full suite.
test-fast: web/.stamp
	ROOTLINE_REQUIRE_BPF= $(GO) test -short -count=1 -timeout 10m ./internal/... ./cmd/...

test-e2e: build
	ROOTLINE_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 60m $$($(GO) list ./test/... | grep -v /test/k8s)

# The OCI image, built without Docker (cmd/rootline-image): one layer with a
# statically linked binary, reproducible (file and image times from
# SOURCE_DATE_EPOCH, the last commit's time by default).
IMAGE_DIR ?= build/image
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
image: deps web/.stamp
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(IMAGE_DIR)/rootline ./cmd/rootline
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) run ./cmd/rootline-image --binary $(IMAGE_DIR)/rootline \
	  --version $(VERSION) --oci-layout $(IMAGE_DIR)/oci --tarball $(IMAGE_DIR)/rootline.tar \
	  $(if $(IMAGE_PUSH),--push $(IMAGE_PUSH))

# Kubernetes: the chart, the webhook and the image against a real
# kube-apiserver and etcd, built from their Go modules on first use and
# cached in ~/.cache/rootline/k8s (scripts/k8s-tools.sh). No kubelet: Pods
# are admitted and stored, never run (docs/kubernetes.md).
test-k8s: build image
	assets=$$(scripts/k8s-tools.sh) && \
	KUBEBUILDER_ASSETS=$$assets ROOTLINE_REQUIRE_K8S=1 ROOTLINE_BIN=$(CURDIR)/$(BIN) \
	ROOTLINE_IMAGE_LAYOUT=$(CURDIR)/$(IMAGE_DIR)/oci $(GO) test -count=1 -timeout 15m -v ./test/k8s/

# Scale-out on real engines (docs/deployment.md): scripts/scaleout.sh installs
# Kafka, Cassandra and SeaweedFS's S3 gateway (cached under
# ~/.cache/rootline/scaleout) and starts them on loopback once; the Cassandra and
# S3 backends' conformance suites, the Kafka stage's tests and the end-to-end
# tests TestScaleOut* run against them; the engines stop at the end, pass or
# fail. Elsewhere these tests skip (ROOTLINE_REQUIRE_SCALEOUT=1 makes a skip a
# failure, as here).
SCALEOUT_PKGS := ./internal/store/cassandra/ ./internal/store/s3/ ./internal/kafka/
test-scaleout: build
	@set -eo pipefail; dir=$$(mktemp -d "$${TMPDIR:-/tmp}/rootline-scaleout.XXXXXX"); \
	trap 'scripts/scaleout.sh stop "$$dir" || true; rm -rf "$$dir"' EXIT; \
	t0=$$SECONDS; scripts/scaleout.sh start "$$dir"; t1=$$SECONDS; \
	set -a; . "$$dir/env"; set +a; export ROOTLINE_REQUIRE_SCALEOUT=1; \
	$(GO) test -count=1 -timeout 30m $(SCALEOUT_PKGS); \
	ROOTLINE_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 30m -v -run '^TestScaleOut' ./test/ 2>&1 | \
	  grep -E '^(=== RUN|--- |\s+--- |PASS|FAIL|ok|panic)|_test\.go:[0-9]+: '; \
	echo "test-scaleout: engines started in $$((t1 - t0))s, tests took $$((SECONDS - t1))s"

# The web UI in headless Chromium (web/e2e/ui.e2e.mjs, playwright-core with
# Debian's /usr/bin/chromium): search → trace → evidence → flame graph.
# Screenshots go to build/screenshots/.
test-ui-e2e: build
	cd web && ROOTLINE_BIN=$(CURDIR)/bin/rootline npm run e2e

demo: build
	$(BIN) demo

# Native Go fuzz targets (package:Target), each run for FUZZTIME with its
# committed corpus (testdata/fuzz/<Target>/); a crash fails the run and its
# input is left in testdata/fuzz to become a regression test.
FUZZTIME ?= 20s
FUZZ_TARGETS := \
	./internal/run/httpstream:FuzzRewriterSplits \
	./internal/run/datapath/headparse:FuzzHeadParser \
	./internal/run/h2stream:FuzzPassThrough \
	./internal/run/h2stream:FuzzRewriter \
	./internal/receiver:FuzzOTLPProto \
	./internal/receiver:FuzzOTLPJSON \
	./internal/receiver:FuzzZipkin \
	./internal/query:FuzzQueryParams \
	./internal/critpath:FuzzDecodeBinary \
	./internal/profiler/goroutine:FuzzDecode

test-fuzz: deps
	@set -e; for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; name=$${t##*:}; \
	  echo "fuzz $$name ($$pkg) for $(FUZZTIME)"; \
	  GO=$(GO) scripts/fuzz-one.sh $$pkg $$name $(FUZZTIME); \
	done

bench: bench-go bench-ingest

bench-go: deps
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./internal/anomaly/
	$(GO) test -run '^$$' -bench 'WriteSpans|Query1M' -benchtime 20x ./internal/store/sqlite/

bench-ingest: build
	bench/tools.sh
	bench/ingest.sh --target jaeger
	bench/ingest.sh --target rootline

lint: deps
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

# Regenerates the eBPF objects and Go bindings and fails if they differ from
# what is committed.
check-generated: deps
	$(GO) generate ./internal/profiler/cpu/
	$(GO) generate ./internal/profiler/kernel/
	$(GO) generate ./internal/kmetrics/
	$(GO) generate ./internal/run/readtap/
	$(GO) generate ./internal/run/datapath/
	$(GO) generate ./internal/profiler/goroutine/
	git diff --exit-code -- internal/profiler/cpu/ internal/profiler/kernel/ internal/kmetrics/ internal/run/readtap/ internal/run/datapath/ internal/profiler/goroutine/ bpf/

clean:
	rm -rf bin

# The h2c upgrade's framing (internal/run/h2stream/upgrade.go).
FUZZ_TARGETS += ./internal/run/h2stream:FuzzUpgrade

# The timing fields of both forms (internal/run/httpstream/timing.go).
FUZZ_TARGETS += ./internal/run/httpstream:FuzzParseTiming

# The diagnosis fault suite (bench/accuracy.sh --help): the full matrix by
# default; ACCURACY_ARGS=--quick for a short one. Needs root.
.PHONY: accuracy
accuracy: build
	bench/accuracy.sh $(ACCURACY_ARGS)

# The autoscaling experiment of CriticalMetrics (bench/autoscale.sh --help):
# the same load ramp scaled on CPU utilisation and on run-queue latency,
# AUTOSCALE_ARGS for the driver's flags (default two runs per policy, ~15 min).
# Needs root, BPF, Envoy and matplotlib (scripts/deps.sh).
.PHONY: autoscale
autoscale:
	bench/autoscale.sh $(AUTOSCALE_ARGS)

# Figures 5.4/5.5 of the Mirage model (bench/miragefig.sh --help): a
# three-service chain under `rootline run`, closed-loop clients 1…24, a CPU
# quota and then a link limit on the backend; writes the table and
# bench/figures/mirage-{cpu,net}.png. MIRAGEFIG_ARGS for the driver's flags.
# About 9 min. Needs root, BPF, tc and matplotlib (scripts/deps.sh).
.PHONY: miragefig
miragefig: build
	bench/miragefig.sh --figures bench/figures $(MIRAGEFIG_ARGS)

# The Java demo service's gRPC mode (demo/services/java/SvcGrpc.java, loaded
# by Svc when PROTOCOL=grpc), compiled against the grpc-java jars
# scripts/deps.sh fetches; without them the Java service has no gRPC mode and
# `rootline demo --protocol grpc` says so.
GRPC_JAVA ?= $(HOME)/.cache/rootline/grpc-java-1.85.1
demo-services: build/demo/java/SvcGrpc.class
build/demo/java/SvcGrpc.class: demo/services/java/SvcGrpc.java build/demo/java/Svc.class
	@if [ -f "$(GRPC_JAVA)/.complete" ]; then \
	  javac -encoding UTF-8 -cp "build/demo/java:$(GRPC_JAVA)/*" -d build/demo/java $<; \
	else echo "no grpc-java in $(GRPC_JAVA) (scripts/deps.sh): the Java demo service is built without its gRPC mode"; fi
