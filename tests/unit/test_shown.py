"""Values quoted in messages (`workers.shown`): bounded, never raising, and repr itself for short values."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from workers.shown import clip, described, shown

short_ints = st.integers(-(10**40 - 1), 10**40 - 1)  # at most 40 digits: an int longer is shown by its size
small = st.recursive(st.none() | st.booleans() | short_ints | st.floats() | st.text(max_size=8)
                     | st.binary(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.tuples(inner) | st.tuples(inner, inner)
                     | st.dictionaries(st.text(max_size=3), inner, max_size=2)
                     | st.frozensets(short_ints, max_size=2) | st.sets(st.text(max_size=2), max_size=2),
                     max_leaves=6)
anything = st.recursive(st.none() | st.integers() | st.text() | st.binary() | st.floats(),
                        lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=30)


@given(small)
def test_a_short_value_is_shown_as_its_repr(value):
    if len(repr(value)) <= 300 and "..." not in repr(value):
        assert shown(value) == repr(value)


@given(anything, st.integers(5, 500))
def test_a_value_is_shown_in_at_most_the_limit_as_valid_utf8(value, limit):
    text = shown(value, limit)
    assert len(text) <= limit
    text.encode("utf-8")


def test_an_int_too_long_for_repr_is_shown_by_its_exact_number_of_digits():
    assert shown(math.factorial(2000)) == "<an int of 5736 digits>"
    assert shown(-(10 ** 5000)) == "<a negative int of 5001 digits>"
    assert shown([10 ** 99, 10 ** 100 - 1]) == "[<an int of 100 digits>, <an int of 100 digits>]"


def test_an_int_of_up_to_forty_digits_is_shown_by_its_digits_and_a_longer_one_by_its_size():
    # 2**120 has 121 bits and 37 digits, 10**39 - 1 has 130 bits and 40: both short, though past 120 bits
    for value in (2 ** 120, -(2 ** 120), 10 ** 39, 10 ** 40 - 1, -(10 ** 40 - 1)):
        assert shown(value) == repr(value)
    assert shown(10 ** 40) == "<an int of 41 digits>"
    assert shown(-(10 ** 40)) == "<a negative int of 41 digits>"


def test_an_int_of_a_million_digits_is_shown_by_its_approximate_size_at_once():
    assert shown(10 ** (10 ** 6)) == "<an int of about 1000001 digits>"


def test_a_long_container_or_text_is_cut_and_marked():
    assert shown(list(range(10 ** 6)), 20) == "[0, 1, 2, 3, 4, 5..."
    assert shown("x" * (10 ** 7), 10) == "'xxxxxx..."
    deep: list = []
    for _ in range(10 ** 4):
        deep = [deep]
    assert shown(deep) == "[[[[[...]]]]]"


def test_a_lone_surrogate_is_written_as_an_escape():
    assert clip("a\ud800b", 100) == "a\\ud800b"


def test_an_object_whose_repr_or_str_raises_is_named_by_its_type():
    class Hostile(Exception):
        def __repr__(self):
            raise RuntimeError("no")

        def __str__(self):
            raise RuntimeError("no")

    assert shown(Hostile()) == "<a Hostile>"
    assert described(Hostile()) == "Hostile"
    assert described(KeyError(10 ** 5000)) == "KeyError"
    assert described(ValueError("x" * 1000), 20) == "ValueError: xxxxx..."
