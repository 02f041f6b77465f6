"""Serving the gateway with uvicorn: its settings from the farm's, and an access log that never shows a
token (tokens travel in paths for OpenRLHF and verl)."""

from __future__ import annotations

import logging

import uvicorn

from farm.app.gateway.app import create_app
from farm.app.gateway.auth import Directory, redact
from farm.app.gateway.config import GatewaySettings
from farm.client.aio import AsyncRewardClient
from farm.config import Settings
from farm.store.engine import open_store


class RedactTokens(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        record.msg = redact(str(record.msg))
        return True


def serve(farm: Settings, host: str, port: int, settings: GatewaySettings = GatewaySettings(),
          database_url: str | None = None) -> None:
    engine = open_store(farm, url=database_url)
    app = create_app(lambda: AsyncRewardClient(farm), Directory.of_engine(engine, settings.auth_ttl_s), settings,
                     engine)
    for name in ("uvicorn.access", "uvicorn.error"):
        logging.getLogger(name).addFilter(RedactTokens())
    # h11's cap on a request head: headers beyond it are refused with 400 before the app sees them
    uvicorn.run(app, host=host, port=port, http="h11", h11_max_incomplete_event_size=64 * 1024, timeout_keep_alive=30,
                log_level="info")
