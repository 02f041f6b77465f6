"""A real gateway for tests: uvicorn on a free loopback port, in a thread of the test process, on the test's
Redis namespace and PostgreSQL store."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager
from typing import Iterator

import httpx
import uvicorn

from farm.app.gateway.app import create_app
from farm.app.gateway.auth import Directory
from farm.app.gateway.config import GatewaySettings
from farm.client.aio import AsyncRewardClient
from farm.config import Settings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_gateway(settings: Settings, engine, gateway_settings: GatewaySettings = GatewaySettings(auth_ttl_s=0.0)
                    ) -> Iterator[str]:
    """The gateway's base URL while the block runs."""
    app = create_app(lambda: AsyncRewardClient(settings), Directory.of_engine(engine, gateway_settings.auth_ttl_s),
                     gateway_settings, engine)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           h11_max_incomplete_event_size=64 * 1024, access_log=False,
                                           proxy_headers=False,  # as farm.app.gateway.server runs it
                                           timeout_graceful_shutdown=gateway_settings.shutdown_grace_s))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the gateway did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def client(base: str, token: str | None = None, timeout: float = 60.0) -> httpx.Client:
    return httpx.Client(base_url=base, headers=auth(token) if token else {}, timeout=timeout)
