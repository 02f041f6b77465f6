"""What each knob is, said once on its dataclass field: its type (how a value is checked, read from the text
of `farm knobs set NAME=VALUE` and shown) and its description (help, unit, the paper's symbol, the option
`farm eval` gives it). `Knobs.to_dict`, the knob store's edits, `farm knobs` and `farm eval` all read it.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, fields
from typing import Any

_DEFAULT_WORDS = ("default", "none", "")
_NEVER_WORDS = ("never", "none", "off")


def _positive(name: str, value: Any, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a number, not {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, not {value!r}")
    return float(value)


def _number(name: str, raw: str, hint: str = "") -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise ValueError(f"{name} must be a number{hint}, not {raw!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, not {raw!r}")
    return value


class Kind(ABC):
    """A knob's type. `check` refuses a bad value (the dataclass calls it), `parse` reads the text an
    operator typed (`default` is the knob's own), `show` writes a value for `farm knobs`; `python` and
    `choices` are what a command-line option of this kind takes."""

    python: type = str
    choices: tuple[str, ...] = ()

    @abstractmethod
    def check(self, name: str, value: Any) -> None: ...

    def parse(self, name: str, raw: str, default: Any) -> Any:
        return raw.strip()

    def show(self, value: Any) -> str:
        return str(value)


class Number(Kind):
    """A finite number > 0 (or >= 0 with `allow_zero`)."""

    python = float

    def __init__(self, *, allow_zero: bool = False) -> None:
        self.allow_zero = allow_zero

    def check(self, name: str, value: Any) -> None:
        _positive(name, value, allow_zero=self.allow_zero)

    def parse(self, name: str, raw: str, default: Any) -> float:
        return _number(name, raw)

    def show(self, value: Any) -> str:
        return f"{value:g}"


class OptionalNumber(Number):
    """A number > 0, or None: the pipeline's own value (typed as `default`)."""

    def check(self, name: str, value: Any) -> None:
        if value is not None:
            super().check(name, value)

    def parse(self, name: str, raw: str, default: Any) -> float | None:
        if raw.strip().lower() in _DEFAULT_WORDS:
            return None
        return _number(name, raw, " (or 'default' for the pipeline's own value)")


class SecondsOrNever(Number):
    """Seconds >= 0, where 0 or None (typed as `never`) turns the behaviour off."""

    def check(self, name: str, value: Any) -> None:
        if value is not None:
            _positive(name, value, allow_zero=True)

    def parse(self, name: str, raw: str, default: Any) -> float | None:
        word = raw.strip().lower()
        if word in _NEVER_WORDS:
            return None
        if word == "default":
            return default
        return _number(name, raw, " of seconds, or 'never'")

    def show(self, value: Any) -> str:
        return "never" if not value else f"{float(value):g}"


class Count(Kind):
    """A whole number >= 0 (workers)."""

    python = int

    def check(self, name: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a whole number >= 0, not {value!r}")

    def parse(self, name: str, raw: str, default: Any) -> int:
        try:
            return int(raw.strip())
        except ValueError:
            raise ValueError(f"{name} must be a whole number, not {raw!r}") from None


class Choice(Kind):
    """One of a few words."""

    def __init__(self, choices: tuple[str, ...]) -> None:
        self.choices = choices

    def check(self, name: str, value: Any) -> None:
        if value not in self.choices:
            raise ValueError(f"{name} must be one of {self.choices}, not {value!r}")


class Name(Kind):
    """Any non-empty text, checked by whoever reads it (a policy's name by the planner)."""

    def __init__(self, what: str) -> None:
        self.what = what

    def check(self, name: str, value: Any) -> None:
        if not isinstance(value, str) or not value:
            raise ValueError(f"{name} must be {self.what}, not {value!r}")


@dataclass(frozen=True)
class Knob:
    """One knob's description, kept in its field's metadata."""

    kind: Kind
    help: str
    default: Any
    unit: str = ""  # "s": seconds
    symbol: str = ""  # the paper's name for it, shown beside its own
    option: str = ""  # `farm eval`'s option for it; "": the replay does not take it

    def label(self, name: str) -> str:
        return f"{name} ({self.symbol})" if self.symbol else name

    def describe(self, *notes: str) -> str:
        """The help line: symbol, help, then unit and `notes` in brackets ("D: tolerated extra delay (s)")."""
        text = f"{self.symbol}: {self.help}" if self.symbol else self.help
        notes = tuple(n for n in (self.unit, *notes) if n)
        return f"{text} ({', '.join(notes)})" if notes else text


def knob(default: Any, kind: Kind, help: str, **description: str) -> Any:
    """A dataclass field that is a knob (`description`: `Knob`'s unit, symbol, option)."""
    return field(default=default, metadata={"knob": Knob(kind, help, default, **description)})


def knobs_of(cls: type) -> dict[str, Knob]:
    """The knobs of a dataclass, by name, in field order (how they are saved and shown)."""
    return {f.name: f.metadata["knob"] for f in fields(cls) if "knob" in f.metadata}


def check(obj: Any) -> None:
    """Refuse a dataclass of knobs holding a value its knob's kind does not take (in field order)."""
    for name, k in knobs_of(type(obj)).items():
        k.kind.check(name, getattr(obj, name))
