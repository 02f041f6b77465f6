"""bench/judge_path.py: the functions it marks exist, its steps are the gaps between marks, and it puts them back."""

from __future__ import annotations

import threading

from bench import judge_path

_resolve = judge_path.owner_of


def test_every_function_the_bench_marks_exists():
    for module, attribute, _ in judge_path.MARKED:
        owner, name = _resolve(module, attribute)
        assert callable(getattr(owner, name)), f"{module}.{attribute}"


def test_the_steps_are_the_gaps_between_consecutive_marks_in_ms():
    marks = [("start", 0.0), ("launch>", 0.002), ("launch<", 0.008), ("done", 0.010)]
    assert judge_path.steps(marks) == {"start -> launch>": 2.0, "launch> -> launch<": 6.0, "launch< -> done": 2.0}


def test_the_bench_marks_the_functions_while_it_runs_and_puts_them_back():
    originals = [getattr(*_resolve(module, attribute)) for module, attribute, _ in judge_path.MARKED]
    marks: list = []
    undo = judge_path.install(marks)
    try:
        assert all(getattr(*_resolve(m, a)) is not o for (m, a, _), o in zip(judge_path.MARKED, originals))
    finally:
        undo()
    assert all(getattr(*_resolve(m, a)) is o for (m, a, _), o in zip(judge_path.MARKED, originals))


def test_every_step_it_reports_is_between_marks_it_sets():
    marks = {"start", "done"} | {f"{mark}{edge}" for _, _, mark in judge_path.MARKED for edge in "<>"}
    for key in judge_path.STEPS:
        first, _, second = key.partition(" -> ")
        assert first in marks and second in marks, key


def test_a_mark_set_on_another_thread_is_off_the_judgements_path():
    marks: list = []
    marked = judge_path._marking(marks, lambda: None, "launch")
    elsewhere = threading.Thread(target=marked)  # a warm sandbox's launch, on the warmer's thread
    elsewhere.start()
    elsewhere.join()
    assert marks == []
    marked()
    assert [mark for mark, _ in marks] == ["launch>", "launch<"]
