"""The embedded Redis's memory bound: FARM_REDIS_MAXMEMORY in Redis's own syntax, else a quarter of the machine,
always with the policy that evicts nothing."""

from __future__ import annotations

import pytest

from farm.app.redis_memory import MAXMEMORY_ENV, Memory, config_lines, default_maxmemory, maxmemory


def test_the_bound_is_a_quarter_of_the_machine_and_never_tiny():
    assert default_maxmemory(64 << 30) == 16 << 30
    assert default_maxmemory(512 << 20) == 256 << 20


def test_a_bound_given_in_redis_syntax_is_passed_as_it_is():
    assert maxmemory({MAXMEMORY_ENV: "4gb"}) == "4gb" and maxmemory({MAXMEMORY_ENV: "1048576"}) == "1048576"
    assert int(maxmemory({})) >= 256 << 20


@pytest.mark.parametrize("bad", ["0", "4 gb", "-1", "4tb", "4g b", "lots"])
def test_a_bound_redis_would_not_read_is_refused_naming_the_variable(bad):
    with pytest.raises(ValueError, match=MAXMEMORY_ENV):
        maxmemory({MAXMEMORY_ENV: bad})


def test_the_policy_is_always_noeviction():
    assert config_lines({MAXMEMORY_ENV: "2gb"}) == ["maxmemory 2gb", "maxmemory-policy noeviction"]


def test_the_share_in_use_is_none_without_a_bound():
    assert Memory(800, 1000, "noeviction").share == 0.8 and Memory(800, 0, "noeviction").share is None
