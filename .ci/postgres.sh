#!/usr/bin/env bash
# Make sure a PostgreSQL server answers on 127.0.0.1:5432 with trust auth for local TCP connections and
# a database "test": start the installed cluster, or install it from Debian's packages first.
set -euo pipefail
ready() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }
if ready; then exit 0; fi
if ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
    echo "PostgreSQL not installed: installing it from Debian's packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq postgresql >/dev/null
fi
version=$(ls /etc/postgresql | sort -V | tail -1)
hba=/etc/postgresql/$version/main/pg_hba.conf
if ! grep -qE '^host\s+all\s+all\s+127\.0\.0\.1/32\s+trust' "$hba"; then
    sed -i '1i host all all 127.0.0.1/32 trust' "$hba"
fi
pg_ctlcluster --skip-systemctl-redirect "$version" main start || pg_ctlcluster --skip-systemctl-redirect "$version" main reload
for _ in $(seq 30); do ready && break; sleep 1; done
ready || { echo "PostgreSQL did not come up on 127.0.0.1:5432" >&2; exit 1; }
psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='test'" | grep -q 1 \
    || psql -h 127.0.0.1 -U postgres -c "CREATE DATABASE test"
