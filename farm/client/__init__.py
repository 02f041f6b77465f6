"""The trainer's client: open a batch (the hint that rollout started), submit requests as responses
finish, and collect rewards as they come back. `RewardClient` blocks, `AsyncRewardClient` is for asyncio
trainers; both are thin I/O shells around the same protocol calls.

    with RewardClient() as farm:
        batch = farm.open_batch("cuda-0", "synthetic", size=64)
        for i, response in enumerate(responses):
            batch.submit(f"r{i}", {"times": [1.0, 0.5]}, group=i // 8)
        results = batch.gather(timeout=600)
"""

from farm.client.aio import AsyncBatch, AsyncRewardClient
from farm.client.sync import Batch, RewardClient

__all__ = ["AsyncBatch", "AsyncRewardClient", "Batch", "RewardClient"]
