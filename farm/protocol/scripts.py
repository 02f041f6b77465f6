"""The farm's Lua scripts, loaded once, and the arguments every call carries before its own."""

from __future__ import annotations

from importlib import resources

from farm.config import Settings

EVENTS_MAXLEN = 200_000  # approximate cap of the history stream when no recorder drains it
NAMES = ("open", "submit", "pick", "complete", "heartbeat", "sweep", "cancel", "set_estimate", "abandon")


def _load() -> dict[str, str]:
    folder = resources.files("farm.protocol") / "lua"
    common = (folder / "common.lua").read_text()
    return {name: common + "\n" + (folder / f"{name}.lua").read_text() for name in NAMES}


SCRIPTS = _load()


def lua_tokens(settings: Settings) -> bool:
    """Whether the Celery broker is the farm's own Redis: then the scripts publish wake-up tokens in
    the same round trip as the enqueue (atomic, no extra publish); otherwise Python sends them."""
    return not settings.broker_url or settings.broker_url == settings.redis_url
