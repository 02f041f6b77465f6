"""The farm page for operators: `/ui` (or `/t/<token>/ui` in a browser, which cannot send a header) is static
HTML and one small script, loaded from this gateway alone (no CDN: it works on a machine with no internet),
that reads this gateway's own JSON below and redraws in place. Operators only (`farm tenants create NAME
--operator`): a tenant's token gets 403, for the page as for its JSON.
"""

from __future__ import annotations

from pathlib import Path
from fastapi import APIRouter, Depends, Request
from fastapi.responses import FileResponse, Response

from farm.app.gateway.farm_view import FarmView
from farm.app.gateway.web import gateway_of, operator

PAGE = Path(__file__).resolve().parents[2] / "data" / "ui"
router = APIRouter(prefix="/ui", dependencies=[Depends(operator)], include_in_schema=False)
# no caching anywhere: the page and its data are an operator's, and its token may be in the path, which no
# Referer header may then carry anywhere (a link followed, a request the page makes)
NO_STORE = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; frame-ancestors 'none'")


async def farm_view(request: Request) -> FarmView:
    """One per gateway process, made on the first page view (async: a `def` dependency would run on a thread)."""
    state = request.app.state
    if getattr(state, "farm_view", None) is None:
        state.farm_view = FarmView(gateway_of(request).client.settings, getattr(state, "engine", None))
    return state.farm_view


@router.get("")
async def page() -> FileResponse:
    return FileResponse(PAGE / "index.html", media_type="text/html", headers={**NO_STORE, "Content-Security-Policy": CSP})


@router.get("/farm.js")
async def script() -> FileResponse:
    return FileResponse(PAGE / "farm.js", media_type="text/javascript", headers=NO_STORE)


@router.get("/farm.css")
async def style() -> FileResponse:
    return FileResponse(PAGE / "farm.css", media_type="text/css", headers=NO_STORE)


@router.get("/api/live")
async def live(view: FarmView = Depends(farm_view)) -> Response:
    """`farm status --json`'s report (late batches first), the knobs, and each tenant's name and limits."""
    return _json(await view.live.get())


@router.get("/api/pools")
async def pools(view: FarmView = Depends(farm_view)) -> Response:
    return _json(await view.pools())


@router.get("/api/cost")
async def cost(view: FarmView = Depends(farm_view)) -> Response:
    return _json(await view.cost.get())


def _json(body: bytes) -> Response:
    return Response(body, media_type="application/json", headers=NO_STORE)
