"""What an operator sees of the live farm, as plain data: each batch in flight (its progress, how late it is
against D, how long its trainer has been silent against `abandon_after_s`, the stage it waits on), each
tenant's use, and each tenant's fair share against the workers it holds. `farm status` and the gateway's farm
page (`/ui`) show the same numbers from here; the metrics count busy workers per tenant with `busy_workers`.

Pure functions of a `LiveState` and the knobs: no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from farm.knobs import Knobs
from farm.protocol.live import LiveState, Progress
from farm.protocol.scope import batch_tenant
from farm.protocol.shares import DEFAULT, FairShare
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


UNKNOWN_KIND = "unknown"  # a stage whose pipeline this process cannot load


def busy_workers(running: Mapping[str, Iterable[str]],
                 kind_of: Callable[[str], str | None]) -> dict[str, dict[str, int]]:
    """Per tenant, the workers busy on its requests now by resource kind (what a cap bounds), from the batches
    each stage's workers run (`running`: stage queue -> the batch of each busy worker)."""
    out: dict[str, Counter] = {}
    for q, batches in running.items():
        kind = kind_of(q) or UNKNOWN_KIND
        for b in batches:
            out.setdefault(batch_tenant(b), Counter())[kind] += 1
    return {t: dict(sorted(c.items())) for t, c in sorted(out.items())}


def tenant_shares(live: LiveState, rows: list[dict[str, Any]], shares: Mapping[str, FairShare],
                  kind_of: Callable[[str], str | None]) -> dict[str, dict[str, Any]]:
    """Per tenant with a share published, a batch active or a worker busy: its share and caps as the pick reads
    them (`shares`; the default for a tenant without an entry), the workers busy on its requests now per
    resource kind, and how far its active batches run past their estimated completion so far (mean and max; the
    extra delay of its completed batches is the history's: the metrics' farm_tenant_extra_delay_seconds)."""
    busy = busy_workers({q: [r.batch for r in st.running] for q, st in live.stages.items()}, kind_of)
    late: dict[str, list[float]] = {}
    for r in rows:
        late.setdefault(r["tenant"], []).append(r["extra_delay_s"])
    out = {}
    for t in sorted(set(shares) | set(busy) | set(late)):
        share = shares.get(t, DEFAULT)
        delays = late.get(t, [])
        out[t] = {"share": share.share, "max_workers": dict(share.max_workers), "reserve": share.reserve,
                  "busy": busy.get(t, {}),
                  "extra_delay_mean_s": round(sum(delays) / len(delays), 3) if delays else None,
                  "extra_delay_max_s": max(delays) if delays else None}
    return out
