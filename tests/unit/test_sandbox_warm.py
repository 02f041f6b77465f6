"""A sandbox started before its run (workers.sandbox.warm, program.spawn): taken by the next run of its shape, seen
by the program exactly as a cold one, serving one run only, and given back whole; and a run's remains reaped behind
the worker (workers.sandbox.remains) leave nothing once settled."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time

import pytest

from workers import sandbox
from workers.sandbox import remains, uids, warm

PY = sandbox.python_executable()
FAST = sandbox.Limits(wall_s=5)

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(os.geteuid() != 0, reason="the full sandbox needs root (see workers/sandbox/ modes)")]

# what a program can see of its own start; `seen` writes it to the descriptor named by argv[1]
SEEN = """\
import json, os, resource, sys
out = int(sys.argv[1])
report = {
    "argv": sys.argv[:1], "name": __name__, "file": __file__, "cwd": os.getcwd(), "uid": os.getuid(),
    "fds": sorted(-1 if int(fd) == out else int(fd) for fd in os.listdir("/proc/self/fd")), "path": sys.path,
    "flags": [sys.flags.isolated, sys.flags.no_site, sys.flags.ignore_environment],
    "modules": sorted(sys.modules), "globals": sorted(globals()), "cpu": resource.getrlimit(resource.RLIMIT_CPU),
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


@pytest.mark.parametrize("script", ["def f():\n    raise ValueError('no')\nf()\n", "x = (\n", "raise SystemExit(3)\n",
                                    "print('out', flush=False)\nraise KeyboardInterrupt\n"])
def test_a_program_that_fails_reads_and_exits_as_in_a_cold_interpreter(script):
    cold = crashed(script)
    warm.settle(10)
    assert warm.parked() is not None
    assert crashed(script) == cold
    assert cold[0] in (1, 3, 128 + 2) and (cold[0] == 3 or b'File "/work/crash.py"' in cold[1])


def test_a_run_of_another_shape_ends_the_parked_sandbox_and_gives_its_uid_back(own_warmer):
    seen()
    warm.settle(10)
    parked = own_warmer._parked
    assert seen(limits=sandbox.Limits(wall_s=5, memory_bytes=512 * sandbox.MiB))["cmdline"] is False  # cold
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


ECHO = "import sys\nsys.stdout.write(sys.stdin.read()[::-1])\nsys.stderr.write('note')\nraise SystemExit(3)\n"


def echoed(**kw) -> sandbox.RunResult:
    return sandbox.run([PY, "-I", "-S", "main.py"], files={"main.py": ECHO}, stdin=b"abc", limits=FAST, **kw)


def test_a_supervised_run_of_a_python_script_takes_a_piped_sandbox_and_ends_as_a_cold_one():
    cold = echoed()
    assert warm.settle(10) and warm.parked() is not None and warm.parked().piped
    hot = echoed()
    assert (hot.stdout, hot.stderr, hot.returncode, hot.signal) == (cold.stdout, cold.stderr, 3, None)
    assert (hot.stdout, hot.stderr) == (b"cba", b"note")


def test_a_warm_supervised_run_is_timed_from_its_start_and_killed_at_its_limit():
    echoed()
    warm.settle(10)
    time.sleep(1.5)  # parked longer than the run's limit: the clock starts with the run
    slow = sandbox.run([PY, "-I", "-S", "main.py"], files={"main.py": "import time\ntime.sleep(30)\n"},
                       limits=sandbox.Limits(wall_s=1))
    assert slow.timed_out and 0.9 < slow.wall_s < 5


def test_a_warm_supervised_run_gives_back_the_files_asked_for():
    echoed()
    warm.settle(10)
    r = sandbox.run([PY, "-I", "-S", "main.py"], files={"main.py": "open('out.bin', 'wb').write(b'\\x01')"},
                    limits=FAST, collect=("out.bin",))
    assert r.ok and r.files == {"out.bin": b"\x01"}


def test_a_spawned_run_does_not_take_a_sandbox_parked_for_a_supervised_one(own_warmer):
    echoed()
    warm.settle(10)
    parked = own_warmer._parked
    assert not seen()["cmdline"]  # another shape: cold, and the piped one ended
    assert remains.settle(10) and parked.proc.poll() is not None


def test_a_run_with_less_time_takes_the_parked_sandbox_with_its_own_cpu_limit():
    assert seen()["cpu"] == [5, 6]
    warm.settle(10)
    hot = seen(limits=sandbox.Limits(wall_s=2))  # a stage's last case, with less of its budget left
    assert hot["cmdline"] and hot["cpu"] == [2, 3]


def test_a_run_with_more_time_than_the_parked_sandbox_was_made_for_starts_cold():
    seen(limits=sandbox.Limits(wall_s=2))
    warm.settle(10)
    cold = seen(limits=sandbox.Limits(wall_s=5))
    assert not cold["cmdline"] and cold["cpu"] == [5, 6]


def test_a_stub_that_cannot_set_up_its_run_is_the_machines_failure_not_a_verdict():
    seen()
    warm.settle(10)
    parked = warm.take(warm.parked())
    try:
        with pytest.raises(sandbox.SandboxUnavailable, match="could not set up its run"):
            # more CPU than it was launched with (a run `fits` keeps away): the stub cannot raise its hard limit
            parked.start(["seen.py"], {"seen.py": SEEN}, (), sandbox.Limits(wall_s=60))
    finally:
        parked.end(failed=True)
    assert parked.proc.poll() is not None


def test_a_sandbox_parked_before_the_roots_settings_changed_is_not_used(monkeypatch):
    seen()
    warm.settle(10)
    monkeypatch.setenv("FARM_SANDBOX_HIDE", "/usr/share/doc")  # the operator hides one more path of /usr
    assert not seen()["cmdline"]  # parked with the root of before: cold, with the root of now
