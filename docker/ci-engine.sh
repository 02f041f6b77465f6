#!/usr/bin/env bash
# Makes sure a Docker engine answers on this machine, for the docker backend's tests: installs docker.io
# when no engine binary is here and starts dockerd the way these sandboxes allow (vfs storage, no
# iptables, no default bridge: containers use the host network). Idempotent; returns at once when an
# engine already answers. Prints the engine's version on success; exits non-zero with the log's tail
# when the engine does not come up.
set -euo pipefail

LOG=${FARM_DOCKERD_LOG:-/var/log/farm-dockerd.log}
WAIT_S=${FARM_DOCKERD_WAIT_S:-30}

engine_version() { docker version --format '{{.Server.Version}}' 2>/dev/null; }

if v=$(engine_version) && [ -n "$v" ]; then
    echo "docker engine $v (already running)"
    exit 0
fi

if ! command -v dockerd >/dev/null 2>&1; then
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
fi

# A stale pid file from a dead engine blocks a new one.
if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
    rm -f /var/run/docker.pid
fi

if ! pgrep -x dockerd >/dev/null 2>&1; then
    mkdir -p "$(dirname "$LOG")"
    nohup dockerd --storage-driver=vfs --iptables=false --bridge=none >>"$LOG" 2>&1 </dev/null &
fi

for _ in $(seq $((WAIT_S * 5))); do
    if v=$(engine_version) && [ -n "$v" ]; then
        echo "docker engine $v (started)"
        exit 0
    fi
    sleep 0.2
done
echo "docker engine did not come up within ${WAIT_S}s; last lines of $LOG:" >&2
tail -n 20 "$LOG" >&2 || true
exit 1
