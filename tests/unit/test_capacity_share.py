"""The cluster's capacity shared among a daemon's pipelines (planner.runtime.share), as data."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from planner.policy.capacity import Capacity
from planner.runtime.share import shares, split

GPU_ONLY = {"a": {"gpu"}, "b": {"gpu"}}


def test_whole_workers_split_by_largest_remainder_with_ties_to_the_first_name():
    assert split(5, {"a": 1.0, "b": 1.0}) == {"a": 3, "b": 2}
    assert split(4, {"a": 3.0, "b": 1.0}) == {"a": 3, "b": 1}


def test_nothing_wanted_splits_evenly():
    assert split(4, {"a": 0.0, "b": 0.0}) == {"a": 2, "b": 2}


def test_a_pipeline_keeps_what_it_holds_and_the_rest_goes_by_what_each_wants_beyond():
    capacity = Capacity(placeable={"gpu": 8})

    out = shares(capacity, GPU_ONLY, {"a": {"gpu": 2}, "b": {"gpu": 2}}, {"a": {"gpu": 5}, "b": {"gpu": 3}})

    assert out["a"].placeable["gpu"] == 5 and out["b"].placeable["gpu"] == 3


def test_when_the_rest_is_short_it_goes_in_proportion_to_what_each_lacks():
    capacity = Capacity(placeable={"gpu": 4})

    out = shares(capacity, GPU_ONLY, {"a": {"gpu": 1}, "b": {"gpu": 1}}, {"a": {"gpu": 5}, "b": {"gpu": 2}})

    assert out["a"].placeable["gpu"] == 3 and out["b"].placeable["gpu"] == 1


def test_a_pipeline_without_a_need_yet_is_taken_to_want_all_that_is_free():
    capacity = Capacity(placeable={"gpu": 4})

    out = shares(capacity, GPU_ONLY, {}, {"a": {"gpu": 1}, "b": None})

    assert out["a"].placeable["gpu"] == 1 and out["b"].placeable["gpu"] == 3


def test_an_autoscalers_maximum_is_shared_as_what_is_placeable_is():
    capacity = Capacity(placeable={"gpu": 2}, most={"gpu": 10}, node_startup_s=90.0)

    out = shares(capacity, GPU_ONLY, {"a": {"gpu": 2}}, {"a": {"gpu": 6}, "b": {"gpu": 4}})

    assert out["a"].placeable["gpu"] == 2 and out["a"].most["gpu"] == 6
    assert out["b"].placeable["gpu"] == 0 and out["b"].most["gpu"] == 4
    assert out["b"].node_startup_s == 90.0


def test_a_pipeline_gets_no_share_of_a_kind_it_has_no_stage_of():
    out = shares(Capacity(placeable={"gpu": 2, "cpu": 4}), {"a": {"cpu"}, "b": {"gpu", "cpu"}}, {}, {"a": None, "b": None})

    assert out["a"].limit("gpu") is None and out["b"].placeable["gpu"] == 2


def test_an_unbounded_kind_stays_unbounded_for_every_pipeline():
    out = shares(Capacity(placeable={"gpu": 2}), {"a": {"cpu", "gpu"}}, {}, {"a": None})

    assert out["a"].limit("cpu") is None


counts = st.integers(min_value=0, max_value=12)


@settings(max_examples=200, deadline=None)
@given(placeable=counts, extra=counts, held=st.tuples(counts, counts, counts),
       wants=st.tuples(st.none() | counts, st.none() | counts, st.none() | counts))
def test_shares_keep_holdings_and_never_hand_out_more_than_is_there(placeable, extra, held, wants):
    names = ("a", "b", "c")
    capacity = Capacity(placeable={"gpu": placeable}, most={"gpu": placeable + extra})
    out = shares(capacity, {p: {"gpu"} for p in names}, {p: {"gpu": h} for p, h in zip(names, held)},
                 {p: None if w is None else {"gpu": w} for p, w in zip(names, wants)})

    for p, h in zip(names, held):
        assert h <= out[p].placeable["gpu"] <= out[p].most["gpu"]
    assert sum(out[p].placeable["gpu"] for p in names) == max(placeable, sum(held))
    assert sum(out[p].most["gpu"] for p in names) <= max(placeable + extra, sum(held))
