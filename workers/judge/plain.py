"""Plain data across the process boundary: the only shape a function's return value takes on its way
from the response's process to the tests.

A value is written as one line of JSON, with a tag for what JSON cannot say: `None`, `bool`, `int`,
`float` (`nan`/`inf` tagged), `str`, `bytes`, `complex`, `list`, `tuple`, `dict` (any plain keys),
`set`, `frozenset`. Exact types only: a subclass of a builtin (an `int` whose `__eq__` always says
yes) is refused, so an object with behaviour never crosses. Decoding builds fresh builtins from the
JSON text and nothing else; anything malformed raises `NotPlain` saying what it met.

A line is UTF-8 (non-ASCII text stays as it is; control characters and lone surrogates are escaped). An int
beyond 2**53 travels in hex both ways: linear in its size, where decimal conversion is quadratic and capped
at 4300 digits. Nesting is at most `MAX_DEPTH` levels, except that the tests' side lets its own arguments
nest deeper when it encodes them (`ARGUMENT_DEPTH`), so that a value the response returned (or an argument
it changed) still crosses when the tests pass it back inside a structure of their own.

The response's sandbox imports this module to encode, so it imports nothing at all: the standard
`json` (and the `re` it pulls in) would cost each request ~17 ms of interpreter start-up there.
"""

from __future__ import annotations

MAX_DEPTH = 64  # nesting past this is refused on both sides (json's C decoder recurses)
ARGUMENT_DEPTH = 4 * MAX_DEPTH  # the tests' own arguments, which may hold a value the response returned
_TAG = "__plain__"
_INF = float("inf")
_EXACT = 2**53  # ints past this travel in hex: JSON readers round them, and str() of a huge int is capped
# every character JSON forbids raw, and the surrogates UTF-8 cannot carry, as \u escapes
_ESCAPES = {**{c: f"\\u{c:04x}" for c in (*range(0x20), 0x7F, *range(0xD800, 0xE000))}, 0x22: '\\"', 0x5C: "\\\\"}


class NotPlain(ValueError):
    """A value that is not plain data, or bytes that do not decode to plain data."""


def encode(value: object, depth: int = MAX_DEPTH) -> str:
    """One line of JSON for a plain value nested at most `depth` levels; raises NotPlain naming the first
    thing that is not."""
    out: list[str] = []
    _write(value, out, MAX_DEPTH - depth)
    return "".join(out)


def _write(value: object, out: list[str], depth: int) -> None:
    if depth > MAX_DEPTH:
        raise NotPlain("nested deeper than allowed (a cycle, or too many levels)")
    kind = type(value)
    if value is None:
        out.append("null")
    elif kind is bool:
        out.append("true" if value else "false")
    elif kind is str:
        out.append('"' + value.translate(_ESCAPES) + '"')
    elif kind is int:
        out.append(str(value) if -_EXACT <= value <= _EXACT else f'{{"{_TAG}":"int","v":"{value:x}"}}')
    elif kind is float:
        out.append(repr(value) if -_INF < value < _INF else f'{{"{_TAG}":"float","v":"{value!r}"}}')
    elif kind is list:
        _items("", value, out, depth)
    elif kind is tuple or kind is set or kind is frozenset:
        _items(kind.__name__, value, out, depth)
    elif kind is dict:
        _items("dict", [(k, v) for k, v in value.items()], out, depth, pairs=True)
    elif kind is bytes:
        out.append(f'{{"{_TAG}":"bytes","v":"{value.hex()}"}}')
    elif kind is complex:
        _items("complex", (value.real, value.imag), out, depth)
    else:
        raise NotPlain(f"a {_type_name(value)} is not plain data")


def _items(tag: str, values, out: list[str], depth: int, pairs: bool = False) -> None:
    out.append(f'{{"{_TAG}":"{tag}","v":[' if tag else "[")
    for i, v in enumerate(values):
        if i:
            out.append(",")
        if pairs:
            out.append("[")
            _write(v[0], out, depth + 2)
            out.append(",")
            _write(v[1], out, depth + 2)
            out.append("]")
        else:
            _write(v, out, depth + 1)
    out.append("]}" if tag else "]")


def decode(text: str | bytes) -> object:
    """The plain value a line of JSON (UTF-8 when bytes) holds; raises NotPlain on anything else. Runs on the
    tests' side."""
    import json  # here, not at the top: the response's side never decodes (see the module's docstring)

    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")  # explicit: json.loads would guess UTF-16 or -32 from forged bytes
        raw = json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and an int past 4300 digits are ValueErrors
        raise NotPlain(f"not plain data: {str(exc)[:200]}") from None
    return _from_json(raw, 0)


def _from_json(raw: object, depth: int) -> object:
    if depth > MAX_DEPTH:
        raise NotPlain("nested deeper than allowed")
    if raw is None or isinstance(raw, (bool, int, float, str)):
        return raw  # json.loads builds exact builtins only
    if isinstance(raw, list):
        return [_from_json(v, depth + 1) for v in raw]
    if not isinstance(raw, dict) or set(raw) != {_TAG, "v"}:
        raise NotPlain("a JSON object that is not a tagged plain value")
    tag, v = raw[_TAG], raw["v"]
    try:
        if tag == "int" and isinstance(v, str):
            return int(v, 16)  # base 16: no limit on digits, linear time
        if tag == "float" and v in ("nan", "inf", "-inf"):
            return float(v)
        if tag == "bytes" and isinstance(v, str):
            return bytes.fromhex(v)
        if tag in ("tuple", "set", "frozenset", "dict", "complex") and isinstance(v, list):
            items = [_from_json(x, depth + 1) for x in v]
            if tag == "tuple":
                return tuple(items)
            if tag == "set":
                return set(items)
            if tag == "frozenset":
                return frozenset(items)
            if tag == "complex" and len(items) == 2 and all(type(x) is float for x in items):
                return complex(items[0], items[1])
            if tag == "dict" and all(isinstance(p, list) and len(p) == 2 for p in items):
                return {k: val for k, val in items}
    except (TypeError, ValueError) as exc:  # an unhashable set member or dict key, bad hex
        raise NotPlain(f"a malformed {tag}: {str(exc)[:200]}") from None
    raise NotPlain(f"a malformed tagged value {str(tag)[:40]!r}")


def _refuse_constant(name: str) -> object:
    raise ValueError(f"bare {name} (non-finite floats are tagged)")


def _type_name(value: object) -> str:
    kind = type(value)
    try:
        return f"{kind.__module__}.{kind.__qualname__}" if kind.__module__ != "builtins" else kind.__qualname__
    except Exception:  # a hostile metaclass; the name is only for the message
        return "object"
