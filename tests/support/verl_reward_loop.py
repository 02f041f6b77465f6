"""verl's side of the verl adapter's tests, run by the interpreter of verl's own environment (verl pins an
ANTLR runtime under which the farm's math workers refuse to judge, so it never shares the farm's).

    python tests/support/verl_reward_loop.py < commands

reads one JSON command per line (`scenario`, the farm's `redis_url` and `namespace`, and the scenario's
arguments), answers each with one line, `ANSWER` and JSON (verl may print too), so that one process (verl takes seconds to import) serves a
module of tests. Drives verl's own reward loop manager (`load_reward_manager`, `run_single` on its event loop, as verl's reward
loop worker does) with `farm.integrations.verl.compute_score` loaded by path, and the farm's agent loop
manager. verl's rollout itself needs inference servers: not run.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import traceback

os.environ["HF_HUB_OFFLINE"] = "1"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.ppo.reward import load_reward_manager  # noqa: E402

from farm.integrations.verl_manager import FarmAgentLoopManager  # noqa: E402
from tests.support.char_tokenizer import char_tokenizer  # noqa: E402

PROBLEMS = [("1+2=", "3"), ("2+2=", "4")]


FARM: dict[str, str] = {}  # the current command's farm


def verl_config(**farm):
    return OmegaConf.create({
        "reward": {
            "custom_reward_function": {"path": "pkg://farm.integrations.verl", "name": "compute_score",
                                       "reward_kwargs": {"farm_task": "verl-math", "farm_pipeline": "math",
                                                         "farm_redis_url": FARM["redis_url"],
                                                         "farm_namespace": FARM["namespace"], **farm}},
            "reward_manager": {"source": "register", "name": "naive"},
        },
        "actor_rollout_ref": {"rollout": {"agent": {"num_workers": 1}}, "model": {}},
    })


def step_rows(n: int) -> DataProto:
    """A training step's rows as the trainer hands them to the agent loop manager: repeated n times."""
    rows = DataProto.from_dict(non_tensors={
        "data_source": np.array(["arith"] * len(PROBLEMS), dtype=object),
        "reward_model": np.array([{"ground_truth": a} for _, a in PROBLEMS], dtype=object),
        "extra_info": np.array([{"index": i} for i in range(len(PROBLEMS))], dtype=object),
        "uid": np.array([f"u{i}" for i in range(len(PROBLEMS))], dtype=object),
    }, meta_info={"global_steps": 3})
    return rows.repeat(repeat_times=n, interleave=True)


def trajectory(tok, row: dict, prompt: str, response: str) -> DataProto:
    """One finished trajectory as verl's agent loop worker sends it to the reward loop."""
    prompt_ids, response_ids = tok(prompt)["input_ids"], tok(response)["input_ids"]
    ids = torch.tensor([prompt_ids + response_ids])
    return DataProto(batch=TensorDict({"prompts": torch.tensor([prompt_ids]), "responses": torch.tensor([response_ids]),
                                       "attention_mask": torch.ones_like(ids), "input_ids": ids}, batch_size=1),
                     non_tensor_batch={k: np.array([v], dtype=object) for k, v in row.items()})


def score(manager, samples) -> list[dict]:
    """The samples scored concurrently on the manager's own event loop, as verl's reward loop worker does."""
    async def all_of():
        return await asyncio.gather(*(manager.run_single(s) for s in samples))
    return [{"reward": o["reward_score"], "extra": o["reward_extra_info"]} for o in manager.loop.run_until_complete(all_of())]


def one_step() -> dict:
    """A step's four samples (two prompts, n=2) keyed into the step's farm batch by the agent loop manager."""
    config, tok = verl_config(), char_tokenizer()
    reward_manager = load_reward_manager(config, tok)
    rows = step_rows(n=2)
    batch_id = asyncio.run(FarmAgentLoopManager(config, None).open_step(rows))
    responses = ["\\boxed{3}", "\\boxed{4}", "\\boxed{5}", "\\boxed{4}"]  # rows: p0, p0, p1, p1
    samples = [trajectory(tok, {k: v[i] for k, v in rows.non_tensor_batch.items()}, PROBLEMS[i // 2][0], response)
               for i, response in enumerate(responses)]
    return {"batch": batch_id, "outputs": score(reward_manager, samples)}


def alone(response: str, **farm) -> dict:
    """One sample with no agent loop manager in front: a farm batch of its own."""
    tok = char_tokenizer()
    reward_manager = load_reward_manager(verl_config(**farm), tok)
    row = {"data_source": "arith", "reward_model": {"ground_truth": "3"}, "extra_info": {"index": 0}}
    return {"outputs": score(reward_manager, [trajectory(tok, row, "1+2=", response)])}


def generates_twice() -> dict:
    """DAPO-style dynamic sampling: one step calls generate_sequences twice."""
    agent_loops = FarmAgentLoopManager(verl_config(), None)
    return {"batches": [asyncio.run(agent_loops.open_step(step_rows(n=2))) for _ in range(2)]}


SCENARIOS = {"step": one_step, "alone": alone, "twice": generates_twice}


def serve() -> None:
    for line in sys.stdin:
        command = json.loads(line)
        FARM.update(redis_url=command.pop("redis_url"), namespace=command.pop("namespace"))
        try:
            answer = {"ok": SCENARIOS[command.pop("scenario")](**command)}
        except Exception:
            answer = {"error": traceback.format_exc()}
        print("ANSWER", json.dumps(answer), flush=True)


if __name__ == "__main__":
    serve()
