"""Zero queueing's hold of a batch (farm.app.cost.zero_queue_held), worked by hand from its requests' arrivals
and stage times: per stage the most requests that would run at once if none waited, held from the batch's
first arrival until it would complete."""

import pytest

from farm.app.cost import zero_queue_held
from farm.store.accounting import StageRun

COMPILE, EXECUTE = "synthetic.compile", "synthetic.execute"


def run(request, stage, started_at, finished_at, arrived_at=None, queued_at=None, batch="t1:a"):
    return StageRun(batch, request, stage, arrived_at, queued_at, started_at, finished_at)


# As the farm ran it, with queueing: r1 waited for r0's compile worker, both waited at execute.
#   r0 arrives 100: compile 10 s (100-110), execute 5 s (130-135)
#   r1 arrives 102: compile 4 s (110-114), execute 6 s (135-141)
#   r2 arrives 120: compile 2 s (120-122), no execute
# With no queueing: r0 compile 100-110, execute 110-115; r1 compile 102-106, execute 106-112; r2 compile
# 120-122. Compile peaks at 2 (r0 and r1, 102-106), execute at 2 (110-112); the batch would complete at 122,
# so each stage holds 2 workers for 122 - 100 = 22 s.
BATCH = [
    run("r0", COMPILE, 100, 110, arrived_at=100), run("r0", EXECUTE, 130, 135, arrived_at=100),
    run("r1", EXECUTE, 135, 141, arrived_at=102), run("r1", COMPILE, 110, 114, arrived_at=102),
    run("r2", COMPILE, 120, 122, arrived_at=120),
]


def test_each_stage_holds_its_peak_with_no_queueing_from_the_first_arrival_until_the_batch_would_complete():
    assert zero_queue_held(BATCH, 0, 1000) == {("t1:a", COMPILE): 44.0, ("t1:a", EXECUTE): 44.0}


def test_only_the_part_of_the_batchs_span_inside_the_window_counts():
    assert zero_queue_held(BATCH, 110, 1000) == {("t1:a", COMPILE): 24.0, ("t1:a", EXECUTE): 24.0}
    assert zero_queue_held(BATCH, 0, 105) == {("t1:a", COMPILE): 10.0, ("t1:a", EXECUTE): 10.0}


def test_a_batch_that_would_have_completed_before_the_window_holds_nothing_in_it():
    assert zero_queue_held(BATCH, 122, 1000) == {}


def test_a_worker_freed_when_the_next_request_arrives_serves_it_so_back_to_back_requests_need_one():
    runs = [run("r0", COMPILE, 0, 10, arrived_at=0), run("r1", COMPILE, 10, 15, arrived_at=10)]
    assert zero_queue_held(runs, 0, 100) == {("t1:a", COMPILE): 15.0}


def test_a_request_whose_arrival_is_missing_arrives_when_it_was_queued_at_its_first_stage():
    runs = [run("r0", COMPILE, 50, 60, queued_at=40), run("r1", COMPILE, 40, 45, arrived_at=40)]
    # r0 with no queueing: 40-50, beside r1's 40-45: two at once, until 50
    assert zero_queue_held(runs, 0, 100) == {("t1:a", COMPILE): pytest.approx(20.0)}


def test_batches_are_held_apart_even_when_their_requests_overlap():
    runs = [run("r0", COMPILE, 0, 10, arrived_at=0), run("r0", COMPILE, 5, 10, arrived_at=5, batch="t2:b")]
    assert zero_queue_held(runs, 0, 100) == {("t1:a", COMPILE): 10.0, ("t2:b", COMPILE): 5.0}
