"""A stage worker process: one Celery worker serving one stage's queue, one request at a time.

`farm worker` runs it, and so does the local backend's launcher in each process it forks, so both start
exactly the same worker.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import socket
import sys
import time

import billiard.pool
from celery.app import trace as celery_trace
from celery.concurrency.asynpool import AsynPool
from celery.concurrency.prefork import TaskPool
from celery.utils.log import mlevel
from celery.worker.consumer import Consumer

from farm import registry
from farm.celery_app import make_app
from farm.config import STARTUP_DELAY_ENV, from_env
from farm.pipeline import UnknownPipeline
from workers import sandbox
from workers.task import register

_NAME = re.compile(r"^[A-Za-z0-9_.@:-]{1,128}$")
# How long a pool process that is leaving waits for the main process to take its last result.
RESULT_WAIT_S = 2.0
# Celery's worker heartbeat event (Celery's default 2 s): Flower's only use of it is to show the worker online, which
# it does for two periods after the last one; the farm's own liveness is the roster (workers.stage's beats). Each one
# wakes the worker, Redis and Flower (a PUBLISH of 800 bytes, decoded there): at 2 s, six idle workers cost Flower
# alone about 2 ms of CPU a second, and at 10 s the six still cost the farm about 1 ms a second (the worker's event
# loop, Redis, Flower's receiver). A worker killed hard shows as offline in Flower a minute later rather than 4 s; one
# that stops (retired, or its warm shutdown) says so at once, and the farm's own views (`farm status`, the metrics)
# go by the roster.
EVENT_HEARTBEAT_S = 30.0
# How long a worker's task events wait to go to Flower together. Celery buffers them and publishes what one turn of
# its event loop sent as one message, but a turn sends one event, so each request cost three PUBLISH round trips
# (received, started, succeeded), each one a message kombu builds here and Flower decodes there. Once per this
# long, a busy worker's events go in one message; Flower shows a task at most this much later.
EVENT_FLUSH_S = 0.1
# How often the worker's main process looks over its pool anyway (Celery's prefork pool: every 5 s, a wake-up of an
# idle worker each time). A pool process that exits is seen at once without it: its sentinel is in the event loop,
# which replaces it then (QuietAsynPool._event_process_exit); the timer only backs that up.
MAINTAIN_POOL_S = 30.0
REAP_RETRY_S = 0.05  # a pool process whose sentinel closed but that cannot be reaped yet is looked at again so soon
REAP_RETRIES = 100


class QuietAsynPool(AsynPool):
    """Celery's prefork pool, its upkeep timer at MAINTAIN_POOL_S, and a pool process that exits replaced as soon
    as it can be reaped.

    Celery replaces it when its sentinel becomes readable, but the sentinel closes as the process exits, a moment
    before the kernel lets its parent reap it: a `maintain_pool` then finds it still running and leaves it, and
    only the timer replaces it (about one exit in two, here). So the exit is looked at again every REAP_RETRY_S
    until the process is gone from the pool."""

    @property
    def timers(self):
        return {self.maintain_pool: MAINTAIN_POOL_S}

    def _event_process_exit(self, hub, proc, tries: int = REAP_RETRIES):
        super()._event_process_exit(hub, proc)
        if proc in self._pool and tries > 0 and self._state == billiard.pool.RUN:
            hub.call_later(REAP_RETRY_S, self._reap_again, hub, proc, tries - 1)

    def _reap_again(self, hub, proc, tries: int) -> None:
        self.maintain_pool()
        if proc in self._pool and tries > 0 and self._state == billiard.pool.RUN:
            hub.call_later(REAP_RETRY_S, self._reap_again, hub, proc, tries - 1)


class QuietConsumer(Consumer):
    """Celery's consumer, its buffered task events published once per EVENT_FLUSH_S rather than once per turn of
    its event loop; what is still buffered at a shutdown is published before the events' connection closes."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._flush_due = False

    def on_send_event_buffered(self):
        if self.hub and not self._flush_due:
            self._flush_due = True
            self.hub.call_later(EVENT_FLUSH_S, self._flush_later)

    def _flush_later(self) -> None:
        self._flush_due = False
        self._flush_events()

    def shutdown(self):
        self._flush_events()
        super().shutdown()


class QuietTaskPool(TaskPool):
    """`--pool=prefork`, with QuietAsynPool in the worker's event loop."""

    Pool = QuietAsynPool


class WorkerArgumentError(ValueError):
    """A worker asked for with a bad argument; `option` names the `farm worker` option at fault."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


def serve(stage_queue: str, name: str | None = None, *, loglevel: str = "INFO", events: bool = True,
          imports: tuple[str, ...] = ()) -> int:
    """Run the worker until it is shut down; its exit code. Bad arguments raise WorkerArgumentError.

    `farm worker` calls it, and so does the local backend's launcher in a process it forks."""
    for module in imports:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise WorkerArgumentError("--import", f"cannot import {module!r}: {exc}") from exc
    try:
        _, stage = registry.stage_by_queue(stage_queue)
    except UnknownPipeline as exc:
        raise WorkerArgumentError("--stage", str(exc)) from exc
    if getattr(stage.run, "contained", False):  # SandboxUnavailable: the worker refuses to start, saying why
        print(f"farm worker {stage_queue}: {sandbox.describe()}", file=sys.stderr, flush=True)
    host = socket.gethostname()
    name = name or f"{stage_queue}-{os.getpid()}@{host}"
    if not _NAME.match(name):
        raise WorkerArgumentError("--name", f"{name!r}: use 1-128 letters, digits or '_.@:-'")
    level = log_level(loglevel)
    settings = from_env()
    delay = startup_delay()
    if delay > 0:  # an artificial cold start (FARM_WORKER_STARTUP_DELAY_S): a container's or a GPU's, on a laptop
        time.sleep(delay)
    app = make_app(settings, send_events=events)
    register(app, settings, stage_queue, name)
    return run_worker(app, settings.queue(stage_queue), name if "@" in name else f"{name}@{host}", level, events)


def startup_delay() -> float:
    """Seconds a worker waits before it starts (and so before it is ready): FARM_WORKER_STARTUP_DELAY_S.

    For evaluating the planner with the start-ups real deployments have (image pulls, CUDA
    initialisation, a verifier's warm-up) on workers that would otherwise be ready in a second."""
    raw = os.environ.get(STARTUP_DELAY_ENV, "").strip()
    if not raw:
        return 0.0
    try:
        delay = float(raw)
    except ValueError:
        raise WorkerArgumentError(STARTUP_DELAY_ENV, f"{STARTUP_DELAY_ENV}={raw!r} is not seconds") from None
    if not (0 <= delay < float("inf")):
        raise WorkerArgumentError(STARTUP_DELAY_ENV, f"{STARTUP_DELAY_ENV}={raw!r} must be finite seconds >= 0")
    return delay


def log_level(loglevel: str) -> int:
    try:
        return mlevel(loglevel.upper())
    except (KeyError, ValueError, AttributeError) as exc:
        raise WorkerArgumentError("--loglevel", f"{loglevel!r} is not a log level "
                                  "(DEBUG, INFO, WARNING, ERROR, CRITICAL)") from exc


class WithoutSuccessLines(logging.Filter):
    """Drops Celery's "Task ... succeeded in ..." line: Flower and the history hold each task's outcome, and a line
    per request costs the pool process a formatted write (a tenth of its CPU at one request in flight)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != celery_trace.LOG_SUCCESS


def quiet_task_lines(loglevel: int) -> None:
    """Above DEBUG, no log line per task taken or finished well: "Task ... received" (the main process) and
    "... succeeded in" (the pool process). Retries, ignored tasks and failures are still logged."""
    if loglevel <= logging.DEBUG:
        return
    logging.getLogger("celery.worker.strategy").setLevel(max(loglevel, logging.WARNING))
    trace = logging.getLogger(celery_trace.__name__)
    if not any(isinstance(f, WithoutSuccessLines) for f in trace.filters):
        trace.addFilter(WithoutSuccessLines())


def run_worker(app, queue: str, hostname: str, loglevel: int, events: bool) -> int:
    """Celery's worker, built directly rather than through `celery worker`'s command line
    (`app.worker_main`): that path imports every Celery CLI plugin (flower's, click-repl, prompt-toolkit,
    pygments), about half of a worker's start-up CPU, which a burst of new workers on a small machine
    pays many times over. The options are those `celery worker` would be given:
    `--pool=prefork --concurrency=1 --prefetch-multiplier=1 --without-gossip --without-mingle -Q queue`
    (and `--task-events` with events, which Flower needs; the worker heartbeat stays, Flower's liveness, every
    EVENT_HEARTBEAT_S: `--heartbeat-interval`), the prefork pool's upkeep timer slowed (QuietTaskPool) and its
    task events sent together (QuietConsumer). Returns the worker's exit code."""
    _bound_result_wait()
    quiet_task_lines(loglevel)  # before the worker builds its strategy, which asks the level once
    worker = app.Worker(hostname=hostname, pool_cls=QuietTaskPool, consumer_cls=QuietConsumer, concurrency=1,
                        prefetch_multiplier=1, without_gossip=True, without_mingle=True, queues=[queue],
                        loglevel=loglevel, task_events=events, heartbeat_interval=EVENT_HEARTBEAT_S)
    worker.start()
    return worker.exitcode or 0


def _bound_result_wait() -> None:
    """Bound billiard's wait, at a pool process's exit, for the main process to have read its results.

    billiard waits up to 30 s (300 x 0.1 s). A warm shutdown can leave it waiting that long: a token handed
    to the pool process just as the shutdown began is dropped from the main process's books (the broker
    gets it back) while the pool process still runs it, so nobody reads its result, and the retired
    worker lingers 30 s for nothing. The farm needs none of these results: a request's outcome is in
    Redis before the task returns, and the token's broker message is at worst redelivered (an empty pick)."""
    interval = billiard.pool.GUARANTEE_MESSAGE_CONSUMPTION_RETRY_INTERVAL
    billiard.pool.GUARANTEE_MESSAGE_CONSUMPTION_RETRY_LIMIT = max(1, round(RESULT_WAIT_S / interval))
