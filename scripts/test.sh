#!/usr/bin/env bash
# make test: every test suite, each with -race against the local PostgreSQL,
# and each run whatever the others did: a flaky test in one module must not
# hide the tests of the next. Exits 1 at the end if any step failed, naming
# the steps and repeating their failing tests and packages, so the verdict
# is at the bottom of the output and not 20,000 lines up.
#
# Usage: scripts/test.sh [MODULE_DIR ...]
#   MODULE_DIR  a Go module whose ./... is one suite, relative to the
#               current directory. Without any: first what the suites need
#               (PostgreSQL, pgbouncer, chromium: scripts/ensure-*.sh), then
#               the daemon's module (.), conformance/ and deploy/ (modules
#               of their own: ./... of the main module reaches neither).
# GO names the go command (the Makefile passes its own).
set -uo pipefail
GO=${GO:-go}
scripts=$(cd "$(dirname "$0")" && pwd)
ensure=""
if [ $# -eq 0 ]; then
  cd "$scripts/.."
  set -- . conformance deploy
  ensure=1
fi

# Ctrl-C or a kill stops the whole run, not only the suite in progress.
trap 'echo "test.sh: interrupted" >&2; exit 130' INT TERM

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
failed=()
ran=0

# step NAME CMD...: runs CMD, its output shown and kept, and records NAME
# as failed when CMD fails.
step() {
  local name=$1 log
  shift
  ran=$((ran + 1))
  log="$logs/$ran.log"
  echo "=== test.sh: $name" >&2
  "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 0 ]; then
    echo "=== test.sh: $name: ok" >&2
  else
    echo "=== test.sh: $name: FAILED (exit $rc)" >&2
    failed+=("$name|$log")
  fi
}

# gotest DIR [PKG...]: one suite, or the packages named of it.
gotest() {
  local dir=$1
  shift
  [ $# -gt 0 ] || set -- ./...
  echo "(cd $dir && $GO test -race -count=1 -timeout 30m $*)"
  (cd "$dir" && "$GO" test -race -count=1 -timeout 30m "$@")
}

# The end-to-end suite runs syncer processes, several at once, each with
# its own server sessions; beside the other packages' daemons it took the
# server to its 100 connections (a test failed with "too many clients
# already"). So the daemon's module runs in two steps: every other
# package, then the end-to-end suite alone. It is the longest package, so
# the run takes about as long either way.
alone="./internal/e2e"

# What the suites need. A missing one fails its step and the tests that
# need it, not the other suites.
if [ -n "$ensure" ]; then
  step "ensure-postgres" "$scripts/ensure-postgres.sh"
  step "ensure-pgbouncer" "$scripts/ensure-pgbouncer.sh"
  step "ensure-chromium" "$scripts/ensure-chromium.sh"
fi

suites=0
for dir in "$@"; do
  suites=$((suites + 1))
  if [ "$dir" = . ]; then
    pkgs=$(cd "$dir" && "$GO" list ./... | grep -v "/${alone#./}\$")
    # shellcheck disable=SC2086 # one package a word
    step "go test in ./ (all but $alone)" gotest . $pkgs
    step "go test in $alone/ (alone)" gotest . "$alone/..."
  else
    step "go test in $dir/" gotest "$dir"
  fi
done

echo >&2
if [ ${#failed[@]} -eq 0 ]; then
  echo "test.sh: all $suites suites passed ($*)" >&2
  exit 0
fi
echo "test.sh: ${#failed[@]} of $ran steps FAILED:" >&2
for f in "${failed[@]}"; do
  name=${f%%|*}
  log=${f#*|}
  echo "  $name" >&2
  # go test's own verdict lines: the failed tests and packages.
  grep -E '^(--- FAIL|FAIL[[:space:]]|panic:)' "$log" | sed 's/^/    /' | head -n 40 >&2
done
exit 1
