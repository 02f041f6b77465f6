"""Arguments the response's function changed, written back into the tests' objects (`workers.judge.arguments`):
equal to what came back wherever an in-process call could have changed them, the same objects, nothing else."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from workers.judge.arguments import fits, write_back

values = st.recursive(st.none() | st.integers() | st.text(max_size=3),
                      lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner)
                      | st.dictionaries(st.text(max_size=2), inner, max_size=2) | st.sets(st.integers(), max_size=3),
                      max_leaves=8)


@given(st.lists(values, max_size=4), st.lists(values, max_size=4))
def test_a_list_argument_becomes_what_came_back_and_stays_the_same_object(old, new):
    held = old
    write_back(((old,), {}), ((new,), {}))
    assert held is old and old == new


@given(*[st.dictionaries(st.text(max_size=2), values, max_size=3)] * 2)
def test_a_dict_keyword_argument_becomes_what_came_back(old, new):
    write_back(((), {"d": old}), ((), {"d": new}))
    assert old == new


def test_an_inner_list_the_tests_hold_sees_the_change():
    row = [2, 1]
    grid = [row, [4, 3]]
    rows = ({"k": row},)
    write_back(((grid, rows), {}), (([[1, 2], [4, 3]], ({"k": [1, 2]},)), {}))
    assert row == [1, 2] and grid[0] is row and rows[0]["k"] is row


def test_a_set_argument_is_updated_in_place():
    seen = {1, 2}
    write_back(((seen,), {}), (({3},), {}))
    assert seen == {3}


def test_what_an_in_process_call_could_not_change_is_left_alone():
    number, text, pair, listing = 5, "abc", (1, [2]), [1]
    write_back(((number, text, pair, listing), {}), ((6, "abd", (9, [3]), {"not": "a list"}), {}))
    assert (number, text, pair, listing) == (5, "abc", (1, [3]), [1])


def test_a_tuple_replaced_inside_a_list_is_replaced():
    xs = [(1, 2), (3, [4])]
    inner = xs[1][1]
    write_back(((xs,), {}), (([(9,), (3, [5])],), {}))
    assert xs == [(9,), (3, [5])] and xs[1][1] is inner


def test_only_arguments_of_the_call_fit():
    sent = ((1, [2]), {"k": 3})
    assert fits(sent, ((1, [2, 3]), {"k": 3}))
    assert not fits(sent, ((1,), {"k": 3}))
    assert not fits(sent, ((1, [2]), {"other": 3}))
    assert not fits(sent, [(1, [2]), {"k": 3}])
    assert not fits(sent, ((1, [2]), {"k": 3}, None))
