"""What a capacity holds back (`planner.policy.capacity`): whether a decision's pools fit it, the
baselines' pools cut to it, and the `Binding`s that tell the operator which stage is short, by how much,
and the extra delay the plan now expects. Pure functions of frozen data, used by `decide`."""

from __future__ import annotations

import math

import numpy as np

from farm.knobs import Knobs
from planner.policy.capacity import Capacity, fit
from planner.policy.simulate import Simulator
from planner.policy.snapshot import Binding, Snapshot
from planner.policy.workload import Workload


def room(capacity: Capacity) -> dict[str, int]:
    """Per kind, the most workers a plan may have before the capacity binds: all an autoscaler may add
    where its nodes are ready at once, else what is placeable now (a worker beyond waits for a node)."""
    if capacity.node_startup_s > 0:
        return {kind: capacity.ready(kind) for kind in capacity.most}
    return dict(capacity.most)


def fits(kinds, pools, limits: dict[str, int]) -> bool:
    """Every resource kind's stages together within `limits`, in each of `pools` (counts per stage)."""
    for counts in pools:
        used: dict[str, int] = {}
        for kind, n in zip(kinds, counts):
            used[kind] = used.get(kind, 0) + int(n)
        if any(used[kind] > limit for kind, limit in limits.items() if kind in used):
            return False
    return True


def extra_delays(w: Workload, completion: np.ndarray | None) -> tuple[float | None, float | None]:
    """Mean and max over the active batches of the extra delay C - T a plan's completions give."""
    if completion is None or not len(completion):
        return None, None
    d = np.maximum(np.asarray(completion) - w.deadlines, 0.0)
    return float(d.mean()), float(d.max())


def bindings(snapshot: Snapshot, knobs: Knobs, wanted, held, delays) -> tuple[Binding, ...]:
    """A `Binding` for every stage of a kind whose `most` is below what its stages want, held below its
    own want (a stage of another kind that a binding plan shrinks is not held back by the capacity, nor
    is one an autoscaler can grow to its want)."""
    mean, top = delays
    most, used = snapshot.capacity.most, {}
    for s, a in zip(snapshot.stages, wanted):
        used[s.resource] = used.get(s.resource, 0) + int(a)
    short = {kind for kind, n in used.items() if kind in most and n > most[kind]}
    return tuple(Binding(s.queue, s.resource, int(a), int(b), mean, top, knobs.delay_s)
                 for s, a, b in zip(snapshot.stages, wanted, held) if a > b and s.resource in short)


def pools_within(snapshot: Snapshot, knobs: Knobs, counts: dict[str, int], w: Workload | None):
    """The non-estimating policies' pools cut to the capacity's `most`, and what that holds back (the
    delay from one simulation of the held pools where there are estimated requests)."""
    kinds = [s.resource for s in snapshot.stages]
    wanted = [counts[s.queue] for s in snapshot.stages]
    held = fit(wanted, kinds, snapshot.capacity.most)
    if held == wanted:
        return counts, ()
    delays: tuple[float | None, float | None] = (None, None)
    if w is not None and w.size:
        sim = Simulator(w, scheduler=knobs.scheduler, timeout_aware=False, limits=np.full(len(w.keys), math.inf))
        delays = extra_delays(w, sim.run(held, stop_early=False).completion)
    return {s.queue: n for s, n in zip(snapshot.stages, held)}, bindings(snapshot, knobs, wanted, held, delays)


def dedicated_within(snapshot: Snapshot, knobs: Knobs, dedicated: dict[str, dict[str, int]]):
    """zq-dedicated's per-task pools cut so that their sums fit the capacity's `most`, every task's in
    proportion (it plans no shared pool, so no delay is expected of it)."""
    tasks = list(dedicated)
    flat = [dedicated[t][s.queue] for t in tasks for s in snapshot.stages]
    held = fit(flat, [s.resource for _ in tasks for s in snapshot.stages], snapshot.capacity.most)
    if held == flat:
        return dedicated, ()
    m = len(snapshot.stages)
    out = {t: {s.queue: held[i * m + k] for k, s in enumerate(snapshot.stages)} for i, t in enumerate(tasks)}
    wanted = [sum(flat[i * m + k] for i in range(len(tasks))) for k in range(m)]
    kept = [sum(held[i * m + k] for i in range(len(tasks))) for k in range(m)]
    return out, bindings(snapshot, knobs, wanted, kept, (None, None))
