"""Trace summary statistics (planner/tracestats.py) on hand-made traces."""

from __future__ import annotations

import numpy as np
import pytest

from planner.eval import tracestats
from planner.eval.trace import Trace, TraceBatch, TraceStage

STAGES = (TraceStage("compile", "cpu", 1.0, 120.0), TraceStage("execute", "gpu", 8.0, 60.0))


def two_batches() -> Trace:
    # Batch 0 arrivals at 10 s and 12 s, batch 1 (starting at 40 s) at 45 s and 49 s.
    return Trace(STAGES, (
        TraceBatch("t", 0, 0.0, np.array([[10.0, 0.0, 0.0], [12.0, 120.0, 0.0]]), outcomes="gc"),
        TraceBatch("t", 1, 40.0, np.array([[5.0, 50.0, 60.0], [9.0, 40.0, 2.0]]), outcomes="es"),
    ))


def test_the_arrival_gap_fraction_counts_bins_without_an_arrival():
    # 5 s bins over [0, 49]: 10 bins; arrivals 10, 12 fall in bin 2 and 45, 49 in bin 9 -> 8 empty.
    assert tracestats.arrival_gap_fraction(two_batches(), "t") == pytest.approx(0.8)
    assert tracestats.arrival_gap_fraction(two_batches(), "t", bin_s=50.0) == 0.0


def test_the_longest_idle_gap_spans_batches():
    assert tracestats.longest_idle_gap(two_batches(), "t") == pytest.approx(33.0)


def test_batch_durations_are_the_earliest_completion_T_from_the_start():
    assert tracestats.batch_durations(two_batches()).tolist() == [132.0, 115.0]


def test_the_last_stage_shares_work_without_outcome_codes():
    assert tracestats.last_stage_shares(two_batches()) == {"none": 0.25, "compile": 0.25, "execute": 0.5}


def test_the_summary_reports_per_stage_times_and_timeouts():
    info = tracestats.summary(two_batches())
    compile_, execute = info["stages"]
    assert compile_["visited"] == 3 and compile_["mean_s"] == pytest.approx(70.0)
    assert compile_["timeout_fraction"] == pytest.approx(1 / 3)
    assert execute["timeout_fraction"] == pytest.approx(0.5)
    assert execute["busy_s"] == pytest.approx(62.0)
    assert info["outcomes"]["first_batches"] == {
        "generation failed": 0.5, "compile failed": 0.5, "execute error": 0.0, "success": 0.0}


def test_the_summary_leaves_out_outcomes_when_a_batch_has_none():
    trace = Trace(STAGES, (TraceBatch("t", 0, 0.0, np.array([[1.0, 2.0, 3.0]])),))
    assert "outcomes" not in tracestats.summary(trace)
