"""Edits of the knobs as `farm knobs set` parses them: typed, validated, all or nothing."""

from __future__ import annotations

import pytest

from farm.knobs import Knobs
from farm.store.knob_store import KnobError, apply_assignments, reset

QUEUES = ["synthetic.compile", "synthetic.execute"]


def test_global_knobs_are_parsed_to_their_types():
    knobs = apply_assignments(Knobs(), ["delay_s=3", "scheduler=fcfs", "policy=history", "tick_s=2.5"])
    assert (knobs.delay_s, knobs.scheduler, knobs.policy, knobs.tick_s) == (3.0, "fcfs", "history", 2.5)


def test_stage_knobs_change_only_the_named_stage():
    knobs = apply_assignments(Knobs(), ["timeout_s=30", "max_workers=8"], stage="synthetic.execute", queues=QUEUES)
    assert knobs.stage("synthetic.execute").timeout_s == 30.0
    assert knobs.stage("synthetic.execute").max_workers == 8
    assert "synthetic.compile" not in knobs.stages


def test_default_restores_a_stage_timeout_to_the_pipeline_value():
    knobs = Knobs().with_stage("synthetic.compile", timeout_s=30.0)
    assert apply_assignments(knobs, ["timeout_s=default"], stage="synthetic.compile", queues=QUEUES) \
        .stage("synthetic.compile").timeout_s is None


def test_a_stage_with_overrides_stays_editable_when_its_pipeline_is_not_installed():
    knobs = Knobs().with_stage("cuda.execute", max_workers=4)
    assert apply_assignments(knobs, ["max_workers=2"], stage="cuda.execute", queues=QUEUES) \
        .stage("cuda.execute").max_workers == 2


@pytest.mark.parametrize(
    "assignments, stage, message",
    [
        (["delay_s=x"], None, "delay_s must be a number, not 'x'"),
        (["delay_s=nan"], None, "delay_s must be a finite number"),
        (["tick_s=0"], None, "tick_s must be > 0"),
        (["stages=x"], None, "unknown knob 'stages'"),
        (["=3"], None, "expected NAME=VALUE"),
        ([], None, "nothing to set"),
        (["cost=0"], "synthetic.compile", "cost must be > 0"),
        (["min_workers=-1"], "synthetic.compile", "min_workers must be a whole number >= 0"),
        (["delay_s=3"], "synthetic.compile", "unknown knob 'delay_s'; known: cost, timeout_s, min_workers, max_workers"),
        (["cost=2"], "synthetic.link", "unknown stage queue 'synthetic.link'; known: synthetic.compile, synthetic.execute"),
    ],
)
def test_a_bad_edit_is_refused_with_a_message(assignments, stage, message):
    with pytest.raises(KnobError) as info:
        apply_assignments(Knobs(), assignments, stage=stage, queues=QUEUES)
    assert message in str(info.value)


def test_reset_of_a_stage_without_overrides_names_those_that_have_some():
    knobs = Knobs().with_stage("synthetic.compile", max_workers=3)
    with pytest.raises(KnobError, match="stages with overrides: synthetic.compile"):
        reset(knobs, stage="synthetic.execute")
    assert reset(knobs, stage="synthetic.compile").stages == {}
    assert reset(knobs) == Knobs()
