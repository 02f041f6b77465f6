"""The sandbox itself: limits, isolation, clean-up, and failing closed where it cannot contain code."""

from __future__ import annotations

import json
import mmap
import os
import shutil
import signal

import pytest

from workers import sandbox
from workers.sandbox import isolation, uids

PY = sandbox.python_executable()
FAST = sandbox.Limits(wall_s=5)

pytestmark = [pytest.mark.timeout(30),
              pytest.mark.skipif(os.geteuid() != 0, reason="the full sandbox needs root (see workers/sandbox/ modes)")]


def _py(code: str, limits: sandbox.Limits = FAST, **kw) -> sandbox.RunResult:
    return sandbox.run([PY, "-I", "-S", "-c", code], limits=limits, **kw)


def test_a_program_gets_its_files_stdin_and_output():
    r = sandbox.run([PY, "-I", "-S", "main.py"], files={"main.py": "import sys; print(sys.stdin.read()[::-1])"},
                    stdin=b"abc", limits=FAST)
    assert r.ok and r.stdout == b"cba\n"


def test_a_program_runs_as_an_unprivileged_uid_from_the_pool():
    r = _py("import os; print(os.getuid(), os.getgid(), os.getgroups())")
    uid, gid, _ = r.stdout.decode().split(maxsplit=2)
    assert int(uid) in uids.uid_range() and uid == gid


def test_the_environment_is_rebuilt_from_nothing(monkeypatch):
    monkeypatch.setenv("FARM_BROKER_URL", "redis://127.0.0.1:6379/0")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hunter2")
    r = _py("import os, json; print(json.dumps(sorted(os.environ)))")
    assert set(json.loads(r.stdout)) <= {"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "PWD"}  # PWD: the launcher's sh


def test_there_is_no_network():
    r = _py("import socket\ntry:\n socket.create_connection(('127.0.0.1', 6379), timeout=2); print('open')\n"
            "except OSError as e: print('blocked', e.errno)")
    assert r.stdout.startswith(b"blocked")


def test_the_working_directory_is_fresh_and_removed_afterwards():
    r = _py("import os; open('left.txt', 'w').write('x'); print(os.listdir('.'), os.getcwd())")
    listing, cwd = r.stdout.decode().rsplit(" ", 1)
    assert listing == "['left.txt']"
    assert not os.path.exists(cwd.strip())


def test_collected_files_come_back():
    r = _py("open('out.bin', 'wb').write(b'\\x00\\x01')", collect=("out.bin", "absent"))
    assert r.files == {"out.bin": b"\x00\x01"}


def test_the_wall_limit_kills_the_whole_group_and_reports_a_timeout():
    r = _py("import os, time\nos.fork(); time.sleep(60)", limits=sandbox.Limits(wall_s=1))
    assert r.timed_out and r.wall_s < 3


def test_the_cpu_limit_reports_a_timeout():
    r = _py("while True: pass", limits=sandbox.Limits(wall_s=10, cpu_s=1))
    assert r.timed_out and r.signal == signal.SIGXCPU and r.wall_s < 5


def test_the_memory_limit_refuses_a_large_allocation():
    r = _py("b = bytearray(4 << 30)", limits=sandbox.Limits(wall_s=5, memory_bytes=512 * sandbox.MiB))
    assert r.returncode == 1 and b"MemoryError" in r.stderr


def test_the_process_limit_stops_a_fork_bomb():
    code = "import os\nn = 0\nfor _ in range(1000):\n try:\n  if os.fork() == 0: os.pause()\n  n += 1\n except OSError: break\nprint(n)"
    r = _py(code, limits=sandbox.Limits(wall_s=5, nproc=8))
    assert r.ok and int(r.stdout) < 8


def test_the_file_size_limit_stops_a_large_file():
    r = _py("open('big', 'wb').write(b'x' * (8 << 20))", limits=sandbox.Limits(wall_s=5, file_bytes=1 << 20))
    assert not r.ok and b"File too large" in r.stderr


def test_the_output_cap_kills_a_flood_and_keeps_the_head():
    r = _py("import sys\nwhile True: sys.stdout.write('y' * 65536)", limits=sandbox.Limits(wall_s=10, output_bytes=1 << 20))
    assert r.output_exceeded and len(r.stdout) == 1 << 20 and r.wall_s < 5


def test_a_segfault_is_reported_as_a_signal():
    r = _py("import ctypes; ctypes.string_at(0)")
    assert r.signal == signal.SIGSEGV and "segmentation fault" in r.describe()


def test_other_processes_are_invisible_and_unkillable():
    r = _py(f"import os\ntry:\n os.kill({os.getpid()}, 9); print('killed')\nexcept OSError as e: print('refused', e.errno)\n"
            "print(len([p for p in os.listdir('/proc') if p.isdigit()]))")
    first, count = r.stdout.decode().split("\n")[:2]
    assert first.startswith("refused") and int(count) <= 3


def test_tmp_is_a_private_size_capped_tmpfs():
    r = _py("import os; open('/tmp/x', 'wb').write(b'x' * (3 << 20))", limits=sandbox.Limits(wall_s=5, disk_bytes=2 << 20))
    assert not r.ok and b"No space left" in r.stderr


def test_call_runs_a_function_in_a_contained_child():
    result = sandbox.call(_identity_and_uid, 21)
    assert result.value[0] == 42 and result.value[1] in uids.uid_range()


def test_a_call_forked_from_a_worker_with_a_large_address_space_still_gets_its_memory():
    # what a worker that loaded torch or a CUDA context looks like: gigabytes mapped before any call
    reserved = mmap.mmap(-1, 4 << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=0)  # PROT_NONE: no memory
    try:
        result = sandbox.call(_allocate, 256 << 20, limits=sandbox.Limits(wall_s=10, memory_bytes=1 * sandbox.GiB))
    finally:
        reserved.close()
    assert result.value == 256 << 20, result.error


def test_a_call_may_not_add_more_than_its_memory_limit():
    result = sandbox.call(_allocate, 2 << 30, limits=sandbox.Limits(wall_s=10, memory_bytes=1 * sandbox.GiB))
    assert "MemoryError" in result.error


def test_call_reports_a_timeout_and_an_error():
    assert sandbox.call(_spin, None, limits=sandbox.Limits(wall_s=1)).timed_out
    assert "ZeroDivisionError" in sandbox.call(_divide, 0).error


def test_call_has_no_network_and_no_inherited_descriptors():
    fd = os.open("/dev/null", os.O_RDONLY)
    try:
        assert sandbox.call(_probe_fd_and_network, fd).value == ["closed", "blocked"]
    finally:
        os.close(fd)


def test_call_keeps_open_only_the_descriptors_it_is_given():
    kept, closed = os.pipe()
    try:
        assert sandbox.call(_probe_two_fds, (kept, closed), keep_fds=(kept,)).value == ["open", "closed"]
    finally:
        os.close(kept)
        os.close(closed)


def test_a_spawned_program_runs_contained_with_the_descriptors_it_is_given():
    read_end, write_end = os.pipe()
    try:
        code = f"import os; os.write({write_end}, str(os.getuid()).encode()); os.write(1, b'lost')"
        with sandbox.spawn([PY, "-I", "-S", "-c", code], limits=FAST, pass_fds=(write_end,)) as proc:
            os.close(write_end)
            write_end = -1
            assert proc.wait(5) == 0
            assert int(os.read(read_end, 64)) in uids.uid_range()
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)


def test_a_spawned_program_is_killed_when_its_block_ends():
    with sandbox.spawn([PY, "-I", "-S", "-c", "import time; time.sleep(60)"], limits=FAST) as proc:
        assert proc.wait(0.2) is None
    assert proc.wait(0) is not None


def test_hidden_paths_are_empty_inside_the_sandbox(monkeypatch):
    secret = "/var/lib/farm-hidden-test"
    os.makedirs(secret, mode=0o755, exist_ok=True)
    try:
        with open(os.path.join(secret, "answers.json"), "w") as fh:
            fh.write("42")
        os.chmod(os.path.join(secret, "answers.json"), 0o644)
        assert _py(f"print(open('{secret}/answers.json').read())").stdout == b"42\n"  # readable when not hidden
        monkeypatch.setenv("FARM_SANDBOX_HIDE", secret)
        r = _py(f"import os; print(os.listdir('{secret}'))")
        assert r.ok and r.stdout == b"[]\n"
    finally:
        shutil.rmtree(secret, ignore_errors=True)


def test_without_namespaces_the_sandbox_fails_closed(monkeypatch):
    monkeypatch.setattr(isolation.shutil, "which", lambda name, **kw: None)
    monkeypatch.delenv("FARM_SANDBOX_ALLOW_UNCONTAINED", raising=False)
    sandbox.mode.cache_clear()
    try:
        with pytest.raises(sandbox.SandboxUnavailable, match="missing tools"):
            sandbox.mode()
        monkeypatch.setenv("FARM_SANDBOX_ALLOW_UNCONTAINED", "1")
        sandbox.mode.cache_clear()
        assert sandbox.mode() == "uncontained"
    finally:
        sandbox.mode.cache_clear()


def _allocate(n):
    return len(bytearray(n))


def _identity_and_uid(x):
    return [x * 2, os.getuid()]


def _spin(_):
    while True:
        pass


def _divide(x):
    return 1 / x


def _probe_fd_and_network(fd):
    import socket

    try:
        os.fstat(fd)
        fd_state = "open"
    except OSError:
        fd_state = "closed"
    try:
        socket.socket().connect(("127.0.0.1", 6379))  # create_connection would import idna, which the uid cannot
        net = "open"
    except OSError:
        net = "blocked"
    return [fd_state, net]


def test_a_working_directory_left_by_a_killed_worker_is_swept(monkeypatch, tmp_path):
    monkeypatch.setenv("FARM_SANDBOX_ROOT", str(tmp_path))
    stale = tmp_path / f"run-{uids.uid_range().start}-abc"
    stale.mkdir()
    (stale / "left").write_text("x")
    uids.sweep_stale.cache_clear()
    try:
        assert sandbox.run(["/bin/true"]).ok
        assert not stale.exists()
    finally:
        uids.sweep_stale.cache_clear()


def test_a_launcher_that_cannot_mount_its_private_tmpfs_refuses_to_run():
    with pytest.raises(sandbox.SandboxUnavailable, match="cannot mount"):
        sandbox.run(["/bin/true"], limits=sandbox.Limits(disk_bytes=-1))


def _probe_two_fds(fds):
    out = []
    for fd in fds:
        try:
            os.fstat(fd)
            out.append("open")
        except OSError:
            out.append("closed")
    return out
