#!/usr/bin/env bash
# Makes sure Debian's pgbouncer is installed, for the tests that run syncer
# through it (internal/dbtest.StartPgBouncer starts its own instances on free
# loopback ports). The package's own service is never started: a
# policy-rc.d that forbids it is in place during the install, and on a
# systemd machine the unit is disabled. Harmless when it is installed.
set -euo pipefail

if command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]; then
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
echo "ensure-pgbouncer: installing pgbouncer" >&2
policy=/usr/sbin/policy-rc.d
made_policy=""
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
  $sudo chmod +x "$policy"
  made_policy=1
fi
cleanup() { if [ -n "$made_policy" ]; then $sudo rm -f "$policy"; fi; }
trap cleanup EXIT
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq pgbouncer >/dev/null
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  $sudo systemctl disable --now pgbouncer >/dev/null 2>&1 || true
fi
command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]
