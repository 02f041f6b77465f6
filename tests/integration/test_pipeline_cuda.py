"""The `cuda` pipeline in-process with the real nvcc; this machine has no GPU, so execution must say so."""

from __future__ import annotations

import shutil

import pytest

from farm.results import Outcome, Status
from workers.pipelines.cuda import compare, gpu_present, pipeline
from workers.runner import score

pytestmark = [pytest.mark.timeout(60), pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")]

KERNEL = """Here is the kernel:
```cuda
__global__ void add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
```"""
HARNESS = """#include <cstdio>
#include "kernel.cu"
int main() {
    const int n = 4; float *a, *b, *c;
    cudaMallocManaged(&a, n * sizeof(float)); cudaMallocManaged(&b, n * sizeof(float)); cudaMallocManaged(&c, n * sizeof(float));
    for (int i = 0; i < n; i++) { a[i] = i; b[i] = 2 * i; }
    add<<<1, n>>>(a, b, c, n);
    cudaDeviceSynchronize();
    for (int i = 0; i < n; i++) printf("%f\\n", c[i]);
}
"""
PAYLOAD = {"response": KERNEL, "harness": HARNESS, "expected_output": [0, 3, 6, 9]}


@pytest.mark.skipif(gpu_present() is None, reason="this test is about a worker without a GPU")
def test_a_correct_kernel_compiles_and_ends_in_infra_error_without_a_gpu():
    r = score(pipeline, PAYLOAD)
    assert [(s.name, s.status) for s in r.stages] == [("compile", "passed"), ("execute", "infra_error")]
    assert r.status is Status.INFRA_ERROR and r.stage == "execute" and "no GPU" in r.message and r.reward == 0.0


def test_a_kernel_with_a_syntax_error_is_a_compile_error():
    broken = dict(PAYLOAD, response="```cuda\n__global__ void add(float* a { a[0] = 1; }\n```")
    r = score(pipeline, broken)
    assert (r.status, r.stage, r.outcome) == (Status.COMPILE_ERROR, "compile", Outcome.COMPILE_FAILED)
    assert "error" in r.message


def test_a_response_without_code_is_wrong_and_visits_no_stage():
    r = score(pipeline, dict(PAYLOAD, response="I could not write this kernel."))
    assert (r.status, r.outcome, r.stages) == (Status.WRONG, Outcome.GENERATION_FAILED, ())


def test_unfenced_code_with_a_global_function_is_taken():
    r = score(pipeline, dict(PAYLOAD, response="Sure.\n" + KERNEL.split("```cuda\n")[1].split("```")[0]))
    assert r.stages and r.stages[0].status == "passed"


def test_a_compile_over_its_timeout_is_a_timeout_at_compile():
    from farm.knobs import Knobs

    bomb = "```cuda\n" + _macro_bomb() + "\n```"
    r = score(pipeline, dict(PAYLOAD, response=bomb), knobs=Knobs().with_stage("cuda.compile", timeout_s=12))
    assert (r.status, r.stage) == (Status.TIMEOUT, "compile") and r.stages[0].seconds < 16  # a plain kernel: ~5 s


@pytest.mark.parametrize("payload, words", [
    ({"response": KERNEL}, "expected_output"),
    ({"response": KERNEL, "expected_output": [1], "nvcc_flags": ["-Xcompiler", "-fplugin=x"]}, "nvcc_flags"),
    ({"response": KERNEL, "expected_output": [True]}, "only numbers"),
])
def test_a_malformed_payload_is_refused_with_a_reason(payload, words):
    r = score(pipeline, payload)
    assert r.status is Status.INVALID_INPUT and words in r.message


def test_numbers_match_within_the_tolerance_and_text_matches_exactly():
    assert compare("1.0005 2\n", [1.0, 2.0], rtol=1e-3, atol=0) is None
    assert compare("1.1 2", [1.0, 2.0], rtol=1e-3, atol=0)["index"] == 0
    assert "3 numbers" in compare("1 2 3", [1.0, 2.0], rtol=1e-3, atol=0)["message"]
    assert compare("PASS  \n", "PASS", rtol=0, atol=0) is None
    assert compare("FAIL", "PASS", rtol=0, atol=0) is not None


def _macro_bomb() -> str:
    """Ten levels of ten-fold macro expansion: 10^10 tokens for the preprocessor."""
    lines = ["#define L0 x"] + [f"#define L{i} " + " ".join([f"L{i - 1}"] * 10) for i in range(1, 11)]
    return "\n".join(lines) + "\nint L10;\n"
