"""A sandbox started before its run (workers.sandbox.warm, program.spawn): taken by the next run of its shape, seen
by the program exactly as a cold one, serving one run only, and given back whole; and a run's remains reaped behind
the worker (workers.sandbox.remains) leave nothing once settled."""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import pytest

from workers import sandbox
from workers.sandbox import remains, uids, warm

PY = sandbox.python_executable()
FAST = sandbox.Limits(wall_s=5)

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(os.geteuid() != 0, reason="the full sandbox needs root (see workers/sandbox/ modes)")]

# what a program can see of its own start; `seen` writes it to the descriptor named by argv[1]
SEEN = """\
import json, os, sys
out = int(sys.argv[1])
report = {
    "argv": sys.argv[:1], "name": __name__, "file": __file__, "cwd": os.getcwd(), "uid": os.getuid(),
    "fds": sorted(-1 if int(fd) == out else int(fd) for fd in os.listdir("/proc/self/fd")), "path": sys.path,
    "flags": [sys.flags.isolated, sys.flags.no_site, sys.flags.ignore_environment],
    "modules": sorted(sys.modules), "globals": sorted(globals()),
    "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "left": sorted(os.listdir("/tmp")) + sorted(os.listdir("/work")),
    "cmdline": open("/proc/self/cmdline", "rb").read().split(b"\\0")[1:4] == [b"-I", b"-S", b"-c"],
}
open("/tmp/mark", "w").write("x")
open("/work/mark", "w").write("x")
os.write(out, json.dumps(report).encode())
"""


@pytest.fixture(autouse=True)
def own_warmer(monkeypatch):
    """A warmer of the test's own, nothing parked; whatever it parked is ended afterwards."""
    mine = warm.Warmer()
    monkeypatch.setattr(warm, "_warmer", mine)
    yield mine
    mine.close()
    remains.settle(10)


def seen(files: dict[str, str] | None = None, limits: sandbox.Limits = FAST, script: str = "seen.py") -> dict:
    read_end, write_end = os.pipe()
    try:
        with sandbox.spawn([PY, "-I", "-S", script, str(write_end)], files=files or {script: SEEN}, limits=limits,
                           pass_fds=(write_end,)) as proc:
            os.close(write_end)
            write_end = -1
            assert proc.wait(10) == 0, proc.stderr_head()
            return json.loads(os.read(read_end, 1 << 20))
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)


def test_the_next_run_of_a_python_script_takes_the_sandbox_parked_for_its_shape():
    assert not seen()["cmdline"]  # nothing parked yet: cold
    assert warm.settle(10) and warm.parked() is not None
    assert seen()["cmdline"]  # the interpreter started before the run


def test_a_warm_run_sees_what_a_cold_run_sees():
    cold = seen()
    warm.settle(10)
    hot = seen()
    assert hot.pop("cmdline") and not cold.pop("cmdline")
    assert hot == cold
    assert hot["file"] == "/work/seen.py" and hot["name"] == "__main__" and "_socket" not in hot["modules"]


def test_nothing_of_one_warm_run_is_left_for_the_next():
    seen()
    warm.settle(10)
    first = seen()
    warm.settle(10)
    second = seen()
    assert first["left"] == second["left"] == ["seen.py"]  # the marks each left in /tmp and /work are gone
    assert second["pids"] == first["pids"]  # its own PID namespace: the same init and program, nothing else


def crashed(script: str) -> tuple[int, bytes]:
    with sandbox.spawn([PY, "-I", "-S", "crash.py"], files={"crash.py": script}, limits=FAST) as proc:
        status = proc.wait(10)
        return status, proc.stderr_head()


@pytest.mark.parametrize("script", ["def f():\n    raise ValueError('no')\nf()\n", "x = (\n", "raise SystemExit(3)\n"])
def test_a_program_that_fails_reads_and_exits_as_in_a_cold_interpreter(script):
    cold = crashed(script)
    warm.settle(10)
    assert warm.parked() is not None
    assert crashed(script) == cold
    assert cold[0] in (1, 3) and (cold[0] == 3 or b'File "/work/crash.py"' in cold[1])


def test_a_run_of_another_shape_ends_the_parked_sandbox_and_gives_its_uid_back(own_warmer):
    seen()
    warm.settle(10)
    parked = own_warmer._parked
    assert seen(limits=sandbox.Limits(wall_s=4))["cmdline"] is False  # another shape: cold
    assert remains.settle(10)
    assert parked.proc.poll() is not None
    lock = uids._try_lock(parked.prepared.lease.uid)
    assert lock is not None  # free again
    os.close(lock)


def test_a_forks_child_neither_takes_nor_ends_the_parked_sandbox(own_warmer):
    seen()
    warm.settle(10)
    parked = own_warmer._parked
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(write_end, json.dumps([warm.parked() is None, remains.pending()]).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    os.waitpid(pid, 0)
    assert json.loads(os.read(read_end, 1 << 16)) == [True, 0]
    os.close(read_end)
    assert own_warmer._parked is parked and parked.alive()
    assert seen()["cmdline"]  # the parent's still serves its next run


def test_turned_off_every_run_starts_cold(monkeypatch):
    monkeypatch.setenv(warm.ENV, "0")
    seen()
    warm.settle(10)
    assert warm.parked() is None and not seen()["cmdline"]


def test_once_settled_a_runs_remains_are_gone(monkeypatch):
    own = tempfile.mkdtemp(prefix="farm-sandbox-own-", dir="/var/lib")  # the shared root's runs come and go
    os.chmod(own, 0o711)
    monkeypatch.setenv("FARM_SANDBOX_ROOT", own)
    monkeypatch.setenv("FARM_SANDBOX_UIDS", "62990")
    uids.sweep_stale.cache_clear()
    try:
        for _ in range(3):  # one uid: each run waits for the one before to give it back
            assert sandbox.run([PY, "-I", "-S", "-c", "open('x', 'w').write('x')"], limits=FAST).ok
        assert remains.settle(10)
        assert [name for name in os.listdir(own) if not name.startswith(".")] == []
        lock = uids._try_lock(62990)
        assert lock is not None
        os.close(lock)
    finally:
        uids.sweep_stale.cache_clear()
        shutil.rmtree(own, ignore_errors=True)
