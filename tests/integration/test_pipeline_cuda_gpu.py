"""The `cuda` pipeline's execute stage on a real GPU, in the sandbox: skipped on a worker without one.

These run wherever a GPU and nvcc are present (a GPU worker, or a lent GPU machine): a kernel the response
defines, launched by the harness through the separately compiled link, computes in the sandbox with the GPU's
device nodes, and nothing else of the host, in its root; a wrong kernel is `wrong`; a code run never sees the GPU.
"""

from __future__ import annotations

import shutil

import pytest

from farm.results import Status
from workers import sandbox
from workers.pipelines.code import pipeline as code_pipeline
from workers.pipelines.cuda import gpu_present, pipeline
from workers.runner import score

pytestmark = [pytest.mark.timeout(300), pytest.mark.skipif(shutil.which("nvcc", path=sandbox.SANDBOX_PATH) is None
                                                           or gpu_present() is not None, reason="needs nvcc and a GPU")]

HARNESS = """#include <cstdio>
__global__ void scale(const float* x, float* y, float k, int n);  // the response's
int main() {
    const int n = 1 << 20;
    float *x, *y;
    cudaMalloc(&x, n * sizeof(float)); cudaMalloc(&y, n * sizeof(float));
    float* h = new float[n];
    for (int i = 0; i < n; i++) h[i] = i % 7;
    cudaMemcpy(x, h, n * sizeof(float), cudaMemcpyHostToDevice);
    scale<<<(n + 255) / 256, 256>>>(x, y, 3.0f, n);
    cudaError_t err = cudaDeviceSynchronize();
    cudaMemcpy(h, y, n * sizeof(float), cudaMemcpyDeviceToHost);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += h[i];
    printf("%s %.1f\\n", cudaGetErrorString(err), sum);
}
"""
RIGHT = """```cuda
__global__ void scale(const float* x, float* y, float k, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = k * x[i];
}
```"""
WRONG = RIGHT.replace("k * x[i]", "k + x[i]")
EXPECTED = "no error " + f"{sum(3.0 * (i % 7) for i in range(1 << 20)):.1f}"


def test_a_right_kernel_launched_by_the_harness_computes_on_the_gpu_in_the_sandbox():
    r = score(pipeline, {"response": RIGHT, "harness": HARNESS, "expected_output": EXPECTED})
    assert (r.status, r.reward) == (Status.OK, 1.0), r.message


def test_a_wrong_kernel_on_the_gpu_is_wrong():
    r = score(pipeline, {"response": WRONG, "harness": HARNESS, "expected_output": EXPECTED})
    assert (r.status, r.reward) == (Status.WRONG, 0.0), r.message


def test_a_whole_cuda_program_sees_the_gpu_and_only_the_sandboxs_root():
    program = """```cuda
#include <cstdio>
#include <dirent.h>
int main() {
    int n = 0; cudaGetDeviceCount(&n);
    const char* names[] = {"/var", "/run", "/sys", "/home", "/opt"};
    int seen = 0;
    for (const char* p : names) { DIR* d = opendir(p); if (d) { seen++; closedir(d); } }
    printf("%d %d\\n", n > 0, seen);
}
```"""
    r = score(pipeline, {"response": program, "expected_output": "1 0"})
    assert (r.status, r.reward) == (Status.OK, 1.0), r.message


def test_a_code_run_on_a_gpu_worker_does_not_see_the_gpu():
    probe = "```python\nimport glob\nprint(len(glob.glob('/dev/nvidia*')))\n```"
    r = score(code_pipeline, {"response": probe, "tests": [{"input": "", "output": "0"}]})
    assert r.status is Status.OK, r.message
