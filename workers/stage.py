"""A stage worker's work for one wake-up token: pick the most urgent pending request of the stage
(farm.protocol), run the stage through workers.runner, and hand the request on or finish it; then serve on
while requests wait whose tokens no worker has taken (every worker was busy), taking their tokens itself.

One worker serves one stage, one request at a time. A thread in the pool process renews the lease
of the request being run (and, when its batch was cancelled or its lease lost, tells the stage code and
kills its sandboxed programs),
keeps the worker's `seen` time fresh and sweeps lapsed leases of any stage back into their queues.
The Celery task that calls it, and the worker's lifecycle, are in workers.task.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from dataclasses import replace
from typing import Any, NamedTuple

from celery import Celery

from farm import events, registry
from farm.celery_app import Tokens
from farm.config import Settings
from farm.knobs import Knobs
from farm.pipeline import InvalidInput, StageContext, StageOutcome, UnknownPipeline
from farm.protocol import roster
from farm.protocol.calls import advance_call, finish_call
from farm.protocol.dispatch import Dispatch
from farm.protocol.keys import Keys, QueuePart
from farm.protocol.scripts import Call
from farm.protocol.state import RequestState
from farm.protocol.tokens import serves_on
from farm.results import Result, StageRecord, Status
from workers.runner import next_stage, run_stage
from workers.sandbox import live
from workers.served import Served, served_line

log = logging.getLogger(__name__)
FALLBACK_TIMEOUT_S = 3600.0  # hard limit for tokens of a stage this process cannot look up


def payload_of(raw: str) -> Any:
    """A request's payload, decoded; InvalidInput when this process cannot decode it: JSON nested deeper than
    the stack here allows, though the client's encoder took it (retried, it would fail every worker alike)."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise InvalidInput("the payload is nested too deeply for the stage worker to decode: its arrays and "
                           "objects nest close to a thousand levels") from None


def timeout_for(queue: str, knobs: Knobs) -> float:
    try:
        return registry.stage_timeout(queue, knobs)
    except UnknownPipeline:
        return knobs.stage(queue).timeout_s or FALLBACK_TIMEOUT_S


NOTICE_WAIT_MIN_S = 0.01  # shorter waits sleep: BLPOP takes 0 as "for ever"


class Cadence(NamedTuple):
    """How often the heartbeat goes (seconds): `busy` while a request is held (its lease renewed; a cancel or a
    stop is told at once, by the lease's notice, and seen within half a second even when the notice is lost);
    `idle` while idle on a farm with leases or open batches (three beats per lease keep the sweeps' pace); `quiet`
    while idle on an idle farm, where only the roster's entry needs keeping (three beats per `roster.fresh_s`)."""

    busy: float
    idle: float
    quiet: float


def beat_intervals(lease_s: float) -> Cadence:
    busy = min(lease_s / 3, 0.5)
    idle = max(busy, lease_s / 3)
    return Cadence(busy, idle, max(idle, roster.fresh_s(lease_s) / 3))


class Hold:
    """The request a worker runs: its lease token, a flag the stage code polls via ctx.cancelled(), its
    sandboxed runs (killed when the request is lost), and when it was picked (monotonic): the pick is the
    hold's first beat."""

    __slots__ = ("token", "batch", "stop", "runs", "picked")

    def __init__(self, token: str, batch: str) -> None:
        self.token = token
        self.batch = batch
        self.stop = threading.Event()
        self.runs = live.Scope()
        self.picked = time.monotonic()

    def lose(self) -> None:
        """The batch was cancelled or the lease lost: the stage's outcome will be discarded, so it may stop
        (ctx.cancelled()), and its sandboxed programs are killed now rather than at their time limits. Called
        on every beat that finds it so, which also ends a run started since the last."""
        self.stop.set()
        if ended := self.runs.end():
            log.info("ended %d sandboxed run(s) of a request of batch %s: the batch was cancelled or the lease lost",
                     ended, self.batch)


def next_beat(last_beat: float, hold: Hold | None, busy: float, idle: float) -> float:
    """When the heartbeat is due (monotonic). Idle, `idle` (the idle or the quiet cadence) after the last beat.
    Holding a request, `busy` after the last beat or the pick, whichever came later: the pick just took a fresh
    lease on a batch it found open and noted the worker seen, which is all a beat does, so a request served in
    less than the busy period costs no beat; and never later than the idle cadence, which keeps the roster and
    the sweeps going for a worker that serves one short request after another."""
    if hold is None:
        return last_beat + idle
    return min(last_beat + idle, max(last_beat, hold.picked) + busy)


def kind_queues_of(queue: str) -> tuple[str, ...]:
    """The stage queues of the queue's resource kind, its own included (where pick.lua counts a tenant's cap).

    It loads every pipeline, a tenth of a second or more: a worker does it before it says it is ready (its
    main process, `workers.task.register`), so its pool process inherits the answer and the start-up the
    planner measures is the whole of it."""
    return tuple(sorted({queue, *registry.queues_of_kind(registry.stage_by_queue(queue)[1].resource)}))


class StageWorker:
    """What one worker process knows: its stage, its name, its Redis and the request it holds."""

    def __init__(self, app: Celery, settings: Settings, queue: str, name: str,
                 kind_queues: tuple[str, ...] | None = None) -> None:
        self.settings = settings
        self.queue = queue
        self.name = name
        self.pipeline, self.stage = registry.stage_by_queue(queue)
        self.kind_queues = kind_queues if kind_queues is not None else kind_queues_of(queue)
        self.dispatch = Dispatch(settings)
        self.keys = Keys(settings.namespace)
        self.tokens = Tokens(app, settings)
        self.hold: Hold | None = None
        self.last_active = time.monotonic()
        self._stopped = threading.Event()
        self._nudge = threading.Event()  # set by a hold taken and by stop(): the heartbeat thread re-times its wait
        self._thread: threading.Thread | None = None
        # while holding a request, the heartbeat waits on the stage's notice that a batch began to wait while a share
        # is reserved (preempt.lua decides) and on its lease's own (taken, or its batch ended: Keys.notice)
        self._stage_notice = self.keys.queue(queue, QueuePart.notice)

    # ---- one token ----

    def serve(self, limit_s: float | None = None) -> str:
        """Serve one wake-up token, then serve on: while requests wait whose tokens no worker has taken yet (all
        were busy), take the next one's token from the broker's list and serve it here, as long as the token's
        hard limit `limit_s` leaves it room (farm.protocol.tokens.serves_on). A busy stage's requests then skip
        Celery's delivery, the pool's round trips and a task's events each; the pick is the same script, so the
        order (EBF or FCFS, fair shares) is too. What it served, as Flower shows it (workers.served)."""
        began = time.monotonic()
        served, waiting = self._serve_one(take_token=False, limit_s=limit_s)
        line = [served]
        # the hand-on read how many tokens wait on the stage's list: with none, no pick is spent looking
        while waiting and self._serves_on(time.monotonic() - began, limit_s):
            served, waiting = self._serve_one(take_token=True, limit_s=limit_s)
            line.append(served)
        return served_line(line)

    def _serves_on(self, elapsed_s: float, limit_s: float | None) -> bool:
        # only where the scripts publish the tokens (the broker is this Redis): elsewhere they cannot be taken back
        return (limit_s is not None and self.dispatch.lua_tokens and not self._stopped.is_set()
                and serves_on(elapsed_s, limit_s, timeout_for(self.queue, self.dispatch.knobs())))

    def _serve_one(self, take_token: bool, limit_s: float | None) -> tuple[Served, bool]:
        """One pick and, if it found a request, its stage run and hand-on; and whether wake-up tokens waited on the
        stage's list at the hand-on (read only where the worker may serve on). `take_token`: serving on."""
        self.last_active = time.monotonic()
        knobs = self.dispatch.knobs()
        token = uuid.uuid4().hex
        reply = self.dispatch.pick(self.queue, self.name, knobs.scheduler, token, self.stage.resource,
                                   self.kind_queues, take_token)
        self.requeued(reply[0], knobs)
        if len(reply) == 1:
            # the request this token announced was cancelled or taken by a recovered token; serving on, no token
            # was left to take
            return Served(self.queue, "idle"), False
        _, batch_id, request_id, enqueued_at, state_raw, payload_raw, task, _pipeline = reply
        state = RequestState.decode(state_raw)
        hold = self.take(Hold(token, batch_id))
        started = time.time()
        try:
            try:
                payload = payload_of(payload_raw)
            except InvalidInput as exc:
                outcome = StageOutcome(Status.INVALID_INPUT, message=str(exc))
            else:
                ctx = StageContext(request_id, batch_id, task, payload, dict(state.carry), self.stage,
                                   knobs.timeout_of(self.stage), self.name, hold.stop.is_set)
                with live.scope(hold.runs):
                    outcome = run_stage(ctx)
        finally:
            self.hold = None
            self.last_active = time.monotonic()
        finished = time.time()
        return self.complete(knobs, hold, request_id, float(enqueued_at), state, started, finished, outcome,
                             count_tokens=self._serves_on(0.0, limit_s))  # whether this token may serve on at all

    def take(self, hold: Hold) -> Hold:
        """Hold a request; the heartbeat, perhaps in its long idle wait, moves to the busy cadence at once."""
        self.hold = hold
        self._nudge.set()
        return hold

    def complete(self, knobs: Knobs, hold: Hold, request_id: str, enqueued_at: float, state: RequestState,
                 started: float, finished: float, outcome: StageOutcome,
                 count_tokens: bool = False) -> tuple[Served, bool]:
        """Hand the request on to its next stage, or finish it here; what was served, and (with `count_tokens`)
        whether wake-up tokens wait on the stage's list, read in the same round trip. Data a stage passes on that
        is not JSON fails its request alone, as an infra error of this stage."""
        passed = replace(state, carry={**state.carry, **outcome.carry}, details={**state.details, **outcome.details})
        try:
            call, wake = self._handoff(knobs, hold, request_id, enqueued_at, passed, started, finished, outcome)
        except (TypeError, ValueError) as exc:
            outcome = StageOutcome(Status.INFRA_ERROR,
                                   message=f"stage {self.stage.name!r} passed data that is not JSON: {exc}")
            call, wake = self._handoff(knobs, hold, request_id, enqueued_at, state, started, finished, outcome)
        if count_tokens:
            reply, waiting = self.dispatch.run_and_count(call, self.keys.broker(self.queue))
        else:
            reply, waiting = self.dispatch.run(call), 0
        if wake is not None and reply == "next" and not self.dispatch.lua_tokens:
            self.tokens.send(*wake)
        handed_on = wake is not None  # a stage before the last: no status or reward of the request's yet
        status = outcome.status.value if outcome.status else "passed" if handed_on else Status.OK.value
        return Served(self.queue, str(reply), hold.batch, request_id, status,
                      None if handed_on else outcome.reward, started - enqueued_at, finished - started), waiting > 0

    def _handoff(self, knobs: Knobs, hold: Hold, request_id: str, enqueued_at: float, state: RequestState,
                 started: float, finished: float, outcome: StageOutcome) -> tuple[Call, tuple[str, float] | None]:
        """The call that hands the request on (and the wake-up token it needs: queue, timeout) or finishes it.
        Raises TypeError or ValueError when the state is not JSON."""
        status = outcome.status.value if outcome.status else "passed"
        nxt = next_stage(state.visits, self.stage.name) if outcome.status is None else None
        record = StageRecord(self.stage.name, status, enqueued_at, started, finished, self.name, outcome.message)
        records = (*state.records, record.to_dict())
        stage_event = events.encode("stage_done", batch=hold.batch, request=request_id, stage=self.stage.name,
                                    queued_at=enqueued_at, started_at=started, finished_at=finished, status=status,
                                    worker=self.name)["e"]
        if nxt is not None:
            queue = self.pipeline.stage(nxt).queue
            limit = timeout_for(queue, knobs)
            moved = replace(state, records=records, queued_at=finished).encode()
            return advance_call(hold.batch, request_id, hold.token, self.name, self.queue, finished, stage_event,
                                queue, moved, limit), (queue, limit)
        json.dumps(state.carry, allow_nan=False)  # what a last stage passes on must be JSON too, as a hand-on's is
        final = outcome.status or Status.OK
        result = Result(request_id, hold.batch, final, outcome.reward, outcome.message,
                        stage=self.stage.name if final is not Status.OK else None, outcome=outcome.outcome,
                        group=state.group, stages=tuple(StageRecord.from_dict(r) for r in records),
                        finished_at=finished, details=state.details)
        return finish_call(result, hold.token, self.name, self.queue, stage_event), None

    def wake_if_pending(self, waiting: int) -> None:
        """Idle for a lease time while requests wait (`waiting` batches, as the beat read): their tokens were lost
        (a client died between enqueue and publish, or a worker was killed holding an unpicked token, which the
        Redis broker only redelivers after its visibility timeout), so send one; a token too many costs an empty
        pick."""
        if waiting:
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
        self._nudge.set()

    def _await_notice(self, hold: Hold, wait_s: float) -> bool:
        """Wait up to `wait_s` for a notice; True when the beat is due now: the hold's lease was taken (preempt.lua)
        or its batch ended (cancel, abandon), so the beat finds so and kills the request's programs at once. The
        stage's notice is decided here, by whichever busy worker popped it. A failure (Redis restarting) is logged
        and the wait is slept instead, so the heartbeat neither dies nor spins."""
        started = time.monotonic()
        own = self.keys.notice(hold.token)
        try:
            popped = self.dispatch.redis.blpop([own, self._stage_notice], timeout=wait_s)
            if popped is None:
                return False
            if popped[0] == own:
                return True
            done = self.dispatch.preempt(self.queue, self.stage.resource, self.kind_queues)
            if done.requeued:  # their wake-up tokens, where the script could not publish them
                self.requeued(done.requeued, self.dispatch.knobs())
            return self.name in done.stopped
        except Exception:
            log.exception("farm heartbeat of %s: waiting on its notices failed", self.name)
            self._nudge.wait(max(0.0, wait_s - (time.monotonic() - started)))
            return False

    def _beat(self) -> None:
        cadence = beat_intervals(self.settings.lease_s)
        busy = cadence.busy
        idle = cadence.idle  # until a beat found the farm idle: a worker starts on the pace of a farm at work
        sweep_every = max(self.settings.lease_s / 2, busy)
        last_sweep = 0.0
        last_beat = time.monotonic()
        while True:
            held = self.hold  # read once: the serving thread may end the hold meanwhile
            wait_s = max(0.0, next_beat(last_beat, held, busy, idle) - time.monotonic())
            stopped = False
            if held is not None and wait_s >= NOTICE_WAIT_MIN_S:
                # holding a request, the wait is a blocking pop of the notices (see _await_notice); a hold taken
                # meanwhile is seen when it ends, within the busy period
                stopped = self._await_notice(held, wait_s)
                self._nudge.clear()
                if self._stopped.is_set():
                    return
            # idle, a beat every third of a lease (of a lease on an idle farm) keeps the worker on the roster; a
            # hold taken meanwhile nudges the wait down to the busy cadence, so its lease and cancellation are
            # watched as before
            elif self._nudge.wait(wait_s):
                self._nudge.clear()
                if self._stopped.is_set():
                    return
                continue
            hold = self.hold
            if not stopped and time.monotonic() < next_beat(last_beat, hold, busy, idle):
                continue  # the hold it waited on ended: the wait goes on at the idle cadence
            last_beat = time.monotonic()
            try:
                sweepable = True  # holding a request, this worker's own lease is there to sweep
                if hold is None:
                    found = roster.beat(self.dispatch.redis, self.keys, self.queue, self.name, time.time())
                    sweepable = found.sweepable
                    if time.monotonic() - self.last_active > self.settings.lease_s:
                        self.last_active = time.monotonic()
                        self.wake_if_pending(found.waiting)
                elif self.dispatch.heartbeat(hold.token, hold.batch, self.queue, self.name, time.time()) != "open":
                    hold.lose()  # cancelled batch or lost lease: its result is discarded
                # an idle farm (no lease, no open batch) has nothing to sweep: its beat saw so, and the sweep's
                # two round trips (the knobs, the script) are skipped, and the next beat comes a lease later, not a
                # third (a batch opened meanwhile is served at once: its tokens wake the worker, not the beat)
                idle = cadence.idle if sweepable else cadence.quiet
                if sweepable and time.monotonic() - last_sweep >= sweep_every:
                    last_sweep = time.monotonic()
                    self.requeued(self.dispatch.sweep(), self.dispatch.knobs())
            except Exception:  # a Redis blip must not kill the heartbeat; the next beat retries
                log.exception("farm heartbeat of %s failed", self.name)
