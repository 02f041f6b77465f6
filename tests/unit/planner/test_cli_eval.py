"""`farm eval`: a thin command over the replay, tested through click's runner."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from farm.app.cli import main
from planner.eval import trace as tr


@pytest.fixture
def trace_file(tmp_path):
    stages = (tr.TraceStage("compile", "cpu", 1.0, 12.0), tr.TraceStage("execute", "gpu", 8.0, 6.0),
              tr.TraceStage("report", "io", 0.5, 3.0))
    rng = np.random.default_rng(3)
    batches = []
    for task in ("a", "b"):
        for k in range(3):
            n = 12
            req = np.column_stack([rng.uniform(0, 10, n), rng.uniform(1, 5, n), rng.uniform(0.2, 2, n), np.full(n, 0.5)])
            req[0, 1:] = 0.0  # generation failed: visits no stage
            batches.append(tr.TraceBatch(task, k, 40.0 * k + (5.0 if task == "b" else 0.0), req))
    path = tmp_path / "small.jsonl"
    tr.write(path, tr.Trace(stages=stages, batches=tuple(batches)))
    return path


def test_eval_prints_one_json_object_for_any_number_of_stages(trace_file):
    result = CliRunner().invoke(main, ["eval", str(trace_file), "--policy", "distrs", "--json", "--tick-s", "1"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["policy"] == "distrs" and out["scheduler"] == "ebf" and out["batches"] == 6 and out["requests"] == 72
    assert set(out["stages"]) == {"compile", "execute", "report"}
    assert set(out["resources"]) == {"cpu", "gpu", "io"}
    assert out["extra_delay_max_s"] >= out["extra_delay_mean_s"] >= 0


def test_eval_prints_a_readable_table(trace_file):
    result = CliRunner().invoke(main, ["eval", str(trace_file), "--policy", "static:4,2,1", "--scheduler", "fcfs"])
    assert result.exit_code == 0, result.output
    assert "extra delay" in result.output and "execute" in result.output and "fcfs" in result.output


def test_eval_takes_a_bundled_trace_by_name():
    result = CliRunner().invoke(main, ["eval", "demo", "--policy", "zq-dedicated", "--json", "--startup-s", "realistic"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["startup_s"] == 30.0


def test_eval_refuses_an_unknown_policy(trace_file):
    result = CliRunner().invoke(main, ["eval", str(trace_file), "--policy", "static:1,2"])
    assert result.exit_code != 0 and "3 stages" in result.output


def test_eval_names_the_line_of_a_malformed_trace(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "reward-trace/1", "stages": [{"name": "x", "resource": "cpu", "cost": 1, "timeout_s": 5}]}\nnot json\n')
    result = CliRunner().invoke(main, ["eval", str(bad)])
    assert result.exit_code != 0 and "bad.jsonl:2" in result.output


def test_compare_writes_the_table_and_the_figures(trace_file, tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main, ["eval", str(trace_file), "--compare", "--out", str(out), "--tick-s", "1", "--runtime-sizes", "500,1000",
               "--startup-sweep", "0,5"]
    )
    assert result.exit_code == 0, result.output
    for name in ("zq-dedicated", "history", "distrs", "ideal"):
        assert name in result.output
    figures = {p.name for p in out.glob("*.png")}
    assert figures == {"fig10ab_workers.png", "fig10c_extra_delay.png", "fig12_normalized.png",
                       "fig14a_ebf_fcfs.png", "fig15_runtime.png", "startup_sweep.png"}
    report = json.loads((out / "compare.json").read_text())
    assert [r["startup_s"] for r in report["startup_sweep"]] == [0.0, 5.0]
    assert all(r["zq_over_distrs"] > 0 for r in report["startup_sweep"])
    assert "start-up 5 s: zq-dedicated/distrs" in result.output
    assert report["ebf_vs_fcfs"]["stage"] == "execute"


def test_eval_takes_a_start_up_distribution(trace_file):
    result = CliRunner().invoke(main, ["eval", str(trace_file), "--startup-s", "lognormal:2,0.5", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["startup"] == "lognormal:2,0.5"


def test_eval_refuses_a_start_up_it_cannot_read_saying_what_it_takes(trace_file):
    result = CliRunner().invoke(main, ["eval", str(trace_file), "--startup-s", "lognormal:2"])
    assert result.exit_code != 0 and "lognormal:MEDIAN,SIGMA" in result.output
