"""The replay's event handlers, one per event kind, as SimPy's events carry their callbacks.

Each handler changes the simulated farm (`planner.eval.state`) at `now` and answers whether the event is
a decision epoch of the live daemon: a batch opens (the trainer's hint), a batch completes, a tick.
"""

from __future__ import annotations

from typing import Any, Callable

from planner.eval.state import ARRIVE, FINISH, LEAVE, OPEN, READY, TICK, Batch, FarmState


def on_finish(farm: FarmState, now: float, event: Any) -> bool:
    """A request's stage ends: its worker is free (or retires) and the request goes on or is done."""
    p, run_id = event
    run = p.running.pop(run_id, None)
    if run is None:
        return False  # the run was stopped (preemption): the request was put back and runs again later
    b, i, k = run.batch, run.i, run.k
    p.busy -= 1
    p.held[b.tenant] -= 1
    b.served[i, k] = b.requests[i, 1 + k]
    farm.release(p, now)
    nxt = b.next_stage(i, k)
    if nxt >= 0:
        farm.enqueue(b, i, nxt, now)
        return False
    return farm.finish_request(b, i, now)


def on_ready(farm: FarmState, now: float, event: Any) -> bool:
    """A new worker is ready, unless it was retired while it started."""
    p, wid = event
    if p.starting.pop(wid, None) is not None:
        p.idle += 1
    return False


def on_open(farm: FarmState, now: float, b: Batch) -> bool:
    """A batch opens: its requests arrive at their trace offsets from now."""
    farm.active[b.index] = b
    for i in range(b.size):
        farm.events.push(b.tb.start_s + float(b.requests[i, 0]), ARRIVE, (b, i))
    return True


def on_arrive(farm: FarmState, now: float, event: Any) -> bool:
    """A request arrives and queues at the first stage it visits."""
    b, i = event
    b.arrived += 1
    first = b.next_stage(i, -1)
    if first >= 0:
        farm.enqueue(b, i, first, now)
        return False
    return farm.finish_request(b, i, now)  # visits no stage: done on arrival


def on_tick(farm: FarmState, now: float, event: Any) -> bool:
    """The periodic decision, and the next one `tick_s` later."""
    if now > farm.stall_at:
        raise RuntimeError(f"replay stalled: {farm.remaining} batches unfinished a day after the last arrival")
    farm.events.push(now + farm.knobs.tick_s, TICK, None)
    return True


def on_leave(farm: FarmState, now: float, event: Any) -> bool:
    """Retired workers are gone at the end of their exit lag."""
    p, n = event
    p.leaving -= n
    return False


HANDLERS: dict[int, Callable[[FarmState, float, Any], bool]] = {
    FINISH: on_finish, READY: on_ready, OPEN: on_open, ARRIVE: on_arrive, TICK: on_tick, LEAVE: on_leave,
}
