"""The gateway's access log, written from what the router understood rather than from the raw request line, so
no form of a token can reach it: a matched route is logged as its template with each value filled in (the token
always as `***`), a path no route matches keeps only the words the routes themselves spell, and a query keeps
only the values of the parameters the routes take. Headers are never logged.

Lines go to the logger `farm.gateway.access` in uvicorn's format (`client - "METHOD path HTTP/v" status`); the
server runs with uvicorn's own access log off (farm.app.gateway.server).
"""

from __future__ import annotations

import logging
import re
from urllib.parse import parse_qsl, quote

from typing import Iterable

from starlette.routing import compile_path

from farm.store.tenants import TOKEN_PREFIX

log = logging.getLogger("farm.gateway.access")
MASK = "***"
QUERY = frozenset({"cursor", "wait_s", "limit", "after"})  # the query parameters of the routes; others are masked
_PARAM = re.compile(r"{([^}:]+)(?::[^}]*)?}")


def _value(name: str, value: str) -> str:
    """A path or query value as logged: the token, or anything that could be one, is masked."""
    if name == "token" or value.startswith(TOKEN_PREFIX):
        return MASK
    return quote(value, safe="")


class Paths:
    """How the paths of one application are logged, from its route templates (`/t/{token}/v1/batches/{batch_id}`)."""

    def __init__(self, templates: Iterable[str]) -> None:
        self.templates = [(compile_path(t)[0], t) for t in dict.fromkeys(templates)]
        self.words = frozenset(segment for _, t in self.templates for segment in t.split("/")
                               if segment and not _PARAM.search(segment))

    def path(self, scope) -> str:
        """The request's path and query as the log shows them."""
        return self._path(scope) + self._query(scope.get("query_string", b""))

    def _path(self, scope) -> str:
        path = scope.get("path", "")
        for regex, template in self.templates:
            found = regex.match(path)
            if found:
                params = found.groupdict()
                return _PARAM.sub(lambda m: _value(m.group(1), params.get(m.group(1), "")), template)
        # no route: only the routes' own words are shown (a token in an unknown form is not one of them)
        segments = path.split("/")
        return "/".join(s if not s or s in self.words else MASK for s in segments) or "/"

    @staticmethod
    def _query(raw: bytes) -> str:
        if not raw:
            return ""
        pairs = parse_qsl(raw.decode("latin-1"), keep_blank_values=True)
        return "?" + "&".join(f"{quote(k, safe='') if k in QUERY else MASK}="
                              f"{_value(k, v) if k in QUERY else MASK}" for k, v in pairs)


class AccessLog:
    """ASGI middleware: one line per HTTP request once it is answered (or the client has gone)."""

    def __init__(self, app, templates: Iterable[str]) -> None:
        self.app, self.paths = app, Paths(templates)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        status = 0

        async def logged_send(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, logged_send)
        except BaseException:
            status = status or 500  # the server answers 500 for it
            raise
        finally:
            if log.isEnabledFor(logging.INFO):  # 499: the caller went away before an answer (nginx's code)
                log.info('%s - "%s %s HTTP/%s" %d', client_address(scope), scope.get("method", ""),
                         self.paths.path(scope), scope.get("http_version", "1.1"), status or 499)


def client_address(scope) -> str:
    """`host:port` of the caller as the gateway sees it (a trusted proxy's forwarded address, or the peer's)."""
    client = scope.get("client")
    if not client:
        return "-"
    host, port = client[0], client[1]
    return f"{host}:{port}" if port else str(host)
