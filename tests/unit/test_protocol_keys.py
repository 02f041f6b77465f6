"""The Redis key layout has one home (farm.protocol.keys): the Lua scripts and a tenant's ACL build every key
from it, so a key renamed there is renamed everywhere."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from farm.app import redis_users
from farm.knobs import SCHEDULERS
from farm.protocol import counters
from farm.protocol.keys import ROLL, Keys, Named, QueuePart, spellings
from farm.protocol.scripts import ALL, SOURCES

_LITERAL_OR_COMMENT = re.compile(r"""('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")|--[^\n]*""")


def spelled(lua: str) -> list[str]:
    """The key spellings (from the definitions) a piece of Lua writes out itself rather than through the
    generated names: a string literal that is a key's piece of text (or holds a `:suffix`), or text glued
    to the namespace `P`."""
    code = _LITERAL_OR_COMMENT.sub(lambda m: m.group(1) or "", lua)
    literals = [m[1:-1] for m in re.findall(r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*\"""", code)]
    pieces = spellings()
    whole = {p for p in pieces if len(p) > 1}  # a lone ':' or '.' is also a value's separator
    inside = {p for p in pieces if p.startswith(":") and len(p) > 2}
    found = [s for s in literals if s in whole or any(p in s for p in inside)]
    return found + re.findall(r"""\bP\s*\.\.\s*['"][:.][^'"]*""", code)


def lua_files() -> list[str]:
    return sorted(f.name for f in (resources.files("farm.protocol") / "lua").iterdir() if f.name.endswith(".lua"))


@pytest.mark.parametrize("name", lua_files())
def test_no_script_spells_a_key_by_hand(name):
    source = (resources.files("farm.protocol") / "lua" / name).read_text()
    assert spelled(source) == [], f"{name} spells keys itself; use K, PART, QPART or a *_key function"


@pytest.mark.parametrize("name", lua_files())
def test_no_script_spells_a_counters_field_by_hand(name):
    source = (resources.files("farm.protocol") / "lua" / name).read_text()
    fields = [f for f in (counters.LEASE_RECOVERED, counters.PREEMPTED) if f in source]
    assert fields == [], f"{name} spells {fields} itself; use COUNT_LEASE_RECOVERED or COUNT_PREEMPTED"


def test_every_script_gets_the_counters_fields_from_python():
    assert all(f"local COUNT_LEASE_RECOVERED, COUNT_PREEMPTED = '{counters.LEASE_RECOVERED}', "
               f"'{counters.PREEMPTED}'" in source for source in SOURCES.values())


@pytest.mark.parametrize("lua", ["redis.call('HSET', P .. ':tasks', task, pipeline)", "HGET(b .. ':req', rid)",
                                 "queue_key(queue, 'busy')", "redis.call('LPUSH', P .. '.' .. queue, m)",
                                 "local l = queue_key(q, 'l:' .. bid)"])
def test_the_check_finds_a_key_spelled_by_hand(lua):
    assert spelled(lua)


def test_every_lua_file_is_a_declared_script():
    assert set(lua_files()) == {f"{s.name}.lua" for s in ALL} | {"common.lua", "submit_many.lua"}


def test_every_script_gets_the_keys_in_its_prelude():
    for source in SOURCES.values():
        assert "local K = {batches = P .. ':batches'" in source and "local function batch_key(batch)" in source


def test_a_key_of_a_shape_reads_back_as_its_values():
    key = Keys("ns").roll(7, "open:rlhf")
    assert ROLL.parse("ns", key) == ("7", "open:rlhf")
    assert ROLL.parse("ns", Keys("other").roll(7, "x")) is None and ROLL.parse("ns", "ns:b:x") is None


def test_every_scheduler_picks_from_the_queue_order_of_its_name():
    assert all(getattr(QueuePart, s, None) == s for s in SCHEDULERS)


def test_the_tenant_acl_follows_a_renamed_key(monkeypatch):
    monkeypatch.setattr(Keys, "tasks", Named(":pipeline_of_task"))
    rules = redis_users.rules("ns", 7, "0" * 64)
    assert "~ns:pipeline_of_task" in rules and "~ns:tasks" not in rules


def test_the_tenant_acl_names_its_namespace_and_batches_literally():
    rules = redis_users.rules("n*s", 7, "0" * 64)
    assert r"~n\*s:b:t7:*" in rules and r"~n\*s:q:*:l:t7:*" in rules
