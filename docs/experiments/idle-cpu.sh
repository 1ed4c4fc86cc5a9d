#!/usr/bin/env bash
# Measures what an idle `syncer run` costs: its CPU and its threads'
# voluntary context switches a second, over 20 s, 15 s after its start, on
# an empty schema of its own (docs/benchmarks.md, "Where issue 32 stops",
# "The idle daemon"). Alternate builds to compare them:
#
#   docs/experiments/idle-cpu.sh bin/syncer
#   GOMAXPROCS=2 docs/experiments/idle-cpu.sh bin/syncer   # no governor
#
# DATABASE (default postgres://postgres@127.0.0.1:5432/test) names the
# database; the schema idle_cpu is created and dropped.
set -euo pipefail
bin=${1:?usage: idle-cpu.sh path/to/syncer}
db=${DATABASE:-postgres://postgres@127.0.0.1:5432/test}
dsn="$db?search_path=idle_cpu"
fake_addr=127.0.0.1:18199
http_addr=127.0.0.1:18198

psql "$db" -qc "DROP SCHEMA IF EXISTS idle_cpu CASCADE; CREATE SCHEMA idle_cpu"
pids=()
cleanup() {
	kill "${pids[@]}" 2>/dev/null || true
	wait 2>/dev/null || true
	psql "$db" -qc "DROP SCHEMA IF EXISTS idle_cpu CASCADE" 2>/dev/null || true
}
trap cleanup EXIT
"$bin" migrate --database-url "$dsn" >/dev/null 2>&1
"$bin" fake-thirdparty --addr "$fake_addr" >/dev/null 2>&1 &
pids+=($!)
"$bin" run --database-url "$dsn" --thirdparty-url "http://$fake_addr" --http-addr "$http_addr" \
	--log-level warn --log-format text >/dev/null 2>&1 &
pid=$!
pids+=("$pid")
sleep 15

ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
switches() { cat /proc/"$pid"/task/*/status | awk '/^voluntary_ctxt_switches/ {n += $2} END {print n}'; }
hz=$(getconf CLK_TCK)
c0=$(ticks) s0=$(switches)
sleep 20
c1=$(ticks) s1=$(switches)
echo "idle: $(( (c1 - c0) * 1000 / hz / 20 )) ms of CPU a second, $(( (s1 - s0) / 20 )) voluntary switches a second (GOMAXPROCS=${GOMAXPROCS:-unset})"
