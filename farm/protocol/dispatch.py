"""The synchronous executor of the farm's scripts and flows (farm.protocol.exchange), used by workers, the
planner and the sync client."""

from __future__ import annotations

import time
from typing import Any, NamedTuple, Sequence

import redis as redis_lib

from farm.config import Settings, redis_url
from farm.knobs import Knobs
from farm.protocol.calls import abandon_call, cancel_call, heartbeat_call, pick_call, preempt_call, set_estimate_call
from farm.protocol.ids import check_farm_batch
from farm.protocol.exchange import Exchanges
from farm.protocol.flow import Flow, Steps, run
from farm.protocol.live import LiveState, Progress, inspect
from farm.protocol.scripts import SOURCES, Call, argv, pipelined
from farm.protocol.silence import Touched
from farm.results import Status


class Preempted(NamedTuple):
    """What a preemption did: the workers stopped, and the queue once per request put back, each needing a
    wake-up token where the broker is not the farm's Redis (`lua_tokens` off), as a sweep's requeued queues do."""

    stopped: list[str]
    requeued: list[str]


class Dispatch:
    """Runs the farm's scripts on one Redis connection pool (thread-safe)."""

    def __init__(self, settings: Settings, redis=None) -> None:
        self.settings = settings
        self.exchanges = Exchanges(settings)  # the knobs cache, shared with a sync client made on this dispatch
        self.keys, self.lua_tokens = self.exchanges.keys, self.exchanges.lua_tokens
        self.redis = redis or redis_lib.Redis.from_url(redis_url(settings), decode_responses=True)
        self._scripts = {name: self.redis.register_script(src) for name, src in SOURCES.items()}

    def run(self, call: Call):
        return self._scripts[call.script.name](args=argv(self.settings.namespace, self.lua_tokens, call))

    def run_and_count(self, call: Call, listed: str) -> tuple[Any, int]:
        """A call, and the length of the list `listed` read right after it in the same round trip (a worker handing
        a request on asks whether wake-up tokens wait on its stage's list: workers.stage, serving on)."""
        registered = self._scripts[call.script.name]
        try:
            return self._counted(registered, call, listed)
        except redis_lib.exceptions.NoScriptError:  # it did not run: a Redis restarted since the script was loaded
            registered.sha = self.redis.script_load(registered.script)
            return self._counted(registered, call, listed)

    def _counted(self, registered: Any, call: Call, listed: str) -> tuple[Any, int]:
        pipe = self.redis.pipeline(transaction=False)
        pipelined(registered, self.settings.namespace, call, pipe, self.lua_tokens)
        pipe.llen(listed)
        reply, length = pipe.execute()
        return reply, int(length)

    def do(self, op: Any) -> Any:
        """Run one operation of a flow: a script call, or a read of farm state."""
        return self.run(op) if isinstance(op, Call) else op.on(self.redis)

    def drive(self, flow: Flow) -> Any:
        """Run a flow to its end here (its answer)."""
        return run(Steps(flow), self.do)

    def send(self, call: Call) -> "Pending":
        """Send a call now and read its answer later (`Pending.result()`), so the caller can prepare the
        next call while Redis runs this one: overlap without a thread, hence without the GIL's hand-offs."""
        return Pending(self, call)

    def knobs(self, max_age_s: float | None = None) -> Knobs:
        """The live knobs, re-read at most once a second (or per `max_age_s`)."""
        return self.drive(self.exchanges.knobs(max_age_s))

    def set_estimate(self, batch_id: str, estimated_at: float) -> bool:
        """Move a batch in every stage's EBF order; False when it is no longer open."""
        return self.run(set_estimate_call(check_farm_batch(batch_id), estimated_at)) == "ok"

    def cancel(self, batch_id: str, now: float | None = None) -> str:
        return self.run(cancel_call(check_farm_batch(batch_id), time.time() if now is None else now))

    def sweep(self) -> list[str]:
        """Give lapsed leases back and abandon the batches whose trainer went silent (the live knob
        `abandon_after_s`); returns one stage queue per request put back (each needs a token unless
        `lua_tokens`: then the script published them)."""
        return self.drive(self.exchanges.sweep())

    def touch(self, batch_ids: Sequence[str]) -> list[Touched]:
        """A sign of life from the trainer of these batches (farm.protocol.silence), in one round trip."""
        return self.drive(self.exchanges.touch(batch_ids))

    def progress(self, batch_id: str) -> Progress:
        return self.drive(self.exchanges.progress(batch_id))

    def pick(self, queue: str, worker: str, scheduler: str, token: str, kind: str = "",
             kind_queues: tuple[str, ...] = (), take_token: bool = False):
        return self.run(pick_call(queue, worker, scheduler, self.settings.lease_s, token, kind, kind_queues,
                                  take_token))

    def heartbeat(self, token: str, batch_id: str, queue: str = "", worker: str = "", now: float | None = None) -> str:
        """Renew a lease ('lost' or the batch's state); with `queue`, `worker`'s roster beat at `now` in the same
        round trip."""
        if queue and now is None:
            now = time.time()
        return self.run(heartbeat_call(token, self.settings.lease_s, batch_id, queue, worker, now))

    def preempt(self, queue: str, kind: str, kind_queues: tuple[str, ...] = ()) -> Preempted:
        """Stop the running requests a reserving tenant waiting at `queue` takes back (preempt.lua): the workers
        stopped, each told through its lease's notice (`Keys.notice(token)`), and the requests put back."""
        stopped, requeued = self.run(preempt_call(queue, self.settings.lease_s, kind, kind_queues))
        return Preempted(list(stopped), list(requeued))

    def abandon(self, worker: str, queue: str, status: Status, message: str, now: float | None = None) -> str:
        return self.run(abandon_call(worker, queue, status, message, time.time() if now is None else now))

    def forget_worker(self, queue: str, worker: str) -> None:
        """Drop a retired worker from its stage's registry (a killed one otherwise stays, shown not alive)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hdel(self.keys.queue(queue, "seen"), worker)
        pipe.hdel(self.keys.queue(queue, "busy"), worker)
        pipe.execute()

    def inspect(self, queues: list[str] | None = None) -> LiveState:
        return inspect(self.redis, self.settings, queues)

    def close(self) -> None:
        self.redis.close()


class Pending:
    """A script call sent on a connection of its own, its answer not yet read."""

    def __init__(self, dispatch: Dispatch, call: Call) -> None:
        self.pool = dispatch.redis.connection_pool
        self.script = dispatch._scripts[call.script.name]
        self.args = argv(dispatch.settings.namespace, dispatch.lua_tokens, call)
        self.conn = self.pool.get_connection()
        try:
            self.conn.send_command("EVALSHA", self.script.sha, 0, *self.args)
        except BaseException:
            self._drop()
            raise

    def result(self):
        """The call's answer; a connection error leaves it unknown whether the script ran (the caller's
        calls are idempotent: it sends them again)."""
        if self.conn is None:
            raise redis_lib.ConnectionError("the answer was already read, or the connection failed")
        try:
            try:
                reply = self.conn.read_response()
            except redis_lib.exceptions.NoScriptError:  # a Redis restarted since the script was loaded
                self.conn.send_command("SCRIPT", "LOAD", self.script.script)
                self.script.sha = self.conn.read_response()
                self.conn.send_command("EVALSHA", self.script.sha, 0, *self.args)
                reply = self.conn.read_response()
        except BaseException:
            self._drop()
            raise
        self.pool.release(self.conn)
        self.conn = None
        return reply

    def _drop(self) -> None:
        self.conn.disconnect()
        self.pool.release(self.conn)
        self.conn = None
