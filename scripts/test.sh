#!/usr/bin/env bash
# The test command: installs the farm with its test extras, makes sure the services the tests talk to run
# (Redis, PostgreSQL, a Docker engine), and runs the whole suite. Safe to rerun; idempotent on a warm machine.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s (at %d s)\n' "$*" "$SECONDS" >&2; }  # the script's time so far: where CI's goes
have() { command -v "$1" >/dev/null 2>&1; }
apt_ready=""
apt_install() {
    [ -n "$apt_ready" ] || { apt-get update -qq >/dev/null; apt_ready=1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

log "python packages"
pip_quiet() { python3 -m pip install -q --disable-pip-version-check "$@" 2>&1 | grep -v -i "running pip as the 'root' user" || true; }
extra() {  # the requirements of one of setup.cfg's extras, one per word
    python3 -c "import configparser, sys; c = configparser.ConfigParser(); c.read('setup.cfg'); \
print(' '.join(r for r in c['options.extras_require'][sys.argv[1]].split() if r))" "$1"
}
# the trainer adapters' tests need torch: the CPU build this machine keeps on disk (plain `torch`, or one pulled
# in by trl or verl, would be PyPI's CUDA build, several GB)
python3 -c 'import torch' 2>/dev/null || pip_quiet 'torch==2.13.0'
pip_quiet -e '.[test]'
# the `trl` extra by name, in a second resolution: resolved in one go with the farm's own requirements
# (`-e '.[test,trl]'`), pip 23 backtracks through old wandb releases for minutes and fails
read -ra trl_requirements < <(extra trl)
pip_quiet "${trl_requirements[@]}"

log "verl's environment"
# verl in an environment of its own, as a trainer runs it: verl pins ANTLR 4.9 (through hydra and omegaconf), under
# which math-verify reads some answers differently and the farm's math workers refuse to judge. It sees this
# environment's packages (torch, the farm) and overrides what verl pins. Two parts, outside the clone: verl's
# packages, installed once per verl requirements, Python and this environment's packages (what pip left out
# because this environment has it), so a new virtualenv with the same packages (as each CI run makes) reuses them;
# and per environment a bare one that sees verl's packages, then this environment's.
read -ra verl_requirements < <(extra verl)
verl_cache="${XDG_CACHE_HOME:-$HOME/.cache}/reward-farm"
verl_packages="$verl_cache/verl-packages-$({ printf '%s\n' "${verl_requirements[@]}"; python3 -VV; python3 -c \
    'import importlib.metadata as m; print(*sorted({f"{d.name}=={d.version}" for d in m.distributions()}))'
    } | sha1sum | cut -c1-12)"
verl_env="${FARM_VERL_ENV:-$verl_cache/verl-$(python3 -c 'import sys; print(sys.prefix)' | sha1sum | cut -c1-12)}"
purelib() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
# see ENV FOLDER...: ENV's python sees the package folders, in order, after its own (`--system-site-packages` would
# expose the base interpreter's, not a virtualenv's; addsitedir also runs their .pth files: the farm's editable
# install)
see() {
    python3 -c 'import sys; [print(f"import site; site.addsitedir({p!r})") for p in sys.argv[1:]]' "${@:2}" \
        >"$(purelib "$1")/farm-host.pth"
}
read -ra host_folders < <(python3 -c 'import sys; print(*[p for p in sys.path if p.endswith(("site-packages",
    "dist-packages"))])')
if [ ! -e "$verl_packages/.installed" ]; then
    rm -rf "$verl_packages"
    python3 -m venv "$verl_packages"
    see "$verl_packages" "${host_folders[@]}"  # what this environment has is not installed again
    "$verl_packages/bin/python" -m pip install -q --disable-pip-version-check "${verl_requirements[@]}" 2>&1 |
        grep -v -i "running pip as the 'root' user" || true
    "$verl_packages/bin/python" -c 'import verl, farm.integrations.verl'
    # the link to this environment goes: another environment's bare one sees these packages, then its own
    rm "$(purelib "$verl_packages")/farm-host.pth"
    touch "$verl_packages/.installed"
fi
[ -x "$verl_env/bin/python" ] || python3 -m venv --without-pip "$verl_env"
see "$verl_env" "$(purelib "$verl_packages")" "${host_folders[@]}"
"$verl_env/bin/python" -c 'import verl; print("verl", verl.__version__)'
export FARM_VERL_PYTHON="$verl_env/bin/python" FARM_REQUIRE_TRAINERS=1

log "the sandbox's launcher (bubblewrap: workers/sandbox/)"
have bwrap || apt_install bubblewrap
bwrap --version
have cc || apt_install gcc libc6-dev  # the farm builds its launcher with it (workers/sandbox/launcher.py)

log "headless chromium (the farm page's browser test)"
have chromium && have chromedriver || apt_install chromium chromium-driver
chromium --version
export FARM_REQUIRE_BROWSER=1  # the browser test must run, not skip
# its screenshots are kept as artifacts of the run
export FARM_TEST_ARTIFACTS="${FARM_TEST_ARTIFACTS:-$PWD/test-artifacts}"

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

log "prometheus (the metrics tests scrape the farm with a real server)"
# Debian's package; its service is not started here, each test runs a server of its own on a free port
have prometheus && have promtool || apt_install prometheus
prometheus --version 2>&1 | head -n1
export FARM_REQUIRE_PROMETHEUS=1

if [ -x docker/ci-engine.sh ]; then
    log "docker engine"
    docker/ci-engine.sh
    export FARM_REQUIRE_DOCKER=1  # the docker half of the backend contract must run, not skip
    log "the farm's images (docker/build-local.sh: Debian bases from the mirror, cached per machine)"
    # built here, with the other installs, so the stack's tests find them and reach no network
    build_log=$(mktemp)
    if ! docker/build-local.sh >"$build_log" 2>&1; then
        tail -n 40 "$build_log" >&2
        echo "docker/build-local.sh failed" >&2
        exit 1
    fi
    grep '^==' "$build_log" >&2 || true
    rm -f "$build_log"
fi

log "tests: the ray backend's pass in the background, the main pass here"
status=0
# The ray backend's tests: a 3-node cluster in a loopback-only network namespace (Ray advertises the machine's
# interface address; in a namespace with only `lo` it has none but loopback), with a Redis of its own there, so
# they share nothing with the main pass but the CPUs. They run beside it: each pass waits on processes and the
# clock a good part of its time (issue 34 holds CI under 15 minutes; docs/CONTRIBUTING.md has the figures).
have ip || apt_install iproute2
ray_log=$(mktemp)
FARM_REQUIRE_RAY=1 python3 -m tests.support.loopback_ns \
    python3 -m pytest -q -p no:cacheprovider --timeout 600 -m ray --durations=10 "$@" >"$ray_log" 2>&1 &
ray_pass=$!
# A test file to a process, one process more than cores (FARM_TEST_PROCESSES): tests that look at the whole machine
# look only at what they started themselves (a test's sandbox uids, its namespace, its ports).
# (--durations: the slowest tests, where the run's time goes)
python3 -m pytest -q -p no:cacheprovider --timeout 600 -m "not ray" -n "${FARM_TEST_PROCESSES:-$(($(nproc) + 1))}" \
    --dist loadfile --durations=25 "$@" || status=$?

log "ray backend tests (run beside the main pass)"
ray_status=0
wait "$ray_pass" || ray_status=$?
cat "$ray_log"
rm -f "$ray_log"
# (status 5: the paths given hold no ray test)
[ "$ray_status" = 0 ] || [ "$ray_status" = 5 ] || status=$ray_status
log "done, status $status"
exit "$status"
