"""Every Redis key and channel of one farm namespace, defined once: Python builds them with `Keys`, the Lua
scripts with the names `lua()` generates from the same definitions into every script's prelude
(farm.protocol.scripts), and a tenant's Redis user is granted them by name (farm.app.redis_users). Also how
times travel to the Lua scripts and how text comes back from Redis."""

from __future__ import annotations

import re
import string


def stamp(t: float) -> str:
    """A time as the exact decimal Lua passes through into JSON and scores."""
    return repr(float(t))


def text(value) -> str:
    """A Redis reply as text, whether the client decodes responses or not."""
    return value.decode() if isinstance(value, bytes) else str(value)


class Named:
    """One key (or channel) of a namespace: the namespace, then `suffix`. `Keys(ns).<name>` in Python,
    `K.<name>` in Lua."""

    def __init__(self, suffix: str) -> None:
        self.suffix = suffix

    def __get__(self, keys: "Keys | None", owner: type) -> str:
        return self if keys is None else keys.ns + self.suffix  # type: ignore[return-value]


class Shape:
    """Keys named by values (a batch's id, a stage queue): the namespace, then `pattern` with each {field}
    replaced by its value. Python (`build`) and the generated Lua function (`lua`) follow this one pattern."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.pieces = [(literal, field) for literal, field, _, _ in string.Formatter().parse(pattern)]
        self.fields = tuple(field for _, field in self.pieces if field)
        self._format = "{}" + "".join(literal.replace("{", "{{").replace("}", "}}") + ("{}" if field else "")
                                      for literal, field in self.pieces)
        self._parse = re.compile("".join(re.escape(literal) + ("(.*?)" if field else "")
                                         for literal, field in self.pieces) + r"\Z")

    def build(self, namespace: str, *values: object) -> str:
        return self._format.format(namespace, *values)

    def parse(self, namespace: str, key: str) -> tuple[str, ...] | None:
        """The values a key of this shape was built from (the first field stops at the first text that
        follows it), or None when it is not one."""
        if not key.startswith(namespace):
            return None
        found = self._parse.match(key, len(namespace))
        return found.groups() if found else None

    def lua(self, name: str) -> str:
        body = ["P"]
        for literal, field in self.pieces:
            body += ([_lua_string(literal)] if literal else []) + ([field] if field else [])
        return f"local function {name}({', '.join(self.fields)}) return {' .. '.join(body)} end\n"


class Part:
    """What follows a batch's key (`Keys.batch(id, Part.done)`; `PART.done` in Lua)."""

    head = ""  # hash: the batch itself: task, pipeline, size, state, arrived and done counts, EBF key
    req = ":req"  # hash: request -> its state between stages (farm.protocol.state)
    payload = ":payload"  # hash: request -> its payload's JSON
    res = ":res"  # hash: request -> its result's JSON, stored once
    done = ":done"  # stream: the results as they come, then the end marker (what its trainer reads)
    groups = ":groups"  # hash: group -> its requests arrived
    lease = ":lease"  # hash: request -> the token of the lease a worker holds on it
    att = ":att"  # hash: request -> how many workers it lost


class QueuePart:
    """What follows a stage queue's key (`Keys.queue(q, QueuePart.busy)`; `QPART.busy` in Lua)."""

    ebf = "ebf"  # zset: the stage's batches by EBF key (what the scheduler `ebf` picks from)
    fcfs = "fcfs"  # zset: the stage's batches by the seq of each one's head (the scheduler `fcfs`)
    busy = "busy"  # hash: worker -> what it runs (`busy_record` in common.lua)
    seen = "seen"  # hash: worker -> its last heartbeat: the stage's registry of workers
    leaving = "leaving"  # hash: worker -> when its warm shutdown began: it takes no more requests (fair shares)
    pending = "l:"  # list, then a batch's id: that batch's pending requests here (`pending_entry` in common.lua)
    # list: a batch began to wait here while a share is reserved, for a busy worker to pop (preempt.lua). The part
    # ends in ':', so the glob a tenant's user may push to (`...:n:`) matches no pending list: a batch id holds no
    # ':' past its tenant's prefix
    notice = "n:"


def members(cls: type) -> dict[str, str]:
    """A part class's parts by name (`Part`, `QueuePart`): what the Lua tables and the id grammar are built from."""
    return {name: value for name, value in vars(cls).items() if not name.startswith("_")}


BATCH = Shape(":b:{batch}")  # a batch's keys: this, then a Part
QUEUE = Shape(":q:{queue}:{part}")  # a stage queue's keys; `part` a QueuePart
BROKER = Shape(".{queue}")  # list: the Celery queue (kombu's) a stage queue's wake-up tokens go to
# zset: a tenant's batches the gateway counts as open (its limits), by when each was admitted (a set, `:open`, before)
TENANT_OPEN = Shape(":gw:t{tenant}:opened")
ROLL = Shape(":gw:roll:t{tenant}:{protocol}")  # hash: a tenant's current rolling batch of one protocol
ROLL_SAMPLE = Shape(ROLL.pattern + ":s:{sample}")  # string: the rolling batch a sample joined (its retries find it)
# list: the lease `token` was taken (preempt.lua) or its batch ended early (cancel, abandon): the worker holding it
# waits on this while busy, beats at once, finds so and kills the request's programs (workers.stage)
NOTICE = Shape(":notice:{token}")
STOPPING = Shape(":{backend}:stopping")  # hash: a backend's workers retiring: name -> since (planner.backends)
SHAPES = {"batch_key": BATCH, "queue_key": QUEUE, "broker_key": BROKER, "tenant_open_key": TENANT_OPEN,
          "roll_key": ROLL, "roll_sample_key": ROLL_SAMPLE, "stopping_key": STOPPING,
          "notice_key": NOTICE}  # by their Lua function's name


class Keys:
    """Every Redis key and channel of one farm namespace."""

    batches = Named(":batches")  # zset: the open batches, by open time
    seen = Named(":seen")  # zset: open batches by their trainer's last sign of life (farm.protocol.silence)
    queues = Named(":queues")  # set: the stage queues that had work or workers
    leases = Named(":leases")  # zset: lease tokens by when they lapse
    lease = Named(":lease")  # hash: lease token -> what it holds (`lease_info` in common.lua)
    events = Named(":events")  # stream: the history (farm.events), drained by the recorder
    epochs = Named(":epochs")  # channel: decision epochs, a batch opened or ended (planner.runtime.epochs)
    knobs = Named(":knobs")  # string: the live knobs' JSON (farm.knobs)
    counters = Named(":counters")  # hash: farm.protocol.counters
    tokens = Named(":tokens")  # counter: the ids of the wake-up tokens the scripts publish
    limits = Named(":limits")  # hash: stage queue -> the hard time limit its wake-up tokens carry
    tasks = Named(":tasks")  # hash: task -> its pipeline (a task keeps one)
    seq = Named(":seq")  # counter: the order requests entered stage queues (the scheduler `fcfs`)
    rolls = Named(":gw:rolls")  # set: the gateway's rolling-batch states (ROLL keys)
    planner = Named(":planner")  # string: the planner's heartbeat, with a time to live (farm.protocol.heartbeat)
    ray_lives = Named(":ray:lives")  # hash: the Ray backend's actors: name -> stage, spawned, placed
    shares = Named(":shares")  # hash: tenant label -> its fair share (farm.protocol.shares.FairShare.encode)
    # string: '1' while some tenant's share is reserved (FairShare.reserve; farm.app.fair_shares keeps it): a
    # batch that begins to wait at a stage then leaves a notice there (QueuePart.notice)
    reserving = Named(":reserving")
    held = Named(":held")  # hash: stage queue -> wake-up tokens its picks swallowed, only capped tenants waiting

    def __init__(self, namespace: str) -> None:
        self.ns = namespace

    def batch(self, batch_id: str, part: str = Part.head) -> str:
        return BATCH.build(self.ns, batch_id) + part

    def queue(self, queue: str, what: str) -> str:
        return QUEUE.build(self.ns, queue, what)

    def pending(self, queue: str, batch_id: str) -> str:
        return QUEUE.build(self.ns, queue, QueuePart.pending + batch_id)

    def broker(self, queue: str) -> str:
        return BROKER.build(self.ns, queue)

    def tenant_open(self, tenant_id: int) -> str:
        return TENANT_OPEN.build(self.ns, tenant_id)

    def roll(self, tenant_id: int, protocol: str) -> str:
        return ROLL.build(self.ns, tenant_id, protocol)

    def notice(self, token: str) -> str:
        return NOTICE.build(self.ns, token)

    def stopping(self, backend: str) -> str:
        return STOPPING.build(self.ns, backend)

    def roll_sample(self, tenant_id: int, protocol: str, sample: str) -> str:
        return ROLL_SAMPLE.build(self.ns, tenant_id, protocol, sample)


NAMED = {name: value for name, value in vars(Keys).items() if isinstance(value, Named)}


def _lua_string(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _lua_table(name: str, entries: dict[str, str], prefix: str = "") -> str:
    return f"local {name} = {{{', '.join(f'{k} = {prefix}{_lua_string(v)}' for k, v in entries.items())}}}\n"


def lua() -> str:
    """The keys in Lua, for the prelude every script runs after (P is the namespace)."""
    named = {name: key.suffix for name, key in NAMED.items()}
    return ("-- the keys (farm/protocol/keys.py)\n" + _lua_table("K", named, prefix="P .. ")
            + _lua_table("PART", members(Part)) + _lua_table("QPART", members(QueuePart))
            + "".join(shape.lua(name) for name, shape in SHAPES.items()))


def spellings() -> set[str]:
    """Every piece of text a key is spelled with, for the check that no script spells one by hand."""
    pieces = {key.suffix for key in NAMED.values()} | set(members(Part).values()) | set(members(QueuePart).values())
    pieces |= {literal for shape in SHAPES.values() for literal, _ in shape.pieces if literal}
    return pieces - {""}
