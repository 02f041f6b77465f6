"""A SandboxFusion-compatible `/run_code` and `/v1/ping`, so verl's `sandbox_fusion.url`
(`http://GATEWAY/t/<token>/run_code`), ROLL's code sandbox and the `sandbox-fusion` client
(`endpoint="http://GATEWAY/t/<token>"`) run their code on the farm's sandbox, queues and elastic pools.

Each call is one request of the `run_code` pipeline (`workers.pipelines.code.run_code`), in the tenant's rolling
batch. As SandboxFusion answers: HTTP 200 with `status` Success, Failed or SandboxError; a language outside
SandboxFusion's list is refused with 422 as SandboxFusion's own validation does. A run whose result is not
in within `wait_s` answers 504, which verl retries: the retry waits on the same request. An identical run
within the hour is answered from the first one's result, never from one the farm caused (`rolling.runs_again`;
the tenant's `replay_identical` turns it off).
"""

from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from farm.app.gateway.rolling import sample_key
from farm.app.gateway.service import Caller, Gateway
from farm.app.gateway.web import ERRORS, caller, gateway
from farm.results import Result, Status
from workers.pipelines.code.run_code_shape import sandbox_error

router = APIRouter(tags=["sandbox-fusion"], responses=ERRORS)

# SandboxFusion's languages (its RunCodeRequest.language); those the farm does not run answer SandboxError
Language = Literal["python", "python2", "cpp", "nodejs", "go", "go_test", "java", "php", "csharp", "bash",
                   "typescript", "sql", "rust", "cuda", "lua", "R", "perl", "D_ut", "ruby", "scala", "julia",
                   "pytest", "junit", "kotlin_script", "jest", "verilog", "python_gpu", "lean", "swift", "racket",
                   "gtest", "react"]


class RunCodeRequest(BaseModel):
    compile_timeout: float = Field(10, description="compile timeout for compiled languages")
    run_timeout: float = Field(10, description="code run timeout")
    memory_limit_MB: int = Field(-1, description="memory limit of the run; -1: the farm's default")
    code: str = Field(description="the code to run")
    stdin: Optional[str] = Field(None, description="optional string to pass into stdin")
    language: Language = Field(description="the language or execution mode to run the code")
    files: Dict[str, Optional[str]] = Field({}, description="a dict from file path to base64 encoded content")
    fetch_files: List[str] = Field([], description="a list of file paths to fetch after code execution")


class CommandRunResult(BaseModel):
    status: Literal["Finished", "Error", "TimeLimitExceeded"]
    execution_time: Optional[float] = None
    return_code: Optional[int] = None
    stdout: Optional[str] = None
    stderr: Optional[str] = None


class RunCodeResponse(BaseModel):
    status: Literal["Success", "Failed", "SandboxError"]
    message: str
    compile_result: Optional[CommandRunResult] = None
    run_result: Optional[CommandRunResult] = None
    executor_pod_name: Optional[str] = None
    files: Dict[str, str] = {}


def answer(result: Result) -> dict[str, Any]:
    """SandboxFusion's answer for a farm result: the pipeline's own, else a SandboxError saying why."""
    details = dict(result.details or {})
    if details.get("status") in ("Success", "Failed", "SandboxError"):
        return details
    reason = result.message or result.status.value
    if result.status is Status.CANCELLED:
        reason = f"cancelled: {reason}"
    return sandbox_error("", reason)


@router.post("/run_code", response_model=RunCodeResponse)
async def run_code(body: RunCodeRequest, c: Caller = Depends(caller), g: Gateway = Depends(gateway)):
    config = c.protocols.sandbox_fusion
    payload = body.model_dump()
    try:
        result = await g.one(c, "sandbox_fusion", config.rolling, sample_key("run_code", payload), payload,
                             config.wait_s, config.replay_identical)
    except TimeoutError:
        return JSONResponse({"detail": f"the run did not finish within {config.wait_s:g} s; calling again waits "
                                       "on the same run"}, 504)
    return answer(result)


@router.get("/v1/ping")
async def ping(c: Caller = Depends(caller)) -> str:
    return "pong"
