"""Stage workers as real processes: crashes stay with their request, carry flows on, the hard time
limit backs up a stage that ignores its timeout, and workers show up in the live state."""

from __future__ import annotations

import json
import os
import time

import farm_test_pipelines  # noqa: F401  (registers the `faulty` pipeline in this process too)
import pytest
import redis
from click.testing import CliRunner

from farm.app.cli.worker import worker
from farm.knobs import Knobs, redis_key
from farm.protocol.dispatch import Dispatch
from tests.support.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

STEP = "faulty.step"
IMPORTS = ("farm_test_pipelines",)


def test_a_stage_that_raises_fails_only_its_request_and_the_worker_serves_on(reward_client, start_workers):
    start_workers(STEP, imports=IMPORTS)
    batch = reward_client.open_batch("t", "faulty", 3)
    batch.submit("crash", {"do": "raise"})
    batch.submit("bad-carry", {"do": "bad_carry"})
    batch.submit("fine", {"do": "ok"})
    results = {r.request_id: r for r in batch.gather(timeout=10)}
    assert results["crash"].status.value == "infra_error" and "the verifier fell over" in results["crash"].message
    assert results["crash"].stage == "step" and results["crash"].stages[0].status == "infra_error"
    assert results["bad-carry"].status.value == "infra_error" and "not JSON" in results["bad-carry"].message
    assert results["fine"].ok


def test_what_a_stage_carries_reaches_the_later_stages_of_its_request(reward_client, start_workers):
    start_workers(STEP, imports=IMPORTS)
    start_workers("faulty.after", imports=IMPORTS)
    batch = reward_client.open_batch("t", "faulty", 1)
    batch.submit("r0", {"do": "ok", "then": True})
    [result] = batch.gather(timeout=10)
    assert result.reward == 2.0 and result.details == {"carry": {"seen_by": "faulty.step-w0"}}
    assert [(s.name, s.worker) for s in result.stages] == [("step", "faulty.step-w0"), ("after", "faulty.after-w1")]


def test_the_hard_time_limit_stops_a_stage_that_ignores_its_timeout(settings, reward_client, start_workers, monkeypatch):
    monkeypatch.setattr("farm.protocol.tokens.HARD_LIMIT_MARGIN_S", 0.5)
    r = redis.Redis.from_url(settings.redis_url)
    r.set(redis_key(settings.namespace), json.dumps(Knobs().with_stage(STEP, timeout_s=0.5).to_dict()))
    start_workers(STEP, imports=IMPORTS)
    batch = reward_client.open_batch("t", "faulty", 2)
    batch.submit("hang", {"do": "hang"})
    batch.submit("after-it", {"do": "ok"})
    results = {r.request_id: r for r in batch.gather(timeout=20)}
    assert results["hang"].status.value == "timeout" and "hard time limit" in results["hang"].message
    assert results["hang"].stages[0].worker == "faulty.step-w0"
    assert results["after-it"].ok  # the replaced pool process serves on


def test_the_live_state_shows_pending_requests_in_order_running_ones_and_workers(settings, reward_client, start_workers):
    [w] = start_workers("synthetic.compile")
    batch = reward_client.open_batch("t", "synthetic", 3)
    for i in range(3):
        batch.submit(f"r{i}", {"times": [5, 0]})
    d = Dispatch(settings)
    deadline = time.monotonic() + 10
    while not (stage := d.inspect().stages["synthetic.compile"]).running:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    state = d.inspect()
    stage = state.stages["synthetic.compile"]
    assert [p.id for p in stage.pending] == ["r1", "r2"]
    assert [(r.id, r.worker) for r in stage.running] == [("r0", w.name)]
    assert [(x.name, x.busy, x.alive) for x in stage.workers] == [(w.name, "r0", True)]
    [b] = state.batches
    assert (b.batch_id, b.size, b.arrived, b.done, b.key) == (batch.id, 3, 3, 0, b.opened_at)
    assert state.stages["synthetic.execute"].pending == () and state.scheduler == "ebf"
    batch.cancel()


def test_an_idle_worker_shows_as_idle(settings, start_workers):
    [w] = start_workers("synthetic.execute")
    d = Dispatch(settings)
    [x] = d.inspect().stages["synthetic.execute"].workers
    assert (x.name, x.idle, x.alive) == (w.name, True, True)
    w.kill()
    d.forget_worker("synthetic.execute", w.name)
    assert d.inspect().stages["synthetic.execute"].workers == ()


def test_a_token_being_served_is_not_copied_into_the_brokers_unacked_hash(settings, reward_client, start_workers):
    start_workers("synthetic.compile")
    batch = reward_client.open_batch("t", "synthetic", 1)
    batch.submit("r0", {"times": [1.5, 0]})
    d = Dispatch(settings)
    deadline = time.monotonic() + 20
    while not d.inspect(["synthetic.compile"]).stages["synthetic.compile"].running:
        assert time.monotonic() < deadline, "r0 never ran"
        time.sleep(0.05)
    ours = settings.queue("synthetic.compile")
    copies = [raw for raw in d.redis.hvals("unacked") if ours in raw]  # kombu's hash is shared by every namespace
    d.close()
    assert copies == []
    [result] = batch.gather(timeout=20)
    assert result.ok


def test_the_worker_command_refuses_an_unknown_stage():
    result = CliRunner().invoke(worker, ["--stage", "synthetic.nope"])
    assert result.exit_code != 0 and "no stage 'nope'" in result.output
    result = CliRunner().invoke(worker, ["--stage", "nope.compile"])
    assert result.exit_code != 0 and "unknown pipeline 'nope'" in result.output


def test_the_worker_command_refuses_an_unknown_log_level():
    result = CliRunner().invoke(worker, ["--stage", "synthetic.compile", "--loglevel", "chatty"])
    assert result.exit_code != 0 and "'chatty' is not a log level" in result.output


def test_a_retired_idle_worker_leaves_within_a_second(settings):
    """SIGTERM wakes the idle event loop, the broker poll (2 s) is cut short (workers.broker_poll) and the
    pool process leaves at once: before, an idle worker took 2.5 s to go (1 s of poll, 1 s of billiard's
    sleep at the pool process's exit, 0.5 s more); the bound leaves room for a loaded machine."""
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from planner.backends.common import worker_env

    farm = Path(sys.executable).with_name("farm")
    env = {**os.environ, **worker_env(settings)}
    proc = subprocess.Popen([str(farm), "worker", "--stage", "synthetic.compile", "--name", "idle"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        import redis

        r = redis.Redis.from_url(settings.redis_url)
        deadline = time.time() + 30
        while not r.hget(f"{settings.namespace}:q:synthetic.compile:seen", "idle") and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        started = time.time()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert time.time() - started < 1.8
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_the_worker_command_takes_its_events_switch_from_the_environment(monkeypatch):
    import farm.app.cli.worker as cli

    seen = []
    monkeypatch.setattr(cli, "serve", lambda stage, name, **kw: seen.append(kw["events"]) or 0)
    monkeypatch.delenv("FARM_WORKER_EVENTS", raising=False)
    CliRunner().invoke(worker, ["--stage", "synthetic.compile"])
    CliRunner().invoke(worker, ["--stage", "synthetic.compile"], env={"FARM_WORKER_EVENTS": "0"})
    CliRunner().invoke(worker, ["--stage", "synthetic.compile", "--events"], env={"FARM_WORKER_EVENTS": "0"})
    assert seen == [True, False, True]


@pytest.mark.skipif(os.geteuid() != 0, reason="the full sandbox needs root")
def test_a_cancelled_batchs_running_program_is_killed_and_its_worker_serves_on_at_once(settings, reward_client,
                                                                                        start_workers):
    [w] = start_workers("run_code.run")
    spinning = reward_client.open_batch("t", "run_code", 1)
    spinning.submit("spin", {"language": "python", "code": "while True: pass", "run_timeout": 60})
    d = Dispatch(settings)
    deadline = time.monotonic() + 20
    while not d.inspect().stages["run_code.run"].running:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    spinning.cancel()
    after = reward_client.open_batch("t", "run_code", 1)
    after.submit("hello", {"language": "python", "code": "print('hello')"})
    [result] = after.gather(timeout=20)  # the spinning program's own limit is 60 s
    assert result.ok and result.stages[0].worker == w.name
    # the heartbeat's thread ends the run and then says so; the worker's own thread may serve `hello` first
    eventually(lambda: "ended 1 sandboxed run(s)" in w.log_tail(), 10, what="the worker saying it ended the run")
