"""Arguments the response's function changed, written back into the tests' own objects.

Under HumanEval's harness the function runs in the tests' process: `xs.sort(); return xs` sorts the tests'
list, and a test may check that (or check that nothing was changed). Across processes the function gets
copies; its process sends the arguments back as the call left them, and `write_back` makes the tests'
objects equal to them in place: a list, dict or set keeps its identity (and so does one nested in it where
the structure matches: the same type at the same index or key), so every name the tests hold for it sees
the change. Nothing else is touched: an immutable argument cannot have changed in-process, so a reply that
says it did is ignored, as is a nested object whose type differs (the tests then hold the new value in the
container, as after `xs[0] = {}`). The values are decoded plain data, so this gives a response no more
than an in-process mutation would.
"""

from __future__ import annotations

from typing import Any

from workers.judge.plain import ARGUMENT_DEPTH


def fits(sent: tuple[tuple, dict], came: Any) -> bool:
    """Whether `came` is arguments for the call `sent`: a tuple of as many and a dict of the same names."""
    if type(came) is not tuple or len(came) != 2:
        return False
    args, kwargs = came
    return (type(args) is tuple and len(args) == len(sent[0]) and type(kwargs) is dict
            and kwargs.keys() == sent[1].keys())


def write_back(sent: tuple[tuple, dict], came: tuple[tuple, dict]) -> None:
    """The tests' arguments `sent` made equal, in place, to `came` wherever an in-process call could have
    changed them. `came` must `fit` `sent`."""
    for old, new in zip(sent[0], came[0]):
        _merged(old, new, 0)
    for name, old in sent[1].items():
        _merged(old, came[1][name], 0)


def _merged(old: Any, new: Any, depth: int) -> Any:
    """What a container of the tests' holds once `new` came back for `old`: `old` itself, updated in place,
    when both are the same mutable type (or equal tuples once their items are updated); else `new`."""
    kind = type(old)
    if kind is not type(new) or depth > ARGUMENT_DEPTH:
        return new
    if kind is list:
        merged = [_merged(o, n, depth + 1) for o, n in zip(old, new)]
        old[:] = merged + new[len(merged):]
    elif kind is dict:
        merged_items = {k: _merged(old[k], v, depth + 1) if k in old else v for k, v in new.items()}
        old.clear()
        old.update(merged_items)
    elif kind is set:
        if old != new:
            old.clear()
            old.update(new)
    elif kind is tuple:  # a tuple cannot change, the lists inside it can; a container may hold another tuple
        if len(old) == len(new):
            for o, n in zip(old, new):
                _merged(o, n, depth + 1)
        return old if old == new else new
    else:
        return new
    return old
