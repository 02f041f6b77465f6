"""Fair shares between tenants (farm.protocol.shares): the settings, the rule that divides a stage's workers,
and the bound the tenants' caps put on what the planner asks for."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from farm.protocol.shares import FairShare, ShareError, caps_bound, eligible, parse_max_workers, parse_shares
from planner.policy.capacity import UNBOUNDED, Capacity, within


def test_a_tenant_without_settings_has_a_share_of_one_and_no_cap():
    assert FairShare() == FairShare.from_dict({}) == FairShare.decode(None)
    assert FairShare().share == 1.0 and FairShare().cap("gpu") is None


def test_a_fair_share_survives_its_json_and_its_redis_form():
    s = FairShare(2.5, {"gpu": 4})
    assert FairShare.from_dict(s.to_dict()) == s
    assert FairShare.decode(s.encode()) == s


@pytest.mark.parametrize("share", [0, -1, float("nan"), float("inf"), True, "2", 2e6])
def test_a_share_that_is_not_a_positive_number_is_refused(share):
    with pytest.raises(ShareError, match="share must be"):
        FairShare(share)


@pytest.mark.parametrize("caps, message", [({"tpu": 1}, "unknown resource kind"), ({"gpu": 0}, ">= 1"),
                                           ({"gpu": 1.5}, ">= 1"), ({"gpu": True}, ">= 1")])
def test_a_cap_of_an_unknown_kind_or_below_one_worker_is_refused(caps, message):
    with pytest.raises(ShareError, match=message):
        FairShare(max_workers=caps)


def test_an_unknown_setting_is_refused_rather_than_ignored():
    with pytest.raises(ShareError, match="unknown fair-share settings"):
        FairShare.from_dict({"shares": 2})


def test_max_workers_are_read_from_kind_equals_n_pairs():
    assert parse_max_workers(["gpu=4", "cpu=16"]) == {"gpu": 4, "cpu": 16}
    for bad in (["gpu"], ["gpu=x"], ["gpu=-1"], ["tpu=2"]):
        with pytest.raises(ShareError):
            parse_max_workers(bad)


def test_named_shares_are_read_from_weights_and_caps_and_a_tenant_named_once_has_the_other_default():
    assert parse_shares(["a=3", "b=0.5"], ["b:gpu=1", "c:cpu=2", "c:gpu=1"]) == {
        "a": FairShare(3.0), "b": FairShare(0.5, {"gpu": 1}), "c": FairShare(1.0, {"cpu": 2, "gpu": 1})}


@pytest.mark.parametrize("weights,caps,option", [(["a"], [], "--share"), (["a=x"], [], "--share"),
                                                 (["=2"], [], "--share"), ([], ["gpu=1"], "--tenant-max-workers")])
def test_a_malformed_named_share_names_its_option(weights, caps, option):
    with pytest.raises(ShareError, match=option):
        parse_shares(weights, caps)


def test_with_one_tenant_waiting_it_is_served():
    assert eligible(["t1"], {}, {"t1": 3}, {"t1": 3}, 4, "cpu") == ["t1"]


def test_a_tenant_holding_more_than_its_share_waits_while_another_is_under_its_own():
    # four workers, equal shares: t1 holds three, t2 none; the free worker serves t2
    assert eligible(["t1", "t2"], {}, {"t1": 3}, {"t1": 3}, 4, "cpu") == ["t2"]


def test_both_tenants_under_their_share_are_served_in_the_scheduler_order():
    assert eligible(["t1", "t2"], {}, {"t1": 1}, {"t1": 1}, 4, "cpu") == ["t1", "t2"]


def test_a_larger_share_entitles_a_tenant_to_more_workers():
    shares = {"t1": FairShare(3.0)}
    # six workers, shares 3:1: t1 is entitled to 4.5, t2 to 1.5; t1 holds 4, t2 holds 1: both under
    assert eligible(["t1", "t2"], shares, {"t1": 4, "t2": 1}, {}, 6, "cpu") == ["t1", "t2"]
    # t1 holds 5: only t2
    assert eligible(["t1", "t2"], shares, {"t1": 5}, {}, 6, "cpu") == ["t2"]


def test_with_one_worker_for_two_tenants_the_one_furthest_below_its_share_is_served():
    assert eligible(["t1", "t2"], {}, {}, {}, 1, "cpu") == ["t1", "t2"]  # both under 0.5: the scheduler decides
    assert eligible(["t1", "t2"], {}, {"t1": 1}, {}, 2, "cpu") == ["t2"]


def test_a_tenant_at_its_cap_of_the_kind_is_not_served_even_when_alone():
    shares = {"t1": FairShare(max_workers={"gpu": 2})}
    assert eligible(["t1"], shares, {"t1": 1}, {"t1": 2}, 8, "gpu") == []
    assert eligible(["t1"], shares, {"t1": 1}, {"t1": 2}, 8, "cpu") == ["t1"]  # a cap is of one kind
    assert eligible(["t1", "t2"], shares, {"t1": 2}, {"t1": 2}, 8, "gpu") == ["t2"]


tenants = st.lists(st.sampled_from(["t1", "t2", "t3", "-"]), min_size=1, max_size=4, unique=True)


@st.composite
def cases(draw):
    waiting = draw(tenants)
    shares = {t: FairShare(draw(st.sampled_from([0.5, 1.0, 2.0, 3.0])),
                           draw(st.sampled_from([{}, {"cpu": 1}, {"cpu": 3}, {"gpu": 1}])))
              for t in waiting if draw(st.booleans())}
    use = {t: draw(st.integers(0, 5)) for t in waiting}
    kind_use = {t: use[t] + draw(st.integers(0, 2)) for t in waiting}
    workers = sum(use.values()) + 1 + draw(st.integers(0, 4))
    return waiting, shares, use, kind_use, workers


@given(cases())
def test_a_free_worker_always_has_a_tenant_to_serve_unless_every_waiting_one_is_at_its_cap(case):
    waiting, shares, use, kind_use, workers = case
    capped = [t for t in waiting if (c := shares.get(t, FairShare()).cap("cpu")) is not None and kind_use[t] >= c]
    served = eligible(waiting, shares, use, kind_use, workers, "cpu")
    assert bool(served) == (len(capped) < len(waiting))
    assert not set(served) & set(capped)


@given(cases())
def test_a_tenant_under_its_entitlement_and_cap_is_always_among_those_served(case):
    waiting, shares, use, kind_use, workers = case
    total = sum(shares.get(t, FairShare()).share for t in waiting)
    served = eligible(waiting, shares, use, kind_use, workers, "cpu")
    for t in waiting:
        s = shares.get(t, FairShare())
        uncapped = s.cap("cpu") is None or kind_use[t] < s.cap("cpu")
        if uncapped and use[t] < workers * s.share / total:
            assert t in served


@given(cases())
def test_a_served_tenant_holds_no_more_per_share_than_any_other_it_was_preferred_to(case):
    waiting, shares, use, kind_use, workers = case
    served = eligible(waiting, shares, use, kind_use, workers, "cpu")
    total = sum(shares.get(t, FairShare()).share for t in waiting)
    over = [t for t in served if use[t] >= workers * shares.get(t, FairShare()).share / total]
    if over:  # the fallback: nobody is under, and those served are the least used per share
        ratio = {t: use[t] / shares.get(t, FairShare()).share for t in waiting}
        assert all(ratio[t] <= ratio[u] for t in served for u in waiting if u not in served
                   and (shares.get(u, FairShare()).cap("cpu") is None
                        or kind_use[u] < shares.get(u, FairShare()).cap("cpu")))


def test_the_planner_is_bound_by_the_caps_only_where_every_tenant_with_work_has_one():
    shares = {"t1": FairShare(max_workers={"gpu": 2}), "t2": FairShare(max_workers={"gpu": 3, "cpu": 1})}
    assert caps_bound(["t1", "t2"], shares) == {"gpu": 5}
    assert caps_bound(["t2"], shares) == {"gpu": 3, "cpu": 1}
    assert caps_bound(["t1", "t3"], shares) == {}
    assert caps_bound([], shares) == {}


def test_a_bound_holds_a_cluster_to_the_smaller_of_its_room_and_the_caps():
    assert within(UNBOUNDED, {}) is UNBOUNDED
    bound = within(UNBOUNDED, {"gpu": 5})
    assert bound.limit("gpu") == 5 and bound.ready("gpu") == 5 and bound.limit("cpu") is None
    cluster = Capacity(placeable={"gpu": 2}, most={"gpu": 8})
    assert within(cluster, {"gpu": 5}).limit("gpu") == 5 and within(cluster, {"gpu": 5}).ready("gpu") == 2
    assert within(cluster, {"gpu": 1}).ready("gpu") == 1


def test_a_reserved_share_survives_its_json_and_its_redis_form():
    s = FairShare(2.0, {"gpu": 1}, reserve=True)
    assert FairShare.from_dict(s.to_dict()) == s and FairShare.decode(s.encode()) == s
    assert '"r"' not in FairShare().encode()  # an unreserved share is encoded as before
    with pytest.raises(ShareError, match="reserve must be"):
        FairShare.from_dict({"reserve": "yes"})


def test_a_worker_is_held_for_a_reserving_tenant_under_its_share_though_nothing_of_it_waits():
    shares = {"a": FairShare(reserve=True)}
    # four workers, b holds two: a is entitled to two and holds none, so the free worker waits for a
    assert eligible(["b"], shares, {"b": 2}, {}, 4, "cpu", reserving=["a"]) == []
    # b under its own entitlement is served as ever
    assert eligible(["b"], shares, {"b": 1}, {}, 4, "cpu", reserving=["a"]) == ["b"]


def test_a_reserving_tenant_at_its_share_or_its_cap_holds_no_worker():
    at_share = {"a": FairShare(reserve=True)}
    assert eligible(["b"], at_share, {"b": 2, "a": 2}, {}, 5, "cpu", reserving=["a"]) == ["b"]
    capped = {"a": FairShare(max_workers={"cpu": 1}, reserve=True)}
    assert eligible(["b"], capped, {"b": 2}, {"a": 1}, 4, "cpu", reserving=["a"]) == ["b"]


@given(cases(), st.lists(st.sampled_from(["r1", "r2"]), unique=True))
def test_a_worker_stays_free_only_for_a_cap_or_a_reserving_tenant_under_its_share(case, reserving):
    waiting, shares, use, kind_use, workers = case
    shares = {**shares, **{r: FairShare(reserve=True) for r in reserving}}
    served = eligible(waiting, shares, use, kind_use, workers, "cpu", reserving)
    assert set(served) <= set(waiting)
    uncapped = [t for t in waiting if (c := shares.get(t, FairShare()).cap("cpu")) is None or kind_use[t] < c]
    if not served and uncapped:
        total = sum(shares.get(t, FairShare()).share for t in [*waiting, *reserving])
        assert any(use.get(r, 0) < workers * shares[r].share / total for r in reserving)
