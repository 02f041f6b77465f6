"""The one id grammar (farm.protocol.ids): what it takes can never spell another object's key, and what it refuses
(a ':', a newline at the end, a lone surrogate, too long) is refused with a message that says what fits."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from farm.errors import InvalidInput
from farm.protocol.ids import BATCH, GROUP, QUEUE_PART_NAMES, REQUEST, TASK, check_cursor, check_farm_batch, check_group
from farm.protocol.keys import Keys, Part, QueuePart, members
from farm.protocol.scope import Scope

NS = "ns"
QUEUES = ("math.verify", "run_code.run")
# letters the keys are spelled with, the separators, and what breaks a line or a UTF-8 encoding
PIECES = st.sampled_from(["t", "1", "0", ":", "b", "q", "l", "req", "done", "res", "gw", "open", "-", ".", "_", "|",
                          "\n", "\x00", "\ud800", "é", " ", "ebf", "s"])
RAW = st.lists(PIECES, min_size=1, max_size=8).map("".join)


def farm_batch_of(tenant: int | None, name: str) -> str | None:
    """The farm's id of a batch named `name` (by a tenant through its scope, else directly), None when refused."""
    try:
        return Scope(tenant).batch(name) if tenant is not None else check_farm_batch(name)
    except InvalidInput:
        return None


def keys_of(batch_id: str) -> set[str]:
    keys = Keys(NS)
    return ({keys.batch(batch_id, part) for part in members(Part).values()}
            | {keys.pending(q, batch_id) for q in QUEUES})


def other_keys() -> set[str]:
    """Every key that is not a batch's: the namespace's own, the queues', the tenants' and rolling batches'."""
    keys = Keys(NS)
    named = {getattr(keys, name) for name in ("batches", "seen", "queues", "leases", "lease", "events", "epochs",
                                               "knobs", "counters", "tokens", "limits", "tasks", "seq", "rolls")}
    queues = {keys.queue(q, part) for q in QUEUES for part in members(QueuePart).values() if part != QueuePart.pending}
    return named | queues | {keys.tenant_open(1), keys.roll(1, "openrlhf"), keys.broker(QUEUES[0])}


TENANT = st.none() | st.integers(0, 12)


@given(TENANT, RAW, TENANT, RAW)
def test_no_key_of_one_accepted_batch_is_a_key_of_another(tenant_a, name_a, tenant_b, name_b):
    a, b = farm_batch_of(tenant_a, name_a), farm_batch_of(tenant_b, name_b)
    assume(a is not None and b is not None and a != b)
    assert not keys_of(a) & keys_of(b)


@given(TENANT, RAW)
def test_no_key_of_an_accepted_batch_is_one_of_the_farms_own(tenant, name):
    batch = farm_batch_of(tenant, name)
    assume(batch is not None)
    assert not keys_of(batch) & other_keys()


@given(RAW)
def test_an_accepted_name_holds_no_separator_control_character_or_lone_surrogate(name):
    for grammar in (BATCH, TASK, REQUEST, GROUP):
        if grammar.accepts(name):
            assert ":" not in name and name.isprintable() and name.encode()


def test_the_reported_collision_is_refused():
    """A ':' in a tenant's batch id made `p:done` a part of batch `p` (issue 32)."""
    with pytest.raises(InvalidInput, match="batch id must be"):
        Scope(1).batch("p:done")
    with pytest.raises(InvalidInput, match="batch id must be"):
        check_farm_batch("t1")  # its `:req` would be tenant 1's batch `req`


@pytest.mark.parametrize("grammar,value", [(BATCH, "step\n"), (TASK, "math\n"), (REQUEST, "r0\n"), (GROUP, "g\n")])
def test_a_trailing_newline_is_refused(grammar, value):
    with pytest.raises(InvalidInput, match=f"{grammar.what} must be"):
        grammar.check(value)


def test_each_grammar_says_what_fits_and_its_bound():
    with pytest.raises(InvalidInput, match=r"request id must be 1 to 1024 bytes in UTF-8 of printable characters"):
        REQUEST.check("r:1")
    with pytest.raises(InvalidInput, match="task must be 1 to 10 characters"):
        TASK.check("x" * 11, room=10)


def test_a_group_is_a_name_or_a_64_bit_integer():
    assert check_group(7) == "7" and check_group(None) is None and check_group("prompt-0") == "prompt-0"
    for bad in (True, 1 << 63, 10 ** 5000, "a\ud800", "", "x" * 1025, 1.5):
        with pytest.raises(InvalidInput, match="group"):
            check_group(bad)


@pytest.mark.parametrize("cursor", ["0-0", "1700000000000-3", f"{(1 << 64) - 1}-{(1 << 64) - 1}"])
def test_a_cursor_within_redis_range_is_taken(cursor):
    assert check_cursor(cursor) == cursor


@pytest.mark.parametrize("cursor", [f"{1 << 64}-0", "0-18446744073709551616", "1-1\n", "١-0", "-1-0", "0", 5])
def test_a_cursor_past_redis_range_or_malformed_is_refused(cursor):
    with pytest.raises(InvalidInput, match="cursor must be"):
        check_cursor(cursor)


@pytest.mark.parametrize("batch_id", ["ebf", "fcfs", "t3:ebf", "t0:seen", "leaving"])
def test_a_batch_named_as_a_stage_queues_part_is_refused(batch_id):
    """Its pending list `...:l:<id>` would end as that part's key does: a tenant user's glob over the part of
    every stage (`%W~<ns>:q:*:ebf`) would reach it."""
    with pytest.raises(InvalidInput, match="must not be a stage queue's part"):
        check_farm_batch(batch_id)


def test_a_name_that_merely_holds_a_stage_queues_part_is_taken():
    assert check_farm_batch("t3:ebf-2") == "t3:ebf-2" and Scope(3).batch("busy.1") == "t3:busy.1"


def test_the_readme_names_every_stage_queue_part_a_batch_may_not_be_called():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    sentence = readme[readme.index("nor a stage\nqueue's part"):][:200]
    assert QUEUE_PART_NAMES and all(f"`{name}`" in sentence for name in QUEUE_PART_NAMES)
