"""Plain data across the process boundary: what crosses comes back equal, and nothing with behaviour crosses."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workers.judge import plain
from workers.sandbox import isolation

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.binary() | st.complex_numbers(allow_nan=False)
hashable = st.recursive(st.none() | st.booleans() | st.integers() | st.text() | st.floats(allow_nan=False),
                        lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3), max_leaves=8)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
                      | st.dictionaries(hashable, inner, max_size=3) | st.sets(hashable, max_size=3)
                      | st.frozensets(hashable, max_size=3), max_leaves=12)


def _same(a, b) -> bool:
    """Equal and of the same exact types all the way down (1 == 1.0 == True is not enough)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


@given(values)
def test_a_plain_value_comes_back_equal_and_of_the_same_types(value):
    assert _same(plain.decode(plain.encode(value)), value)


@given(values)
def test_an_encoded_value_is_one_line(value):
    assert "\n" not in plain.encode(value)


def test_non_finite_floats_and_huge_integers_cross():
    back = plain.decode(plain.encode([math.inf, -math.inf, 10**5000, -(2**64)]))
    assert back[:2] == [math.inf, -math.inf] and back[2:] == [10**5000, -(2**64)]
    assert math.isnan(plain.decode(plain.encode(math.nan)))


@pytest.mark.parametrize("value", [
    type("AlwaysEqual", (), {"__eq__": lambda self, other: True})(),
    type("Liar", (int,), {"__eq__": lambda self, other: True, "__hash__": int.__hash__})(3),
    type("Text", (str,), {})("x"),
    [1, (2, {3: type("Deep", (list,), {})()})],
    lambda: 1,
    iter([1, 2]),
    range(3),
], ids=["object", "int_subclass", "str_subclass", "nested_list_subclass", "function", "iterator", "range"])
def test_anything_with_behaviour_is_refused_on_encoding(value):
    with pytest.raises(plain.NotPlain):
        plain.encode(value)


def test_a_cycle_is_refused_instead_of_recursing_forever():
    loop: list = []
    loop.append(loop)
    with pytest.raises(plain.NotPlain, match="nested deeper"):
        plain.encode(loop)


@pytest.mark.parametrize("text", [
    '{"__class__": "int"}', '{"__plain__": "object", "v": 1}', '{"__plain__": "set", "v": [[1]]}',
    '{"__plain__": "dict", "v": [[[1], 2]]}', '{"__plain__": "int", "v": "zz"}', "NaN", "[" * 100000 + "]" * 100000,
    "not json", '{"__plain__": "tuple", "v": [], "extra": 1}',
], ids=["untagged_object", "unknown_tag", "unhashable_member", "unhashable_key", "bad_hex", "bare_nan", "deep", "text",
        "extra_field"])
def test_bytes_that_are_not_a_plain_value_are_refused_on_decoding(text):
    with pytest.raises(plain.NotPlain):
        plain.decode(text)


def test_the_codec_copied_into_the_sandbox_imports_only_the_standard_library():
    import ast
    import sys

    tree = ast.parse(open(plain.__file__).read())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported - {"__future__"} <= set(sys.stdlib_module_names)


def test_the_test_case_store_and_named_paths_are_hidden(monkeypatch, tmp_path):
    store, extra = tmp_path / "store", tmp_path / "extra"
    store.mkdir()
    extra.mkdir()
    monkeypatch.setenv("FARM_TESTCASES", f"dir:{store}")
    monkeypatch.setenv("FARM_SANDBOX_HIDE", f"{extra}::/nonexistent")
    hidden = isolation.hidden_paths()
    assert str(store) in hidden and str(extra) in hidden and "/nonexistent" not in hidden and "/" not in hidden


def test_non_ascii_text_crosses_as_utf8_bytes():
    line = plain.encode(["naïve – ✓", "\ud800"]).encode("utf-8")
    assert plain.decode(line) == ["naïve – ✓", "\ud800"]


def test_bytes_that_are_not_utf8_are_refused_whatever_json_would_guess():
    for line in (b'"\xff\xfe"', '"x"'.encode("utf-16")):
        with pytest.raises(plain.NotPlain):
            plain.decode(line)


def test_the_tests_arguments_may_nest_deeper_than_a_value():
    deep: list = []
    for _ in range(plain.MAX_DEPTH + 10):
        deep = [deep]
    with pytest.raises(plain.NotPlain):
        plain.encode(deep)
    assert "[" * (plain.MAX_DEPTH + 10) in plain.encode(deep, plain.ARGUMENT_DEPTH)
    with pytest.raises(plain.NotPlain):
        plain.encode(deep, plain.MAX_DEPTH + 5)


def test_an_int_of_a_million_digits_crosses_in_hex():
    value = -(10 ** (10 ** 6)) + 7
    text = plain.encode(value)
    assert text.startswith('{"__plain__":"int","v":"-') and plain.decode(text) == value
