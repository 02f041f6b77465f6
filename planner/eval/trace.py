"""The `reward-trace/1` format (docs/design.md): a JSON Lines header naming the stages, then one line per batch.

Readers and writers of traces (the generator, the evaluation, the recorder) all go through this module,
so a file that loads here is one every tool can replay. The reader ignores unknown keys and rejects a
malformed file with a `TraceError` naming the file and the line; the checks of each line, and the
format's constants, are `planner.eval.traceparse`'s.
"""

from __future__ import annotations

import gzip
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

import farm
from planner.eval.traceparse import (
    FORMAT,
    OUTCOMES,
    TIMEOUT_TOLERANCE_S,
    LineError,
    batch_fields,
    decode,
    header_stages,
    outcomes_problem,
)

# the format's constants come from the line checks; they are this module's public names all the same
__all__ = ["BUNDLED", "BUNDLED_DIR", "FORMAT", "OUTCOMES", "TIMEOUT_TOLERANCE_S", "Trace", "TraceBatch", "TraceError",
           "TraceStage", "bundled", "dumps", "read", "resolve", "write"]

BUNDLED = ("cuda-colocated", "cuda-disaggregated", "demo")
BUNDLED_DIR = Path(farm.__file__).resolve().parent / "data" / "traces"

_GZIP_MAGIC = b"\x1f\x8b"


class TraceError(ValueError):
    """A trace that breaks the format; the message names the file and line when there is one."""


@dataclass(frozen=True)
class TraceStage:
    name: str
    resource: str  # "cpu" | "gpu" | "io"
    cost: float  # C_j: weight of one worker-second of this stage in the resource consumption
    timeout_s: float  # T_j: a request is killed here after this many seconds


@dataclass(frozen=True, eq=False)
class TraceBatch:
    """One batch: `requests[i] = [r_i, s_i1, ..., s_iM]`, r_i from `start_s`, s_ij = 0 if stage j not visited."""

    task: str
    batch: int
    start_s: float
    requests: np.ndarray
    # Optional extra (key "outcomes"): one code per request, see OUTCOMES; the times alone cannot tell
    # an execute error from a success.
    outcomes: str | None = None
    # Optional extra (key "tenant"): the tenant whose batch it is, for fair shares (farm.protocol.shares);
    # a batch without one is the farm's own (tenant label '-').
    tenant: str | None = None

    def __post_init__(self) -> None:
        where = f"batch {self.task!r}/{self.batch}"
        try:
            requests = np.array(self.requests, dtype=np.float64, copy=True)
        except (TypeError, ValueError):
            raise TraceError(f"{where}: requests must be numbers") from None
        if requests.ndim != 2 or requests.shape[0] < 1 or requests.shape[1] < 2:
            raise TraceError(f"{where}: requests must be an (n, 1+M) array with n >= 1 and M >= 1")
        if not np.isfinite(requests).all() or (requests < 0).any():
            raise TraceError(f"{where}: arrivals and times must be finite numbers >= 0")
        if not math.isfinite(self.start_s) or self.start_s < 0:
            raise TraceError(f"{where}: start_s must be a finite number >= 0, got {self.start_s!r}")
        if self.outcomes is not None:
            problem = outcomes_problem(self.outcomes, requests.shape[0])
            if problem:
                raise TraceError(f"{where}: {problem}")
        requests.setflags(write=False)
        object.__setattr__(self, "requests", requests)
        object.__setattr__(self, "start_s", float(self.start_s))

    @property
    def arrivals(self) -> np.ndarray:
        """r_i: arrival offsets from the batch's start, shape (n,)."""
        return self.requests[:, 0]

    @property
    def times(self) -> np.ndarray:
        """s_ij: running time of request i at stage j, shape (n, M)."""
        return self.requests[:, 1:]

    @property
    def size(self) -> int:
        return int(self.requests.shape[0])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TraceBatch):
            return NotImplemented
        return (
            (self.task, self.batch, self.start_s, self.outcomes, self.tenant)
            == (other.task, other.batch, other.start_s, other.outcomes, other.tenant)
            and np.array_equal(self.requests, other.requests)
        )

    def __hash__(self) -> int:
        return hash((self.task, self.batch, self.start_s, self.outcomes, self.tenant, self.requests.tobytes()))


@dataclass(frozen=True)
class Trace:
    """Stages of the pipeline and the batches, sorted by (start_s, task, batch)."""

    stages: tuple[TraceStage, ...]
    batches: tuple[TraceBatch, ...]

    def __post_init__(self) -> None:
        stages = tuple(self.stages)
        batches = tuple(sorted(self.batches, key=lambda b: (b.start_s, b.task, b.batch)))
        object.__setattr__(self, "stages", stages)
        object.__setattr__(self, "batches", batches)
        if not stages:
            raise TraceError("a trace needs at least one stage")
        seen: set[tuple[str, int]] = set()
        timeouts = np.array([s.timeout_s for s in stages])
        for b in batches:
            if b.requests.shape[1] != 1 + len(stages):
                raise TraceError(
                    f"batch {b.task!r}/{b.batch}: requests have {b.requests.shape[1]} numbers, "
                    f"expected {1 + len(stages)} (r_i and one time per stage)"
                )
            if (b.times > timeouts + TIMEOUT_TOLERANCE_S).any():
                raise TraceError(f"batch {b.task!r}/{b.batch}: a time exceeds its stage's timeout")
            if (b.task, b.batch) in seen:
                raise TraceError(f"batch {b.task!r}/{b.batch} appears twice")
            seen.add((b.task, b.batch))

    @property
    def tasks(self) -> tuple[str, ...]:
        return tuple(sorted({b.task for b in self.batches}))

    def batches_of(self, task: str) -> tuple[TraceBatch, ...]:
        """The batches of one task in batch order."""
        return tuple(sorted((b for b in self.batches if b.task == task), key=lambda b: b.batch))

    @property
    def num_requests(self) -> int:
        return sum(b.size for b in self.batches)

    @property
    def timeouts(self) -> np.ndarray:
        """T_j per stage, shape (M,)."""
        return np.array([s.timeout_s for s in self.stages], dtype=np.float64)


# ---------------------------------------------------------------------------------------------- reading


def _open_text(path: Path) -> io.TextIOBase:
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic == _GZIP_MAGIC:
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, "r", encoding="utf-8")


def read(path: str | Path) -> Trace:
    """Load a `.jsonl` or `.jsonl.gz` trace (gzip is detected from the content)."""
    path = Path(path)
    try:
        f = _open_text(path)
    except OSError as e:
        raise TraceError(f"{path}: cannot open: {e.strerror or e}") from None
    stages: tuple[TraceStage, ...] | None = None
    batches: list[TraceBatch] = []
    seen: dict[tuple[str, int], int] = {}
    try:
        with f:
            for lineno, line in _lines(f):
                try:
                    obj = decode(line)
                    if stages is None:
                        stages = tuple(TraceStage(**fields) for fields in header_stages(obj))
                        names, timeouts = [s.name for s in stages], np.array([s.timeout_s for s in stages])
                        continue
                    b = TraceBatch(**batch_fields(obj, names, timeouts))
                except LineError as e:
                    raise TraceError(f"{path}:{lineno}: {e}") from None
                key = (b.task, b.batch)
                if key in seen:
                    raise TraceError(
                        f"{path}:{lineno}: batch {b.task!r}/{b.batch} already appeared on line {seen[key]}")
                seen[key] = lineno
                batches.append(b)
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise TraceError(f"{path}: cannot read: {e}") from None
    if stages is None:
        raise TraceError(f"{path}:1: empty file, expected a {FORMAT} header")
    return Trace(stages=stages, batches=tuple(batches))


def _lines(f: Iterable[str]) -> Iterator[tuple[int, str]]:
    # Blank lines (a trailing newline, say) carry nothing and are skipped; line numbers stay the file's.
    for lineno, line in enumerate(f, start=1):
        if line.strip():
            yield lineno, line


# ---------------------------------------------------------------------------------------------- writing


def _num(x: float) -> str:
    """Millisecond precision, shortest form: 48.9, 120, 0."""
    text = f"{x:.3f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def _time(x: float) -> str:
    # A visited stage must stay visited: a positive time never rounds down to 0.
    return _num(max(x, 0.001)) if x > 0 else "0"


def _batch_line(b: TraceBatch) -> str:
    reqs = ",".join(
        "[" + ",".join([_num(row[0])] + [_time(x) for x in row[1:]]) + "]" for row in b.requests.tolist()
    )
    extra = "" if b.outcomes is None else f',"outcomes":"{b.outcomes}"'
    extra += "" if b.tenant is None else f',"tenant":{json.dumps(b.tenant)}'
    return (
        f'{{"task":{json.dumps(b.task)},"batch":{b.batch},"start_s":{_num(b.start_s)},"requests":[{reqs}]{extra}}}'
    )


def dumps(trace: Trace) -> str:
    """The trace as `reward-trace/1` text; deterministic (same trace, same bytes)."""
    header = {
        "format": FORMAT,
        "stages": [
            {"name": s.name, "resource": s.resource, "cost": s.cost, "timeout_s": s.timeout_s} for s in trace.stages
        ],
    }
    lines = [json.dumps(header, separators=(",", ":"))]
    lines.extend(_batch_line(b) for b in trace.batches)
    return "\n".join(lines) + "\n"


def write(path: str | Path, trace: Trace) -> None:
    """Write a trace; gzip when the name ends in `.gz` (no timestamp in the gzip header, so output is stable)."""
    path = Path(path)
    data = dumps(trace).encode("utf-8")
    if path.suffix == ".gz":
        buf = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
            gz.write(data)
        data = buf.getvalue()
    path.write_bytes(data)


# ---------------------------------------------------------------------------------------------- bundled


def bundled(name: str) -> Path:
    """Path of a trace shipped with the farm (`farm/data/traces/`)."""
    if name not in BUNDLED:
        raise ValueError(f"no bundled trace {name!r}; bundled traces: {', '.join(BUNDLED)}")
    for suffix in (".jsonl.gz", ".jsonl"):
        path = BUNDLED_DIR / f"{name}{suffix}"
        if path.exists():
            return path
    raise ValueError(f"bundled trace {name!r} is missing from {BUNDLED_DIR} (reinstall the package)")


def resolve(spec: str | Path) -> Path:
    """A trace file path, or the name of a bundled trace when no such file exists."""
    path = Path(spec)
    if path.exists() or str(spec) not in BUNDLED:
        return path
    return bundled(str(spec))
