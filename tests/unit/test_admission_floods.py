"""Admission of 1 MiB hostile payloads decides what the documented rules say (bench/admission.py times it), and
what a stage plans again of a payload is read once per process, keyed by the payload's own text."""

import json

import pytest

from farm import registry
from farm.config import Settings
from farm.pipeline import InvalidInput
from farm.protocol.calls import admit, canonical_json
from farm.results import Outcome, Status
from workers.extract import MAX_FENCES, MAX_MARKS
from workers.pipelines import code, cuda
from workers.pipelines.common import finite_list

pytestmark = pytest.mark.timeout(120)
MiB = 1 << 20
SETTINGS = Settings(max_payload_bytes=MiB)


def filled(build, unit: str, head: str = "", tail: str = "") -> dict:
    """`build(text)` with `text` = head + unit * k + tail as long as fits in 1 MiB of canonical JSON."""
    base = len(canonical_json(build(head + tail)).encode())
    k = (MiB - base) // (len(canonical_json(unit).encode()) - 2)
    payload = build(head + unit * k + tail)
    assert MiB - 64 < len(canonical_json(payload).encode()) <= MiB
    return payload


def as_math(text):
    return {"response": text, "answer": "42"}


def as_code(text):
    return {"response": text, "tests": [{"input": "1 2\n", "output": "3\n"}]}


def as_cpp(text):
    return {**as_code(text), "language": "cpp"}


def as_cuda(text):
    return {"response": text, "expected_output": [1.0]}


def admitted(pipeline: str, payload: dict):
    return admit(SETTINGS, registry.get(pipeline), "r", payload, None)


@pytest.mark.parametrize("build, unit, head, tail, stages", [
    (as_code, "\n", "```\n", "", ("run",)),
    (as_code, " ", "```", "`", ("run",)),
    (as_cpp, "\n", "", "int main() {}", ("compile", "run")),
    (as_code, "int ", "", "", ("run",)),
    (as_math, " ", "Answer: x", "y", ("verify",)),
    (as_math, "\n", "", "Answer: 42", ("verify",)),
    (as_cuda, "\n", "", "__global__ void k() {}", ("compile", "execute")),
    (as_cuda, "\n", "```\n", "```\n__global__ void k() {}", ("compile", "execute")),
], ids=["code-fenced-blank-lines", "code-blanks-then-backtick", "cpp-blank-lines", "code-int-flood",
        "math-answer-blanks", "math-blank-lines", "cuda-blank-lines", "cuda-empty-fence"])
def test_a_mebibyte_of_hostile_text_is_admitted_to_the_stages_its_rules_name(build, unit, head, tail, stages):
    pipeline = {as_code: "code", as_cpp: "code", as_math: "math", as_cuda: "cuda"}[build]
    assert admitted(pipeline, filled(build, unit, head, tail)).stages == stages


@pytest.mark.parametrize("unit, why", [
    ("```\n", "no code found"), ("`", "no code found"), ("~~~x\n", "no code found"), ("```python\n", "no code found"),
])
def test_a_mebibyte_of_fences_holds_no_code_and_visits_no_stage(unit, why):
    a = admitted("code", filled(as_code, unit))
    assert (a.stages, a.status, a.outcome) == ((), Status.WRONG, Outcome.GENERATION_FAILED) and why in a.message


@pytest.mark.parametrize("unit, head, tail, why", [
    ("\\boxed{", "", "", "\\boxed or \\fbox"), ("\\boxed{1}", "", "", "\\boxed or \\fbox"),
    ("{}", "\\boxed{", "}", "braces from its first box on"), ("Answer:\n", "", "", "'answer'"),
    ("#### 1\n", "", "", "####"), ("anſwer is ", "", "", "'answer'"),
    ("~", "\\boxed{1}\\boxed{2", "}", "characters in all"),
])
def test_a_mebibyte_of_answer_marks_is_wrong_unread(unit, head, tail, why):
    a = admitted("math", filled(as_math, unit, head, tail))
    assert (a.stages, a.status, a.outcome) == ((), Status.WRONG, Outcome.GENERATION_FAILED)
    assert why in a.message and "at most" in a.message and len(a.message) < 300


def test_the_same_answer_boxed_as_often_as_is_read_is_one_answer():
    assert admitted("math", as_math("\\boxed{42} " * MAX_MARKS)).stages == ("verify",)


def test_answers_that_differ_only_in_spacing_are_still_compared_and_agree():
    assert admitted("math", as_math("\\boxed{\\frac12}\\boxed{\\dfrac{1}{2}}\\boxed{ \\frac{1}{2} }")).stages == \
        ("verify",)


def test_as_many_fences_as_are_read_keep_their_code():
    p = code.plan(as_code("```\nprint(3)\n```\n" * (MAX_FENCES // 2)))
    assert p.code == "print(3)\n" and p.language == "python"


def test_an_expected_output_given_as_text_is_admitted_without_reading_its_numbers():
    payload = {"response": "```cuda\n__global__ void k() {}\n```", "expected_output": "1.5 " * 200_000 + "x"}
    assert admitted("cuda", payload).stages == ("compile", "execute")
    assert cuda.expected_of(payload) == payload["expected_output"]


def test_a_list_of_numbers_is_read_in_one_pass_and_a_bad_one_is_named():
    assert finite_list([1, 2.5, -3]) == [1.0, 2.5, -3.0]
    assert finite_list([1e308, 1e308]) is None  # its sum overflows: read one by one, where it passes
    assert cuda.expected_of({"expected_output": [1e308, 1e308]}) == [1e308, 1e308]
    for bad in (True, float("nan"), float("inf"), "1", None, 10 ** 400):
        assert finite_list([1.0, bad]) is None
        with pytest.raises(InvalidInput, match="finite numbers"):
            cuda.expected_of({"expected_output": [1.0, bad]})


def test_a_refusal_of_many_unknown_stages_names_the_first_few_in_order():
    times = {f"s{i:06d}": 1.0 for i in range(50_000)}
    a = admitted("synthetic", {"times": times})
    assert a.status is Status.INVALID_INPUT
    assert "['s000000', 's000001', 's000002', 's000003', 's000004', 's000005', ...]" in a.message


def test_a_process_planning_a_payload_again_reads_its_response_once():
    payload = as_code("```python\nprint(1)\n```" + " " * 100_000)
    code._chosen.cache_clear()
    first = code.plan(payload)
    again = code.plan(json.loads(json.dumps(payload)))  # the next stage decodes its own copy
    assert first == again and code._chosen.cache_info().hits == 1


def test_plans_are_keyed_by_the_response_and_language_so_payloads_never_share_one():
    text = "```\n#include <cstdio>\nint main() { return 0; }\n```"
    assert code.plan(as_code(text)).language == "cpp"
    assert code.plan({**as_code(text), "language": "python"}).language == "python"
    assert code.plan(as_code(text.replace("0;", "1;"))).code.endswith("return 1; }\n")
    assert code.plan(as_code(text)).code.endswith("return 0; }\n")


def test_the_cuda_kernel_is_read_once_per_process_and_keyed_by_the_response():
    cuda._kernel.cache_clear()
    payload = as_cuda("```cuda\n__global__ void k() {}\n```")
    assert cuda._code(payload) == cuda._code(dict(payload)) == "__global__ void k() {}\n"
    assert cuda._kernel.cache_info().hits == 1
    assert cuda._code(as_cuda("```cuda\n__global__ void j() {}\n```")) == "__global__ void j() {}\n"
