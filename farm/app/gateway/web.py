"""The HTTP edge shared by every route: who calls (dependencies), what each farm error answers (status
codes and one error body), and the guard on request bodies (size, and how long they may take to arrive).
"""

from __future__ import annotations

import asyncio
import json

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.exceptions import ResponseError

from farm.app.gateway.auth import Forbidden, Unauthenticated, bearer
from farm.app.gateway.limits import LimitExceeded, TooLarge
from farm.app.gateway.schemas import ErrorBody
from farm.app.gateway.service import Caller, Gateway
from farm.app.gateway.waiting import CLIENT_GONE, CallerGone
from farm.errors import HTTP_STATUS

ERRORS = {code: {"model": ErrorBody} for code in (400, 401, 404, 409, 413, 429, 503)}
# the most specific first
STATUS = [(Unauthenticated, 401), (Forbidden, 403), (TooLarge, 413), (LimitExceeded, 429), (CallerGone, CLIENT_GONE),
          *HTTP_STATUS]


def gateway_of(request: Request) -> Gateway:
    return request.app.state.gateway


async def gateway(request: Request) -> Gateway:
    """The route dependency. Async on purpose: FastAPI runs a plain `def` dependency on a worker thread, a thread
    hop (and a wake-up of the event loop) on every request for an attribute read."""
    return gateway_of(request)


async def caller(request: Request) -> Caller:
    """The tenant calling, from its bearer token or the `/t/<token>/` path prefix."""
    token = request.path_params.get("token") or bearer(request.headers.get("authorization"))
    c = await gateway_of(request).caller(token)
    request.state.scope = c.scope
    return c


async def operator(request: Request) -> Caller:
    """An operator calling (`farm tenants create NAME --operator`); a tenant's token is refused with 403."""
    c = await caller(request)
    if not c.tenant.operator:
        raise Forbidden("the farm page is for operators: a tenant's token cannot open it "
                        "(farm tenants create NAME --operator)")
    return c


class AsciiJSON(JSONResponse):
    """An answer that any input it quotes cannot break: text in ASCII escapes (a lone surrogate has no UTF-8)."""

    def render(self, content) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode()


def error_response(request: Request, exc: Exception) -> JSONResponse:
    status = next(code for kind, code in STATUS if isinstance(exc, kind))
    scope = getattr(request.state, "scope", None)
    message = scope.message(str(exc)) if scope is not None else str(exc)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {"Retry-After": "1"} if status == 429 else None
    return AsciiJSON({"error": {"type": type(exc).__name__, "message": message}}, status, headers=headers)


def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
    """FastAPI's 422, saying where and what for each error but not echoing the value: it may be a number JSON
    cannot carry (1e400 is infinity) or text with a lone surrogate, and the answer must still be sent."""
    detail = [{"loc": [p if isinstance(p, int) else str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", "")),
               "type": str(e.get("type", ""))} for e in exc.errors()]
    return AsciiJSON({"detail": detail}, 422)


def at_bound(request: Request, exc: ResponseError) -> JSONResponse:
    """The farm's Redis refused a write at its memory bound (noeviction, farm.app.redis_memory; inside a script
    Redis says so only in the message): farm trouble, 503, and the operator's alert fired before it. Any other
    error of Redis's is the gateway's own fault and stays a 500."""
    if "OOM command not allowed" not in str(exc):
        raise exc
    return AsciiJSON({"error": {"type": "FarmFull", "message": "the farm's Redis is at its memory bound and takes "
                                "no more writes; try again later"}}, 503, headers={"Retry-After": "5"})


def install_errors(app: FastAPI) -> None:
    for kind, _ in STATUS:
        app.add_exception_handler(kind, error_response)
    app.add_exception_handler(ResponseError, at_bound)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(_Refused, _refused_response)


def _refused_response(request: Request, exc: "_Refused") -> JSONResponse:
    return JSONResponse({"error": {"type": "BodyRefused", "message": exc.message}}, exc.status,
                        headers={"Connection": "close"})


class BodyGuard:
    """ASGI middleware: a body over `max_bytes` is refused with 413 (by its Content-Length before it is
    read, else as soon as it passes the limit), one that takes over `timeout_s` to arrive with 408."""

    def __init__(self, app, max_bytes: int, timeout_s: float) -> None:
        self.app, self.max_bytes, self.timeout_s = app, max_bytes, timeout_s

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            return await _refuse(send, 413, f"the request body is over this gateway's limit of {self.max_bytes} bytes")
        loop = asyncio.get_running_loop()
        deadline, seen, started, arrived = loop.time() + self.timeout_s, 0, False, False

        async def guarded_receive():
            nonlocal seen, arrived
            if arrived:  # the body is in: later reads wait for a disconnect, as long as the answer takes
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                raise _Refused(408, f"the request body did not arrive within {self.timeout_s:g} s") from None
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                arrived = not message.get("more_body", False)
                if seen > self.max_bytes:
                    raise _Refused(413, f"the request body is over this gateway's limit of {self.max_bytes} bytes")
            return message

        async def tracked_send(message):
            nonlocal started
            started = True
            await send(message)

        try:
            await self.app(scope, guarded_receive, tracked_send)
        except _Refused as refused:
            if not started:
                await _refuse(send, refused.status, refused.message)


class _Refused(HTTPException):
    """Raised out of the body's reads: an HTTPException, which FastAPI's body parsing lets through as it is."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(status, message)
        self.status, self.message = status, message


async def _refuse(send, status: int, message: str) -> None:
    body = json.dumps({"error": {"type": "BodyRefused", "message": message}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
