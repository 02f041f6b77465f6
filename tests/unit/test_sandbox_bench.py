"""bench/sandbox.py's pairing: both checkouts measured the same way."""

from __future__ import annotations

import pytest

from bench import sandbox as sandbox_bench


def _figures(p50_ms: float) -> dict:
    return {"python": {"sandbox": {"p50_ms": p50_ms}, "bare": {"p50_ms": 1.0}},
            "true": {"sandbox": {}}, "call": {"sandbox_call": {"p50_ms": p50_ms}}}


def test_both_sides_of_a_pair_measure_the_overhead_in_a_fresh_process_of_their_own_checkout(monkeypatch, tmp_path):
    measured = []

    def overhead_of(checkout, runs):
        measured.append(checkout)
        return _figures(2.0 if checkout == tmp_path else 3.0)

    monkeypatch.setattr(sandbox_bench, "overhead_of", overhead_of)
    monkeypatch.setattr(sandbox_bench, "overhead", lambda runs: pytest.fail("measured in the bench's own process"))
    report = sandbox_bench.paired(tmp_path, rounds=2, runs=5, workers=2, redis_url="", farm=False)
    assert measured == [sandbox_bench.ROOT, tmp_path, tmp_path, sandbox_bench.ROOT]  # each side first in turn
    assert report["this_over_baseline"]["call_p50_ms"] == 1.5


def test_each_batch_through_a_rounds_farm_is_a_sample_of_its_own(monkeypatch, tmp_path):
    monkeypatch.setattr(sandbox_bench, "overhead_of", lambda checkout, runs: _figures(2.0))
    asked = []

    def through_farm(workers, redis_url, root, batches):
        asked.append(batches)
        rates = [30.0, 31.0, 50.0] if root == tmp_path else [40.0, 41.0, 60.0]
        return {"requests_per_s": rates[1], "batches_requests_per_s": rates, "all_scored_one": True}

    monkeypatch.setattr(sandbox_bench, "through_farm", through_farm)
    report = sandbox_bench.paired(tmp_path, rounds=2, runs=5, workers=2, redis_url="", farm=True, batches=3)
    assert asked == [3, 3, 3, 3]
    assert report["samples"]["this"]["humaneval_requests_per_s"] == [40.0, 41.0, 60.0] * 2
    assert report["median"]["baseline"]["humaneval_requests_per_s"] == 31.0
