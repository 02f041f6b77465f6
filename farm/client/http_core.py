"""The gateway client's protocol without I/O (as `farm.client.core` is for the Redis client): the HTTP calls
that open, submit, read, cancel and seal, how answers and errors read, and what to do about a busy or
absent gateway. `farm.client.http_sync` and `farm.client.http_aio` only send what this says.

A tenant's Python trainer uses this client: it needs no access to the farm's Redis, only the gateway's URL
and its API token (`farm tenants create`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from farm.client.core import Outage
from farm.config import Settings
from farm.errors import (
    BY_NAME,
    FarmError,
    FarmUnavailable,
    InvalidInput,
    LimitReached,
    PayloadTooLarge,
    Unauthorized,
)
from farm.protocol.live import Progress
from farm.results import Result

SUBMIT_CHUNK = 500  # requests per bulk call
POLL_S = 10.0  # the longest single long poll: the gateway answers sooner when a result comes

# the farm's errors by their own names; the gateway's own refusals by what the client raises for them
ERRORS: dict[str, type[Exception]] = {**BY_NAME, "TooLarge": PayloadTooLarge, "BodyRefused": InvalidInput,
                                      "Unauthenticated": Unauthorized}


@dataclass(frozen=True)
class HttpCall:
    method: str
    path: str
    body: Any = None
    params: Mapping[str, Any] | None = None


class Busy(Exception):
    """The gateway asks to be called again after `delay` seconds (429, 503, or it could not be reached)."""

    def __init__(self, delay: float, error: FarmError) -> None:
        super().__init__(str(error))
        self.delay, self.error = delay, error


class Retrying:
    """Riding out a busy or unreachable gateway: how long to wait before the next try, until the client's
    `reconnect_s` is spent; then the farm's own error."""

    def __init__(self, settings: Settings, url: str) -> None:
        self.settings, self.url = settings, url
        self.outage: Outage | None = None

    def delay(self, exc: Exception, now: float) -> float:
        self.outage = self.outage or Outage(self.settings, now)
        delay = self.outage.next_delay(now)
        if delay is None:
            if isinstance(exc, Busy):
                raise exc.error from None
            raise FarmUnavailable(f"the gateway at {self.url} did not answer for {self.settings.reconnect_s:g} s: "
                                  f"{exc}") from exc
        return max(delay, exc.delay) if isinstance(exc, Busy) else delay


def _path(batch_id: str, part: str = "") -> str:
    if not isinstance(batch_id, str) or not batch_id or "/" in batch_id:
        raise InvalidInput(f"batch id must be a non-empty string without '/', not {batch_id!r:.100}")
    return f"/v1/batches/{batch_id}{part}"


def open_call(task: str, pipeline: str, size: int, batch_id: str | None, group_size: int | None) -> HttpCall:
    body = {"task": task, "pipeline": pipeline, "size": size, "batch_id": batch_id, "group_size": group_size}
    return HttpCall("POST", "/v1/batches", {k: v for k, v in body.items() if v is not None})


def status_call(batch_id: str) -> HttpCall:
    return HttpCall("GET", _path(batch_id))


def submit_calls(batch_id: str, items: Iterable[tuple[Any, Any, Any]]) -> list[HttpCall]:
    rows = [{"request_id": rid, "payload": payload, **({} if group is None else {"group": group})}
            for rid, payload, group in items]
    return [HttpCall("POST", _path(batch_id, "/requests/bulk"), {"requests": rows[i:i + SUBMIT_CHUNK]})
            for i in range(0, len(rows), SUBMIT_CHUNK)]


def results_call(batch_id: str, cursor: str, wait_s: float) -> HttpCall:
    return HttpCall("GET", _path(batch_id, "/results"), params={"cursor": cursor, "wait_s": round(wait_s, 3)})


def groups_call(batch_id: str, after: int, wait_s: float) -> HttpCall:
    return HttpCall("GET", _path(batch_id, "/groups"), params={"after": after, "wait_s": round(wait_s, 3)})


def close_call(batch_id: str, how: str) -> HttpCall:
    return HttpCall("POST", _path(batch_id, f"/{how}"))


def heartbeat_call(batch_id: str) -> HttpCall:
    """A sign of life from the batch's trainer (farm.protocol.silence)."""
    return HttpCall("POST", _path(batch_id, "/heartbeat"))


def progress_of(body: Mapping[str, Any]) -> Progress:
    # the gateway keeps the EBF key to itself: the open time stands in for it
    return Progress(body["batch_id"], body["task"], body["pipeline"], body["size"], body["arrived"], body["done"],
                    body["state"], body["opened_at"], body["opened_at"], body.get("group_size"))


def answer(status: int, content: bytes, headers: Mapping[str, str]) -> Any:
    """The JSON body of a 2xx; the farm's own error otherwise (Busy where calling again may succeed)."""
    try:
        body = json.loads(content) if content else None
    except ValueError:  # not the gateway's answer: a proxy's page, or a gateway going down
        if status >= 500:
            raise Busy(1.0, FarmUnavailable(f"the gateway answered {status}: {content[:300]!r}")) from None
        raise FarmError(f"the gateway's answer ({status}) was not JSON: {content[:300]!r}") from None
    if 200 <= status < 300:
        return body
    error = body.get("error") if isinstance(body, Mapping) else None
    if isinstance(error, Mapping):
        kind, message = str(error.get("type", "")), str(error.get("message", ""))
    else:  # FastAPI's own validation answer (422) or a proxy's page
        kind, message = "", str(body.get("detail") if isinstance(body, Mapping) else body)[:2000]
    if status == 429:
        raise Busy(_retry_after(headers), LimitReached(message))
    if status in (502, 503, 504):
        raise Busy(_retry_after(headers), FarmUnavailable(f"the gateway answered {status}: {message}"))
    if status == 401:
        raise Unauthorized(message)
    if kind in ERRORS:
        raise ERRORS[kind](message)
    if 400 <= status < 500:
        raise InvalidInput(f"the gateway refused the call ({status}): {message}")
    raise FarmError(f"the gateway failed ({status}): {message}")


def _retry_after(headers: Mapping[str, str]) -> float:
    try:
        return min(max(float(headers.get("retry-after", 1)), 0.05), 30.0)
    except ValueError:
        return 1.0


class Page:
    """Reading a batch's results by long polls: where to read from, when the caller's time is up, and the
    results not handed out yet (a retried poll may return some again)."""

    def __init__(self, batch_id: str, timeout: float | None, now: float) -> None:
        self.batch_id, self.timeout = batch_id, timeout
        self.deadline = None if timeout is None else now + timeout
        self.cursor, self.complete = "0-0", False
        self.got: set[str] = set()

    def next_call(self, now: float) -> HttpCall:
        if self.deadline is not None and now >= self.deadline:
            raise TimeoutError(f"batch {self.batch_id!r}: {len(self.got)} results after {self.timeout:g} s, "
                               f"the batch is not complete")
        wait = POLL_S if self.deadline is None else min(POLL_S, max(0.0, self.deadline - now))
        return results_call(self.batch_id, self.cursor, wait)

    def feed(self, body: Mapping[str, Any]) -> list[Result]:
        self.cursor, self.complete = body["cursor"], bool(body["complete"])
        out = []
        for raw in body["results"]:
            result = Result.from_dict(raw)
            if result.request_id not in self.got:
                self.got.add(result.request_id)
                out.append(result)
        return out


class Groups:
    """Reading completed GRPO groups by long polls."""

    def __init__(self, batch_id: str, timeout: float | None, now: float) -> None:
        self.page = Page(batch_id, timeout, now)
        self.after = 0

    def next_call(self, now: float) -> HttpCall:
        call = self.page.next_call(now)
        return groups_call(self.page.batch_id, self.after, call.params["wait_s"])

    def feed(self, body: Mapping[str, Any]) -> list[tuple[str, list[Result]]]:
        self.after, self.page.complete = body["after"], bool(body["complete"])
        return [(g["group"], [Result.from_dict(r) for r in g["results"]]) for g in body["groups"]]
