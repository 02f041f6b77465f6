"""`farm tenants`: who may call the gateway, and its fair share of the farm's workers. A token is printed once,
when it is made; the store keeps only its hash. A change of fair shares is published to the farm's Redis at once
when it is named (--redis-url, FARM_REDIS_URL), else by the planner's process within `fair_shares.EVERY_S`."""

from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import fields
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import click
import redis as redis_lib
from rich.console import Console
from rich.table import Table

from farm.app import fair_shares, redis_users, tenant_batches
from farm.app.cli.db import database_option, open_engine
from farm.app.gateway.config import protocols, with_replay
from farm.config import from_env
from farm.errors import InvalidInput
from farm.pipeline import RESOURCES
from farm.protocol.shares import FairShare, ShareError, parse_max_workers
from farm.store.engine import StoreError
from farm.store.tenants import (
    Tenant,
    TenantError,
    TenantLimits,
    create_tenant,
    get_tenant,
    list_tenants,
    revoke_tenant,
    rotate_token,
    token_hash,
    update_tenant,
)

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
redis_option = click.option("--redis-url", envvar="FARM_REDIS_URL", default=None,
                            help="The farm's Redis, for tenants' Redis users and their fair shares (which "
                                 "the pick reads) (default: FARM_REDIS_URL).")


def _redis(redis_url: str | None):
    """An administrator's connection to the farm's Redis, or None when none is named."""
    return redis_lib.Redis.from_url(redis_url) if redis_url else None


def _user_url(admin_url: str, user: str, token: str) -> str:
    """The farm's Redis URL with the tenant's user and token in place of the administrator's."""
    parts = urlsplit(admin_url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, f"{user}:{token}@{host}", parts.path, parts.query, parts.fragment))


def _grant(redis_url: str, tenant: Tenant, token: str) -> dict[str, str]:
    """Give the tenant a Redis user; the settings its direct client runs with."""
    namespace = from_env().namespace
    try:
        user = redis_users.grant(_redis(redis_url), namespace, tenant.id, token_hash(token))
    except redis_lib.RedisError as exc:
        raise click.ClickException(f"the tenant exists, but its Redis user could not be made: {exc}") from exc
    return {"FARM_REDIS_URL": _user_url(redis_url, user, token), "FARM_NAMESPACE": namespace,
            "FARM_TENANT": str(tenant.id)}


_LIMITS = fields(TenantLimits)  # one option and one column per limit, named and explained where it is defined


def limit_options(fn):
    for f in reversed(_LIMITS):
        fn = click.option(f"--{f.name.replace('_', '-')}", f.name, type=click.IntRange(min=1), default=None,
                          help=f.metadata["help"])(fn)
    fn = click.option("--replay-identical/--no-replay-identical", "replay", default=None,
                      help="Answer an identical /get_reward sample or /run_code run within the hour from the first "
                           "one's result (the default; never a result the farm caused), or run every call.")(fn)
    return click.option("--config", "config_json", default=None, metavar="JSON",
                        help='Protocol settings, e.g. \'{"openrlhf": {"batch_size": 512, "pipeline": "math"}}\'.')(fn)


def share_options(fn):
    fn = click.option("--max-workers", "max_workers", multiple=True, metavar="KIND=N",
                      help=f"Most workers of a resource kind ({', '.join(RESOURCES)}) its requests hold at once, "
                           "e.g. gpu=4 (repeatable); KIND=none removes that cap. Caps not named stay as they are. "
                           "Default: no cap.")(fn)
    fn = click.option("--reserve/--no-reserve", "reserve", default=None,
                      help="Hold its share of a stage's workers for it while it has an open batch, even when nothing "
                           "of it waits there, and take it back at once from tenants over their shares by stopping "
                           "their latest running requests (a guarantee paid in idle workers and stopped work). "
                           "Default: not reserved.")(fn)
    return click.option("--share", type=float, default=None, metavar="W",
                        help="Its weight when a stage's workers are divided between the tenants with work waiting "
                             "there (default 1: equal shares; 2 gets twice a tenant of 1).")(fn)


def _fair_share(base: FairShare, share: float | None, max_workers: tuple[str, ...],
                reserve: bool | None = None) -> FairShare | None:
    """`base` with `--share`, `--max-workers` (in the order given) and `--reserve` applied; None when none is given."""
    if share is None and not max_workers and reserve is None:
        return None
    caps = dict(base.max_workers)
    for item in max_workers:
        kind, _, n = item.partition("=")
        if n.strip().lower() == "none":
            if kind.strip() not in RESOURCES:
                raise ShareError(f"--max-workers: unknown resource kind {kind.strip()!r:.40}; known: "
                                 f"{', '.join(RESOURCES)}")
            caps.pop(kind.strip(), None)
        else:
            caps.update(parse_max_workers([item]))
    return FairShare(base.share if share is None else share, caps, base.reserve if reserve is None else reserve)


def _caps(fair_share: FairShare) -> str:
    return " ".join(f"{kind}={n}" for kind, n in fair_share.max_workers.items()) or "-"


def _publish(redis_url: str | None, engine, *, changed: bool) -> None:
    """Publish every tenant's fair share to the farm's Redis, where the pick reads them. Without Redis named, or
    with it down, the planner's process publishes them within fair_shares.EVERY_S (said when a share `changed`)."""
    later = f"the planner publishes fair shares to the farm within {fair_shares.EVERY_S:g} s"
    if not redis_url:
        if changed:
            click.echo(f"no Redis named (--redis-url, FARM_REDIS_URL): {later}", err=True)
        return
    client = _redis(redis_url)
    try:
        fair_shares.publish_from_store(engine, client, from_env().namespace)
    except redis_lib.RedisError as exc:
        click.echo(f"the fair shares could not be published to the farm's Redis ({exc}): {later}", err=True)
    finally:
        client.close()


def _limits(base: TenantLimits, given: dict[str, int | None]) -> TenantLimits | None:
    """`base` with the limits given on the command line; None when none was."""
    given = {name: value for name, value in given.items() if value is not None}
    return TenantLimits.from_dict({**base.to_dict(), **given}) if given else None


def _given(options: dict[str, Any]) -> dict[str, int | None]:
    """The limit options out of a command's keyword arguments."""
    return {f.name: options.pop(f.name) for f in _LIMITS}


def _config(config_json: str | None, replay: bool | None = None, stored: Any = None) -> dict[str, Any] | None:
    """The config to store: `--config` (else `stored`), with `--[no-]replay-identical` in every section; None
    when neither is given."""
    if config_json is None and replay is None:
        return None
    try:
        config = json.loads(config_json) if config_json is not None else dict(stored or {})
    except json.JSONDecodeError as exc:
        raise click.ClickException(f"--config is not JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise click.ClickException("--config must be a JSON object")
    try:
        if replay is not None:
            protocols(config)  # its sections are objects before the setting goes into them
            config = with_replay(config, replay)
        protocols(config)
    except InvalidInput as exc:
        raise click.ClickException(str(exc)) from exc
    return config


def _row(t: Tenant) -> dict[str, Any]:
    return {"id": t.id, "name": t.name, "token_prefix": t.token_prefix, "created_at": t.created_at,
            "revoked_at": t.revoked_at, "limits": t.limits.to_dict(), "config": dict(t.config), "operator": t.operator,
            "fair_share": t.fair_share.to_dict()}


def _when(t: float | None) -> str:
    return "-" if t is None else dt.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M")


def _token(tenant: Tenant, token: str, what: str) -> None:
    click.echo(f"{what} tenant {tenant.name!r} (id {tenant.id}). Its API token, shown only now:")
    click.echo(token)


def _run(action, *args, **kwargs):
    try:
        return action(*args, **kwargs)
    except (TenantError, ShareError, StoreError) as exc:
        raise click.ClickException(str(exc)) from exc


@click.group()
def tenants() -> None:
    """Create, list, change and revoke the gateway's tenants."""


@tenants.command("create")
@click.argument("name")
@database_option
@limit_options
@share_options
@click.option("--redis-user", is_flag=True,
              help="Also a Redis user for a direct (Redis) client, confined to the tenant's own batches.")
@redis_option
@click.option("--operator", is_flag=True, help="An operator: its token opens the gateway's farm page (/ui), which shows "
              "every tenant's batches, the pools, costs and knobs.")
@json_option
def create(name, database_url, replay, config_json, share, max_workers, reserve, redis_user, redis_url, operator, as_json,
           **limit_values) -> None:
    """A new tenant and its API token."""
    limits = _run(_limits, TenantLimits(), _given(limit_values))
    config = _config(config_json, replay)
    fair_share = _run(_fair_share, FairShare(), share, max_workers, reserve)
    if redis_user and not redis_url:
        raise click.UsageError("--redis-user needs the farm's Redis: --redis-url or FARM_REDIS_URL")
    engine = open_engine(database_url)
    tenant, token = _run(create_tenant, engine, name, limits=limits, config=config, operator=operator,
                         fair_share=fair_share, now=time.time())
    _publish(redis_url, engine, changed=fair_share is not None)
    direct = _grant(redis_url, tenant, token) if redis_user else None
    if as_json:
        click.echo(json.dumps({"id": tenant.id, "name": tenant.name, "token": token, "direct_client": direct,
                               "operator": tenant.operator}))
        return
    if tenant.operator:
        click.echo("An operator: its farm page is http://<gateway host:port>/t/<token>/ui (farm gateway)")
    _token(tenant, token, "created operator" if tenant.operator else "created")
    if direct:
        click.echo("Its direct client (the Python client on the farm's Redis) runs with:")
        for key, value in direct.items():
            click.echo(f"{key}={value}")


@tenants.command("list")
@database_option
@json_option
def list_(database_url, as_json) -> None:
    """Every tenant, with its limits, fair share and caps (tokens are never shown)."""
    found = _run(list_tenants, open_engine(database_url))
    if as_json:
        click.echo(json.dumps([_row(t) for t in found], indent=2))
        return
    table = Table(title="tenants", show_header=True)
    for column in ("id", "name", "token", "created", "revoked", *(f.name.replace("_", " ") for f in _LIMITS),
                   "share", "max workers", "config", "operator"):
        table.add_column(column)
    for t in found:
        table.add_row(str(t.id), t.name, f"{t.token_prefix}...", _when(t.created_at), _when(t.revoked_at),
                      *(str(getattr(t.limits, f.name)) for f in _LIMITS),
                      f"{t.fair_share.share:g}" + (" reserved" if t.fair_share.reserve else ""),
                      _caps(t.fair_share), json.dumps(dict(t.config)) if t.config else "-",
                      "yes" if t.operator else "-")
    Console().print(table)


@tenants.command("set")
@click.argument("name")
@database_option
@limit_options
@share_options
@redis_option
@json_option
def set_(name, database_url, replay, config_json, share, max_workers, reserve, redis_url, as_json, **limit_values) -> None:
    """Change a tenant's limits, config or fair share (only what is given; caps not named stay)."""
    given = _given(limit_values)
    if (config_json is None and replay is None and share is None and not max_workers and reserve is None
            and all(value is None for value in given.values())):
        options = ", ".join(f"--{f.name.replace('_', '-')}" for f in _LIMITS)
        raise click.UsageError(f"nothing to set: give {options}, --share, --max-workers, --[no-]reserve, --config or "
                               "--[no-]replay-identical")
    _config(config_json)  # checked before anything is read or written
    _run(_fair_share, FairShare(), share, max_workers, reserve)
    engine = open_engine(database_url)
    stored = _run(get_tenant, engine, name)
    config = _config(config_json, replay, stored.config if replay is not None else None)
    # what is not given keeps its stored value (an operator's command: no concurrent writer to race)
    limits = _run(_limits, stored.limits, given)
    fair_share = _run(_fair_share, stored.fair_share, share, max_workers, reserve)
    tenant = _run(update_tenant, engine, name, limits=limits, config=config, fair_share=fair_share)
    _publish(redis_url, engine, changed=fair_share is not None)
    click.echo(json.dumps(_row(tenant)) if as_json else f"tenant {name!r}: limits {tenant.limits.to_dict()}, "
               f"config {json.dumps(dict(tenant.config))}, share {tenant.fair_share.share:g}, "
               f"max workers {_caps(tenant.fair_share)}")


@tenants.command("revoke")
@click.argument("name")
@database_option
@redis_option
@click.option("--cancel", is_flag=True, help="Also cancel its open batches, so their queued requests never run "
              "(needs the farm's Redis; takes the gateways' few seconds of token cache).")
def revoke(name, database_url, redis_url, cancel) -> None:
    """Its token stops working and its calls waiting on the gateways end (within the gateways' few seconds of
    cache), and its Redis user goes; `--cancel`: its open batches too."""
    if cancel and not redis_url:
        raise click.UsageError("--cancel needs the farm's Redis: --redis-url or FARM_REDIS_URL")
    engine = open_engine(database_url)
    tenant = _run(revoke_tenant, engine, name, now=time.time())
    click.echo(f"tenant {name!r} revoked at {_when(tenant.revoked_at)}")
    if not redis_url:
        click.echo("no Redis named (--redis-url, FARM_REDIS_URL): a Redis user of this tenant, if it has one, is "
                   "still there; run this again with the farm's Redis to delete it", err=True)
        return
    _publish(redis_url, engine, changed=True)  # its share leaves the pick's table
    if redis_users.withdraw(_redis(redis_url), from_env().namespace, tenant.id):
        click.echo("its Redis user is deleted, and its connections closed")
    if cancel:
        cancelled = tenant_batches.cancel_open(from_env().with_(redis_url=redis_url), tenant.id)
        click.echo(f"cancelled its {len(cancelled)} open batches" + (f": {', '.join(cancelled)}" if cancelled else ""))


@tenants.command("rotate")
@click.argument("name")
@database_option
@redis_option
@json_option
def rotate(name, database_url, redis_url, as_json) -> None:
    """A new token for the tenant; the old one stops working (for its Redis user too)."""
    tenant, token = _run(rotate_token, open_engine(database_url), name)
    admin = _redis(redis_url)
    direct = (_grant(redis_url, tenant, token)
              if admin is not None and redis_users.exists(admin, from_env().namespace, tenant.id) else None)
    if as_json:
        click.echo(json.dumps({"id": tenant.id, "name": tenant.name, "token": token, "direct_client": direct}))
        return
    _token(tenant, token, "rotated the token of")
    if direct:
        click.echo(f"its Redis user's password is the new token: FARM_REDIS_URL={direct['FARM_REDIS_URL']}")
