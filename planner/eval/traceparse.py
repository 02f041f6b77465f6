"""The lines of a `reward-trace/1` file (docs/design.md): what a header and a batch line must hold.

The checks work on decoded JSON and return plain fields, so they know nothing of files nor of the classes
of `planner.eval.trace`, whose `read` builds those and puts the file and line before a `LineError`'s
message. The format's constants live here, beside the rules that use them.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Sequence

import numpy as np

from farm.pipeline import RESOURCES

FORMAT = "reward-trace/1"
# Request outcomes of Figure 6(b) of the paper, by the one-letter code of the optional "outcomes" key.
OUTCOMES = {"g": "generation failed", "c": "compile failed", "e": "execute error", "s": "success"}
# A time within this of a stage's timeout counts as "ran to the timeout" (the writer rounds to ms).
TIMEOUT_TOLERANCE_S = 1e-6


class LineError(ValueError):
    """What is wrong with one line of a trace; the reader adds the file and the line."""


def decode(line: str) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError as e:
        raise LineError(f"invalid JSON: {e.msg} (column {e.colno})") from None


# A batch's optional tenant: a name for fair shares (farm.protocol.shares), such as a tenant label `t3`.
TENANT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}|-")


def outcomes_problem(outcomes: object, n: int) -> str | None:
    """Why `outcomes` is not one code of OUTCOMES per request of n, or None when it is."""
    if not isinstance(outcomes, str) or len(outcomes) != n or set(outcomes) - set(OUTCOMES):
        return f"'outcomes' must be a string of {n} characters from {''.join(OUTCOMES)}"
    return None


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _short(x: Any) -> str:
    text = json.dumps(x)
    return text if len(text) <= 60 else text[:57] + "..."


def _stage_fields(obj: Any, k: int) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise LineError(f"stage {k} must be an object, got {type(obj).__name__}")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise LineError(f"stage {k}: 'name' must be a non-empty string")
    resource = obj.get("resource")
    if resource not in RESOURCES:
        raise LineError(f"stage {name!r}: 'resource' must be one of {', '.join(RESOURCES)}, got {resource!r}")
    values = {}
    for key in ("cost", "timeout_s"):
        v = obj.get(key)
        if not _is_number(v) or not math.isfinite(v) or v <= 0:
            raise LineError(f"stage {name!r}: {key!r} must be a finite number > 0, got {v!r}")
        values[key] = float(v)
    return {"name": name, "resource": resource, "cost": values["cost"], "timeout_s": values["timeout_s"]}


def header_stages(obj: Any) -> list[dict[str, Any]]:
    """The header line's stages, as the fields of a `TraceStage` each, in pipeline order."""
    if not isinstance(obj, dict):
        raise LineError("the header must be a JSON object")
    if obj.get("format") != FORMAT:
        raise LineError(f"not a {FORMAT} trace: header 'format' is {obj.get('format')!r}")
    raw = obj.get("stages")
    if not isinstance(raw, list) or not raw:
        raise LineError("header 'stages' must be a non-empty list")
    stages = [_stage_fields(s, k) for k, s in enumerate(raw)]
    names = [s["name"] for s in stages]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise LineError(f"stage names must be unique, repeated: {', '.join(dupes)}")
    return stages


def batch_fields(obj: Any, names: Sequence[str], timeouts: np.ndarray) -> dict[str, Any]:
    """A batch line's fields for a `TraceBatch`, checked against the header's stage names and timeouts."""
    if not isinstance(obj, dict):
        raise LineError("a batch line must be a JSON object")
    task = obj.get("task")
    if not isinstance(task, str) or not task:
        raise LineError(f"'task' must be a non-empty string, got {task!r}")
    batch = obj.get("batch")
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 0:
        raise LineError(f"'batch' must be an integer >= 0, got {batch!r}")
    start = obj.get("start_s")
    if not _is_number(start) or not math.isfinite(start) or start < 0:
        raise LineError(f"'start_s' must be a finite number >= 0, got {start!r}")
    raw = obj.get("requests")
    if not isinstance(raw, list) or not raw:
        raise LineError("'requests' must be a non-empty list of [r_i, s_i1, ..., s_iM]")
    width = 1 + len(names)
    for i, req in enumerate(raw):
        if not isinstance(req, list) or len(req) != width:
            raise LineError(
                f"request {i} must be a list of {width} numbers (r_i and one time per stage), got {_short(req)}"
            )
        for x in req:
            if not _is_number(x) or not math.isfinite(x) or x < 0:
                raise LineError(f"request {i}: times must be finite numbers >= 0, got {_short(req)}")
    requests = np.asarray(raw, dtype=np.float64)
    over = requests[:, 1:] > timeouts + TIMEOUT_TOLERANCE_S
    if over.any():
        i, j = (int(v) for v in np.argwhere(over)[0])
        raise LineError(
            f"request {i}: time {requests[i, j + 1]:g} s at stage {names[j]!r} exceeds its timeout {timeouts[j]:g} s"
        )
    outcomes = obj.get("outcomes")
    if outcomes is not None:
        problem = outcomes_problem(outcomes, len(raw))
        if problem:
            raise LineError(problem)
    tenant = obj.get("tenant")
    if tenant is not None and not (isinstance(tenant, str) and TENANT_NAME.fullmatch(tenant)):
        raise LineError(f"'tenant' must be 1-64 letters, digits or '_.-', got {_short(tenant)}")
    return {"task": task, "batch": batch, "start_s": float(start), "requests": requests, "outcomes": outcomes,
            "tenant": tenant}
