"""A value or an exception quoted in a message: bounded text that never raises.

Messages quote what a response returned, what the tests passed and what a trainer sent. Those values may be
huge (a list of a million items, an int of a million digits, whose `repr` raises past 4300 digits) or deeply
nested, so `repr` is not used on a container or an int: the text is written piece by piece until the limit
is reached, in time bounded by the limit rather than by the value. An int too long to show is named by its
size ("an int of 5736 digits"). The result is valid UTF-8 (a lone surrogate is written as `\\udXXX`).
"""

from __future__ import annotations

import math
from typing import Any

LEVELS = 4  # containers nested deeper are shown as "[...]"
_DIGITS = 40  # an int with more digits than this is shown by its size, not its digits
_EXACT_BITS = 1 << 17  # up to this the digit count is exact (a power of ten: ~1 ms); above, "about"
_LOG10_2 = math.log10(2)
_BRACKETS = {list: ("[", "]"), tuple: ("(", ")"), set: ("{", "}"), frozenset: ("frozenset({", "})"),
             dict: ("{", "}")}


def shown(value: Any, limit: int = 300) -> str:
    """`value` as at most `limit` characters of repr-like text; a cut text ends with "..."."""
    out: list[str] = []
    _put(value, out, [limit + 1], 0)
    return clip("".join(out), limit)


def clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters (ending "..." when cut), safe to encode as UTF-8."""
    if len(text) > limit:
        text = text[:max(limit - 3, 0)] + "..."
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from a response's text: written as an escape
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def described(exc: BaseException, limit: int = 300) -> str:
    """"TypeName: text" for an exception, bounded; its `str` may raise (an int too long, a hostile __str__)."""
    name = type_name(exc)
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - only the message is lost
        text = ""
    return clip(f"{name}: {text}" if text else name, limit)


def type_name(value: Any) -> str:
    try:
        return str(type(value).__name__)
    except Exception:  # noqa: BLE001 - a hostile metaclass
        return "object"


def int_text(value: int) -> str:
    """The digits of a short int; the size of a long one, computed without converting it to decimal."""
    bits = value.bit_length()
    if bits <= _DIGITS * 3:  # at most 37 digits: short whatever they are
        return repr(value)
    digits = int(bits * _LOG10_2) + 1  # this many or one fewer
    about = ""
    if bits <= _EXACT_BITS:
        digits -= abs(value) < 10 ** (digits - 1)
        if digits <= _DIGITS:  # 121 to 133 bits: 37 to 40 digits, still short
            return repr(value)
    else:
        about = "about "
    return f"<{'a negative' if value < 0 else 'an'} int of {about}{digits} digits>"


def _put(value: Any, out: list[str], left: list[int], level: int) -> None:
    """Appends `value`'s text to `out`, spending `left[0]` characters; stops once they are spent."""
    if left[0] <= 0:
        return
    kind = type(value)
    if kind in _BRACKETS:
        _put_container(value, kind, out, left, level)
        return
    if kind is int:
        text = int_text(value)
    elif kind is str or kind is bytes:
        text = repr(value[:left[0]])  # a slice first: repr of a long text would cost its length
    elif value is None or kind in (bool, float, complex):
        text = repr(value)
    else:  # not a plain value (a trainer's odd field): its own repr, which may raise or be long
        try:
            text = repr(value)[:left[0]]
        except Exception:  # noqa: BLE001
            text = f"<a {type_name(value)}>"
    out.append(text)
    left[0] -= len(text)


def _put_container(value: Any, kind: type, out: list[str], left: list[int], level: int) -> None:
    opening, closing = _BRACKETS[kind]
    if not value:
        text = {list: "[]", tuple: "()", set: "set()", frozenset: "frozenset()", dict: "{}"}[kind]
    elif level >= LEVELS:
        text = opening + "..." + closing
    else:
        text = None
    if text is not None:
        out.append(text)
        left[0] -= len(text)
        return
    out.append(opening)
    left[0] -= len(opening)
    for i, item in enumerate(value.items() if kind is dict else value):
        if left[0] <= 0:
            return  # the caller cuts the text and marks it with "..."
        if i:
            out.append(", ")
            left[0] -= 2
        if kind is dict:
            _put(item[0], out, left, level + 1)
            out.append(": ")
            left[0] -= 2
            _put(item[1], out, left, level + 1)
        else:
            _put(item, out, left, level + 1)
    if kind is tuple and len(value) == 1:
        out.append(",")
    out.append(closing)
    left[0] -= len(closing)
