#!/bin/sh
# Entrypoint of the locally built PostgreSQL image (docker/build-local.sh): the official postgres image's
# contract on Debian's PostgreSQL, so compose.yaml runs the same on either. On the first start (an empty
# PGDATA) it makes the cluster with POSTGRES_USER as its superuser, POSTGRES_PASSWORD for connections over
# the network and the database POSTGRES_DB; then it runs the server as the postgres user.
set -eu

PGDATA=${PGDATA:-/var/lib/postgresql/data}
POSTGRES_USER=${POSTGRES_USER:-postgres}
POSTGRES_DB=${POSTGRES_DB:-$POSTGRES_USER}
export PGDATA

if [ "$(id -u)" = 0 ]; then
    # a fresh volume belongs to root; the server refuses a data directory others can read
    mkdir -p "$PGDATA" /run/postgresql
    chown postgres:postgres "$PGDATA" /run/postgresql
    chmod 0700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

if [ "${1:-}" != postgres ]; then
    exec "$@"
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    if [ -z "${POSTGRES_PASSWORD:-}" ]; then
        echo "postgres-entrypoint: POSTGRES_PASSWORD must be set to make a new cluster (connections over the" \
             "network need it)" >&2
        exit 1
    fi
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
    initdb --username="$POSTGRES_USER" --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 \
        --encoding=UTF8 >/dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    if [ "$POSTGRES_DB" != postgres ]; then
        echo "CREATE DATABASE \"$POSTGRES_DB\"" | postgres --single -D "$PGDATA" -j postgres >/dev/null
    fi
    echo "postgres-entrypoint: made a new cluster in $PGDATA (user $POSTGRES_USER, database $POSTGRES_DB)" >&2
fi

shift
exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
