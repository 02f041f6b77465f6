"""The sandbox itself: limits, isolation, clean-up, and failing closed where it cannot contain code."""

from __future__ import annotations

import json
import mmap
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from workers import sandbox
from workers.sandbox import isolation, remains, uids

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


def test_a_program_runs_as_the_sandbox_user_inside_and_a_pool_uid_outside():
    r = _py("import os; print(os.getuid(), os.getgid(), os.getgroups())")
    assert r.stdout.decode().split(maxsplit=2)[:2] == ["1000", "1000"]
    with sandbox.spawn([PY, "-I", "-S", "-c", "import time; time.sleep(30)"], limits=FAST) as proc:
        deadline = time.monotonic() + 5
        while len(tree := _process_tree(proc.pid)) < 3 and time.monotonic() < deadline:  # launcher, init, program
            time.sleep(0.02)
        owners = {os.stat(f"/proc/{pid}").st_uid for pid in tree}
        assert len(tree) >= 3 and len(owners) == 1 and owners.pop() in uids.uid_range()


def _process_tree(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in os.listdir(f"/proc/{current}/task"):
            with open(f"/proc/{current}/task/{task}/children") as fh:
                todo += [int(child) for child in fh.read().split()]
    return found


def test_the_environment_is_rebuilt_from_nothing(monkeypatch):
    monkeypatch.setenv("FARM_BROKER_URL", "redis://127.0.0.1:6379/0")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hunter2")
    r = _py("import os, json; print(json.dumps(sorted(os.environ)))")
    # PWD: bubblewrap says where it put the run (/work); the pass-through: a GPU worker's device choice
    passed = {"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "PWD", *isolation._PASS_THROUGH}
    assert set(json.loads(r.stdout)) <= passed


def test_there_is_no_network():
    r = _py("import socket\ntry:\n socket.create_connection(('127.0.0.1', 6379), timeout=2); print('open')\n"
            "except OSError as e: print('blocked', e.errno)")
    assert r.stdout.startswith(b"blocked")


@pytest.fixture
def own_root(monkeypatch):
    """A sandbox root and a uid pool of the test's own. In the shared root, other test files' runs come and go
    meanwhile; and a pool's locks live in its root, so to a sweep of a root of its own every other run of the same
    pool would look stale."""
    root = tempfile.mkdtemp(prefix="farm-sandbox-own-", dir="/var/lib")  # the sandbox uids must reach it
    os.chmod(root, 0o711)
    monkeypatch.setenv("FARM_SANDBOX_ROOT", root)
    monkeypatch.setenv("FARM_SANDBOX_UIDS", "62996")
    uids.sweep_stale.cache_clear()
    yield root
    uids.sweep_stale.cache_clear()
    shutil.rmtree(root, ignore_errors=True)


def test_the_working_directory_is_fresh_and_removed_afterwards(own_root):
    r = _py("import os; open('left.txt', 'w').write('x'); print(os.listdir('.'), os.getcwd())")
    assert r.stdout == b"['left.txt'] /work\n"
    assert remains.settle(10)  # what is left of a run goes behind the worker
    assert [name for name in os.listdir(own_root) if not name.startswith(".")] == []  # .state, .uids: the pool's


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
    code = ("import os, signal\nn = 0\nfor _ in range(1000):\n try:\n  if os.fork() == 0: signal.pause()\n  n += 1\n"
            " except OSError: break\nprint(n)")
    r = _py(code, limits=sandbox.Limits(wall_s=5, nproc=8))
    assert r.ok and int(r.stdout) < 8


def test_runs_given_the_same_uid_one_after_another_all_start(monkeypatch):
    # one uid for every run: what an earlier run left in the kernel's count of that uid's processes (killed, not yet
    # reaped, its namespaces not yet freed) must not count against the next; a cgroup caps each run instead
    monkeypatch.setenv("FARM_SANDBOX_UIDS", "62998")  # outside the default pool: no other test's run takes it
    started = [_py("print('started')", limits=sandbox.Limits(wall_s=5, nproc=16)).stdout for _ in range(30)]
    assert started == [b"started\n"] * 30


def test_memory_is_capped_for_the_run_as_a_whole_not_per_process():
    # three children under the per-process cap each, together past the run's: the kernel kills one
    code = ("import os, time\nfor _ in range(3):\n if os.fork() == 0:\n  b = bytearray(120 << 20)\n"
            "  b[::4096] = b'x' * len(b[::4096])\n  time.sleep(2)\n  os._exit(0)\n"
            "print(sorted(os.wait()[1] for _ in range(3)))")
    r = _py(code, limits=sandbox.Limits(wall_s=20, memory_bytes=256 * sandbox.MiB))
    assert r.memory_exceeded and r.stdout != b"[0, 0, 0]\n", r


def test_no_socket_of_the_host_is_reachable():
    r = _py("import os, socket, stat\nfound = []\nfor top, dirs, files in os.walk('/'):\n"
            " if top.startswith('/proc'): dirs[:] = []; continue\n"
            " found += [os.path.join(top, f) for f in files if stat.S_ISSOCK(os.lstat(os.path.join(top, f)).st_mode)]\n"
            "print(found)\n"
            "for path in ('/run/postgresql/.s.PGSQL.5432', '/var/run/docker.sock', '/run/redis/redis.sock'):\n"
            " try: socket.socket(socket.AF_UNIX).connect(path); print('reached', path)\n"
            " except OSError as e: print(type(e).__name__)", limits=sandbox.Limits(wall_s=30))
    assert r.stdout.decode().split("\n")[:4] == ["[]", "FileNotFoundError", "FileNotFoundError", "FileNotFoundError"]


def test_a_run_cannot_make_user_namespaces_and_has_a_hostname_of_its_own():
    r = _py("import ctypes, os, socket\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "print(libc.unshare(0x10000000), socket.gethostname())")
    assert r.stdout == b"-1 sandbox\n"


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
            assert os.read(read_end, 64) == b"1000"
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)


def test_a_spawned_program_is_killed_when_its_block_ends():
    with sandbox.spawn([PY, "-I", "-S", "-c", "import time; time.sleep(60)"], limits=FAST) as proc:
        assert proc.wait(0.2) is None
    assert remains.settle(10)  # killed as the block ended; its launcher reaped behind the worker
    assert proc.wait(0) is not None


def test_nothing_outside_the_allow_list_exists_inside():
    r = _py("import os; print([p for p in ('/var', '/run', '/sys', '/home', '/root', '/opt', '/srv', '/mnt') "
            "if os.path.lexists(p)])")
    assert r.stdout == b"[]\n"


_ETC_SEEN = """
import hashlib, os, stat
def seen(path):
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return ['link', os.readlink(path)]
    if stat.S_ISDIR(st.st_mode):
        return ['dir', oct(st.st_mode), {n: seen(os.path.join(path, n)) for n in sorted(os.listdir(path))}]
    return ['file', oct(st.st_mode), st.st_mtime_ns, hashlib.sha256(open(path, 'rb').read()).hexdigest()]
"""  # what a program sees of an entry: links, modes, times, contents


def test_etc_holds_the_farms_files_and_the_hosts_linker_entries_read_only():
    linked = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime")
    r = _py(_ETC_SEEN + "import json\n"
            f"print(json.dumps([sorted(os.listdir('/etc')), {{n: seen('/etc/' + n) for n in {linked!r} "
            "if os.path.exists('/etc/' + n)}, bool(os.statvfs('/etc').f_flag & os.ST_RDONLY)]))")
    names, entries, read_only = json.loads(r.stdout)
    scope: dict = {}
    exec(_ETC_SEEN, scope)
    # a bind showed a top-level link as the file it leads to
    host = {n: scope["seen"](os.path.realpath(f"/etc/{n}")) for n in linked if os.path.exists(f"/etc/{n}")}
    assert names == sorted(["group", "hostname", "hosts", "nsswitch.conf", "passwd", *host])
    assert entries == host and read_only


def test_hidden_paths_inside_an_allowed_tree_are_empty(monkeypatch, tmp_path):
    tree = "/var/lib/farm-tree-test"
    shutil.rmtree(tree, ignore_errors=True)
    os.makedirs(f"{tree}/answers", mode=0o755)
    try:
        with open(f"{tree}/answers/42.json", "w") as fh:
            fh.write("42")
        os.chmod(f"{tree}/answers/42.json", 0o644)
        monkeypatch.setenv("FARM_SANDBOX_TREES", tree)
        assert _py(f"print(open('{tree}/answers/42.json').read())").stdout == b"42\n"  # readable when not hidden
        monkeypatch.setenv("FARM_SANDBOX_HIDE", f"{tree}/answers")
        r = _py(f"import os; print(os.listdir('{tree}/answers'))")
        assert r.ok and r.stdout == b"[]\n"
    finally:
        shutil.rmtree(tree, ignore_errors=True)


def test_python_packages_are_empty_inside_the_sandbox():
    r = _py("import glob, os; print([d for d in glob.glob('/usr/lib/python3*/*-packages') + "
            "glob.glob('/usr/local/lib/python3*/*-packages') if os.listdir(d)])")
    assert r.ok and r.stdout == b"[]\n"


def test_without_namespaces_the_sandbox_fails_closed(monkeypatch):
    monkeypatch.setattr(isolation.shutil, "which", lambda name, **kw: None)
    monkeypatch.delenv("FARM_SANDBOX_ALLOW_UNCONTAINED", raising=False)
    sandbox.mode.cache_clear()
    try:
        with pytest.raises(sandbox.SandboxUnavailable, match="bubblewrap"):
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


def test_a_working_directory_left_by_a_killed_worker_is_swept(own_root):
    stale = os.path.join(own_root, f"run-{uids.uid_range().start}-abc")
    os.mkdir(stale)
    with open(os.path.join(stale, "left"), "w") as fh:
        fh.write("x")
    assert sandbox.run(["/bin/true"]).ok
    assert not os.path.exists(stale)


def test_the_sweep_leaves_the_runs_of_another_pool_alone(own_root):
    from workers.sandbox import cgroups

    other = cgroups.probe().create("run-62995-other", 64 << 20, 8)  # a run of another pool, its lock elsewhere
    sleeper = subprocess.Popen(["sleep", "30"])
    other.admit(sleeper.pid)
    try:
        uids.sweep_stale()
        assert sleeper.poll() is None and other.pids() == [sleeper.pid]
    finally:
        sleeper.kill()
        sleeper.wait()
        other.remove()


@pytest.fixture
def unlaunchable(monkeypatch):
    """Every launch fails inside bubblewrap: a tree to bind that the runs' uids cannot reach."""
    sandbox.mode()  # probed first, as a worker does at its start
    tree = tempfile.mkdtemp(prefix="farm-unreachable-", dir="/root")  # /root: 0700, no pool uid gets through
    monkeypatch.setenv("FARM_SANDBOX_TREES", tree)
    yield
    shutil.rmtree(tree, ignore_errors=True)


def test_a_run_that_bubblewrap_cannot_start_is_the_machines_failure(unlaunchable):
    with pytest.raises(sandbox.SandboxUnavailable, match="could not start the program"):
        _py("print('never')")


def test_a_function_judged_where_bubblewrap_cannot_start_it_is_infra_error_not_a_verdict(unlaunchable):
    from farm.results import Status
    from workers.pipelines import code
    from workers.runner import score

    problem = {"prompt": "def f(x):\n", "test": "def check(candidate):\n    assert candidate(1) == 1\n",
               "entry_point": "f"}
    r = score(code.pipeline, {"response": "```python\ndef f(x):\n    return x\n```", "tests": problem})
    assert r.status is Status.INFRA_ERROR and "could not start the program" in r.message, r.message


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
