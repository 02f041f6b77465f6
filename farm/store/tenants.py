"""The gateway's tenants: who may call, with which limits, how their protocol calls become batches, and their
fair share of the farm's workers (farm.protocol.shares; the pick reads the copy farm.app.fair_shares publishes).

A token is shown once, when it is made, and only its SHA-256 is kept: a token is 256 random bits, so there
is no dictionary to try and a fast hash protects it as well as a slow one would (a slow one would only slow
every call down). Lookups go by the hash.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from dataclasses import asdict, dataclass, field, fields
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from sqlalchemy import Connection, Engine, Row, insert, select, update
from sqlalchemy.exc import IntegrityError

from farm.protocol.shares import FairShare, ShareError
from farm.store.models import Tenant as TenantRow

_COLUMNS = TenantRow.__table__  # rows as plain Rows (attribute access by column), not ORM objects

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # fullmatch: "$" would let a trailing newline in
TOKEN_PREFIX = "rf_"
MAX_TOKEN = 256


class TenantError(ValueError):
    """A tenant operation that cannot be done; the message says why."""


@dataclass(frozen=True)
class TenantLimits:
    """Each limit's help is what `farm tenants create/set --<limit>` shows (the options are made from these)."""

    open_batches: int = field(default=64, metadata={"help": "Batches open at once."})
    queued_requests: int = field(default=100_000, metadata={
        "help": "Requests submitted and not yet finished, over all its batches."})
    payload_bytes: int = field(default=1 << 20, metadata={"help": "One request's payload, encoded as JSON."})
    # a waiting call holds no shared connection (gateway.bell), so the bound is on memory and sockets, not on others
    waiting_calls: int = field(default=256, metadata={
        "help": "Long polls (results, groups with wait_s) and result streams open at once; 429 past it."})

    def __post_init__(self) -> None:
        # checked here, not only in from_dict: a limit of 0 would lock the tenant out with no message saying why
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise TenantError(f"limit {f.name} must be a whole number >= 1, not {value!r:.100}")

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TenantLimits":
        """Limits from JSON; a missing key takes its default, an unknown one is refused (a typo is no limit)."""
        if not isinstance(data, Mapping):
            raise TenantError(f"limits must be an object, not {data!r:.100}")
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise TenantError(f"unknown limits {sorted(unknown)}; known: {sorted(known)}")
        return cls(**data)


@dataclass(frozen=True)
class Tenant:
    id: int
    name: str
    token_prefix: str
    created_at: float
    revoked_at: float | None
    limits: TenantLimits
    config: Mapping[str, Any] = field(default_factory=dict)
    operator: bool = False  # may open the farm page (`/ui`), which shows every tenant's batches
    fair_share: FairShare = field(default_factory=FairShare)  # its share of a stage's workers, its caps per kind

    @property
    def active(self) -> bool:
        return self.revoked_at is None


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """SHA-256 hex. A fast hash is enough: a token is 256 random bits, with no dictionary to try (see above).
    Total over str: the gateway hashes whatever a caller sends, lone surrogates included."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def _tenant(row: Any) -> Tenant:
    return Tenant(row.id, row.name, row.token_prefix, row.created_at, row.revoked_at,
                  TenantLimits.from_dict(row.limits or {}), MappingProxyType(dict(row.config or {})),
                  bool(row.operator), _checked_share(row.fair_share or {}))


def _checked_share(fair_share: FairShare | Mapping[str, Any] | None) -> FairShare:
    """A FairShare, or one from its JSON form (`FairShare.to_dict`); a TenantError says what is wrong with it, so
    callers catch one error for every setting of a tenant."""
    if fair_share is None:
        return FairShare()
    if isinstance(fair_share, FairShare):
        return fair_share
    try:
        return FairShare.from_dict(fair_share)
    except ShareError as exc:
        raise TenantError(str(exc)) from exc


def _checked_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise TenantError(f"config must be a JSON object, not {config!r:.100}")
    try:  # refused here with a message, not by the database driver; the round trip also copies it
        return json.loads(json.dumps(dict(config), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise TenantError(f"config must be plain JSON: {exc}") from exc


def _checked_limits(limits: TenantLimits | None) -> TenantLimits:
    if limits is None:
        return TenantLimits()
    if not isinstance(limits, TenantLimits):
        raise TenantError(f"limits must be TenantLimits, not {type(limits).__name__}")
    return limits


def _row(conn: Connection, name: str) -> Row:
    row = conn.execute(select(_COLUMNS).where(TenantRow.name == name)).one_or_none()
    if row is None:
        raise TenantError(f"no tenant named {name!r}")
    return row


def create_tenant(engine: Engine, name: str, *, limits: TenantLimits | None = None,
                  config: Mapping[str, Any] | None = None, operator: bool = False,
                  fair_share: FairShare | Mapping[str, Any] | None = None, now: float) -> tuple[Tenant, str]:
    """A new tenant and its token, which is returned this once and never stored; an `operator` may open the
    farm page. `fair_share`: its share and caps (a share of 1 and no cap by default)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise TenantError(f"a tenant name is 1-64 letters, digits or '_.-', not {name!r:.100}")
    token = new_token()
    values = dict(name=name, token_hash=token_hash(token), token_prefix=token[:8], created_at=now, revoked_at=None,
                  limits=_checked_limits(limits).to_dict(), config=_checked_config(config), operator=bool(operator),
                  fair_share=_checked_share(fair_share).to_dict())
    try:
        with engine.begin() as conn:
            conn.execute(insert(TenantRow).values(**values))
            return _tenant(_row(conn, name)), token
    except IntegrityError as exc:
        raise TenantError(f"a tenant named {name!r} already exists") from exc


def list_tenants(engine: Engine, *, include_revoked: bool = True) -> list[Tenant]:
    query = select(_COLUMNS).order_by(TenantRow.id)
    if not include_revoked:
        query = query.where(TenantRow.revoked_at.is_(None))
    with engine.connect() as conn:
        return [_tenant(row) for row in conn.execute(query).all()]


def get_tenant(engine: Engine, name: str) -> Tenant:
    with engine.connect() as conn:
        return _tenant(_row(conn, name))


def revoke_tenant(engine: Engine, name: str, *, now: float) -> Tenant:
    """Its token stops working (on every gateway within its cache time); revoking again changes nothing."""
    with engine.begin() as conn:
        row = _row(conn, name)
        if row.revoked_at is None:
            conn.execute(update(TenantRow).where(TenantRow.id == row.id).values(revoked_at=now))
        return _tenant(_row(conn, name))


def revoked_among(engine: Engine, tenant_ids: Iterable[int]) -> set[int]:
    """Which of these tenants are revoked (a gateway asks for those it has calls waiting for)."""
    ids = sorted({int(i) for i in tenant_ids})
    if not ids:
        return set()
    with engine.connect() as conn:
        rows = conn.execute(select(TenantRow.id).where(TenantRow.id.in_(ids), TenantRow.revoked_at.is_not(None)))
        return {row.id for row in rows}


def update_tenant(engine: Engine, name: str, *, limits: TenantLimits | None = None,
                  config: Mapping[str, Any] | None = None,
                  fair_share: FairShare | Mapping[str, Any] | None = None) -> Tenant:
    """Changes what is given, nothing else (a fair share given is the whole of it: its share and all its caps)."""
    values: dict[str, Any] = {}
    if limits is not None:
        values["limits"] = _checked_limits(limits).to_dict()
    if config is not None:
        values["config"] = _checked_config(config)
    if fair_share is not None:
        values["fair_share"] = _checked_share(fair_share).to_dict()
    with engine.begin() as conn:
        row = _row(conn, name)
        if values:
            conn.execute(update(TenantRow).where(TenantRow.id == row.id).values(**values))
        return _tenant(_row(conn, name))


def rotate_token(engine: Engine, name: str) -> tuple[Tenant, str]:
    """A new token for the tenant; the old one stops working."""
    token = new_token()
    with engine.begin() as conn:
        row = _row(conn, name)
        conn.execute(update(TenantRow).where(TenantRow.id == row.id)
                     .values(token_hash=token_hash(token), token_prefix=token[:8]))
        return _tenant(_row(conn, name)), token


def authenticate(engine: Engine, token: str) -> Tenant | None:
    """The active tenant holding `token`; None for an unknown, malformed or revoked one."""
    if not isinstance(token, str) or not token.startswith(TOKEN_PREFIX) or len(token) > MAX_TOKEN:
        return None
    with engine.connect() as conn:
        row = conn.execute(select(_COLUMNS).where(TenantRow.token_hash == token_hash(token))).one_or_none()
    if row is None or row.revoked_at is not None:
        return None
    return _tenant(row)
