#!/usr/bin/env bash
# Makes sure PostgreSQL answers on 127.0.0.1:5432, starting the local cluster
# if it does not. Used by the Makefile and CI; harmless when it already runs.
set -euo pipefail
host=${PGHOST_CHECK:-127.0.0.1}
port=${PGPORT_CHECK:-5432}

answers() { pg_isready -h "$host" -p "$port" -q 2>/dev/null; }

if answers; then
  exit 0
fi
if ! command -v pg_ctlcluster >/dev/null 2>&1; then
  echo "ensure-postgres: nothing answers on $host:$port and pg_ctlcluster is not installed" >&2
  exit 1
fi
version=$(ls /etc/postgresql | sort -V | tail -n 1)
echo "ensure-postgres: starting PostgreSQL $version" >&2
pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
for _ in $(seq 1 60); do
  answers && exit 0
  sleep 0.5
done
echo "ensure-postgres: PostgreSQL did not come up on $host:$port" >&2
exit 1
