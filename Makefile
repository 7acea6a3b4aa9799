# ptah: build, test, lint, demo, bench. Needs Go and the PostgreSQL server
# binaries (initdb, pg_ctl); .ci/run installs the latter on Debian/Ubuntu.

GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/ptah-run/ptah/internal/cli.version=$(VERSION)
# The whole suite starts its own PostgreSQL servers and runs hundreds of
# databases; on a small machine under load it takes minutes, not seconds.
TEST_TIMEOUT ?= 25m
# The scale benchmark plans, applies and plans again 10,000 tables.
BENCH_TIMEOUT ?= 90m
STATICCHECK  ?= v0.8.2

.PHONY: all build test lint demo bench clean

all: lint build test

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ptah ./cmd/ptah

test:
	$(GO) test -timeout $(TEST_TIMEOUT) -parallel 8 ./...

lint:
	@out="$$(gofmt -l $$($(GO) list -f '{{.Dir}}' ./...))"; \
	if [ -n "$$out" ]; then echo "gofmt -l reports unformatted files:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK) ./...

demo:
	$(GO) run ./examples/demo

bench:
	$(GO) test -timeout $(BENCH_TIMEOUT) -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf bin
