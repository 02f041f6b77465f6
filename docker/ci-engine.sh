#!/usr/bin/env bash
# Makes sure a Docker engine answers on this machine, for the docker backend's tests and the compose
# stack's: installs docker.io and docker-compose when they are not here and starts dockerd the way these
# sandboxes allow (no iptables, no default bridge: the backend's test containers use the host network,
# compose makes its own bridge network). Storage is overlay2 where the kernel mounts overlayfs, else vfs
# (which copies a whole image for every container: seconds per container of the farm's image);
# FARM_DOCKER_STORAGE_DRIVER chooses. Idempotent; returns at once when an engine already answers. Prints
# the engine's version on success; exits non-zero with the log's tail when the engine does not come up.
set -euo pipefail

LOG=${FARM_DOCKERD_LOG:-/var/log/farm-dockerd.log}
WAIT_S=${FARM_DOCKERD_WAIT_S:-30}

engine_version() { docker version --format '{{.Server.Version}}' 2>/dev/null; }

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)  # bookworm's: Compose 1.29
if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Compose v2 as well, so the stack's tests run the compose file under both: the `docker compose` plugin
# from Debian trixie's docker-compose package (a Go binary needing only glibc >= 2.34), unpacked beside
# the client's plugins without touching this machine's package sources.
PLUGINS=/usr/local/lib/docker/cli-plugins
if ! docker compose version >/dev/null 2>&1 && [ -z "${FARM_NO_COMPOSE_V2:-}" ]; then
    v2=$(mktemp -d)
    mkdir -p "$v2/lists/partial"
    echo "deb ${FARM_DEBIAN_MIRROR:-http://deb.debian.org/debian} trixie main" > "$v2/sources.list"
    apt_v2=(-o Dir::Etc::sourcelist="$v2/sources.list" -o Dir::Etc::sourceparts=- -o Dir::State::Lists="$v2/lists")
    if apt-get -qq "${apt_v2[@]}" update >/dev/null 2>&1 &&
        (cd "$v2" && apt-get -qq "${apt_v2[@]}" download docker-compose >/dev/null 2>&1); then
        dpkg -x "$v2"/docker-compose_*.deb "$v2/root"
        mkdir -p "$PLUGINS"
        install -m 0755 "$v2/root/usr/libexec/docker/cli-plugins/docker-compose" "$PLUGINS/docker-compose"
    else
        echo "could not fetch Compose v2 from Debian trixie; the stack's tests run under docker-compose 1.29 only" >&2
    fi
    rm -rf "$v2"
fi

if v=$(engine_version) && [ -n "$v" ]; then
    echo "docker engine $v (already running)"
    exit 0
fi

# A stale pid file from a dead engine blocks a new one.
if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
    rm -f /var/run/docker.pid
fi

overlay_mounts() {  # can this kernel mount overlayfs here (not in every sandbox)?
    local d ok=1
    d=$(mktemp -d /var/lib/farm-overlay-probe.XXXXXX)
    mkdir -p "$d"/lower "$d"/upper "$d"/work "$d"/merged
    if mount -t overlay overlay -o "lowerdir=$d/lower,upperdir=$d/upper,workdir=$d/work" "$d/merged" 2>/dev/null; then
        umount "$d/merged"
        ok=0
    fi
    rm -rf "$d"
    return $ok
}

wait_engine() {
    for _ in $(seq $((WAIT_S * 5))); do
        if v=$(engine_version) && [ -n "$v" ]; then
            echo "docker engine $v, $(docker info --format '{{.Driver}}') storage (started)"
            return 0
        fi
        pgrep -x dockerd >/dev/null 2>&1 || return 1
        sleep 0.2
    done
    return 1
}

start_engine() {
    mkdir -p "$(dirname "$LOG")"
    nohup dockerd --storage-driver="$1" --iptables=false --bridge=none >>"$LOG" 2>&1 </dev/null &
    wait_engine || return 1
    # networks of the stack tests that an engine bug kept (an inconsistent endpoint count, which a
    # start of the engine repairs): removable now, and each holds an address pool until removed
    docker network ls --quiet --filter name=rfstack | xargs -r docker network rm >/dev/null 2>&1 || true
}

if pgrep -x dockerd >/dev/null 2>&1; then
    wait_engine && exit 0
else
    driver=${FARM_DOCKER_STORAGE_DRIVER:-}
    if [ -z "$driver" ]; then
        if overlay_mounts; then driver=overlay2; else driver=vfs; fi
    fi
    start_engine "$driver" && exit 0
    if [ "$driver" = overlay2 ] && [ -z "${FARM_DOCKER_STORAGE_DRIVER:-}" ]; then
        echo "dockerd did not start with overlay2 storage; trying vfs" >&2
        pkill -x dockerd 2>/dev/null || true
        sleep 1
        start_engine vfs && exit 0
    fi
fi
echo "docker engine did not come up within ${WAIT_S}s; last lines of $LOG:" >&2
tail -n 20 "$LOG" >&2 || true
exit 1
