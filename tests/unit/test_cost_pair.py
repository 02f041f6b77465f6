"""bench/cost_pair.py's pairing and verdict, and bench/redis_commands.py's reading of MONITOR lines."""

from __future__ import annotations

from bench import cost_pair
from bench.redis_commands import parse


def test_each_side_goes_first_in_every_other_round():
    assert [cost_pair.order(k) for k in range(3)] == [("new", "baseline"), ("baseline", "new"), ("new", "baseline")]


def test_the_summary_gives_medians_by_role_the_ratio_and_the_rounds_the_new_side_won():
    rounds = {"new": [{"gateway": 6.0, "redis": 2.0}, {"gateway": 7.0, "redis": 2.0}, {"gateway": 9.0, "redis": 1.0}],
              "baseline": [{"gateway": 8.0, "redis": 2.0}, {"gateway": 8.0, "redis": 2.0}, {"gateway": 8.0, "redis": 2.0}]}
    out = cost_pair.summary(rounds)
    assert out["new"] == {"gateway": 7.0, "redis": 2.0, "all": 9.0}
    assert out["baseline"]["all"] == 10.0
    assert out["ratio"]["gateway"] == 0.875 and out["ratio"]["all"] == 0.9
    assert out["new_lower_in"] == 2  # the third round: 10 against 10 is not lower


def test_a_role_only_one_side_has_gets_no_ratio():
    out = cost_pair.summary({"new": [{"gateway": 1.0, "flower": 0.5}], "baseline": [{"gateway": 1.0}]})
    assert out["new"]["flower"] == 0.5 and "flower" not in out["ratio"]


def test_a_monitor_line_names_its_sender_and_command_and_a_script_shows_as_lua():
    assert parse('1764301234.123456 [0 127.0.0.1:50124] "evalsha" "abc" "0"') == ("127.0.0.1:50124", "EVALSHA")
    assert parse('1764301234.123456 [0 lua] "HGET" "k" "f"') == ("lua", "HGET")
    assert parse('1764301234.123456 [0 unix:/run/redis.sock] "XREAD" "COUNT" "1"') == ("unix:/run/redis.sock", "XREAD")
    assert parse("OK") is None
