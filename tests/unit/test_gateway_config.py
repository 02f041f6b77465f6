"""A tenant's protocol configuration is checked before it is used, with messages that say what is wrong."""

from __future__ import annotations

import pytest

from farm.app.gateway.config import protocols, with_replay
from farm.errors import InvalidInput


def test_an_empty_config_gives_the_defaults():
    p = protocols({})
    assert (p.openrlhf.pipeline, p.openrlhf.batch_size, p.sandbox_fusion.wait_s) == ("math", 256, 25.0)


def test_given_keys_override_and_numbers_are_floats_where_meant():
    p = protocols({"openrlhf": {"batch_size": 1024, "rollover_s": 5, "pipeline": "code", "extra": {"reward": "fraction"}}})
    assert (p.openrlhf.batch_size, p.openrlhf.rollover_s, p.openrlhf.pipeline) == (1024, 5.0, "code")
    assert p.openrlhf.rolling.pipeline == "code" and p.openrlhf.extra == {"reward": "fraction"}


@pytest.mark.parametrize("config,needle", [
    ({"nope": {}}, "unknown sections"),
    ({"openrlhf": []}, "must be an object"),
    ({"openrlhf": {"batch": 3}}, "unknown keys"),
    ({"openrlhf": {"batch_size": 0}}, "batch_size"),
    ({"openrlhf": {"batch_size": True}}, "batch_size"),
    ({"openrlhf": {"rollover_s": float("nan")}}, "rollover_s"),
    ({"openrlhf": {"pipeline": ""}}, "pipeline"),
    ({"openrlhf": {"response": "all"}}, "response"),
    ({"sandbox_fusion": {"wait_s": -1}}, "wait_s"),
])
def test_a_bad_config_is_refused_naming_the_key(config, needle):
    with pytest.raises(InvalidInput, match=needle):
        protocols(config)


def test_replay_is_on_by_default_and_a_tenant_may_turn_it_off():
    assert protocols({}).openrlhf.replay_identical and protocols({}).sandbox_fusion.replay_identical
    off = protocols(with_replay({"openrlhf": {"batch_size": 8}}, False))
    assert not off.openrlhf.replay_identical and not off.sandbox_fusion.replay_identical
    assert off.openrlhf.batch_size == 8


def test_replay_takes_only_true_or_false():
    with pytest.raises(InvalidInput, match="replay_identical"):
        protocols({"sandbox_fusion": {"replay_identical": 1}})
