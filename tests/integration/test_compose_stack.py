"""The documented deployment, for real: docker/build-local.sh's images, docker/compose.yaml brought up on
this machine's engine, a trace replayed against it from the host while the planner (docker backend)
spawns and retires worker containers, code judged in the image's sandbox, and the stack taken down as
docker/README.md says, leaving nothing behind.

Needs a Docker engine (docker/ci-engine.sh) and the Debian mirror for the first build of the bases;
skipped without an engine unless FARM_REQUIRE_DOCKER=1 (CI), which makes that a failure."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request

import pytest
from sqlalchemy import create_engine, text

from tests.support.compose_stack import Stack, StackError, StaleNetworkEndpoint, build_images, compose_commands

pytestmark = pytest.mark.timeout(1500)


def _engine_answers() -> bool:
    try:
        return subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True,
                              timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="module")
def images() -> dict[str, str]:
    if not _engine_answers():
        if os.environ.get("FARM_REQUIRE_DOCKER") == "1":
            pytest.fail("FARM_REQUIRE_DOCKER=1 but no Docker engine answers")
        pytest.skip("no Docker engine answers (docker/ci-engine.sh starts one)")
    return build_images()


@pytest.fixture(scope="module", params=["v2", "v1"])
def stack(images, request):
    """The stack under Compose v2, then under docker-compose 1.29: the file is meant for both. Both bring
    it up, replay against it and take it down; what the images do is checked under v2 alone."""
    command = compose_commands().get(request.param)
    if command is None:
        pytest.skip(f"compose {request.param} is not installed here (docker/ci-engine.sh installs both)")
    up = Stack(images, command)
    try:
        up.up()
        yield up
    finally:
        up.force_down()  # after a failure, or a run of some tests only; nothing when the down test ran


def _farm(stack: Stack, *args: str, timeout_s: float = 600.0) -> subprocess.CompletedProcess:
    return subprocess.run(["farm", *args], env=stack.farm_env(), capture_output=True, text=True, timeout=timeout_s)


def test_a_replay_from_the_host_loses_and_duplicates_nothing_while_the_planner_runs_worker_containers(stack):
    # pools this 2-core machine can boot as containers: a cold farm's first decision for the demo's 48-request
    # batches asked for 84 and 48 workers, and booting 130 containers starved every process of the stack for
    # minutes (the planner's own heartbeat lapsed while it started them)
    for queue in ("synthetic.compile", "synthetic.execute"):
        limited = _farm(stack, "knobs", "set", "--stage", queue, "max_workers=6")
        assert limited.returncode == 0, limited.stderr[-2000:]
    done = _farm(stack, "replay", "demo", "--tasks", "1", "--batches", "2", "--json")
    assert done.returncode == 0, done.stderr[-3000:] + "\n" + stack.diagnose()
    results = json.loads(done.stdout)["results"]
    assert results["expected"] > 0
    assert results["received"] == results["expected"]
    assert (results["lost"], results["duplicated"]) == (0, 0)
    assert "infra_error" not in results["statuses"]

    # the planner in the stack ran the pools as containers, and shrinks them again once the batches are done
    engine = create_engine(stack.database_url)
    try:
        deadline = time.monotonic() + 120
        while True:
            with engine.connect() as conn:
                lives = conn.execute(text("select stage, backend, ready_at, retired_at from workers")).all()
            if any(life.retired_at is not None for life in lives) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        engine.dispose()
    assert {life.stage for life in lives} == {"synthetic.compile", "synthetic.execute"}
    assert {life.backend for life in lives} == {"docker"}
    assert any(life.ready_at is not None for life in lives)
    assert any(life.retired_at is not None for life in lives)


@pytest.mark.parametrize("stack", ["v2"], indirect=True)  # the image, not the compose
def test_the_farm_image_judges_python_and_cpp_in_its_sandbox(stack):
    from farm.client import RewardClient

    cases = [{"input": "2 3", "output": "5"}, {"input": "10 -4", "output": "6"}]
    cpp = "```cpp\n#include <iostream>\nint main() { long a, b; std::cin >> a >> b; std::cout << a + b; }\n```"
    python_wrong = "```python\na, b = map(int, input().split())\nprint(a - b)\n```"
    with RewardClient(redis_url=stack.redis_url, namespace=stack.namespace) as client:
        with client.open_batch(task="judge", pipeline="code", size=2) as batch:
            batch.submit("cpp", {"response": cpp, "tests": cases})
            batch.submit("python", {"response": python_wrong, "tests": cases})
            results = {r.request_id: r for r in batch.gather(timeout=300)}
    assert (results["cpp"].status.value, results["cpp"].reward) == ("ok", 1.0)
    assert (results["python"].status.value, results["python"].reward) == ("wrong", 0.0)


@pytest.mark.parametrize("stack", ["v2"], indirect=True)  # the image, not the compose
def test_a_tenant_made_in_the_stack_reaches_its_gateway_and_flower_and_the_metrics_answer(stack):
    made = stack.compose("exec", "-T", "gateway", "farm", "tenants", "create", "trainer-1", "--json")
    token = json.loads(made.stdout)["token"]
    ping = urllib.request.Request(f"http://127.0.0.1:{stack.ports['gateway']}/v1/ping",
                                  headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(ping, timeout=30) as reply:
        assert reply.status == 200
    with urllib.request.urlopen(f"http://127.0.0.1:{stack.ports['flower']}/healthcheck", timeout=30) as reply:
        assert reply.status == 200
    # the recorder's endpoint, as the stack's Prometheus scrapes it
    with urllib.request.urlopen(f"http://127.0.0.1:{stack.ports['metrics']}/metrics", timeout=30) as reply:
        text = reply.read().decode()
    assert "farm_redis_up 1.0" in text and "farm_history_store_up 1.0" in text and "farm_planner_up 1.0" in text


@pytest.mark.parametrize("stack", ["v2"], indirect=True)  # the monitoring files, not the compose
def test_the_stacks_prometheus_scrapes_the_recorder_and_loads_the_farms_alert_rules(stack):
    stack.compose("--profile", "monitoring", "up", "-d", "--no-build", "prometheus")
    api = f"http://127.0.0.1:{stack.ports['prometheus']}/api/v1"

    def read(path: str) -> dict:
        with urllib.request.urlopen(f"{api}/{path}", timeout=10) as reply:
            return json.loads(reply.read())["data"]

    deadline = time.monotonic() + 90
    while True:
        try:
            up = read("query?query=farm_redis_up")["result"]
            if up and up[0]["value"][1] == "1":
                break
        except OSError:  # Prometheus still starting
            pass
        assert time.monotonic() < deadline, stack.compose("logs", "--tail", "30", "prometheus", check=False).stdout
        time.sleep(1)
    [target] = read("targets")["activeTargets"]
    assert (target["labels"]["job"], target["health"]) == ("reward-farm", "up")
    alerts = {r["name"] for g in read("rules")["groups"] for r in g["rules"]}
    assert {"FarmExtraDelayOverD", "FarmRecorderLagging", "FarmHistoryLost", "FarmWorkersPending"} <= alerts


def test_the_local_postgres_image_refuses_a_new_cluster_without_a_password(images):
    done = subprocess.run(["docker", "run", "--rm", images["FARM_POSTGRES_IMAGE"]], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1
    assert "POSTGRES_PASSWORD must be set" in done.stderr


@pytest.mark.parametrize("stack", ["v2"], indirect=True)  # the image, not the compose
def test_redis_in_the_stack_keeps_what_it_was_given_across_a_restart(stack):
    import redis

    client = redis.Redis.from_url(stack.redis_url)
    try:
        client.set(f"{stack.namespace}:probe", "kept")
        time.sleep(1.5)  # the append-only file is synced every second
        stack.compose("restart", "redis")
        deadline = time.monotonic() + 60
        while True:
            try:
                assert client.get(f"{stack.namespace}:probe") == b"kept"
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        client.close()


def test_taking_the_stack_down_leaves_no_containers_networks_or_volumes(stack):
    from farm.client import RewardClient

    # taken down while a pool works: its workers are retired too, the busy one after its request
    with RewardClient(redis_url=stack.redis_url, namespace=stack.namespace) as client:
        batch = client.open_batch(task="last", pipeline="synthetic", size=2)
        batch.submit_many([("a", {"times": [0.1, 3.0]}, None), ("b", {"times": [0.1, 3.0]}, None)])
        deadline = time.monotonic() + 120
        while not stack.worker_containers() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert stack.worker_containers(), "the planner started no worker for the last batch"
    try:
        stack.down()
    except StaleNetworkEndpoint as exc:
        # every container and volume is gone (checked before this is raised); the engine's own bookkeeping
        # keeps the empty network: reported as that engine bug, not passed as a clean down
        pytest.xfail(str(exc))
    except StackError as exc:
        pytest.fail(str(exc))
    assert stack.leftovers() == {"containers": [], "networks": [], "volumes": []}
