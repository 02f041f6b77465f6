#!/usr/bin/env bash
# The test command: installs the farm with its test extras, makes sure the services the tests talk to run
# (Redis, PostgreSQL, a Docker engine), and runs the whole suite. Safe to rerun; idempotent on a warm machine.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*" >&2; }
have() { command -v "$1" >/dev/null 2>&1; }
apt_ready=""
apt_install() {
    [ -n "$apt_ready" ] || { apt-get update -qq >/dev/null; apt_ready=1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

log "python packages"
python3 -m pip install -q --disable-pip-version-check -e '.[test]' 2>&1 | grep -v -i "running pip as the 'root' user" || true

log "redis"
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
    have redis-server || apt_install redis-server
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
        --dir /var/lib/redis --logfile /var/log/redis/ci.log
    for _ in $(seq 50); do redis-cli -h 127.0.0.1 ping >/dev/null 2>&1 && break; sleep 0.2; done
fi
redis-cli -h 127.0.0.1 ping

log "postgresql"
if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    if ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
        apt_install postgresql
        # a cluster we installed ourselves: let local TCP connections in without a password, as on the dev machines
        for hba in /etc/postgresql/*/main/pg_hba.conf; do
            sed -i -E 's/^(host\s+all\s+all\s+(127\.0\.0\.1\/32|::1\/128)\s+)\S+/\1trust/' "$hba"
        done
    fi
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
    for _ in $(seq 50); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.2; done
fi
psql -h 127.0.0.1 -U postgres -d postgres -Atc 'select version()' | head -n1

if [ -x docker/ci-engine.sh ]; then
    log "docker engine"
    docker/ci-engine.sh
    export FARM_REQUIRE_DOCKER=1  # the docker half of the backend contract must run, not skip
fi

log "tests"
exec python3 -m pytest -q -p no:cacheprovider --timeout 600 "$@"
