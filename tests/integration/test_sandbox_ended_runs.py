"""Runs of the real sandbox ended from another thread (a worker's heartbeat, once the request is no longer its
own): a run, a spawned program and a verifier call each die at once, long before their own limits, and say
they were ended rather than how a killed program looks. The scope's rules alone: tests/unit/test_sandbox_scope.py."""

from __future__ import annotations

import os
import threading
import time

import pytest

from farm.results import Status
from workers import sandbox
from workers.judge.function import judge
from workers.sandbox import live

pytestmark = [pytest.mark.timeout(120), pytest.mark.skipif(os.geteuid() != 0, reason="the full sandbox needs root")]

SPIN = [sandbox.python_executable(), "-I", "-S", "-c", "while True: pass"]
LONG = sandbox.Limits(wall_s=60)  # the program's own limit: what would end it without the scope
ENDED_WITHIN_S = 15.0  # ended by the scope: far below LONG's 60 s, with room for a loaded machine


def end_once_running(scope: live.Scope, runs: int = 1) -> threading.Thread:
    """Ends `scope` once `runs` of its runs are live and have had a moment to start their programs."""

    def go() -> None:
        deadline = time.monotonic() + 30
        while scope.live() < runs and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)
        scope.end()

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def _spin(_):
    while True:
        pass


def test_a_running_program_is_killed_when_its_scope_ends():
    started = time.monotonic()
    with live.scope() as s:
        end_once_running(s)
        with pytest.raises(sandbox.RunsEnded):
            sandbox.run(SPIN, limits=LONG)
    assert time.monotonic() - started < ENDED_WITHIN_S


def test_a_spawned_program_is_killed_when_its_scope_ends():
    started = time.monotonic()
    status = None
    with live.scope() as s:
        end_once_running(s)
        with pytest.raises(sandbox.RunsEnded):
            with sandbox.spawn(SPIN, limits=LONG) as spawned:
                status = spawned.wait(LONG.wall_s)
    assert status is not None and time.monotonic() - started < ENDED_WITHIN_S


def test_a_verifier_call_is_killed_when_its_scope_ends():
    started = time.monotonic()
    with live.scope() as s:
        end_once_running(s)
        with pytest.raises(sandbox.RunsEnded):
            sandbox.call(_spin, None, limits=LONG)
    assert time.monotonic() - started < ENDED_WITHIN_S


def test_a_function_problem_whose_response_never_returns_is_ended_with_both_its_processes():
    """The response's program and the tests' child, each killed: the judge raises rather than giving a verdict."""
    started = time.monotonic()
    with live.scope() as s:
        end_once_running(s, runs=2)
        with pytest.raises(sandbox.RunsEnded):
            judge(prompt="", test="def check(candidate):\n    assert candidate(1) == 1\n",
                  entry_point="f", program="def f(x):\n    while True:\n        pass\n", time_limit_s=50)
    assert time.monotonic() - started < ENDED_WITHIN_S


def test_a_run_asked_for_after_its_scope_ended_never_starts():
    with live.scope() as s:
        s.end()
        with pytest.raises(sandbox.RunsEnded):
            sandbox.run(["/bin/true"])


def test_a_run_outside_a_scope_is_unchanged():
    assert sandbox.run(["/bin/true"]).ok


def test_a_stage_whose_runs_were_ended_is_cancelled_not_judged():
    from farm.pipeline import StageContext
    from workers.pipelines.code.run_code import pipeline
    from workers.runner import run_stage

    stage = pipeline.stage("run")
    ctx = StageContext("r", "b", "t", {"language": "python", "code": "while True: pass", "run_timeout": 50}, {},
                       stage, stage.timeout_s, "w")
    with live.scope() as s:
        end_once_running(s)
        outcome = run_stage(ctx)
    assert outcome.status is Status.CANCELLED and "no longer held" in outcome.message
