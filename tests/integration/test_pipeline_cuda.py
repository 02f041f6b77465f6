"""The `cuda` pipeline in-process with the real nvcc; this machine has no GPU, so execution must say so.

A harness that calls no CUDA API runs anywhere: those tests build the program with the compile stage and
judge it with `run_program` (the execute stage without its GPU check)."""

from __future__ import annotations

import shutil

import pytest

from farm.pipeline import StageContext
from farm.results import Outcome, Status
from workers import sandbox
from workers.pipelines.common import unpack_binary
from workers.pipelines.cuda import compare, compile_stage, gpu_present, pipeline, run_program
from workers.pipelines.cuda.record import NONCE_VARIABLE, split_record
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
__global__ void add(const float* a, const float* b, float* c, int n);  // the response's
int main() {
    const int n = 4; float *a, *b, *c;
    cudaMallocManaged(&a, n * sizeof(float)); cudaMallocManaged(&b, n * sizeof(float)); cudaMallocManaged(&c, n * sizeof(float));
    for (int i = 0; i < n; i++) { a[i] = i; b[i] = 2 * i; }
    add<<<1, n>>>(a, b, c, n);
    cudaDeviceSynchronize();
    for (int i = 0; i < n; i++) printf("%f\\n", c[i]);
}
"""
# a harness that calls no CUDA API: it runs on this machine
CPU_HARNESS = """#include <cstdio>
#include <cstdlib>
void fill(float* out, int n);  // the response's
int main() {
    float out[3];
    fill(out, 3);
    for (int i = 0; i < 3; i++) printf("%g\\n", out[i]);
    printf("%s\\n", getenv("FARM_CUDA_NONCE") ? "the nonce is visible" : "the nonce is gone");
    return 0;
}
"""
FILL = "```cuda\nvoid fill(float* out, int n) { for (int i = 0; i < n; i++) out[i] = 2.0f * i; }\n```"
CPU_PAYLOAD = {"response": FILL, "harness": CPU_HARNESS, "expected_output": "0 2 4 the nonce is gone"}
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
    ({"response": KERNEL, "expected_output": [True]}, "only finite numbers, not True"),
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


def test_a_harness_that_includes_the_response_is_refused_with_how_to_declare_instead():
    r = score(pipeline, dict(PAYLOAD, harness='#include "kernel.cu"\nint main() {}\n'))
    assert (r.status, r.stages) == (Status.INVALID_INPUT, ()) and "declare" in r.message


def test_a_harness_that_does_not_compile_on_its_own_is_invalid_input():
    r = score(pipeline, dict(PAYLOAD, harness="int main() { return undeclared; }\n"))
    assert (r.status, r.stage) == (Status.INVALID_INPUT, "compile") and "harness does not compile" in r.message


def test_a_function_the_harness_declares_but_the_response_lacks_is_a_compile_error():
    r = score(pipeline, dict(PAYLOAD, response="```cuda\n__global__ void sub(float* a) { a[0] = 0; }\n```"))
    assert (r.status, r.stage) == (Status.COMPILE_ERROR, "compile") and "undefined reference" in r.message


def built(payload: dict) -> bytes:
    ctx = StageContext("test", "test", "test", payload, {}, pipeline.stage("compile"), 120.0, "test")
    outcome = compile_stage(ctx)
    assert outcome.status is None, outcome.message
    return unpack_binary(outcome.carry)


def test_the_completion_record_is_required_and_stripped_before_the_comparison():
    r = run_program(CPU_PAYLOAD, built(CPU_PAYLOAD), 30.0)
    assert (r.status, r.reward) == (None, 1.0), r.message


def test_each_run_gets_a_fresh_nonce_that_only_the_farm_wrapper_sees():
    program = built(CPU_PAYLOAD)
    outputs = [sandbox.run(["./prog"], files={"prog": program}, env={NONCE_VARIABLE: nonce}).stdout.decode()
               for nonce in ("1111", "2222")]
    assert split_record(outputs[0], "1111") == ("0\n2\n4\nthe nonce is gone\n", 0)
    assert split_record(outputs[1], "2222") is not None and split_record(outputs[1], "1111") is None


def test_a_harness_that_exits_instead_of_returning_leaves_no_completion_record():
    payload = dict(CPU_PAYLOAD, harness=CPU_HARNESS.replace("return 0;", "exit(0);"))
    r = run_program(payload, built(payload), 30.0)
    assert (r.status, r.reward) == (Status.WRONG, 0.0) and "did not return from main" in r.message


def test_a_harness_main_that_returns_a_failure_status_is_wrong():
    payload = dict(CPU_PAYLOAD, harness=CPU_HARNESS.replace("return 0;", "return 3;"))
    r = run_program(payload, built(payload), 30.0)
    assert (r.status, r.reward) == (Status.WRONG, 0.0) and "returned 3" in r.message


def test_standard_library_code_in_both_the_harness_and_the_response_links_at_O0():
    harness = CPU_HARNESS.replace("#include <cstdio>", "#include <cstdio>\n#include <iostream>\n#include <vector>").replace(
        "fill(out, 3);", "std::vector<float> v(3); fill(v.data(), 3); std::copy(v.begin(), v.end(), out);")
    response = ("```cuda\n#include <iostream>\n#include <vector>\n__global__ void k(float* x) { x[0] = 1; }\n"
                "void fill(float* out, int n) { std::vector<float> v; for (int i = 0; i < n; i++) v.push_back(2.0f * i);\n"
                "  std::copy(v.begin(), v.end(), out); std::cerr << \"filled\" << std::endl; }\n```")
    payload = dict(CPU_PAYLOAD, harness=harness, response=response, nvcc_flags=["-O0"])
    r = run_program(payload, built(payload), 30.0)
    assert (r.status, r.reward) == (None, 1.0), r.message


def test_without_a_harness_the_response_is_a_whole_program_run_as_it_is():
    program = "```cuda\n#include <cstdio>\n__global__ void k() {}\nint main() { printf(\"7\\n\"); }\n```"
    payload = {"response": program, "expected_output": [7]}
    r = run_program(payload, built(payload), 30.0)
    assert (r.status, r.reward) == (None, 1.0), r.message


def _macro_bomb() -> str:
    """Ten levels of ten-fold macro expansion: 10^10 tokens for the preprocessor."""
    lines = ["#define L0 x"] + [f"#define L{i} " + " ".join([f"L{i - 1}"] * 10) for i in range(1, 11)]
    return "\n".join(lines) + "\nint L10;\n"
