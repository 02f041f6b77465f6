"""The sweeps of `planner.policy.sweep` compiled (`planner/policy/sweep.c`), for the probes of large searches: the
same steps on the same doubles, so the same decisions, at C's speed. Built once per source into this user's cache
(`FARM_NATIVE_DIR`, else `$XDG_CACHE_HOME/reward-farm` or `~/.cache/reward-farm`) by `farm.native`; where they
cannot be (no compiler), or with `FARM_PLANNER_NATIVE=0`, the Python loops run. The edges call `load()` before
deciding (the planner's daemon, `farm eval`, the replay's prediction, the benches); it hands them to the policy
(`planner.policy.sweep.install`), which does no I/O itself and decides the same either way.
"""

from __future__ import annotations

import ctypes
import logging
import os
from pathlib import Path

import numpy as np

from farm import native
from planner.policy import sweep

log = logging.getLogger(__name__)

SOURCE = Path(__file__).resolve().parents[1] / "policy" / "sweep.c"
SWITCH = "FARM_PLANNER_NATIVE"  # "0": the Python loops only
_VARIANTS = (["-O2", "-shared", "-fPIC"],)
_D = np.ctypeslib.ndpointer(dtype=np.float64, flags="C_CONTIGUOUS")
_L = np.ctypeslib.ndpointer(dtype=np.int64, flags="C_CONTIGUOUS")
_INF = float("inf")


def cache_dir() -> str:
    configured = os.environ.get("FARM_NATIVE_DIR")
    base = configured or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                                      "reward-farm")
    os.makedirs(base, mode=0o700, exist_ok=True)
    return base


class Sweeps:
    """`fcfs` and `ebf` with the Python loops' arguments, over numpy arrays; the finishes and the stop."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._fcfs, self._ebf = lib.sweep_fcfs, lib.sweep_ebf
        self._fcfs.restype = self._ebf.restype = ctypes.c_long
        self._fcfs.argtypes = [ctypes.c_long, _D, _D, _D, _D, ctypes.c_long, _D]
        self._ebf.argtypes = [ctypes.c_long, _D, _D, _L, ctypes.c_long, _D, _D, ctypes.c_long, _D, _L, _L, _L, _L]

    def fcfs(self, arr: np.ndarray, srv: np.ndarray, free: np.ndarray, cut: np.ndarray) -> tuple[np.ndarray, int]:
        """`arr` without a sentinel; `free` earliest first (a heap; copied, the C loop consumes its copy). From the
        first request: the compiled loop needs no quiet start."""
        n = len(srv)
        out = np.zeros(n, dtype=np.float64)
        heap = np.array(free, dtype=np.float64)
        bad = self._fcfs(n, _f64(arr), _f64(srv), _f64(cut), heap, len(heap), out)
        return out, int(bad)

    def ebf(self, arr: np.ndarray, srv: np.ndarray, grp: np.ndarray, groups: int, free: np.ndarray,
            cut: np.ndarray) -> tuple[np.ndarray, int]:
        n = len(srv)
        out = np.zeros(n, dtype=np.float64)
        heap = np.array(free, dtype=np.float64)
        with_sentinel = np.append(np.asarray(arr, dtype=np.float64)[:n], _INF)
        scratch = [np.empty(max(groups, 1), dtype=np.int64), np.empty(max(groups, 1), dtype=np.int64),
                   np.empty(max(n, 1), dtype=np.int64), np.empty(max(groups, 1), dtype=np.int64)]
        bad = self._ebf(n, with_sentinel, _f64(srv), np.ascontiguousarray(grp, dtype=np.int64), groups, _f64(cut),
                        heap, len(heap), out, *scratch)
        return out, int(bad)


def _f64(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64)


_loaded: list[Sweeps | None] = []  # what `load` found, once per process


def load() -> Sweeps | None:
    """Build (once per source, in the cache) and load the compiled sweeps for this process, and install them in
    the policy; None where they cannot be (no compiler, switched off, a failed load): the Python loops then."""
    if not _loaded:
        _loaded.append(_build_and_load())
        sweep.install(_loaded[0])
    return _loaded[0]


def _build_and_load() -> Sweeps | None:
    if os.environ.get(SWITCH, "1") == "0":
        return None
    try:
        path = native.build(SOURCE.read_bytes(), cache_dir(), "sweep", _VARIANTS)
        return Sweeps(ctypes.CDLL(path)) if path is not None else None
    except OSError as exc:
        log.warning("planner: the compiled sweeps could not be loaded (%s): the Python loops run", exc)
        return None
