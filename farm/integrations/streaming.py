"""Rewards for fully asynchronous loops (AReaL style): no fixed batch, trajectories scored one at a time as
rollout finishes them, by a policy that moves on underneath.

    rewards = StreamingRewards("gsm8k", "math", staleness_s=120, capacity=4096)
    result = await rewards.score(engine.get_version(), "traj-17", {"response": text, "answer": "42"})
    if result is None: ...   # the version's window closed: the trajectory is too stale to train on

Each policy version gets one farm batch, opened by its first trajectory: the farm sees the work of one
version together and serves it Earliest Batch First. The window closes at its staleness deadline
(`staleness_s` after it opened) instead of at a size: later trajectories of that version are refused
(None), and the farm batch is sealed: its size becomes the trajectories that arrived, so it completes
when those have their results and the history keeps it as a batch like any other. A batch opens with
`capacity` as its size (the most trajectories one version can produce) and completes early if it fills.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from farm.client import AsyncRewardClient
from farm.config import Settings
from farm.integrations.waiting import Waiter
from farm.results import Result

log = logging.getLogger(__name__)


@dataclass
class Window:
    """One policy version's farm batch, open to trajectories until its deadline."""

    version: int
    waiter: Waiter
    deadline: float  # time.time() seconds
    closed: bool = False
    active: int = 0  # scores past the window check and not yet submitted: sealing waits for them
    idle: asyncio.Event = field(default_factory=asyncio.Event)

    def accepts(self, now: float) -> bool:
        return not self.closed and now < self.deadline


class StreamingRewards:
    """Per-trajectory rewards keyed by policy version; one instance per trainer process and event loop."""

    def __init__(self, task: str, pipeline: str = "math", *, staleness_s: float, capacity: int,
                 run: str | None = None, timeout: float | None = None, settings: Settings | None = None,
                 client: AsyncRewardClient | None = None) -> None:
        self.task, self.pipeline = task, pipeline
        self.staleness_s, self.capacity, self.timeout = staleness_s, capacity, timeout
        self.run = run or f"stream-{uuid.uuid4().hex[:10]}"  # batch ids must not meet an earlier run's
        self.client = client or AsyncRewardClient(settings)
        self.windows: dict[int, Window] = {}
        self._opening: dict[int, asyncio.Future] = {}
        self._closers: set[asyncio.Task] = set()

    def batch_id(self, version: int) -> str:
        return f"{self.run}.v{version}"

    async def score(self, version: int, request_id: str, payload: Any, group: str | int | None = None
                    ) -> Result | None:
        """The trajectory's result; None when its version's window has closed (too stale to train on).
        Raises TimeoutError after `timeout` seconds without a result."""
        window = await self._window(version)
        if not window.accepts(time.time()):
            return None
        window.active += 1
        window.idle.clear()
        try:
            await window.waiter.batch.submit(request_id, payload, group)
        finally:
            window.active -= 1
            if window.active == 0:
                window.idle.set()
        return await window.waiter.result(request_id, self.timeout)

    async def _window(self, version: int) -> Window:
        if version in self.windows:
            return self.windows[version]
        opening = self._opening.get(version)
        if opening is None:  # the first trajectory of a version opens its batch; those arriving meanwhile wait
            opening = self._opening[version] = asyncio.ensure_future(self._open(version))
        try:
            return await asyncio.shield(opening)
        except Exception:
            self._opening.pop(version, None)  # the farm refused or failed: the next trajectory tries again
            raise

    async def _open(self, version: int) -> Window:
        batch = await self.client.open_batch(self.task, self.pipeline, self.capacity, self.batch_id(version))
        window = self.windows[version] = Window(version, Waiter(batch), time.time() + self.staleness_s)
        window.idle.set()
        closer = asyncio.create_task(self._close_at_deadline(window))
        self._closers.add(closer)
        closer.add_done_callback(self._closers.discard)
        return window

    async def _close_at_deadline(self, window: Window) -> None:
        await asyncio.sleep(max(0.0, window.deadline - time.time()))
        await self.close(window.version)

    async def close(self, version: int) -> str | None:
        """Close a version's window now (the trainer knows it is done with that version): refuse its later
        trajectories and seal its farm batch, whose submitted trajectories still get their results. Returns
        the batch's state: 'sealed', 'completed', or 'cancelled' when no trajectory came."""
        window = self.windows.get(version)
        if window is None:
            return None
        window.closed = True
        await window.idle.wait()  # a score past its window check is submitted before the seal
        state = await window.waiter.batch.seal()
        log.info("closed %s at its staleness deadline: %s", window.waiter.batch.id, state)
        return state

    async def aclose(self) -> None:
        """Close every window and the client."""
        await asyncio.gather(*(self.close(v) for v in list(self.windows)))
        for closer in list(self._closers):
            closer.cancel()
        await self.client.close()
