#!/usr/bin/env bash
# Builds the farm's images on a machine that cannot pull from a registry: base images made from Debian's
# packages (mmdebstrap, from the Debian mirror) and imported into the engine, then the farm's image on top
# of the local Python base. The Dockerfiles take their base as a build argument, so the same files build on
# the registry's images elsewhere (plain `docker build`, see docker/README.md).
#
#   docker/build-local.sh                 # the bases (cached) and reward-farm-worker:latest
#   docker/build-local.sh --bases-only    # only the bases
#
# Cached: a base is rebuilt only when its recipe changes (its key, a hash of the recipe, is a label of the
# image), and the farm's image reuses the engine's layer cache, so a rebuild after a code change reinstalls
# only the farm, not its dependencies. Writes docker/local.env, the variables that point compose.yaml at
# these images (`docker compose --env-file docker/local.env -f docker/compose.yaml up -d`).
#
# Environment: FARM_DEBIAN_MIRROR (default http://deb.debian.org/debian), FARM_DEBIAN_SECURITY_MIRROR,
# FARM_IMAGE (default reward-farm-worker:latest), FARM_LOCAL_PREFIX (default reward-farm-local).
set -euo pipefail
cd "$(dirname "$0")/.."

SUITE=bookworm
MIRROR=${FARM_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY=${FARM_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
PREFIX=${FARM_LOCAL_PREFIX:-reward-farm-local}
FARM_IMAGE=${FARM_IMAGE:-reward-farm-worker:latest}
PYTHON_BASE="$PREFIX/python:3.11-$SUITE"
REDIS_IMAGE="$PREFIX/redis:7-$SUITE"
POSTGRES_IMAGE="$PREFIX/postgres:15-$SUITE"
PROMETHEUS_IMAGE="$PREFIX/prometheus:2-$SUITE"

bases_only=""
for arg in "$@"; do
    case "$arg" in
        --bases-only) bases_only=1 ;;
        -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "build-local.sh: unknown argument $arg (try --help)" >&2; exit 2 ;;
    esac
done

log() { printf '== %s\n' "$*" >&2; }
seconds() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(seconds)" 'BEGIN { printf "%.1f", b - a }'; }

docker version --format '{{.Server.Version}}' >/dev/null 2>&1 || {
    echo "build-local.sh: no Docker engine answers (docker/ci-engine.sh starts one on a test machine)" >&2
    exit 1
}
if ! command -v mmdebstrap >/dev/null 2>&1; then
    log "installing mmdebstrap"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null
fi

# Documentation, manual pages and translations stay out of the images.
DPKG_EXCLUDES=(--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
               --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*'
               --dpkgopt='path-exclude=/usr/share/info/*')

# base TAG "PACKAGES" HOOK-FILE|- CHANGE...: a minbase root filesystem with PACKAGES, the optional hook file
# copied to /usr/local/bin, imported as TAG with the Dockerfile-like CHANGEs. Skipped when TAG exists with
# the same key.
base() {
    local tag=$1 packages=$2 hook=$3; shift 3
    local key
    key=$(printf '%s\n' "$SUITE" "$MIRROR" "$SECURITY" "$packages" "$*" "${DPKG_EXCLUDES[*]}" \
          "$( [ "$hook" = - ] || cat "$hook")" "${BASE_HOOK:-}" "$(sed -n '/^base()/,/^}/p' "$0")" | sha256sum | cut -c1-16)
    if [ "$(docker image inspect --format '{{index .Config.Labels "farm.base.key"}}' "$tag" 2>/dev/null)" = "$key" ]; then
        log "$tag: cached ($key)"
        return
    fi
    log "$tag: building from $MIRROR ($SUITE: $packages)"
    local started hooks=() changes=(--change "LABEL farm.base.key=$key")
    started=$(seconds)
    [ "$hook" = - ] || hooks=(--customize-hook="copy-in $hook /usr/local/bin")
    for change in "$@"; do changes+=(--change "$change"); done
    mmdebstrap --quiet --variant=minbase --include="$packages" "${DPKG_EXCLUDES[@]}" \
        --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' "${hooks[@]}" \
        ${BASE_HOOK:+--customize-hook="$BASE_HOOK"} \
        "$SUITE" - "deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" \
        "deb $SECURITY $SUITE-security main" |
        docker import "${changes[@]}" - "${tag%:*}:incomplete" >/dev/null
    # tagged only once the whole root filesystem came through (pipefail): a build cut short is never "cached"
    docker tag "${tag%:*}:incomplete" "$tag"
    docker rmi "${tag%:*}:incomplete" >/dev/null
    log "$tag: built in $(since "$started") s"
}

# The Python base trusts the certificate authorities this machine adds to Debian's (in
# /usr/local/share/ca-certificates): behind a TLS-inspecting proxy, pip in the farm's build needs them.
HOST_CAS=$(cat /usr/local/share/ca-certificates/*.crt 2>/dev/null | sha256sum | cut -c1-16)
BASE_HOOK="# host CAs $HOST_CAS
"'if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
     cp /usr/local/share/ca-certificates/*.crt "$1/usr/local/share/ca-certificates/"
     chroot "$1" update-ca-certificates >/dev/null
 fi' \
    base "$PYTHON_BASE" "ca-certificates,python3,python3-venv" - 'ENV LANG=C.UTF-8' 'CMD ["python3"]'

# The official redis image's layout: data in /data, run as the redis user.
BASE_HOOK='chroot "$1" install -d -o redis -g redis -m 0750 /data' \
    base "$REDIS_IMAGE" "redis-server" - \
    'WORKDIR /data' 'USER redis' 'VOLUME /data' 'EXPOSE 6379' 'CMD ["redis-server"]'

# The official postgres image's contract (POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB, PGDATA), by an
# entrypoint of ours; Debian's own cluster made at install is dropped.
BASE_HOOK='chroot "$1" pg_dropcluster 15 main' \
    base "$POSTGRES_IMAGE" "postgresql-15,postgresql-client-15" docker/local/postgres-entrypoint.sh \
    'ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    'ENV PGDATA=/var/lib/postgresql/data' 'ENV LANG=C.UTF-8' 'VOLUME /var/lib/postgresql/data' 'EXPOSE 5432' \
    'ENTRYPOINT ["postgres-entrypoint.sh"]' 'CMD ["postgres"]'

# The official prometheus image's layout: the binary as entrypoint, data in /prometheus, run as its user
# (compose's `monitoring` profile; Grafana is not in Debian, so that service needs a registry's image).
BASE_HOOK='chroot "$1" install -d -o prometheus -g prometheus -m 0750 /prometheus' \
    base "$PROMETHEUS_IMAGE" "prometheus" - \
    'WORKDIR /prometheus' 'USER prometheus' 'VOLUME /prometheus' 'EXPOSE 9090' \
    'ENTRYPOINT ["/usr/bin/prometheus"]' \
    'CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]'
cat > docker/local.env <<EOF
# Written by docker/build-local.sh: compose.yaml on the images built here.
COMPOSE_PROJECT_NAME=reward-farm
FARM_PYTHON_BASE=$PYTHON_BASE
FARM_REDIS_IMAGE=$REDIS_IMAGE
FARM_POSTGRES_IMAGE=$POSTGRES_IMAGE
FARM_PROMETHEUS_IMAGE=$PROMETHEUS_IMAGE
FARM_IMAGE=$FARM_IMAGE
EOF

[ -z "$bases_only" ] || exit 0

log "$FARM_IMAGE on $PYTHON_BASE"
started=$(seconds)
# --network host: the build's own containers reach the package mirrors through the host's network (this
# engine makes no default bridge)
previous=$(docker image inspect --format '{{.Id}}' "$FARM_IMAGE" 2>/dev/null || true)
docker build --network host --build-arg "BASE=$PYTHON_BASE" -f docker/Dockerfile -t "$FARM_IMAGE" . >&2
# the image it replaces, now untagged (kept while a container still uses it)
if [ -n "$previous" ] && [ "$previous" != "$(docker image inspect --format '{{.Id}}' "$FARM_IMAGE")" ]; then
    docker image rm "$previous" >/dev/null 2>&1 || true
fi
log "$FARM_IMAGE: built in $(since "$started") s"
