"""The knobs as command-line options: one per knob whose field names one (`Knob.option`), typed and described
by the field, so a knob that `farm eval` should take is declared on the knob alone."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

import click

from farm.knob_schema import Knob, knobs_of
from farm.knobs import Knobs, StageKnobs


def _options() -> list[tuple[type, str, Knob]]:
    """(Knobs or StageKnobs, name, knob) of every knob with an option: the global ones first."""
    return [(cls, name, k) for cls in (Knobs, StageKnobs) for name, k in knobs_of(cls).items() if k.option]


def knob_options(defaults: Mapping[str, Any] | None = None) -> Callable:
    """A decorator adding the knobs' options to a click command, their defaults the knobs' own unless
    `defaults` (by knob name) says otherwise; the command receives them under the knobs' names."""
    defaults = defaults or {}

    def add(command: Callable) -> Callable:
        for cls, name, k in reversed(_options()):  # click lists the option added last first
            kind = k.kind
            command = click.option(k.option, name, type=click.Choice(kind.choices) if kind.choices else kind.python,
                                   default=defaults.get(name, k.default), show_default=True,
                                   help=k.describe("every stage" if cls is StageKnobs else ""))(command)
        return command

    return add


def knobs_from_options(values: Mapping[str, Any], queues: Iterable[str]) -> Knobs:
    """The knobs the options gave, a stage knob's for every one of `queues`; ValueError for a bad value."""
    chosen: dict[type, dict[str, Any]] = {Knobs: {}, StageKnobs: {}}
    for cls, name, _ in _options():
        chosen[cls][name] = values[name]
    stage = StageKnobs(**chosen[StageKnobs])
    return Knobs(**chosen[Knobs], stages={q: stage for q in queues})
