"""What every real backend shares: worker names, the workers' environment, stage timeouts, worker-life
events on the namespace's stream, and readiness read from the workers' own `worker_ready` events (the rules
of a worker's life built on them are planner.backends.lifecycle)."""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from typing import Any, Callable, Iterable, Mapping

import redis

from farm import events, registry
from farm.config import STARTUP_DELAY_ENV, Settings
from farm.protocol import roster, stream
from farm.protocol.calls import lapse_call
from farm.protocol.keys import Keys
from farm.protocol.scripts import SOURCES, run

log = logging.getLogger(__name__)

_TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
_NAMESPACE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_STAGE = re.compile(r"^[A-Za-z0-9_-]{1,64}\.[A-Za-z0-9_-]{1,64}$")
DEFAULT_GRACE_S = 30.0  # beyond the stage's timeout before a retiring worker is killed


def check_namespace(namespace: str) -> str:
    if not isinstance(namespace, str) or not _NAMESPACE.match(namespace):
        raise ValueError(f"namespace {namespace!r} must be 1-64 letters, digits, '_' or '-' "
                         "(starting with a letter or digit)")
    return namespace


def check_stage(stage: str) -> str:
    if not isinstance(stage, str) or not _STAGE.match(stage):
        raise ValueError(f"stage {stage!r} must be a stage queue '<pipeline>.<stage>'")
    return stage


def check_count(n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"the number of workers to spawn must be a whole number >= 0, not {n!r}")
    return n


def worker_names(namespace: str, stage: str, n: int, request_id: str | None) -> list[str]:
    """`<namespace>.<pipeline>.<stage>.<token>`: unique in the farm, readable in Flower and `docker ps`.

    With a request id the tokens are `<request_id>-<i>`, so a retried spawn names the same workers."""
    if request_id is None:
        return [f"{namespace}.{stage}.{uuid.uuid4().hex[:10]}" for _ in range(n)]
    if not isinstance(request_id, str) or not _TOKEN.match(request_id):
        raise ValueError(f"request_id {request_id!r} must be 1-40 letters, digits, '_' or '-'")
    return [f"{namespace}.{stage}.{request_id}-{i}" for i in range(n)]


def worker_env(settings: Settings) -> dict[str, str]:
    """The farm's settings as the environment `farm worker` reads (the inverse of `farm.config.from_env`)."""
    env = {
        "FARM_NAMESPACE": settings.namespace,
        "FARM_LEASE_S": repr(float(settings.lease_s)),
        "FARM_MAX_PAYLOAD_BYTES": str(int(settings.max_payload_bytes)),
    }
    for key, value in (
        ("FARM_REDIS_URL", settings.redis_url),
        ("FARM_BROKER_URL", settings.broker_url),
        ("FARM_DATABASE_URL", settings.database_url),
    ):
        if value:
            env[key] = value
    return env


def startup_delay(startup_delay_s: float) -> dict[str, str]:
    """The environment of an artificial cold start (workers.process.startup_delay): none for 0 s."""
    if not (0 <= float(startup_delay_s) < float("inf")):
        raise ValueError(f"startup_delay_s must be a finite number of seconds >= 0, not {startup_delay_s!r}")
    return {STARTUP_DELAY_ENV: repr(float(startup_delay_s))} if startup_delay_s > 0 else {}


def registry_timeout(stage: str) -> float:
    """The stage's own timeout from the pipeline registry (raises UnknownPipeline for a stage it lacks)."""
    return registry.stage_timeout(stage)


def registry_resource(stage: str) -> str:
    return registry.stage_by_queue(stage)[1].resource


def redis_for(settings: Settings):
    """The Redis client worker-life events and readiness go through; the farm needs one, so do we."""
    if not settings.redis_url:
        raise ValueError("a worker backend needs settings.redis_url (the farm's Redis); "
                         "the embedded farm sets it once its Redis runs")
    return redis.Redis.from_url(settings.redis_url)


class Lives:
    """Worker-life events (`worker_spawned`, `worker_retired`) on the namespace's stream, at least once.

    An event that could not be written is kept and retried on the next `flush`, so a Redis hiccup costs
    accounting a delay, never a record."""

    def __init__(self, client, namespace: str, backend: str) -> None:
        self._client = client
        self._namespace = namespace
        self._keys = Keys(namespace)
        self._backend = backend
        self._pending: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._lapse = client.register_script(SOURCES["lapse"])

    def spawned(self, worker: str, stage: str, at: float, *, placed: bool = True) -> None:
        """`placed=False`: asked for, not yet on a machine (pending); `placed` follows when it is."""
        extra = {} if placed else {"pending": True}
        self._emit(events.encode("worker_spawned", worker=worker, stage=stage, backend=self._backend, at=at, **extra))

    def placed(self, worker: str, stage: str, at: float) -> None:
        self._emit(events.encode("worker_placed", worker=worker, stage=stage, at=at))

    def retired(self, worker: str, stage: str, at: float) -> None:
        """A worker is gone. Whatever lease it still held lapses now: a worker that died (or was killed past
        its stop timeout) gives its request back at the next sweep instead of `lease_s` after its last
        heartbeat; one that finished first holds nothing."""
        self._emit(events.encode("worker_retired", worker=worker, stage=stage, at=at))
        self.lapse(worker, stage)

    def lapse(self, worker: str, stage: str) -> bool:
        """True when `worker` held a lease at `stage`, which now lapses. Only for a worker known to be gone:
        one still running would lose its request to another worker (its late result is discarded)."""
        try:
            return bool(run(self._lapse, self._namespace, lapse_call(worker, stage)))
        except Exception as exc:  # Redis away: the lease lapses by itself within lease_s, as it always did
            log.warning("could not give back the lease of gone worker %s (it lapses on its own): %s", worker, exc)
            return False

    def _emit(self, entry: dict[str, str]) -> None:
        with self._lock:
            self._pending.append(entry)
        self.flush()

    def flush(self) -> bool:
        """Write what is pending; True when nothing is left."""
        with self._lock:
            while self._pending:
                try:
                    stream.append(self._client, self._keys, self._pending[0], cap=None)  # untrimmed, as it was
                except Exception as exc:  # Redis away: keep it for the next flush
                    log.warning("could not record a worker life event (%d pending): %s", len(self._pending), exc)
                    return False
                self._pending.pop(0)
            return True


class Readiness:
    """Which workers take requests: those on the stage's roster (farm.protocol.roster), where a worker enters
    on Celery's worker_ready and stays by its heartbeat.

    The registry rather than the `worker_ready` events: the recorder trims the event stream as it drains
    it, so a backend reading the stream later could miss a worker's announcement and keep it starting forever."""

    def __init__(self, client, namespace: str) -> None:
        self._client = client
        self._keys = Keys(namespace)
        self._seen: dict[str, float] = {}  # worker -> when it was first seen ready
        self._lock = threading.Lock()

    def ready(self, workers: Mapping[str, str]) -> dict[str, float]:
        """Of the workers (name -> stage queue), those registered as taking requests (name -> ready at)."""
        with self._lock:
            waiting = [(n, s) for n, s in workers.items() if n not in self._seen]
            if waiting:
                for (name, _), raw in zip(waiting, roster.last_beats(self._client, self._keys, waiting)):
                    if raw is not None:
                        self._seen[name] = min(float(raw), time.time())
            return {n: self._seen[n] for n in workers if n in self._seen}

    def forget(self, names: Iterable[str]) -> None:
        with self._lock:
            for name in names:
                self._seen.pop(name, None)


def timeout_lookup(timeout_for: Callable[[str], float] | None) -> Callable[[str], float]:
    """The stage timeout a retiring worker is granted before the kill: the caller's live one (the knobs'),
    else the registry's. It also validates the stage: an unknown one raises before anything starts."""
    if timeout_for is None:
        return registry_timeout

    def lookup(stage: str) -> float:
        registry_timeout(stage)
        timeout = timeout_for(stage)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"the timeout of stage {stage!r} must be a positive number of seconds, not {timeout!r}")
        return float(timeout)

    return lookup
