"""The warmer (workers.sandbox.warm.Warmer) with stand-ins for the sandboxes it parks: one parked at most, of the
shape last asked for, made on its own thread, ended when a run of another shape comes. The real warm sandbox:
tests/unit/test_sandbox_warm.py."""

from __future__ import annotations

import threading

import pytest

from workers.sandbox import warm
from workers.sandbox.limits import Limits

A = warm.Shape("/usr/bin/python3", Limits(), (), "root", False)
B = warm.Shape("/usr/bin/python3", Limits(wall_s=3.0), (), "root", False)


class Fake:
    def __init__(self, shape: warm.Shape) -> None:
        self.shape, self.ended, self.dead = shape, 0, False

    def alive(self) -> bool:
        return not self.dead

    def end(self) -> None:
        self.ended += 1


@pytest.fixture
def made():
    return []


@pytest.fixture
def make(made):
    def make(shape):
        made.append(Fake(shape))
        return made[-1]
    return make


def test_nothing_is_parked_before_a_run_asks_for_it():
    assert warm.Warmer().take(A) is None


def test_a_run_takes_the_sandbox_parked_for_its_shape(make, made):
    w = warm.Warmer()
    w.want(A, make)
    assert w.settle(5)
    assert w.parked() == A
    assert w.take(A) is made[0]
    assert w.parked() is None  # it serves one run only


def test_a_run_of_another_shape_ends_the_parked_sandbox_and_starts_cold(make, made):
    w = warm.Warmer()
    w.want(A, make)
    w.settle(5)
    assert w.take(B) is None
    assert made[0].ended == 1


def test_a_parked_sandbox_that_died_is_ended_not_taken(make, made):
    w = warm.Warmer()
    w.want(A, make)
    w.settle(5)
    made[0].dead = True
    assert w.take(A) is None
    assert made[0].ended == 1


def test_asking_for_another_shape_replaces_the_parked_one(make, made):
    w = warm.Warmer()
    w.want(A, make)
    w.settle(5)
    w.want(B, make)
    w.settle(5)
    assert w.parked() == B and made[0].ended == 1


def test_a_run_waits_for_the_sandbox_of_its_shape_being_made():
    gate, made = threading.Event(), []

    def slow(shape):
        gate.wait(5)
        made.append(Fake(shape))
        return made[-1]

    w = warm.Warmer()
    w.want(A, slow)
    got = []
    taker = threading.Thread(target=lambda: got.append(w.take(A)))
    taker.start()
    taker.join(0.2)
    assert taker.is_alive()
    gate.set()
    taker.join(5)
    assert got == made


def test_a_sandbox_that_cannot_be_made_leaves_the_next_run_cold(caplog):
    def broken(shape):
        raise OSError("no bubblewrap")

    w = warm.Warmer()
    w.want(A, broken)
    assert w.settle(5)
    assert w.take(A) is None
    assert "could not start a warm sandbox" in caplog.text


def test_closing_ends_the_parked_sandbox_and_parks_no_more(make, made):
    w = warm.Warmer()
    w.want(A, make)
    w.settle(5)
    w.close()
    assert made[0].ended == 1
    w.want(A, make)
    w.settle(5)
    assert w.parked() is None and len(made) == 1


def test_turned_off_nothing_is_parked(make, made, monkeypatch):
    monkeypatch.setenv(warm.ENV, "0")
    w = warm.Warmer()
    w.want(A, make)
    w.settle(5)
    assert made == [] and w.parked() is None


def test_a_forks_child_has_no_parked_sandbox_and_leaves_the_parents_alone(make, made):
    w = warm.Warmer()
    w.want(A, make)
    w.settle(5)
    w._forked()  # what the fork hook runs in the child
    assert made[0].ended == 0
    assert w.parked() is None


@pytest.mark.parametrize("argv, fds, warmable", [
    (["/usr/bin/python3", "-I", "-S", "candidate.py", "5", "6"], (5, 6), True),
    (["/usr/bin/python3", "-I", "candidate.py"], (), False),  # other flags: cold
    (["/usr/bin/python3", "-I", "-S", "-c", "pass"], (), False),  # not a script
    (["./main"], (), False),
    (["/usr/bin/python3"], (), False),
    (["/usr/bin/python3", "-I", "-S", "candidate.py"], (250,), False),  # a descriptor the stub cannot place
])
def test_only_a_contained_python_scripts_run_has_a_shape(argv, fds, warmable):
    assert (warm.shape_of(argv, Limits(), {}, "root", "/usr/bin/python3", fds) is not None) == warmable


def test_an_uncontained_run_has_no_shape():
    python = "/usr/bin/python3"
    assert warm.shape_of([python, "-I", "-S", "x.py"], Limits(), {}, "uncontained", python) is None


def test_another_interpreter_has_no_shape():
    assert warm.shape_of(["/usr/bin/node", "-I", "-S", "x.js"], Limits(), {}, "root", "/usr/bin/python3") is None


def test_a_sandbox_is_made_for_the_most_cpu_a_run_of_its_shape_has_had(make, made):
    w = warm.Warmer()
    w.want(warm.Shape("/usr/bin/python3", Limits(), (), "root", False, cpu=10), make)
    w.settle(5)
    w.take(A)
    w.want(warm.Shape("/usr/bin/python3", Limits(), (), "root", False, cpu=2), make)  # a case late in its budget
    w.settle(5)
    assert made[-1].shape.cpu == 10


def test_shapes_differ_by_what_the_sandbox_is_built_with_not_by_the_runs_time_limit():
    python, argv = "/usr/bin/python3", ["/usr/bin/python3", "-I", "-S", "x.py"]
    short = warm.shape_of(argv, Limits(wall_s=1), {}, "root", python)
    long = warm.shape_of(argv, Limits(wall_s=9), {}, "root", python)
    assert short == long and (short.cpu, long.cpu) == (1, 9)
    assert warm.shape_of(argv, Limits(memory_bytes=1 << 20), {}, "root", python) != short
