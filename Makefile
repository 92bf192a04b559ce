# okiba — build and test entry points. `make test` is what CI runs (.ci/run); it prints
# how long each tier took against its budget (DESIGN.md §5).
GO ?= go
export GOFLAGS ?= -buildvcs=false
# Tiers filter verbose test output through grep: the tier must still fail when go test does.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c

.PHONY: test build vet unit model storage torture-short bench-smoke browser torture fuzz bench bench-quick bench-setup bench-go clean

## test: everything CI checks, tier by tier.
test: build vet unit model storage torture-short bench-smoke browser
	@echo "make test: all tiers passed"

define timed
	@start=$$(date +%s); $(2) || exit 1; \
	took=$$(( $$(date +%s) - start )); echo "tier $(1): ok in $${took}s (budget $(3)s)"
endef

build:
	$(call timed,build,$(GO) build ./...,180)

vet:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(call timed,vet,$(GO) vet ./...,60)

## unit: every package's tests with the race detector (fuzz seed corpora replay here too);
## -short leaves the storage fault injection and the torture to their own tiers.
unit:
	$(call timed,unit,$(GO) test -race -short -count=1 ./...,240)

## storage: crash at every file-system operation of a workload, torn writes, bit flips,
## failed fsyncs (seeds printed; OKIBA_CRASH_SEED replays one).
storage:
	$(call timed,storage,$(GO) test -race -count=1 -run 'CrashAt|BitFlips|FsyncFailureAtEvery' -v ./broker 2>&1 | grep -E '^(=== RUN|--- |ok|FAIL|PASS)|seed|crash points|flips' ,120)

## torture-short: kill -9 the real binary under load, 20 cycles (OKIBA_TORTURE_SEED replays).
torture-short:
	$(call timed,torture,$(GO) test -count=1 -run TestTortureShort -v ./torture 2>&1 | grep -E '^(--- |ok|FAIL)|seed=|lost|duplicated|reordered:|resurrected:|vanished:|unexpected:' ,60)

## torture: the long run: 1000 kill cycles with small segments and checkpoints.
torture:
	$(GO) run ./cmd/okiba torture --cycles 1000

## model: a deeper run of the state machine against its reference model (fixed count).
model:
	$(call timed,model,$(GO) test -race -count=1 ./queue -run Model -rapid.checks=3000 -rapid.steps=100,120)

## fuzz: each fuzz target for FUZZTIME (default 1m); new crashers land in testdata/fuzz.
FUZZTIME ?= 1m
fuzz:
	$(GO) test ./queue -run '^$$' -fuzz '^FuzzDecodeRecord$$' -fuzztime $(FUZZTIME)
	$(GO) test ./queue -run '^$$' -fuzz '^FuzzRestore$$' -fuzztime $(FUZZTIME)
	$(GO) test ./wal -run '^$$' -fuzz '^FuzzOpen$$' -fuzztime $(FUZZTIME)
	$(GO) test ./receipt -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME)
	$(GO) test ./api -run '^$$' -fuzz '^FuzzBinary$$' -fuzztime $(FUZZTIME)
	$(GO) test ./server -run '^$$' -fuzz '^FuzzRequests$$' -fuzztime $(FUZZTIME)
	$(GO) test ./server -run '^$$' -fuzz '^FuzzQueueConfig$$' -fuzztime $(FUZZTIME)
	$(GO) test ./wal -run '^$$' -fuzz '^FuzzLoadCheckpoint$$' -fuzztime $(FUZZTIME)
	$(GO) test ./sqs -run '^$$' -fuzz '^FuzzRequest$$' -fuzztime $(FUZZTIME)

## browser: the console in real headless Chromium (web/e2e: sign-in, overview, queue page,
## dead-letter redrive, every playground lesson; screenshots in web/e2e/artifacts/).
## Needs /usr/bin/chromium and `npm ci --prefix web/e2e` (.ci/run installs both).
browser:
	$(call timed,browser,$(GO) test -count=1 -run TestBrowser -v ./web/e2e 2>&1 | grep -E '^(--- |ok|FAIL|PASS)|SKIP|step:|FAIL:|expected:' ,120)

## bench-smoke: the side-by-side harness (bench/, its own module) on okiba alone, every
## scenario at a tiny scale, so that it keeps working; no peer needs installing, and
## nothing is asserted about speed.
bench-smoke:
	$(call timed,bench-smoke,cd bench && $(GO) vet ./... && $(GO) test -count=1 ./...,180)

## bench: okiba side by side with its peers (docs/benchmarks.md, "Side by side"): installs
## the peers, builds okiba from this tree, runs every scenario (hours on 2 cores) and
## writes bench/results/. BENCH_FLAGS narrows it, e.g. BENCH_FLAGS='--scenarios s2 --sizes 1024'.
bench: bench-setup
	cd bench && $(GO) run ./cmd/okibabench --mode full $(BENCH_FLAGS)

## bench-quick: the same harness in 1–2 minutes: okiba, Redis, PostgreSQL, RabbitMQ quorum
## and the log ceiling on the 1 KiB headline cells of scenarios 1–3.
bench-quick: bench-setup
	cd bench && $(GO) run ./cmd/okibabench --mode quick $(BENCH_FLAGS)

## bench-setup: Debian's redis-server, rabbitmq-server and postgresql (apt-get, as root)
## and nats-server into bench/.tools/bin.
bench-setup:
	bash bench/setup.sh

## bench-go: okiba's own Go benchmarks recorded in docs/benchmarks.md.
bench-go:
	$(GO) test -run '^$$' -bench . -benchtime 3s ./queue ./wal ./broker ./server

clean:
	rm -rf okiba-data
