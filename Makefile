# okiba — build and test entry points. `make test` is what CI runs (.ci/run); it prints
# how long each tier took against its budget (DESIGN.md §5).
GO ?= go
export GOFLAGS ?= -buildvcs=false

.PHONY: test build vet unit model fuzz bench clean

## test: everything CI checks, tier by tier.
test: build vet unit model
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

## unit: every package's tests with the race detector (fuzz seed corpora replay here too).
unit:
	$(call timed,unit,$(GO) test -race -count=1 ./...,240)

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
	$(GO) test ./server -run '^$$' -fuzz '^FuzzRequests$$' -fuzztime $(FUZZTIME)

## bench: the Go benchmarks recorded in docs/benchmarks.md.
bench:
	$(GO) test -run '^$$' -bench . -benchtime 3s ./queue ./wal ./broker ./server

clean:
	rm -rf okiba-data
