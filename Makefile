# The two commands the README promises: `make demo` and `make test`.
GO ?= go
export PATH := $(PATH):/usr/local/go/bin

.PHONY: build test test-short bench bench-tiny demo vet soak

# The version and commit syncer reports (`syncer version`, syncer_build_info),
# from git; a tree without git falls back to what Go records.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
BUILDINFO := github.com/syncer-dev/syncer/internal/buildinfo
LDFLAGS := -X $(BUILDINFO).Version=$(VERSION) -X $(BUILDINFO).Commit=$(COMMIT)

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/syncer ./cmd/syncer

vet:
	$(GO) vet ./...
	cd deploy && $(GO) vet ./...

# Every test, against the local PostgreSQL (started if it is down), with the
# race detector. Each test makes and drops its own schema. deploy/ is a
# module of its own (its tests need Prometheus' parsers, which the daemon
# does not), so ./... does not reach it.
test:
	./scripts/ensure-postgres.sh
	./scripts/ensure-pgbouncer.sh
	./scripts/ensure-chromium.sh
	$(GO) test -race -count=1 -timeout 30m ./...
	# The formats against the specifications' own libraries: a module of
	# its own, so the daemon's module graph does not carry them.
	cd conformance && $(GO) test -race -count=1 ./...
	cd deploy && $(GO) test -race -count=1 ./...

# The benchmark of the README, at its default sizes (about 10 minutes).
bench: build
	./scripts/ensure-postgres.sh
	./bin/syncer bench --json bench-default.json

# The benchmark at a tiny size, so CI keeps it working.
bench-tiny: build
	./scripts/ensure-postgres.sh
	./bin/syncer bench --size tiny

# The seeded chaos soak (docs/tests.md): SOAK_DURATION (default 10m) of
# faults and writes against a PostgreSQL server the soak runs for itself,
# then every check; SOAK_SEED replays a run. Exits 1 on any violation.
soak: build
	./bin/syncer soak

# Migrate a scratch database, start the fake third party and the daemon,
# insert rows and watch them arrive.
demo:
	./scripts/ensure-postgres.sh
	./scripts/demo.sh
