"""Start-up distributions: what `farm eval --startup-s` takes, what the policy plans with, what status shows."""

from __future__ import annotations

import math
import random

import pytest

from planner.eval.startup import Startup, parse_startup
from planner.policy.startup import PLAN_QUANTILE, StartupStats, summarise


@pytest.mark.parametrize("spec, seconds", [("0", 0.0), ("30", 30.0), ("2.5", 2.5), ("paper", 0.0), ("realistic", 30.0)])
def test_a_number_or_a_preset_is_a_fixed_start_up(spec, seconds):
    s = parse_startup(spec)
    assert s.kind == "fixed" and s.draw(random.Random(1)) == seconds and s.plan_s == seconds


def test_a_lognormal_start_up_is_planned_with_its_ninetieth_percentile():
    s = parse_startup("lognormal:30,0.5")
    assert s.quantile(0.5) == pytest.approx(30.0)
    assert s.plan_s == pytest.approx(30.0 * math.exp(0.5 * 1.2815515655446004))
    assert PLAN_QUANTILE == 0.9


def test_lognormal_draws_are_reproducible_per_seed_and_jitter_around_the_median():
    s = parse_startup("lognormal:30,0.5")
    a = [s.draw(random.Random(7)) for _ in range(3)]
    b = [s.draw(random.Random(7)) for _ in range(3)]
    assert a == b
    draws = sorted(s.draw(r) for r in [random.Random(0)] for _ in range(4001))
    assert draws[2000] == pytest.approx(30.0, rel=0.05)
    assert len(set(round(x, 6) for x in draws)) > 3900


def test_start_up_samples_come_from_a_file(tmp_path):
    f = tmp_path / "startups.txt"
    f.write_text("10, 12\n14\n\n40 11\n")
    s = parse_startup(f"file:{f}")
    assert s.kind == "samples" and sorted(s.samples) == [10.0, 11.0, 12.0, 14.0, 40.0]
    assert s.draw(random.Random(3)) in s.samples
    assert s.quantile(0.5) == 12.0 and s.plan_s > 14.0


@pytest.mark.parametrize("spec, words", [
    ("soon", "lognormal:MEDIAN,SIGMA"), ("-1", "-1"), ("lognormal:30", "lognormal:MEDIAN,SIGMA"),
    ("lognormal:x,0.5", "'x'"), ("lognormal:0,0.5", "median > 0"), ("nan", "nan"), ("inf", "inf"),
    ("file:/nonexistent/startups", "cannot read"),
])
def test_a_start_up_that_makes_no_sense_is_refused_saying_why(spec, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(".", r"\.")):
        parse_startup(spec)


def test_a_file_with_something_other_than_seconds_is_refused(tmp_path):
    f = tmp_path / "s.txt"
    f.write_text("10 twelve")
    with pytest.raises(ValueError, match="'twelve'"):
        parse_startup(f"file:{f}")


def test_observed_start_ups_are_summarised_per_backend_and_stage():
    rows = [("docker", "cuda.execute", x) for x in (20.0, 25.0, 30.0, 35.0, 60.0)]
    rows += [("docker", "cuda.compile", 4.0), (None, "cuda.compile", 1.0), ("docker", "cuda.compile", float("nan"))]
    stats = {(s.backend, s.stage): s for s in summarise(rows)}
    assert set(stats) == {("docker", "cuda.execute"), ("docker", "cuda.compile"), ("unknown", "cuda.compile")}
    ex = stats[("docker", "cuda.execute")]
    assert (ex.count, ex.median_s, ex.max_s) == (5, 30.0, 60.0)
    assert 35.0 < ex.plan_s < 60.0


def test_statistics_need_at_least_one_sample():
    with pytest.raises(ValueError):
        StartupStats.of("local", "x.y", [])
    with pytest.raises(ValueError):
        Startup("samples")
