"""Judging a function-style problem (tests that call the response's function) across two processes.

The response's code runs in its own sandbox (`candidate.py` serving calls); the problem's tests run
in a contained child of the worker (`check.run_check`), with another uid, outside the response's PID
namespace, holding the tests in memory only. They share two pipes that carry plain data (`plain`).
The verdict comes back to the worker over the child's own result pipe. So the response can influence
its reward only through what its function does as the tests would see it in-process: the values it
returns, the ordinary exceptions it raises (`raised`), the changes it makes to its arguments (`arguments`).
"""

from __future__ import annotations

import ast
import functools
import importlib
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from workers import sandbox
from workers.judge.check import run_check

HERE = Path(__file__).resolve().parent
_SCRIPTS = {name: (HERE / name).read_text() for name in ("candidate.py", "plain.py")}
RESPONSE_LIMITS = sandbox.Limits(memory_bytes=1 * sandbox.GiB, nproc=16, file_bytes=16 * sandbox.MiB,
                                 disk_bytes=64 * sandbox.MiB)
TESTS_LIMITS = sandbox.Limits(memory_bytes=2 * sandbox.GiB, nproc=4, output_bytes=1 * sandbox.MiB)
GRACE_S = 1.0  # the tests child outlives the time limit by this much, to say which call timed out
_NEVER_PRELOAD = frozenset({"antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo"})


@dataclass(frozen=True)
class Verdict:
    status: str  # a Status value: ok, wrong, runtime_error, timeout, compile_error, infra_error
    message: str
    calls: int = 0


def judge(*, prompt: str, test: str, entry_point: str, program: str, time_limit_s: float) -> Verdict:
    """The verdict on `program` (the prompt and the response's code) against `test`'s check()."""
    _preload(prompt + "\n" + test)
    response_reads, tests_write = os.pipe()
    tests_read, response_writes = os.pipe()
    theirs = [response_reads, response_writes]  # the response's ends: closed here once its process holds them
    try:
        argv = [sandbox.python_executable(), "-I", "-S", "candidate.py", str(response_reads), str(response_writes),
                entry_point]
        limits = replace(RESPONSE_LIMITS, wall_s=time_limit_s + GRACE_S)
        with sandbox.spawn(argv, files={**_SCRIPTS, "solution.py": program}, limits=limits,
                           pass_fds=tuple(theirs)) as response:
            while theirs:
                os.close(theirs.pop())
            deadline = time.monotonic() + time_limit_s
            spec = {"prompt": prompt, "test": test, "entry_point": entry_point, "in_fd": tests_read,
                    "out_fd": tests_write, "deadline": deadline, "time_limit_s": time_limit_s}
            result = sandbox.call(run_check, spec, limits=replace(TESTS_LIMITS, wall_s=time_limit_s + GRACE_S),
                                  keep_fds=(tests_read, tests_write))
            return _verdict(result, response, time_limit_s)
    finally:
        for fd in (*theirs, tests_read, tests_write):
            os.close(fd)


def _verdict(result: sandbox.CallResult, response: sandbox.Spawned, time_limit_s: float) -> Verdict:
    if result.timed_out:
        return Verdict("timeout", f"the tests did not finish within the {time_limit_s:g} s time limit")
    if result.ended:  # the tests' process died on what the response sent back (too much of it, say)
        return Verdict("runtime_error", f"the tests could not finish with the response's values: {result.ended}")
    if result.error:
        return Verdict("infra_error", f"the tests could not run: {result.error}")
    v = result.value
    message = v.get("message", "")
    if v.get("gone"):
        status = response.wait(0.5)
        if why := response.failed_to_start():  # the machine's failure, never the response's verdict
            raise sandbox.SandboxUnavailable(why)
        if status is not None:
            message += f" (exit status {status})" if status < 128 else f" (killed by signal {status - 128})"
        launcher = response.stderr_head().decode(errors="replace").strip()
        if launcher and "Traceback" not in launcher:
            message += f"\n{launcher[-500:]}"
    return Verdict(v.get("status", "infra_error"), message, int(v.get("calls", 0)))


@functools.lru_cache(maxsize=1024)
def _preload(source: str) -> None:
    """Import here the standard-library modules the tests name: the contained child runs as a uid that
    may not read this interpreter's library, and a fork inherits what the worker has imported."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return  # the tests will say so themselves, as infra_error
    for node in ast.walk(tree):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
        for name in names:
            top = name.split(".")[0]
            if top in sys.stdlib_module_names and top not in _NEVER_PRELOAD:
                try:
                    importlib.import_module(name)
                except ImportError:
                    pass
