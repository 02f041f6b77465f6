"""Which batches' reads a gateway's result hub keeps once no one waits on them."""

from __future__ import annotations

from farm.app.gateway import hub as hub_module
from farm.app.gateway.hub import ResultHub, _Watch


def idle_since(*times: float | None) -> ResultHub:
    """Batches b0, b1, ... whose last caller left at these times (None: still followed)."""
    hub = ResultHub(client=None, bell=None)
    for n, _ in enumerate(times):
        hub._watches[f"b{n}"] = _Watch()
    # the hub notes batches as they go idle, so in the order of their times
    for since, n in sorted((since, n) for n, since in enumerate(times) if since is not None):
        hub._idle[f"b{n}"] = since
    return hub


def test_reads_no_one_waited_on_for_the_linger_are_forgotten():
    hub = idle_since(0.0, 50.0, None)

    hub._forget_idle(hub_module.LINGER_S + 10.0)

    assert sorted(hub._watches) == ["b1", "b2"]


def test_past_the_most_kept_the_longest_idle_go_first_and_followed_batches_stay(monkeypatch):
    monkeypatch.setattr(hub_module, "LINGER_MAX", 2)
    hub = idle_since(3.0, 1.0, None, 2.0, 4.0)

    hub._forget_idle(5.0)

    assert sorted(hub._watches) == ["b0", "b2", "b4"]  # b1, b3 idle longest; b2 is followed: never forgotten
