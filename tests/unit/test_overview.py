"""The operator's view of the live farm (farm.app.overview): late batches first, silent trainers, where each
batch waits, and each tenant's use, from a live state built by hand."""

from farm.app.overview import batch_rows, tenant_use
from farm.knobs import Knobs
from farm.protocol.live import LiveState, PendingRequest, Progress, QueueState, RunningRequest

NOW = 1000.0


def batch(bid, key, seen_at=NOW, arrived=4, done=1):
    return Progress(bid, "task", "synthetic", 8, arrived, done, "open", 900.0, key, seen_at=seen_at)


def live(*batches, pending=(), running=()):
    stage = QueueState("synthetic.compile", tuple(pending), tuple(running), ())
    return LiveState(NOW, "ebf", tuple(batches), {"synthetic.compile": stage})


def test_the_batch_most_past_its_estimate_comes_first_and_is_late_beyond_d():
    rows = batch_rows(live(batch("t1:on-time", key=NOW + 5), batch("t2:late", key=NOW - 30)), Knobs(delay_s=10))
    assert [r["batch"] for r in rows] == ["t2:late", "t1:on-time"]
    assert (rows[0]["extra_delay_s"], rows[0]["late"]) == (30.0, True)
    assert (rows[1]["extra_delay_s"], rows[1]["late"]) == (0.0, False)


def test_a_batch_whose_trainer_was_silent_past_abandon_after_is_marked_silent():
    rows = batch_rows(live(batch("a", NOW, seen_at=NOW - 700), batch("b", NOW + 1, seen_at=NOW - 5)),
                      Knobs(abandon_after_s=600))
    assert [(r["silent_s"], r["abandon_after_s"], r["silent"]) for r in rows] == [(700.0, 600.0, True),
                                                                                   (5.0, 600.0, False)]


def test_with_abandoning_off_no_batch_is_silent():
    [row] = batch_rows(live(batch("a", NOW, seen_at=NOW - 10_000)), Knobs(abandon_after_s=0))
    assert (row["abandon_after_s"], row["silent"]) == (None, False)


def test_a_batch_waits_on_the_stage_where_its_requests_queue():
    pending = [PendingRequest(f"r{i}", "t1:x", NOW) for i in range(3)]
    running = [RunningRequest("r9", "t1:x", NOW, "w")]
    [row] = batch_rows(live(batch("t1:x", NOW), pending=pending, running=running), Knobs())
    assert row["waiting_on"] == "synthetic.compile" and row["queued"] == {"synthetic.compile": 3}
    assert row["running"] == {"synthetic.compile": 1}


def test_each_tenant_counts_its_batches_and_requests_and_direct_batches_are_their_own():
    pending = [PendingRequest("r0", "t1:a", NOW), PendingRequest("r1", "t1:b", NOW)]
    rows = batch_rows(live(batch("t1:a", NOW, arrived=4, done=1), batch("t1:b", NOW, arrived=2, done=2),
                           batch("direct", NOW, arrived=1, done=0), pending=pending), Knobs())
    assert tenant_use(rows) == {
        "-": {"batches": 1, "outstanding": 1, "queued": 0, "running": 0, "silent": 0},
        "t1": {"batches": 2, "outstanding": 3, "queued": 2, "running": 0, "silent": 0},
    }
