#!/usr/bin/env bash
# Makes sure Debian's chromium is installed, for the console's browser test
# (internal/e2e/console_browser_test.go drives it headless with chromedp,
# each run with a fresh profile). Harmless when it is installed.
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
echo "ensure-chromium: installing chromium" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
command -v chromium >/dev/null 2>&1
