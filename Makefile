# Rootline — the two commands a newcomer needs are `make demo` and `make test`.
# Every target installs what it needs first (see scripts/deps.sh).

SHELL    := /bin/bash
GO       ?= go
BIN      := bin/rootline
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X github.com/rootline/rootline/internal/version.Version=$(VERSION)
# Tests that need root/BPF skip with a reason; CI sets ROOTLINE_REQUIRE_BPF=1 to fail such skips.
export ROOTLINE_REQUIRE_BPF

.PHONY: all deps build test test-unit test-e2e demo bench bench-go bench-ingest lint check-generated clean help

all: build

help:
	@echo "make demo    install what is needed, build, run the demo scenario and print what Rootline found"
	@echo "make test    install what is needed and run every test (unit, race, end-to-end)"
	@echo "make build   build $(BIN)"
	@echo "make bench   run the benchmarks (results go to bench/RESULTS.md by hand)"
	@echo "make lint    go vet + staticcheck"

deps:
	@scripts/deps.sh

build: deps
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/rootline

test: deps build test-unit test-e2e

test-unit:
	$(GO) test -race -count=1 -timeout 15m ./internal/... ./cmd/...

test-e2e: build
	ROOTLINE_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 15m ./test/...

demo: build
	$(BIN) demo

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
	git diff --exit-code -- internal/profiler/cpu/ bpf/

clean:
	rm -rf bin
