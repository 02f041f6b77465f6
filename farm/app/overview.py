"""What an operator sees of the live farm, as plain data: each batch in flight (its progress, how late it is
against D, how long its trainer has been silent against `abandon_after_s`, the stage it waits on) and each
tenant's use. `farm status` and the gateway's farm page (`/ui`) show the same numbers from here.

Pure functions of a `LiveState` and the knobs: no I/O.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from farm.knobs import Knobs
from farm.protocol.live import LiveState, Progress
from farm.protocol.scope import batch_tenant
from farm.protocol.silence import silent


def _where(live: LiveState) -> tuple[dict[str, Counter], dict[str, Counter]]:
    """Per batch, its requests queued and running at each stage."""
    queued: dict[str, Counter] = {}
    running: dict[str, Counter] = {}
    for q, st in live.stages.items():
        for p in st.pending:
            queued.setdefault(p.batch, Counter())[q] += 1
        for r in st.running:
            running.setdefault(r.batch, Counter())[q] += 1
    return queued, running


def batch_row(b: Progress, knobs: Knobs, now: float, queued: Counter, running: Counter) -> dict[str, Any]:
    extra = max(0.0, now - b.key)  # past its estimated completion T: the extra delay so far
    after = knobs.abandon_after()
    # the stage most of its waiting requests queue at (running ones where none queue): what holds it up
    waits = queued or running
    return {
        "batch": b.batch_id, "tenant": batch_tenant(b.batch_id), "task": b.task, "pipeline": b.pipeline,
        "size": b.size, "arrived": b.arrived, "done": b.done, "opened_at": b.opened_at, "estimated_at": b.key,
        "extra_delay_s": round(extra, 3), "late": extra > knobs.delay_s,
        "waiting_on": max(sorted(waits), key=waits.__getitem__) if waits else None,
        "queued": dict(sorted(queued.items())), "running": dict(sorted(running.items())),
        # a batch never heard of since this was recorded (opened before) has no silence to show
        "seen_at": b.seen_at, "silent_s": None if b.seen_at is None else round(max(0.0, now - b.seen_at), 3),
        "abandon_after_s": after, "silent": silent(b.seen_at, after, now),
    }


def batch_rows(live: LiveState, knobs: Knobs) -> list[dict[str, Any]]:
    """The active batches, the latest first (the earliest estimated completion: the most late)."""
    queued, running = _where(live)
    rows = [batch_row(b, knobs, live.now, queued.get(b.batch_id, Counter()), running.get(b.batch_id, Counter()))
            for b in live.batches]
    return sorted(rows, key=lambda r: (r["estimated_at"], r["opened_at"], r["batch"]))


def tenant_use(rows: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per tenant (`-`: batches opened directly on the farm), its open batches and requests: arrived and not
    done (outstanding), queued at a stage, running on a worker, and silent batches."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        use = out.setdefault(r["tenant"], {"batches": 0, "outstanding": 0, "queued": 0, "running": 0, "silent": 0})
        use["batches"] += 1
        use["outstanding"] += r["arrived"] - r["done"]
        use["queued"] += sum(r["queued"].values())
        use["running"] += sum(r["running"].values())
        use["silent"] += int(r["silent"])
    return dict(sorted(out.items()))
