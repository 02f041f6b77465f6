"""The `code` pipeline: an online judge for model-written Python or C++.

Stages: `compile` (cpu, C++ only: g++ in the sandbox) -> `fetch_tests` (io: the problem's tests from the
worker's test-case store, cached per worker; skipped when the payload carries its tests) -> `run` (cpu:
every case in the sandbox).

Payload (a JSON object):
- `response` (string, required): the model's text; code is taken from it as `workers.extract` documents
  (a python/cpp fenced block, else an untagged one, else any; with none, the raw text for Python, or
  for C++ text holding `int main(`); nothing -> `wrong`, generation failed, no stage visited. Admission and
  every stage plan the same payload, so a process reads a response once (`_chosen`: a small cache keyed by
  the response's text and language themselves, never by an id or anything a request carries).
- `language`: `python` or `cpp`; default: the block's tag, else C++ if it looks like C++, else Python.
- `problem`: a problem id: `HumanEval/<n>` (the bundled HumanEval set) or an id in the worker's store
  (`FARM_TESTCASES`, see `workers.testcases`); or `tests`: the problem inline,
  `{"cases": [{"input": ..., "output": ...}], "time_limit_s": 2}` (or just the list of cases).
- `reward`: `all` (default: 1.0 only when every case passes) or `fraction` (the share of cases passed).

Function problems (HumanEval's `check(candidate)`): prompt + completion (or prompt + the response's code
when it defines the entry point) runs in its own sandbox and serves calls; the tests run in another
contained process and call it across a pipe, arguments and return values as plain data
(`workers.judge`): the response can move its reward only through the values its function returns.
I/O problems compare stdout with the expected output token by token (whitespace-insensitive), in the
worker: the expected output never enters the sandbox.
Python runs as `python3 -I -S` (the standard library only; FARM_SANDBOX_PYTHON picks the interpreter),
C++ as `g++ -std=c++17 -O2`, each case in a fresh sandbox (`workers.sandbox`).

Statuses: all passed -> `ok`; a failing case -> its status (`wrong` for a wrong answer, a failed
assertion, a missing function or a return value that is not plain data; `runtime_error` for a crash,
an exception, a signal or too much output; `timeout`), with the reward the `reward` mode gives and the
first failing case under `details.first_failure`; a Python syntax error -> `compile_error`, as is code in
another language than a function problem's Python (a C++ answer to HumanEval). Whatever the response holds,
its failures are model failures: `invalid_input` comes only from the request's own fields.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, replace
from typing import Any, Mapping

from farm.pipeline import Admission, InvalidInput, Pipeline, Stage, StageContext, StageOutcome
from farm.results import Outcome, Status
from workers import sandbox
from workers.extract import INT_MAIN, extract_code, guess_language
from workers.judge.function import judge
from workers.pipelines.common import compiled, contained, shown, tail, text_field, unpack_binary
from workers.testcases import Case, Problem, check_id, fetch

LANGUAGES = ("python", "cpp")
COMPILE_LIMITS = sandbox.Limits(wall_s=60, memory_bytes=2 * sandbox.GiB, nproc=32, file_bytes=64 * sandbox.MiB)
RUN_LIMITS = sandbox.Limits(memory_bytes=1 * sandbox.GiB, nproc=16, file_bytes=16 * sandbox.MiB,
                            output_bytes=8 * sandbox.MiB, disk_bytes=64 * sandbox.MiB)
CODE_CAP = 16 * sandbox.MiB  # of the response's code: with the prompt, well within the sandbox's disk


@dataclass(frozen=True)
class Plan:
    language: str
    code: str
    problem_id: str | None
    inline: Problem | None
    mode: str


def plan(payload: Mapping[str, Any]) -> Plan | None:
    """What to judge, validated; None when the response holds no code (generation failed)."""
    response = text_field(payload, "response")
    language = payload.get("language")
    if language is not None and language not in LANGUAGES:
        raise InvalidInput(f"code 'language' must be one of {LANGUAGES}, not {shown(language)}")
    mode = payload.get("reward", "all")
    if mode not in ("all", "fraction"):
        raise InvalidInput(f"code 'reward' must be 'all' or 'fraction', not {shown(mode)}")
    problem_id, inline = payload.get("problem"), payload.get("tests")
    if (problem_id is None) == (inline is None):
        raise InvalidInput("code payload needs exactly one of 'problem' (an id) and 'tests' (the problem inline)")
    if problem_id is not None:
        check_id(problem_id)
    problem = None
    if inline is not None:
        problem = Problem.from_dict({"cases": inline} if isinstance(inline, list) else inline)
    chosen = _chosen(response, language)
    return Plan(*chosen, problem_id, problem, mode) if chosen else None


@functools.lru_cache(maxsize=4)
def _chosen(response: str, language: str | None) -> tuple[str, str] | None:
    """(language, code) of a response. Admission and every stage plan the same payload, so a process that runs
    several of them reads the response once: keyed by the texts themselves, the answer is theirs alone."""
    if language == "cpp":
        block = extract_code(response, ("cpp",), any_fence=True, raw_fallback=INT_MAIN)
    else:
        block = extract_code(response, LANGUAGES, any_fence=True, raw_fallback="always")
    if block is None or not block.code.strip():
        return None
    return language or guess_language(block, "python"), block.code


def admit(payload: Mapping[str, Any]) -> Admission:
    p = plan(payload)
    if p is None:
        return Admission((), Status.WRONG, 0.0, "no code found in the response", Outcome.GENERATION_FAILED)
    size = len(p.code.encode("utf-8"))
    if size > CODE_CAP:  # it would not fit the sandbox's disk, and failing there would read as the farm's fault
        return Admission((), Status.COMPILE_ERROR, 0.0, f"the response's code is {size >> 20} MiB, over the "
                         f"{CODE_CAP >> 20} MiB a program may be", Outcome.COMPILE_FAILED)
    compiles = p.language == "cpp" and not (p.inline is not None and p.inline.kind == "function")
    stages = (("compile",) if compiles else ()) + (("fetch_tests",) if p.inline is None else ()) + ("run",)
    return Admission(stages)


@contained
def compile_stage(ctx: StageContext) -> StageOutcome:
    p = plan(ctx.payload)
    limits = replace(COMPILE_LIMITS, wall_s=ctx.timeout_s)
    result = sandbox.run(["g++", "-std=c++17", "-O2", "-pipe", "-o", "main", "main.cpp"],
                         files={"main.cpp": p.code}, limits=limits, collect=("main",))
    return compiled(result, "main", "g++")


def fetch_stage(ctx: StageContext) -> StageOutcome:
    problem = fetch(plan(ctx.payload).problem_id)
    return StageOutcome(None, carry={"problem": problem.to_dict()})


@contained
def run_stage(ctx: StageContext) -> StageOutcome:
    p = plan(ctx.payload)
    problem = p.inline or Problem.from_dict(ctx.carry["problem"])
    if problem.kind == "function":
        if p.language != "python":  # the response's choice (or its fence's): its failure, not the request's
            return StageOutcome(Status.COMPILE_ERROR, message=f"problem {problem.id!r} checks a Python function "
                                f"{problem.entry_point!r}; the response's code is {p.language}, not Python",
                                outcome=Outcome.COMPILE_FAILED, details={"passed": 0, "total": 1})
        return _run_function(p, problem, ctx.timeout_s)
    return _run_io(p, problem, ctx)


def _program(p: Plan, problem: Problem) -> str:
    """prompt + completion, or prompt + the response's own definition of the entry point."""
    defines = f"def {problem.entry_point}(" in p.code
    return problem.prompt + ("\n\n" if defines else "") + p.code


def _run_function(p: Plan, problem: Problem, budget_s: float) -> StageOutcome:
    v = judge(prompt=problem.prompt, test=problem.test, entry_point=problem.entry_point,
              program=_program(p, problem), time_limit_s=min(problem.time_limit_s, budget_s))
    if v.status == "ok":
        return StageOutcome(None, reward=1.0, outcome=Outcome.SUCCESS, details={"passed": 1, "total": 1, "calls": v.calls})
    status = Status(v.status)
    if status is Status.INFRA_ERROR:
        return StageOutcome(status, message=f"problem {problem.id!r}: {v.message}")
    if status is Status.COMPILE_ERROR:
        return StageOutcome(status, message=v.message, outcome=Outcome.COMPILE_FAILED, details={"passed": 0, "total": 1})
    message = f"check({problem.entry_point}) failed: {v.message}"
    return StageOutcome(status, message=message, outcome=Outcome.EXECUTE_ERROR,
                        details={"passed": 0, "total": 1, "calls": v.calls,
                                 "first_failure": {"case": 0, "status": status.value, "message": v.message[:2000]}})


def _failure(r: sandbox.RunResult) -> tuple[Status, str]:
    if r.timed_out:
        return Status.TIMEOUT, r.describe()
    return Status.RUNTIME_ERROR, r.describe()


def _run_io(p: Plan, problem: Problem, ctx: StageContext) -> StageOutcome:
    if p.language == "cpp":
        files, argv = {"main": unpack_binary(ctx.carry)}, ["./main"]
    else:
        files, argv = {"solution.py": p.code}, [sandbox.python_executable(), "-I", "-S", "solution.py"]
    deadline = time.monotonic() + ctx.timeout_s
    passed, first = 0, None
    for i, case in enumerate(problem.cases):
        left = deadline - time.monotonic()
        if left <= 0:
            first = first or _case_failure(i, case, Status.TIMEOUT, f"the stage's {ctx.timeout_s:g} s budget ran out", b"")
            break
        limits = replace(RUN_LIMITS, wall_s=min(problem.time_limit_s, left))
        r = sandbox.run(argv, files=files, stdin=case.input.encode(), limits=limits)
        if r.ok and r.stdout.split() == case.output.encode().split():
            passed += 1
            continue
        status, why = _failure(r) if not r.ok else (Status.WRONG, "wrong answer")
        if first is None:
            first = _case_failure(i, case, status, why, r.stdout)
        if p.mode == "all":
            break
    total = len(problem.cases)
    if first is None:
        return StageOutcome(None, reward=1.0, outcome=Outcome.SUCCESS, details={"passed": passed, "total": total})
    reward = passed / total if p.mode == "fraction" and total else 0.0
    status = Status(first["status"])
    return StageOutcome(status, reward=reward, message=f"case {first['case']}: {first['message']} ({passed}/{total} passed)",
                        outcome=Outcome.EXECUTE_ERROR, details={"passed": passed, "total": total, "first_failure": first})


def _case_failure(i: int, case: Case, status: Status, why: str, got: bytes) -> dict[str, Any]:
    return {"case": i, "status": status.value, "message": why, "input": tail(case.input, 500),
            "expected": tail(case.output, 500), "got": tail(got, 500)}


pipeline = Pipeline(
    "code",
    (
        Stage("compile", "cpu", 1.0, 60.0, compile_stage),
        Stage("fetch_tests", "io", 0.1, 30.0, fetch_stage),
        Stage("run", "cpu", 1.0, 120.0, run_stage),
    ),
    admit,
    description="online judge: extract Python/C++, compile C++ with g++, run the problem's tests in the sandbox",
)
