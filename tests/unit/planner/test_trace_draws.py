"""The generalisation bench's workloads (planner/eval/draws.py): drawn per seed, within the stated ranges."""

from __future__ import annotations

import math

import pytest

from planner.eval.draws import MIN_BATCH, RANGES, draw, draw_one
from planner.eval.tracegen import MODES, generate

DRAWS = draw(20261127, 60, batches=4, requests=3000)


def within(name: str, value: float) -> bool:
    lo, hi = RANGES[name]
    return lo - 1e-9 <= value <= hi + 1e-9


def test_the_same_seed_draws_the_same_workloads_and_another_seed_others():
    assert draw(5, 4) == draw(5, 4)
    assert draw(5, 4) != draw(6, 4)


def test_a_longer_list_of_draws_begins_with_the_shorter_one():
    assert draw(5, 6)[:3] == draw(5, 3)


def test_every_drawn_parameter_lies_in_its_range():
    for d in DRAWS:
        p = d.params
        assert within("tasks", p.tasks) and within("batch_size", d.nominal_batch_size)
        for name in ("task_start_window_s", "first_arrival_s", "arrival_median_s", "arrival_sigma",
                     "arrival_drift_sigma", "group_correlation", "train_s", "disaggregated_gap_s",
                     "compile_median_s", "compile_sigma", "execute_median_s", "execute_sigma"):
            assert within(name, getattr(p, name)), (name, getattr(p, name))
        assert within("group_size", p.group_size) and math.log2(p.group_size).is_integer()
        assert within("compile_timeout_over_median", p.compile_timeout_s / p.compile_median_s)
        assert within("execute_timeout_over_median", p.execute_timeout_s / p.execute_median_s)
        assert within("jitter_sigma", d.jitter_sigma)
        assert p.mode in MODES and p.max_rollout_s > p.first_arrival_s


def test_a_batch_size_is_cut_to_the_request_budget_but_never_below_the_floor():
    for d in DRAWS:
        p = d.params
        assert MIN_BATCH <= p.batch_size <= d.nominal_batch_size
        assert p.batch_size == max(MIN_BATCH, min(d.nominal_batch_size, 3000 // (p.tasks * p.batches)))


def test_the_draws_span_both_modes_grouped_and_ungrouped_batches_and_a_wide_spread_of_sizes():
    assert {d.params.mode for d in DRAWS} == set(MODES)
    assert {d.params.group_size == 1 for d in DRAWS} == {True, False}
    tasks = [d.params.tasks for d in DRAWS]
    sizes = [d.nominal_batch_size for d in DRAWS]
    assert min(tasks) <= 3 and max(tasks) >= 10
    assert min(sizes) < 256 and max(sizes) > 1024


@pytest.mark.parametrize("index", [0, 1, 2])
def test_a_draw_generates_a_trace_of_its_tasks_and_batches(index):
    d = draw_one(3, index, batches=2, requests=200)
    trace = generate(d.params, d.seed)
    assert len(trace.tasks) == d.params.tasks
    assert {b.size for b in trace.batches} == {d.params.batch_size}
