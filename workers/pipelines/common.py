"""Helpers the real pipelines share: payload fields, the compiled binary in a request's carry, message tails.

A compiled binary crosses from the compile stage to the run/execute stage (another worker, maybe another
machine) inside the request's carry, which must be JSON: it travels base64-encoded under `binary_b64`,
at most `BINARY_CAP` bytes before encoding (16 MiB: a judge or CUDA test binary is well under 1 MiB;
a bigger one fails its compile stage as `compile_error` saying so).
"""

from __future__ import annotations

import array
import base64
import functools
import hashlib
import math
from typing import Any, Callable, Mapping

from farm.pipeline import InvalidInput, StageContext, StageOutcome
from farm.results import Outcome, Status
from workers import sandbox
from workers.shown import shown as _bounded

BINARY_CAP = 16 * sandbox.MiB
TAIL = 2000  # characters of compiler or program output kept in a message

SHOWN_CHARS = 200
SHOWN_ITEMS = 6  # items of a list named in a refusal, then "..."


def shown(value: Any) -> str:
    """A payload's value as a refusal shows it: its repr, cut short (a message never carries the payload back),
    however long, deep or large it is (`workers.shown`)."""
    return _bounded(value, SHOWN_CHARS)


def finite(value: Any) -> float | None:
    """A JSON number as a finite float; None for anything else (a bool, NaN, an integer past the floats)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def finite_list(values: list[Any]) -> list[float] | None:
    """A list of JSON numbers as finite floats, read in C (a trainer's expected output may hold a million);
    None when one is not a finite number (or the quick reading cannot tell: `finite` then says which)."""
    if not set(map(type, values)) <= {int, float}:  # a bool, a string, None, a subclass: read one by one
        return None
    try:
        numbers = array.array("d", values)
    except OverflowError:  # an integer past the floats
        return None
    # a NaN or an infinity makes the sum one; so does an overflow of finite numbers, which `finite` then clears
    return numbers.tolist() if math.isfinite(sum(numbers)) else None


def unicode_text(value: str, what: str) -> str:
    """`value`, refused unless UTF-8 can write it: a lone surrogate (JSON's "\\ud800") is no text, and the
    sandbox hands a request's text to programs as UTF-8 files and stdin."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidInput(f"{what} is not valid Unicode text: it holds a lone surrogate "
                               f"({value[exc.start]!r} at character {exc.start})") from None
    return value


def text_field(payload: Mapping[str, Any], name: str, *, required: bool = True, default: str = "") -> str:
    value = payload.get(name, None)
    if value is None:
        if required:
            raise InvalidInput(f"payload needs {name!r} (a string)")
        return default
    if not isinstance(value, str):
        raise InvalidInput(f"payload {name!r} must be a string, not {type(value).__name__}")
    return unicode_text(value, f"payload {name!r}")


def number_field(payload: Mapping[str, Any], name: str, default: float, *, low: float = 0.0,
                 high: float = float("inf")) -> float:
    value = payload.get(name, default)
    number = finite(value)
    if number is None or not low <= number <= high:
        raise InvalidInput(f"payload {name!r} must be a number in [{low:g}, {high:g}], not {shown(value)}")
    return number


def tail(data: bytes | str, limit: int = TAIL) -> str:
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    return text if len(text) <= limit else "..." + text[-limit:]


def pack_binary(binary: bytes) -> dict[str, str]:
    return {"binary_b64": base64.b64encode(binary).decode("ascii"), "binary_sha256": hashlib.sha256(binary).hexdigest()}


def unpack_binary(carry: Mapping[str, Any]) -> bytes:
    """The binary an earlier stage compiled; a missing or damaged one is the farm's fault, not the model's."""
    try:
        binary = base64.b64decode(carry["binary_b64"], validate=True)
    except (KeyError, TypeError, ValueError) as exc:
        raise RuntimeError(f"the compile stage's binary is missing from the request's carry ({exc!r})") from exc
    if hashlib.sha256(binary).hexdigest() != carry.get("binary_sha256"):
        raise RuntimeError("the compiled binary in the request's carry does not match its checksum")
    return binary


def compiled(result: sandbox.RunResult, name: str, what: str) -> StageOutcome:
    """The compile stage's verdict from a sandboxed compiler run that was asked to collect `name`."""
    if result.timed_out:
        return StageOutcome(Status.TIMEOUT, message=f"{what} {result.describe()}", outcome=Outcome.COMPILE_FAILED)
    if not result.ok or name not in result.files:
        why = result.describe() if result.returncode != 0 else "no binary produced"
        if result.returncode == 0 and name not in result.files:
            why = f"the binary is missing or larger than {BINARY_CAP >> 20} MiB"
        return StageOutcome(Status.COMPILE_ERROR, message=f"{what} failed ({why}):\n{tail(result.stderr or result.stdout)}",
                            outcome=Outcome.COMPILE_FAILED)
    return StageOutcome(None, carry=pack_binary(result.files[name]))


def contained(stage: Callable[[StageContext], StageOutcome]) -> Callable[[StageContext], StageOutcome]:
    """A stage whose worker cannot contain untrusted code fails closed: `infra_error` saying why."""

    @functools.wraps(stage)
    def run(ctx: StageContext) -> StageOutcome:
        try:
            return stage(ctx)
        except sandbox.SandboxUnavailable as exc:
            return StageOutcome(Status.INFRA_ERROR, message=f"stage {ctx.stage.name!r} refused to run untrusted code: {exc}")

    run.contained = True  # type: ignore[attr-defined]  # its worker refuses to start where nothing can contain it
    return run
