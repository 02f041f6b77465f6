"""The native API, for trainers in any language: open a batch (the hint that rollout started), submit
(one or many, idempotent by request id), read results (long poll or a stream), completed groups,
cancel, seal, heartbeat and status. Every path is the tenant's: another tenant's batch is a 404 like a
missing one.
"""

from __future__ import annotations

import json
from typing import AsyncIterator

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import StreamingResponse
from starlette.background import BackgroundTask

from farm.app.gateway.auth import Unauthenticated
from farm.app.gateway.schemas import (
    BatchStatus,
    BulkSubmit,
    BulkSubmitted,
    Closed,
    GroupsPage,
    OpenBatch,
    ResultsPage,
    SubmitRequest,
    Submitted,
)
from farm.app.gateway.service import Caller, Gateway, items_of, unscoped
from farm.app.gateway.waiting import unless_gone
from farm.app.gateway.web import ERRORS, caller, gateway
from farm.protocol.live import Progress

router = APIRouter(prefix="/v1/batches", tags=["batches"], responses=ERRORS)


def status_of(c: Caller, p: Progress) -> BatchStatus:
    return BatchStatus(batch_id=c.scope.own_batch(p.batch_id), task=c.scope.own_task(p.task), pipeline=p.pipeline,
                       size=p.size, arrived=p.arrived, done=p.done, state=p.state, opened_at=p.opened_at,
                       group_size=p.group_size)


@router.post("", status_code=201, response_model=BatchStatus)
async def open_batch(body: OpenBatch, c: Caller = Depends(caller), g: Gateway = Depends(gateway)) -> BatchStatus:
    """Open a batch, or attach to it when it is already open with the same task, pipeline and size."""
    return status_of(c, await g.open(c, body.task, body.pipeline, body.size, body.batch_id, body.group_size))


@router.get("/{batch_id}", response_model=BatchStatus)
async def batch_status(batch_id: str, c: Caller = Depends(caller), g: Gateway = Depends(gateway)) -> BatchStatus:
    return status_of(c, await g.progress(c, batch_id))


@router.post("/{batch_id}/requests", response_model=Submitted)
async def submit(batch_id: str, body: SubmitRequest, c: Caller = Depends(caller),
                 g: Gateway = Depends(gateway)) -> Submitted:
    """Submit one request: 'queued', 'finished' (its payload was refused: an invalid_input result, or it
    needs no stage) or 'duplicate' (the same id and payload again)."""
    kinds = await g.submit(c, batch_id, items_of([body]))
    return Submitted(request_id=body.request_id, kind=kinds[0])


@router.post("/{batch_id}/requests/bulk", response_model=BulkSubmitted)
async def submit_many(batch_id: str, body: BulkSubmit, c: Caller = Depends(caller),
                      g: Gateway = Depends(gateway)) -> BulkSubmitted:
    """Submit many requests; their kinds in order. A malformed one refuses the call before any is sent."""
    return BulkSubmitted(kinds=await g.submit(c, batch_id, items_of(body.requests)))


@router.get("/{batch_id}/results", response_model=ResultsPage)
async def results(batch_id: str, request: Request, cursor: str = "0-0", wait_s: float = Query(10.0, ge=0, le=3600),
                  limit: int = Query(1000, ge=1, le=10_000), c: Caller = Depends(caller),
                  g: Gateway = Depends(gateway)) -> ResultsPage:
    """Results after `cursor`, in the order they finished; waits up to `wait_s` (at most the gateway's
    longest poll) for the first one. A wait counts against the tenant's `waiting_calls` (429 past it) and
    ends when its caller hangs up."""
    page = await unless_gone(request, g.results(c, batch_id, cursor, wait_s, limit))
    return ResultsPage(results=[unscoped(c, r) for r in page.results], cursor=page.cursor, complete=page.complete)


@router.get("/{batch_id}/results/stream", response_class=StreamingResponse,
            responses={200: {"content": {"application/x-ndjson": {}}}})
async def results_stream(batch_id: str, request: Request, cursor: str = "0-0", c: Caller = Depends(caller),
                         g: Gateway = Depends(gateway)) -> StreamingResponse:
    """Results as they finish, one JSON object per line, then `{"end": state}` when the batch ends; a
    tenant revoked meanwhile gets `{"error": {...}}` as the last line. An open stream counts against the
    tenant's `waiting_calls` (429 past it, before the stream starts)."""
    first = await g.results(c, batch_id, cursor, 0.0, 1000)  # refuses a batch that is not there before streaming
    slot = g.waiting.hold(c.tenant)
    slot.__enter__()  # left by the stream's end, or by the response's background task if the stream never ran
    left = False

    def leave() -> None:
        nonlocal left
        if not left:
            left = True
            slot.__exit__(None, None, None)

    async def lines() -> AsyncIterator[bytes]:
        try:
            page = first
            while True:
                for result in page.results:
                    yield json.dumps(unscoped(c, result)).encode() + b"\n"
                if page.complete:
                    state = (await g.progress(c, batch_id)).state
                    yield json.dumps({"end": state}).encode() + b"\n"
                    return
                # the response ends this generator when its caller hangs up (Starlette listens for it)
                try:
                    page = await g.results(c, batch_id, page.cursor, 5.0, 1000, hold=False)
                except Unauthenticated as exc:
                    yield json.dumps({"error": {"type": "Unauthenticated", "message": str(exc)}}).encode() + b"\n"
                    return
        finally:
            leave()
    return StreamingResponse(lines(), media_type="application/x-ndjson", background=BackgroundTask(leave))


@router.get("/{batch_id}/groups", response_model=GroupsPage)
async def groups(batch_id: str, request: Request, after: int = Query(0, ge=0),
                 wait_s: float = Query(10.0, ge=0, le=3600), c: Caller = Depends(caller),
                 g: Gateway = Depends(gateway)) -> GroupsPage:
    """GRPO groups whose every result is in, in the order they completed: those after the first `after`. A wait
    counts against the tenant's `waiting_calls` and ends when its caller hangs up."""
    done, ended = await unless_gone(request, g.groups(c, batch_id, after, wait_s))
    new = [{"group": group, "results": [unscoped(c, r) for r in rs]} for group, rs in done[after:]]
    return GroupsPage(groups=new, after=max(after, len(done)), complete=ended)


@router.post("/{batch_id}/cancel", response_model=Closed)
async def cancel(batch_id: str, c: Caller = Depends(caller), g: Gateway = Depends(gateway)) -> Closed:
    """Cancel the batch: its outstanding requests finish as cancelled."""
    return Closed(batch_id=batch_id, state=await g.cancel(c, batch_id))


@router.post("/{batch_id}/heartbeat", response_model=Closed)
async def heartbeat(batch_id: str, c: Caller = Depends(caller), g: Gateway = Depends(gateway)) -> Closed:
    """A sign of life from the batch's trainer: the farm abandons a batch whose trainer is silent (no submit,
    results or groups read, or heartbeat) for the knob abandon_after_s. Answers the batch's state; 409
    (BatchAbandoned) once the farm abandoned it."""
    return Closed(batch_id=batch_id, state=await g.heartbeat(c, batch_id))


@router.post("/{batch_id}/seal", response_model=Closed)
async def seal(batch_id: str, c: Caller = Depends(caller), g: Gateway = Depends(gateway)) -> Closed:
    """Take no more requests: the batch's size becomes what has arrived."""
    return Closed(batch_id=batch_id, state=await g.seal(c, batch_id))
