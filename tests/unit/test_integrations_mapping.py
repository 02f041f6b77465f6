"""What the trainer adapters hand each trainer, and how they key farm batches: pure logic, no trainer needed."""

from __future__ import annotations

import pytest

from farm.integrations.mapping import groups_of, missing_score, payload, reward_or_none, text_of, verl_score
from farm.integrations.trl import generation_due, local_generation_size
from farm.integrations.verl import step_batch_id, tag_rows
from farm.results import Result, Status


def result(status: Status, reward: float = 0.0) -> Result:
    return Result("r0", "b0", status, reward=reward)


@pytest.mark.parametrize("status", [Status.INFRA_ERROR, Status.CANCELLED, Status.INVALID_INPUT])
def test_a_status_that_says_nothing_about_the_response_is_none_for_trl(status):
    assert reward_or_none(result(status)) is None


@pytest.mark.parametrize("status, reward", [(Status.OK, 1.0), (Status.WRONG, 0.0), (Status.TIMEOUT, 0.0),
                                            (Status.COMPILE_ERROR, 0.0), (Status.RUNTIME_ERROR, 0.25)])
def test_a_model_outcome_keeps_its_reward_for_trl(status, reward):
    assert reward_or_none(result(status, reward)) == reward


def test_verl_gets_the_same_keys_for_every_status_with_masked_ones_scoring_zero():
    scores = [verl_score(result(s, 0.5)) for s in Status] + [missing_score("late")]
    assert {tuple(sorted(s)) for s in scores} == {("farm_masked", "farm_status", "score")}
    assert verl_score(result(Status.INFRA_ERROR, 0.5)) == {"score": 0.0, "farm_status": "infra_error",
                                                           "farm_masked": 1.0}
    assert verl_score(result(Status.OK, 1.0))["farm_masked"] == 0.0


def test_a_conversational_completion_is_its_assistant_turn():
    assert text_of([{"role": "assistant", "content": "\\boxed{2}"}]) == "\\boxed{2}"
    assert text_of("\\boxed{2}") == "\\boxed{2}"


def test_payloads_of_the_built_in_pipelines():
    assert payload("math", "\\boxed{2}", 2) == {"response": "\\boxed{2}", "answer": "2"}
    assert payload("code", "x", "HumanEval/0") == {"response": "x", "problem": "HumanEval/0"}
    assert payload("code", "x", '[{"input": "", "output": "1"}]') == {"response": "x",
                                                                      "tests": [{"input": "", "output": "1"}]}
    with pytest.raises(ValueError, match="payload_fn"):
        payload("synthetic", "x", None)


def test_each_run_of_a_repeated_prompt_is_one_group():
    assert groups_of(["a", "a", "b", "b", "a", "a"]) == [0, 0, 1, 1, 2, 2]


@pytest.mark.parametrize("step, accumulation, per_generation, iterations, due", [
    (0, 1, None, 1, True), (1, 1, None, 1, True),       # the default: every optimizer step generates
    (1, 2, 4, 1, False), (2, 2, 4, 1, True),            # a generation feeds two optimizer steps
    (1, 1, 1, 2, False), (2, 1, 1, 2, True),            # num_iterations reuses each generation
])
def test_trl_generates_on_the_steps_its_buffer_runs_out(step, accumulation, per_generation, iterations, due):
    assert generation_due(step, accumulation, per_generation, iterations) is due


def test_one_process_scores_its_share_of_the_generation_batch():
    assert local_generation_size(8, 2, None) == 16 and local_generation_size(8, 2, 4) == 32


def test_a_verl_step_and_its_validation_are_different_batches():
    assert step_batch_id("run", 3, False) == "run.step3"
    assert step_batch_id("run", 3, True) == "run.val3"
    assert step_batch_id("run", 3, False, ordinal=1) == "run.step3.1"


def test_tagged_verl_rows_get_their_own_extra_info_with_a_request_id_and_group():
    shared = {"index": 7}
    rows = tag_rows([shared, shared], "run.step1", ["u0", "u0"], 2)
    assert rows == [{"index": 7, "farm_batch": "run.step1", "farm_request": "r0", "farm_group": "u0"},
                    {"index": 7, "farm_batch": "run.step1", "farm_request": "r1", "farm_group": "u0"}]
    assert shared == {"index": 7} and rows[0] is not rows[1]
    assert tag_rows(None, "b", None, 1) == [{"farm_batch": "b", "farm_request": "r0", "farm_group": None}]
