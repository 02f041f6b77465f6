"""`celery flower`, its event receiver waking for the workers' events only: `python -m farm.app.quiet_flower
--broker URL flower ...` takes `celery`'s arguments.

Flower captures the workers' events in a thread of its own (flower.events.Events) with kombu's `consume`, which
drains the connection one second at a time (its `safety_interval`), waking Flower every second for nothing. The
timeout only serves a consumer that can be stopped (kombu's `should_stop`, looked at between drains) or a
transport with heartbeats to check: Flower's thread is never stopped (a daemon, it ends with the process) and the
Redis transport has no heartbeats. An event still ends the wait at once, so here it lasts SAFETY_INTERVAL_S.
"""

from __future__ import annotations

import sys

import flower.events
from celery.events.receiver import EventReceiver

SAFETY_INTERVAL_S = 60.0


class QuietReceiver(EventReceiver):
    """Celery's event receiver, draining SAFETY_INTERVAL_S at a time."""

    def capture(self, limit=None, timeout=None, wakeup=True):
        for _ in self.consume(limit=limit, timeout=timeout, wakeup=wakeup, safety_interval=SAFETY_INTERVAL_S):
            pass


def main() -> None:
    flower.events.EventReceiver = QuietReceiver  # what Events.run captures with
    from celery.__main__ import main as celery_main

    sys.argv[0] = "celery"
    celery_main()


if __name__ == "__main__":
    main()
