"""The operator's view of the live farm (farm.app.overview): late batches first, silent trainers, where each
batch waits, each tenant's use and its fair share against the workers it holds, from a live state built by
hand."""

from farm.app.overview import batch_rows, busy_workers, tenant_shares, tenant_use
from farm.knobs import Knobs
from farm.protocol.live import (
    LiveState,
    PendingRequest,
    Progress,
    QueueState,
    RunningRequest,
)
from farm.protocol.shares import FairShare

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


KINDS = {"synthetic.compile": "cpu", "synthetic.execute": "gpu"}


def test_busy_workers_are_counted_per_tenant_and_resource_kind_of_their_stage():
    running = {"synthetic.compile": ["t1:a", "t1:b", "t2:a"], "synthetic.execute": ["t1:a"], "lost.stage": ["x"]}
    assert busy_workers(running, KINDS.get) == {"-": {"unknown": 1}, "t1": {"cpu": 2, "gpu": 1}, "t2": {"cpu": 1}}


def test_each_tenant_shows_its_share_caps_busy_workers_and_how_late_its_active_batches_run():
    running = [RunningRequest("r0", "t1:a", NOW, "w0"), RunningRequest("r1", "t1:b", NOW, "w1")]
    state = live(batch("t1:a", key=NOW - 4), batch("t1:b", key=NOW - 2), running=running)
    shown = tenant_shares(state, batch_rows(state, Knobs()), {"t1": FairShare(2.0, {"cpu": 2})}, KINDS.get)
    assert shown == {"t1": {"share": 2.0, "max_workers": {"cpu": 2}, "reserve": False, "busy": {"cpu": 2},
                            "extra_delay_mean_s": 3.0, "extra_delay_max_s": 4.0}}


def test_a_tenant_with_a_share_and_no_work_is_shown_idle_and_one_without_a_share_has_the_default():
    state = live(batch("t2:a", key=NOW + 5))
    shown = tenant_shares(state, batch_rows(state, Knobs()), {"t1": FairShare(3.0)}, KINDS.get)
    assert shown["t1"] == {"share": 3.0, "max_workers": {}, "reserve": False, "busy": {}, "extra_delay_mean_s": None,
                           "extra_delay_max_s": None}
    assert (shown["t2"]["share"], shown["t2"]["extra_delay_mean_s"]) == (1.0, 0.0)
