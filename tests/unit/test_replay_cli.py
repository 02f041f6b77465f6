"""`farm replay`, `farm planner` and `farm demo` refuse bad input with a clear message (no services needed)."""

from __future__ import annotations

from click.testing import CliRunner

from farm.app.cli.demo import demo
from farm.app.cli.planner import planner
from farm.app.cli.replay import replay

FARM = {"FARM_REDIS_URL": "redis://127.0.0.1:1/0"}  # never reached: the input is refused first


def test_replay_names_a_missing_trace_file(tmp_path):
    result = CliRunner().invoke(replay, [str(tmp_path / "nope.jsonl")], env=FARM)
    assert result.exit_code != 0
    assert "nope.jsonl" in result.output and "cannot open" in result.output


def test_replay_names_an_unknown_task_and_the_known_ones():
    result = CliRunner().invoke(replay, ["demo", "--tasks", "cuda-9"], env=FARM)
    assert result.exit_code != 0
    assert "no task 'cuda-9'" in result.output and "cuda-0" in result.output


def test_replay_refuses_a_speed_that_is_not_positive():
    result = CliRunner().invoke(replay, ["demo", "--speed", "0"], env=FARM)
    assert result.exit_code == 2 and "--speed" in result.output


def test_replay_refuses_a_share_or_a_tenant_cap_it_cannot_read_and_says_which():
    result = CliRunner().invoke(replay, ["demo", "--share", "t1=many"], env=FARM)
    assert result.exit_code != 0 and "--share: expected TENANT=WEIGHT" in result.output
    result = CliRunner().invoke(replay, ["demo", "--tenant-max-workers", "t1:tpu=2"], env=FARM)
    assert result.exit_code != 0 and "unknown resource kind 'tpu'" in result.output


def test_replay_without_a_farm_says_how_to_start_one(tmp_path):
    result = CliRunner().invoke(replay, ["demo"], env={"FARM_REDIS_URL": "", "FARM_DATA_DIR": str(tmp_path)})
    assert result.exit_code != 0 and "farm up" in result.output


def test_planner_refuses_docker_options_with_the_local_backend():
    result = CliRunner().invoke(planner, ["--backend", "local", "--image", "x"])
    assert result.exit_code == 2 and "docker backend" in result.output


def test_demo_refuses_a_pool_bound_below_one():
    result = CliRunner().invoke(demo, ["--max-workers", "0"])
    assert result.exit_code == 2 and "--max-workers" in result.output
