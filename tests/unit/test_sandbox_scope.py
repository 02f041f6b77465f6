"""The runs of one request (workers.sandbox.live): what ends them, when a run may no longer start, and that a
killed run is never mistaken for a finished one. The real sandbox's runs, spawns and calls ended from another
thread: tests/integration/test_sandbox_ended_runs.py."""

from __future__ import annotations

import threading

import pytest

from workers.sandbox import live


def test_ending_a_scope_calls_what_ends_each_of_its_live_runs():
    ended = []
    with live.scope() as s:
        with pytest.raises(live.RunsEnded):
            with live.tracked(lambda: ended.append("a")), live.tracked(lambda: ended.append("b")):
                assert s.end() == 2
    assert sorted(ended) == ["a", "b"]


def test_a_run_live_when_its_scope_ends_raises_runs_ended_once_it_is_cleaned_up():
    cleaned = []
    with live.scope() as s, pytest.raises(live.RunsEnded):
        try:
            with live.tracked(lambda: None):
                s.end()
        finally:
            cleaned.append(True)
    assert cleaned == [True]


def test_a_run_asked_for_in_an_ended_scope_fails_before_it_starts():
    started = []
    with live.scope() as s:
        s.end()
        with pytest.raises(live.RunsEnded, match="no longer held"):
            with live.tracked(lambda: None):
                started.append(True)
    assert started == []


def test_a_run_that_finished_is_not_ended_later():
    ended = []
    with live.scope() as s:
        with live.tracked(lambda: ended.append(True)):
            pass
        assert s.live() == 0 and s.end() == 0
    assert ended == []


def test_a_run_outside_any_scope_is_tracked_by_none_and_never_refused():
    with live.tracked(lambda: pytest.fail("nothing may end a run outside a scope")):
        pass


def test_an_end_that_fails_spares_none_of_the_other_runs():
    ended = []

    def broken():
        raise OSError("gone already")

    with live.scope() as s, pytest.raises(live.RunsEnded):
        with live.tracked(broken), live.tracked(lambda: ended.append(True)):
            assert s.end() == 2
    assert ended == [True]


def test_scopes_do_not_nest_on_one_thread():
    with live.scope(), pytest.raises(RuntimeError, match="already open"):
        with live.scope():
            pass


def test_a_scope_holds_only_the_runs_of_its_own_thread():
    ended = []
    ready, done = threading.Event(), threading.Event()

    def other_thread():
        with live.tracked(lambda: ended.append("other")):  # no scope on this thread
            ready.set()
            done.wait(5)

    t = threading.Thread(target=other_thread)
    t.start()
    ready.wait(5)
    with live.scope() as s:
        with pytest.raises(live.RunsEnded), live.tracked(lambda: ended.append("mine")):
            s.end()
    done.set()
    t.join(5)
    assert ended == ["mine"]


def test_a_run_leaving_while_an_end_is_under_way_waits_for_it():
    """The run's cleanup (reaping, removing its cgroup) must not start while its end still signals its pids."""
    registered, in_end, release = threading.Event(), threading.Event(), threading.Event()
    order = []

    def slow_end():
        in_end.set()
        release.wait(5)
        order.append("end done")

    s = live.Scope()

    def serve():
        with live.scope(s):
            try:
                with live.tracked(slow_end):
                    registered.set()
                    in_end.wait(5)
            except live.RunsEnded:
                order.append("run left")

    t = threading.Thread(target=serve)
    t.start()
    registered.wait(5)
    ender = threading.Thread(target=s.end)
    ender.start()
    in_end.wait(5)
    release.set()
    t.join(5)
    ender.join(5)
    assert order == ["end done", "run left"]
