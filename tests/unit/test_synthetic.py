"""The synthetic pipeline: per-stage sleeps from the payload, timeouts, validation."""

from __future__ import annotations

import pytest

from farm.knobs import Knobs
from farm.pipeline import InvalidInput
from farm.results import Outcome, Status
from workers.pipelines import synthetic
from workers.runner import score

PIPELINE = synthetic.make("unit-synthetic", [
    {"name": "compile", "resource": "cpu", "cost": 1.0, "timeout_s": 0.3},
    {"name": "execute", "resource": "gpu", "cost": 8.0, "timeout_s": 0.2},
])


def test_a_request_visits_only_the_stages_with_a_positive_time():
    assert PIPELINE.checked_admit({"times": [0.0, 0.01]}).stages == ("execute",)


def test_times_may_be_given_by_stage_name():
    assert PIPELINE.checked_admit({"times": {"compile": 0.01}}).stages == ("compile",)


def test_a_request_that_visits_no_stage_is_a_generation_failure():
    admission = PIPELINE.checked_admit({"times": [0, 0]})
    assert admission.stages == () and admission.status is Status.WRONG
    assert admission.outcome is Outcome.GENERATION_FAILED


@pytest.mark.parametrize("payload, message", [
    ({}, "needs 'times'"),
    ({"times": [1.0]}, "1 times for 2 stages"),
    ({"times": [-1.0, 0.0]}, ">= 0"),
    ({"times": ["1", 0.0]}, "number of seconds"),
    ({"times": [True, 0.0]}, "number of seconds"),
    ({"times": [float("nan"), 0.0]}, "finite"),
    ({"times": {"link": 1.0}}, "unknown stages"),
    ({"times": [0.1, 0.0], "reward": "high"}, "reward"),
])
def test_a_malformed_synthetic_payload_says_what_is_wrong(payload, message):
    with pytest.raises(InvalidInput, match=message):
        PIPELINE.checked_admit(payload)


def test_a_request_runs_its_stages_in_order_and_gets_its_reward():
    result = score(PIPELINE, {"times": [0.02, 0.01], "reward": 0.5})
    assert result.status is Status.OK and result.reward == 0.5
    assert [s.name for s in result.stages] == ["compile", "execute"]
    assert result.stages[0].seconds >= 0.02


def test_a_time_at_the_timeout_is_killed_there_and_reported_with_its_stage():
    result = score(PIPELINE, {"times": [0.01, 0.2]})
    assert result.status is Status.TIMEOUT and result.stage == "execute"
    assert result.stages[-1].seconds < 0.3


def test_the_operators_timeout_knob_overrides_the_stages_own():
    knobs = Knobs().with_stage("unit-synthetic.compile", timeout_s=0.05)
    result = score(PIPELINE, {"times": [0.1, 0.0]}, knobs=knobs)
    assert result.status is Status.TIMEOUT and result.stage == "compile"


def test_an_invalid_payload_scores_as_invalid_input_without_running_anything():
    result = score(PIPELINE, {"times": [-1, 0]})
    assert result.status is Status.INVALID_INPUT and result.stages == ()
