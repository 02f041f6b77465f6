"""uvicorn's server ticking once a second while it has connections and not at all without, for an idle gateway that
costs next to nothing.

uvicorn's main loop wakes every 0.1 s to renew the Date header (which it does once a second anyway) and to see
whether it should exit. Here it wakes once a second while a connection is open, and at once when told to exit:
`should_exit` set by a signal (uvicorn's `handle_exit`) or by anyone else wakes the loop through
`call_soon_threadsafe`. With no connection open nothing is due: no answer needs a Date header, and the request
count that `limit_max_requests` checks cannot grow. So the loop waits until a connection opens, which renews the
Date header before its first request is read (the header its answers carry is never older than a tick) and brings
the ticks back.
"""

from __future__ import annotations

import asyncio
import time
from email.utils import formatdate
from typing import Any, Callable

import uvicorn

TICK_S = 1.0
_TICKS = 10  # uvicorn's on_tick renews the Date header on every tenth of its 0.1 s ticks


class _Connections(set):
    """uvicorn's set of open connections (`ServerState.connections`, which each connection adds itself to when
    it is made), calling `opened` for each connection added."""

    def __init__(self, opened: Callable[[], None]) -> None:
        super().__init__()
        self._opened = opened

    def add(self, item: Any) -> None:
        super().add(item)
        self._opened()


class QuietServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._exit = False
        super().__init__(config)
        self.server_state.connections = _Connections(self._connection_opened)

    @property
    def should_exit(self) -> bool:
        return self._exit

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        self._exit = value
        if value and self._loop is not None and self._wake is not None:
            try:
                self._loop.call_soon_threadsafe(self._wake.set)
            except RuntimeError:  # the loop is closed: nothing waits on it any more
                pass

    def _connection_opened(self) -> None:
        """In the loop, as the connection is made (before any of its data is read): date its answers now, and
        tick again if the loop waits for a connection."""
        if self.config.date_header:
            date = [(b"date", formatdate(time.time(), usegmt=True).encode())]
            self.server_state.default_headers = date + self.config.encoded_headers
        if self._wake is not None:
            self._wake.set()

    async def main_loop(self) -> None:
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + _TICKS) % 864000
            try:
                await asyncio.wait_for(self._wake.wait(), TICK_S if self.server_state.connections else None)
            except asyncio.TimeoutError:
                pass
            if not self._exit:
                self._wake.clear()  # a connection opened: it was dated then, and the ticks go on while it is open
            should_exit = await self.on_tick(counter)
