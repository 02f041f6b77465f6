"""The asyncio gateway client: `farm.client.http_core` over httpx's async client, with the API of
`GatewayClient`. Each event loop gets its own connections (httpx's cannot cross loops)."""

from __future__ import annotations

import asyncio
import time
import weakref
from typing import Any, AsyncIterator, Iterable

import httpx

from farm.client import http_core as core
from farm.client.core import Submitted, unpack_requests
from farm.config import Settings
from farm.errors import FarmError
from farm.protocol.live import Progress
from farm.results import Result


class AsyncGatewayBatch:
    """As `GatewayBatch`, for asyncio."""

    def __init__(self, client: "AsyncGatewayClient", progress: Progress) -> None:
        self.client, self.id, self.task, self.size = client, progress.batch_id, progress.task, progress.size
        self.pipeline, self.group_size = progress.pipeline, progress.group_size
        self.submitted = Submitted()

    async def submit(self, request_id: str, payload: Any, group: str | int | None = None) -> str:
        return (await self.submit_many([(request_id, payload, group)]))[0]

    async def submit_many(self, requests: Iterable[Any]) -> list[str]:
        items = unpack_requests(requests)
        kinds: list[str] = []
        for start, call in zip(range(0, len(items), core.SUBMIT_CHUNK), core.submit_calls(self.id, items)):
            kinds += (await self.client.send(call))["kinds"]
            for request_id, payload, group in items[start:start + core.SUBMIT_CHUNK]:
                self.submitted.add(request_id, payload, group)
        return kinds

    async def as_completed(self, timeout: float | None = None) -> AsyncIterator[Result]:
        page = core.Page(self.id, timeout, time.monotonic())
        while not page.complete:
            call = page.next_call(time.monotonic())
            for result in page.feed(await self.client.send(call, read_s=call.params["wait_s"])):
                yield result

    async def gather(self, timeout: float | None = None) -> list[Result]:
        return self.submitted.ordered([r async for r in self.as_completed(timeout)])

    async def results_by_id(self, timeout: float | None = None) -> dict[str, Result]:
        return {r.request_id: r async for r in self.as_completed(timeout)}

    async def completed_groups(self, timeout: float | None = None) -> AsyncIterator[tuple[str, list[Result]]]:
        groups = core.Groups(self.id, timeout, time.monotonic())
        while not groups.page.complete:
            call = groups.next_call(time.monotonic())
            for done in groups.feed(await self.client.send(call, read_s=call.params["wait_s"])):
                yield done

    async def cancel(self) -> str:
        return (await self.client.send(core.close_call(self.id, "cancel")))["state"]

    async def seal(self) -> str:
        return (await self.client.send(core.close_call(self.id, "seal")))["state"]

    async def heartbeat(self) -> str:
        """As `GatewayBatch.heartbeat`."""
        return (await self.client.send(core.heartbeat_call(self.id)))["state"]

    async def progress(self) -> Progress:
        return await self.client.progress(self.id)

    async def __aenter__(self) -> "AsyncGatewayBatch":
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            try:
                await self.cancel()
            except FarmError:
                pass


class AsyncGatewayClient:
    """As `GatewayClient`, for asyncio trainers."""

    def __init__(self, url: str, token: str, *, reconnect_s: float = 30.0, timeout_s: float = 30.0) -> None:
        self.url, self.settings, self.timeout_s = url, Settings(reconnect_s=reconnect_s), timeout_s
        self._headers = {"Authorization": f"Bearer {token}"}
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary())

    @property
    def http(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._loops.get(loop)
        if client is None:
            client = self._loops[loop] = httpx.AsyncClient(base_url=self.url, headers=self._headers,
                                                           timeout=self.timeout_s)
        return client

    async def send(self, call: core.HttpCall, read_s: float = 0.0) -> Any:
        retrying = core.Retrying(self.settings, self.url)
        while True:
            try:
                reply = await self.http.request(call.method, call.path, json=call.body, params=call.params,
                                          timeout=self.timeout_s + read_s)
                return core.answer(reply.status_code, reply.content, reply.headers)
            except (core.Busy, httpx.TransportError) as exc:
                await asyncio.sleep(retrying.delay(exc, time.monotonic()))

    def open_batch(self, task: str, pipeline: str, size: int, batch_id: str | None = None, *,
                   group_size: int | None = None):
        async def opening() -> AsyncGatewayBatch:
            body = await self.send(core.open_call(task, pipeline, size, batch_id, group_size))
            return AsyncGatewayBatch(self, core.progress_of(body))
        return opening()

    async def batch(self, batch_id: str) -> AsyncGatewayBatch:
        return AsyncGatewayBatch(self, await self.progress(batch_id))

    async def progress(self, batch_id: str) -> Progress:
        return core.progress_of(await self.send(core.status_call(batch_id)))

    async def close(self) -> None:
        client = self._loops.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()
        self._loops.clear()

    async def __aenter__(self) -> "AsyncGatewayClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
