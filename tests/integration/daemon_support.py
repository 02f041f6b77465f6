"""Fixtures shared by the daemon's and the replay's integration tests: a farm without workers on real
Redis and PostgreSQL, with the recorder draining, and the planner daemon in a thread."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

import pytest
import redis as redis_lib

from farm.knobs import Knobs
from planner.backends import create

C, E = "synthetic.compile", "synthetic.execute"


def small_knobs() -> Knobs:
    """Short timeouts and ticks, and pools small enough for a 2-core machine."""
    return (Knobs(delay_s=0.5, tick_s=1.0)
            .with_stage(C, timeout_s=3.0, max_workers=3)
            .with_stage(E, timeout_s=3.0, max_workers=2))


@contextlib.contextmanager
def recorded_farm(settings, postgres_url):
    """A farm without workers: the store migrated, the recorder draining, the knobs published; yields
    (settings, engine) and stops the recorder after."""
    from farm.store.engine import make_engine, upgrade
    from farm.store.knob_store import KnobStore
    from farm.store.recorder import Recorder

    settings = settings.with_(database_url=postgres_url, lease_s=2.0)
    upgrade(postgres_url)
    engine = make_engine(postgres_url)
    client = redis_lib.Redis.from_url(settings.redis_url)
    KnobStore(engine, client, settings.namespace).save(small_knobs())
    stop = threading.Event()
    recorder = Recorder(settings, engine, block_ms=100)
    thread = threading.Thread(target=recorder.run_forever, args=(stop,), daemon=True)
    thread.start()
    try:
        yield settings, engine
    finally:
        stop.set()
        thread.join(5)
        recorder.close()
        client.close()
        engine.dispose()


@pytest.fixture
def farm(settings, postgres_url):
    """A farm without workers (`recorded_farm`); the local workers a test left are retired, then killed."""
    with recorded_farm(settings, postgres_url) as (settings, engine):
        yield settings, engine
        _end_local_workers(settings)


def _end_local_workers(settings) -> None:
    backend = create("local", settings)
    backend.shutdown()
    deadline = time.monotonic() + 20
    while backend.list() and time.monotonic() < deadline:
        time.sleep(0.2)
    for w in backend.list():  # still busy after the grace: do not leave processes behind
        if w.ref.isdigit():
            os.kill(int(w.ref), signal.SIGKILL)
    backend.close()


def alive(settings, stage=None):
    backend = create("local", settings)
    try:
        return [w for w in backend.list(stage) if w.alive]
    finally:
        backend.close()


def wait_for(predicate, timeout_s=30.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what() if callable(what) else what}")


@contextlib.contextmanager
def serving(built):
    """A built daemon (`planner.runtime.service.build`) running in a thread of the test process; stopped and
    closed on the way out."""
    from planner.runtime import service

    stop = threading.Event()
    thread = threading.Thread(target=service.run, args=(built, stop), daemon=True)
    thread.start()
    try:
        yield built
    finally:
        stop.set()
        thread.join(10)
        built.close()


@pytest.fixture
def daemon(farm):
    """The daemon in a thread of the test process."""
    from farm.protocol import heartbeat
    from planner.runtime import service

    settings, engine = farm
    with serving(service.build(settings, backend="local", startup_s=1.0)) as built:
        wait_for(lambda: heartbeat.read(built.redis, settings.namespace), 30, "the daemon's first epoch")
        yield built


