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
takes each dispatch follows FIFO by FIFO, most urgent first: a FIFO takes every dispatch still free at
which it has an arrived request left, so its m-th request takes the first free dispatch at or after
both its arrival and its (m-1)-th one's (a running maximum over its requests of the round, `_picks`).

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
            slots = None
            p = order[nxt[active[0]]:nxt[active[0]] + size]
        else:
            p, slots = _picks(t, [fifo_arr[g] for g in active], [nxt[g] - bounds[g] for g in active], order,
                              [nxt[g] for g in active])
        f = t + srv[p]
        if size > 1:
            early = np.flatnonzero(w[1:] > np.minimum.accumulate(f)[:-1])
            if len(early):  # a worker of this round is back before that pop: the round ends there
                size = int(early[0]) + 1
                t, p, f = t[:size], p[:size], f[:size]
        took = [size] if slots is None else [int(np.searchsorted(x, size)) for x in slots]
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


def _picks(t: np.ndarray, arrivals: list[np.ndarray], taken: list[int], order: np.ndarray,
           nxt: list[int]) -> tuple[np.ndarray, list[np.ndarray]]:
    """The request of each dispatch of the round, and the dispatches each FIFO takes (in order), for the
    FIFOs in order of urgency (`arrivals` of each, of which the first `taken` are gone already; `nxt`:
    the position in `order` of its first one left).

    FIFO by FIFO: the most urgent takes every dispatch at which it has a request arrived, so its m-th
    request takes dispatch max(e_m, its (m-1)-th + 1), e_m the first at or after its arrival, which is
    m + the running maximum of e_j - j. The next FIFO does the same on the dispatches still free (counted
    among those only), and so on until every dispatch is taken: a few operations on each FIFO's requests
    of the round, none on a FIFO-by-dispatch table."""
    size = len(t)
    p = np.empty(size, dtype=order.dtype)
    busy = np.zeros(0, dtype=np.int64)  # the dispatches taken so far, in order
    out = []
    for a, gone, start in zip(arrivals, taken, nxt):
        free = size - len(busy)
        if not free:
            out.append(busy[:0])
            continue
        hi = min(int(np.searchsorted(a, t[-1], side="right")), gone + free)
        e = np.searchsorted(t, a[gone:hi], side="left")
        if len(busy):
            e -= np.searchsorted(busy, e, side="left")  # among the free dispatches
        m = np.arange(len(e))
        e -= m
        np.maximum.accumulate(e, out=e)
        e += m
        e = e[:int(np.searchsorted(e, free))]
        if len(busy):  # the c-th free dispatch: c plus the taken ones before it
            e += np.searchsorted(busy - np.arange(len(busy)), e, side="right")
        p[e] = order[start:start + len(e)]
        out.append(e)
        busy = np.sort(np.concatenate([busy, e]), kind="stable")  # two sorted runs: merged
    return p, out
