"""verl's agent loop manager with a farm batch per step (`pip install 'reward-farm[verl]'`).

    actor_rollout_ref.rollout.agent.agent_loop_manager_class=farm.integrations.verl_manager.FarmAgentLoopManager

The manager is the one place in verl that sees a step whole: `meta_info["global_steps"]`, `["validate"]`
and every row, already repeated `rollout.n` times, with its group id `uid`. As rollout starts it opens the
step's farm batch (the hint, sized to the step) and writes the batch into each row's `extra_info`, so that
`farm.integrations.verl.compute_score` submits every sample of the step to it. Farm settings come from
`reward.custom_reward_function.reward_kwargs` (`farm_task`, `farm_pipeline`, `farm_redis_url`,
`farm_namespace`), as `compute_score` reads them.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import numpy as np
from verl import DataProto
from verl.experimental.agent_loop import AgentLoopManager
from verl.utils.ray_utils import auto_await

from farm.integrations.verl import farm_client, step_batch_id, tag_rows


class FarmAgentLoopManager(AgentLoopManager):
    """`AgentLoopManager` that opens each step's farm batch before the step's rollout starts."""

    def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        reward_kwargs = dict(config.reward.custom_reward_function.get("reward_kwargs") or {})
        self.farm_task = reward_kwargs.get("farm_task", "verl")
        self.farm_pipeline = reward_kwargs.get("farm_pipeline", "math")
        self.farm_client = farm_client(reward_kwargs.get("farm_redis_url"), reward_kwargs.get("farm_namespace"))
        self.farm_run = f"verl-{uuid.uuid4().hex[:10]}"  # batch ids must not meet an earlier run's
        self.farm_calls: Counter = Counter()

    async def open_step(self, prompts: DataProto) -> str:
        """Open the farm batch of this call's rows and tag each row with it; returns the batch id."""
        step, validate = prompts.meta_info.get("global_steps", -1), bool(prompts.meta_info.get("validate", False))
        ordinal = self.farm_calls[(step, validate)]
        self.farm_calls[(step, validate)] += 1
        batch_id = step_batch_id(self.farm_run, step, validate, ordinal)
        await self.farm_client.open_batch(self.farm_task, self.farm_pipeline, len(prompts), batch_id)
        rows = prompts.non_tensor_batch
        tagged = np.empty(len(prompts), dtype=object)
        tagged[:] = tag_rows(rows.get("extra_info"), batch_id, rows.get("uid"), len(prompts))
        rows["extra_info"] = tagged
        return batch_id

    @auto_await
    async def generate_sequences(self, prompts: DataProto) -> DataProto:
        await self.open_step(prompts)
        return await super().generate_sequences(prompts)
