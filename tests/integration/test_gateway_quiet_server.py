"""The gateway's uvicorn server ticks once a second while a connection is open and not at all without, yet stops at
once when told to, and still dates its answers with the time they are given."""

from __future__ import annotations

import socket
import threading
import time
from email.utils import parsedate_to_datetime

import httpx
import pytest
import uvicorn

from farm.app.gateway.quiet_server import TICK_S, QuietServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]


async def hello(scope, receive, send):
    assert scope["type"] == "http"
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"hello"})


class CountingServer(QuietServer):
    ticks = 0

    async def on_tick(self, counter: int) -> bool:
        self.ticks += 1
        return await super().on_tick(counter)


@pytest.fixture
def served():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = CountingServer(uvicorn.Config(hello, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield server, thread, f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=5)


def test_a_server_told_to_exit_stops_well_within_its_one_second_tick(served):
    server, thread, _ = served
    time.sleep(0.3)  # in the middle of a tick's wait
    told = time.monotonic()
    server.should_exit = True
    thread.join(timeout=5)
    assert not thread.is_alive() and time.monotonic() - told < TICK_S / 2


def test_its_answers_carry_a_date_header(served):
    _, _, base = served
    reply = httpx.get(base, timeout=5)
    assert reply.text == "hello" and reply.headers["date"].endswith("GMT")


def test_with_no_connection_open_the_server_does_not_tick(served):
    server, _, base = served
    httpx.get(base, timeout=5)  # its connection closes with the call
    time.sleep(TICK_S + 0.2)  # the tick that finds the connection gone
    before = server.ticks
    time.sleep(2.5 * TICK_S)
    assert server.ticks == before


def test_an_answer_after_a_quiet_spell_carries_the_time_it_was_given(served):
    _, _, base = served
    time.sleep(3 * TICK_S)  # no tick renewed the header meanwhile
    reply = httpx.get(base, timeout=5)
    assert abs(parsedate_to_datetime(reply.headers["date"]).timestamp() - time.time()) < 1.5
