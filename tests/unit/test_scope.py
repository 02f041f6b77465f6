"""A tenant's names on the farm: its batches and tasks under a prefix of its own."""

from __future__ import annotations

import pytest

from farm.errors import InvalidInput
from farm.protocol.scope import Scope, tenant_of


def test_a_tenants_batch_lives_under_its_prefix_and_comes_back_unprefixed():
    scope = Scope(7)
    assert scope.batch("step-3") == "t7:step-3"
    assert scope.own_batch("t7:step-3") == "step-3"


def test_two_tenants_same_batch_id_are_different_farm_batches():
    assert Scope(1).batch("x") != Scope(2).batch("x")


def test_an_id_that_looks_like_another_tenants_is_refused_not_nested():
    with pytest.raises(InvalidInput, match="batch id must be"):
        Scope(1).batch("t2:x")


def test_no_batch_id_gets_a_fresh_one():
    a, b = Scope(1).batch(None), Scope(1).batch(None)
    assert a != b and a.startswith("t1:")


@pytest.mark.parametrize("bad", ["", "a b", "x" * 126, 5, None.__class__, "p:done", "x\n", "\ud800"])
def test_a_malformed_batch_id_is_refused_saying_what_fits(bad):
    with pytest.raises(InvalidInput, match="batch id must be"):
        Scope(1).batch(bad)


def test_the_longest_id_that_fits_with_the_prefix_is_taken():
    assert len(Scope(1).batch("x" * 125)) == 128


def test_tasks_are_prefixed_and_checked():
    assert Scope(3).task("math") == "t3.math"
    assert Scope(3).own_task("t3.math") == "math"
    with pytest.raises(InvalidInput, match="task must be"):
        Scope(3).task("a:b")


def test_messages_speak_the_tenants_names():
    assert Scope(4).message("no batch 't4:abc'; open it first") == "no batch 'abc'; open it first"
    assert Scope(4).message("task 't4.math' belongs to pipeline 'code'") == "task 'math' belongs to pipeline 'code'"


def test_a_direct_client_keeps_an_id_already_under_its_prefix():
    scope = Scope(7)
    assert scope.adopt_batch("t7:x") == "t7:x" and scope.adopt_batch("x") == "t7:x"
    with pytest.raises(InvalidInput, match="batch id must be"):
        scope.adopt_batch("t8:x")
    assert scope.adopt_task("t7.math") == "t7.math" and scope.adopt_task("math") == "t7.math"


def test_a_direct_clients_session_opens_its_batches_under_its_tenant():
    from farm.client.core import Session
    from farm.config import Settings

    call, batch_id = Session(Settings(tenant=3)).open("math", "synthetic", 2, None, None, 1.0)
    assert batch_id.startswith("t3:") and call.arg("batch") == batch_id
    assert not Session(Settings(tenant=3)).sweeps and Session(Settings()).sweeps


def test_a_malformed_farm_tenant_is_refused_naming_the_variable():
    from farm.config import from_env

    assert from_env({"FARM_TENANT": "12"}).tenant == 12 and from_env({}).tenant is None
    with pytest.raises(ValueError, match="FARM_TENANT"):
        from_env({"FARM_TENANT": "acme"})


def test_a_farm_batch_id_says_which_tenant_it_belongs_to():
    assert tenant_of(Scope(3).batch("t9")) == 3
    assert tenant_of("step-1") is None and tenant_of("tx:step") is None
