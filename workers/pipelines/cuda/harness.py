"""The `cuda` compile stage when a harness is given: the response and the harness are separate
translation units, so no macro or definition of the response's can reach the harness's source.

Three sandboxed nvcc runs and a check, in order: the response alone (`kernel.cu` -> `kernel.o`; the
harness's source is not in that sandbox, so the response cannot #include it and copy its reference
data); the harness and the farm's wrapper (`main.cu`, `record.WRAPPER_FILE`); `checks` on the
response's object; the link, harness first, with --wrap=main (the wrapper's `__wrap_main` runs the
harness's `main` and writes the completion record) and a non-executable stack. A harness that does not
compile on its own is the payload's fault (`invalid_input`); everything else fails as `compile_error`
(or `timeout`), the model's. The harness's objects are kept per worker (a batch holds many responses to
one harness), so most requests pay for the response's compile and the link only.
"""

from __future__ import annotations

import collections
import hashlib
import threading
import time
from dataclasses import replace

from farm.pipeline import StageOutcome
from farm.results import Outcome, Status
from workers import sandbox
from workers.pipelines.cuda import checks
from workers.pipelines.common import compiled, tail
from workers.pipelines.cuda.record import WRAPPER_FILE, WRAPPER_SOURCE
from workers.scan import LinePattern

# the response's compile: one section per function (so the checks see every call between functions as a
# relocation), and CCCL's NVTX ranges off (they getenv and dlopen an injection library)
RESPONSE_FLAGS = ("-Xcompiler", "-ffunction-sections", "-DCCCL_DISABLE_NVTX", "-DNVTX_DISABLE")
LINK_FLAGS = ("-Xlinker", "--wrap=main", "-Xlinker", "-z", "-Xlinker", "noexecstack")
# a line pattern: `^\s*#` under re.M read every blank line below each line start again, quadratic in blank lines
_INCLUDES_KERNEL = LinePattern(r'#\s*+include\s*+[<"]\s*+kernel\.cu\s*+[">]')
WRAPPER_OBJECT = WRAPPER_FILE.rsplit(".", 1)[0] + ".o"
# the harness's and the wrapper's objects by sha256 of (harness, flags); the least recently used goes first
_COMPILED: collections.OrderedDict[str, dict[str, bytes]] = collections.OrderedDict()
_COMPILED_MAX = 32
_LOCK = threading.Lock()


def harness_problem(harness: str) -> str | None:
    """Why a harness cannot be used with separate compilation, or None."""
    if "kernel.cu" in harness and _INCLUDES_KERNEL.line(harness) is not None:
        return ("cuda 'harness' must not #include \"kernel.cu\": the response is compiled on its own; declare the "
                "kernels and functions the harness calls (e.g. `__global__ void add(const float*, const float*, "
                "float*, int);`) and the farm links them")
    return None


def build(code: str, harness: str, flags: list[str], timeout_s: float, limits: sandbox.Limits) -> StageOutcome:
    """The linked program in the carry, or why there is none."""
    deadline = time.monotonic() + timeout_s

    def run(argv: list[str], files: dict[str, bytes | str], collect: tuple[str, ...]) -> sandbox.RunResult:
        left = max(1.0, deadline - time.monotonic())
        return sandbox.run(argv, files=files, limits=replace(limits, wall_s=left), collect=collect)

    kernel = run(["nvcc", "-O2", *flags, *RESPONSE_FLAGS, "-c", "-o", "kernel.o", "kernel.cu"], {"kernel.cu": code},
                 ("kernel.o",))
    if not kernel.ok or "kernel.o" not in kernel.files:
        return compiled(kernel, "kernel.o", "nvcc")
    key = hashlib.sha256(repr((harness, flags)).encode()).hexdigest()
    with _LOCK:
        ours = _COMPILED.get(key)
        if ours is not None:
            _COMPILED.move_to_end(key)
    if ours is None:
        theirs = run(["nvcc", "-O2", *flags, "-c", "main.cu", WRAPPER_FILE],
                     {"main.cu": harness, WRAPPER_FILE: WRAPPER_SOURCE}, ("main.o", WRAPPER_OBJECT))
        if theirs.timed_out:
            return StageOutcome(Status.TIMEOUT, message=f"nvcc on the harness: {theirs.describe()}",
                                outcome=Outcome.COMPILE_FAILED)
        if not theirs.ok or len(theirs.files) != 2:
            return StageOutcome(Status.INVALID_INPUT, message=f"the harness does not compile on its own "
                                f"({theirs.describe()}):\n{tail(theirs.stderr or theirs.stdout)}".rstrip())
        ours = dict(theirs.files)
        with _LOCK:
            _COMPILED[key] = ours
            while len(_COMPILED) > _COMPILED_MAX:
                _COMPILED.popitem(last=False)
    try:
        verdict = checks.check(kernel.files["kernel.o"], ours["main.o"], ours[WRAPPER_OBJECT])
    except OSError as exc:  # the system libraries' names could not be read: a check with holes is not run
        return StageOutcome(Status.INFRA_ERROR, message=f"cannot check the response's object: {exc}")
    if verdict.problems:
        return StageOutcome(Status.COMPILE_ERROR, message=verdict.message, outcome=Outcome.COMPILE_FAILED,
                            details={"refused": list(verdict.problems)})
    objects = {WRAPPER_OBJECT: ours[WRAPPER_OBJECT], "main.o": ours["main.o"], "kernel.o": verdict.object}
    link = run(["nvcc", *flags, "-o", "prog", *objects, *LINK_FLAGS], objects, ("prog",))
    return compiled(link, "prog", "nvcc (linking the harness with the response)")
