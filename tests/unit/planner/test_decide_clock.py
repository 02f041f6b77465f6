"""decide() decides the same wherever the snapshot's clock starts (docs/design.md §14, trap 7)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from farm.knobs import Knobs
from planner.policy.capacity import Capacity
from planner.policy.decide import decide
from planner.policy.snapshot import QUEUED, ActiveBatch, Need, Snapshot, StageState, from_now

EPOCH = 1795772855.0  # a live farm's clock (2026): a float resolves 2.4e-7 s there

# A live replay at speed 20 on Ray with 2 GPUs, 0.9 s after its first batches opened: two cold batches, all
# their arrived requests queued at compile since they arrived, no worker ready (the daemon's snapshot,
# reduced to the requests that decide it)
ARRIVALS_B = [0.18529367446899414, 0.19890475273132324, 0.19890475273132324, 0.19890475273132324,
              0.2054893970489502, 0.20995306968688965, 0.21936869621276855, 0.224778413772583,
              0.22834229469299316, 0.23456549644470215, 0.2391977310180664, 0.2410593032836914,
              0.24561476707458496, 0.2546958923339844, 0.2546958923339844, 0.2546958923339844,
              0.2793266773223877, 0.28745603561401367, 0.29509568214416504, 0.30057191848754883,
              0.30532336235046387, 0.3072803020477295, 0.3158915042877197, 0.35337138175964355,
              0.37113118171691895, 0.3747878074645996, 0.39388251304626465, 0.4135744571685791,
              0.42393946647644043, 0.4475514888763428, 0.4529712200164795, 0.505681037902832,
              0.5098090171813965, 0.5403311252593994]
ARRIVALS_A = [0.4628872871398926, 0.5525527000427246]


# the daemon's instants as it read them (epoch seconds); each request queued when it arrived
NOW, KEY = 1795772855.9181263, 1795772855.336575
START_A, START_B = 1795772855.032883, 1795772855.0621


def _queued(bid: str, task: str, start: float, key: float, arrivals: list[float], origin: float) -> ActiveBatch:
    arrival = np.asarray(arrivals)
    n = len(arrival)
    return ActiveBatch(bid, task, start - origin, 48, key=key - origin, arrival=arrival,
                       stage=np.zeros(n, dtype=np.int64), state=np.full(n, QUEUED),
                       since=(start + arrival) - origin, served=np.zeros((n, 2)))


def _replay_snapshot(origin: float = 0.0) -> Snapshot:
    """The snapshot on the epoch's clock, or with `origin` taken from every instant (exactly: it is near them)."""
    stages = (StageState("compile", "cpu", 1.0, 0.18, "synthetic.compile", workers=3),
              StageState("execute", "gpu", 8.0, 0.09, "synthetic.execute", workers=2))
    batches = (_queued("a", "cuda-1", START_A, KEY, ARRIVALS_A, origin),
               _queued("b", "cuda-0", START_B, KEY, ARRIVALS_B, origin))
    return Snapshot(now=NOW - origin, pipeline="synthetic", stages=stages, batches=batches, startup_s=2.0,
                    capacity=Capacity(placeable={"cpu": 9, "gpu": 0}, most={"cpu": 12, "gpu": 2}))


KNOBS = Knobs(delay_s=0.1, tick_s=0.5)  # the demo's knobs on the compressed clock


@pytest.mark.parametrize("origin", [EPOCH, 1795770000.0, NOW - 1000.0])
def test_a_snapshot_on_the_epochs_clock_gets_the_pools_of_the_same_snapshot_on_a_later_started_clock(origin):
    live = decide(_replay_snapshot(), KNOBS, random.Random(0))
    moved = decide(_replay_snapshot(origin), KNOBS, random.Random(0))
    assert live.workers == moved.workers
    assert live.reason == moved.reason


def test_the_keys_come_back_on_the_snapshots_clock():
    live = decide(_replay_snapshot(), KNOBS, random.Random(0))
    moved = decide(_replay_snapshot(NOW - 1000.0), KNOBS, random.Random(0))
    for bid, key in moved.estimates.items():
        assert live.estimates[bid] == pytest.approx(NOW - 1000.0 + key, abs=1e-6)
    assert live.need.at == pytest.approx(NOW - 1000.0 + moved.need.at, abs=1e-6)


def test_from_now_moves_every_instant_and_leaves_the_durations():
    snap = _replay_snapshot()
    snap = Snapshot(now=snap.now, pipeline=snap.pipeline, stages=snap.stages, batches=snap.batches,
                    startup_s=snap.startup_s, recent=(Need(snap.now - 0.25, {"synthetic.compile": 9}),))
    moved = from_now(snap)
    assert moved.now == 0.0
    assert moved.recent[0].at == pytest.approx(-0.25, abs=1e-6)
    b, m = snap.batches[1], moved.batches[1]
    assert m.start_s == pytest.approx(b.start_s - snap.now, abs=1e-6)
    assert m.key == pytest.approx(b.key - snap.now, abs=1e-6)
    assert np.allclose(m.since, b.since - snap.now, atol=1e-6)
    assert np.array_equal(m.arrival, b.arrival)
    assert moved.startup_s == snap.startup_s and moved.stages == snap.stages
