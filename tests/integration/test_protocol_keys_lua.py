"""The Lua scripts build every key exactly as Python does (real Redis runs the generated prelude)."""

from __future__ import annotations

import pytest
import redis

from farm.protocol import keys
from farm.protocol.keys import NAMED, Keys, Part, QueuePart

pytestmark = pytest.mark.integration


def test_the_scripts_build_every_key_as_python_does(redis_url, namespace):
    k = Keys(namespace)
    pairs = [(f"K.{name}", getattr(k, name)) for name in NAMED]
    pairs += [(f"batch_key('b1') .. PART.{name}", k.batch("b1", part)) for name, part in vars(Part).items()
              if not name.startswith("_")]
    pairs += [(f"queue_key('p.s', QPART.{name})", k.queue("p.s", part)) for name, part in vars(QueuePart).items()
              if not name.startswith("_") and name != "pending"]
    pairs += [("queue_key('p.s', QPART.pending .. 'b1')", k.pending("p.s", "b1")),
              ("broker_key('p.s')", k.broker("p.s")), ("tenant_open_key(7)", k.tenant_open(7)),
              ("roll_key(7, 'openrlhf')", k.roll(7, "openrlhf")),
              ("roll_sample_key(7, 'openrlhf', 'abc')", k.roll_sample(7, "openrlhf", "abc"))]
    script = "local P = ARGV[1]\n" + keys.lua() + "return {" + ", ".join(lua for lua, _ in pairs) + "}"
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        assert r.eval(script, 0, namespace) == [python for _, python in pairs]
    finally:
        r.close()
