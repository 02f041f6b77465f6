"""`farm trace generate` and `farm trace show` through click's CliRunner."""

from __future__ import annotations

import json
import re
import shlex

import pytest
from click.testing import CliRunner

from farm.app.cli import main
from planner.eval import trace as tracefile
from planner.eval import tracegen


def run(*args):
    return CliRunner().invoke(main, ["trace", *args])


def test_generate_writes_a_trace_of_the_requested_shape(tmp_path):
    out = tmp_path / "t.jsonl"
    result = run("generate", "--mode", "disaggregated", "--tasks", "3", "--batches", "2", "--batch-size", "40",
                 "--seed", "7", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert "3 tasks, 6 batches, 240 requests" in result.output
    trace = tracefile.read(out)
    assert trace.tasks == ("cuda-0", "cuda-1", "cuda-2")
    assert {b.size for b in trace.batches} == {40}


def test_generate_with_the_same_seed_writes_the_same_bytes(tmp_path):
    for name in ("a.jsonl.gz", "b.jsonl.gz"):
        assert run("generate", "--batches", "2", "--batch-size", "30", "--seed", "4", "-o",
                   str(tmp_path / name)).exit_code == 0
    assert (tmp_path / "a.jsonl.gz").read_bytes() == (tmp_path / "b.jsonl.gz").read_bytes()


def documented_commands():
    """The regeneration commands of planner/tracegen.py's docstring: (arguments, bundled file)."""
    text = tracegen.__doc__.replace("\\\n", " ")
    commands = re.findall(r"farm trace (generate .*?) -o (\S+)", text)
    assert len(commands) == len(tracefile.BUNDLED)
    return [pytest.param(args, target, id=target.rsplit("/", 1)[-1]) for args, target in commands]


@pytest.mark.parametrize("args, target", documented_commands())
def test_the_documented_commands_regenerate_the_bundled_traces_byte_identically(tmp_path, args, target):
    out = tmp_path / "regenerated.jsonl.gz"
    assert run(*shlex.split(args), "-o", str(out)).exit_code == 0
    bundled = tracefile.bundled(target.rsplit("/", 1)[1].split(".")[0])
    assert bundled.name == target.rsplit("/", 1)[1]
    assert out.read_bytes() == bundled.read_bytes()


def test_generate_rejects_a_zero_batch_size_as_a_usage_error(tmp_path):
    result = run("generate", "--batch-size", "0", "-o", str(tmp_path / "t.jsonl"))
    assert result.exit_code == 2
    assert "--batch-size" in result.output


def test_generate_into_a_missing_directory_fails_cleanly(tmp_path):
    result = run("generate", "--batches", "1", "--batch-size", "5", "-o", str(tmp_path / "no" / "t.jsonl"))
    assert result.exit_code == 1
    assert "Error:" in result.output and "Traceback" not in result.output


def test_show_prints_stages_requests_timeouts_and_the_outcome_mix():
    result = run("show", "demo")
    assert result.exit_code == 0, result.output
    for text in ("tasks      2", "requests   480", "compile", "execute", "at timeout", "no-arrival",
                 "outcomes (first batches)", "generation failed"):
        assert text in result.output


def test_show_json_is_one_object_with_the_summary(tmp_path):
    tracefile.write(tmp_path / "t.jsonl", tracefile.read(tracefile.bundled("demo")))
    result = run("show", str(tmp_path / "t.jsonl"), "--json")
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    assert info["requests"] == 480 and info["batches"] == 10
    assert [s["name"] for s in info["stages"]] == ["compile", "execute"]
    assert set(info["stages"][0]) >= {"mean_s", "p95_s", "timeout_fraction", "visited"}
    assert 0 <= info["arrival_gap_fraction"] <= 1
    assert abs(sum(info["outcomes"]["all"].values()) - 1) < 1e-9


def test_show_a_malformed_trace_names_the_line_without_a_traceback(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"format": "reward-trace/1", "stages": [{"name": "verify", "resource": "cpu", '
                    '"cost": 1, "timeout_s": 10}]}\n{"task": "m", "batch": 0, "start_s": 0, "requests": [[1, 11]]}\n')
    result = run("show", str(path))
    assert result.exit_code == 1
    assert f"{path}:2:" in result.output and "exceeds its timeout" in result.output
    assert "Traceback" not in result.output


def test_show_a_missing_file_is_a_clear_error(tmp_path):
    result = run("show", str(tmp_path / "missing.jsonl"))
    assert result.exit_code == 1
    assert "cannot open" in result.output and "bundled traces: cuda-colocated" in result.output
