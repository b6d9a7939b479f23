#!/usr/bin/env bash
# Make sure promtool (Prometheus's checker of the metrics text format; the tests of /metrics run it on real
# scrapes) is on the PATH: install Debian's prometheus package first if it is missing. Its server is not
# started: the package's start-up is refused for the install, as in a container.
set -euo pipefail
if command -v promtool >/dev/null 2>&1; then exit 0; fi
echo "promtool not installed: installing it from Debian's prometheus package"
export DEBIAN_FRONTEND=noninteractive
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy"
    trap 'rm -f "$policy"' EXIT
fi
apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus >/dev/null
command -v promtool >/dev/null || { echo "promtool is still missing after installing prometheus" >&2; exit 1; }
