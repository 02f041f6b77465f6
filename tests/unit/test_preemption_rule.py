"""The preemption rule (farm.protocol.shares.preempted): a reserving tenant takes its share back from the tenants
over theirs at once, and never so far that a stop could be answered by a stop back."""

from __future__ import annotations

from hypothesis import given, strategies as st

from farm.protocol.shares import FairShare, entitled, preempted

R = FairShare(reserve=True)


def test_a_reserving_tenant_takes_its_share_back_from_the_tenant_that_holds_every_worker():
    assert preempted({"A": 3}, {"A": R}, {"B": 4}, {"B": 4}, 4, "cpu") == ["B", "B"]


def test_a_tenant_that_does_not_reserve_its_share_stops_nothing():
    assert preempted({"A": 3}, {}, {"B": 4}, {"B": 4}, 4, "cpu") == []


def test_no_more_are_stopped_than_the_reserving_tenant_has_waiting():
    assert preempted({"A": 1}, {"A": R}, {"B": 4}, {"B": 4}, 4, "cpu") == ["B"]


def test_a_free_worker_serves_first_and_is_not_doubled_by_a_stop():
    assert preempted({"A": 3}, {"A": R}, {"B": 3}, {"B": 3}, 4, "cpu") == ["B"]
    assert preempted({"A": 1}, {"A": R}, {"B": 3}, {"B": 3}, 4, "cpu") == []


def test_a_tenant_is_never_stopped_below_its_own_share():
    # one worker for two tenants: each is entitled to half, so taking B's would put B under its own share
    assert preempted({"A": 1}, {"A": R}, {"B": 1}, {"B": 1}, 1, "cpu") == []
    # shares 1:2 of four workers: A is entitled to 1.33, B to 2.67; B keeps three
    assert preempted({"A": 4}, {"A": R, "B": FairShare(2.0)}, {"B": 4}, {"B": 4}, 4, "cpu") == ["B"]


def test_the_tenant_most_over_its_share_is_stopped_first():
    shares = {"A": R, "C": FairShare(3.0)}
    assert preempted({"A": 1}, shares, {"B": 3, "C": 3}, {"B": 3, "C": 3}, 6, "cpu") == ["B"]


def test_a_reserving_tenant_at_its_cap_stops_nothing():
    capped = {"A": FairShare(max_workers={"cpu": 1}, reserve=True)}
    assert preempted({"A": 3}, capped, {"A": 1, "B": 3}, {"A": 1, "B": 3}, 4, "cpu") == []


@st.composite
def cases(draw):
    labels = ["t1", "t2", "t3"]
    waiting = {t: draw(st.integers(0, 4)) for t in labels}
    use = {t: draw(st.integers(0, 4)) for t in labels}
    shares = {t: FairShare(draw(st.sampled_from([0.5, 1.0, 2.0])), draw(st.sampled_from([{}, {"cpu": 3}])),
                           draw(st.booleans())) for t in labels}
    workers = sum(use.values()) + draw(st.integers(0, 2))
    return waiting, shares, use, workers


@given(cases())
def test_after_the_stops_no_stop_back_is_due_and_no_victim_is_under_its_share(case):
    waiting, shares, use, workers = case
    stopped = preempted(waiting, shares, use, use, workers, "cpu")
    present = [t for t in use if waiting[t] > 0 or use[t] > 0]
    total = sum(shares[t].share for t in present)
    after = dict(use)
    for v in stopped:
        after[v] -= 1
    for v in set(stopped):
        assert after[v] >= entitled(workers, shares[v].share, total) - 1e-9
    # the workers freed go to reserving tenants, and none of them asks for more than it waits for
    assert len(stopped) <= sum(n for t, n in waiting.items() if shares[t].reserve)
