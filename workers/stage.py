"""The Celery stage task: take a wake-up token, pick the most urgent pending request of the stage
(farm.protocol), run the stage through workers.runner, and hand the request on or finish it.

One worker serves one stage, one request at a time. A thread in the pool process renews the lease
of the request being run (and tells the stage code when its batch was cancelled or its lease lost),
keeps the worker's `seen` time fresh and sweeps lapsed leases of any stage back into their queues.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from typing import Any

from celery import Celery, Task, signals
from celery.exceptions import TimeLimitExceeded
from kombu.asynchronous import get_event_loop
from redis.exceptions import RedisError

from farm import events, registry
from farm.celery_app import Tokens
from farm.config import Settings
from farm.knobs import Knobs
from farm.pipeline import StageContext, UnknownPipeline
from farm.protocol.calls import Call, request_done_event
from farm.protocol.dispatch import Dispatch
from farm.protocol.keys import Keys, stamp
from farm.protocol.scripts import EVENTS_MAXLEN
from farm.protocol.tokens import hard_limit, task_name
from farm.results import Result, StageRecord, Status
from workers.runner import next_stage, run_stage

log = logging.getLogger(__name__)
FALLBACK_TIMEOUT_S = 3600.0  # hard limit for tokens of a stage this process cannot look up


def timeout_for(queue: str, knobs: Knobs) -> float:
    try:
        return registry.stage_timeout(queue, knobs)
    except UnknownPipeline:
        return knobs.stage(queue).timeout_s or FALLBACK_TIMEOUT_S


class Hold:
    """The request a worker runs: its lease token and a flag the stage code polls via ctx.cancelled()."""

    __slots__ = ("token", "batch", "stop")

    def __init__(self, token: str, batch: str) -> None:
        self.token = token
        self.batch = batch
        self.stop = threading.Event()


class StageWorker:
    """What one worker process knows: its stage, its name, its Redis and the request it holds."""

    def __init__(self, app: Celery, settings: Settings, queue: str, name: str) -> None:
        self.settings = settings
        self.queue = queue
        self.name = name
        self.pipeline, self.stage = registry.stage_by_queue(queue)
        self.dispatch = Dispatch(settings)
        self.keys = Keys(settings.namespace)
        self.tokens = Tokens(app, settings)
        self.hold: Hold | None = None
        self.last_active = time.monotonic()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- one token ----

    def serve(self) -> str:
        self.last_active = time.monotonic()
        knobs = self.dispatch.knobs()
        token = uuid.uuid4().hex
        reply = self.dispatch.pick(self.queue, self.name, knobs.scheduler, token)
        self.requeued(reply[0], knobs)
        if len(reply) == 1:
            return "idle"  # the request this token announced was cancelled or taken by a recovered token
        _, batch_id, request_id, enqueued_at, state_raw, payload_raw, task, _pipeline = reply
        state = json.loads(state_raw)
        hold = Hold(token, batch_id)
        self.hold = hold
        started = time.time()
        try:
            ctx = StageContext(request_id, batch_id, task, json.loads(payload_raw), dict(state["c"]), self.stage,
                               knobs.timeout_of(self.stage), self.name, hold.stop.is_set)
            outcome = run_stage(ctx)
        finally:
            self.hold = None
            self.last_active = time.monotonic()
        finished = time.time()
        return self.complete(knobs, hold, request_id, float(enqueued_at), state, started, finished, outcome)

    def complete(self, knobs, hold, request_id, enqueued_at, state, started, finished, outcome) -> str:
        status = outcome.status.value if outcome.status else "passed"
        carry = {**state["c"], **outcome.carry}
        details = {**state.get("d", {}), **outcome.details}
        nxt = next_stage(tuple(state["st"]), self.stage.name) if outcome.status is None else None
        try:
            body = json.dumps({"c": carry, "d": details}, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            status, nxt = Status.INFRA_ERROR.value, None
            outcome = type(outcome)(Status.INFRA_ERROR, message=f"stage {self.stage.name!r} passed data that is not JSON: {exc}")
            carry, details = state["c"], state.get("d", {})
            body = None
        record = StageRecord(self.stage.name, status, enqueued_at, started, finished, self.name, outcome.message)
        records = [*state["r"], record.to_dict()]
        stage_event = events.encode("stage_done", batch=hold.batch, request=request_id, stage=self.stage.name,
                                    queued_at=enqueued_at, started_at=started, finished_at=finished, status=status,
                                    worker=self.name)["e"]
        if nxt is not None:
            queue = self.pipeline.stage(nxt).queue
            new_state = json.dumps({"g": state["g"], "st": state["st"], "r": records, "qa": finished}, separators=(",", ":"))
            new_state = new_state[:-1] + "," + body[1:]  # carry and details, already serialised
            limit = timeout_for(queue, knobs)
            reply = self.dispatch.run(Call("complete", hold.batch, request_id, hold.token, self.name, self.queue,
                                           stamp(finished), stage_event, queue, new_state, "", "", stamp(hard_limit(limit))))
            if reply == "next" and not self.dispatch.lua_tokens:
                self.tokens.send(queue, limit)
            return reply
        final = outcome.status or Status.OK
        result = Result(request_id, hold.batch, final, outcome.reward, outcome.message,
                        stage=self.stage.name if final is not Status.OK else None, outcome=outcome.outcome,
                        group=state["g"], stages=tuple(StageRecord.from_dict(r) for r in records),
                        finished_at=finished, details=details)
        return self.dispatch.run(Call("complete", hold.batch, request_id, hold.token, self.name, self.queue,
                                      stamp(finished), stage_event, "", "",
                                      json.dumps(result.to_dict(), separators=(",", ":")), request_done_event(result), ""))

    def wake_if_pending(self) -> None:
        """Idle for a lease time while requests wait: their tokens were lost (a client died between
        enqueue and publish, or a worker was killed holding an unpicked token, which the Redis broker
        only redelivers after its visibility timeout), so send one; a token too many costs an empty pick."""
        if self.dispatch.redis.zcard(self.keys.queue(self.queue, "ebf")):
            self.tokens.send(self.queue, timeout_for(self.queue, self.dispatch.knobs()))

    def requeued(self, queues, knobs: Knobs) -> None:
        if self.dispatch.lua_tokens:
            return  # the script published their tokens
        for queue in queues:
            self.tokens.send(queue, timeout_for(queue, knobs))

    # ---- the heartbeat thread ----

    def start(self) -> None:
        self._thread = threading.Thread(target=self._beat, name=f"farm-heartbeat-{self.queue}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def _beat(self) -> None:
        interval = min(self.settings.lease_s / 3, 0.5)
        sweep_every = max(self.settings.lease_s / 2, interval)
        last_sweep = 0.0
        seen = self.keys.queue(self.queue, "seen")
        while not self._stopped.wait(interval):
            try:
                hold = self.hold
                if hold is not None and self.dispatch.heartbeat(hold.token, hold.batch) != "open":
                    hold.stop.set()  # cancelled batch or lost lease: the stage may stop, its result is discarded
                self.dispatch.redis.hset(seen, self.name, repr(time.time()))
                if hold is None and time.monotonic() - self.last_active > self.settings.lease_s:
                    self.last_active = time.monotonic()
                    self.wake_if_pending()
                if time.monotonic() - last_sweep >= sweep_every:
                    last_sweep = time.monotonic()
                    self.requeued(self.dispatch.sweep(), self.dispatch.knobs())
            except Exception:  # a Redis blip must not kill the heartbeat; the next beat retries
                log.exception("farm heartbeat of %s failed", self.name)


class StageTask(Task):
    """Knows how to finish the held request when Celery's hard time limit kills the pool process."""

    farm_settings: Settings
    farm_queue: str
    farm_worker: str

    def on_failure(self, exc, task_id, args, kwargs, einfo):
        if isinstance(exc, TimeLimitExceeded):
            Dispatch(self.farm_settings).abandon(
                self.farm_worker, self.farm_queue, Status.TIMEOUT,
                f"killed by the hard time limit ({exc.args[0] if exc.args else '?'} s) of stage {self.farm_queue!r}")


_worker: StageWorker | None = None
_wake_fd: int | None = None  # the write end of a pipe the worker's event loop reads


def _shutdown_wakes_loop() -> None:
    """Let a shutdown signal wake the worker's event loop (in the main process, once it runs).

    Celery's SIGTERM handler only sets a flag, which its event loop reads between polls; an idle loop
    polls for up to a second, so a retired idle worker would linger that long before it starts to shut
    down. A byte written to this pipe (by `_wake_loop`, called from the handler) ends the poll at once."""
    global _wake_fd

    hub = get_event_loop()
    if hub is None or _wake_fd is not None:
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    os.set_blocking(write_fd, False)

    def drain() -> None:
        try:
            while os.read(read_fd, 512):
                pass
        except BlockingIOError:
            pass

    hub.add_reader(read_fd, drain)
    _wake_fd = write_fd


def _wake_loop() -> None:
    if _wake_fd is not None:
        try:
            os.write(_wake_fd, b"\0")
        except (BlockingIOError, OSError):
            pass  # a full pipe already wakes the loop


def register(app: Celery, settings: Settings, queue: str, name: str) -> Task:
    """Define the stage's Celery task on `app` and hook the worker's lifecycle signals (one stage per process)."""
    registry.stage_by_queue(queue)  # fail early on an unknown stage

    def process_worker() -> StageWorker:
        global _worker
        if _worker is None:
            _worker = StageWorker(app, settings, queue, name)
        return _worker

    @app.task(name=task_name(queue), bind=True, base=StageTask, ignore_result=True, acks_late=True,
              farm_settings=settings, farm_queue=queue, farm_worker=name)
    def stage_token(self) -> str:
        try:
            return process_worker().serve()
        except RedisError as exc:
            # the token is not lost with the connection: it comes back once Redis answers again
            raise self.retry(exc=exc, countdown=1.0, max_retries=None)

    @signals.worker_process_init.connect(weak=False)
    def start_heartbeat(**_: Any) -> None:
        process_worker().start()

    @signals.worker_process_shutdown.connect(weak=False)
    def leave_at_once(exitcode: Any = None, **_: Any) -> None:
        # In the pool process, at its clean exit (the worker's warm shutdown: no request held, every result
        # already taken by the main process). billiard would now report the exit over its queue and
        # sleep a full second before `os._exit`; the main process, which reaps its child by pid, waits for
        # that second, so a retired worker would exist a second longer for nothing. Leave now.
        if _worker is not None:
            _worker.stop()
        if exitcode in (None, 0):
            logging.shutdown()
            os._exit(0)

    @signals.worker_ready.connect(weak=False)
    def wake_on_shutdown(**_: Any) -> None:
        _shutdown_wakes_loop()

    @signals.worker_shutting_down.connect(weak=False)
    def shutting_down(**_: Any) -> None:
        _wake_loop()

    @signals.worker_ready.connect(weak=False)
    def announce(**_: Any) -> None:
        d = Dispatch(settings)
        now = time.time()
        keys = d.keys
        pipe = d.redis.pipeline(transaction=False)
        pipe.sadd(keys.queues, queue)
        pipe.hset(keys.queue(queue, "seen"), name, repr(now))
        pipe.xadd(keys.events, events.encode("worker_ready", worker=name, stage=queue, at=now),
                  maxlen=EVENTS_MAXLEN, approximate=True)
        pipe.execute()
        d.close()

    @signals.worker_shutdown.connect(weak=False)
    def retire(**_: Any) -> None:
        try:
            d = Dispatch(settings)
            d.redis.hdel(d.keys.queue(queue, "seen"), name)
            d.close()
        except RedisError:
            log.warning("could not unregister farm worker %s", name)

    return stage_token
