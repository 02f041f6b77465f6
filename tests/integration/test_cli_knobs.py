"""`farm knobs` against PostgreSQL and Redis: shows, sets with validation, persists, publishes live."""

from __future__ import annotations

import json

import pytest
import redis
from click.testing import CliRunner

from farm.app.cli import main
from farm.knobs import Knobs, from_json, redis_key
from farm.store import engine as store

pytestmark = pytest.mark.integration


@pytest.fixture
def env(postgres_url, redis_url, namespace):
    store.upgrade(postgres_url)
    return {"FARM_DATABASE_URL": postgres_url, "FARM_REDIS_URL": redis_url, "FARM_NAMESPACE": namespace}


def _farm(env, *args):
    return CliRunner().invoke(main, list(args), env=env)


def _live(redis_url, namespace):
    client = redis.Redis.from_url(redis_url)
    try:
        return from_json(client.get(redis_key(namespace)))
    finally:
        client.close()


def test_farm_knobs_shows_the_defaults_as_a_table(env):
    result = _farm(env, "knobs")
    assert result.exit_code == 0, result.output
    assert "delay_s (D)" in result.output and "ebf" in result.output


def test_farm_knobs_set_persists_and_publishes_the_knobs(env, redis_url, namespace):
    result = _farm(env, "knobs", "set", "delay_s=3", "scheduler=fcfs")
    assert result.exit_code == 0, result.output
    shown = json.loads(_farm(env, "knobs", "--json").output)
    assert (shown["delay_s"], shown["scheduler"]) == (3.0, "fcfs")
    assert (_live(redis_url, namespace).delay_s, _live(redis_url, namespace).scheduler) == (3.0, "fcfs")


def test_farm_knobs_set_for_a_stage_changes_only_that_stage(env, redis_url, namespace):
    result = _farm(env, "knobs", "set", "--stage", "synthetic.execute", "timeout_s=30", "max_workers=8")
    assert result.exit_code == 0, result.output
    assert "synthetic.execute" in result.output
    live = _live(redis_url, namespace)
    assert (live.stage("synthetic.execute").timeout_s, live.stage("synthetic.execute").max_workers) == (30.0, 8)
    assert live.stage("synthetic.compile").timeout_s is None
    assert live.delay_s == 2.0


def test_an_unknown_stage_queue_is_refused_naming_the_known_ones(env):
    result = _farm(env, "knobs", "set", "--stage", "synthetic.link", "timeout_s=30")
    assert result.exit_code == 2
    assert "unknown stage queue 'synthetic.link'" in result.output
    assert "synthetic.compile, synthetic.execute" in result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["delay_s=soon"], "delay_s must be a number, not 'soon'"),
        (["delay_s=-1"], "delay_s must be >= 0"),
        (["scheduler=lifo"], "scheduler must be one of ('ebf', 'fcfs')"),
        (["speed=3"], "unknown knob 'speed'; known: delay_s, scheduler, policy, tick_s, abandon_after_s"),
        (["delay_s"], "expected NAME=VALUE, not 'delay_s'"),
        (["--stage", "synthetic.compile", "min_workers=9", "max_workers=4"], "min_workers (9) exceeds max_workers (4)"),
        (["--stage", "synthetic.compile", "max_workers=2.5"], "max_workers must be a whole number, not '2.5'"),
    ],
)
def test_a_bad_knob_is_refused_with_a_message_and_nothing_is_saved(env, redis_url, namespace, args, message):
    result = _farm(env, "knobs", "set", *args)
    assert result.exit_code == 2
    assert message in result.output
    assert json.loads(_farm(env, "knobs", "--json").output) == Knobs().to_dict()


def test_farm_knobs_reset_drops_one_stage_or_everything(env, redis_url, namespace):
    _farm(env, "knobs", "set", "delay_s=4")
    _farm(env, "knobs", "set", "--stage", "synthetic.compile", "max_workers=3")
    result = _farm(env, "knobs", "reset", "--stage", "synthetic.compile", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["stages"] == {}
    assert json.loads(result.output)["delay_s"] == 4.0
    result = _farm(env, "knobs", "reset")
    assert result.exit_code == 0, result.output
    assert _live(redis_url, namespace).delay_s == 2.0


def test_a_stage_timeout_can_go_back_to_the_pipeline_default(env, redis_url, namespace):
    _farm(env, "knobs", "set", "--stage", "synthetic.compile", "timeout_s=30")
    result = _farm(env, "knobs", "set", "--stage", "synthetic.compile", "timeout_s=default")
    assert result.exit_code == 0, result.output
    assert "120 (pipeline)" in result.output
    assert _live(redis_url, namespace).stage("synthetic.compile").timeout_s is None


def test_a_database_that_was_not_migrated_is_refused_with_the_command_to_run(postgres_url, redis_url):
    result = _farm({"FARM_DATABASE_URL": postgres_url, "FARM_REDIS_URL": redis_url}, "knobs")
    assert result.exit_code == 1
    assert "run `farm db upgrade`" in result.output
