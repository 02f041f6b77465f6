"""Abandoning silent batches, the pure parts: the knob, the error a trainer gets, who counts as silent, what a
reader and the keep-alive make of the farm's answers."""

from __future__ import annotations

import json

import pytest

from farm.client.core import ResultReader, Session
from farm.client.keepalive import KeepAlive
from farm.config import Settings
from farm.errors import BatchAbandoned, BatchClosed
from farm.knobs import Knobs
from farm.protocol.calls import parse_submit, sweep_call
from farm.protocol.silence import Touched, abandoned, keep_alive_interval, parse_touch, silent, touch_call
from farm.results import Result, Status
from farm.store.knob_store import KnobError, apply_assignments


def test_a_batch_is_abandoned_after_ten_minutes_of_silence_by_default():
    assert Knobs().abandon_after() == 600.0


@pytest.mark.parametrize("value", [0, 0.0, None])
def test_zero_or_none_means_a_batch_is_never_abandoned(value):
    assert Knobs(abandon_after_s=value).abandon_after() is None


@pytest.mark.parametrize("value", [-1, float("nan"), float("inf"), "600", True])
def test_a_bad_silence_limit_is_refused_with_its_name(value):
    with pytest.raises(ValueError, match="abandon_after_s"):
        Knobs(abandon_after_s=value)


def test_the_silence_limit_survives_the_knobs_round_trip_and_old_saved_knobs_read_as_the_default():
    assert Knobs.from_dict(json.loads(json.dumps(Knobs(abandon_after_s=90).to_dict()))).abandon_after() == 90.0
    assert Knobs.from_dict(json.loads(json.dumps(Knobs(abandon_after_s=None).to_dict()))).abandon_after() is None
    assert Knobs.from_dict({"delay_s": 2.0}).abandon_after_s == 600.0


@pytest.mark.parametrize("raw, expected", [("900", 900.0), ("0", 0.0), ("never", None), ("off", None),
                                           ("default", 600.0)])
def test_farm_knobs_set_takes_seconds_or_never(raw, expected):
    assert apply_assignments(Knobs(), [f"abandon_after_s={raw}"]).abandon_after_s == expected


@pytest.mark.parametrize("raw, message", [("-5", "abandon_after_s must be >= 0"), ("soon", "number of seconds")])
def test_farm_knobs_set_refuses_a_bad_silence_limit(raw, message):
    with pytest.raises(KnobError, match=message):
        apply_assignments(Knobs(), [f"abandon_after_s={raw}"])


def test_the_sweep_abandons_nothing_when_the_knob_says_never():
    assert sweep_call(None).arg("abandon_after_s") == "0"
    assert sweep_call(600.0).arg("abandon_after_s") == "600.0"


def test_a_batch_is_silent_once_its_trainer_was_unheard_for_the_knobs_time():
    assert not silent(100.0, 60.0, now=159.9)
    assert silent(100.0, 60.0, now=160.0)
    assert not silent(100.0, None, now=1e9)  # never abandoned
    assert not silent(None, 60.0, now=1e9)  # never seen: opened before batches were watched


def test_the_error_says_how_long_the_trainer_was_silent_and_what_to_do():
    error = abandoned("b1", "612", "600")
    assert isinstance(error, BatchClosed) and error.state == "abandoned"
    assert (error.silent_s, error.after_s) == (612.0, 600.0)
    assert "'b1' was abandoned by the farm" in str(error) and "for 612 s" in str(error)
    assert "abandon_after_s is 600 s" in str(error) and "batch.heartbeat()" in str(error)
    assert "for too long" in str(abandoned("b1"))


def test_submitting_into_an_abandoned_batch_raises_batch_abandoned():
    with pytest.raises(BatchAbandoned, match="for 700 s"):
        parse_submit(["closed", "abandoned", "700", "600"], "b1", "r0")
    with pytest.raises(BatchClosed) as cancelled:
        parse_submit(["closed", "cancelled"], "b1", "r0")
    assert not isinstance(cancelled.value, BatchAbandoned)


def test_a_touch_names_its_batches_and_reads_back_each_ones_state():
    assert touch_call(["a", "b"]).arg("batches") == "a,b"
    touched = parse_touch([["open", "", ""], ["abandoned", "612", "600"], ["unknown"]], ["a", "b", "c"])
    assert touched[0] == Touched("a", "open") and touched[0].state_or_raise() == "open"
    assert touched[2].state == "unknown"
    with pytest.raises(BatchAbandoned, match="for 612 s"):
        touched[1].state_or_raise()


def test_a_reader_learns_from_the_end_marker_that_its_batch_was_abandoned():
    reader = ResultReader(Session(Settings(namespace="unit")), "b1", 3, None, now=0.0)
    result = json.dumps(Result("r0", "b1", Status.CANCELLED).to_dict())
    got = reader.feed([("done", [("1-0", {"r": result}),
                                 ("2-0", {"end": "abandoned", "silent_s": "612", "abandon_after_s": "600"})])])
    assert [r.request_id for r in got] == ["r0"] and reader.done
    assert isinstance(reader.abandoned, BatchAbandoned) and reader.abandoned.silent_s == 612.0
    cancelled = ResultReader(Session(Settings(namespace="unit")), "b2", 3, None, now=0.0)
    cancelled.feed([("done", [("1-0", {"end": "cancelled"})])])
    assert cancelled.done and cancelled.abandoned is None


def test_a_client_touches_its_batches_a_few_times_per_silence_limit():
    assert keep_alive_interval(600.0) == 150.0
    assert keep_alive_interval(None) == 30.0  # never abandoned: it only looks at the knob again now and then


def test_the_keep_alive_lets_go_of_batches_that_ended_and_of_all_when_closed():
    touched = []

    def touch(ids):
        touched.append(list(ids))
        return [Touched(b, "completed" if b == "done" else "open") for b in ids]

    keep = KeepAlive(touch, lambda: Knobs(abandon_after_s=3600))
    keep.hold("live")
    keep.hold("done")
    keep.beat()
    assert touched == [["live", "done"]] and keep.held == ["live"]
    keep.close()
    keep.hold("late")
    assert keep.held == []
