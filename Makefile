# The two commands the README promises: `make demo` and `make test`.
GO ?= go
export PATH := $(PATH):/usr/local/go/bin

.PHONY: build test test-short bench bench-tiny bench-against demo vet soak

# The version and commit syncer reports (`syncer version`, syncer_build_info),
# from git; a tree without git falls back to what Go records.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
BUILDINFO := github.com/syncer-dev/syncer/internal/buildinfo
LDFLAGS := -X $(BUILDINFO).Version=$(VERSION) -X $(BUILDINFO).Commit=$(COMMIT)

# Two binaries: syncer, the daemon and the operator's commands, the one a
# production container runs; syncer-lab, the bench, the soak and the fake
# third party (docs/design.md, "The lab is a binary of its own"). Both in
# bin/, where each finds the other. Built as the Dockerfile builds them
# (static, no symbol table, no DWARF, no local paths), so the bench measures
# the binary that ships: a cgo build maps libc besides (1.5 MiB more peak RSS)
# and is 32.1 MB where this one is 22.4 MB (docs/benchmarks.md, memory).
BUILDFLAGS := -trimpath -ldflags "-s -w $(LDFLAGS)"
build:
	CGO_ENABLED=0 $(GO) build $(BUILDFLAGS) -o bin/syncer ./cmd/syncer
	CGO_ENABLED=0 $(GO) build $(BUILDFLAGS) -o bin/syncer-lab ./cmd/syncer-lab

vet:
	$(GO) vet ./...
	cd deploy && $(GO) vet ./...

# Every test, against the local PostgreSQL (started if it is down), with the
# race detector. Each test makes and drops its own schema. Three suites:
# the daemon's module; conformance/, the formats against the specifications'
# own libraries, and deploy/, whose tests need Prometheus' parsers: modules
# of their own, so the daemon's module graph carries neither and ./... does
# not reach them. scripts/test.sh runs every suite whatever the others did
# (one flaky test must not hide two suites) and fails at the end naming
# what failed.
test:
	GO="$(GO)" ./scripts/test.sh

# The benchmark of the README, at its default sizes (about 10 minutes).
bench: build
	./scripts/ensure-postgres.sh
	./bin/syncer-lab bench --json bench-default.json

# The benchmark at a tiny size, so CI keeps it working.
bench-tiny: build
	./scripts/ensure-postgres.sh
	./bin/syncer-lab bench --size tiny

# This build against the daemon at REF (default: the last tag, else where
# this branch left main), built as `build` builds it and kept in bin/refs/:
# each row runs for both, alternated ROUNDS times, and the table names every
# figure more than 10% worse (docs/tests.md, "Speed against the release").
# ONLY picks scenarios (default: drain, latency, memory, slow-api, sources,
# tenants); SIZE=tiny checks the machinery in a few minutes.
REF ?= auto
ROUNDS ?= 3
ONLY ?=
SIZE ?= default
bench-against: build
	./scripts/ensure-postgres.sh
	./bin/syncer-lab bench --against $(REF) --rounds $(ROUNDS) --size $(SIZE) $(if $(ONLY),--only $(ONLY)) --json bench-against.json

# The seeded chaos soak (docs/tests.md): SOAK_DURATION (default 10m) of
# faults and writes against a PostgreSQL server the soak runs for itself,
# then every check; SOAK_SEED replays a run. Exits 1 on any violation. Its
# pooler leg (SOAK_POOLER, default direct) runs one daemon through a
# PgBouncer of its own in transaction mode.
soak: build
	./scripts/ensure-pgbouncer.sh
	./bin/syncer-lab soak

# Migrate a scratch database, start the fake third party and the daemon,
# insert rows and watch them arrive.
demo:
	./scripts/ensure-postgres.sh
	./scripts/demo.sh
