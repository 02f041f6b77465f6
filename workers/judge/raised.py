"""What the response's function raised, as the tests see it.

Tests may expect an exception (`except ValueError`, `pytest.raises(TypeError)`), so an ordinary builtin
exception reaches them as itself: `ORDINARY` is an allow-list. Anything else arrives as `CandidateRaised`,
an ordinary failure, because some exceptions steer the tests rather than fail them: a StopIteration
raised inside `zip(map(candidate, xs), ...)`, `all(map(...))` or `iter(candidate, sentinel)` ends the tests'
loop early as if it were done; an OSError or ImportError would read as the tests' own environment failing
(a masked status, not the response's); SystemExit, GeneratorExit and other BaseExceptions are not failures
at all. Every exception built here is marked, so that the verdict can tell the response's exceptions (and
the tests' own exceptions raised while handling one) from the tests' own failures.
"""

from __future__ import annotations

import builtins

from workers.shown import clip

ORDINARY = frozenset({
    "Exception", "ArithmeticError", "AssertionError", "FloatingPointError", "IndexError", "KeyError", "LookupError",
    "NotImplementedError", "OverflowError", "RecursionError", "RuntimeError", "TypeError", "ValueError",
    "ZeroDivisionError",
})
ORDINARY_TYPES: dict[str, type[Exception]] = {name: getattr(builtins, name) for name in ORDINARY}
TEXT_CAP = 2000  # characters of the response's text kept in an exception
_MARK = "_raised_by_the_response"
_CHAIN = 100  # causes and contexts followed back from an exception


class CandidateRaised(Exception):
    """The response's function raised an exception that is not one of the ordinary builtin ones."""


def rebuilt(name: str, text: str) -> Exception:
    """The exception the tests see for the response's `name: text`, marked as the response's."""
    text = text[-TEXT_CAP:]
    kind = ORDINARY_TYPES.get(name)
    if kind is None:
        exc: Exception = CandidateRaised(clip(text, TEXT_CAP))
    else:
        # the response's side sends "ValueError: negative": the tests' `str(e)` should say "negative", as in-process
        exc = kind(clip(text.removeprefix(f"{name}: ") if text != name else "", TEXT_CAP))
    setattr(exc, _MARK, True)
    return exc


def from_response(exc: BaseException) -> bool:
    """Whether `exc` is an exception of the response's (as `rebuilt` made it), or was raised while one was
    being handled or because of one (its `__context__` or `__cause__` chain holds one)."""
    seen: set[int] = set()
    pending = [exc]
    while pending and len(seen) < _CHAIN:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if getattr(current, _MARK, False) is True:
            return True
        pending += [current.__cause__, current.__context__]
    return False
