"""One stage of SIMULATE as a sweep over its requests in arrival order, with a heap of when workers are free.

`simulate.Simulator` prepares each stage's requests as plain lists (arrival, time, the batch key's rank,
the latest start that still meets the batch's limit) and hands them here: these loops are the hot path
of Algorithm 1's probes, so they run on lists and bound methods rather than numpy. Each returns the
finish times and the first request that starts after its cut (-1: none), where it stops.
"""

from __future__ import annotations

import heapq
from collections import deque

import numpy as np

from planner.policy.workload import Workload

_INF = float("inf")
QUIET_FROM = 128  # workers: with fewer, a quiet start is short and the sweep is as fast without it


_compiled: list = [None]  # the compiled sweeps an edge installed (planner.runtime.native), or None: the loops here


def install(compiled) -> None:
    """Hand the policy compiled sweeps (`fcfs`, `ebf` over numpy arrays, as `planner.runtime.native.Sweeps`), or
    None for the loops below. The edges do this once, before deciding; the policy itself loads nothing."""
    _compiled[0] = compiled


def compiled():
    """The compiled sweeps installed, or None."""
    return _compiled[0]


def slots(w: Workload, k: int, n_workers: int, running_finish: np.ndarray) -> np.ndarray:
    """When each of the stage's `n_workers` workers is first free, earliest first (as a list, a heap)."""
    n_workers = max(int(n_workers), 0)
    busy = np.sort(running_finish)
    r = len(busy)
    if n_workers < r:  # busy workers beyond the pool leave as they finish, the first to finish first
        return busy[r - n_workers:] if n_workers else busy[:0]
    starting = int(min(w.starting[k], max(w.workers[k] - r, 0)))
    idle = max(int(w.workers[k]) - r - starting, 0)
    extra = n_workers - r
    now_ready = min(idle, extra)
    later = extra - now_ready
    # beyond the stage's placeable pool (an autoscaler's capacity) a worker waits for a new node first
    fast = later if w.placeable is None else min(later, max(int(w.placeable[k]) - r - now_ready, 0))
    out = np.concatenate([busy, np.full(now_ready, w.now), np.full(fast, w.now + w.startup_s),
                          np.full(later - fast, w.now + w.node_startup_s + w.startup_s)])
    out.sort()
    return out


def quiet_start(arr: np.ndarray, srv: np.ndarray, free: np.ndarray, cut: np.ndarray) -> tuple[int, np.ndarray, list]:
    """The sweep's first m dispatches at once, where none leaves a request waiting for a later one: m, their
    finish times and the heap of free times after them (`sweep_fcfs` and `sweep_ebf` go on from there,
    `start=m`). Over numpy arrays in arrival order (no sentinel); `free` earliest first.

    While no request waits behind another, the k-th dispatch is the k-th request's, at
    T_k = max(T_{k-1}, P_k, a_k), P_k the k-th pop: the k-th smallest of the free times and the finishes
    T_l + s_l before it (pops never decrease, and a later finish is after T_k). A guess of T (each request
    at its arrival, or when the pool's k-th worker is first free) is checked against that recurrence with
    the pops that it gives (where it holds, they are the sweep's), and the prefix ends
    before its first miss, before the first request that arrived by an earlier one's dispatch and starts
    later (there EBF's order, not arrival, picks), and at an arrival after the last dispatch (nothing
    waits to go on from). A prefix in which a request starts after its cut is not taken: the sweep finds
    which one it stops at."""
    n = int(np.searchsorted(arr, _INF))  # requests never served upstream (inf) come last and wait
    workers = len(free)
    size = min(n, max(4 * workers, 256))
    while size:
        a, s = arr[:size], srv[:size]
        guess = np.full(size, -_INF)
        guess[:workers] = free[:size]
        t = np.maximum.accumulate(np.maximum(a, guess))
        pops = np.sort(np.concatenate([free, t + s]))[:size]
        before = np.concatenate([[-_INF], t[:-1]])
        miss = np.flatnonzero(t != np.maximum(np.maximum(before, pops), a))
        behind = np.flatnonzero((a[1:] <= t[:-1]) & (t[1:] != t[:-1]))
        end = min(int(miss[0]) if len(miss) else size, int(behind[0]) + 1 if len(behind) else size)
        nxt = arr[size] if size < len(arr) else _INF
        clear = np.flatnonzero(np.append(a[1:], nxt)[:end] > t[:end])
        m = int(clear[-1]) + 1 if len(clear) else 0  # an arrival after dispatch m - 1: nothing waits there
        if m == size and size < n:
            size = min(n, 2 * size)
            continue
        if (t[:m] > cut[:m]).any():
            m = 0
        f = t[:m] + s[:m]
        return m, f, np.sort(np.concatenate([free, f]))[m:].tolist()
    return 0, np.zeros(0), list(free)


def sweep_fcfs(arr, srv, free, cut, start: int = 0, fin: list | None = None):
    """FCFS: in arrival order, each request takes the first worker free. `arr` ends with an inf sentinel.
    From request `start` on, with `fin` holding the finishes before it (`quiet_start`)."""
    n = len(arr) - 1
    fin = [0.0] * n if fin is None else fin
    heapreplace = heapq.heapreplace
    for i in range(start, n):
        a = arr[i]
        w = free[0]
        t = a if a >= w else w
        f = t + srv[i]
        heapreplace(free, f)
        fin[i] = f
        if t > cut[i]:
            return fin, i
    return fin, -1


def sweep_ebf(arr, srv, grp, groups, free, cut, start: int = 0, fin: list | None = None):
    """EBF: a free worker takes the head of the most urgent waiting FIFO; `grp` is the rank of the
    request's batch key (equal keys share a FIFO, ordered by arrival). `arr` ends with an inf sentinel.
    From request `start` on (none waiting), with `fin` holding the finishes before it (`quiet_start`)."""
    n = len(arr) - 1
    fin = [0.0] * n if fin is None else fin
    fifo = [deque() for _ in range(groups)]
    urgent: list[int] = []  # heap of the ranks that have requests waiting
    heappush, heappop, heapreplace = heapq.heappush, heapq.heappop, heapq.heapreplace
    i, t = start, -_INF
    while i < n or urgent:
        w = free[0]
        if not urgent:
            a = arr[i]
            if a >= w and arr[i + 1] > a:  # a free worker and no rival arrival: start now
                f = a + srv[i]
                heapreplace(free, f)
                fin[i] = f
                if a > cut[i]:
                    return fin, i
                t = a
                i += 1
                continue
            t = a if a > w else w
        elif w > t:
            t = w
        while i < n and arr[i] <= t:  # (an unserved upstream request arrives at inf, like the sentinel)
            g = grp[i]
            q = fifo[g]
            if not q:
                heappush(urgent, g)
            q.append(i)
            i += 1
        q = fifo[urgent[0]]
        p = q.popleft()
        if not q:
            heappop(urgent)
        f = t + srv[p]
        heapreplace(free, f)
        fin[p] = f
        if t > cut[p]:
            return fin, p
    return fin, -1
