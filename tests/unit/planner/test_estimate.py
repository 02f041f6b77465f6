"""Algorithm 2: the estimated requests of every active batch."""

from __future__ import annotations

import random

import numpy as np

from planner.policy.estimate import COLD_LEARN, estimate
from planner.policy.snapshot import DONE, QUEUED, RUNNING, ActiveBatch, Snapshot, StageState

STAGES = (StageState("compile", "cpu", 1.0, 120.0, "cuda.compile"), StageState("execute", "gpu", 8.0, 60.0, "cuda.execute"))
HISTORY = np.array([[10.0, 50.0, 3.0], [20.0, 40.0, 0.0], [30.0, 60.0, 5.0], [40.0, 0.0, 0.0]])


def _snap(batch, now=100.0, history=None):
    return Snapshot(now=now, pipeline="cuda", stages=STAGES, batches=(batch,),
                    history={"t": HISTORY} if history is None else history)


def test_every_outstanding_request_is_estimated_even_when_history_says_it_arrived():
    # history's requests all arrived by offset 40, it is offset 100 and 2 of 4 are still to come
    b = ActiveBatch("b", "t", 0.0, 4, arrival=[10.0, 20.0], stage=[0, 0], state=[DONE, DONE], since=[60.0, 60.0])
    w, cold = estimate(_snap(b), random.Random(1))
    assert w.size == 2 and not cold
    assert np.all(w.arrival == 100.0)  # due already: they arrive now at the earliest


def test_future_requests_are_the_latest_of_the_history_shifted_to_this_batch():
    b = ActiveBatch("b", "t", 90.0, 4, arrival=[5.0, 6.0], stage=[0, 0], state=[DONE, DONE], since=[95.0, 96.0])
    w, _ = estimate(_snap(b), random.Random(1))
    assert sorted(w.arrival) == [120.0, 130.0]
    assert {tuple(r) for r in w.times} == {(60.0, 5.0), (0.0, 0.0)}


def test_a_running_request_gets_a_history_time_longer_than_its_elapsed_time():
    b = ActiveBatch("b", "t", 0.0, 1, arrival=[10.0], stage=[0], state=[RUNNING], since=[55.0])  # 45 s in
    for seed in range(20):
        w, _ = estimate(_snap(b), random.Random(seed))
        assert w.running[0]
        assert w.times[0, 0] in (5.0, 15.0)  # from the 50 s or 60 s compile, minus 45


def test_a_queued_request_samples_times_from_its_stage_on():
    b = ActiveBatch("b", "t", 0.0, 1, arrival=[10.0], stage=[1], state=[QUEUED], since=[70.0])
    w, _ = estimate(_snap(b), random.Random(3))
    assert w.times[0, 0] == 0.0 and w.times[0, 1] in (3.0, 5.0)
    assert w.arrival[0] == 70.0  # keeps its real place in the queue


def test_sampling_is_reproducible_for_a_seed():
    b = ActiveBatch("b", "t", 0.0, 3, arrival=[10.0, 20.0], stage=[0, 0], state=[RUNNING, QUEUED], since=[80.0, 90.0])
    a, _ = estimate(_snap(b), random.Random(7))
    c, _ = estimate(_snap(b), random.Random(7))
    assert np.array_equal(a.times, c.times) and np.array_equal(a.arrival, c.arrival)


def test_a_task_without_history_borrows_the_pipelines_other_tasks():
    b = ActiveBatch("b", "new", 0.0, 2)
    w, cold = estimate(_snap(b, now=0.0, history={"other": HISTORY}), random.Random(1))
    assert not cold and w.size == 2


def test_with_no_history_anywhere_arrived_requests_run_to_their_timeouts():
    b = ActiveBatch("b", "new", 0.0, 3, arrival=[1.0], stage=[0], state=[QUEUED], since=[1.0])
    w, cold = estimate(_snap(b, now=2.0, history={}), random.Random(1))
    assert cold == ("b",)
    assert list(w.times[0]) == [120.0, 60.0]
    assert w.size == 2  # and one spare request for what is still to come


def _cold(now, done_arrivals, served_row=(40.0, 5.0)):
    """A cold pipeline: batch `b` with done requests that arrived at `done_arrivals` and one queued at
    compile, and no history anywhere."""
    n = len(done_arrivals)
    b = ActiveBatch("b", "new", 0.0, n + 2, arrival=[*done_arrivals, now - 1.0], stage=[0] * (n + 1),
                    state=[DONE] * n + [QUEUED], since=[now - 2.0] * n + [now - 1.0],
                    served=[list(served_row)] * n + [[0.0, 0.0]])
    return _snap(b, now=now, history={})


def test_a_cold_pipeline_learns_its_times_from_requests_done_long_enough_ago():
    w, cold = estimate(_cold(now=500.0, done_arrivals=[10.0] * COLD_LEARN), random.Random(1))
    assert cold == ("b",)
    assert list(w.times[0]) == [40.0, 5.0]  # not the timeouts


def test_requests_done_too_recently_to_have_run_their_course_teach_nothing():
    # arrived 100 s ago, less than the 180 s of timeouts: the slow ones of their age are still out
    w, _ = estimate(_cold(now=500.0, done_arrivals=[400.0] * COLD_LEARN), random.Random(1))
    assert list(w.times[0]) == [120.0, 60.0]


def test_too_few_done_requests_leave_the_worst_case():
    w, _ = estimate(_cold(now=500.0, done_arrivals=[10.0] * (COLD_LEARN - 1)), random.Random(1))
    assert list(w.times[0]) == [120.0, 60.0]


def test_a_cold_batch_learning_its_times_still_keeps_a_spare_for_what_is_to_come():
    w, _ = estimate(_cold(now=500.0, done_arrivals=[10.0] * COLD_LEARN), random.Random(1))
    assert w.size == 2 and list(w.times[1]) == [120.0, 60.0]
