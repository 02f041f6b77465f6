"""A mid-rollout snapshot with a chosen number of estimated requests: the planner-runtime case (Fig. 15).

Generated (planner.eval.tracegen) six-task-style CUDA batches, two stages: per task the previous batch is the
history and the next one is active, each observed 150 s after it opened, so its requests are a
mix of done, running, queued and still to come, as at a real decision epoch.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from planner.eval.tracegen import GeneratorParams, generate
from planner.policy.snapshot import DONE, QUEUED, RUNNING, ActiveBatch, Snapshot, StageState

BATCH_SIZE = 2000
OBSERVED_AFTER_S = 150.0  # soon after the first arrivals (100 s): nearly every request is still estimated


def snapshot(requests: int, seed: int = 0, workers: int = 0) -> Snapshot:
    """About `requests` estimated requests (not done yet) over ceil(requests / 2000) active batches."""
    tasks = max(1, round(requests / BATCH_SIZE))
    first = _build(tasks, max(1, requests // tasks), seed, workers)
    estimated = sum(b.size - int((b.state == DONE).sum()) for b in first.batches)
    if estimated >= requests:
        return first
    return _build(tasks, max(1, round(requests * requests / estimated) // tasks), seed, workers)


def _build(tasks: int, size: int, seed: int, workers: int) -> Snapshot:
    trace = generate(GeneratorParams(tasks=tasks, batches=2, batch_size=size), seed)
    history = {t: trace.batches_of(t)[0].requests for t in trace.tasks}
    current = [trace.batches_of(t)[1] for t in trace.tasks]
    now = max(b.start_s for b in current) + OBSERVED_AFTER_S
    batches = []
    for b in current:
        b = replace(b, start_s=now - OBSERVED_AFTER_S)  # every batch as far into its rollout
        req = b.requests[np.argsort(b.requests[:, 0], kind="stable")]
        arrived = req[b.start_s + req[:, 0] <= now]
        t_in = b.start_s + arrived[:, 0]
        t_c = t_in + arrived[:, 1]
        t_e = t_c + arrived[:, 2]
        state = np.where(t_e <= now, DONE, np.where(arrived[:, 1] > 0, RUNNING, DONE))
        stage = np.where(t_c <= now, 1, 0)
        state = np.where((stage == 1) & (arrived[:, 2] > 0) & (t_e > now), QUEUED, state)
        since = np.where(stage == 1, t_c, t_in)
        batches.append(ActiveBatch(id=f"{b.task}/{b.batch}", task=b.task, start_s=b.start_s, size=b.size,
                                   arrival=arrived[:, 0], stage=stage, state=state, since=since))
    stages = tuple(
        StageState(s.name, s.resource, s.cost, s.timeout_s, f"cuda.{s.name}", workers=workers)
        for s in trace.stages
    )
    return Snapshot(now=now, pipeline="cuda", stages=stages, batches=tuple(batches), history=history)
