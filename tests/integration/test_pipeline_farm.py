"""The real pipelines through the farm: RewardClient -> Redis -> `farm worker` processes -> sandbox."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import redis

from farm.knobs import Knobs, redis_key
from workers.testcases import HumanEvalStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300),
              pytest.mark.skipif(os.geteuid() != 0, reason="the full sandbox needs root")]

CASE = [{"input": "", "output": "contained"}]
CANARY = {"response": "```python\nprint('contained')\n```", "tests": CASE}
CANARIES = {  # the next request, served by the same worker as the hostile one
    "python": CANARY,
    "cpp": {"response": "```cpp\n#include <cstdio>\nint main() { puts(\"contained\"); }\n```", "tests": CASE},
    "cuda": {"response": "```cuda\n__global__ void k() {}\nint main() { return 0; }\n```", "expected_output": ""},
}


def _python(program: str) -> dict:
    return {"response": f"```python\n{program}\n```", "tests": {"cases": CASE, "time_limit_s": 2}}


def _bomb(language: str) -> dict:
    lines = ["#define L0 x"] + [f"#define L{i} " + " ".join([f"L{i - 1}"] * 10) for i in range(1, 11)]
    source = "\n".join(lines) + "\nint L10;\nint main() {}\n"
    if language == "cuda":
        return {"response": f"```cuda\n{source}\n```", "expected_output": [1]}
    return {"response": f"```cpp\n{source}\n```", "tests": CASE}


@pytest.mark.slow
def test_every_humaneval_canonical_solution_scores_one_through_two_workers(reward_client, start_workers):
    store = HumanEvalStore()
    start_workers("code.fetch_tests")
    start_workers("code.run", 2)
    batch = reward_client.open_batch("humaneval", "code", 164)
    for pid in store.ids():
        batch.submit(pid, {"response": store.raw(pid)["canonical_solution"], "problem": pid})
    results = batch.gather(timeout=240)
    assert {r.request_id: r.message for r in results if r.reward != 1.0} == {}
    runners = {s.worker for r in results for s in r.stages if s.name == "run"}
    assert len(runners) == 2


HOSTILE = [
    ("infinite loop", _python("while True:\n    pass"), "timeout"),
    ("fork bomb", _python("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"), "timeout"),
    ("10 GB allocation", _python("x = bytearray(10 * 1024 ** 3)"), "runtime_error"),
    ("disk filler", _python("i = 0\nwhile True:\n    open(f'f{i}', 'wb').write(b'x' * (8 << 20)); i += 1"), "runtime_error"),
    ("1 GB of stdout", _python("import sys\nfor _ in range(1 << 14):\n    sys.stdout.write('x' * (1 << 16))"), "runtime_error"),
    ("broker connection", _python("import socket\ntry:\n    socket.socket().connect(('127.0.0.1', 6379))\n"
                                  "except OSError:\n    print('contained')"), "ok"),
    ("environment read", _python("import os\nprint('leak' if any('redis://' in v for v in os.environ.values()) else 'contained')"), "ok"),
    ("killing the parent", _python("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill(-1, signal.SIGKILL)"),
     "runtime_error"),
    ("segfault", _python("import ctypes\nctypes.string_at(0)"), "runtime_error"),
    # a compile bomb ends at whichever limit it meets first: the compile timeout or the memory cap
    ("g++ compile bomb", _bomb("cpp"), ("timeout", "compile_error")),
]


def test_hostile_requests_are_contained_and_the_workers_serve_the_next_request(settings, reward_client, start_workers):
    redis.Redis.from_url(settings.redis_url).set(redis_key(settings.namespace), json.dumps(
        Knobs().with_stage("code.compile", timeout_s=3).with_stage("cuda.compile", timeout_s=12).to_dict()))
    queues = ["code.compile", "code.run"] + (["cuda.compile", "cuda.execute"] if shutil.which("nvcc") else [])
    workers = {q: start_workers(q)[0] for q in queues}
    cases = HOSTILE + ([("nvcc compile bomb", _bomb("cuda"), ("timeout", "compile_error"))]
                       if "cuda.compile" in workers else [])
    for name, payload, status in cases:
        pipeline = "cuda" if "expected_output" in payload else "code"
        batch = reward_client.open_batch(f"hostile-{pipeline}", pipeline, 2)
        batch.submit("hostile", payload)
        language = pipeline if pipeline == "cuda" else "cpp" if "```cpp" in payload["response"] else "python"
        batch.submit("canary", CANARIES[language])
        results = {r.request_id: r for r in batch.gather(timeout=60)}
        hostile = results["hostile"]
        assert hostile.status.value in ((status,) if isinstance(status, str) else status), (name, hostile.message)
        if "bomb" in name and "fork" not in name:
            assert hostile.stage == "compile", (name, hostile.message)
        canary = results["canary"]
        assert canary.status.value in ("ok", "infra_error"), (name, canary.message)  # cuda: no GPU to execute on
        assert canary.stages[0].status == "passed" and canary.stages[0].worker == results["hostile"].stages[0].worker, name
    assert all(w.proc.poll() is None for w in workers.values()), "a worker died"
