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


def test_demo_refuses_shares_without_tenants_to_hold_them():
    result = CliRunner().invoke(demo, ["--share", "t1=3"])
    assert result.exit_code == 2 and "--tenants" in result.output


def test_demo_refuses_a_share_for_a_tenant_its_split_lacks_before_a_farm_starts(tmp_path):
    result = CliRunner().invoke(demo, ["--tenants", "2", "--share", "t9=3", "--data-dir", str(tmp_path / "farm")])
    assert result.exit_code == 2 and "'t9'" in result.output
    assert not (tmp_path / "farm").exists()


def test_demo_refuses_more_tenants_than_trainers():
    result = CliRunner().invoke(demo, ["--tenants", "5"])
    assert result.exit_code == 2 and "--tenants must be 1 to the 2 tasks" in result.output


def test_demo_refuses_a_malformed_share():
    result = CliRunner().invoke(demo, ["--tenants", "2", "--share", "t1=many"])
    assert result.exit_code == 2 and "t1=many" in result.output


def test_the_replay_report_gives_each_tenants_extra_delay_beside_the_prediction(capsys):
    from farm.app.cli.replay import print_report

    def figures(t1, t2):
        return {"speed": 20.0, "batches": 10, "requests": 480, "extra_delay_mean_s": 90.0, "extra_delay_p95_s": 140.0,
                "extra_delay_max_s": 150.0, "stages": {}, "resources": {}, "planner_runtime_mean_s": 0.01,
                "planner_runtime_max_s": 0.02,
                "tenants": {"t1": {"batches": 5, "extra_delay_mean_s": t1, "extra_delay_max_s": t1 + 10},
                            "t2": {"batches": 5, "extra_delay_mean_s": t2, "extra_delay_max_s": t2 + 10}}}

    print_report({"measured": figures(59.0, 131.5), "predicted": figures(50.2, 128.5),
                  "results": {"received": 480, "expected": 480, "lost": 0, "duplicated": 0, "statuses": {}}})
    out = capsys.readouterr().out
    t1 = next(line for line in out.splitlines() if "tenant t1" in line)
    assert "59.00 / 69.00" in t1 and "50.20 / 60.20" in t1
    assert any("tenant t2" in line and "131.50" in line for line in out.splitlines())
