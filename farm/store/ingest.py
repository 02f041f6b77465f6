"""Turning history events into rows: validation of one event, and the bulk, idempotent write of many.

Every write is an upsert keyed by the event's natural key and sets only the fields its kind carries, so
replaying an event, or receiving a batch's events out of order, leaves the same rows. A batch's T and
extra delay are recomputed whenever anything about a completed batch is written, so a stage time that
arrives after `batch_completed` still counts.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Iterable, Mapping

from sqlalchemy import Connection, and_, bindparam, case, func, select, update
from sqlalchemy.dialects import postgresql, sqlite

from farm.events import KINDS
from farm.store.models import Batch, Request, RequestStage, Task, Worker

# The ids and the task key rows (primary keys, btree indexes): a PostgreSQL index row holds ~2.7 kB, and a
# request's stage row is keyed by batch, request and stage together. Every id the client takes fits
# (farm.protocol.ids: request ids and groups up to MAX_REQUEST_ID_BYTES, batch ids 128 and tasks 64 characters).
MAX_KEY_BYTES = 1024
_KEYS = {"batch", "request", "task"}
_STRINGS = {"pipeline": 64, "worker": 200, "stage": 130, "status": 32, "outcome": 32, "backend": 32}
_UNBOUNDED = {"group", "message"}  # a group is naturally the prompt: many kB, and no index on it
_OPTIONAL_STRINGS = {"group", "outcome", "message", "backend"}
_TIMES = {"opened_at", "estimated_at", "completed_at", "cancelled_at", "abandoned_at", "sealed_at", "arrived_at", "at",
          "finished_at"}
_OPTIONAL_TIMES = {"queued_at", "started_at"}  # a stage cut short before it ran has no start
_STAGE_DONE_OPTIONAL = {"finished_at"}
SAME_LIFE_S = 5.0  # worker-life times from different hosts (backend, worker) may disagree by this much


class BadEvent(ValueError):
    """An entry the recorder skips; the message says why."""


def _text(kind: str, name: str, value: Any, limit: int | None) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise BadEvent(f"{kind}: {name} must be a string, not {value!r}")
    text = str(value)
    if limit is not None and len(text) > limit:
        raise BadEvent(f"{kind}: {name} is longer than {limit} characters")
    return text


def _number(kind: str, name: str, value: Any, what: str = "number") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadEvent(f"{kind}: {name} must be a finite {what}, not {value!r}")
    return float(value)


def _time(kind: str, name: str, value: Any) -> float:
    return _number(kind, name, value, "number of epoch seconds")


def clean(event: Any) -> dict[str, Any]:
    """A decoded stream entry checked against `farm.events.KINDS` and typed; raises BadEvent."""
    if not isinstance(event, Mapping):
        raise BadEvent(f"an event must be a JSON object, not {type(event).__name__}")
    kind = event.get("kind")
    if kind not in KINDS:
        raise BadEvent(f"unknown event kind {kind!r}")
    missing = [f for f in KINDS[kind] if f not in event]
    if missing:
        raise BadEvent(f"{kind}: lacks {missing}")
    out: dict[str, Any] = {"kind": kind}
    for name in KINDS[kind]:
        value = event[name]
        if name in _STRINGS or name in _KEYS or name in _UNBOUNDED:
            if value is None and name in _OPTIONAL_STRINGS:
                out[name] = None
            else:
                out[name] = _text(kind, name, value, _STRINGS.get(name))
                if name in _KEYS and len(out[name].encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
                    raise BadEvent(f"{kind}: {name} is longer than the {MAX_KEY_BYTES} bytes a key of the "
                                   f"history store may have: {out[name][:80]!r}...")
        elif name in _OPTIONAL_TIMES or (kind == "stage_done" and name in _STAGE_DONE_OPTIONAL):
            out[name] = None if value is None else _time(kind, name, value)
        elif name in _TIMES:
            out[name] = _time(kind, name, value)
        elif name == "size":
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise BadEvent(f"{kind}: size must be a whole number >= 0, not {value!r}")
            out[name] = value
        elif name == "reward":
            out[name] = None if value is None else _number(kind, name, value)
        elif name == "stages":
            if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
                raise BadEvent(f"{kind}: stages must be a list of stage names, not {value!r}")
            out[name] = value
        else:
            out[name] = value
    if kind == "worker_spawned" and event.get("pending") is True:  # optional: waits for room, placed later
        out["pending"] = True
    return out


# ---------------------------------------------------------------- dialect-neutral bulk writes


def _insert(conn: Connection, model):
    dialect = conn.dialect.name
    if dialect == "postgresql":
        return postgresql.insert(model)
    if dialect == "sqlite":
        return sqlite.insert(model)
    raise NotImplementedError(f"the history store supports PostgreSQL and SQLite, not {dialect}")


_UPSERTS: dict[tuple[str, str, tuple[str, ...], tuple[str, ...]], Any] = {}  # built once per dialect, table, shape


def _upsert_statement(conn: Connection, model, keys: tuple[str, ...], shape: tuple[str, ...]):
    """The upsert of rows of one shape, built once: a chunk's cost is per statement, and building one (its
    conflict clause, its `excluded` columns) costs more than SQLAlchemy's cached compile of it."""
    key = (conn.dialect.name, model.__tablename__, keys, shape)
    stmt = _UPSERTS.get(key)
    if stmt is None:
        stmt = _insert(conn, model)
        changed = [c for c in shape if c not in keys]
        if changed:
            stmt = stmt.on_conflict_do_update(index_elements=list(keys), set_={c: stmt.excluded[c] for c in changed})
        else:
            stmt = stmt.on_conflict_do_nothing(index_elements=list(keys))
        _UPSERTS[key] = stmt
    return stmt


def _upsert(conn: Connection, model, keys: tuple[str, ...], rows: Iterable[dict[str, Any]]) -> None:
    """Insert rows, or on a key conflict set only the columns each row carries; rows are grouped by shape, one
    multi-row statement per shape (psycopg2's execute_values on PostgreSQL, `farm.store.engine`)."""
    shapes: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        shapes[tuple(sorted(row))].append(row)
    for shape, group in shapes.items():
        conn.execute(_upsert_statement(conn, model, keys, shape), group)


# ---------------------------------------------------------------- applying a chunk of events


def _queue(stage: str, pipeline: str | None) -> str:
    """A stage named bare (`compile`) becomes its queue (`synthetic.compile`) when the pipeline is known."""
    return stage if "." in stage or not pipeline else f"{pipeline}.{stage}"


_IDS = bindparam("ids", expanding=True)
_PIPELINES = select(Batch.id, Task.pipeline).join(Task, Task.name == Batch.task).where(Batch.id.in_(_IDS))


def _pipelines(conn: Connection, batch_ids: set[str], opened: dict[str, str]) -> dict[str, str]:
    known = dict(opened)
    wanted = [b for b in batch_ids if b not in known]
    if wanted:
        known.update({b: p for b, p in conn.execute(_PIPELINES, {"ids": wanted})})
    return known


def apply_events(conn: Connection, events: list[dict[str, Any]]) -> None:
    """Write clean events (in stream order) inside the caller's transaction."""
    tasks: dict[str, dict[str, Any]] = {}
    batches: dict[str, dict[str, Any]] = {}
    requests: dict[tuple[str, str], dict[str, Any]] = {}
    stages: dict[tuple[str, str, str], dict[str, Any]] = {}
    workers: list[dict[str, Any]] = []
    opened: dict[str, str] = {}

    for e in events:
        kind = e["kind"]
        if kind == "batch_opened":
            tasks[e["task"]] = {"name": e["task"], "pipeline": e["pipeline"], "created_at": e["opened_at"]}
            opened[e["batch"]] = e["pipeline"]
            batches.setdefault(e["batch"], {}).update(task=e["task"], size=e["size"], opened_at=e["opened_at"])
        elif kind == "batch_deadline":
            batches.setdefault(e["batch"], {})["estimated_at"] = e["estimated_at"]
        elif kind == "batch_completed":
            batches.setdefault(e["batch"], {})["completed_at"] = e["completed_at"]
        elif kind == "batch_cancelled":
            batches.setdefault(e["batch"], {})["cancelled_at"] = e["cancelled_at"]
        elif kind == "batch_abandoned":  # cancelled by the farm: whatever leaves cancelled batches out, leaves it out
            batches.setdefault(e["batch"], {}).update(cancelled_at=e["abandoned_at"], abandoned_at=e["abandoned_at"])
        elif kind == "batch_sealed":  # a window closed by time: the requests that arrived are the batch
            batches.setdefault(e["batch"], {})["size"] = e["size"]
        elif kind == "request_arrived":
            batches.setdefault(e["batch"], {})
            requests.setdefault((e["batch"], e["request"]), {}).update(
                arrived_at=e["arrived_at"], group=e["group"], stages=e["stages"])
        elif kind == "request_done":
            batches.setdefault(e["batch"], {})
            requests.setdefault((e["batch"], e["request"]), {}).update(
                status=e["status"], reward=e["reward"], outcome=e["outcome"],
                finished_at=e["finished_at"], message=e["message"])
        elif kind == "stage_done":
            stages[(e["batch"], e["request"], e["stage"])] = {
                k: e[k] for k in ("queued_at", "started_at", "finished_at", "status", "worker")}
        else:  # worker_spawned / _placed / _ready / _retired: a life's sequence matters, keep the order
            workers.append(e)

    touched = set(batches) | {b for b, _ in requests} | {b for b, _, _ in stages}
    arrived = {b for (b, _), fields in requests.items() if "arrived_at" in fields}
    if tasks:
        # created_at keeps the first open; a task's pipeline follows its latest batch
        rows = list(tasks.values())
        stmt = _insert(conn, Task)
        conn.execute(stmt.on_conflict_do_update(index_elements=["name"], set_={"pipeline": stmt.excluded.pipeline}), rows)
    if batches:
        _upsert(conn, Batch, ("id",), [{"id": b, **fields} for b, fields in batches.items()])
    if requests:
        _upsert(conn, Request, ("batch_id", "request_id"),
                [{"batch_id": b, "request_id": r, **fields} for (b, r), fields in requests.items()])
    if stages:
        pipelines = _pipelines(conn, {b for b, _, _ in stages}, opened)
        rows: dict[tuple[str, str, str], dict[str, Any]] = {}
        for (b, r, s), fields in stages.items():
            queue = _queue(s, pipelines.get(b))
            rows[(b, r, queue)] = {"batch_id": b, "request_id": r, "stage": queue, **fields}
        _upsert(conn, RequestStage, ("batch_id", "request_id", "stage"), rows.values())
    for e in workers:
        _apply_worker(conn, e)
    if touched:
        _refresh_batches(conn, touched, arrived)


def _apply_worker(conn: Connection, e: dict[str, Any]) -> None:
    """One worker-life event. A name has at most one open life: backends re-announce adopted workers
    (at least once), and a worker's own `worker_ready` may come before its backend's `worker_spawned`."""
    name, at = e["worker"], e["at"]
    table = Worker.__table__
    open_life = conn.execute(
        select(Worker.id, Worker.spawned_at).where(Worker.name == name, Worker.retired_at.is_(None))
        .order_by(Worker.spawned_at.desc()).limit(1)
    ).first()
    if e["kind"] == "worker_spawned":
        # placed at once, unless the backend says it waits for room (then `worker_placed` places it)
        placed = {} if e.get("pending") else {"placed_at": func.coalesce(table.c.placed_at, at)}
        if open_life is not None and at <= open_life.spawned_at + SAME_LIFE_S:
            # the same life announced again (or after its ready): keep the earliest spawn time
            conn.execute(update(table).where(table.c.id == open_life.id).values(
                spawned_at=min(at, open_life.spawned_at), backend=func.coalesce(table.c.backend, e["backend"]),
                **placed))
            return
        if open_life is not None:  # a new life of that name: the old one cannot outlive it
            conn.execute(update(table).where(table.c.id == open_life.id).values(retired_at=at))
        stmt = _insert(conn, Worker).values(name=name, stage=e["stage"], backend=e["backend"], spawned_at=at,
                                            placed_at=None if e.get("pending") else at)
        conn.execute(stmt.on_conflict_do_nothing(index_elements=["name", "spawned_at"]))
        return
    column = {"worker_ready": "ready_at", "worker_placed": "placed_at"}.get(e["kind"], "retired_at")
    if open_life is not None and at >= open_life.spawned_at - SAME_LIFE_S:
        life = open_life.id
    else:  # a late or repeated event of a life already over: the latest one spawned by then
        life = conn.execute(
            select(Worker.id).where(Worker.name == name, Worker.spawned_at <= at + SAME_LIFE_S)
            .order_by(Worker.spawned_at.desc()).limit(1)
        ).scalar()
    if life is None:  # a worker the recorder never saw spawn (started by hand): its life starts here
        stmt = _insert(conn, Worker).values(name=name, stage=e["stage"], spawned_at=at, **{"placed_at": at, column: at})
        conn.execute(stmt.on_conflict_do_update(index_elements=["name", "spawned_at"], set_={column: at}))
    elif column == "ready_at":  # a worker taking requests is on a machine, whatever event was lost
        conn.execute(update(table).where(table.c.id == life).values(
            ready_at=at, placed_at=func.coalesce(table.c.placed_at, at)))
    else:
        conn.execute(update(table).where(table.c.id == life).values({column: at}))


def _refresh_batches(conn: Connection, batch_ids: set[str], arrived: set[str] | None = None) -> None:
    """First arrival of the touched batches, and T and d of those that completed.

    Only what can have changed is computed: T and d of a completed batch whatever was written about it, the
    first arrival of one a request arrived in (`arrived`; None: all of them). The rest keep the values the
    chunk that last wrote an arrival into them gave them, as a full refresh would give them again."""
    ids = sorted(batch_ids)
    for start in range(0, len(ids), 500):
        some = ids[start:start + 500]
        completed = dict(conn.execute(_COMPLETED, {"ids": some}).all())
        done = [b for b in some if completed.get(b) is not None]
        if done:
            _refresh_completed(conn, done, completed)
        open_ = [b for b in some if completed.get(b) is None and (arrived is None or b in arrived)]
        if open_:
            firsts = conn.execute(_FIRST_ARRIVALS, {"ids": open_}).all()
            _update_batches(conn, [{"b_id": b, "first_arrival_at": first, "earliest_at": None, "extra_delay_s": None}
                                   for b, first in firsts])


_COMPLETED = select(Batch.id, Batch.completed_at).where(Batch.id.in_(_IDS))
_FIRST_ARRIVALS = (select(Request.batch_id, func.min(Request.arrived_at))
                   .where(Request.batch_id.in_(_IDS), Request.arrived_at.is_not(None))
                   .group_by(Request.batch_id))
_DURATION = case((RequestStage.finished_at > RequestStage.started_at,
                  RequestStage.finished_at - RequestStage.started_at), else_=0.0)
_PER_REQUEST = (
    select(RequestStage.batch_id, RequestStage.request_id, func.sum(_DURATION).label("s"))
    .where(RequestStage.batch_id.in_(_IDS))
    .group_by(RequestStage.batch_id, RequestStage.request_id)
    .subquery()
)
# T = start + max_i (r_i + sum_j s_ij) = max_i (arrival_i + sum_j s_ij), with the first arrival
_EARLIEST = (
    select(Request.batch_id, func.min(Request.arrived_at),
           func.max(Request.arrived_at + func.coalesce(_PER_REQUEST.c.s, 0.0)))
    .select_from(Request)
    .outerjoin(_PER_REQUEST, and_(_PER_REQUEST.c.batch_id == Request.batch_id,
                                  _PER_REQUEST.c.request_id == Request.request_id))
    .where(Request.batch_id.in_(_IDS), Request.arrived_at.is_not(None))
    .group_by(Request.batch_id)
)
_UPDATE_BATCH = update(Batch.__table__).where(Batch.__table__.c.id == bindparam("b_id")).values(
    first_arrival_at=bindparam("first_arrival_at"),
    earliest_at=bindparam("earliest_at"),
    extra_delay_s=bindparam("extra_delay_s"),
)


def _refresh_completed(conn: Connection, ids: list[str], completed: Mapping[str, float]) -> None:
    """First arrival, T and d = C - T (never below 0) of completed batches."""
    _update_batches(conn, [{"b_id": b, "first_arrival_at": first, "earliest_at": earliest,
                            "extra_delay_s": max(0.0, completed[b] - earliest)}
                           for b, first, earliest in conn.execute(_EARLIEST, {"ids": ids})])


def _update_batches(conn: Connection, updates: list[dict[str, Any]]) -> None:
    if updates:
        conn.execute(_UPDATE_BATCH, updates)
