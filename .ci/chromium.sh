#!/usr/bin/env bash
# Make sure Chromium is at /usr/bin/chromium (the dashboard's tests drive it headless with Playwright,
# tests/service/test_dashboard.py): install Debian's chromium package if it is missing, with a font
# (the screenshots the tests save would otherwise show boxes for text). Playwright's own browser builds
# are not downloaded: the tests launch the system's Chromium.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then exit 0; fi
echo "chromium not installed: installing Debian's chromium package"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null
[ -x /usr/bin/chromium ] || { echo "/usr/bin/chromium is still missing after installing chromium" >&2; exit 1; }
