"""uvicorn's server ticking once a second rather than ten times, for an idle gateway that costs next to nothing.

uvicorn's main loop wakes every 0.1 s to renew the Date header (which it does once a second anyway) and to see
whether it should exit. Here it wakes once a second, and at once when told to exit: `should_exit` set by a
signal (uvicorn's `handle_exit`) or by anyone else wakes the loop through `call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio

import uvicorn

TICK_S = 1.0
_TICKS = 10  # uvicorn's on_tick renews the Date header on every tenth of its 0.1 s ticks


class QuietServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._exit = False
        super().__init__(config)

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

    async def main_loop(self) -> None:
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + _TICKS) % 864000
            try:
                await asyncio.wait_for(self._wake.wait(), TICK_S)
            except asyncio.TimeoutError:
                pass
            should_exit = await self.on_tick(counter)
