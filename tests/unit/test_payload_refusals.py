"""Malformed payloads the built-in pipelines refuse at admission, saying which field and what is wrong, in a
message of bounded size; and what neither the client's encoder nor a worker's decoder can take. Each was once
a crash of a stage (`infra_error`), a message without the field, or a message as long as the payload.
The same refusals through a farm: tests/integration/test_payload_fuzz.py."""

from __future__ import annotations

import pytest

from farm import registry
from farm.pipeline import InvalidInput
from farm.protocol.calls import canonical_json
from workers.pipelines import math as math_pipeline
from workers.stage import payload_of

CUDA = {"response": "```cuda\n__global__ void k() {}\nint main() { return 0; }\n```", "expected_output": ""}
CODE = {"response": "```python\nprint(1)\n```", "tests": [{"input": "", "output": "1"}]}
RUN_CODE = {"code": "print(1)", "language": "python"}
MATH = {"response": "\\boxed{2}", "answer": "2"}
LONE = "ab\ud800c"  # what JSON's "ab\ud800c" decodes to: no UTF-8 can write it


def nested(depth: int):
    value: object = 0
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("pipeline, payload, field", [
    ("cuda", {**CUDA, "response": f"```cuda\n{LONE}\n```"}, "payload 'response'"),
    ("cuda", {**CUDA, "harness": LONE}, "payload 'harness'"),
    ("cuda", {**CUDA, "stdin": LONE}, "payload 'stdin'"),
    ("code", {**CODE, "response": LONE}, "payload 'response'"),
    ("code", {**CODE, "tests": [{"input": LONE, "output": "1"}]}, "problem case 0 'input'"),
    ("code", {**CODE, "tests": [{"input": "", "output": LONE}]}, "problem case 0 'output'"),
    ("run_code", {**RUN_CODE, "code": LONE}, "'code'"),
    ("run_code", {**RUN_CODE, "stdin": LONE}, "'stdin'"),
    ("run_code", {**RUN_CODE, "files": {LONE: "aGk="}}, "'files' path"),
    ("run_code", {**RUN_CODE, "fetch_files": [LONE]}, "'fetch_files' path"),
    ("math", {**MATH, "response": LONE}, "payload 'response'"),
    ("math", {**MATH, "answer": LONE}, "payload 'answer'"),
])
def test_text_with_a_lone_surrogate_is_invalid_input_naming_its_field(pipeline, payload, field):
    with pytest.raises(InvalidInput, match=rf"^{field}.* is not valid Unicode text: it holds a lone surrogate"):
        registry.get(pipeline).checked_admit(payload)


@pytest.mark.parametrize("pipeline, payload, field", [
    ("synthetic", {"times": [10 ** 400, 0.0]}, "synthetic time for stage 'compile'"),
    ("synthetic", {"times": {"execute": -(10 ** 400)}}, "synthetic time for stage 'execute'"),
    ("synthetic", {"times": [0.1, 0.0], "reward": 10 ** 400}, "synthetic 'reward'"),
    ("cuda", {**CUDA, "rtol": 10 ** 400}, "payload 'rtol'"),
    ("cuda", {**CUDA, "expected_output": [1, 10 ** 400]}, "cuda 'expected_output'"),
])
def test_an_integer_past_the_floats_is_invalid_input_naming_its_field(pipeline, payload, field):
    with pytest.raises(InvalidInput, match=rf"^{field}"):
        registry.get(pipeline).checked_admit(payload)


@pytest.mark.parametrize("pipeline, payload", [
    ("synthetic", {"times": ["x" * 100_000, 0.0]}),
    ("synthetic", {"times": {f"stage{i}": 1.0 for i in range(10_000)}}),
    ("synthetic", {"times": [0.1, 0.0], "reward": nested(500)}),
    ("cuda", {**CUDA, "nvcc_flags": [{"k" * 1000: ["v" * 1000] * 100}] * 100}),
    ("code", {**CODE, "language": "x" * 100_000}),
    ("code", {**CODE, "tests": {"cases": CODE["tests"], "time_limit_s": 10 ** 1000}}),
    ("code", {"response": "print(1)", "problem": ["p" * 1000] * 1000}),
])
def test_a_refusal_shows_a_long_or_deep_value_cut_short(pipeline, payload):
    with pytest.raises(InvalidInput) as refused:
        registry.get(pipeline).checked_admit(payload)
    assert len(str(refused.value)) < 400


def test_an_empty_math_reference_is_invalid_input_of_its_own_not_a_crash_of_admission():
    with pytest.raises(InvalidInput, match=r"^math 'answer' \(the reference\) is empty$"):
        math_pipeline.admit({**MATH, "answer": " \n"})


def test_the_client_refuses_a_payload_nested_past_its_encoder_as_invalid_input():
    with pytest.raises(InvalidInput, match="not JSON-serialisable: its arrays and objects nest too deeply"):
        canonical_json({"times": [0.1, 0.0], "junk": nested(100_000)})


def test_a_payload_nested_past_the_worker_s_decoder_is_invalid_input_not_a_crash():
    with pytest.raises(InvalidInput, match="nested too deeply for the stage worker to decode"):
        payload_of('{"junk": ' + "[" * 100_000 + "]" * 100_000 + "}")
