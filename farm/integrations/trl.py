"""Farm rewards for TRL's GRPO trainers (`pip install 'reward-farm[trl]'`).

    reward = FarmReward("gsm8k", "math")                   # the dataset's `answer` column is the reference
    trainer = GRPOTrainer(model, reward_funcs=reward, callbacks=[reward.callback()], ...)

`FarmReward` is an async reward function: TRL runs it on its background event loop once per generation
batch, and it sends the whole batch to the farm as one farm batch. Its callback opens that batch when
the training step that generates it begins (the hint that rollout started), under the id the reward call
will attach to. In `trl.experimental.async_grpo` the same object scores one prompt group per call (one
farm batch with `group_size` = the group) in the rollout worker's spawned process: it pickles without its
connections. Statuses that say nothing about the response become None, which TRL masks.

This module imports neither TRL nor transformers until `callback()` is called.
"""

from __future__ import annotations

import functools
import logging
import os
import uuid
from typing import Any, Callable

from farm.client import AsyncRewardClient, RewardClient
from farm.config import Settings
from farm.errors import BatchConflict
from farm.integrations.mapping import groups_of, payload, reward_or_none, text_of

log = logging.getLogger(__name__)

# what TRL passes besides the dataset's columns; none of it is a row's data
TRL_EXTRAS = ("trainer_state", "log_extra", "log_metric", "environments")


def generation_due(global_step: int, accumulation: int, steps_per_generation: int | None, iterations: int) -> bool:
    """Whether the optimizer step starting at `global_step` generates (TRL generates on the micro-step
    counter's multiples of steps_per_generation * num_iterations and trains on buffered completions between)."""
    every = (steps_per_generation or accumulation) * max(iterations, 1)
    return (global_step * accumulation) % every == 0


def local_generation_size(per_device_batch: int, accumulation: int, steps_per_generation: int | None) -> int:
    """Completions one process scores per generation: its share of TRL's generation batch."""
    return per_device_batch * (steps_per_generation or accumulation)


class FarmReward:
    """An async TRL reward function that scores completions on the farm; one farm batch per call.

    `task` names the farm task (one pipeline per task); `answer_column` is the dataset column holding the
    reference; `payload_fn(response, row) -> payload` replaces the built-in mapping; `timeout` bounds the
    wait for a batch, after which it is cancelled and its missing rewards are None (masked)."""

    def __init__(self, task: str, pipeline: str = "math", *, run: str | None = None, answer_column: str = "answer",
                 payload_fn: Callable[[str, dict[str, Any]], Any] | None = None, timeout: float | None = None,
                 settings: Settings | None = None, name: str = "farm") -> None:
        self.task, self.pipeline = task, pipeline
        self.run = run or f"trl-{uuid.uuid4().hex[:10]}"  # batch ids must not meet an earlier run's
        self.answer_column, self.payload_fn, self.timeout = answer_column, payload_fn, timeout
        self.settings = settings
        self.__name__ = name  # TRL logs `rewards/<name>/mean` under the callable's name
        self.calls = 0  # reward calls made by this process: the generation round the next batch belongs to
        self.hinted: str | None = None
        self._client: AsyncRewardClient | None = None
        self._hint_client: RewardClient | None = None

    def __getstate__(self) -> dict[str, Any]:
        # the async GRPO trainer pickles reward functions into a spawned process: connections stay behind
        return {**self.__dict__, "_client": None, "_hint_client": None}

    def batch_id(self, index: int) -> str:
        """The farm batch of this process's `index`-th reward call; the callback opens the same id."""
        return f"{self.run}.p{os.environ.get('RANK', '0')}.{index}"

    def client(self) -> AsyncRewardClient:
        if self._client is None:
            self._client = AsyncRewardClient(self.settings)
        return self._client

    async def __call__(self, prompts: list[Any], completions: list[Any], completion_ids: Any = None,
                       **columns: Any) -> list[float | None]:
        log_metric = columns.get("log_metric")
        rows = {k: v for k, v in columns.items() if k not in TRL_EXTRAS}
        # the async GRPO trainer calls once per prompt group and passes no trainer state
        per_group = "trainer_state" not in columns
        index, self.calls = self.calls, self.calls + 1
        groups = [0] * len(completions) if per_group else groups_of(prompts)
        requests = [(f"r{i}", self._payload(completion, {k: v[i] for k, v in rows.items()}), groups[i])
                    for i, completion in enumerate(completions)]
        batch = await self._open(index, len(requests), len(requests) if per_group else None)
        async with batch:  # a failure cancels the batch: nothing stays queued behind a dead step
            await batch.submit_many(requests)
            try:
                results = await batch.gather(timeout=self.timeout)
            except TimeoutError as exc:
                log.warning("batch %s: %s; cancelling it, its missing rewards are masked", batch.id, exc)
                await batch.cancel()
                results = await batch.gather()
        rewards = [reward_or_none(r) for r in results]
        if log_metric is not None:
            log_metric("farm/masked", sum(r is None for r in rewards) / max(len(rewards), 1))
        return rewards

    def _payload(self, completion: Any, row: dict[str, Any]) -> Any:
        response = text_of(completion)
        if self.payload_fn is not None:
            return self.payload_fn(response, row)
        return payload(self.pipeline, response, row[self.answer_column])

    async def _open(self, index: int, size: int, group_size: int | None):
        client, batch_id = self.client(), self.batch_id(index)
        try:
            return await client.open_batch(self.task, self.pipeline, size, batch_id, group_size=group_size)
        except BatchConflict:
            hint = await client.progress(batch_id)
            if (hint.task, hint.pipeline, hint.arrived) != (self.task, self.pipeline, 0):
                raise
        # the hint guessed another size (an evaluation, a short last batch): drop it, open the real one
        log.info("batch %s was hinted with size %d, the call has %d; opening %s-%d", batch_id, hint.size, size,
                 batch_id, size)
        await (await client.batch(batch_id)).cancel()
        return await client.open_batch(self.task, self.pipeline, size, f"{batch_id}-{size}", group_size=group_size)

    def hint(self, args: Any, state: Any) -> str | None:
        """Open the batch of the generation the step starting now will run; None when it trains on
        completions already scored. Called by the callback, on the trainer's thread."""
        accumulation = args.gradient_accumulation_steps
        steps_per_generation = getattr(args, "steps_per_generation", None)
        if not generation_due(state.global_step, accumulation, steps_per_generation,
                              getattr(args, "num_iterations", 1)):
            return None
        size = local_generation_size(args.per_device_train_batch_size, accumulation, steps_per_generation)
        if self._hint_client is None:
            self._hint_client = RewardClient(self.settings)
        self.hinted = self._hint_client.open_batch(self.task, self.pipeline, size, self.batch_id(self.calls)).id
        return self.hinted

    def drop_hint(self) -> None:
        """Cancel a hinted batch no reward call came for (training stopped first), so it does not stay open."""
        if self.hinted is None or self._hint_client is None:
            return
        batch = self._hint_client.batch(self.hinted)
        if batch.progress().arrived == 0:
            batch.cancel()
        self._hint_client.close()
        self._hint_client = self.hinted = None

    def callback(self) -> Any:
        """The `transformers.TrainerCallback` that opens each generation's batch as its step begins."""
        return _callback_class()(self)


@functools.cache
def _callback_class() -> type:
    from transformers import TrainerCallback

    class FarmHintCallback(TrainerCallback):
        """Opens the farm batch of the generation a training step is about to run."""

        def __init__(self, reward: FarmReward) -> None:
            self.reward = reward

        def on_step_begin(self, args, state, control, **kwargs):
            self.reward.hint(args, state)

        def on_train_end(self, args, state, control, **kwargs):
            self.reward.drop_hint()

    return FarmHintCallback
