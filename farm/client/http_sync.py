"""The blocking gateway client: `farm.client.http_core` over httpx. The same batch API as `RewardClient`,
for trainers that reach the farm through its gateway with an API token.

    with GatewayClient("https://farm.example:8600", token) as farm:
        batch = farm.open_batch("math-0", "math", size=8)
        batch.submit_many([(f"r{i}", {"response": r, "answer": "5"}) for i, r in enumerate(responses)])
        results = batch.gather(timeout=600)
"""

from __future__ import annotations

import time
from typing import Any, Iterable, Iterator

import httpx

from farm.client import http_core as core
from farm.client.core import Submitted, unpack_requests
from farm.config import Settings
from farm.errors import FarmError
from farm.protocol.live import Progress
from farm.results import Result


class GatewayBatch:
    """One rollout step's requests, through the gateway; as a context manager it cancels the batch when the
    block raises."""

    def __init__(self, client: "GatewayClient", progress: Progress) -> None:
        self.client, self.id, self.task, self.size = client, progress.batch_id, progress.task, progress.size
        self.pipeline, self.group_size = progress.pipeline, progress.group_size
        self.submitted = Submitted()

    def submit(self, request_id: str, payload: Any, group: str | int | None = None) -> str:
        return self.submit_many([(request_id, payload, group)])[0]

    def submit_many(self, requests: Iterable[Any]) -> list[str]:
        items = unpack_requests(requests)
        kinds: list[str] = []
        for start, call in zip(range(0, len(items), core.SUBMIT_CHUNK), core.submit_calls(self.id, items)):
            kinds += self.client.send(call)["kinds"]
            for request_id, payload, group in items[start:start + core.SUBMIT_CHUNK]:
                self.submitted.add(request_id, payload, group)
        return kinds

    def as_completed(self, timeout: float | None = None) -> Iterator[Result]:
        page = core.Page(self.id, timeout, time.monotonic())
        while not page.complete:
            call = page.next_call(time.monotonic())
            yield from page.feed(self.client.send(call, read_s=call.params["wait_s"]))

    def gather(self, timeout: float | None = None) -> list[Result]:
        return self.submitted.ordered(list(self.as_completed(timeout)))

    def results_by_id(self, timeout: float | None = None) -> dict[str, Result]:
        return {r.request_id: r for r in self.as_completed(timeout)}

    def completed_groups(self, timeout: float | None = None) -> Iterator[tuple[str, list[Result]]]:
        groups = core.Groups(self.id, timeout, time.monotonic())
        while not groups.page.complete:
            call = groups.next_call(time.monotonic())
            yield from groups.feed(self.client.send(call, read_s=call.params["wait_s"]))

    def cancel(self) -> str:
        return self.client.send(core.close_call(self.id, "cancel"))["state"]

    def seal(self) -> str:
        return self.client.send(core.close_call(self.id, "seal"))["state"]

    def heartbeat(self) -> str:
        """A sign of life from this batch's trainer, for a step silent longer than the farm's abandon_after_s (a
        wait on results is one too); the batch's state, BatchAbandoned once the farm abandoned it."""
        return self.client.send(core.heartbeat_call(self.id))["state"]

    def progress(self) -> Progress:
        return self.client.progress(self.id)

    def __enter__(self) -> "GatewayBatch":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            try:
                self.cancel()
            except FarmError:
                pass


class GatewayClient:
    """A trainer's connection to the farm's gateway. Busy answers (429: a tenant limit; 503/504, or no
    answer at all) are waited out for `reconnect_s`, then raised as the farm's own errors."""

    def __init__(self, url: str, token: str, *, reconnect_s: float = 30.0, timeout_s: float = 30.0) -> None:
        self.settings = Settings(reconnect_s=reconnect_s)
        self.timeout_s = timeout_s
        self.http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s)

    def send(self, call: core.HttpCall, read_s: float = 0.0) -> Any:
        retrying = core.Retrying(self.settings, str(self.http.base_url))
        while True:
            try:
                reply = self.http.request(call.method, call.path, json=call.body, params=call.params,
                                          timeout=self.timeout_s + read_s)
                return core.answer(reply.status_code, reply.content, reply.headers)
            except (core.Busy, httpx.TransportError) as exc:
                time.sleep(retrying.delay(exc, time.monotonic()))

    def open_batch(self, task: str, pipeline: str, size: int, batch_id: str | None = None, *,
                   group_size: int | None = None) -> GatewayBatch:
        return GatewayBatch(self, core.progress_of(self.send(core.open_call(task, pipeline, size, batch_id,
                                                                            group_size))))

    def batch(self, batch_id: str) -> GatewayBatch:
        return GatewayBatch(self, self.progress(batch_id))

    def progress(self, batch_id: str) -> Progress:
        return core.progress_of(self.send(core.status_call(batch_id)))

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> "GatewayClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
