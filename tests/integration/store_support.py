"""Helpers shared by the history-store tests: a migrated store on the test's PostgreSQL, and an emitter."""

from __future__ import annotations

import redis

from farm.events import encode, stream_key
from farm.store import engine as store


def migrated_engine(url: str):
    store.upgrade(url)
    return store.make_engine(url)


class Emitter:
    """XADDs history events the way the hot path does, into one namespace's stream."""

    def __init__(self, redis_url: str, namespace: str) -> None:
        self.client = redis.Redis.from_url(redis_url)
        self.key = stream_key(namespace)

    def __call__(self, kind: str, **fields) -> str:
        return self.client.xadd(self.key, encode(kind, **fields)).decode()

    def raw(self, fields: dict) -> str:
        return self.client.xadd(self.key, fields).decode()

    def batch(self, batch: str, task: str, opened_at: float, requests, *, pipeline: str = "synthetic",
              stages=("compile", "execute"), completed_at: float | None = None) -> None:
        """A whole batch: `requests` as rows [r_i, s_i1, ...] relative to opened_at, run back to back."""
        self("batch_opened", batch=batch, task=task, pipeline=pipeline, size=len(requests), opened_at=opened_at)
        for i, (r, *times) in enumerate(requests):
            rid = f"{batch}-r{i}"
            arrived = opened_at + r
            visited = [s for s, t in zip(stages, times) if t > 0]
            self("request_arrived", batch=batch, request=rid, arrived_at=arrived, group=None, stages=visited)
            at = arrived
            for stage, t in zip(stages, times):
                if t <= 0:
                    continue
                self("stage_done", batch=batch, request=rid, stage=f"{pipeline}.{stage}", queued_at=at,
                     started_at=at, finished_at=at + t, status="passed", worker=f"w-{stage}")
                at += t
            self("request_done", batch=batch, request=rid, status="ok", reward=1.0, outcome="success",
                 finished_at=at, message="")
        if completed_at is not None:
            self("batch_completed", batch=batch, completed_at=completed_at)

    def close(self) -> None:
        self.client.close()
