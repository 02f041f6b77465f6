"""`farm status` against a real Redis: stages and active batches as an operator sees them."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from farm.app.cli import main
from farm.client.sync import RewardClient

pytestmark = pytest.mark.integration


def _status(settings, *args):
    env = {"FARM_REDIS_URL": settings.redis_url, "FARM_NAMESPACE": settings.namespace, "FARM_DATA_DIR": settings.data_dir}
    return CliRunner().invoke(main, ["status", *args], env=env)


def test_status_shows_an_open_batch_with_its_progress_and_queued_requests(settings):
    with RewardClient(settings) as client:
        batch = client.open_batch("task-s", "synthetic", 4)
        batch.submit("r0", {"times": [1.0, 0.5]})
        batch.submit("r1", {"times": [0.0, 0.0]})
    result = _status(settings, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    [b] = report["batches"]
    assert (b["task"], b["size"], b["arrived"], b["done"]) == ("task-s", 4, 2, 1)
    assert report["stages"]["synthetic.compile"]["queued"] == 1
    assert report["stages"]["synthetic.compile"]["workers"] == 0
    assert report["planner"] is None


def test_status_prints_a_readable_table(settings):
    with RewardClient(settings) as client:
        client.open_batch("task-t", "synthetic", 2)
    result = _status(settings)
    assert result.exit_code == 0, result.output
    assert "task-t" in result.output and "0/2" in result.output and "scheduler ebf" in result.output
    assert "planner daemon: none running" in result.output


def test_status_without_a_farm_says_how_to_start_one(tmp_path):
    result = CliRunner().invoke(main, ["status"], env={"FARM_DATA_DIR": str(tmp_path), "FARM_REDIS_URL": ""})
    assert result.exit_code != 0 and "farm up" in result.output


def test_status_names_the_planner_daemon_that_serves_the_farm(settings):
    import redis

    from farm.protocol import heartbeat

    client = redis.Redis.from_url(settings.redis_url)
    heartbeat.beat(client, settings.namespace, heartbeat.Heartbeat(pid=4242, at=time.time(), backend="local"), 30)
    client.close()
    result = _status(settings)
    assert result.exit_code == 0, result.output
    assert "pid 4242 (local backend)" in result.output


def test_status_shows_the_start_up_each_stage_s_workers_take(settings):
    import redis

    from farm.protocol import heartbeat

    startups = {"synthetic.compile": heartbeat.Startup(count=12, median_s=28.0, plan_s=41.5, max_s=50.0)}
    client = redis.Redis.from_url(settings.redis_url)
    heartbeat.beat(client, settings.namespace,
                   heartbeat.Heartbeat(pid=1, at=time.time(), backend="docker", startups=startups), 30)
    client.close()
    with RewardClient(settings) as c:
        c.open_batch("task-u", "synthetic", 2).submit("r0", {"times": [1.0, 0.5]})
    report = json.loads(_status(settings, "--json").output)
    assert report["stages"]["synthetic.compile"]["startup"]["plan_s"] == 41.5
    table = _status(settings).output
    assert "28.0 / 41.5 s (12)" in table


def test_status_shows_a_silent_batch_against_abandon_after_and_each_tenants_use(settings):
    import redis

    from farm.protocol.keys import Keys
    from farm.protocol.scope import Scope

    with RewardClient(settings) as client:
        quiet = client.open_batch("task-q", "synthetic", 2, batch_id=Scope(7).batch("quiet"))
        quiet.submit("r0", {"times": [1.0, 0.5]})
        client.open_batch("task-h", "synthetic", 2, batch_id="heard")
    r = redis.Redis.from_url(settings.redis_url)
    r.zadd(Keys(settings.namespace).seen, {"t7:quiet": time.time() - 700})  # its trainer last heard 700 s ago
    r.close()
    report = json.loads(_status(settings, "--json").output)
    quiet_row = next(b for b in report["batches"] if b["batch"] == "t7:quiet")
    assert quiet_row["silent_s"] >= 700 and quiet_row["abandon_after_s"] == 600 and quiet_row["silent"]
    assert report["tenants"]["t7"] == {"batches": 1, "outstanding": 1, "queued": 1, "running": 0, "silent": 1}
    assert report["tenants"]["-"]["batches"] == 1
    shown = _status(settings).output
    assert "SILENT" in shown and "use per tenant" in shown


def test_status_says_which_stage_wants_more_than_the_cluster_holds(settings):
    import redis

    from farm.protocol import heartbeat

    bound = {"synthetic.execute": heartbeat.Bound("gpu", wanted=12, held=2, delay_mean_s=45.0, delay_max_s=61.0,
                                                  delay_s=30.0)}
    client = redis.Redis.from_url(settings.redis_url)
    heartbeat.beat(client, settings.namespace,
                   heartbeat.Heartbeat(pid=1, at=time.time(), backend="ray",
                                       capacity={"gpu": heartbeat.KindCapacity(2, 2)}, bound=bound), 30)
    client.close()

    table = " ".join(_status(settings).output.split())
    report = json.loads(_status(settings, "--json").output)

    assert "capacity (workers placeable now): gpu 2" in table
    assert "synthetic.execute: wants 12 gpu workers, the cluster holds 2 (10 short)" in table
    assert "against D = 30 s" in table
    assert report["stages"]["synthetic.execute"]["bound"]["short"] == 10
