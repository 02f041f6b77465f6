"""The replay stops running requests for a tenant whose share is reserved, as the live farm's preempt.lua does
(farm.protocol.shares.preempted), so `farm eval` and bench/fidelity.py predict what preemption does."""

from __future__ import annotations

import json
import random

from click.testing import CliRunner

from farm.app.cli import main
from farm.app.live_replay.runner import preempted_during
from farm.knobs import Knobs
from farm.protocol.shares import FairShare, parse_shares
from planner.eval import trace as tr
from planner.eval.handlers import HANDLERS
from planner.eval.loop import evaluate
from planner.eval.startup import Startup
from planner.eval.state import FarmState
from planner.eval.trace import Trace, TraceBatch, TraceStage

STAGES = (TraceStage("run", "cpu", 1.0, 100.0),)
RESERVED = {"a": FairShare(reserve=True)}


def behind(b_requests: list[list[float]], a_at: float = 5.0, a_requests: int = 1) -> Trace:
    """B's one batch at 0 (its requests as given); A's batch of 1 s requests opens at `a_at`."""
    return Trace(STAGES, (TraceBatch("b", 0, 0.0, b_requests, tenant="b"),
                          TraceBatch("a", 0, a_at, [[0.0, 1.0]] * a_requests, tenant="a")))


def completed(result, task: str) -> float:
    return float(max(c for c, t in zip(result.completed, result.tasks) if t == task))


def test_a_reserving_tenant_arriving_while_the_other_holds_every_worker_is_served_at_once():
    result = evaluate(behind([[0.0, 10.0]] * 4, a_requests=2), Knobs(policy="static:4"), shares=RESERVED)
    assert completed(result, "a") == 6.0  # two of B's four stopped at 5 s for A's two 1 s requests
    assert result.preempted == (2,)


def test_without_a_reservation_nothing_is_stopped_and_nothing_is_reported():
    result = evaluate(behind([[0.0, 10.0]] * 4, a_requests=2), Knobs(policy="static:4"))
    assert completed(result, "a") == 11.0  # behind the first of B's requests to end
    assert result.preempted is None and "preempted" not in result.summary()


def test_the_stopped_request_goes_back_to_the_head_of_its_batch_and_runs_again_in_full():
    # B's third request (3 s) waits behind its two 10 s ones; A's arrives at 5 s and stops the second
    result = evaluate(behind([[0.0, 10.0], [0.0, 10.0], [0.0, 3.0]]), Knobs(policy="static:2"), shares=RESERVED)
    # at 6 s A's worker takes the stopped request (ahead of the 3 s one queued after it): 6 + 10; the 3 s one
    # runs when the first ends, 10 + 3 (at the tail it would have run first, and B ended at 9 + 10 = 19)
    assert completed(result, "b") == 16.0


def test_the_request_stopped_is_the_one_that_started_last():
    batches = (TraceBatch("b", 0, 0.0, [[0.0, 10.0]], tenant="b"), TraceBatch("b", 1, 3.0, [[0.0, 10.0]], tenant="b"),
               TraceBatch("a", 0, 5.0, [[0.0, 1.0]], tenant="a"))
    result = evaluate(Trace(STAGES, batches), Knobs(policy="static:2"), shares=RESERVED)
    # B's batch 1 (started at 3) is stopped and runs again from 6; batch 0 (started at 0) ends at 10 undisturbed
    assert list(result.completed[:2]) == [10.0, 16.0]


def test_a_tenant_is_never_stopped_below_its_own_share():
    # one worker for two tenants: each is entitled to half of it, so B keeps the one it has
    result = evaluate(behind([[0.0, 10.0]]), Knobs(policy="static:1"), shares=RESERVED)
    assert result.preempted == (0,)
    assert completed(result, "a") == 11.0


def test_the_stopped_requests_busy_time_counts_what_it_served_and_its_run_again_not_its_whole_first_run():
    result = evaluate(behind([[0.0, 10.0], [0.0, 10.0], [0.0, 3.0]]), Knobs(policy="static:2"), shares=RESERVED)
    # 10 + 10 + 3 of B and 1 of A, and the 5 s the stopped request had run
    assert result.busy_s[0] == 29.0


def test_a_batch_that_begins_to_wait_while_no_worker_is_busy_leaves_the_stage_noticed_until_one_is():
    farm = FarmState(behind([[0.0, 10.0]], a_at=0.0), Knobs(policy="static:1"), kind="static", pipeline="trace",
                     startup=Startup.fixed(0.0), startup_rng=random.Random(0), startup_per_start_s=0.0, retire_s=0.0,
                     policy_startup_s=0.0, dispatch_s=0.0, shares=RESERVED)
    while len(farm.events) and farm.events.peek_time() == 0.0:  # the batches open, their requests arrive
        _, kind, event = farm.events.pop()
        HANDLERS[kind](farm, 0.0, event)
    pool = farm.pool(0, "b")
    farm.dispatch(0.0)  # no worker yet: nothing is served and nobody decides
    assert pool.noticed and pool.busy == 0
    pool.idle = 1
    farm.dispatch(0.0)  # the worker serves, and being busy it takes the notice
    assert not pool.noticed and pool.busy == 1


def test_the_report_gives_each_stages_stopped_requests_when_a_share_is_reserved():
    result = evaluate(behind([[0.0, 10.0]] * 4, a_requests=2), Knobs(policy="static:4"), shares=RESERVED)
    assert result.summary()["preempted"] == {"run": 2}


def test_a_reserving_tenant_keeps_its_weight_and_cap_and_one_named_only_as_reserving_has_the_default():
    shares = parse_shares(["a=2"], ["a:cpu=3"], ["a", "b"])
    assert shares == {"a": FairShare(2.0, {"cpu": 3}, True), "b": FairShare(reserve=True)}


def test_the_live_runs_stopped_requests_are_what_the_farms_counters_grew_by_per_stage():
    trace = Trace((TraceStage("compile", "cpu", 1.0, 10.0), TraceStage("execute", "gpu", 8.0, 10.0)), ())
    before, after = {"synthetic.compile": 2}, {"synthetic.compile": 5, "synthetic.execute": 1, "other.x": 9}
    assert preempted_during(trace, "synthetic", before, after) == {"compile": 3, "execute": 1}


def eval_output(tmp_path, *options: str) -> str:
    path = tmp_path / "behind.jsonl"
    tr.write(path, behind([[0.0, 10.0]] * 4, a_requests=2))
    result = CliRunner().invoke(main, ["eval", str(path), "--policy", "static:4", *options])
    assert result.exit_code == 0, result.output
    return result.output


def test_farm_eval_reserve_reserves_the_tenants_share_and_reports_the_stopped_requests(tmp_path):
    out = json.loads(eval_output(tmp_path, "--reserve", "a", "--json"))
    assert out["preempted"] == {"run": 2}
    assert out["tenants"]["a"]["extra_delay_max_s"] == 0.0


def test_farm_eval_without_reserve_prints_no_stopped_requests(tmp_path):
    assert "preempted" not in json.loads(eval_output(tmp_path, "--json"))
    assert "preempted" not in eval_output(tmp_path)


def test_farm_eval_prints_the_stopped_requests_per_stage_in_its_table(tmp_path):
    assert "preempted     run 2" in eval_output(tmp_path, "--reserve", "a")


def test_farm_eval_reserve_keeps_the_share_given_to_the_tenant(tmp_path):
    # A's share 3 of 4 workers: three of B's four requests are stopped for A's three
    path = tmp_path / "three.jsonl"
    tr.write(path, behind([[0.0, 10.0]] * 4, a_requests=3))
    result = CliRunner().invoke(main, ["eval", str(path), "--policy", "static:4", "--share", "a=3", "--reserve", "a",
                                       "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["preempted"] == {"run": 3}
