"""SandboxFusion's `/run_code` answer, built by the `run_code` stages as their result's `details`, so the
gateway (`farm.app.gateway.sandbox_fusion`) copies it as it is.

The answer: `status` ("Success", "Failed" or "SandboxError"), `message`, `compile_result` and `run_result`
(a CommandRunResult or null), `executor_pod_name` (the worker's name, or null) and `files` ({path: base64}).
A CommandRunResult: `status` ("Finished", "Error" or "TimeLimitExceeded"), `execution_time` (wall seconds),
`return_code` (the exit status, -N for signal N; null past the time limit, as SandboxFusion leaves it),
`stdout`, `stderr` (UTF-8, undecodable bytes replaced, each cut at `OUTPUT_CAP`, 1 MiB).

The status follows SandboxFusion's rules (its `sandbox_api.parse_run_status`): a result with status Error ->
SandboxError; else a time limit or a non-zero return code -> Failed; else Success.
"""

from __future__ import annotations

from typing import Any, Mapping

from workers import sandbox

OUTPUT_CAP = sandbox.MiB  # of stdout and of stderr, each, in a CommandRunResult
STATUSES = ("Success", "Failed", "SandboxError")


def text(data: bytes) -> str:
    return data[:OUTPUT_CAP].decode("utf-8", errors="replace")


def command_result(r: sandbox.RunResult) -> dict[str, Any]:
    """A sandboxed run as SandboxFusion's CommandRunResult."""
    if r.timed_out:
        status, code = "TimeLimitExceeded", None
    else:
        status, code = "Finished", (-r.signal if r.signal is not None else r.returncode)
    return {"status": status, "execution_time": round(r.wall_s, 6), "return_code": code,
            "stdout": text(r.stdout), "stderr": text(r.stderr)}


def run_status(compile_result: Mapping[str, Any] | None, run_result: Mapping[str, Any] | None) -> str:
    """SandboxFusion's status for these results."""
    results = [r for r in (compile_result, run_result) if r is not None]
    if any(r["status"] == "Error" for r in results):
        return "SandboxError"
    if any(r["status"] == "TimeLimitExceeded" or r.get("return_code") not in (0, None) for r in results):
        return "Failed"
    return "Success"


def answer(worker: str, *, compile_result: Mapping[str, Any] | None = None,
           run_result: Mapping[str, Any] | None = None, files: Mapping[str, str] | None = None,
           message: str = "", status: str | None = None) -> dict[str, Any]:
    """The answer; its status by SandboxFusion's rules unless given (a farm limit the results do not show)."""
    status = status or run_status(compile_result, run_result)
    if status not in STATUSES:
        raise ValueError(f"a SandboxFusion status is one of {STATUSES}, not {status!r}")
    return {"status": status, "message": message, "compile_result": dict(compile_result) if compile_result else None,
            "run_result": dict(run_result) if run_result else None, "executor_pod_name": worker or None,
            "files": dict(files or {})}


def sandbox_error(worker: str, message: str) -> dict[str, Any]:
    """The answer when the farm could not run the code at all (no containment, a crash): nothing ran."""
    return answer(worker, message=message, status="SandboxError")
