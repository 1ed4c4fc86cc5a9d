#!/usr/bin/env bash
# The demo: a scratch database, the fake third party, the daemon, and rows
# inserted by plain SQL arriving at the fake. Run it with `make demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

DB=${DEMO_DB:-syncer_demo}
ADMIN_URL=${DEMO_ADMIN_URL:-postgres://postgres@127.0.0.1:5432/postgres}
export DATABASE_URL=${DEMO_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/$DB}
FAKE_ADDR=127.0.0.1:18081
export SYNCER_THIRDPARTY_URL=http://$FAKE_ADDR
export SYNCER_HTTP_ADDR=127.0.0.1:18080
ROWS=${DEMO_ROWS:-20000}

go build -o bin/syncer ./cmd/syncer
psql "$ADMIN_URL" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
./bin/syncer migrate

pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

./bin/syncer fake-thirdparty --addr "$FAKE_ADDR" --latency 2ms > /tmp/syncer-demo-fake.log 2>&1 &
pids+=($!)
./bin/syncer run --log-format text > /tmp/syncer-demo-daemon.log 2>&1 &
pids+=($!)
for _ in $(seq 1 50); do curl -fs "http://$SYNCER_HTTP_ADDR/readyz" >/dev/null 2>&1 && break; sleep 0.2; done
echo "daemon ready; inserting $ROWS rows with plain SQL, in 10 transactions"

received() { curl -fs "http://$FAKE_ADDR/v1/stats" | sed -E 's/.*"distinct_pairs":([0-9]+).*/\1/'; }
for i in $(seq 1 10); do
  psql "$DATABASE_URL" -qc "INSERT INTO resources (payload)
    SELECT jsonb_build_object('order', g, 'customer', 'c-' || (g % 97), 'amount', g * 3)
    FROM generate_series(1, $ROWS / 10) g"
  echo "  inserted $((i * ROWS / 10)), the third party has received $(received)"
done
for _ in $(seq 1 100); do
  [ "$(received)" -ge "$ROWS" ] && break
  sleep 0.1
done
echo "the third party has received $(received) distinct (id, version) pairs"

echo "updating 5 rows: each goes out again as version 2"
psql "$DATABASE_URL" -qc "UPDATE resources SET payload = payload || '{\"amount\": 0}' WHERE id <= 5"
echo "deleting 3 rows: each goes out as a tombstone, above its last version"
psql "$DATABASE_URL" -qc "DELETE FROM resources WHERE id BETWEEN 6 AND 8"
sleep 1
echo
./bin/syncer status
echo
echo "fake third party stats:"
curl -fs "http://$FAKE_ADDR/v1/stats"; echo
echo
echo "metrics (excerpt):"
curl -fs "http://$SYNCER_HTTP_ADDR/metrics" | grep -E '^syncer_(items_exported_total|batches_total|unsynced_rows|lock_held)'
