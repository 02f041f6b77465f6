"""Hostile programs, each through the pipelines' stage code (workers.runner.score, as a worker runs it):
each is contained, nothing is left behind, and the same process serves the next request."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from farm.knobs import Knobs
from farm.results import Status
from workers import sandbox
from workers.pipelines import code
from workers.runner import score
from workers.sandbox import prepared, remains, uids, verifier, warm

pytestmark = [pytest.mark.timeout(60), pytest.mark.skipif(os.geteuid() != 0, reason="the full sandbox needs root")]

CASE = [{"input": "", "output": "contained"}]
CANARY = {"response": "```python\nprint('contained')\n```", "tests": CASE}

HOSTILE = {
    "infinite loop": ("while True:\n    pass", {Status.TIMEOUT}),
    "fork bomb": ("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass", {Status.TIMEOUT}),
    "10 GB allocation": ("x = bytearray(10 * 1024 ** 3)\nprint('contained')", {Status.RUNTIME_ERROR}),
    "disk filler, one file": ("f = open('fill', 'wb')\nwhile True:\n    f.write(b'x' * (1 << 20))", {Status.RUNTIME_ERROR}),
    "disk filler, many files": ("i = 0\nwhile True:\n    open(f'fill{i}', 'wb').write(b'x' * (8 << 20)); i += 1", {Status.RUNTIME_ERROR}),
    "1 GB of stdout": ("import sys\nfor _ in range(1 << 14):\n    sys.stdout.write('x' * (1 << 16))", {Status.RUNTIME_ERROR}),
    "segfault": ("import ctypes\nctypes.string_at(0)", {Status.RUNTIME_ERROR}),
    "killing the parent and everyone": ("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
                                        "os.kill(-1, signal.SIGKILL)\nprint('contained')", {Status.RUNTIME_ERROR}),
}


def _judge(program: str, **payload) -> object:
    return score(code.pipeline, {"response": f"```python\n{program}\n```", "tests": {"cases": CASE, "time_limit_s": 2}, **payload})


def _processes_of(leased: set[int]) -> list[int]:
    """Processes still running, anywhere on the machine, as a uid the test's runs were given (a zombie runs
    nothing: the host's init reaps bubblewrap's namespace init when it will). Other tests' runs, which may go
    on at the same time, hold other uids."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}").st_uid in leased and _state(pid) != "Z":
                found.append(int(pid))
        except (FileNotFoundError, ProcessLookupError):
            pass
    return found


def _state(pid: str) -> str:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rpartition(")")[2].split()[0]




@pytest.fixture
def clean_afterwards(monkeypatch):
    """After the test: no process of the uids its runs were given still runs, no working directory of theirs is
    left, and the same worker process serves the next request."""
    leased: set[int] = set()
    made: list[str] = []  # this test's runs' working directories (another test process may reuse a uid meanwhile)

    def recording(m, lease=uids.lease_uid):
        held = lease(m)
        leased.add(held.uid)
        return held

    class RecordedWorkdir(prepared._Workdir):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self.path)

    for module in (prepared, verifier):
        monkeypatch.setattr(module, "lease_uid", recording)
    monkeypatch.setattr(prepared, "_Workdir", RecordedWorkdir)
    yield
    assert leased, "the test ran nothing in the sandbox"
    warm.settle(10)  # a sandbox parked for the next run is no run's leftover: ended here, with its uid
    warm.drop()
    assert remains.settle(10)
    deadline = time.monotonic() + 5
    while _processes_of(leased) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_of(leased) == []
    assert made and [path for path in made if os.path.exists(path)] == []
    assert score(code.pipeline, CANARY).status is Status.OK


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_program_is_contained(name, clean_afterwards):
    program, statuses = HOSTILE[name]
    started = time.monotonic()
    r = _judge(program)
    assert r.status in statuses and r.stage == "run" and r.reward == 0.0, r.message
    assert time.monotonic() - started < 15


def test_the_disk_filler_leaves_the_disk_alone(clean_afterwards):
    free = shutil.disk_usage(sandbox.sandbox_root()).free
    _judge(HOSTILE["disk filler, many files"][0])
    assert shutil.disk_usage(sandbox.sandbox_root()).free > free - (64 << 20)


def test_the_broker_port_cannot_be_reached(clean_afterwards):
    probe = ("import socket\ntry:\n    socket.socket().connect(('127.0.0.1', 6379))\n    print('reached the broker')\n"
             "except OSError:\n    print('contained')")
    assert _judge(probe).status is Status.OK


def test_the_environment_holds_no_broker_url_or_credentials(monkeypatch, clean_afterwards):
    monkeypatch.setenv("FARM_BROKER_URL", "redis://127.0.0.1:6379/0")
    monkeypatch.setenv("DATABASE_URL", "postgresql://postgres@127.0.0.1/farm")
    probe = ("import os\nleaks = [k for k, v in os.environ.items() if 'redis' in v or 'postgres' in v or k.startswith('FARM')]\n"
             "for p in filter(str.isdigit, os.listdir('/proc')):\n"
             "    try:\n        leaks += ['/proc/' + p] if b'redis://' in open(f'/proc/{p}/environ', 'rb').read() else []\n"
             "    except OSError:\n        pass\n"
             "print(leaks or 'contained')")
    assert _judge(probe).status is Status.OK


def test_the_worker_process_cannot_be_killed_from_inside(clean_afterwards):
    r = _judge(f"import os\ntry:\n    os.kill({os.getpid()}, 9)\nexcept OSError:\n    print('contained')")
    assert r.status is Status.OK


def _bomb(include: str = "") -> str:
    lines = [include, "#define L0 x"] + [f"#define L{i} " + " ".join([f"L{i - 1}"] * 10) for i in range(1, 11)]
    return "\n".join(lines) + "\nint L10;\nint main() {}\n"


def test_a_gpp_compile_time_bomb_is_stopped_at_compile(clean_afterwards):
    r = score(code.pipeline, {"response": f"```cpp\n{_bomb('#include <cstdio>')}\n```", "tests": CASE},
              knobs=Knobs().with_stage("code.compile", timeout_s=3))
    # whichever limit it meets first: the 3 s timeout, or the memory cap ("virtual memory exhausted")
    assert r.status in (Status.TIMEOUT, Status.COMPILE_ERROR) and r.stage == "compile" and r.stages[0].seconds < 8


def test_a_gpp_include_of_dev_zero_is_contained(clean_afterwards):
    r = score(code.pipeline, {"response": "```cpp\n#include \"/dev/zero\"\nint main() {}\n```", "tests": CASE},
              knobs=Knobs().with_stage("code.compile", timeout_s=3))
    assert r.status in (Status.TIMEOUT, Status.COMPILE_ERROR) and r.stage == "compile"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_an_nvcc_compile_time_bomb_times_out_at_compile(clean_afterwards):
    from workers.pipelines import cuda

    r = score(cuda.pipeline, {"response": f"```cuda\n{_bomb()}\n```", "expected_output": [1]},
              knobs=Knobs().with_stage("cuda.compile", timeout_s=12))
    assert (r.status, r.stage) == (Status.TIMEOUT, "compile") and r.stages[0].seconds < 16  # a plain kernel: ~5 s


def test_a_cpp_fork_bomb_and_segfault_are_contained(clean_afterwards):
    bomb = "```cpp\n#include <unistd.h>\nint main() { while (1) fork(); }\n```"
    segv = "```cpp\nint main() { volatile int* p = nullptr; return *p; }\n```"
    assert score(code.pipeline, {"response": bomb, "tests": {"cases": CASE, "time_limit_s": 2}}).status is Status.TIMEOUT
    r = score(code.pipeline, {"response": segv, "tests": CASE})
    assert r.status is Status.RUNTIME_ERROR and "SIGSEGV" in r.message
