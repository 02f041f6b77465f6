"""The farm's Lua scripts and, once for Python and Lua, the names and order of each script's arguments.

Every script is `common.lua` plus its own file, behind a generated prelude: the values every call
carries first (namespace, the history stream's cap, whether the scripts publish wake-up tokens), the
constants both languages share (the token's task prefix, the request-state fields Lua reads, the
counters' fields Lua increments, every key: farm.protocol.keys), and the script's own arguments as Lua
locals named as in its `Script` here. Python builds a call by those same names
(`SUBMIT.call(batch=..., request=...)`), so adding or reordering an argument is one edit here.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any

from farm.config import Settings
from farm.protocol import counters, keys
from farm.protocol.state import GROUP, RECORDS
from farm.protocol.tokens import TASK_PREFIX

EVENTS_MAXLEN = 200_000  # approximate cap of the history stream when no recorder drains it
FIRST_OWN_ARG = 4  # ARGV[1..3] are the namespace, the stream's cap and the token flag


@dataclass(frozen=True)
class Script:
    """One Lua script and its own arguments, in order."""

    name: str
    args: tuple[str, ...]

    def call(self, **values: Any) -> "Call":
        """A call of this script; every argument by name, none missing, none unknown."""
        if len(values) == len(self.args):
            try:
                return Call(self, tuple([values[a] for a in self.args]))
            except KeyError:
                pass
        missing = [a for a in self.args if a not in values]
        unknown = sorted(set(values) - set(self.args))
        raise TypeError(f"script {self.name!r} takes {list(self.args)}; missing {missing}, unknown {unknown}")

    def prelude(self) -> str:
        """The Lua locals that hold this script's arguments."""
        if not self.args:
            return ""
        values = ", ".join(f"ARGV[{FIRST_OWN_ARG + i}]" for i in range(len(self.args)))
        return f"local {', '.join(self.args)} = {values}\n"


@dataclass(frozen=True)
class Call:
    """One script invocation: its arguments in the script's order (the shared ones are added when it runs)."""

    script: Script
    args: tuple[Any, ...]

    def arg(self, name: str) -> Any:
        return self.args[self.script.args.index(name)]


OPEN = Script("open", ("batch", "task", "pipeline", "size", "opened_at", "group_size", "queues", "opened_event",
                       "epoch_message"))
SUBMIT = Script("submit", ("batch", "request", "payload", "state", "first_queue", "at", "result", "arrived_event",
                           "done_event", "group", "limit", "tenant", "most_outstanding"))
# `take_token` '1': a worker serving on takes the picked request's wake-up token from the broker's list itself
# `roster_s`: how long after its last beat a worker counts among the stage's workers (farm.protocol.roster.fresh_s)
PICK = Script("pick", ("queue", "mode", "worker", "lease_s", "token", "reclaim_limit", "max_attempts", "kind",
                       "kind_queues", "take_token", "roster_s"))
COMPLETE = Script("complete", ("batch", "request", "token", "worker", "queue", "at", "stage_event", "next_queue",
                               "state", "result", "done_event", "limit"))
# a busy worker's beat: with a `queue`, also its roster entry (`roster.beat`) in the same round trip
HEARTBEAT = Script("heartbeat", ("token", "lease_s", "batch", "queue", "worker", "at"))
SWEEP = Script("sweep", ("reclaim_limit", "max_attempts", "abandon_after_s", "abandon_limit"))
CANCEL = Script("cancel", ("batch", "at"))
SEAL = Script("seal", ("batch", "at"))
SET_ESTIMATE = Script("set_estimate", ("batch", "key", "deadline_event"))
ABANDON = Script("abandon", ("worker", "queue", "at", "status", "message"))
TOUCH = Script("touch", ("batches",))  # a trainer's sign of life for its batches (farm.protocol.silence)
LAPSE = Script("lapse", ("worker", "queue"))  # a worker seen dead: its lease lapses now (planner.backends)
# a busy worker that popped its stage's notice: stop requests a reserving tenant's share takes back (shares.preempted)
PREEMPT = Script("preempt", ("queue", "kind", "kind_queues", "roster_s"))
# many submits in one call: `count`, then each request's SUBMIT arguments in turn (see _submit_many)
SUBMIT_MANY = Script("submit_many", ("count",))
# the gateway's (farm.app.gateway): a tenant's limits, and its rolling batches of one sample per call
ADMIT_BATCH = Script("admit_batch", ("tenant", "batch", "limit"))
OUTSTANDING = Script("outstanding", ("tenant",))
ROLL_JOIN = Script("roll_join", ("tenant", "protocol", "sample", "at", "size", "rollover", "ttl", "epoch", "request",
                                 "stale", "most_outstanding"))
ROLL_LEAVE = Script("roll_leave", ("tenant", "protocol", "sample", "epoch", "index"))
ROLL_IDLE = Script("roll_idle", ("tenant", "protocol", "at"))
ROLL_PAST = Script("roll_past", ("tenant", "protocol", "epoch", "index"))
ALL = (OPEN, SUBMIT, PICK, COMPLETE, HEARTBEAT, SWEEP, CANCEL, SEAL, SET_ESTIMATE, ABANDON, TOUCH, LAPSE, PREEMPT,
       ADMIT_BATCH, OUTSTANDING, ROLL_JOIN, ROLL_LEAVE, ROLL_IDLE, ROLL_PAST)

_SHARED = f"""-- Generated by farm/protocol/scripts.py: the values every call carries, and constants Python shares.
local P, CAP, LUA_TOKENS = ARGV[1], ARGV[2], ARGV[3] == '1'
local TASK_PREFIX = '{TASK_PREFIX}'
local STATE_GROUP, STATE_RECORDS = '{GROUP}', '{RECORDS}'
local COUNT_LEASE_RECOVERED, COUNT_PREEMPTED = '{counters.LEASE_RECOVERED}', '{counters.PREEMPTED}'
{keys.lua()}"""


BULK_MAX = 2000  # submits one SUBMIT_MANY run takes together; past it they go one at a time (Lua's unpack limit)


def _submit_many(common: str, submit: str, many: str) -> str:
    """SUBMIT_MANY: submit.lua's body as a function of SUBMIT's arguments (`submit_one`), and submit_many.lua,
    which answers each request exactly as that function would in turn, one round trip and one run for all."""
    indices = ", ".join(f"A_{a.upper()}" for a in SUBMIT.args)
    return (_SHARED + common + "\n" + SUBMIT_MANY.prelude()
            + f"local function submit_one({', '.join(SUBMIT.args)})\n{submit}\nend\n"
            + f"local ARITY, FIRST, BULK_MAX = {len(SUBMIT.args)}, {FIRST_OWN_ARG + 1}, {BULK_MAX}\n"
            + f"local {indices} = {', '.join(str(i) for i in range(len(SUBMIT.args)))}\n"
            + many)


def _load() -> dict[str, str]:
    folder = resources.files("farm.protocol") / "lua"
    common = (folder / "common.lua").read_text()
    sources = {s.name: _SHARED + common + "\n" + s.prelude() + (folder / f"{s.name}.lua").read_text() for s in ALL}
    sources[SUBMIT_MANY.name] = _submit_many(common, (folder / "submit.lua").read_text(),
                                             (folder / "submit_many.lua").read_text())
    return sources


SOURCES = _load()


def argv(namespace: str, lua_tokens: bool, call: Call) -> list[Any]:
    """The full argument list of a call: the shared values, then the script's own."""
    return [namespace, EVENTS_MAXLEN, "1" if lua_tokens else "0", *call.args]


def run(registered: Any, namespace: str, call: Call, client: Any = None, lua_tokens: bool = False) -> Any:
    """Run a call on its script as registered on a redis-py client (`register_script(SOURCES[name])`), on
    `client` (a connection or a pipeline) when given: a coroutine to await on an asyncio client."""
    return registered(args=argv(namespace, lua_tokens, call), client=client)


def pipelined(registered: Any, namespace: str, call: Call, pipe: Any, lua_tokens: bool = False) -> None:
    """Queue a call's EVALSHA on a pipeline. Not `run(..., client=pipe)`: redis-py then asks SCRIPT EXISTS before
    every execution of the pipeline, a second round trip each time. A Redis without the script (its first use, or a
    restart since) fails the pipeline with NoScriptError: the caller loads `registered.script` and sends it again."""
    pipe.evalsha(registered.sha, 0, *argv(namespace, lua_tokens, call))


def lua_tokens(settings: Settings) -> bool:
    """Whether the Celery broker is the farm's own Redis: then the scripts publish wake-up tokens in
    the same round trip as the enqueue (atomic, no extra publish); otherwise Python sends them."""
    return not settings.broker_url or settings.broker_url == settings.redis_url
