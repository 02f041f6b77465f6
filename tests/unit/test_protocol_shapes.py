"""The shapes Python and the Lua scripts share: each script's arguments and the request-state record."""

from __future__ import annotations

import json
import re

import pytest

from farm.protocol.scripts import ALL, SOURCES, SUBMIT, Script
from farm.protocol.state import GROUP, RECORDS, RequestState
from farm.protocol.tokens import TASK_PREFIX


def test_a_call_names_every_argument_of_its_script_and_keeps_its_order():
    call = Script("demo", ("batch", "at")).call(at="2.5", batch="b0")
    assert call.args == ("b0", "2.5") and call.arg("at") == "2.5"


@pytest.mark.parametrize("values", [{"batch": "b0"}, {"batch": "b0", "at": "1", "late": "x"}])
def test_a_call_missing_or_inventing_an_argument_is_refused(values):
    with pytest.raises(TypeError, match="script 'demo' takes"):
        Script("demo", ("batch", "at")).call(**values)


def test_each_script_receives_its_own_arguments_as_lua_locals_after_the_shared_ones():
    prelude = SUBMIT.prelude()
    names, values = re.match(r"local (.*) = (.*)\n", prelude).groups()
    assert names.split(", ") == list(SUBMIT.args)
    assert values.split(", ") == [f"ARGV[{4 + i}]" for i in range(len(SUBMIT.args))]
    assert prelude in SOURCES["submit"]


def test_no_script_reads_its_arguments_by_position():
    for script in ALL:
        body = SOURCES[script.name].split(script.prelude(), 1)[1] if script.args else SOURCES[script.name]
        assert not re.search(r"ARGV\[", body), f"{script.name}.lua reads ARGV by position"


def test_the_constants_lua_shares_with_python_come_from_python():
    source = SOURCES["cancel"]
    assert f"local TASK_PREFIX = '{TASK_PREFIX}'" in source
    assert f"local STATE_GROUP, STATE_RECORDS = '{GROUP}', '{RECORDS}'" in source


def test_a_request_state_survives_its_round_trip():
    state = RequestState("g1", ("compile", "execute"), {"binary": "AAAA"},
                         ({"name": "compile", "queued_at": 1.0, "status": "passed"},), 3.5, {"note": 1})
    assert RequestState.decode(state.encode()) == state


def test_a_request_arrived_when_it_entered_its_first_queue():
    assert RequestState(queued_at=7.0).arrived_at == 7.0
    moved = RequestState(records=({"name": "compile", "queued_at": 2.0},), queued_at=9.0)
    assert moved.arrived_at == 2.0


def test_the_next_visit_is_the_first_stage_without_a_record():
    state = RequestState(visits=("compile", "execute"), records=({"name": "compile"},))
    assert state.next_visit(["compile", "execute"]) == "execute"
    assert RequestState(visits=("compile",), records=({"name": "compile"},)).next_visit(["compile"]) is None


def test_data_that_is_not_json_cannot_be_stored_as_a_request_state():
    with pytest.raises((TypeError, ValueError)):
        RequestState(carry={"f": print}).encode()
    with pytest.raises(ValueError):
        RequestState(carry={"x": float("nan")}).encode()


def test_a_record_that_is_not_an_object_is_refused():
    with pytest.raises(ValueError):
        RequestState.decode(json.dumps([1, 2]))


def test_the_first_state_a_client_writes_reads_back_as_queued_with_nothing_passed_on():
    state = RequestState.decode(json.dumps({"g": None, "st": ["execute"], "c": {}, "r": [], "qa": 100.0}))
    assert (state.visits, state.carry, state.records, state.details) == (("execute",), {}, (), {})
    assert state.arrived_at == 100.0
