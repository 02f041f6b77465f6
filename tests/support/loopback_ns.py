"""Run a command in a network namespace that has only loopback, with a Redis of its own there.

    python -m tests.support.loopback_ns python -m pytest -m ray tests/...
    python -m tests.support.loopback_ns python bench/scaleup.py --backend ray

Why: a Ray cluster advertises the machine's interface address, not 127.0.0.1, so its nodes, drivers and
workers would talk over the machine's network; tests and benchmarks talk only to loopback. In a namespace
with nothing but `lo`, Ray finds no other address. The host's Redis is not reachable from there (another
loopback), so one is started inside on 127.0.0.1:6379 and FARM_TEST_REDIS_URL points at it. PostgreSQL
stays reachable through its Unix socket (a path, not a network address): FARM_TEST_POSTGRES_URL names it.
Needs root (or user namespaces), `unshare` (util-linux), `ip` (iproute2) and `redis-server`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

INSIDE_ENV = "FARM_LOOPBACK_NS"
REDIS_URL = "redis://127.0.0.1:6379/0"
POSTGRES_SOCKET_URL = "postgresql+psycopg2://postgres@/postgres?host=/var/run/postgresql"


def inside() -> bool:
    return os.environ.get(INSIDE_ENV) == "1"


def _start_redis(directory: str) -> subprocess.Popen:
    server = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", "6379", "--save", "",
                               "--appendonly", "no", "--dir", directory, "--logfile", os.path.join(directory, "redis.log")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        ping = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", "6379", "ping"], capture_output=True, text=True)
        if ping.stdout.strip() == "PONG":
            return server
        if server.poll() is not None:
            break
        time.sleep(0.1)
    server.kill()
    raise SystemExit(f"redis-server did not start inside the namespace; see {directory}/redis.log")


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    if not inside():
        missing = [tool for tool in ("unshare", "ip", "redis-server", "redis-cli") if shutil.which(tool) is None]
        if missing:
            print(f"loopback_ns needs {', '.join(missing)} on PATH", file=sys.stderr)
            return 2
        env = {**os.environ, INSIDE_ENV: "1"}
        return subprocess.call(["unshare", "--net", "--", sys.executable, "-m", "tests.support.loopback_ns", *argv],
                               env=env)
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    with tempfile.TemporaryDirectory(prefix="farm-ns-redis-") as directory:
        server = _start_redis(directory)
        env = {**os.environ, "FARM_TEST_REDIS_URL": REDIS_URL, "FARM_TEST_POSTGRES_URL": POSTGRES_SOCKET_URL,
               "RAY_ADDRESS": ""}
        try:
            return subprocess.call(argv, env=env)
        finally:
            server.terminate()
            server.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
