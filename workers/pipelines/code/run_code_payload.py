"""The `run_code` pipeline's payload, SandboxFusion's `/run_code` request, checked once and read the same way at
admission and at every stage: what to run, and within which of the farm's limits.

Refusals are `InvalidInput` naming the field and what was wrong with it. A language SandboxFusion knows but
the farm does not run is not refused here: `Run.language` keeps it and the pipeline's admission answers it
(see `workers.pipelines.code.run_code`).

Limits (SandboxFusion has none of its own; these keep one request from taking a worker or the result stream):
- `compile_timeout`, `run_timeout`: seconds > 0, default 10; above `MAX_TIMEOUT_S` (60) they are cut to it,
  not refused (a trainer asking for 100 s gets 60). NaN, infinities, 0, negatives and non-numbers are refused.
- `memory_limit_MB`: the run's address-space limit (RLIMIT_AS). -1, or any value <= 0 as SandboxFusion reads
  it, is the farm's default `DEFAULT_MEMORY_MB` (1024, the `code` pipeline's); others are held between
  `MEMORY_MB` (32 and 4096). The compiler keeps its own 2 GiB.
- `files`: at most `MAX_FILES` (64), `MAX_FILES_BYTES` (16 MiB) decoded in all; `fetch_files`: at most 64 names.
- paths: relative, 1-255 characters, no `..` component, no NUL; `.` components and repeated `/` are dropped.
"""

from __future__ import annotations

import base64
import binascii
import math
from dataclasses import dataclass
from typing import Any, Mapping

from farm.pipeline import InvalidInput
from workers import sandbox
from workers.pipelines.common import unicode_text

# SandboxFusion's RunCodeRequest.language (sandbox_fusion/models.py `Language`)
SANDBOX_FUSION_LANGUAGES = (
    "python", "python2", "cpp", "nodejs", "go", "go_test", "java", "php", "csharp", "bash", "typescript", "sql",
    "rust", "cuda", "lua", "R", "perl", "D_ut", "ruby", "scala", "julia", "pytest", "junit", "kotlin_script",
    "jest", "verilog", "python_gpu", "lean", "swift", "racket", "gtest", "react",
)
# the languages the farm runs -> the working directory's names its program takes (a file may not replace one)
PROGRAM_FILES = {"python": ("main.py",), "cpp": ("main.cpp", "main")}

DEFAULT_TIMEOUT_S = 10.0
MAX_TIMEOUT_S = 60.0
DEFAULT_MEMORY_MB = 1024
MEMORY_MB = (32, 4096)
MAX_FILES = 64
MAX_FILES_BYTES = 16 * sandbox.MiB
MAX_PATH = 255


@dataclass(frozen=True)
class Run:
    language: str  # one of SANDBOX_FUSION_LANGUAGES; the farm runs those in PROGRAM_FILES
    code: str
    stdin: bytes
    compile_timeout_s: float
    run_timeout_s: float
    memory_bytes: int
    files: Mapping[str, bytes]  # clean relative path -> content
    fetch: tuple[tuple[str, str], ...]  # (the name asked for, its clean path), in the order asked

    @property
    def supported(self) -> bool:
        return self.language in PROGRAM_FILES


def read(payload: Mapping[str, Any]) -> Run:
    """The payload as a Run; raises InvalidInput saying what was wrong."""
    code = payload.get("code")
    if not isinstance(code, str):
        raise InvalidInput(f"'code' (a string) is required, not {_kind(code)}")
    language = payload.get("language")
    if not isinstance(language, str):
        raise InvalidInput(f"'language' (a string) is required, not {_kind(language)}")
    if language not in SANDBOX_FUSION_LANGUAGES:
        raise InvalidInput(f"'language' {language!r:.60} is not one of SandboxFusion's languages")
    stdin = payload.get("stdin")
    if stdin is not None and not isinstance(stdin, str):
        raise InvalidInput(f"'stdin' must be a string or null, not {_kind(stdin)}")
    unicode_text(code, "'code'")
    return Run(language, code, unicode_text(stdin or "", "'stdin'").encode(), timeout(payload, "compile_timeout"),
               timeout(payload, "run_timeout"), memory_bytes(payload), files(payload, PROGRAM_FILES.get(language, ())),
               fetch_files(payload))


def timeout(payload: Mapping[str, Any], name: str) -> float:
    value = payload.get(name, DEFAULT_TIMEOUT_S)
    if value is None:
        return DEFAULT_TIMEOUT_S
    number = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))
    if isinstance(value, bool) or not number or value <= 0:
        raise InvalidInput(f"{name!r} must be a finite number of seconds > 0, not {value!r:.60}")
    return float(min(value, MAX_TIMEOUT_S))  # min first: an int too large for a float is cut, not an error


def memory_bytes(payload: Mapping[str, Any]) -> int:
    value = payload.get("memory_limit_MB", -1)
    if value is None:
        value = -1
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not whole:
        raise InvalidInput(f"'memory_limit_MB' must be a whole number of MB (-1: the farm's default), "
                           f"not {value!r:.60}")
    mb = DEFAULT_MEMORY_MB if value <= 0 else min(max(int(value), MEMORY_MB[0]), MEMORY_MB[1])
    return mb * sandbox.MiB


def relative_path(path: Any, what: str) -> str:
    """A path inside the working directory, cleaned (`./a//b` -> `a/b`)."""
    if not isinstance(path, str) or not 1 <= len(path) <= MAX_PATH or "\0" in path:
        raise InvalidInput(f"{what} {path!r:.100} must be a path of 1-{MAX_PATH} characters without NUL")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    unicode_text(path, f"{what} {path!r:.100}")
    if path.startswith("/"):
        raise InvalidInput(f"{what} {path!r:.100} is absolute: it must be relative, inside the working directory")
    if ".." in parts:
        raise InvalidInput(f"{what} {path!r:.100} contains '..': it must stay inside the working directory")
    if not parts:
        raise InvalidInput(f"{what} {path!r:.100} names the working directory itself, not a file in it")
    return "/".join(parts)


def files(payload: Mapping[str, Any], program: tuple[str, ...]) -> dict[str, bytes]:
    """`files`, decoded. A null content is skipped, as SandboxFusion skips it (no file is written)."""
    given = payload.get("files") or {}
    if not isinstance(given, Mapping):
        raise InvalidInput(f"'files' must be an object of relative path -> base64 content, not {_kind(given)}")
    if len(given) > MAX_FILES:
        raise InvalidInput(f"'files' holds {len(given)} files, over the limit of {MAX_FILES}")
    out: dict[str, bytes] = {}
    asked: dict[str, str] = {}
    total = 0
    for path, content in given.items():
        name = relative_path(path, "'files' path")
        if name in program:
            raise InvalidInput(f"'files' path {path!r:.100} would replace the program's own {name!r}")
        if name in asked:
            raise InvalidInput(f"'files' paths {asked[name]!r:.100} and {path!r:.100} name the same file")
        asked[name] = path
        if content is None:
            continue
        if not isinstance(content, str):
            raise InvalidInput(f"'files' {path!r:.100} must be base64 text or null, not {_kind(content)}")
        try:
            out[name] = base64.b64decode("".join(content.split()), validate=True)
        except (binascii.Error, ValueError):
            raise InvalidInput(f"'files' {path!r:.100} is not valid base64") from None
        total += len(out[name])
        if total > MAX_FILES_BYTES:
            raise InvalidInput(f"'files' hold over {MAX_FILES_BYTES >> 20} MiB decoded, the limit")
    _no_file_under_a_file(list(asked) + list(program), asked)
    return out


def _no_file_under_a_file(names: list[str], asked: Mapping[str, str]) -> None:
    """`a` and `a/b` cannot both be files: refused here rather than failing when the sandbox writes them."""
    taken = set(names)
    for name in names:
        parts = name.split("/")
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            if parent in taken:
                raise InvalidInput(f"'files' path {asked.get(name, name)!r:.100} is under {parent!r:.100}, "
                                   f"which is a file")


def fetch_files(payload: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    given = payload.get("fetch_files") or []
    if not isinstance(given, list):
        raise InvalidInput(f"'fetch_files' must be a list of relative paths, not {_kind(given)}")
    if len(given) > MAX_FILES:
        raise InvalidInput(f"'fetch_files' names {len(given)} files, over the limit of {MAX_FILES}")
    return tuple((path, relative_path(path, "'fetch_files' path")) for path in given)


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__
