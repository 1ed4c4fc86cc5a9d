#!/usr/bin/env bash
# The demo: a scratch database holding an application's own table (orders),
# the fake third party, the daemon, and rows written by plain SQL arriving
# at the fake: orders as the configuration says (inserts, updates and
# deletes), and the resources table beside it. syncer's own tables live in
# the schema syncer, out of the application's way. Run it with `make demo`.
#
# Two people on one host each pick their own: DEMO_PORT (default 18080) is
# the daemon's HTTP address (health, metrics, the console) and the next two
# ports the fake third parties'; DEMO_DB (default syncer_demo) the scratch
# database; DEMO_DIR (default a fresh mktemp -d) the configuration and logs.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

DB=${DEMO_DB:-syncer_demo}
ADMIN_URL=${DEMO_ADMIN_URL:-postgres://postgres@127.0.0.1:5432/postgres}
export DATABASE_URL=${DEMO_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/$DB}
export SYNCER_SCHEMA=syncer
PORT=${DEMO_PORT:-18080}
DIR=${DEMO_DIR:-$(mktemp -d /tmp/syncer-demo.XXXXXX)}
mkdir -p "$DIR"
FAKE_ADDR=127.0.0.1:$((PORT + 1))   # resources' third party
CRM_ADDR=127.0.0.1:$((PORT + 2))    # the orders' destination, "crm"
export SYNCER_THIRDPARTY_URL=http://$FAKE_ADDR
export SYNCER_HTTP_ADDR=127.0.0.1:$PORT
export SYNCER_CONFIG=$DIR/syncer-demo.yaml
# The console's token: made here, kept in a file only you can read.
export SYNCER_CONSOLE_TOKEN_FILE=$DIR/console-token
( umask 077; head -c 24 /dev/urandom | base64 | tr -d '/+=' > "$SYNCER_CONSOLE_TOKEN_FILE" )
echo "ports: daemon $SYNCER_HTTP_ADDR (health, metrics, /console), fake third parties $FAKE_ADDR and $CRM_ADDR; database $DB; files in $DIR"
ROWS=${DEMO_ROWS:-20000}
ORDERS=${DEMO_ORDERS:-1000}

go build -o bin/syncer ./cmd/syncer
go build -o bin/syncer-lab ./cmd/syncer-lab # syncer fake-thirdparty runs it
psql "$ADMIN_URL" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"

echo "the application's table, as it already is: orders in public"
psql "$DATABASE_URL" -q <<'SQL'
CREATE TYPE order_status AS ENUM ('new', 'paid', 'shipped');
CREATE TABLE orders (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    status     order_status   NOT NULL DEFAULT 'new',
    total      numeric(12, 2) NOT NULL,
    updated_at timestamptz    NOT NULL DEFAULT now()
);
INSERT INTO orders (total) SELECT g FROM generate_series(1, 10) g;
SQL
cat > "$SYNCER_CONFIG" <<YAML
destinations:
  crm:
    url: http://$CRM_ADDR
sources:
  - table: orders
    key: id
    columns: [status, total]
    destination: crm
    changed_at: updated_at
YAML
echo "the configuration ($SYNCER_CONFIG):"; sed 's/^/  /' "$SYNCER_CONFIG"

pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
./bin/syncer fake-thirdparty --addr "$FAKE_ADDR" --latency 2ms > "$DIR/fake.log" 2>&1 &
pids+=($!)
./bin/syncer fake-thirdparty --addr "$CRM_ADDR" --latency 2ms > "$DIR/crm.log" 2>&1 &
pids+=($!)
sleep 0.3

echo "config check, before migrate (what migrate would change):"
./bin/syncer config check || true
./bin/syncer migrate --log-level warn
./bin/syncer config check
echo "tables in public: $(psql "$DATABASE_URL" -Atc "SELECT string_agg(tablename, ', ') FROM pg_tables WHERE schemaname = 'public'")"
echo "tables in syncer: $(psql "$DATABASE_URL" -Atc "SELECT count(*) FROM pg_tables WHERE schemaname = 'syncer'")"

./bin/syncer run --log-format text > "$DIR/daemon.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 50); do curl -fs "http://$SYNCER_HTTP_ADDR/readyz" >/dev/null 2>&1 && break; sleep 0.2; done

pairs() { curl -fs "http://$1/v1/stats" | sed -E 's/.*"distinct_pairs":([0-9]+).*/\1/'; }
wait_for() { # address, count
  for _ in $(seq 1 150); do [ "$(pairs "$1")" -ge "$2" ] && return; sleep 0.1; done
}
wait_for "$CRM_ADDR" 10
echo "while the demo runs, the console: http://$SYNCER_HTTP_ADDR/console (sign in with the token in $SYNCER_CONSOLE_TOKEN_FILE)"
echo "daemon ready; the 10 orders already there were exported by the snapshot: crm has $(pairs "$CRM_ADDR") (id, version) pairs"

echo "the application writes orders: $ORDERS inserts, 5 updates, 3 deletes"
psql "$DATABASE_URL" -qc "INSERT INTO orders (total) SELECT g * 1.5 FROM generate_series(1, $ORDERS) g"
psql "$DATABASE_URL" -qc "UPDATE orders SET status = 'paid', updated_at = now() WHERE id <= 5"
psql "$DATABASE_URL" -qc "DELETE FROM orders WHERE id BETWEEN 6 AND 8"
wait_for "$CRM_ADDR" $((10 + ORDERS + 5 + 3))
echo "crm has received $(pairs "$CRM_ADDR") (id, version) pairs; its statistics:"
curl -fs "http://$CRM_ADDR/v1/stats" | tr ',' '\n' | grep -E '"(requests|items|distinct_pairs|tombstones)[a-z_]*"' | sed 's/^/  /' || true

echo "beside it, resources: inserting $ROWS rows with plain SQL, in 10 transactions"
for i in $(seq 1 10); do
  psql "$DATABASE_URL" -qc "INSERT INTO syncer.resources (payload)
    SELECT jsonb_build_object('order', g, 'customer', 'c-' || (g % 97), 'amount', g * 3)
    FROM generate_series(1, $ROWS / 10) g"
done
psql "$DATABASE_URL" -qc "UPDATE syncer.resources SET payload = payload || '{\"amount\": 0}' WHERE id <= 5"
psql "$DATABASE_URL" -qc "DELETE FROM syncer.resources WHERE id BETWEEN 6 AND 8"
wait_for "$FAKE_ADDR" $((ROWS + 5 + 3))
echo "resources' third party has received $(pairs "$FAKE_ADDR") (id, version) pairs"

echo "a replay of orders 1 to 100, by key:"
./bin/syncer replay --source orders --from-key 1 --to-key 100 --wait
echo
./bin/syncer status
echo
echo "metrics (excerpt; read at the scrape, so they agree with status above):"
curl -fs "http://$SYNCER_HTTP_ADDR/metrics" | grep -E '^syncer_(source_items_exported_total|source_pending|items_exported_total|source_lock_held)'

stay=${DEMO_STAY:-}
if [ -z "$stay" ]; then
  if [ -t 0 ]; then stay=1; else stay=0; fi
fi
if [ "$stay" = 1 ]; then
  echo
  echo "the demo stays up: daemon, fake third parties and console"
  echo "  console:  http://$SYNCER_HTTP_ADDR/console"
  echo "  sign in:  paste the token that  cat $SYNCER_CONSOLE_TOKEN_FILE  prints"
  echo "  status:   DATABASE_URL=$DATABASE_URL SYNCER_SCHEMA=$SYNCER_SCHEMA ./bin/syncer status"
  echo "  logs:     $DIR/daemon.log"
  echo "press Enter (or Ctrl-C) to stop everything"
  trap 'echo; exit 0' INT
  read -r _ || true
fi
