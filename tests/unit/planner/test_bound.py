"""The bound on the mean extra delay that no dispatch order beats (the room in Fig. 14a)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from test_search import _two_stage_workload, two_stage

from planner.eval.bound import mean_delay_bound
from planner.policy.simulate import Simulator
from planner.policy.workload import Workload, single_stage


def test_one_worker_for_two_simultaneous_requests_delays_the_batch_by_the_shorter_one():
    w = single_stage([0.0, 0.0], [3.0, 5.0], 60.0)  # T = 5; on one worker the last ends at 8
    assert mean_delay_bound(w, 0, 1) == 3.0


def test_a_batch_whose_requests_never_overlap_has_no_bound_on_one_worker():
    w = single_stage([0.0, 10.0], [3.0, 5.0], 60.0)
    assert mean_delay_bound(w, 0, 1) == 0.0


def test_the_batch_finishing_last_shares_the_common_bound():
    # two batches of one 4 s request each at time 0 on one worker: one of them ends at 8, T = 4 for both,
    # so the mean over the two batches is at least (8 - 4) / 2
    w = single_stage([0.0, 0.0], [4.0, 4.0], 60.0, batch=[0, 1])
    assert mean_delay_bound(w, 0, 1) == 2.0


def test_upstream_stages_only_move_when_requests_reach_the_stage():
    # both requests reach execute at 10 (after 10 s of compile) and take 2 s there: T = 12
    w = Workload(now=0.0, arrival=[0.0, 0.0], times=[[10.0, 2.0], [10.0, 2.0]], running=[False, False],
                 batch=[0, 0], keys=[12.0], deadlines=[12.0], timeouts=[60.0, 60.0], workers=[0, 0], starting=[0, 0])
    assert mean_delay_bound(w, 1, 1) == 2.0
    assert mean_delay_bound(w, 1, 2) == 0.0


@settings(max_examples=150, deadline=None)
@given(two_stage, st.sampled_from(["ebf", "fcfs"]), st.integers(1, 6))
def test_no_simulated_scheduler_beats_the_bound(reqs, scheduler, n):
    w = _two_stage_workload(reqs)
    sim = Simulator(w, scheduler=scheduler, timeout_aware=False, limits=np.full(len(w.keys), np.inf))
    completion = sim.run([w.size, n], stop_early=False).completion
    present = np.unique(w.batch)
    mean = float(np.maximum(completion[present] - w.deadlines[present], 0.0).mean())
    assert mean >= mean_delay_bound(w, 1, n) - 1e-9
