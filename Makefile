# fencegate — common tasks. `make help` lists them.
GO ?= go
export PATH := $(PATH):/usr/local/go/bin

.PHONY: help build demo dev services-servers test test-matrix test-short services vet fuzz bench bench-tokens bench-proxy bench-locks bench-cycle bench-tables bench-instructions bench-node bench-python test-bench faults

help: ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

build: ## build bin/fencegate
	$(GO) build -ldflags "-X main.commit=$$(git rev-parse --short=12 HEAD 2>/dev/null)" -o bin/fencegate ./cmd/fencegate

services: ## install/start PostgreSQL, Redis and the test tools when missing
	@bash scripts/services.sh

services-servers:
	@bash scripts/services.sh servers

demo: services-servers ## replay the paused-holder scenario with the whole stack
	@echo "make demo: building bin/fencegate (a minute or two the first time, while Go fetches and compiles the modules)..."
	@$(MAKE) --no-print-directory build
	bin/fencegate demo paused-holder

dev: services-servers build ## run the whole stack (3 token nodes, proxy) until Ctrl-C
	exec bin/fencegate dev

vet: ## gofmt and go vet both modules: fencegate and bench/
	gofmt -l . | (! grep .) || (echo "gofmt needed on the files above"; exit 1)
	$(GO) vet ./...
	cd bench && $(GO) vet ./...

# The packages whose tests take longest, named first so that go test starts
# them first (it runs packages in the order named, -p at a time): started
# last, the longest ran alone at the end while the others had finished.
SLOW_PACKAGES = ./pgfence/ ./proxy/ ./tokenservice/ ./lockclient/ ./raftstore/

test: services vet ## run every test against real PostgreSQL, Redis and Raft nodes, the enforcement suites on every supported PostgreSQL, then each fuzz target briefly
	$(GO) test -race -count=1 -p 3 -timeout 25m $(SLOW_PACKAGES) ./...
	bash scripts/pg-matrix.sh --except-default
	@bash scripts/together.sh "cd bench && $(GO) test -count=1 ./..." "bash scripts/fuzz.sh 20000x"

test-matrix: services ## run the enforcement suites (pgfence, proxy, schema commands) on every supported PostgreSQL major (MAJORS="18 17" for some)
	bash scripts/pg-matrix.sh $(MAJORS)

test-short: ## run the tests that need no PostgreSQL, Redis or network (go test -short), both modules
	$(GO) test -short -count=1 ./...
	cd bench && $(GO) test -short -count=1 ./...

fuzz: ## run each fuzz target for FUZZTIME (default 10s; a count like 100000x also works)
	@bash scripts/fuzz.sh $(or $(FUZZTIME),10s)

# The comparative benchmarks are the Go module in bench/, apart so that
# what they compare with stays out of fencegate's own requirements.
bench-tokens: services ## fencegate token cluster vs a 3-node etcd cluster
	cd bench && $(GO) run ./tokens

bench-proxy: services ## pgbench direct vs PgBouncer vs fencegate proxy
	cd bench && $(GO) run ./proxy

bench-locks: services ## lockclient vs bsm/redislock and go-redsync/redsync
	cd bench && $(GO) run ./locks

bench-cycle: services ## the fenced critical section (lock, token, fenced UPDATE, release) vs the unfenced one
	cd bench && $(GO) run ./cycle

bench-tables: services ## a protected table vs its unprotected twin (pgfence)
	cd bench && $(GO) run ./fencebench

bench-instructions: ## PostgreSQL's instructions per fenced write vs the same write unfenced (callgrind, single-user mode)
	cd bench && $(GO) run ./instructions

test-bench: ## unit tests of the bench module
	cd bench && $(GO) test -count=1 ./...

bench-node: services ## Node.js client vs npm redlock, and its fenced cycle vs redlock + the same UPDATE unfenced
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkNodeVsRedlock$$' -benchtime 1x -v -timeout 30m ./clients/node/

bench-python: services ## the Python client's fenced critical section vs redis-py's Lock (or a quorum lock) and the same UPDATE unfenced
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkPythonCycle$$' -benchtime 1x -v -timeout 30m ./clients/python/

faults: services ## fault campaign (RUNS=N)
	$(GO) run ./cmd/fencegate faults --runs $(or $(RUNS),5)
