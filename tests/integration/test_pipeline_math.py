"""The `math` pipeline in-process: math-verify in a contained child with a hard timeout."""

from __future__ import annotations

import time

import pytest

from farm.knobs import Knobs
from farm.results import Outcome, Status
from workers.pipelines import math
from workers.pipelines.math import pipeline
from workers.runner import score

pytestmark = pytest.mark.timeout(60)

@pytest.mark.parametrize("response, answer", [
    (r"So the result is \boxed{\frac{1}{2}}.", "0.5"),
    (r"\boxed{0.5}", r"\frac{1}{2}"),
    (r"\boxed{\dfrac{3}{4}}", "3/4"),
    (r"\boxed{2\sqrt{2}}", r"\sqrt{8}"),
    (r"\boxed{(x+1)^2}", "x^2+2x+1"),
    (r"\boxed{\{2, 1\}}", r"\{1,2\}"),
    ("The final answer is $\\pi/2$.", r"\frac{\pi}{2}"),
    ("#### 42", "42"),
])
def test_equivalent_forms_verify(response, answer):
    r = score(pipeline, {"response": response, "answer": answer})
    assert (r.status, r.reward, r.outcome) == (Status.OK, 1.0, Outcome.SUCCESS), r.message


@pytest.mark.parametrize("response, answer", [
    (r"\boxed{3}", "4"),
    (r"\boxed{\frac{1}{3}}", "0.33"),
    (r"\boxed{x^2+1}", "(x+1)^2"),
    (r"\boxed{\{1, 2, 3\}}", r"\{1,2\}"),
])
def test_wrong_answers_do_not_verify(response, answer):
    r = score(pipeline, {"response": response, "answer": answer})
    assert (r.status, r.reward, r.stage) == (Status.WRONG, 0.0, "verify")


def test_a_response_without_a_final_answer_visits_no_stage():
    r = score(pipeline, {"response": "It is hard to say.", "answer": "1"})
    assert (r.status, r.outcome, r.stages) == (Status.WRONG, Outcome.GENERATION_FAILED, ())


def test_a_pathological_expression_times_out_instead_of_hanging():
    started = time.monotonic()
    r = score(pipeline, {"response": r"\boxed{9^{9^{9^{9^{9}}}}}", "answer": "1"},
              knobs=Knobs().with_stage("math.verify", timeout_s=2))
    assert (r.status, r.stage) == (Status.TIMEOUT, "verify") and time.monotonic() - started < 6


def test_the_worker_verifies_again_after_a_timeout():
    score(pipeline, {"response": r"\boxed{9^{9^{9^{9^{9}}}}}", "answer": "1"}, knobs=Knobs().with_stage("math.verify", timeout_s=1))
    assert score(pipeline, {"response": r"\boxed{7}", "answer": "7"}).status is Status.OK


def test_an_unparseable_reference_is_invalid_input():
    r = score(pipeline, {"response": r"\boxed{1}", "answer": "\\"})  # a lone backslash parses to nothing
    assert r.status is Status.INVALID_INPUT and "reference" in r.message


@pytest.mark.parametrize("payload, words", [({"response": r"\boxed{1}"}, "'answer'"), ({"response": 3, "answer": "1"}, "string")])
def test_a_malformed_payload_is_refused_with_a_reason(payload, words):
    r = score(pipeline, payload)
    assert r.status is Status.INVALID_INPUT and words in r.message


def test_the_installed_verifier_gives_the_verdicts_this_judge_is_tested_with():
    math.warm_up.cache_clear()
    assert math.warm_up() is None


def test_a_verifier_that_reads_answers_differently_refuses_to_judge(monkeypatch):
    # what a different ANTLR runtime does: some verdicts change; every request is then infra_error (masked)
    monkeypatch.setattr(math, "_SELF_TEST", math._SELF_TEST + (("2", "3", True),))
    math.warm_up.cache_clear()
    try:
        r = score(pipeline, {"response": r"\boxed{7}", "answer": "7"})
    finally:
        math.warm_up.cache_clear()
    assert r.status is Status.INFRA_ERROR and "'3' against '2'" in r.message and "antlr4-python3-runtime" in r.message
