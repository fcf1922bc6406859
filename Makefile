# fencectl — run `make help` for the targets.

GO         ?= go
# fencectl is the front (cmd/front): what users run. It links only what
# sending one command line needs, sends an agent's steps (claim, heartbeat,
# verify, complete, release, fail) to the host's daemon for the tree, and
# hands every other command to fencectl-full beside it: a step then costs a
# hello-world's start, not the full command set's.
BIN        ?= bin/fencectl
# fencectl-full is the full command set (cmd/fencectl), and the daemon.
BIN_FULL   ?= bin/fencectl-full
# fencectl-etcd is fencectl with the etcd backend linked (-tags etcd): the
# etcd client's package initialisers cost every process about 2 ms, so the
# fencectl binary leaves them out and hands etcd trees to this one.
BIN_ETCD   ?= bin/fencectl-etcd
# fencectl-mcp is the MCP server (`fencectl mcp` runs it): the Go MCP SDK's
# package initialisers (net/http, TLS, JSON schemas) would cost every
# short-lived command about 1 ms, so the other binaries are built
# without it (-tags nomcp) and hand `mcp` to this long-lived one, which links
# the etcd backend too so that it serves every kind of tree.
BIN_MCP    ?= bin/fencectl-mcp
# fencectl-serve is the web dashboard and /metrics (`fencectl serve` runs
# it): net/http and the Prometheus client library (client_golang) cost
# every process about 1.5 ms of package initialisation, so the other
# binaries are built without them (-tags noserve) and hand `serve` to this
# long-lived one, which links the etcd backend too. One binary per server
# rather than one for both: each links only what it serves, and the MCP
# one keeps its name in agents' configurations.
BIN_SERVE  ?= bin/fencectl-serve
# urfave_cli_no_docs drops the man/markdown generator that urfave/cli links
# by default: it costs about half a millisecond at every process start, and a
# claim is one process start. CGO_ENABLED=0 (in build) makes a static binary:
# no dynamic loader and no libc start-up, 2.2 ms → 1.3 ms of CPU per claim.
BUILD_TAGS ?= urfave_cli_no_docs
MCP_TAGS   ?= urfave_cli_no_docs,etcd,noserve
SERVE_TAGS ?= urfave_cli_no_docs,etcd,nomcp
# fencetest compiles in the crash points and the settable clock the tests use;
# release builds (make build) never have them.
TEST_TAGS  ?= fencetest
# fencectl --version: the release's tag or commit; without it the binary
# reports what the Go toolchain stamped (module version, VCS revision).
VERSION    ?= $(shell git describe --tags --always --dirty 2>/dev/null)
# How long make torture runs each fuzz target.
FUZZTIME   ?= 60s
# How many times make bench runs each benchmark; the report gives medians.
# On a shared 2-core machine one run of a ratio can be off by half.
BENCH_COUNT ?= 3

PREFIX     ?= /usr/local

.PHONY: help build install test test-race bench torture demo demo-hosts screenshot fmt lint clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

build: ## build the release binaries: bin/fencectl (the front), bin/fencectl-full, bin/fencectl-etcd for etcd trees, bin/fencectl-mcp for `fencectl mcp`, bin/fencectl-serve for `fencectl serve`
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN) ./cmd/front
	CGO_ENABLED=0 $(GO) build -tags $(BUILD_TAGS),nomcp,noserve -trimpath -ldflags "-X main.version=$(VERSION)" -o $(BIN_FULL) ./cmd/fencectl
	CGO_ENABLED=0 $(GO) build -tags $(BUILD_TAGS),etcd,nomcp,noserve -trimpath -ldflags "-X main.version=$(VERSION)" -o $(BIN_ETCD) ./cmd/fencectl
	CGO_ENABLED=0 $(GO) build -tags $(MCP_TAGS) -trimpath -ldflags "-X main.version=$(VERSION)" -o $(BIN_MCP) ./cmd/fencectl
	CGO_ENABLED=0 $(GO) build -tags $(SERVE_TAGS) -trimpath -ldflags "-X main.version=$(VERSION)" -o $(BIN_SERVE) ./cmd/fencectl

install: build ## install the binaries side by side into $(PREFIX)/bin (default /usr/local)
	install -d $(PREFIX)/bin
	install -m 0755 $(BIN) $(BIN_FULL) $(BIN_ETCD) $(BIN_MCP) $(BIN_SERVE) $(PREFIX)/bin/

test: ## run every test: unit, scripts through the real binary, multi-process race
	# The scripts run four ways (bbolt, etcd, each through the front): about
	# 6 min here, over go test's default 10 min on a loaded machine.
	$(GO) test -tags $(TEST_TAGS) -count=1 -timeout 30m ./...

test-race: ## the tests under the race detector
	# atexit_sleep_ms=0: a race-built process otherwise sleeps 1 s at exit,
	# and the scripts and the race test start about two thousand of them.
	# The scripts run four ways (bbolt, etcd, each through the front):
	# under the race detector that is more than go test's default 10 min.
	GORACE=atexit_sleep_ms=0 $(GO) test -race -tags $(TEST_TAGS) -count=1 -timeout 45m ./...

bench: ## run the benchmarks (not part of make test) and write docs/BENCHMARKS.md
	@mkdir -p bin
	$(GO) test -tags $(BUILD_TAGS),nomcp,noserve -run '^$$' -bench . -benchtime 1x -count $(BENCH_COUNT) -timeout 60m ./bench/ 2>&1 | tee bin/bench.out
	$(GO) run ./bench/report -cmd "make bench" -o docs/BENCHMARKS.md < bin/bench.out

torture: ## the full torture suite (minutes): kill storm, crash points, linearizability, fuzzing...; writes docs/RELIABILITY.md
	$(GO) run ./cmd/torturereport -fuzztime $(FUZZTIME)

screenshot: ## refresh docs/dashboard.png: the dashboard of fencectl serve, in headless Chromium (Debian package chromium)
	FENCE_DASHBOARD_PNG=$(CURDIR)/docs/dashboard.png $(GO) test -tags $(TEST_TAGS) -count=1 -run '^TestServe_Browser$$' ./cmd/fencectl/

demo: build ## several agents work through a batch on a throwaway tree; one is killed and its token refused
	@FENCECTL=$(CURDIR)/$(BIN) bash docs/demo.sh

demo-hosts: build ## two "hosts" share one tree, its journal in a throwaway etcd (/usr/bin/etcd); one agent is killed, its lease expires on etcd's clock
	@FENCECTL=$(CURDIR)/$(BIN) bash docs/demo-hosts.sh

fmt: ## gofmt the code
	gofmt -w $$(git ls-files '*.go')

lint: ## gofmt check and go vet (with and without the test tags)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags $(TEST_TAGS) ./...
	$(GO) vet -tags $(TEST_TAGS),etcd ./...
	$(GO) vet -tags $(BUILD_TAGS),nomcp,noserve ./...

clean: ## remove build output
	rm -rf bin
