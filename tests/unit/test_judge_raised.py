"""The response's exceptions as the tests see them (`workers.judge.raised`): ordinary builtins as themselves,
anything that could steer the tests as CandidateRaised, every one marked as the response's."""

from __future__ import annotations

import builtins

import pytest

from workers.judge.raised import ORDINARY, CandidateRaised, from_response, rebuilt

STEERING = ["StopIteration", "StopAsyncIteration", "GeneratorExit", "SystemExit", "KeyboardInterrupt", "OSError",
            "FileNotFoundError", "TimeoutError", "ImportError", "ModuleNotFoundError", "MemoryError", "BaseException"]


@pytest.mark.parametrize("name", STEERING)
def test_an_exception_that_could_steer_the_tests_arrives_as_an_ordinary_failure(name):
    exc = rebuilt(name, f"{name}: text")
    assert type(exc) is CandidateRaised and str(exc) == f"{name}: text"


@pytest.mark.parametrize("name", sorted(ORDINARY))
def test_an_ordinary_exception_arrives_as_itself_with_its_own_text(name):
    exc = rebuilt(name, f"{name}: negative")
    assert type(exc) is getattr(builtins, name) and str(exc).strip("'") == "negative"


def test_every_allowed_type_is_an_ordinary_builtin_exception():
    for name in ORDINARY:
        kind = getattr(builtins, name)
        assert issubclass(kind, Exception) and not issubclass(kind, (StopIteration, StopAsyncIteration, OSError,
                                                                      ImportError, MemoryError))


def test_a_forged_type_name_is_not_looked_up_beyond_the_allow_list():
    assert type(rebuilt("__import__", "x")) is CandidateRaised
    assert type(rebuilt("Warning", "x")) is CandidateRaised


def test_the_text_kept_is_bounded():
    assert len(str(rebuilt("ValueError", "v" * (1 << 20)))) <= 2000


def test_an_exception_raised_while_handling_the_responses_is_the_responses():
    try:
        try:
            raise rebuilt("ValueError", "ValueError: no")
        except ValueError:
            raise OSError("the tests wrapped it")
    except OSError as exc:
        wrapped = exc
    assert from_response(wrapped)
    assert not from_response(OSError("the tests' own"))
