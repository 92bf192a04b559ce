# okiba — build and test entry points. `make test` is what CI runs (.ci/run).
GO ?= go
PKGS := ./...

.PHONY: test vet unit build fmt bench clean

## test: everything CI checks: formatting, vet, and the race-enabled test suite.
test: build vet unit

build:
	@start=$$(date +%s); $(GO) build ./... && echo "build: ok in $$(( $$(date +%s) - start ))s"

vet:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

unit:
	@start=$$(date +%s); $(GO) test -race -count=1 $(PKGS) && echo "unit: ok in $$(( $$(date +%s) - start ))s"

## bench: the Go micro-benchmarks recorded in docs/benchmarks.md.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

fmt:
	gofmt -w $$(git ls-files '*.go')
