"""Tenants in the history store (real PostgreSQL): tokens shown once and kept only as hashes, revocation,
rotation, and limits, config and fair shares that change only where asked."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import text

from farm.protocol.shares import FairShare
from farm.store import engine as store
from farm.store.tenants import (
    TenantError,
    TenantLimits,
    authenticate,
    create_tenant,
    get_tenant,
    list_tenants,
    revoke_tenant,
    revoked_among,
    rotate_token,
    token_hash,
    update_tenant,
)

pytestmark = pytest.mark.integration


def test_a_new_tenants_token_authenticates_it(engine):
    tenant, token = create_tenant(engine, "acme", now=100.0)
    assert authenticate(engine, token) == tenant
    assert tenant.active and tenant.created_at == 100.0 and tenant.token_prefix == token[:8]


def test_the_token_is_not_stored_only_its_hash(engine):
    _, token = create_tenant(engine, "acme", now=1.0)
    with engine.connect() as conn:
        rows = [tuple(map(str, row)) for row in conn.execute(text("SELECT * FROM tenants"))]
    assert not any(token in value for row in rows for value in row)
    assert any(token_hash(token) in row for row in rows)


def test_a_revoked_tenants_token_no_longer_authenticates_and_revoking_again_keeps_the_first_time(engine):
    _, token = create_tenant(engine, "acme", now=1.0)
    first = revoke_tenant(engine, "acme", now=5.0)
    again = revoke_tenant(engine, "acme", now=9.0)
    assert authenticate(engine, token) is None
    assert first.revoked_at == again.revoked_at == 5.0 and not again.active


def test_revoked_among_names_only_the_revoked_of_the_tenants_asked_about(engine):
    ids = {name: create_tenant(engine, name, now=1.0)[0].id for name in ("a", "b", "c")}
    revoke_tenant(engine, "a", now=2.0)
    revoke_tenant(engine, "c", now=2.0)
    assert revoked_among(engine, [ids["a"], ids["b"]]) == {ids["a"]}
    assert revoked_among(engine, []) == set() and revoked_among(engine, [999]) == set()


def test_a_second_tenant_with_the_same_name_is_refused(engine):
    create_tenant(engine, "acme", now=1.0)
    with pytest.raises(TenantError, match="already exists"):
        create_tenant(engine, "acme", now=2.0)
    assert len(list_tenants(engine)) == 1


@pytest.mark.parametrize("name", ["", "a b", "x" * 65, "a/b", "acme\n", "é", 7])
def test_a_malformed_name_is_refused(engine, name):
    with pytest.raises(TenantError, match="tenant name"):
        create_tenant(engine, name, now=1.0)


def test_rotating_gives_a_new_token_and_the_old_one_stops_working(engine):
    _, old = create_tenant(engine, "acme", now=1.0)
    tenant, new = rotate_token(engine, "acme")
    assert new != old and authenticate(engine, old) is None and authenticate(engine, new) == tenant


def test_an_update_changes_only_what_is_given(engine):
    create_tenant(engine, "acme", limits=TenantLimits(open_batches=3), config={"openrlhf": {"batch_size": 8}},
                  now=1.0)
    changed = update_tenant(engine, "acme", limits=TenantLimits(open_batches=3, payload_bytes=99))
    assert changed.config == {"openrlhf": {"batch_size": 8}} and changed.limits.payload_bytes == 99
    changed = update_tenant(engine, "acme", config={})
    assert changed.config == {} and changed.limits == TenantLimits(open_batches=3, payload_bytes=99)


def test_limits_round_trip_through_the_store(engine):
    limits = TenantLimits(open_batches=2, queued_requests=10, payload_bytes=100)
    create_tenant(engine, "acme", limits=limits, now=1.0)
    assert get_tenant(engine, "acme").limits == limits == TenantLimits.from_dict(limits.to_dict())


def test_an_unknown_limit_is_refused():
    with pytest.raises(TenantError, match="unknown limits"):
        TenantLimits.from_dict({"batches": 2})


@pytest.mark.parametrize("value", [0, -1, 2.5, True, "8"])
def test_a_limit_that_is_not_a_positive_whole_number_is_refused_however_it_is_made(value):
    with pytest.raises(TenantError, match="open_batches must be a whole number >= 1"):
        TenantLimits.from_dict({"open_batches": value})
    with pytest.raises(TenantError, match="open_batches must be a whole number >= 1"):
        TenantLimits(open_batches=value)


def test_a_config_that_is_not_an_object_is_refused(engine):
    with pytest.raises(TenantError, match="JSON object"):
        create_tenant(engine, "acme", config=[1], now=1.0)


@pytest.mark.parametrize("config", [{"x": object()}, {"x": float("nan")}])
def test_a_config_that_is_not_plain_json_is_refused_and_nothing_is_stored(engine, config):
    with pytest.raises(TenantError, match="plain JSON"):
        create_tenant(engine, "acme", config=config, now=1.0)
    assert list_tenants(engine) == []


def test_the_stored_config_is_a_copy_the_caller_cannot_change_afterwards(engine):
    config = {"openrlhf": {"batch_size": 8}}
    create_tenant(engine, "acme", config=config, now=1.0)
    config["openrlhf"]["batch_size"] = 9
    assert get_tenant(engine, "acme").config == {"openrlhf": {"batch_size": 8}}


@pytest.mark.parametrize("token", ["", "x", "rf_", "rf_" + "a" * 400, "rf_\ud800", "rf_é\x00", None, 12])
def test_a_malformed_or_unknown_token_authenticates_as_nobody(engine, token):
    create_tenant(engine, "acme", now=1.0)
    assert authenticate(engine, token) is None


def test_an_unknown_tenant_is_named_in_the_error(engine):
    with pytest.raises(TenantError, match="no tenant named 'ghost'"):
        get_tenant(engine, "ghost")


def test_listing_can_leave_revoked_tenants_out(engine):
    create_tenant(engine, "a", now=time.time())
    create_tenant(engine, "b", now=time.time())
    revoke_tenant(engine, "a", now=time.time())
    assert [t.name for t in list_tenants(engine)] == ["a", "b"]
    assert [t.name for t in list_tenants(engine, include_revoked=False)] == ["b"]


def test_an_unknown_tenant_cannot_be_revoked_updated_or_rotated(engine):
    for call in (lambda: revoke_tenant(engine, "ghost", now=1.0), lambda: update_tenant(engine, "ghost"),
                 lambda: rotate_token(engine, "ghost")):
        with pytest.raises(TenantError, match="no tenant named 'ghost'"):
            call()


def test_tenants_work_the_same_on_the_embedded_sqlite_store(tmp_path):
    url = store.embedded_url(str(tmp_path))
    store.upgrade(url)
    engine = store.make_engine(url)
    try:
        tenant, token = create_tenant(engine, "acme", limits=TenantLimits(open_batches=2), config={"a": [1]}, now=1.0)
        with pytest.raises(TenantError, match="already exists"):
            create_tenant(engine, "acme", now=2.0)
        assert authenticate(engine, token) == tenant and tenant.config == {"a": [1]}
        revoke_tenant(engine, "acme", now=3.0)
        assert authenticate(engine, token) is None
    finally:
        engine.dispose()


def test_a_fair_share_round_trips_through_the_store(engine):
    share = FairShare(2.5, {"gpu": 4, "cpu": 16})
    create_tenant(engine, "acme", fair_share=share, now=1.0)
    assert get_tenant(engine, "acme").fair_share == share


def test_a_tenant_made_without_a_fair_share_has_a_share_of_one_and_no_cap(engine):
    tenant, _ = create_tenant(engine, "acme", now=1.0)
    assert tenant.fair_share == FairShare() and tenant.fair_share.cap("gpu") is None


def test_a_fair_share_update_leaves_limits_and_config_and_theirs_leave_it(engine):
    create_tenant(engine, "acme", limits=TenantLimits(open_batches=3), config={"x": 1}, now=1.0)
    changed = update_tenant(engine, "acme", fair_share=FairShare(3.0, {"gpu": 2}))
    assert changed.limits == TenantLimits(open_batches=3) and changed.config == {"x": 1}
    changed = update_tenant(engine, "acme", limits=TenantLimits(open_batches=5))
    assert changed.fair_share == FairShare(3.0, {"gpu": 2})


def test_a_fair_share_may_be_given_in_its_json_form(engine):
    create_tenant(engine, "acme", fair_share={"share": 2, "max_workers": {"io": 1}}, now=1.0)
    assert get_tenant(engine, "acme").fair_share == FairShare(2.0, {"io": 1})


@pytest.mark.parametrize("fair_share,message", [({"share": 0}, "share must be a number > 0"),
                                                ({"max_workers": {"tpu": 1}}, "unknown resource kind 'tpu'"),
                                                ({"weight": 2}, "unknown fair-share settings")])
def test_a_bad_fair_share_is_a_tenant_error_with_its_message_and_nothing_changes(engine, fair_share, message):
    create_tenant(engine, "acme", fair_share=FairShare(2.0), now=1.0)
    with pytest.raises(TenantError, match=message):
        update_tenant(engine, "acme", fair_share=fair_share)
    with pytest.raises(TenantError, match=message):
        create_tenant(engine, "other", fair_share=fair_share, now=1.0)
    assert [(t.name, t.fair_share) for t in list_tenants(engine)] == [("acme", FairShare(2.0))]
