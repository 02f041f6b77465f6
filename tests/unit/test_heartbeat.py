"""The planner daemon's heartbeat as the protocol holds it: a typed record and its JSON form in Redis."""

from __future__ import annotations

import json

from farm.protocol.heartbeat import Bound, Heartbeat, KindCapacity, Pool, Startup

BEAT = Heartbeat(pid=42, at=1700000000.5, backend="docker", decisions=2, startup_s=5.0,
                 startups={"cuda.execute": Startup(count=9, median_s=30.0, plan_s=45.0, max_s=50.0)},
                 pools={"cuda.execute": Pool(pending=1, running=2, nodes={"10.0.0.2/aa": 2})},
                 targets={"cuda.execute": 3},
                 capacity={"gpu": KindCapacity(placeable=2, most=2)},
                 bound={"cuda.execute": Bound("gpu", wanted=5, held=2, delay_mean_s=40.0, delay_max_s=55.0,
                                              delay_s=30.0)})


def test_a_heartbeat_reads_back_as_it_was_written():
    assert Heartbeat.from_json(BEAT.to_json()) == BEAT


def test_a_heartbeat_is_read_from_bytes_as_from_text():
    assert Heartbeat.from_json(BEAT.to_json().encode()) == BEAT


def test_the_json_form_keeps_the_fields_farm_status_prints_in_their_order():
    data = json.loads(BEAT.to_json())
    assert list(data) == ["pid", "at", "backend", "decisions", "startup_s", "startups", "pools", "targets",
                          "capacity", "node_startup_s", "bound"]
    assert data["capacity"] == {"gpu": {"placeable": 2, "most": 2}}
    assert data["bound"]["cuda.execute"] == {"resource": "gpu", "wanted": 5, "held": 2, "delay_mean_s": 40.0,
                                             "delay_max_s": 55.0, "delay_s": 30.0}
    assert data["pools"]["cuda.execute"] == {"pending": 1, "starting": 0, "running": 2, "stopping": 0,
                                             "nodes": {"10.0.0.2/aa": 2}}
    assert data["startups"]["cuda.execute"] == {"count": 9, "median_s": 30.0, "plan_s": 45.0, "max_s": 50.0}


def test_fields_a_newer_daemon_adds_are_passed_over():
    data = json.loads(BEAT.to_json())
    data["gpus"] = 8
    data["pools"]["cuda.execute"]["draining"] = 1
    data["bound"]["cuda.execute"]["nodes_asked"] = 3
    assert Heartbeat.from_json(json.dumps(data)) == BEAT


def test_a_heartbeat_of_an_older_daemon_has_no_capacity_and_nothing_bound():
    data = json.loads(BEAT.to_json())
    for key in ("capacity", "node_startup_s", "bound"):
        del data[key]

    beat = Heartbeat.from_json(json.dumps(data))

    assert beat.capacity == {} and beat.bound == {} and beat.node_startup_s == 0.0
