# quorate Makefile. Every tool this file needs is installed from the Go module
# proxy at a pinned version into ./bin, so a fresh machine needs only Go and make.

GO          ?= go
BIN         := $(CURDIR)/bin
STATICCHECK_VERSION := v0.8.2
STATICCHECK := $(BIN)/staticcheck
GOVULNCHECK_VERSION := v1.9.0
GOVULNCHECK := $(BIN)/govulncheck
# The vulnerability database, as a Go module (vuln.go.dev is out of reach
# here); bump the version to see newer advisories.
VULNDB_VERSION := v0.0.0-20261105234957-e22db6528018
VULNDB      := $(BIN)/vulndb-$(VULNDB_VERSION)
VULN_DB     ?= file://$(VULNDB)
GREMLINS_VERSION := v0.6.0
GREMLINS    := $(BIN)/gremlins
FUZZTIME    ?= 20s
BENCHTIME   ?= 1s
TEST_TIMEOUT ?= 15m

PKGS := ./...

PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
NODES ?= 3

.PHONY: screenshot all build run test verify vulncheck bench bench-go bench-compare fuzz fuzz-ci mutate proto tidy clean tools chaos

all: build

build:
	$(GO) build $(PKGS)
	$(GO) build -o $(BIN)/quorate ./cmd/quorate

## run: a local cluster of NODES (default 3) on 127.0.0.1, data in ./data; Ctrl-C stops it.
##      AGENT_FLAGS are passed to every node's agent (e.g. AGENT_FLAGS="--lease-ttl 30s").
run:
	$(GO) build -o $(BIN)/quorate ./cmd/quorate
	$(BIN)/quorate dev --nodes $(NODES) --data ./data --policies examples/policies.yaml $(if $(AGENT_FLAGS),-- $(AGENT_FLAGS))

## screenshot: a screenshot of the status page of the cluster make run
##      started in this checkout (another terminal), to docs/status-page.png;
##      needs Chromium (apt-get install chromium).
screenshot:
	QUORATE_ROOT=$(CURDIR) $(GO) test -tags screenshot -count=1 -run TestScreenshot -v ./scripts/screenshot/

## test: every test, race detector on.
test:
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

## verify: formatting, vet, staticcheck, a tidy go.mod and govulncheck.
verify: $(STATICCHECK) vulncheck
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^bin/')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(STATICCHECK) $(PKGS)
	@cp go.mod /tmp/quorate.go.mod.bak; cp go.sum /tmp/quorate.go.sum.bak 2>/dev/null || true; \
	  $(GO) mod tidy; \
	  if ! git diff --quiet -- go.mod go.sum; then \
	    echo "go mod tidy changed go.mod/go.sum:"; git --no-pager diff -- go.mod go.sum; exit 1; fi

## vulncheck: govulncheck with VULN_DB (default: the pinned offline copy).
## Fails on called vulnerabilities in required modules; those in the
## standard library (fixed by a newer Go than the machine's) are a warning.
vulncheck: $(GOVULNCHECK) $(VULNDB)
	./scripts/vulncheck.sh $(GOVULNCHECK) $(VULN_DB)

## bench: the standard load suite (quorate bench --suite standard) against a
## local three-node cluster; the report goes to bench/results/<time>/ (and
## bench/results/latest). BENCH_ARGS adds flags, e.g. BENCH_ARGS='--duration 10s'.
BENCH_OUT  ?= bench/results/$(shell date -u +%Y%m%d-%H%M%S)
BENCH_ARGS ?=
bench:
	$(GO) build -o $(BIN)/quorate ./cmd/quorate
	$(BIN)/quorate bench --local 3 --suite standard --out $(BENCH_OUT) $(BENCH_ARGS)

## bench-compare: the standard suite side by side with a Redis baseline
## (redis-server installed with apt-get if missing, run on a free loopback
## port without persistence, stopped afterwards).
bench-compare:
	$(GO) build -o $(BIN)/quorate ./cmd/quorate
	QUORATE=$(BIN)/quorate OUT=$(BENCH_OUT)-compare ./bench/compare.sh $(BENCH_ARGS)

## chaos: the fault-injection harness for DURATION (default 10m) with SEED
## (empty: from the time, printed); the report goes to chaos/results/<time>/.
## Partitions need root and nftables.
DURATION ?= 10m
SEED     ?=
chaos:
	$(GO) build -o $(BIN)/quorate ./cmd/quorate
	$(BIN)/quorate chaos --duration $(DURATION) $(if $(SEED),--seed $(SEED))

## bench-go: the Go micro-benchmarks of the deterministic core.
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./fsm/ ./ring/

## fuzz: each fuzz target for FUZZTIME (default 20s); scripts/fuzz.sh says which failures count.
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh

## fuzz-ci: each fuzz target for FUZZTIME_CI (default 10s), as CI runs it
## after make test (the seed corpora already run as tests in make test).
FUZZTIME_CI ?= 10s
fuzz-ci:
	$(MAKE) fuzz FUZZTIME=$(FUZZTIME_CI)

## mutate: mutation testing (gremlins) of MUTATE_PKGS, bounded to run in
## about an hour on two cores (fsm about 40 minutes, lease and shard 6): the files that decide, replicate, batch and
## lease (the algorithms' arithmetic, codecs and the WAL, which have model
## and fuzz tests, are excluded below), and a timeout per mutant of
## MUTATE_TIMEOUT_COEF times the package's test time. Prints each package's
## test efficacy (killed / (killed + lived)); details in bin/mutate-*.txt.
MUTATE_PKGS ?= fsm shard lease
MUTATE_TIMEOUT_COEF ?= 10
MUTATE_EXCLUDE_fsm   := -E 'buckets\.go' -E 'limit\.go' -E 'codec\.go' -E 'sweep\.go' -E 'filter\.go' -E 'exact/' -E 'errors\.go'
MUTATE_EXCLUDE_shard := -E 'raftlog/' -E 'group\.go'
MUTATE_EXCLUDE_lease := -E 'config\.go'
# fsm's property tests run a tenth of their seeds under the mutate tag.
MUTATE_TAGS_fsm := --tags mutate
mutate: $(GREMLINS)
	@set -e; $(foreach p,$(MUTATE_PKGS),echo "== gremlins $(p)"; \
	  (cd $(p) && $(GREMLINS) unleash --timeout-coefficient $(MUTATE_TIMEOUT_COEF) $(MUTATE_TAGS_$(p)) $(MUTATE_EXCLUDE_$(p)) -o $(BIN)/mutate-$(p).json) | tee $(BIN)/mutate-$(p).txt;) \
	echo "== mutation score"; \
	for p in $(MUTATE_PKGS); do \
	  printf '%s: ' $$p; grep -E 'Killed:|Test efficacy' $(BIN)/mutate-$$p.txt | tr '\n' ' '; echo; \
	done

## proto: regenerate rpc/ from its .proto files (needs protoc: apt-get install protobuf-compiler).
proto:
	GOBIN=$(BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(BIN) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	BIN=$(BIN) GO=$(GO) PROTOC_GEN_GO_VERSION=$(PROTOC_GEN_GO_VERSION) PROTOC_GEN_GO_GRPC_VERSION=$(PROTOC_GEN_GO_GRPC_VERSION) ./scripts/proto.sh

tools: $(STATICCHECK) $(GOVULNCHECK) $(GREMLINS)

$(STATICCHECK):
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

$(GOVULNCHECK):
	GOBIN=$(BIN) $(GO) install golang.org/x/vuln/cmd/govulncheck@$(GOVULNCHECK_VERSION)

$(GREMLINS):
	GOBIN=$(BIN) $(GO) install github.com/go-gremlins/gremlins/cmd/gremlins@$(GREMLINS_VERSION)

# The module carries the advisories as OSV files; its indexdb command turns
# them into the layout govulncheck reads (about a minute, once).
$(VULNDB):
	@mkdir -p $(BIN)
	dir=$$(cd $(BIN) && GOFLAGS= $(GO) mod download -json golang.org/x/vulndb@$(VULNDB_VERSION) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p'); \
	  test -n "$$dir" && rm -rf $@.tmp && \
	  (cd $(BIN) && GOFLAGS= $(GO) run golang.org/x/vulndb/cmd/indexdb@$(VULNDB_VERSION) -vulns $$dir/data/osv -out $@.tmp) && mv $@.tmp $@

tidy:
	$(GO) mod tidy

clean:
	rm -rf $(BIN)
