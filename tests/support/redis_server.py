"""A redis-server of a test's own, on a free loopback port, that the test may stop and start again:
the broker outages and restarts a trainer's client must survive."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
import redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """`persistent`: append-only file fsynced on every write, so a restart keeps everything; otherwise a
    restart starts empty, as a farm Redis run without persistence does."""

    def __init__(self, folder: Path, persistent: bool) -> None:
        if shutil.which("redis-server") is None:
            pytest.skip("redis-server is not installed")
        self.folder, self.persistent = folder, persistent
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "RedisServer":
        persistence = ["--appendonly", "yes", "--appendfsync", "always"] if self.persistent else ["--appendonly", "no"]
        self.proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--dir", str(self.folder),
             *persistence], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 10
        while True:
            try:
                if client.ping():
                    break
            except redis.exceptions.ConnectionError:  # still starting (BusyLoadingError is one too)
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        client.close()
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None


@pytest.fixture
def redis_server(tmp_path):
    """redis_server(persistent=False) -> a started RedisServer, stopped after the test."""
    servers: list[RedisServer] = []

    def make(persistent: bool = False) -> RedisServer:
        folder = tmp_path / f"redis{len(servers)}"
        folder.mkdir()
        servers.append(RedisServer(folder, persistent).start())
        return servers[-1]

    yield make
    for server in servers:
        server.stop()
