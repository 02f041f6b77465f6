"""TRL's real GRPOTrainer trains on farm rewards: a tiny random model built here, math prompts, `math.verify`
workers, nothing downloaded (HF_HUB_OFFLINE=1)."""

from __future__ import annotations

import asyncio
import os
import pickle

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
if os.environ.get("FARM_REQUIRE_TRAINERS") != "1":  # CI installs them (scripts/test.sh): missing is a failure there
    pytest.importorskip("torch")
    pytest.importorskip("trl")
import torch  # noqa: E402
import trl  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM, TrainerState  # noqa: E402

from farm.client import RewardClient  # noqa: E402
from farm.integrations.trl import FarmReward  # noqa: E402
from tests.support.char_tokenizer import char_tokenizer  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PROMPTS = [(f"{a}+{b}=", str(a + b)) for a, b in [(1, 2), (2, 2), (3, 1), (2, 5), (4, 4), (1, 1), (3, 3), (0, 7)]]


def warmed_up_model(tok: PreTrainedTokenizerFast) -> Qwen2ForCausalLM:
    """A tiny random Qwen2, taught in a few supervised steps to answer `\\boxed{n}`: a random model never
    writes a final answer, and the farm's verify stage only runs for responses that do."""
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id))
    texts = [f"{p}\\boxed{{{a}}}<eos>" for p, a in PROMPTS]
    batch = tok(texts, return_tensors="pt", padding=True)
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(60):
        loss = model(**batch, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model


def grpo_config(tmp_path, **overrides) -> trl.GRPOConfig:
    return trl.GRPOConfig(**{**dict(
        output_dir=str(tmp_path / "grpo"), per_device_train_batch_size=8, num_generations=4, max_completion_length=10,
        max_steps=2, learning_rate=1e-4, logging_steps=1, use_cpu=True, bf16=False, report_to="none",
        save_strategy="no", disable_tqdm=True, seed=0), **overrides})


def test_a_grpo_trainer_trains_two_steps_on_farm_rewards(settings, start_workers, tmp_path):
    start_workers("math.verify")
    tok = char_tokenizer()
    reward = FarmReward("trl-math", "math", settings=settings, timeout=60)
    dataset = Dataset.from_dict({"prompt": [p for p, _ in PROMPTS], "answer": [a for _, a in PROMPTS]})
    trainer = trl.GRPOTrainer(model=warmed_up_model(tok), reward_funcs=reward, args=grpo_config(tmp_path),
                              train_dataset=dataset, processing_class=tok, callbacks=[reward.callback()])
    trainer.train()

    logged = [entry for entry in trainer.state.log_history if "rewards/farm/mean" in entry]
    assert len(logged) == 2 and all(0.0 <= entry["reward"] <= 1.0 for entry in logged)
    with RewardClient(settings) as client:
        batches = [client.batch(reward.batch_id(i)).progress() for i in range(2)]
        results = [r for i in range(2) for r in client.batch(reward.batch_id(i)).gather(timeout=5)]
    assert [(b.size, b.done, b.state) for b in batches] == [(8, 8, "completed")] * 2
    assert any(s.name == "verify" for r in results for s in r.stages), "no response reached the verify stage"


def test_the_callback_opens_the_batch_the_next_reward_call_attaches_to(settings, start_workers, tmp_path):
    start_workers("math.verify")
    reward = FarmReward("trl-hint", "math", settings=settings)
    hinted = reward.hint(grpo_config(tmp_path), TrainerState(global_step=0))
    with RewardClient(settings) as client:
        assert (client.batch(hinted).progress().size, client.batch(hinted).progress().arrived) == (8, 0)
        prompts, answers = zip(*PROMPTS)
        rewards = asyncio.run(reward(list(prompts), [f"\\boxed{{{a}}}" for a in answers], answer=list(answers),
                                     trainer_state=TrainerState()))
        assert rewards == [1.0] * 8 and client.batch(hinted).progress().state == "completed"


def test_a_step_that_trains_on_buffered_completions_opens_no_batch(settings, tmp_path):
    reward = FarmReward("trl-hint", "math", settings=settings)
    config = grpo_config(tmp_path, gradient_accumulation_steps=2, steps_per_generation=2, num_iterations=2)
    assert reward.hint(config, TrainerState(global_step=1)) is None
    assert reward.hint(config, TrainerState(global_step=2)) == reward.batch_id(0)


def test_an_infra_error_reward_is_none_so_trl_masks_it(settings):
    # no worker serves math.verify and the batch times out: its cancelled requests say nothing of the responses
    reward = FarmReward("trl-masked", "math", settings=settings, timeout=0.5)
    rewards = asyncio.run(reward(["1+1="] * 2, ["\\boxed{2}", "no answer"], answer=["2", "2"],
                                 trainer_state=TrainerState()))
    assert rewards == [None, 0.0]


def test_the_async_grpo_trainer_scores_a_pickled_reward_one_group_per_batch(settings, start_workers):
    start_workers("math.verify")
    reward = pickle.loads(pickle.dumps(FarmReward("trl-async", "math", settings=settings)))
    # trl.experimental.async_grpo calls it once per finished prompt group, with no trainer state
    rewards = asyncio.run(reward(["2+2="] * 4, ["\\boxed{4}", "\\boxed{5}", "\\boxed{4}", "4"], answer=["4"] * 4))
    assert rewards == [1.0, 0.0, 1.0, 0.0]
    with RewardClient(settings) as client:
        assert client.batch(reward.batch_id(0)).group_size == 4
