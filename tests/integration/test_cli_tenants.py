"""`farm tenants` against PostgreSQL: a token printed once that authenticates, listings that never show
one, changes refused whole when anything in them is wrong, and fair shares published to the farm's Redis."""

from __future__ import annotations

import json
import os
import time
from dataclasses import fields

import pytest
import redis as redis_lib
from click.testing import CliRunner

from farm.app import fair_shares
from farm.app.cli import main
from farm.app.gateway.config import protocols
from farm.protocol.shares import FairShare
from farm.store import engine as store
from farm.store.tenants import TenantLimits, authenticate, get_tenant

pytestmark = pytest.mark.integration


@pytest.fixture
def env(postgres_url):
    store.upgrade(postgres_url)
    return {"FARM_DATABASE_URL": postgres_url}


@pytest.fixture
def db(postgres_url):
    engine = store.make_engine(postgres_url)
    yield engine
    engine.dispose()


def farm(env, *args):
    return CliRunner().invoke(main, ["tenants", *args], env=env)


def test_create_prints_a_token_that_authenticates(env, db):
    result = farm(env, "create", "acme", "--open-batches", "5")
    assert result.exit_code == 0, result.output
    token = result.output.strip().splitlines()[-1]
    assert "shown only now" in result.output
    tenant = authenticate(db, token)
    assert tenant.name == "acme" and tenant.limits.open_batches == 5


def test_create_as_json_gives_the_token_once(env, db):
    out = json.loads(farm(env, "create", "acme", "--json").output)
    assert authenticate(db, out["token"]).id == out["id"]


def test_list_never_shows_a_token(env):
    token = json.loads(farm(env, "create", "acme", "--json").output)["token"]
    table, as_json = farm({**env, "COLUMNS": "200"}, "list"), farm(env, "list", "--json")
    assert table.exit_code == 0 and "acme" in table.output and token[:8] in table.output
    assert token not in table.output and token not in as_json.output
    assert json.loads(as_json.output)[0]["name"] == "acme"


def test_revoke_stops_the_token(env, db):
    token = json.loads(farm(env, "create", "acme", "--json").output)["token"]
    assert farm(env, "revoke", "acme").exit_code == 0
    assert authenticate(db, token) is None


def test_rotate_prints_a_new_token_and_the_old_one_stops(env, db):
    old = json.loads(farm(env, "create", "acme", "--json").output)["token"]
    new = json.loads(farm(env, "rotate", "acme", "--json").output)["token"]
    assert authenticate(db, old) is None and authenticate(db, new).name == "acme"


def test_set_changes_only_what_is_given(env, db):
    farm(env, "create", "acme", "--open-batches", "5")
    result = farm(env, "set", "acme", "--config", '{"openrlhf": {"batch_size": 512}}')
    assert result.exit_code == 0, result.output
    tenant = get_tenant(db, "acme")
    assert tenant.limits.open_batches == 5 and tenant.config == {"openrlhf": {"batch_size": 512}}


@pytest.mark.parametrize("limit", [f.name for f in fields(TenantLimits)])
def test_every_limit_of_a_tenant_has_an_option_of_create_and_set_and_is_listed(env, db, limit):
    option = f"--{limit.replace('_', '-')}"
    assert farm(env, "create", "acme", option, "7").exit_code == 0
    assert getattr(get_tenant(db, "acme").limits, limit) == 7
    assert farm(env, "set", "acme", option, "9").exit_code == 0
    assert getattr(get_tenant(db, "acme").limits, limit) == 9
    assert json.loads(farm(env, "list", "--json").output)[0]["limits"][limit] == 9


@pytest.mark.parametrize("config,needle", [("{nope", "not JSON"), ("[1]", "JSON object"),
                                           ('{"openrlhf": {"batch_size": 0}}', "batch_size")])
def test_a_bad_config_is_refused_and_nothing_changes(env, db, config, needle):
    farm(env, "create", "acme")
    result = farm(env, "set", "acme", "--config", config, "--open-batches", "9")
    assert result.exit_code == 1 and needle in result.output
    tenant = get_tenant(db, "acme")
    assert tenant.config == {} and tenant.limits.open_batches == 64


def test_set_no_replay_identical_turns_replay_off_for_both_protocols_and_keeps_the_rest(env, db):
    farm(env, "create", "acme", "--config", '{"openrlhf": {"batch_size": 512}}')
    result = farm(env, "set", "acme", "--no-replay-identical")
    assert result.exit_code == 0, result.output
    assert get_tenant(db, "acme").config == {"openrlhf": {"batch_size": 512, "replay_identical": False},
                                             "sandbox_fusion": {"replay_identical": False}}
    assert farm(env, "set", "acme", "--replay-identical").exit_code == 0
    assert get_tenant(db, "acme").config["sandbox_fusion"] == {"replay_identical": True}


def test_create_may_turn_replay_off_from_the_start(env, db):
    assert farm(env, "create", "acme", "--no-replay-identical").exit_code == 0
    assert protocols(get_tenant(db, "acme").config).sandbox_fusion.replay_identical is False


def test_revoke_cancel_cancels_its_open_batches_and_no_one_elses(env, db, settings, monkeypatch):
    from farm.app import tenant_batches
    from farm.client.sync import RewardClient
    monkeypatch.setattr(tenant_batches, "SETTLE_S", 0.0)
    ids = {name: json.loads(farm(env, "create", name, "--json").output)["id"] for name in ("acme", "other")}
    with RewardClient(settings, keep_alive=False) as client:
        batches = {name: client.open_batch(f"t{i}.t", "synthetic", 2, f"t{i}:b") for name, i in ids.items()}
        for batch in batches.values():
            batch.submit("r0", {"times": [1, 0]})  # no worker runs: it stays queued
        result = farm({**env, "FARM_NAMESPACE": settings.namespace}, "revoke", "acme", "--cancel",
                      "--redis-url", settings.redis_url)
        assert result.exit_code == 0, result.output
        assert f"cancelled its 1 open batches: t{ids['acme']}:b" in result.output
        assert batches["acme"].progress().state == "cancelled" and batches["other"].progress().state == "open"
        assert [r.status.value for r in batches["acme"].as_completed(timeout=5)] == ["cancelled"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the full sandbox needs root")
@pytest.mark.timeout(90)
def test_revoke_cancel_kills_its_running_programs_and_frees_their_worker_for_the_others(env, db, settings,
                                                                                       monkeypatch, start_workers):
    from farm.app import tenant_batches
    from farm.client.sync import RewardClient
    from farm.protocol.dispatch import Dispatch
    monkeypatch.setattr(tenant_batches, "SETTLE_S", 0.0)
    ids = {name: json.loads(farm(env, "create", name, "--json").output)["id"] for name in ("acme", "other")}
    start_workers("run_code.run")  # one worker: the other tenant's request waits for it
    with RewardClient(settings, keep_alive=False) as client:
        spinning = client.open_batch(f"t{ids['acme']}.t", "run_code", 1, f"t{ids['acme']}:b")
        spinning.submit("spin", {"language": "python", "code": "while True: pass", "run_timeout": 60})
        deadline = time.monotonic() + 20
        while not Dispatch(settings).inspect().stages["run_code.run"].running:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        result = farm({**env, "FARM_NAMESPACE": settings.namespace}, "revoke", "acme", "--cancel",
                      "--redis-url", settings.redis_url)
        assert result.exit_code == 0, result.output
        other = client.open_batch(f"t{ids['other']}.t", "run_code", 1, f"t{ids['other']}:b")
        other.submit("hello", {"language": "python", "code": "print('hello')"})
        [answer] = other.gather(timeout=20)  # the revoked tenant's spin would hold the worker for 60 s
        assert answer.ok


def test_revoke_cancel_without_the_farms_redis_is_refused_before_anything_changes(env, db):
    farm(env, "create", "acme")
    result = CliRunner().invoke(main, ["tenants", "revoke", "acme", "--cancel"], env={**env, "FARM_REDIS_URL": ""})
    assert result.exit_code == 2 and "--cancel needs the farm's Redis" in result.output
    assert get_tenant(db, "acme").active


def test_an_unknown_tenant_is_a_clear_error(env):
    result = farm(env, "revoke", "ghost")
    assert result.exit_code == 1 and "no tenant named 'ghost'" in result.output


def test_a_second_tenant_with_the_same_name_is_refused(env):
    farm(env, "create", "acme")
    result = farm(env, "create", "acme")
    assert result.exit_code == 1 and "already exists" in result.output


def test_set_with_nothing_to_change_is_refused(env):
    farm(env, "create", "acme")
    result = farm(env, "set", "acme")
    assert result.exit_code == 2 and "nothing to set" in result.output


def test_create_operator_makes_a_token_that_opens_the_farm_page_and_list_says_so(env, db):
    result = farm(env, "create", "ops", "--operator")
    assert result.exit_code == 0, result.output
    assert "/t/<token>/ui" in result.output
    assert authenticate(db, result.output.strip().splitlines()[-1]).operator
    farm(env, "create", "acme")
    assert {t["name"]: t["operator"] for t in json.loads(farm(env, "list", "--json").output)} == {"ops": True,
                                                                                               "acme": False}


def test_create_with_a_share_and_caps_stores_them(env, db):
    result = farm(env, "create", "acme", "--share", "2.5", "--max-workers", "gpu=4", "--max-workers", "cpu=16")
    assert result.exit_code == 0, result.output
    assert get_tenant(db, "acme").fair_share == FairShare(2.5, {"gpu": 4, "cpu": 16})


def test_set_changes_the_caps_named_keeps_the_others_and_kind_none_removes_one(env, db):
    farm(env, "create", "acme", "--share", "2", "--max-workers", "gpu=4", "--max-workers", "cpu=16")
    result = farm(env, "set", "acme", "--max-workers", "gpu=none", "--max-workers", "io=3")
    assert result.exit_code == 0, result.output
    assert get_tenant(db, "acme").fair_share == FairShare(2.0, {"cpu": 16, "io": 3})
    assert "share 2, max workers cpu=16 io=3" in result.output


def test_set_share_alone_keeps_the_caps_and_the_limits(env, db):
    farm(env, "create", "acme", "--open-batches", "5", "--max-workers", "gpu=4")
    assert farm(env, "set", "acme", "--share", "3").exit_code == 0
    tenant = get_tenant(db, "acme")
    assert tenant.fair_share == FairShare(3.0, {"gpu": 4}) and tenant.limits.open_batches == 5


def test_reserve_holds_a_tenants_share_and_no_reserve_gives_it_back_keeping_the_rest(env, db):
    farm(env, "create", "acme", "--share", "2", "--max-workers", "gpu=4", "--reserve")
    assert get_tenant(db, "acme").fair_share == FairShare(2.0, {"gpu": 4}, reserve=True)
    assert "2 reserved" in farm({**env, "COLUMNS": "250"}, "list").output
    assert farm(env, "set", "acme", "--no-reserve").exit_code == 0
    assert get_tenant(db, "acme").fair_share == FairShare(2.0, {"gpu": 4})


@pytest.mark.parametrize("args,needle", [(["--share", "0"], "share must be a number > 0"),
                                         (["--max-workers", "gpu"], "KIND=N"),
                                         (["--max-workers", "gpu=0"], "must be a whole number >= 1"),
                                         (["--max-workers", "tpu=2"], "unknown resource kind 'tpu'"),
                                         (["--max-workers", "tpu=none"], "unknown resource kind 'tpu'")])
def test_a_bad_share_or_cap_is_refused_with_its_reason_and_nothing_changes(env, db, args, needle):
    farm(env, "create", "acme", "--share", "2")
    result = farm(env, "set", "acme", "--open-batches", "9", *args)
    assert result.exit_code == 1 and needle in result.output
    tenant = get_tenant(db, "acme")
    assert tenant.fair_share == FairShare(2.0) and tenant.limits.open_batches == 64


def test_list_shows_each_tenants_share_and_caps(env):
    farm(env, "create", "acme", "--share", "2.5", "--max-workers", "gpu=4")
    table = farm({**env, "COLUMNS": "250"}, "list")
    assert table.exit_code == 0 and "2.5" in table.output and "gpu=4" in table.output
    assert json.loads(farm(env, "list", "--json").output)[0]["fair_share"] == {"share": 2.5,
                                                                             "max_workers": {"gpu": 4},
                                                                             "reserve": False}


def test_create_set_and_revoke_publish_the_shares_to_the_farms_redis(env, settings):
    redis = redis_lib.Redis.from_url(settings.redis_url, decode_responses=True)
    env = {**env, "FARM_NAMESPACE": settings.namespace, "FARM_REDIS_URL": settings.redis_url}
    try:
        acme = json.loads(farm(env, "create", "acme", "--share", "2", "--json").output)["id"]
        other = json.loads(farm(env, "create", "other", "--json").output)["id"]
        assert fair_shares.read(redis, settings.namespace) == {f"t{acme}": FairShare(2.0), f"t{other}": FairShare()}
        assert farm(env, "set", "other", "--max-workers", "gpu=1").exit_code == 0
        assert fair_shares.read(redis, settings.namespace)[f"t{other}"] == FairShare(1.0, {"gpu": 1})
        assert farm(env, "revoke", "acme").exit_code == 0
        assert list(fair_shares.read(redis, settings.namespace)) == [f"t{other}"]
    finally:
        redis.close()


def test_a_share_set_without_the_farms_redis_says_when_the_planner_publishes_it(env, db):
    farm(env, "create", "acme")
    result = CliRunner().invoke(main, ["tenants", "set", "acme", "--share", "2"], env={**env, "FARM_REDIS_URL": ""})
    assert result.exit_code == 0 and "the planner publishes fair shares to the farm within 30 s" in result.output
    assert get_tenant(db, "acme").fair_share == FairShare(2.0)
