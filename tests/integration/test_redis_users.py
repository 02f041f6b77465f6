"""A tenant's direct client on its own Redis user (real Redis, real worker): it runs its batches end to end,
and Redis itself refuses it another tenant's batches, the history stream, other namespaces and
administration. `farm tenants` makes, rotates and deletes the user."""

from __future__ import annotations

import codecs
import json
import re
import threading
import time

import pytest
import redis
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from farm.app import redis_users
from farm.app.cli import main
from farm.client.sync import RewardClient
from farm.config import Settings
from farm.errors import BatchNotFound, InvalidInput
from farm.protocol.calls import cancel_call
from farm.protocol.dispatch import Dispatch
from farm.protocol.keys import Keys, Part, QueuePart, members
from farm.protocol.scope import Scope
from farm.store import engine as store
from farm.store.tenants import new_token, token_hash

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

QUICK = {"times": [0.05, 0]}


@pytest.fixture
def admin(redis_url, namespace):
    r = redis.Redis.from_url(redis_url)
    yield r
    for user in r.execute_command("ACL", "USERS"):
        if user.decode().startswith(f"{namespace}-t"):
            r.execute_command("ACL", "DELUSER", user)
    r.close()


def direct(redis_url: str, namespace: str, tenant: int, token: str, **settings) -> Settings:
    host = redis_url.split("//", 1)[1]
    return Settings(redis_url=f"redis://{redis_users.username(namespace, tenant)}:{token}@{host}",
                    namespace=namespace, tenant=tenant, **settings)


@pytest.fixture
def tenants(admin, redis_url, namespace):
    """Tenants 7 and 8 with users of their own; 8 has an open batch with a request in it."""
    tokens = {t: new_token() for t in (7, 8)}
    for t, token in tokens.items():
        redis_users.grant(admin, namespace, t, token_hash(token))
    eight = RewardClient(direct(redis_url, namespace, 8, tokens[8]))
    batch = eight.open_batch("math", "synthetic", 2, "private")
    batch.submit("r0", QUICK)  # the batch stays open: one of its two requests has come
    yield tokens
    eight.close()


def tenant_redis(redis_url, namespace, tenant, token) -> redis.Redis:
    return redis.Redis.from_url(direct(redis_url, namespace, tenant, token).redis_url, decode_responses=True)


def test_a_tenants_direct_client_runs_its_batch_end_to_end(tenants, redis_url, namespace, start_workers):
    start_workers("synthetic.compile")
    with RewardClient(direct(redis_url, namespace, 7, tenants[7])) as client:
        batch = client.open_batch("math", "synthetic", 3)
        assert batch.id.startswith("t7:") and batch.task == "t7.math"
        batch.submit_many([(f"r{i}", QUICK) for i in range(3)])
        assert [r.status.value for r in batch.gather(timeout=30)] == ["ok"] * 3
        assert client.batch(batch.id).progress().state == "completed"


def test_the_direct_client_names_no_batch_outside_its_tenant(tenants, redis_url, namespace):
    with RewardClient(direct(redis_url, namespace, 7, tenants[7])) as client:
        with pytest.raises(InvalidInput, match="batch id must be"):
            client.batch("t8:private")  # not its own name for a batch: no ':' in a name (farm.protocol.ids)
        with pytest.raises(BatchNotFound):
            client.batch("private")  # its own "t7:private"


def test_redis_refuses_reading_another_tenants_batch(tenants, redis_url, namespace):
    r = tenant_redis(redis_url, namespace, 7, tenants[7])
    for read in (lambda: r.hgetall(f"{namespace}:b:t8:private"), lambda: r.hgetall(f"{namespace}:b:t8:private:payload"),
                 lambda: r.xread({f"{namespace}:b:t8:private:done": "0-0"})):
        with pytest.raises(redis.exceptions.NoPermissionError):
            read()


def test_redis_refuses_cancelling_or_submitting_into_another_tenants_batch(tenants, redis_url, namespace, admin):
    seven = Dispatch(direct(redis_url, namespace, 7, tenants[7]))
    with pytest.raises(redis.exceptions.ResponseError, match="can't access|NOPERM|no permissions"):
        seven.run(cancel_call("t8:private", time.time()))
    from farm import registry
    from farm.protocol.calls import submit_call
    call = submit_call(seven.settings, registry.get("synthetic"), "t8:private", "intruder", QUICK, None, time.time())
    with pytest.raises(redis.exceptions.ResponseError, match="can't access|NOPERM|no permissions"):
        seven.run(call)
    state = {k.decode(): v.decode() for k, v in admin.hgetall(f"{namespace}:b:t8:private").items()}
    assert (state["state"], state["arrived"]) == ("open", "1")


def test_redis_refuses_the_history_stream_other_namespaces_and_administration(tenants, redis_url, namespace):
    r = tenant_redis(redis_url, namespace, 7, tenants[7])
    for forbidden in (lambda: r.xrange(f"{namespace}:events"), lambda: r.get("othernamespace:knobs"),
                      lambda: r.keys("*"), lambda: r.flushall(), lambda: r.config_get("*"),
                      lambda: r.zrange(f"{namespace}:batches", 0, -1)):
        with pytest.raises(redis.exceptions.NoPermissionError):
            forbidden()


def monitored(redis_url: str, namespace: str, run) -> list[list[str]]:
    """Every command on the namespace's keys and channels (those inside the scripts included) while `run()`
    runs, as Redis' MONITOR shows them; other namespaces' traffic is left out."""
    sentinel = f"{namespace}-done-{time.time()}"
    seen: list[list[str]] = []
    watcher = redis.Redis.from_url(redis_url)
    with watcher.monitor() as monitor:
        def collect():
            while True:
                line = monitor.connection.read_response()
                line = line.decode(errors="replace") if isinstance(line, bytes) else line
                args = [codecs.decode(a, "unicode_escape") for a in re.findall(r'"((?:[^"\\]|\\.)*)"', line)]
                if args == ["ECHO", sentinel]:
                    return
                if any(a == namespace or a.startswith((f"{namespace}:", f"{namespace}.")) for a in args[1:]):
                    seen.append(args)
        reader = threading.Thread(target=collect, daemon=True)
        reader.start()
        time.sleep(0.2)  # MONITOR is on before the first command
        try:
            run()
        finally:
            redis.Redis.from_url(redis_url).echo(sentinel)
            reader.join(10)
    watcher.close()
    return seen


def a_tenants_trainer(settings: Settings) -> None:
    """What a trainer does with its batches (no worker runs: cancel and seal end them)."""
    with RewardClient(settings) as client:
        batch = client.open_batch("math", "synthetic", 4, "acl", group_size=2)
        batch.submit("r0", QUICK, group="g0")
        batch.submit_many([("r1", QUICK, "g0"), ("r2", QUICK, "g1")])
        batch.heartbeat()
        batch.progress()
        batch.cancel()
        assert [r.status.value for r in batch.gather(timeout=10)] == ["cancelled"] * 3
        assert [g for g, _ in batch.completed_groups(timeout=10)] == ["g0", "g1"]
        sealed = client.open_batch("math", "synthetic", 3, "sealed")
        sealed.submit("r0", QUICK)
        assert sealed.seal() == "sealed" and sealed.progress().size == 1
        client.batch(sealed.id).cancel()


def allowed(admin, user: str, command: list[str]) -> bool:
    reply = admin.execute_command("ACL", "DRYRUN", user, *command)
    return (reply.decode() if isinstance(reply, bytes) else reply) == "OK"


def keys_of(admin, command: list[str]) -> list[str]:
    try:
        return [k.decode() if isinstance(k, bytes) else k for k in admin.command_getkeys(*command)]
    except redis.exceptions.ResponseError:  # a command with no keys (EVALSHA of none, PUBLISH, TIME)
        return []


def test_every_key_a_tenants_batches_use_is_its_users_and_no_other_tenants(admin, redis_url, namespace):
    for t in (7, 8):
        redis_users.grant(admin, namespace, t, token_hash(new_token()))
    # the trainer runs as the farm's own user, so that nothing is refused on the way and every command shows
    commands = monitored(redis_url, namespace,
                         lambda: a_tenants_trainer(Settings(redis_url=redis_url, namespace=namespace, tenant=7)))
    assert any(c[0] == "EVALSHA" for c in commands) and any(c[0] == "XREAD" for c in commands)
    refused = [c for c in commands if not allowed(admin, redis_users.username(namespace, 7), c)]
    assert refused == []
    own = [c for c in commands if any("t7:acl" in k or "t7:sealed" in k for k in keys_of(admin, c))]
    assert {c[0] for c in own} >= {"HSET", "HGETALL", "XADD", "XREAD", "RPUSH"}
    reached = [c for c in own if allowed(admin, redis_users.username(namespace, 8), c)]
    assert reached == [], [c[:2] for c in reached]


def test_a_withdrawn_user_can_no_longer_log_in(tenants, redis_url, namespace, admin):
    assert redis_users.withdraw(admin, namespace, 7)
    with pytest.raises(redis.exceptions.AuthenticationError):
        tenant_redis(redis_url, namespace, 7, tenants[7]).ping()


@pytest.fixture
def cli_env(postgres_url, redis_url, namespace, admin):
    store.upgrade(postgres_url)
    return {"FARM_DATABASE_URL": postgres_url, "FARM_REDIS_URL": redis_url, "FARM_NAMESPACE": namespace}


def test_farm_tenants_makes_rotates_and_deletes_the_redis_user(cli_env, redis_url, namespace):
    created = json.loads(CliRunner().invoke(main, ["tenants", "create", "acme", "--redis-user", "--json"],
                                            env=cli_env).output)
    settings = created["direct_client"]
    assert settings["FARM_TENANT"] == str(created["id"]) and settings["FARM_NAMESPACE"] == namespace
    assert redis.Redis.from_url(settings["FARM_REDIS_URL"]).ping()
    rotated = json.loads(CliRunner().invoke(main, ["tenants", "rotate", "acme", "--json"], env=cli_env).output)
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis.from_url(settings["FARM_REDIS_URL"]).ping()
    assert redis.Redis.from_url(rotated["direct_client"]["FARM_REDIS_URL"]).ping()
    revoked = CliRunner().invoke(main, ["tenants", "revoke", "acme"], env=cli_env)
    assert "Redis user is deleted" in revoked.output
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis.from_url(rotated["direct_client"]["FARM_REDIS_URL"]).ping()


def test_while_a_share_is_reserved_a_tenants_submit_leaves_the_stages_notice_and_may_read_nothing_more(
        tenants, redis_url, namespace, admin):
    from farm.app import fair_shares
    from farm.protocol.keys import Keys, QueuePart
    from farm.protocol.shares import FairShare
    keys = Keys(namespace)
    fair_shares.put(admin, namespace, {"t8": FairShare(reserve=True)})
    with RewardClient(direct(redis_url, namespace, 7, tenants[7])) as client:
        client.open_batch("math", "synthetic", 1).submit("r0", QUICK)
    assert admin.lrange(keys.queue("synthetic.compile", QueuePart.notice), 0, -1) == [b"1"]
    own = tenant_redis(redis_url, namespace, 7, tenants[7])
    for read in (lambda: own.lrange(keys.queue("synthetic.compile", QueuePart.notice), 0, -1),
                 lambda: own.hgetall(keys.shares)):
        with pytest.raises(redis.exceptions.NoPermissionError):
            read()
    assert own.get(keys.reserving) == "1"  # all it learns: some tenant reserves
    own.close()


def test_a_tenants_cancel_tells_the_worker_running_its_request(tenants, redis_url, namespace, admin):
    from farm.protocol.keys import Keys
    d = Dispatch(Settings(redis_url=redis_url, namespace=namespace, lease_s=3600.0))
    with RewardClient(direct(redis_url, namespace, 7, tenants[7])) as client:
        batch = client.open_batch("math", "synthetic", 1)
        batch.submit("r0", QUICK)
        # tenant 8's request waits too: one worker takes it, the other tenant 7's
        token = {d.pick("synthetic.compile", f"w{n}", "ebf", f"tok{n}")[1]: f"tok{n}" for n in range(2)}
        batch.cancel()  # as the tenant's own user
    keys = Keys(namespace)
    assert admin.lrange(keys.notice(token[batch.id]), 0, -1) == [b"1"]
    assert not admin.exists(keys.notice(token["t8:private"]))
    d.close()


# a batch's name from the words the keys are spelled with: every part of a batch and of a stage queue
NAME_PIECES = st.sampled_from(sorted({p.strip(":") for p in (*members(Part).values(), *members(QueuePart).values())
                                      if len(p) < 12 and p.strip(":")} | {"t3", "x", "-"}))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tenant=st.integers(0, 6), name=st.lists(NAME_PIECES, min_size=1, max_size=3).map("".join))
def test_no_other_tenants_user_may_write_any_key_of_a_batch_the_farm_accepts(admin, namespace, tenant, name):
    """A batch named `ebf` had its pending list `...:l:t3:ebf` matched by every tenant's `%W~<ns>:q:*:ebf`:
    another tenant could delete it. Redis itself is asked (ACL DRYRUN) for every key of the batch."""
    try:
        batch = Scope(tenant).batch(name)
    except InvalidInput:
        assume(False)
    other = redis_users.username(namespace, 9)
    redis_users.grant(admin, namespace, 9, token_hash("x" * 64))
    k = Keys(namespace)
    keys = [k.batch(batch, part) for part in members(Part).values()]
    keys += [k.pending(q, batch) for q in ("math.verify", "run_code.run")]
    assert [key for key in keys if allowed(admin, other, ["DEL", key])] == []


@pytest.mark.parametrize("name", ["ebf", "fcfs", "busy"])
def test_a_batch_named_as_a_stage_queues_part_is_refused_with_the_reason(name):
    with pytest.raises(InvalidInput, match="must not be a stage queue's part"):
        Scope(3).batch(name)
