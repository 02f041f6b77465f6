"""Serving the metrics over HTTP (Prometheus' text format, `GET /metrics`) from a thread of the recorder's
process: `serve` registers both halves in a registry of their own and returns the hook the recorder
calls after each commit."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import redis as redis_lib
from prometheus_client import CollectorRegistry, start_http_server
from sqlalchemy import Engine

from farm.app.metrics.history import HistoryMetrics
from farm.app.metrics.live import LiveCollector
from farm.config import Settings, redis_url

log = logging.getLogger(__name__)

DEFAULT_PORT = 9464  # the port OpenTelemetry's Prometheus exporter uses; not Prometheus' own 9090


class MetricsUnavailable(RuntimeError):
    """The endpoint could not be served (its port taken, its address not on this machine)."""


@dataclass
class MetricsServer:
    """A running endpoint: `history` goes to the recorder (`on_recorded`), `close()` stops serving."""

    url: str
    registry: CollectorRegistry
    history: HistoryMetrics
    _server: Any
    _thread: Any
    _redis: Any

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
        self._redis.close()


def build_registry(settings: Settings, engine: Engine) -> tuple[CollectorRegistry, HistoryMetrics, Any]:
    """A registry with both halves (what `serve` serves; tests read it without HTTP)."""
    registry = CollectorRegistry(auto_describe=False)
    client = redis_lib.Redis.from_url(redis_url(settings), decode_responses=True, socket_timeout=5.0,
                                      socket_connect_timeout=5.0)
    registry.register(LiveCollector(settings, engine, client))
    return registry, HistoryMetrics.from_store(engine, registry), client


def serve(settings: Settings, engine: Engine, *, host: str = "127.0.0.1", port: int = DEFAULT_PORT) -> MetricsServer:
    """Start serving on host:port (0: a free port); MetricsUnavailable when the port is taken."""
    registry, history, client = build_registry(settings, engine)
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        client.close()
        raise MetricsUnavailable(f"cannot serve the farm's metrics on {host}:{port}: {exc.strerror or exc}") from exc
    bound = server.server_address[1]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{bound}/metrics"
    log.info("serving the farm's metrics on %s", url)
    return MetricsServer(url, registry, history, server, thread, client)
