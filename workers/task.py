"""The Celery side of a stage worker: the stage's task (one per wake-up token, served by
workers.stage.StageWorker), the finish of a request its hard time limit killed, and the worker's
lifecycle: announcing itself ready, leaving the registry, and leaving at once when retired.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from celery import Celery, Task, signals
from celery.exceptions import TimeLimitExceeded
from kombu.asynchronous import get_event_loop
from redis.exceptions import RedisError

from farm.celery_app import broker_url
from farm.config import Settings
from farm.protocol import roster
from farm.protocol.dispatch import Dispatch
from farm.protocol.tokens import task_name
from farm.results import Status
from workers.broker_poll import cut_short_on_close, slow_binding_refresh
from workers.stage import StageWorker, kind_queues_of

log = logging.getLogger(__name__)


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
    # here, before the worker is ready, not in the pool process's first pick; an unknown stage fails here too
    kind_queues = kind_queues_of(queue)

    def process_worker() -> StageWorker:
        global _worker
        if _worker is None:
            _worker = StageWorker(app, settings, queue, name, kind_queues)
        return _worker

    @app.task(name=task_name(queue), bind=True, base=StageTask, ignore_result=True, acks_late=True,
              farm_settings=settings, farm_queue=queue, farm_worker=name)
    def stage_token(self) -> str:
        try:
            # its hard limit: serving on (StageWorker.serve) leaves every request it takes room within it
            hard = (self.request.timelimit or (None, None))[0]
            return process_worker().serve(float(hard) if hard else None)
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

    consumers: list[Any] = []  # the main process's Celery consumer, once it is ready

    @signals.worker_ready.connect(weak=False)
    def wake_on_shutdown(sender: Any = None, **_: Any) -> None:
        _shutdown_wakes_loop()
        slow_binding_refresh(get_event_loop(), getattr(sender, "connection", None))
        consumers[:] = [sender]

    @signals.worker_shutting_down.connect(weak=False)
    def shutting_down(**_: Any) -> None:
        _wake_loop()
        try:
            d = Dispatch(settings)
            roster.retiring(d.redis, d.keys, queue, name, time.time())
            d.close()
        except RedisError:
            log.warning("could not mark farm worker %s as retiring", name)
        task_consumer = getattr(consumers[0], "task_consumer", None) if consumers else None
        cut_short_on_close(getattr(task_consumer, "channel", None), broker_url(settings))

    @signals.worker_ready.connect(weak=False)
    def announce(**_: Any) -> None:
        d = Dispatch(settings)
        gone = roster.announce(d.redis, d.keys, queue, name, time.time(), settings.lease_s)
        if gone:
            log.info("farm worker %s: the roster of %s dropped %d workers silent for %.0f s or more: %s", name, queue,
                     len(gone), roster.prune_s(settings.lease_s), ", ".join(gone[:10]))
        d.close()

    @signals.worker_shutdown.connect(weak=False)
    def retire(**_: Any) -> None:
        try:
            d = Dispatch(settings)
            roster.leave(d.redis, d.keys, queue, name)
            d.close()
        except RedisError:
            log.warning("could not unregister farm worker %s", name)

    return stage_token
