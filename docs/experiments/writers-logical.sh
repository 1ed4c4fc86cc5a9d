#!/usr/bin/env bash
# What a change-row trigger and what a logical slot's consumer cost plain
# writers, on a PostgreSQL of this script's own with wal_level = logical
# (docs/benchmarks.md, "Where issue 32 stops", "Why the writer rows are not
# met"): pgbench, 8 clients of single-row inserts for 8 s, three rounds of
# plain, with the trigger, and plain while pg_recvlogical (test_decoding)
# consumes a slot. Run as a user that may run initdb (not root):
#
#   su postgres -c docs/experiments/writers-logical.sh
set -euo pipefail
pgbin=${PG_BIN:-/usr/lib/postgresql/15/bin}
dir=$(mktemp -d)
port=5499
trap '"$pgbin/pg_ctl" -D "$dir/data" stop -m fast >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
"$pgbin/initdb" -D "$dir/data" -A trust -U postgres >/dev/null
cat >>"$dir/data/postgresql.conf" <<CONF
port = $port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
wal_level = logical
CONF
"$pgbin/pg_ctl" -D "$dir/data" -l "$dir/log" -w start >/dev/null
conn=(-h 127.0.0.1 -p "$port" -U postgres)
psql "${conn[@]}" -qc "CREATE DATABASE test"
psql "${conn[@]}" -d test -q <<'SQL'
CREATE TABLE w_plain (id bigserial PRIMARY KEY, status text NOT NULL DEFAULT 'new', total numeric NOT NULL DEFAULT 0,
	payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE w_trig (LIKE w_plain INCLUDING ALL);
CREATE TABLE w_changes (seq bigserial PRIMARY KEY, key text NOT NULL, at timestamptz NOT NULL DEFAULT now());
CREATE FUNCTION w_capture() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.w_changes (key) VALUES (NEW.id::text); RETURN NULL; END $$;
CREATE TRIGGER w_capture AFTER INSERT ON w_trig FOR EACH ROW EXECUTE FUNCTION w_capture();
SQL
for t in w_plain w_trig; do
	echo "INSERT INTO $t (payload) VALUES ('{\"customer\":\"c-1\",\"items\":[1,2,3],\"note\":\"a payload of some length for the bench\"}');" >"$dir/$t.sql"
done
tps() { pgbench "${conn[@]}" -n -c 8 -j 2 -T 8 -f "$dir/$1.sql" test 2>/dev/null | awk '/^tps/ {printf "%.0f", $3}'; }
for round in 1 2 3; do
	plain=$(tps w_plain)
	trig=$(tps w_trig)
	pg_recvlogical "${conn[@]}" -d test --slot wslot --create-slot -P test_decoding
	pg_recvlogical "${conn[@]}" -d test --slot wslot --start -f /dev/null -s 1 &
	consumer=$!
	sleep 1
	decoded=$(tps w_plain)
	kill "$consumer"
	wait "$consumer" 2>/dev/null || true
	psql "${conn[@]}" -d test -qc "SELECT pg_drop_replication_slot('wslot')" >/dev/null
	echo "round $round: plain $plain, change-row trigger $trig ($(echo "scale=2; $trig / $plain" | bc)x), plain decoded by a slot's consumer $decoded ($(echo "scale=2; $decoded / $plain" | bc)x) inserts/s"
done
