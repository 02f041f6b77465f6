"""The gateway's ASGI application: the native API, OpenRLHF's `/get_reward` and SandboxFusion's `/run_code`,
each also under `/t/<token>/` for callers that cannot send a header. `create_app` takes what the gateway
runs on, so tests and `farm gateway` build the same application.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Callable

from fastapi import APIRouter, FastAPI
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from farm.app.gateway import farm_page, native, openrlhf, sandbox_fusion
from farm.app.gateway.access_log import AccessLog
from farm.app.gateway.auth import Directory
from farm.app.gateway.config import GatewaySettings
from farm.app.gateway.service import Gateway
from farm.app.gateway.web import BodyGuard, install_errors
from farm.client.aio import AsyncRewardClient

DESCRIPTION = """The reward farm over HTTP. Authenticate with `Authorization: Bearer <token>` (from `farm tenants
create`), or put the token in the path, `/t/<token>/...`, where the caller cannot send headers."""

PREFIXES = ("", "/t/{token}")
MODULES = (native, openrlhf, sandbox_fusion, farm_page)


def templates(app: FastAPI) -> list[str]:
    """Every path the application serves, as its template (what the access log shows a request as)."""
    own = [prefix + route.path for prefix in PREFIXES for module in MODULES for route in module.router.routes]
    return own + [route.path for route in app.routes if isinstance(getattr(route, "path", None), str)]


def create_app(make_client: Callable[[], AsyncRewardClient], directory: Directory,
               settings: GatewaySettings = GatewaySettings(), engine: Any = None) -> FastAPI:
    """`engine`: the history store, for the farm page's costs (None: the page shows none)."""
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        g = app.state.gateway = Gateway(make_client(), directory, settings)
        upkeep = asyncio.create_task(g.upkeep())
        try:
            yield
        finally:
            upkeep.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await upkeep
            view = getattr(app.state, "farm_view", None)
            if view is not None:
                await view.close()
            await g.close()

    app = FastAPI(title="Reward farm gateway", description=DESCRIPTION, version="1", lifespan=lifespan)
    app.state.engine, app.state.farm_view = engine, None
    for prefix in PREFIXES:
        routes = APIRouter(prefix=prefix)
        for module in MODULES:
            routes.include_router(module.router)
        app.include_router(routes, include_in_schema=True)
    install_errors(app)
    app.add_middleware(BodyGuard, max_bytes=settings.max_body_bytes, timeout_s=settings.body_timeout_s)
    app.add_middleware(AccessLog, templates=templates(app))
    if settings.forwarded_allow_ips:  # outermost: the log and every route see the caller a trusted proxy names
        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=list(settings.forwarded_allow_ips))
    return app
