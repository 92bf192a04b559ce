# okiba — build and test entry points. `make test` is what CI runs (.ci/run): it runs the
# tiers one after another and ends with a summary (internal/testreport): each tier's time
# against its budget, the total against 15 minutes, and every suite that was skipped, why,
# and the command that enables it. Under CI=true a skipped suite or a total past 15 minutes
# fails. `make deps` installs and starts what the suites need (as .ci/run does).
GO ?= go
# Every build but the race detector's is the release's (make release): static (no cgo)
# and -trimpath, so that the tiers, the binary tests and the release share one build
# cache and test the binary that ships. The race tiers turn cgo back on, which -race needs.
export GOFLAGS := $(filter-out -trimpath,$(or $(GOFLAGS),-buildvcs=false)) -trimpath
export CGO_ENABLED ?= 0
RACE := env CGO_ENABLED=1 $(GO)
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c

# Where the tiers record their times and skips for the summary.
export TESTREPORT_DIR ?= .test-report
REPORT := $(TESTREPORT_DIR)/testreport
TIERS := build vet unit model storage binary bench-smoke browser

.PHONY: test deps torture-cluster release release-binary image build vet unit model storage binary torture-short bench-smoke browser torture torture-replica fuzz bench bench-quick bench-setup bench-go bench-topics bench-topic-memory clean

## test: everything CI checks, tier by tier, then the summary (printed even when a tier fails).
test: $(REPORT)
	@$(REPORT) start
	@rc=0; for tier in $(TIERS); do $(MAKE) --no-print-directory $$tier || { rc=1; break; }; done; \
	$(REPORT) summary -tiers "$(TIERS)" || rc=1; exit $$rc

$(REPORT): $(wildcard internal/testreport/*.go)
	@$(GO) build -o $@ ./internal/testreport

## deps: install and start what the suites need (Node.js packages, Chromium, PostgreSQL on
## 127.0.0.1:54329, left running): the provisioning .ci/run does. Needs root for apt-get.
deps:
	OKIBA_CI_PG_KEEP=1 bash .ci/provision

## release: okiba for linux and darwin on amd64 and arm64, and the CLI for windows/amd64
## (docs/operations.md, "Platforms"), in $(DIST)/ with SHA256SUMS. Reproducible: one
## commit gives the same bytes whoever builds it and whenever, with the same Go — static,
## -trimpath, and stamped (-ldflags -X, internal/buildinfo) with VERSION (default: the
## v* tag on HEAD, else devel), the commit and its date (SOURCE_DATE_EPOCH, by default the
## commit's; also the files' times). The binary tier builds one target twice to check.
VERSION ?= $(shell git describe --tags --match 'v*' --dirty 2>/dev/null || echo devel)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
MODIFIED ?= $(shell git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo true)
DIST ?= dist
PLATFORMS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64
BUILDINFO := github.com/okiba/okiba/internal/buildinfo
RELEASE_LDFLAGS = -s -w -X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).commit=$(COMMIT) \
	-X $(BUILDINFO).commitTime=$(SOURCE_DATE_EPOCH) -X $(BUILDINFO).modified=$(MODIFIED)
release:
	rm -rf $(DIST)
	@for p in $(PLATFORMS); do $(MAKE) --no-print-directory release-binary GOOS=$${p%/*} GOARCH=$${p#*/} || exit 1; done
	cd $(DIST) && sha256sum okiba-* >SHA256SUMS && touch -d @$(SOURCE_DATE_EPOCH) SHA256SUMS && cat SHA256SUMS

## release-binary: one of them, for GOOS and GOARCH (default this machine's), as
## $(DIST)/okiba-GOOS-GOARCH (.exe for windows).
GOOS ?= $(shell $(GO) env GOOS)
GOARCH ?= $(shell $(GO) env GOARCH)
release-binary:
	@mkdir -p $(DIST)
	CGO_ENABLED=0 GOOS=$(GOOS) GOARCH=$(GOARCH) $(GO) build -trimpath -ldflags '$(RELEASE_LDFLAGS)' \
		-o $(DIST)/okiba-$(GOOS)-$(GOARCH)$(if $(filter windows,$(GOOS)),.exe) ./cmd/okiba
	@touch -d @$(SOURCE_DATE_EPOCH) $(DIST)/okiba-$(GOOS)-$(GOARCH)$(if $(filter windows,$(GOOS)),.exe)

## image: the container image (Containerfile, FROM scratch) of release-binary for linux on
## this machine's architecture, built by podman (--format docker keeps its HEALTHCHECK) as
## IMAGE, from a context in $(DIST)/image.
IMAGE ?= okiba:$(VERSION)
image:
	@$(MAKE) --no-print-directory release-binary GOOS=linux
	rm -rf $(DIST)/image && mkdir -p $(DIST)/image/data
	cp $(DIST)/okiba-linux-$(GOARCH) $(DIST)/image/okiba
	cp Containerfile deploy/container/passwd deploy/container/group $(DIST)/image/
	podman build --format docker --quiet --tag $(IMAGE) $(DIST)/image

# tier NAME BUDGET-SECONDS [testreport flags] -- COMMAND
tier = $(REPORT) run -tier $(1) -budget $(2)

build: $(REPORT)
	@$(call tier,build,180) -- $(GO) build ./...

vet: $(REPORT)
	@$(call tier,vet,60) -- bash -c 'out=$$(gofmt -l $$(git ls-files "*.go" 2>/dev/null || find . -name "*.go")); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi; $(GO) vet ./...'

## unit: every package's tests with the race detector (fuzz seed corpora replay here too);
## -short leaves the storage fault injection, the real binary and the browser to their tiers.
## Its budget grew by 75 s with topics, subscriptions and consumer groups, and by 105 s
## with the SQS query protocol's and SNS's real clients (boto3, the AWS CLI) and the
## cluster's in-process brokers.
unit: $(REPORT)
	@$(call tier,unit,420) -json -- $(RACE) test -json -race -short -count=1 ./...

## storage: crash at every file-system operation of a workload, torn writes, bit flips,
## failed fsyncs (seeds printed; OKIBA_CRASH_SEED replays one). Topics' crash test made it
## 20-30 s longer; how long the crash test takes follows its seed (the crash points its
## workload meets: 252 took 122 s on a quiet 2-core machine, 143 s for the tier), hence 180 s.
storage: $(REPORT)
	@$(call tier,storage,180) -json -show '^ *--- |seed|crash points|flips' -- \
		$(RACE) test -json -race -count=1 -run 'CrashAt|BitFlips|FsyncFailureAtEvery' ./broker

## binary: the real binary end to end, built by release-binary: serve started, used and
## stopped by signal; kill -9 under load for 20 cycles (OKIBA_TORTURE_SEED replays); the
## release build reproduced (built twice, the same bytes); deploy/okiba.service checked
## by systemd-analyze; the container image built and run by podman (about 10 s more, hence
## 105 s); okiba consume's commands surviving a terminal's Ctrl-C; a cluster of three
## processes whose leader is killed twice (about 10 s more, hence 120 s); a full disk (a
## 24 MiB tmpfs the test mounts, as root) filled, killed on, restarted and drained (2-5 s
## more, hence 125 s); the cluster's leader cut off by a real partition (network
## namespaces the test makes and removes, as root; about 8 s, in parallel with the rest).
binary: $(REPORT)
	@$(call tier,binary,135) -json -show '^ *--- |seed=|lost|duplicated|reordered:|resurrected:|vanished:|unexpected:|failover' -- \
		$(GO) test -json -count=1 -run '^(TestTortureShort|TestServeBinary|TestReleaseReproducible|TestSystemdUnit|TestContainer|TestConsumeBinaryCtrlC|TestClusterBinary|TestClusterPartitionBinary|TestClusterMutualTLSBinary|TestServeBinaryFullDisk)$$' ./internal/torture ./cmd/okiba
torture-short: binary

## torture-cluster: a cluster of three processes under load through 200 fault cycles
## (the leader or a follower killed, the leader paused), bounded at 30 minutes; every
## acknowledged send delivered, nothing unexpected, the failover time reported.
## OKIBA_CLUSTER_CYCLES and OKIBA_CLUSTER_SEED change the run.
torture-cluster:
	$(GO) test -tags torture -count=1 -timeout 35m -v -run '^TestClusterTorture$$' ./cmd/okiba

## torture: the long run: 1000 kill cycles with small segments and checkpoints.
torture:
	$(GO) run ./cmd/okiba torture --cycles 1000

## torture-replica: the Raft layer's simulation over many more seeds (REPLICA_SEEDS per cluster
## size, default 2000): drops, delays, duplicates, partitions, crashes, against the reference.
REPLICA_SEEDS ?= 2000
torture-replica:
	OKIBA_REPLICA_SEEDS=$(REPLICA_SEEDS) $(GO) test -count=1 -timeout 60m -run 'Sim' ./internal/replica

## model: a deeper run of the state machine against its reference model (fixed count).
model: $(REPORT)
	@$(call tier,model,120) -json -- $(RACE) test -json -race -count=1 ./queue -run Model -rapid.checks=3000 -rapid.steps=100

## fuzz: each fuzz target for FUZZTIME (default 1m); new crashers land in testdata/fuzz.
FUZZTIME ?= 1m
fuzz:
	$(GO) test ./queue -run '^$$' -fuzz '^FuzzDecodeRecord$$' -fuzztime $(FUZZTIME)
	$(GO) test ./queue -run '^$$' -fuzz '^FuzzRestore$$' -fuzztime $(FUZZTIME)
	$(GO) test ./wal -run '^$$' -fuzz '^FuzzOpen$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/receipt -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME)
	$(GO) test ./api -run '^$$' -fuzz '^FuzzBinary$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/nativeapi -run '^$$' -fuzz '^FuzzRequests$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/service -run '^$$' -fuzz '^FuzzQueueConfig$$' -fuzztime $(FUZZTIME)
	$(GO) test ./wal -run '^$$' -fuzz '^FuzzLoadCheckpoint$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/sqs -run '^$$' -fuzz '^FuzzRequest$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/sqs -run '^$$' -fuzz '^FuzzQueryForm$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/sqs -run '^$$' -fuzz '^FuzzFastDecode$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/sqs -run '^$$' -fuzz '^FuzzAppendString$$' -fuzztime $(FUZZTIME)
	$(GO) test ./api -run '^$$' -fuzz '^FuzzFrame$$' -fuzztime $(FUZZTIME)
	$(GO) test ./api -run '^$$' -fuzz '^FuzzBinaryTopics$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/names -run '^$$' -fuzz '^FuzzGrammarIsWithinTheCore$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/filter -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/filter -run '^$$' -fuzz '^FuzzScan$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/replica -run '^$$' -fuzz '^FuzzDecodeEntry$$' -fuzztime $(FUZZTIME)

## browser: the console in real headless Chromium (internal/console/e2e: sign-in, overview, queue page,
## dead-letter redrive, every playground lesson; screenshots in internal/console/e2e/artifacts/).
## Needs /usr/bin/chromium and `npm ci --prefix internal/console/e2e` (.ci/run installs both).
browser: $(REPORT)
	@$(call tier,browser,120) -json -show '^ *--- |step:|FAIL:|expected:' -- $(GO) test -json -count=1 -run TestBrowser ./internal/console/e2e

## bench-smoke: the side-by-side harness (bench/, its own module) on okiba alone, every
## scenario at a tiny scale, so that it keeps working; no peer needs installing, and
## nothing is asserted about speed.
bench-smoke: $(REPORT)
	@$(call tier,bench-smoke,180) -json -- bash -c 'cd bench && $(GO) vet ./... && $(GO) test -json -count=1 ./...'

## bench: okiba side by side with its peers (docs/benchmarks.md, "Side by side"): installs
## the peers, builds okiba from this tree, runs every scenario (hours on 2 cores) and
## writes bench/results/. BENCH_FLAGS narrows it, e.g. BENCH_FLAGS='--scenarios s2 --sizes 1024'.
bench: bench-setup
	cd bench && $(GO) run ./cmd/okibabench --mode full $(BENCH_FLAGS)

## bench-quick: the same harness in 1–2 minutes: okiba, Redis, PostgreSQL, RabbitMQ quorum
## and the log ceiling on the 1 KiB headline cells of scenarios 1–3.
bench-quick: bench-setup
	cd bench && $(GO) run ./cmd/okibabench --mode quick $(BENCH_FLAGS)

## bench-topics: the topic scenarios alone (t1–t4: topic vs queue publish, group drain beside
## Redis streams, JetStream and RabbitMQ streams, fan-out, the cold read of 10M records).
bench-topics: bench-setup
	cd bench && $(GO) run ./cmd/okibabench --mode full --systems okiba-http,redis-always,jetstream-always,rabbitmq-stream-amqp --scenarios t1,t2,t3,t4 --sizes 1024 --repeats 5 $(BENCH_FLAGS)

## bench-topic-memory: the broker's heap per topic at 100M retained 64-byte records
## (BenchmarkTopicHeap; TOPIC_MEMORY_RECORDS narrows it; ~10 GB of segment files).
TOPIC_MEMORY_RECORDS ?= 100000000
bench-topic-memory:
	OKIBA_TOPIC_MEMORY_RECORDS=$(TOPIC_MEMORY_RECORDS) $(GO) test -run '^$$' -bench '^BenchmarkTopicHeap$$' -benchtime 1x -timeout 6h ./broker

## bench-setup: Debian's redis-server, rabbitmq-server and postgresql (apt-get, as root)
## and nats-server into bench/.tools/bin.
bench-setup:
	bash bench/setup.sh

## bench-go: okiba's own Go benchmarks recorded in docs/benchmarks.md.
bench-go:
	$(GO) test -run '^$$' -bench . -benchtime 3s ./queue ./wal ./broker ./internal/nativeapi

clean:
	rm -rf okiba-data $(TESTREPORT_DIR) $(DIST)
