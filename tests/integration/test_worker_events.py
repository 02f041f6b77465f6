"""A real worker's task events, as Flower receives them: every task's received, started and succeeded arrive, and a
busy worker sends several in one message rather than a PUBLISH each (workers.process.QuietConsumer)."""

from __future__ import annotations

import threading
import time

import farm_test_pipelines  # noqa: F401  (registers the `faulty` pipeline in this process too)
import pytest
from celery.events.receiver import EventReceiver

from farm.celery_app import make_app

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


class CountingReceiver(EventReceiver):
    """Celery's event receiver (Flower's), counting the messages the events came in."""

    messages = 0

    def _receive(self, body, message, **kwargs):
        self.messages += 1
        return super()._receive(body, message, **kwargs)


@pytest.fixture
def receiver(settings):
    app = make_app(settings)
    events: list[dict] = []
    with app.connection_for_read() as connection:
        recv = CountingReceiver(connection, handlers={"*": events.append}, app=app)
        thread = threading.Thread(target=recv.capture, kwargs={"wakeup": True}, daemon=True)
        thread.start()
        yield recv, events
        recv.should_stop = True
        thread.join(timeout=5)


def wait_for(check, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def subscribed(worker, recv, events) -> None:
    """Once the worker answers a wake-up with a heartbeat. The receiver's own wake-up went before the worker was
    up, and its first beat of its own comes EVENT_HEARTBEAT_S after its start, so the wake-up (what Flower sends
    as it starts, a `heartbeat` broadcast) is sent again until the worker answers."""
    deadline = time.monotonic() + 45.0

    def answered() -> bool:
        return any(e["type"] == "worker-heartbeat" and e["hostname"].startswith(worker.name) for e in events)

    while not answered():
        assert time.monotonic() < deadline
        recv.app.control.broadcast("heartbeat")
        for _ in range(20):
            if answered():
                return
            time.sleep(0.1)


def test_a_busy_workers_task_events_all_arrive_several_to_a_message(reward_client, start_workers, receiver):
    [w] = start_workers("faulty.step", events=True, imports=("farm_test_pipelines",))
    recv, events = receiver
    subscribed(w, recv, events)
    for i in range(8):  # one after another: requests that queued up would be served on in fewer tasks
        batch = reward_client.open_batch("t", "faulty", 1)
        batch.submit(f"r{i}", {"do": "ok"})
        assert all(r.ok for r in batch.gather(timeout=20))

    def by_task() -> dict[str, set[str]]:
        seen: dict[str, set[str]] = {}
        for e in list(events):
            if e["type"].startswith("task-"):
                seen.setdefault(e["uuid"], set()).add(e["type"])
        return seen

    wait_for(lambda: len(by_task()) >= 8 and all({"task-received", "task-started", "task-succeeded"} <= kinds
                                                 for kinds in by_task().values()))
    task_events = sum(len(kinds) for kinds in by_task().values())
    other = sum(1 for e in list(events) if not e["type"].startswith("task-"))
    assert recv.messages - other < task_events  # a PUBLISH per event would give as many messages as events


def test_a_busy_worker_serves_the_requests_queued_behind_its_token_in_fewer_tasks(reward_client, start_workers,
                                                                                  receiver):
    [w] = start_workers("faulty.step", events=True, imports=("farm_test_pipelines",))
    recv, events = receiver
    subscribed(w, recv, events)
    batch = reward_client.open_batch("t", "faulty", 8)
    batch.submit_many([(f"r{i}", {"do": "ok"}) for i in range(8)])  # queued at once: one worker, eight tokens
    assert all(r.ok for r in batch.gather(timeout=20))

    def succeeded() -> list[dict]:  # this worker's: another test's workers may share the events' exchange
        return [e for e in list(events) if e["type"] == "task-succeeded" and e["hostname"].startswith(w.name)]

    def served_on() -> int:  # requests served in a task besides the one its token was sent for
        return sum(int(e["result"].split("served on ")[1].split()[0])
                   for e in succeeded() if "served on" in e["result"])

    # every token was taken once: by a task of its own or by a task that served on (the last events may still be
    # on their way once the results are in)
    wait_for(lambda: len(succeeded()) + served_on() >= 8)
    assert served_on() >= 1 and len(succeeded()) + served_on() == 8
