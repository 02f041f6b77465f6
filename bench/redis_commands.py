"""The Redis commands a farm's clients send while an action runs, by name (bench/cost_pair.py --commands): read from
MONITOR on a connection of its own. A script's own commands are not counted (MONITOR shows them as the script's,
from "lua"): a script run is one command, one round trip, as its caller pays it."""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from typing import Callable

import redis

_LINE = re.compile(r'^\d+\.\d+ \[\d+ (\S+)\] "([^"]+)"')


def parse(line: str) -> tuple[str, str] | None:
    """(who sent it: an address, or "lua", the command's name in upper case) of one MONITOR line; None otherwise."""
    found = _LINE.match(line)
    return (found.group(1), found.group(2).upper()) if found else None


def counted_commands(farm, action: Callable[[], None]) -> Counter:
    """The commands the farm's clients sent while `action` ran (the MONITOR connection's own excepted)."""
    url = json.loads((farm.data / "endpoint.json").read_text())["redis_url"]
    client = redis.Redis.from_url(url, decode_responses=True)
    conn = client.connection_pool.get_connection()
    sent: Counter = Counter()
    stop = threading.Event()
    reader = None
    try:
        conn.send_command("MONITOR")
        conn.read_response()

        def follow() -> None:
            while not stop.is_set():
                try:
                    line = conn.read_response()
                except (redis.ConnectionError, OSError, ValueError):
                    return  # the connection closed under it: the window is over
                found = parse(line if isinstance(line, str) else str(line))
                if found is not None and found[0] != "lua":
                    sent[found[1]] += 1

        reader = threading.Thread(target=follow, daemon=True)
        reader.start()
        action()
        stop.set()
    finally:
        conn.disconnect()
        client.close()
    if reader is not None:
        reader.join(timeout=5)
    return sent
