"""verl's own reward loop manager scores samples through `farm.integrations.verl.compute_score` against the
farm's `math.verify` workers; the farm's agent loop manager keys a step's samples into one farm batch.

verl runs in an environment of its own, as a trainer does (`FARM_VERL_PYTHON`, built by scripts/test.sh):
verl pins ANTLR 4.9, under which math workers refuse to judge, so the two never share one. Each test starts
the farm's workers here and asks verl's side (tests/support/verl_reward_loop.py, one process under verl's
interpreter for the module) to score against them.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from farm.client import RewardClient
from tests.integration.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

VERL_SIDE = ROOT / "tests" / "support" / "verl_reward_loop.py"


class VerlSide:
    """verl's side, one process under verl's interpreter for the module: scenarios asked one at a time."""

    def __init__(self, python: str, log: Path) -> None:
        self.log = log
        with open(log, "wb") as err:
            self.proc = subprocess.Popen([python, str(VERL_SIDE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=err, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})

    def __call__(self, settings, scenario: str, **args) -> dict:
        """One scenario against this test's farm; its JSON answer."""
        command = {"scenario": scenario, "redis_url": settings.redis_url, "namespace": settings.namespace, **args}
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            if line.startswith("ANSWER "):
                answer = json.loads(line[len("ANSWER "):])
                assert "error" not in answer, answer["error"]
                return answer["ok"]
        raise AssertionError(f"verl's side exited: {self.log.read_text(errors='replace')[-4000:]}")

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="module")
def verl_side(tmp_path_factory):
    python = os.environ.get("FARM_VERL_PYTHON", "")
    if not python or not Path(python).exists():
        why = f"no verl environment (FARM_VERL_PYTHON={python!r}); `bash scripts/test.sh` builds one"
        if os.environ.get("FARM_REQUIRE_TRAINERS") == "1":
            pytest.fail(f"FARM_REQUIRE_TRAINERS=1 but {why}")
        pytest.skip(why)
    side = VerlSide(python, tmp_path_factory.mktemp("verl") / "verl.log")
    yield side
    side.close()


def test_the_reward_loop_scores_a_steps_samples_in_the_steps_farm_batch(verl_side, settings, start_workers):
    start_workers("math.verify")
    out = verl_side(settings, "step")

    assert [o["reward"] for o in out["outputs"]] == [1.0, 0.0, 0.0, 1.0]
    assert {tuple(sorted(o["extra"])) for o in out["outputs"]} == {("farm_masked", "farm_status", "score")}
    with RewardClient(settings) as client:
        progress = client.batch(out["batch"]).progress()
        groups = {r.request_id: r.group for r in client.batch(out["batch"]).gather(timeout=5)}
    assert (progress.size, progress.done, progress.state) == (4, 4, "completed")
    assert groups == {"r0": "u0", "r1": "u0", "r2": "u1", "r3": "u1"}


def test_without_the_agent_loop_manager_each_sample_is_a_batch_of_its_own(verl_side, settings, start_workers):
    start_workers("math.verify")
    [out] = verl_side(settings, "alone", response="\\boxed{3}")["outputs"]
    assert (out["reward"], out["extra"]["farm_status"], out["extra"]["farm_masked"]) == (1.0, "ok", 0.0)


def test_a_response_without_a_final_answer_scores_zero_unmasked(verl_side, settings, start_workers):
    start_workers("math.verify")
    [out] = verl_side(settings, "alone", response="3")["outputs"]
    assert (out["reward"], out["extra"]["farm_status"], out["extra"]["farm_masked"]) == (0.0, "wrong", 0.0)


def test_a_sample_whose_reward_does_not_come_back_in_time_is_masked(verl_side, settings):
    # no worker serves math.verify
    [out] = verl_side(settings, "alone", response="\\boxed{3}", farm_timeout=0.5)["outputs"]
    assert (out["reward"], out["extra"]["farm_masked"]) == (0.0, 1.0)


def test_a_step_that_generates_twice_gets_two_batches(verl_side, settings):
    first, second = verl_side(settings, "twice")["batches"]
    assert first != second and first.endswith(".step3") and second.endswith(".step3.1")
