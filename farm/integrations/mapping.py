"""From a trainer's rows to farm payloads, and from farm results back to what each trainer accepts.

Pure functions with no I/O and no trainer import, so every adapter maps the same way and the mapping is
unit-tested without a trainer installed.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping, Sequence

from farm.results import Result, Status


def text_of(completion: Any) -> str:
    """A completion as text: TRL hands conversational data over as message lists, whose assistant turn
    is the response; plain data as a string."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence) and completion and isinstance(completion[-1], Mapping):
        return str(completion[-1].get("content", ""))
    return str(completion)


def payload(pipeline: str, response: str, reference: Any) -> dict[str, Any]:
    """The payload of a built-in pipeline from a response and the row's reference (its ground truth)."""
    if pipeline == "math":
        return {"response": response, "answer": str(reference)}
    if pipeline == "code":
        if isinstance(reference, str) and reference.lstrip().startswith(("[", "{")):
            reference = json.loads(reference)  # verl and HF datasets often keep test cases as a JSON string
        if isinstance(reference, str):
            return {"response": response, "problem": reference}  # a problem id the workers' store knows
        return {"response": response, "tests": reference}
    if pipeline == "cuda":
        return {"response": response, "expected_output": reference}
    raise ValueError(f"no payload mapping for pipeline {pipeline!r}: pass payload_fn=(response, row) -> payload")


def reward_or_none(result: Result) -> float | None:
    """TRL's reward for a result: None where the status says nothing about the response (infra error,
    cancelled, invalid input), which TRL leaves out of the group's statistics with advantage 0."""
    return None if result.status.is_maskable else float(result.reward)


def verl_score(result: Result) -> dict[str, Any]:
    """verl's dict for a result: the same keys for every sample (verl stacks them into arrays). verl has no
    None, so a maskable status scores 0 and says so in `farm_masked` for a reward manager to act on."""
    masked = result.status.is_maskable
    return {"score": 0.0 if masked else float(result.reward), "farm_status": result.status.value,
            "farm_masked": 1.0 if masked else 0.0}


def missing_score(message: str) -> dict[str, Any]:
    """verl's dict for a sample whose result never came (the adapter gave up waiting): masked."""
    return verl_score(Result("", "", Status.CANCELLED, message=message))


def groups_of(prompts: Iterable[Any]) -> list[int]:
    """GRPO groups of one call: TRL repeats each prompt `num_generations` times in a row, so each run of
    equal prompts is one group (a group split across processes is one smaller group on each)."""
    groups: list[int] = []
    previous: Any = object()
    for prompt in prompts:
        if groups and prompt == previous:
            groups.append(groups[-1])
        else:
            groups.append(groups[-1] + 1 if groups else 0)
        previous = prompt
    return groups
