"""The client's keep-alive: while a trainer's process lives, the batches it opened or attached to stay alive.

The farm abandons a batch whose trainer is silent for the knob `abandon_after_s` (farm.protocol.silence). A live
trainer may be silent for long on purpose: a batch opened as the hint when rollout starts, minutes before its
first response; a step that submits everything and gathers later. So a client touches every batch it holds that
is still open, from a thread of its own, a few times per `abandon_after_s`, all in one round trip; a killed
process touches nothing and its batches expire. A batch is let go once it has ended (the touch says so) or
when the client closes.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Callable, Sequence

from farm.knobs import Knobs
from farm.protocol.silence import Touched, keep_alive_interval

log = logging.getLogger("farm.client")

CHUNK = 500  # batches touched per round trip


class KeepAlive:
    """Touches the batches it holds (`touch(ids)`, run in its thread) every `keep_alive_interval` of the live
    knob (`knobs()`), from the first batch held until `close()`."""

    def __init__(self, touch: Callable[[Sequence[str]], list[Touched]], knobs: Callable[[], Knobs]) -> None:
        self._touch, self._knobs = touch, knobs
        self._held: dict[str, None] = {}  # batch ids, in the order they were held
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()  # a new interval (a test, or close) should be looked at now
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._failing = False

    @property
    def held(self) -> list[str]:
        with self._lock:
            return list(self._held)

    def hold(self, batch_id: str) -> None:
        """Keep this batch alive until it ends or the client closes."""
        with self._lock:
            if self._stop.is_set():
                return
            if self._pid != os.getpid():  # a forked child: its parent's batches are its parent's to keep
                self._pid, self._held, self._thread = os.getpid(), {}, None
            self._held[batch_id] = None
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="farm-keep-alive", daemon=True)
                self._thread.start()

    def release(self, batch_id: str) -> None:
        with self._lock:
            self._held.pop(batch_id, None)

    def beat(self) -> None:
        """One round: touch every batch held; let go of those no longer open."""
        ids = self.held
        for start in range(0, len(ids), CHUNK):
            for touched in self._touch(ids[start:start + CHUNK]):
                if touched.state != "open":
                    self.release(touched.batch_id)

    def _interval(self) -> float:
        try:
            return keep_alive_interval(self._knobs().abandon_after())
        except Exception:  # the knobs unreadable for a moment (the farm's Redis away): try again soon
            return keep_alive_interval(Knobs().abandon_after())

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._interval())
            self._wake.clear()
            if self._stop.is_set() or not self.held:
                continue
            try:
                self.beat()
            except Exception as exc:  # the next round tries again; the batches have several rounds of slack
                if self._stop.is_set():
                    return  # the client closed under this round
                if not self._failing:
                    log.warning("could not keep the batches of this trainer alive (%s); trying again", exc)
                self._failing = True
            else:
                self._failing = False

    def close(self) -> None:
        """Stop touching: batches still open are abandoned after the knob's silence, unless touched elsewhere."""
        self._stop.set()
        self._wake.set()
        with self._lock:
            self._held.clear()
