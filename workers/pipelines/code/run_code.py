"""The `run_code` pipeline: run a program with its stdin and files and say how it ended, as SandboxFusion's
`/run_code` does, for trainers whose reward code calls a sandbox (verl's and ROLL's SandboxFusion paths,
through the gateway's `/run_code`, which submits each call as one request here).

Stages: `compile` (cpu, C++ only: `g++ -std=c++17 -O2` in the sandbox, the request's files beside `main.cpp`,
so headers among them are found) -> `run` (cpu: the program with its stdin, its files in its working directory,
then `fetch_files` read back).

Payload: SandboxFusion's request, `code`, `language`, `stdin`, `compile_timeout`, `run_timeout`,
`memory_limit_MB`, `files` ({relative path: base64, or null: no file written, as SandboxFusion skips it}) and
`fetch_files` ([relative path]); `workers.pipelines.code.run_code_payload` checks it and documents each limit.
The farm runs `python` as `python3 -E -s -S main.py` (the standard library only, as the `code` pipeline's
`-I -S`, except that the script's directory stays on sys.path: modules placed by `files` import, as they do
on SandboxFusion) and `cpp` as `./main`; both with the `code` pipeline's containment and limits
(`workers.sandbox`: no network, a uid of its own, its process, file, disk and output caps), the request's
timeouts and memory limit in place of the code pipeline's.

Result: `details` is SandboxFusion's answer (`workers.pipelines.code.run_code_shape`: `status`, `message`,
`compile_result`, `run_result`, `executor_pod_name`, `files`). `fetch_files` come back under the names asked,
base64, each and all together at most `FETCH_BYTES` (4 MiB); one missing, not a regular file (a symlink is
not followed) or past the cap is left out (the message names it). Status and reward:
- Success -> `ok`, reward 1.0; anything else reward 0.0;
- Failed: g++ failed (or made a binary over 16 MiB) -> `compile_error`; compile or run past its time limit ->
  `timeout`; the program's non-zero exit, a signal or its output past 8 MiB -> `runtime_error`;
- SandboxError: a worker that cannot contain the code -> `infra_error`, as in every pipeline.
- A language SandboxFusion knows but the farm does not run (go, java, ...) is decided at admission, no stage
  visited: `invalid_input`, saying "language 'go' is not supported by this farm (supported: python, cpp)".
  An admission carries no `details` (farm.pipeline.Admission), so that request's answer is the gateway's
  SandboxError built from the result's message; sending it through a stage only to refuse it would take a
  worker and a queue slot for nothing.
A stage's timeout is the longest run the payload may ask (`MAX_TIMEOUT_S`, 60 s) plus `SETUP_S` (10 s) for
writing the files and reading them back; an operator's shorter stage timeout cuts the program's time with it.
"""

from __future__ import annotations

import base64
import functools
from dataclasses import replace
from typing import Any, Callable, Mapping

from farm.pipeline import Admission, Pipeline, Stage, StageContext, StageOutcome
from farm.results import Outcome, Status
from workers import sandbox
from workers.pipelines.code import COMPILE_LIMITS, RUN_LIMITS
from workers.pipelines.common import BINARY_CAP, compiled, contained, unpack_binary
from workers.pipelines.code.run_code_payload import MAX_TIMEOUT_S, PROGRAM_FILES, Run, read
from workers.pipelines.code.run_code_shape import answer, command_result, sandbox_error

SETUP_S = 10.0
FETCH_BYTES = 4 * sandbox.MiB
GXX = ("g++", "-std=c++17", "-O2", "-pipe", "-o", "main", "main.cpp")


def unsupported(language: str) -> str:
    return f"language {language!r} is not supported by this farm (supported: {', '.join(PROGRAM_FILES)})"


def admit(payload: Mapping[str, Any]) -> Admission:
    run = read(payload)
    if not run.supported:
        return Admission((), Status.INVALID_INPUT, 0.0, unsupported(run.language))
    return Admission((("compile",) if run.language == "cpp" else ()) + ("run",))


def _answered(stage: Callable[[StageContext], StageOutcome]) -> Callable[[StageContext], StageOutcome]:
    """A contained stage whose every verdict carries SandboxFusion's answer (SandboxError where none was built)."""
    guarded = contained(stage)

    @functools.wraps(stage)
    def run(ctx: StageContext) -> StageOutcome:
        outcome = guarded(ctx)
        if outcome.status is not None and not outcome.details:
            return replace(outcome, details=sandbox_error(ctx.worker, outcome.message))
        return outcome

    run.contained = True  # type: ignore[attr-defined]
    return run


def _wall(requested_s: float, ctx: StageContext) -> float:
    """The program's time: what was asked, within the stage's timeout less the time to set the run up."""
    return min(requested_s, max(ctx.timeout_s - SETUP_S, ctx.timeout_s / 2))


@_answered
def compile_stage(ctx: StageContext) -> StageOutcome:
    run = read(ctx.payload)
    limits = replace(COMPILE_LIMITS, wall_s=_wall(run.compile_timeout_s, ctx))
    r = sandbox.run(GXX, files={**run.files, "main.cpp": run.code}, limits=limits, collect=("main",),
                    collect_bytes=BINARY_CAP)
    outcome, result = compiled(r, "main", "g++"), command_result(r)
    if outcome.status is None:
        return replace(outcome, carry={**outcome.carry, "compile_result": result})
    # Failed even where g++ exited 0: its binary is missing or over the cap the farm carries to the run stage
    details = answer(ctx.worker, compile_result=result, message=outcome.message.split("\n", 1)[0].rstrip(":"),
                     status="Failed")
    return replace(outcome, details=details)


@_answered
def run_stage(ctx: StageContext) -> StageOutcome:
    run = read(ctx.payload)
    if run.language == "cpp":
        files, argv = {**run.files, "main": unpack_binary(ctx.carry)}, ["./main"]
    else:
        files, argv = {**run.files, "main.py": run.code}, [sandbox.python_executable(), "-E", "-s", "-S", "main.py"]
    limits = replace(RUN_LIMITS, wall_s=_wall(run.run_timeout_s, ctx), memory_bytes=run.memory_bytes)
    r = sandbox.run(argv, files=files, stdin=run.stdin, limits=limits,
                    collect=tuple(dict.fromkeys(clean for _, clean in run.fetch)), collect_bytes=FETCH_BYTES)
    fetched, left_out = _fetched(run, r.files)
    note = ""
    if left_out:
        note = f"fetch_files left out (missing, not a regular file, or past {FETCH_BYTES >> 20} MiB): {left_out}"
    result, compile_result = command_result(r), ctx.carry.get("compile_result")
    if r.ok:
        details = answer(ctx.worker, compile_result=compile_result, run_result=result, files=fetched, message=note)
        return StageOutcome(None, reward=1.0, message=note, outcome=Outcome.SUCCESS, details=details)
    why = "; ".join(filter(None, (r.describe(), note)))
    details = answer(ctx.worker, compile_result=compile_result, run_result=result, files=fetched, message=why,
                     status="Failed")
    return StageOutcome(Status.TIMEOUT if r.timed_out else Status.RUNTIME_ERROR, message=why,
                        outcome=Outcome.EXECUTE_ERROR, details=details)


def _fetched(run: Run, found: Mapping[str, bytes]) -> tuple[dict[str, str], list[str]]:
    """The fetched files under the names asked, base64, within FETCH_BYTES in all; and the names left out."""
    fetched: dict[str, str] = {}
    left_out: list[str] = []
    total = 0
    for asked, clean in run.fetch:
        if asked in fetched:
            continue
        data = found.get(clean)
        if data is None or total + len(data) > FETCH_BYTES:
            left_out.append(asked)
            continue
        total += len(data)
        fetched[asked] = base64.b64encode(data).decode("ascii")
    return fetched, left_out


pipeline = Pipeline(
    "run_code",
    (
        Stage("compile", "cpu", 1.0, MAX_TIMEOUT_S + SETUP_S, compile_stage),
        Stage("run", "cpu", 1.0, MAX_TIMEOUT_S + SETUP_S, run_stage),
    ),
    admit,
    description="SandboxFusion's run_code: run Python or C++ with stdin and files in the sandbox, say how it ended",
)
