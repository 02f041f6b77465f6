"""The generalisation report (planner/eval/generalize.py and bench/generalize.py): figures per case and per
start-up, and the verdict on issue 33's targets."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from farm.knobs import Knobs, StageKnobs
from planner.eval.draws import Draw
from planner.eval.generalize import POLICIES, TARGETS, cases, replay, report, startup_of, table
from planner.eval.loop import evaluate
from planner.eval.tracegen import GeneratorParams, generate

ROOT = Path(__file__).resolve().parents[3]
TINY = [Draw(i, 11 + i, GeneratorParams(tasks=1 + i, batches=2, batch_size=16, time_scale=0.05), 16, 0.3)
        for i in range(2)]


@pytest.fixture(scope="module")
def tiny_report():
    rows = [replay(c) for c in cases(TINY, startups=(0.0, 1.0))]
    return rows, report(rows)


def row(trace, startup, policy, gpu, mean_d=0.5, p95_d=1.0):
    return {"trace": trace, "startup_s": startup, "policy": policy, "delay_s": 2.0, "gpu_s": gpu, "cpu_s": 10.0,
            "mean_d": mean_d, "p95_d": p95_d, "max_d": p95_d, "warm_mean_d": mean_d}


def rows_of(gpu_ratios, mean_d=0.5, p95_d=1.0, startup=30.0):
    out = []
    for t, ratio in enumerate(gpu_ratios):
        out += [row(t, startup, "distrs", 100.0 * ratio, mean_d, p95_d), row(t, startup, "ideal", 100.0),
                row(t, startup, "zq-dedicated", 400.0)]
    return out


def test_every_trace_is_replayed_by_each_policy_at_each_startup(tiny_report):
    rows, rep = tiny_report
    assert sorted((r["trace"], r["startup_s"], r["policy"]) for r in rows) == sorted(
        (t, s, p) for t in (0, 1) for s in (0.0, 1.0) for p in POLICIES)
    assert [(c["trace"], c["startup_s"]) for c in rep["cases"]] == [(0, 0.0), (0, 1.0), (1, 0.0), (1, 1.0)]


def test_a_cases_figures_are_distrs_over_ideal_and_zero_queueing_over_distrs(tiny_report):
    rows, rep = tiny_report
    by = {r["policy"]: r for r in rows if (r["trace"], r["startup_s"]) == (1, 1.0)}
    case = rep["cases"][3]
    assert case["gpu"] == pytest.approx(by["distrs"]["gpu_s"] / by["ideal"]["gpu_s"])
    assert case["cpu"] == pytest.approx(by["distrs"]["cpu_s"] / by["ideal"]["cpu_s"])
    assert case["zq"] == pytest.approx(by["zq-dedicated"]["gpu_s"] / by["distrs"]["gpu_s"])
    assert case["p95_d"] == pytest.approx(by["distrs"]["p95_d"] / 2.0)


def test_the_warm_mean_leaves_out_each_tasks_first_batch(tiny_report):
    rows, _ = tiny_report
    d = TINY[1]
    knobs = Knobs(policy="distrs", stages={"trace.compile": StageKnobs(max_workers=1_000_000),
                                           "trace.execute": StageKnobs(max_workers=1_000_000)})
    result = evaluate(generate(d.params, d.seed), knobs, startup=startup_of(d, 1.0), seed=d.seed)
    second = [x for x, b in zip(result.extra_delay, result.batch_ids) if b.endswith("/1")]
    got = next(r for r in rows if (r["trace"], r["startup_s"], r["policy"]) == (1, 1.0, "distrs"))
    assert len(second) == 2 and got["warm_mean_d"] == pytest.approx(sum(second) / 2)


def test_the_table_shows_each_case_and_each_startups_median_worst_and_verdict(tiny_report):
    _, rep = tiny_report
    text = table(rep, TINY)
    assert len([line for line in text.splitlines() if "targets:" in line]) == 2
    assert text.count(" median ") == 2 and text.count(" worst ") == 2
    assert "1x2x16" in text and "2x2x16" in text


def test_the_worst_gpu_ratio_over_its_bound_misses_though_the_median_meets_its_own():
    rep = report(rows_of([1.0, 1.0, TARGETS["gpu_worst"] + 0.01]))
    met = rep["by_startup"][30.0]["met"]
    assert met["gpu_median"] and not met["gpu_worst"] and not rep["all_met"]
    assert rep["cases"][2]["misses"] == ["gpu"]


def test_a_median_over_its_bound_misses_though_every_case_is_under_the_worst_bound():
    met = report(rows_of([1.2, 1.2, 1.0]))["by_startup"][30.0]["met"]
    assert met["gpu_worst"] and not met["gpu_median"]


def test_one_case_over_d_on_average_or_over_one_and_a_half_d_at_p95_misses_the_delay_targets():
    assert not report(rows_of([1.0], mean_d=2.1))["by_startup"][30.0]["met"]["mean_d"]
    assert not report(rows_of([1.0], p95_d=3.1))["by_startup"][30.0]["met"]["p95_d"]
    assert report(rows_of([1.0], mean_d=2.0, p95_d=3.0))["all_met"]


def test_the_zero_queueing_figures_worst_is_its_smallest():
    rows = rows_of([1.0, 2.0])
    assert report(rows)["by_startup"][30.0]["zq"] == {"median": pytest.approx(3.0), "worst": pytest.approx(2.0)}


def test_the_bench_prints_its_new_seed_and_how_to_rerun_it():
    out = subprocess.run([sys.executable, "bench/generalize.py", "--traces", "1", "--requests", "8", "--batches", "2",
                          "--startups", "0", "--jobs", "1"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         check=True).stdout
    seed = out.split()[1].rstrip(":")
    assert f"--seed {seed} --traces 1" in out and "all targets met" in out


def test_the_verdict_counts_the_cases_where_ideal_itself_is_late_on_average():
    rows = rows_of([1.0, 1.0])
    rows[1]["mean_d"] = 2.5  # trace 0's ideal, over D = 2 s
    assert report(rows)["by_startup"][30.0]["ideal_over_d"] == 1
