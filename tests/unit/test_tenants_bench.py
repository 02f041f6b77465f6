"""bench/tenants.py's reading of where A's batches settle behind a flood (the first from which every one is within
1.5x of A's mean alone)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.tenants import settled_from  # noqa: E402


def test_batches_that_met_the_flood_are_counted_before_a_later_run_within_the_ratio():
    assert settled_from([0.8, 0.3, 0.002, 0.003, 0.001], alone_mean_s=0.004) == 2


def test_a_late_batch_after_good_ones_moves_the_settling_point_past_it():
    assert settled_from([0.002, 0.5, 0.002, 0.001], alone_mean_s=0.004) == 2


def test_no_batch_within_the_ratio_reads_none():
    assert settled_from([0.5, 0.4], alone_mean_s=0.004) is None


def test_every_batch_within_the_ratio_settles_from_the_first():
    assert settled_from([0.006, 0.001], alone_mean_s=0.004) == 0
