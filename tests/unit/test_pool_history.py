"""Every stage's pool at past moments, from the history's rows (farm.store.pool_history.pools_at), worked by hand."""

from __future__ import annotations

from farm.store.accounting import WorkerLife
from farm.store.pool_history import PoolRows, StagePool, StageVisit, Target, pools_at

Q = "p.a"


def life(spawned, placed=None, ready=None, retired=None, stage=Q):
    return WorkerLife(f"w{spawned}", stage, "local", spawned, ready, retired, placed)


def visit(request, queued, started, finished, stage=Q):
    return StageVisit("b1", request, stage, queued, started, finished)


# one stage, moments 0, 10, 20, 30, 40:
# - w0: spawned at 0, placed at 5, ready at 15, retired at 35: pending at 0, starting at 10, running at 20 and 30
# - w12: spawned at 12 and waits for room until 25, ready at 28: pending at 20, running at 30 and 40
# - w3: spawned at 3, never placed, retired at 22: pending at 10 and 20
# - r1 queued at 8, started at 18, finished at 31: queued at 10, busy at 20 and 30
# - r2 queued at 20 (a boundary counts: queued at 20 and 30), started at 40 (busy at 40, no longer queued)
# - decisions: 2 workers at -50 (before the window), 3 at 20
ROWS = PoolRows(
    lives=(life(0, 5, 15, 35), life(12, 25, 28), life(3, retired=22)),
    visits=(visit("r1", 8, 18, 31), visit("r2", 20, 40, 45)),
    targets=(Target(-50.0, {Q: 2}), Target(20.0, {Q: 3})),
)


def test_each_moment_counts_the_worker_lives_and_requests_at_their_states_then_with_the_latest_target():
    pools = [p[Q] for p in pools_at(ROWS, [0.0, 10.0, 20.0, 30.0, 40.0])]
    assert pools == [
        StagePool(running=0, starting=0, pending=1, target=2, busy=0, queued=0),
        StagePool(running=0, starting=1, pending=1, target=2, busy=0, queued=1),
        StagePool(running=1, starting=0, pending=2, target=3, busy=1, queued=1),
        StagePool(running=2, starting=0, pending=0, target=3, busy=1, queued=1),
        StagePool(running=1, starting=0, pending=0, target=3, busy=1, queued=0),
    ]


def test_a_stage_before_its_first_decision_has_no_target():
    rows = PoolRows(lives=(life(0, 0, 1),), visits=(), targets=(Target(10.0, {Q: 4}),))
    assert [p[Q].target for p in pools_at(rows, [5.0, 10.0])] == [None, 4]


def test_requests_in_flight_now_count_until_the_end_and_once_where_the_history_has_them_already():
    in_flight = [visit("r3", 25, None, None), visit("r4", None, 33, None), visit("r1", 8, None, None)]
    pools = [p[Q] for p in pools_at(ROWS, [30.0, 40.0], in_flight)]
    assert [(p.queued, p.busy) for p in pools] == [(2, 1), (1, 2)]


def test_every_stage_seen_in_any_table_has_a_pool_at_every_moment():
    rows = PoolRows(lives=(life(0, 0, 0, stage="p.b"),), visits=(visit("r1", 0, 1, 2, stage="p.c"),),
                    targets=(Target(0.0, {"p.d": 1}),))
    pools = pools_at(rows, [0.0, 100.0])
    assert [sorted(p) for p in pools] == [["p.b", "p.c", "p.d"]] * 2
    assert pools[1] == {"p.b": StagePool(running=1), "p.c": StagePool(), "p.d": StagePool(target=1)}


def test_no_rows_give_no_stages():
    assert pools_at(PoolRows((), (), ()), [0.0]) == [{}]
