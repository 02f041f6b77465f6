"""The `cuda` pipeline (the paper's workload): `compile` the kernel with nvcc on a CPU worker, `execute`
the binary on a GPU worker (one worker owns one GPU), compare its output with the reference.

Payload (a JSON object):
- `response` (string, required): the model's text. The kernel is taken as `workers.extract` documents:
  the last ```cuda / ```cu / ```cpp / ```c++ / ```c block, else an untagged one, else any fenced block,
  else (no fence) the raw text when it contains `__global__`, from its first line of code. Nothing ->
  `wrong`, generation failed, no stage visited. Read once per process for admission and the compile stage
  (`_kernel`, keyed by the response's text itself).
- `harness` (string, optional): a CUDA source with `main()` that declares the kernels and host functions
  it uses from the response (`__global__ void add(const float*, const float*, float*, int);`) and calls
  them. The response (`kernel.cu`) and the harness (`main.cu`) are compiled apart and linked
  (`harness`); a harness that `#include`s "kernel.cu" is `invalid_input`. The harness must return
  from `main` (not `exit()`) and leave stdout and std::cout where they were (no freopen, no
  `sync_with_stdio(false)`): the farm's wrapper then writes a completion record (`record`) that the
  execute stage requires; a status other than 0 from `main` is `wrong`. The response's object is checked
  before linking (`checks`: no `main`, no constructors, no replacing the harness's or the libraries'
  functions, no exit/signals/files/environment/threads from its host code) -> `compile_error` saying what
  was found. Template kernels have internal linkage on the host: a harness launches them through a
  function the response exports. Without a harness the response must be a whole program with `main()`:
  it is compiled and run as it is, there being no harness to protect.
- `expected_output` (required): what the program must print: a list of numbers (compared with
  `rtol`/`atol`, default 1e-3 / 1e-5, to every whitespace-separated token of stdout, same count), or a
  string (numbers compared the same way when every token of it is a number, else exact text after
  whitespace normalisation).
- `stdin` (string, optional): the program's input. `nvcc_flags` (optional list): extra flags from
  `-O0..-O3`, `-arch=sm_NN`, `-std=c++NN`, `--use_fast_math`, `-lineinfo`.

Statuses: nvcc fails -> `compile_error`; compile over its 120 s -> `timeout` at `compile`; the program
crashes -> `runtime_error`; over 60 s -> `timeout` at `execute`; a mismatch -> `wrong` (first mismatch in
`details`); a worker without a GPU -> `infra_error` at `execute` (never a fake success).

The binary goes from compile to execute in the carry (`workers.pipelines.common`). On the GPU the
address-space limit is off (the CUDA driver maps huge virtual ranges) and RLIMIT_DATA caps memory instead;
CUDA_VISIBLE_DEVICES passes through so the program sees only its worker's GPU.
"""

from __future__ import annotations

import functools
import glob
import math
import os
import re
import shutil
from dataclasses import replace
from typing import Any, Mapping

from farm.pipeline import Admission, InvalidInput, Pipeline, Stage, StageContext, StageOutcome
from farm.results import Outcome, Status
from workers import sandbox
from workers.extract import extract_code
from workers.pipelines.common import (compiled, contained, finite, finite_list, number_field, shown, tail, text_field,
                                     unpack_binary)
from workers.pipelines.cuda.harness import build, harness_problem
from workers.pipelines.cuda.record import NONCE_VARIABLE, new_nonce, split_record

COMPILE_LIMITS = sandbox.Limits(memory_bytes=8 * sandbox.GiB, nproc=64, file_bytes=256 * sandbox.MiB,
                                disk_bytes=1 * sandbox.GiB)
EXECUTE_LIMITS = sandbox.Limits(memory_bytes=None, data_bytes=16 * sandbox.GiB, nproc=32, file_bytes=64 * sandbox.MiB,
                                output_bytes=16 * sandbox.MiB, gpu=True)
NO_RECORD = ("the harness did not return from main: the program exited with status 0 but without the farm's "
             "completion record (something called exit or the exit system call before the harness finished)")
_FLAG = re.compile(r"^(-O[0-3]|-arch=sm_\d{2,3}a?|-std=c\+\+\d\d|--use_fast_math|-lineinfo)$")


def _code(payload: Mapping[str, Any]) -> str | None:
    return _kernel(text_field(payload, "response"))


@functools.lru_cache(maxsize=4)
def _kernel(response: str) -> str | None:
    """The response's CUDA code, read once per process for admission and the compile stage alike (keyed by the
    text itself, so the answer is the text's alone)."""
    block = extract_code(response, ("cuda",), any_fence=True, raw_fallback=r"__global__")
    return block.code if block is not None and block.code.strip() else None


def _flags(payload: Mapping[str, Any]) -> list[str]:
    flags = payload.get("nvcc_flags", [])
    if not isinstance(flags, list) or not all(isinstance(f, str) and _FLAG.match(f) for f in flags):
        raise InvalidInput(f"cuda 'nvcc_flags' must be a list of allowed flags ({_FLAG.pattern}), not {shown(flags)}")
    return flags


def expected_of(payload: Mapping[str, Any]) -> list[float] | str:
    expected = payload.get("expected_output")
    if isinstance(expected, list):
        numbers = finite_list(expected) or [finite(x) for x in expected]
        if None in numbers:
            raise InvalidInput(f"cuda 'expected_output' as a list must hold only finite numbers, not "
                               f"{shown(expected[numbers.index(None)])}")
        return numbers
    if isinstance(expected, str):
        numbers = _numbers(expected)
        return numbers if numbers is not None and numbers else expected
    raise InvalidInput("cuda payload needs 'expected_output': a list of numbers or the expected stdout text")


def _numbers(text: str) -> list[float] | None:
    try:
        return list(map(float, text.split()))
    except ValueError:
        return None


def admit(payload: Mapping[str, Any]) -> Admission:
    problem = harness_problem(text_field(payload, "harness", required=False))
    if problem:
        raise InvalidInput(problem)
    text_field(payload, "stdin", required=False)
    if not isinstance(payload.get("expected_output"), str):  # text is always valid: the stage reads its numbers
        expected_of(payload)
    _flags(payload)
    number_field(payload, "rtol", 1e-3)
    number_field(payload, "atol", 1e-5)
    if _code(payload) is None:
        return Admission((), Status.WRONG, 0.0, "no CUDA code found in the response", Outcome.GENERATION_FAILED)
    return Admission(("compile", "execute"))


@contained
def compile_stage(ctx: StageContext) -> StageOutcome:
    if shutil.which("nvcc", path=sandbox.SANDBOX_PATH) is None:
        return StageOutcome(Status.INFRA_ERROR, message="nvcc is not installed on this worker")
    harness = text_field(ctx.payload, "harness", required=False)
    if harness:
        return build(_code(ctx.payload), harness, _flags(ctx.payload), ctx.timeout_s, COMPILE_LIMITS)
    limits = replace(COMPILE_LIMITS, wall_s=ctx.timeout_s)
    argv = ["nvcc", "-O2", *_flags(ctx.payload), "-o", "prog", "kernel.cu"]
    return compiled(sandbox.run(argv, files={"kernel.cu": _code(ctx.payload)}, limits=limits, collect=("prog",)),
                    "prog", "nvcc")


def gpu_present() -> str | None:
    """None when this worker can reach a GPU, else why not."""
    if not os.path.exists("/dev/nvidiactl") or not glob.glob("/dev/nvidia[0-9]*"):
        return "this worker has no GPU (no /dev/nvidia* device): the execute stage needs a GPU worker"
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return "CUDA_VISIBLE_DEVICES hides every GPU from this worker"
    return None


@contained
def execute_stage(ctx: StageContext) -> StageOutcome:
    missing = gpu_present()
    if missing:
        return StageOutcome(Status.INFRA_ERROR, message=missing)
    return run_program(ctx.payload, unpack_binary(ctx.carry), ctx.timeout_s)


def run_program(payload: Mapping[str, Any], binary: bytes, timeout_s: float) -> StageOutcome:
    """Run the compiled program in the sandbox and judge it: the execute stage without its GPU check (a
    program that makes no CUDA call runs anywhere). With a harness the output must end with this run's
    completion record, which is stripped before the comparison."""
    limits = replace(EXECUTE_LIMITS, wall_s=timeout_s)
    stdin = text_field(payload, "stdin", required=False).encode()
    nonce = new_nonce() if text_field(payload, "harness", required=False) else None
    env = {NONCE_VARIABLE: nonce} if nonce else {}
    r = sandbox.run(["./prog"], files={"prog": binary}, stdin=stdin, limits=limits, env=env)
    failed = {"outcome": Outcome.EXECUTE_ERROR}
    if r.timed_out:
        return StageOutcome(Status.TIMEOUT, message=r.describe(), **failed)
    output = r.stdout.decode("utf-8", errors="replace")
    record = split_record(output, nonce) if nonce else None
    if nonce and record is None and r.returncode == 0 and not r.output_exceeded:
        return StageOutcome(Status.WRONG, message=NO_RECORD, **failed)
    if not r.ok and not (record and r.returncode == record[1] & 0xFF):
        return StageOutcome(Status.RUNTIME_ERROR, message=f"{r.describe()}\n{tail(r.stderr)}".rstrip(), **failed)
    if record:
        output, status = record
        if status != 0:
            message = f"the harness's main returned {status}\n{tail(r.stderr)}".rstrip()
            return StageOutcome(Status.WRONG, message=message, **failed)
    rtol, atol = number_field(payload, "rtol", 1e-3), number_field(payload, "atol", 1e-5)
    mismatch = compare(output, expected_of(payload), rtol, atol)
    if mismatch:
        return StageOutcome(Status.WRONG, message=mismatch["message"], details={"mismatch": mismatch}, **failed)
    return StageOutcome(None, reward=1.0, outcome=Outcome.SUCCESS)


def compare(output: str, expected: list[float] | str, rtol: float, atol: float) -> dict[str, Any] | None:
    """None when the output matches; else where and how it differs."""
    if isinstance(expected, str):
        if output.split() == expected.split():
            return None
        return {"message": "the output differs from the expected text", "got": tail(output, 500)}
    got = _numbers(output)
    if got is None:
        return {"message": "the output is not all numbers", "got": tail(output, 500)}
    if len(got) != len(expected):
        return {"message": f"printed {len(got)} numbers, expected {len(expected)}"}
    for i, (g, e) in enumerate(zip(got, expected)):
        if not (math.isclose(g, e, rel_tol=rtol, abs_tol=atol) or (math.isnan(g) and math.isnan(e))):
            return {"message": f"value {i} is {g!r}, expected {e!r} (rtol {rtol:g}, atol {atol:g})", "index": i}
    return None


pipeline = Pipeline(
    "cuda",
    (
        Stage("compile", "cpu", 1.0, 120.0, compile_stage),
        Stage("execute", "gpu", 8.0, 60.0, execute_stage),
    ),
    admit,
    description="extract a CUDA kernel, compile with nvcc on CPUs, run on a GPU, compare with the reference",
)
