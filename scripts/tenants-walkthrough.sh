#!/usr/bin/env bash
# Five workspaces, each its own account at the third party: the setup of
# docs/destinations.md "Tenants", step by step, with every command of that
# section run and its output shown. A scratch database (WALK_DB, default
# syncer_walk), the fake third party in its per-account mode (each tenant
# its own token and 4 requests a second) and one daemon; nothing is left
# behind but the database, dropped at the start of the next run.
#
#   ./scripts/tenants-walkthrough.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

DB=${WALK_DB:-syncer_walk}
ADMIN_URL=${WALK_ADMIN_URL:-postgres://postgres@127.0.0.1:5432/postgres}
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/$DB
export SYNCER_SCHEMA=syncer
PORT=${WALK_PORT:-18180}
DIR=$(mktemp -d /tmp/syncer-walk.XXXXXX)
CRM=127.0.0.1:$((PORT + 1))
export SYNCER_HTTP_ADDR=127.0.0.1:$PORT
export SYNCER_CONFIG=$DIR/syncer.yaml
export SYNCER_LOG_FORMAT=text

./scripts/ensure-postgres.sh >/dev/null
make -s build
psql "$ADMIN_URL" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"

step() { printf '\n$ %s\n' "$*"; "$@" 2>&1 || echo "(exit $?)"; }

echo "# the application's tables: contacts, and one connection per workspace"
psql "$DATABASE_URL" -q <<'SQL'
CREATE TABLE contacts (
    account_id text NOT NULL,
    email      text NOT NULL,
    name       text NOT NULL,
    PRIMARY KEY (account_id, email)
);
CREATE TABLE crm_connections (
    account_id text PRIMARY KEY,
    token      text NOT NULL,
    plan_rps   int,
    revoked_at timestamptz
);
INSERT INTO crm_connections (account_id, token, plan_rps) VALUES
    ('acme', 'tok-acme', 4), ('globex', 'tok-globex', NULL), ('initech', 'tok-initech', 2),
    ('umbrella', 'tok-umbrella', NULL), ('hooli', 'tok-hooli', NULL);
SQL
cat > "$SYNCER_CONFIG" <<YAML
destinations:
  crm:
    url: http://$CRM/t/{tenant}
    rate_limit: 4
    tenants:
      query: |
        SELECT token, plan_rps AS rate_limit
        FROM crm_connections WHERE account_id = \$1 AND revoked_at IS NULL
sources:
  - table: contacts
    key: [account_id, email]
    columns: [name]
    tenant: account_id
    destination: crm
YAML
echo "# $SYNCER_CONFIG:"; sed 's/^/  /' "$SYNCER_CONFIG"

pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$DIR"; }
trap cleanup EXIT
./bin/syncer-lab fake-thirdparty --addr "$CRM" --tenant-token-prefix tok- --tenant-rate-limit 4 --lookup >"$DIR/fake.log" 2>&1 &
pids+=($!)

step ./bin/syncer migrate --log-level warn
step ./bin/syncer config check
./bin/syncer run >"$DIR/daemon.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do ./bin/syncer healthcheck >/dev/null 2>&1 && break; sleep 0.2; done

echo; echo "# 40 contacts per workspace"
psql "$DATABASE_URL" -qc "INSERT INTO contacts SELECT t, 'c' || g || '@' || t || '.example', 'Contact ' || g
  FROM unnest(ARRAY['acme','globex','initech','umbrella','hooli']) t, generate_series(1, 40) g"
sleep 5
step ./bin/syncer status
step ./bin/syncer status --source contacts --tenant initech
step curl -s "http://$CRM/v1/tenants/stats"; echo

echo; echo "# one workspace paused, then the whole destination resumed"
step ./bin/syncer pause --destination crm --tenant globex
psql "$DATABASE_URL" -qc "INSERT INTO contacts VALUES ('globex', 'late@globex.example', 'Late')"
step ./bin/syncer pause --destination crm
step ./bin/syncer resume --destination crm
step ./bin/syncer status
step ./bin/syncer resume --destination crm --tenant globex

echo; echo "# a tenant that does not exist is refused by name"
step ./bin/syncer pause --destination crm --tenant nosuch
step ./bin/syncer probe --destination crm --tenant acme

echo; echo "# one workspace's rows sent again, and read back"
step ./bin/syncer replay --source contacts --tenant initech --wait
step ./bin/syncer replay --list
step ./bin/syncer retry-failed --source contacts --tenant initech
step ./bin/syncer verify --source contacts --tenant hooli
step ./bin/syncer verify --source contacts

echo; echo "# a workspace disconnected"
# A held tenant's row is read again right before its next batch once its
# last read is a second old: a row written after the revoke waits.
psql "$DATABASE_URL" -qc "UPDATE crm_connections SET revoked_at = now() WHERE account_id = 'umbrella'"
sleep 2
psql "$DATABASE_URL" -qc "INSERT INTO contacts VALUES ('umbrella', 'after@umbrella.example', 'After')"
sleep 8
step ./bin/syncer status
