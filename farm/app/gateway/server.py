"""Serving the gateway with uvicorn: its settings from the farm's. The access log is the application's own
(farm.app.gateway.access_log: no token in any form), and so is the trust in forwarded addresses (only from
`forwarded_allow_ips`); uvicorn's own are off, whatever its environment (FORWARDED_ALLOW_IPS) says."""

from __future__ import annotations

import logging
import sys

import uvicorn
from uvicorn.main import STARTUP_FAILURE

from farm.app.gateway.app import create_app
from farm.app.gateway.auth import Directory, redact
from farm.app.gateway.config import GatewaySettings
from farm.app.gateway.quiet_server import QuietServer
from farm.client.aio import AsyncRewardClient
from farm.config import Settings
from farm.store.engine import open_store


class RedactTokens(logging.Filter):
    """For uvicorn's error log, which quotes no request line of ours: anything shaped like a token is masked."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        record.msg = redact(str(record.msg))
        return True


def _loop() -> str:
    """The loop uvicorn's "auto" takes: uvloop where it imports."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio (uvloop is not installed: pip install 'reward-farm[gateway]')"
    return "uvloop"


def serve(farm: Settings, host: str, port: int, settings: GatewaySettings = GatewaySettings(),
          database_url: str | None = None) -> None:
    engine = open_store(farm, url=database_url)
    app = create_app(lambda: AsyncRewardClient(farm), Directory.of_engine(engine, settings.auth_ttl_s), settings,
                     engine)
    logging.getLogger("uvicorn.error").addFilter(RedactTokens())
    # h11's cap on a request head: headers beyond it are refused with 400 before the app sees them. The loop:
    # uvloop, which the gateway extra installs, else asyncio's own (the same behaviour, more CPU per call)
    config = uvicorn.Config(app, host=host, port=port, loop="auto", http="h11",
                            h11_max_incomplete_event_size=64 * 1024, timeout_keep_alive=30, log_level="info",
                            access_log=False, proxy_headers=False,
                            timeout_graceful_shutdown=settings.shutdown_grace_s)
    server = QuietServer(config)
    logging.getLogger(__name__).info("gateway: event loop %s", _loop())
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    if not server.started:  # as uvicorn.run: a gateway that could not start (its port taken, say) exits 3
        sys.exit(STARTUP_FAILURE)
