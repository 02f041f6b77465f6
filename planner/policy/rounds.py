"""One stage of SIMULATE in rounds of dispatches, vectorised: the same finish times as `planner.policy.sweep`.

`sweep_ebf` and `sweep_fcfs` take one request at a time; with thousands of workers a stage runs
thousands of dispatches that no worker freed meanwhile could change, and this takes them as one round
of numpy operations. The sweep's semantics, restated so that a round follows from them:
- dispatch k (in time order) happens at T_k = max(T_{k-1}, W_k, A_k): W_k is the k-th pop of the heap
  of free times, and A_k the arrival of the k-th request in arrival order (if nothing waits, the next
  request arrives first; if something does, it arrived before T_{k-1});
- it takes, of the requests arrived by T_k (ties included) and not yet taken, the one of the most
  urgent FIFO (EBF: smallest key rank, then arrival; FCFS: one FIFO);
- the heap's pops never decrease (a worker taken at T_k is back at T_k + s > T_k), so while the next
  free times of the heap are no later than any finish of the round, they are its pops in order.
A round takes the heap's earliest free times W (sorted), dispatches at the running maximum of W and the
arrivals, and then keeps its prefix up to the first pop that a finish of the round precedes. Which FIFO
takes each dispatch is counted per class of the i most urgent FIFOs: a class takes every dispatch at
which it has an arrived request left, so its count after k dispatches is min(k, min_j (a_j + k - j)),
a_j its arrivals by T_j; a dispatch belongs to the first class whose count rises there.

A round pays where many workers are free before any of them is back (a large pool of long requests);
with a few workers of short requests it is a handful of dispatches, and the sweep one at a time is
faster (`pays`).
"""

from __future__ import annotations

import numpy as np

_INF = float("inf")
ROUND = 4096  # the most dispatches in one round (bounds the temporaries)
PAYS_FROM = 512  # a round of at least this many dispatches (expected) beats the sweep one at a time


def pays(n_workers: int, srv: np.ndarray) -> bool:
    """Whether rounds beat the one-at-a-time sweep: a worker taken comes back no sooner than the
    shortest request, so a round holds about the workers free within that time."""
    if not len(srv) or n_workers < PAYS_FROM:
        return False
    return n_workers * float(srv.min()) >= PAYS_FROM * float(srv.mean())


def fifos(grp: np.ndarray | None, groups: int, n: int) -> tuple[np.ndarray, list[int]]:
    """The `n` requests (in arrival order) by FIFO: EBF's key ranks (`grp`, `groups` of them) or FCFS's
    one (`grp` None); `order[bounds[g]:bounds[g + 1]]` is FIFO g in arrival order."""
    if grp is None:
        return np.arange(n), [0, n]
    order = np.argsort(grp, kind="stable")
    return order, np.searchsorted(grp[order], np.arange(groups + 1)).tolist()


def sweep_rounds(arr: np.ndarray, srv: np.ndarray, fifo: tuple[np.ndarray, list[int]], free,
                 cut: np.ndarray) -> tuple[np.ndarray, int]:
    """`sweep_ebf` or `sweep_fcfs` (by `fifo`, from `fifos`) over numpy arrays in arrival order (no
    sentinel): the finish times, and the first request to start after its `cut` (-1: none), where it
    stops. `free`: when each worker is first free, earliest first."""
    n = len(arr)
    fin = np.zeros(n)
    heap = np.asarray(free, dtype=np.float64)
    if not n:
        return fin, -1
    order, bounds = fifo
    groups = len(bounds) - 1
    arr_o = arr[order]
    fifo_arr = [arr_o[bounds[g]:bounds[g + 1]] for g in range(groups)]
    nxt = list(bounds[:-1])  # per FIFO, the position in `order` of its first request not yet taken
    head = [float(arr_o[nxt[g]]) if nxt[g] < bounds[g + 1] else _INF for g in range(groups)]
    shortest = float(srv.min())
    done, t_prev, last = 0, -_INF, 16
    while done < n:
        sure = int(np.searchsorted(heap, heap[0] + shortest, side="right"))  # no finish precedes these
        size = min(len(heap), n - done, max(sure, 2 * last), ROUND)
        w = heap[:size]
        t = np.maximum(w, arr[done:done + size])
        if t_prev > t[0]:
            t[0] = t_prev
        np.maximum.accumulate(t, out=t)
        active = _contenders(t, head, fifo_arr, [nxt[g] - bounds[g] for g in range(groups)], size)
        if len(active) == 1:
            counts = None
            p = order[nxt[active[0]]:nxt[active[0]] + size]
        else:
            counts = _classes(t, [fifo_arr[g] for g in active], [nxt[g] - bounds[g] for g in active])
            p = _taken(counts, order, [nxt[g] for g in active])
        f = t + srv[p]
        if size > 1:
            early = np.flatnonzero(w[1:] > np.minimum.accumulate(f)[:-1])
            if len(early):  # a worker of this round is back before that pop: the round ends there
                size = int(early[0]) + 1
                t, p, f = t[:size], p[:size], f[:size]
        took = [size] if counts is None else np.diff(counts[:, size - 1], prepend=0).tolist()
        for g, c in zip(active, took):
            nxt[g] += c
            head[g] = float(arr_o[nxt[g]]) if nxt[g] < bounds[g + 1] else _INF
        late = np.flatnonzero(t > cut[p])
        if len(late):
            k = int(late[0])
            fin[p[:k + 1]] = f[:k + 1]
            return fin, int(p[k])
        fin[p] = f
        f.sort()
        heap = np.concatenate([heap[size:], f])
        heap.sort(kind="stable")  # two sorted runs: merged
        t_prev, done, last = float(t[-1]), done + size, size
    return fin, -1


def _contenders(t: np.ndarray, head: list[float], arrivals: list[np.ndarray], taken: list[int], size: int) -> list[int]:
    """The FIFOs that may take a dispatch of the round, most urgent first: those with a request arrived
    by its last dispatch, up to the first with which they have one for every dispatch of the round
    already at its first (that class takes every dispatch: the FIFOs after it get none)."""
    out = []
    ready = 0  # requests of the FIFOs so far arrived by the round's first dispatch and not taken
    first = t[0]
    for g, h in enumerate(head):
        if h <= t[-1]:
            out.append(g)
            if h <= first:
                ready += int(np.searchsorted(arrivals[g], first, side="right")) - taken[g]
                if ready >= size:
                    break
    return out


def _classes(t: np.ndarray, arrivals: list[np.ndarray], taken: list[int]) -> np.ndarray:
    """counts[i, k]: the dispatches 0..k that the i+1 most urgent FIFOs take (`arrivals` of each, in
    order of urgency, of which the first `taken` are gone already).

    A FIFO's requests arrived by each dispatch: those by the first dispatch, plus, per request arriving
    within the round, every dispatch from the first at or after its arrival on (one count of the
    arrivals within the round instead of a search per dispatch)."""
    size = len(t)
    rows = len(arrivals)
    first = np.empty(rows, dtype=np.int64)
    within = []
    for i, (a, gone) in enumerate(zip(arrivals, taken)):
        lo = int(np.searchsorted(a, t[0], side="right"))
        hi = int(np.searchsorted(a, t[-1], side="right"))
        first[i] = lo - gone
        if hi > lo:
            within.append(np.searchsorted(t, a[lo:hi], side="left") + i * size)
    flat = np.concatenate(within) if within else np.zeros(0, dtype=np.int64)
    counts = np.bincount(flat, minlength=rows * size).reshape(rows, size)
    counts[:, 0] += first
    np.cumsum(counts, axis=0, out=counts)
    np.cumsum(counts, axis=1, out=counts)
    k = np.arange(1, size + 1)
    counts -= k
    np.minimum.accumulate(counts, axis=1, out=counts)
    np.minimum(counts, 0, out=counts)
    counts += k
    return counts


def _taken(counts: np.ndarray, order: np.ndarray, nxt: list[int]) -> np.ndarray:
    """The request of each dispatch: of the first class whose count rises there, its FIFO's next one."""
    rise = np.empty_like(counts)
    rise[:, 0] = counts[:, 0]
    np.subtract(counts[:, 1:], counts[:, :-1], out=rise[:, 1:])
    which = len(counts) - rise.sum(axis=0)
    cols = np.arange(counts.shape[1])
    before = np.where(which > 0, counts[np.maximum(which - 1, 0), cols], 0)
    return order[np.asarray(nxt)[which] + counts[which, cols] - before - 1]
