"""Nothing survives a run: a run writes into every place it can find (it walks the whole filesystem it sees and
creates IPC objects of every kind, keys and abstract sockets), and the next run, and the host, find nothing.

This is what stops a response from learning its verdict across resubmissions: the tests call the next case
only after the previous one passed, so a response that could remember which of its runs were reached could
flip its unconfirmed guesses until it earns reward without solving anything.
"""

from __future__ import annotations

import json
import os
import textwrap

import pytest

from farm.results import Status
from workers import sandbox
from workers.pipelines import code
from workers.runner import score

pytestmark = [pytest.mark.timeout(300), pytest.mark.skipif(os.geteuid() != 0, reason="the full sandbox needs root")]

PY = sandbox.python_executable()
MARK = "farm-survivor-7f3a"
KEY = 0x7F3A5EED  # the System V key both runs use

# Shared by both runs: ctypes bindings for System V IPC, POSIX message queues and the kernel's keyrings.
_IPC = textwrap.dedent(f"""
    import ctypes, ctypes.util, errno, json, os, socket, stat, sys
    libc = ctypes.CDLL(None, use_errno=True)
    rt = ctypes.CDLL(ctypes.util.find_library("rt") or "librt.so.1", use_errno=True)
    rt.mq_open.restype = ctypes.c_int
    rt.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
    libc.shmat.restype = ctypes.c_void_p
    IPC_CREAT, KEY, MARK = 0o1000, {KEY}, {MARK!r}
    SYS_ADD_KEY, SYS_KEYCTL, KEYCTL_SEARCH = 248, 250, 10
    RINGS = {{"session": -3, "user": -4, "user-session": -5, "process": -2, "thread": -1}}
""")

WRITE = _IPC + textwrap.dedent("""
    made = {"files": [], "ipc": {}}
    for top, dirs, files in os.walk(os.environ.get("WALK_FROM", "/"), topdown=True):
        if top == "/proc" or top.startswith("/proc/"):
            dirs[:] = []
            continue
        try:
            path = os.path.join(top, MARK)
            with open(path, "w") as fh:
                fh.write("left by an earlier run")
            made["files"].append(path)
        except OSError:
            pass
    shm = libc.shmget(KEY, 16 << 20, IPC_CREAT | 0o666)
    if shm >= 0:
        address = libc.shmat(shm, None, 0)
        ctypes.memmove(address, MARK.encode(), len(MARK))
    made["ipc"]["shm"] = shm
    made["ipc"]["sem"] = libc.semget(KEY, 1, IPC_CREAT | 0o666)
    made["ipc"]["msg"] = libc.msgget(KEY, IPC_CREAT | 0o666)
    made["ipc"]["mqueue"] = rt.mq_open(b"/" + MARK.encode(), os.O_CREAT | os.O_RDWR, 0o666, None)
    for name, ring in RINGS.items():
        made["ipc"]["key-" + name] = libc.syscall(SYS_ADD_KEY, b"user", MARK.encode(), b"secret", 6, ring)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind("\\0" + MARK)  # an abstract socket: no file, but visible to its network namespace
    listener.listen()
    made["ipc"]["abstract"] = 0
    print(json.dumps(made))
""")

READ = _IPC + textwrap.dedent("""
    found = []
    for top, dirs, files in os.walk("/", topdown=True):
        if top == "/proc" or top.startswith("/proc/"):
            dirs[:] = []
            continue
        found += [os.path.join(top, f) for f in files if f == MARK]
    if libc.shmget(KEY, 0, 0) >= 0:
        found.append("shm")
    if libc.semget(KEY, 0, 0) >= 0:
        found.append("sem")
    if libc.msgget(KEY, 0) >= 0:
        found.append("msg")
    if rt.mq_open(b"/" + MARK.encode(), os.O_RDONLY, 0, None) >= 0:
        found.append("mqueue")
    for name, ring in RINGS.items():
        if libc.syscall(SYS_KEYCTL, KEYCTL_SEARCH, ring, b"user", MARK.encode(), 0) >= 0:
            found.append("key-" + name)
    try:
        socket.socket(socket.AF_UNIX).connect("\\0" + MARK)
        found.append("abstract")
    except OSError:
        pass
    print(json.dumps(found))
""")


def _run(program: str) -> object:
    r = sandbox.run([PY, "-I", "-S", "-c", program], limits=sandbox.Limits(wall_s=60), env={"WALK_FROM": "/"})
    assert r.ok, r.stderr.decode(errors="replace")[-2000:]
    return json.loads(r.stdout)


def test_a_run_can_write_only_into_its_private_working_directory_tmp_and_shm():
    made = _run(WRITE)
    writable = {os.path.dirname(path) for path in made["files"]}
    assert writable == {"/work", "/tmp", "/dev/shm"}
    assert all(handle >= 0 for handle in made["ipc"].values()), made["ipc"]  # every kind could be made


def test_the_next_run_finds_nothing_an_earlier_run_left():
    _run(WRITE)
    assert _run(READ) == []


def test_the_host_finds_nothing_a_run_left():
    _run(WRITE)
    for folder in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/run", sandbox.sandbox_root()):
        assert not os.path.lexists(os.path.join(folder, MARK)), folder
    with open("/proc/sysvipc/shm") as fh:
        assert f"{KEY:>10}" not in fh.read() and str(KEY) not in fh.read()
    for table in ("sem", "msg"):
        with open(f"/proc/sysvipc/{table}") as fh:
            assert str(KEY) not in fh.read()
    assert not os.path.exists(f"/dev/mqueue/{MARK}")


def _remember(state: dict | None) -> dict:  # a verifier call: stores, or looks for, state everywhere it can
    import ctypes
    import socket

    libc = ctypes.CDLL(None, use_errno=True)
    found = []
    if state is None:
        libc.shmget(KEY, 1 << 20, 0o1000 | 0o666)
        libc.syscall(248, b"user", MARK.encode(), b"secret", 6, -4)
        try:
            with open(f"/tmp/{MARK}", "w") as fh:
                fh.write("x")
        except OSError:
            pass
        try:
            listener = socket.socket(socket.AF_UNIX)
            listener.bind("\0" + MARK)
        except OSError:
            pass
        return {"root": os.listdir("/")}
    if libc.shmget(KEY, 0, 0) >= 0:
        found.append("shm")
    if libc.syscall(250, 10, -4, b"user", MARK.encode(), 0) >= 0:
        found.append("key-user")
    if os.path.exists(f"/tmp/{MARK}"):
        found.append("file")
    return {"found": found}


def test_a_verifier_call_sees_no_filesystem_and_leaves_nothing_for_the_next():
    first = sandbox.call(_remember, None)
    assert first.value == {"root": []}, first
    assert sandbox.call(_remember, {}).value == {"found": []}


def test_a_response_cannot_learn_its_verdict_across_resubmissions():
    # every case's answer is YES; a program that remembers which of its guesses were reached (a later case ran)
    # flips the unconfirmed ones: with memory it would pass within a few submissions, without it never does
    learner = textwrap.dedent("""
        import glob, json, os, sys
        case = sys.stdin.read().strip()
        places = ["/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/work", os.path.expanduser("~")]
        memory = {}
        for place in places:
            try:
                memory.update(json.load(open(os.path.join(place, ".guesses"))))
            except (OSError, ValueError):
                pass
        guess = memory.get(case, {"answer": "NO", "reached": False})
        reached_next = str(int(case) + 1) in memory
        if not reached_next and case in memory:
            guess["answer"] = "YES" if guess["answer"] == "NO" else "NO"
        memory[case] = guess
        for place in places:
            try:
                json.dump(memory, open(os.path.join(place, ".guesses"), "w"))
            except OSError:
                pass
        print(guess["answer"])
        print("remembered" if len(memory) > 1 else "fresh", file=sys.stderr)
    """)
    cases = [{"input": str(i), "output": "YES"} for i in range(4)]
    for _ in range(6):
        r = score(code.pipeline, {"response": f"```python\n{learner}```", "tests": {"cases": cases, "time_limit_s": 5}})
        assert (r.status, r.reward) == (Status.WRONG, 0.0), r.message
        assert r.details["passed"] == 0


def test_the_probe_finds_what_a_program_leaves_where_nothing_contains_it():
    # the control: the same two programs run bare, as one uid of the pool, do see each other's state
    import subprocess

    uid = 62999  # outside the default pool: no sandboxed run of another test has it
    bare = {"user": uid, "group": uid, "extra_groups": [], "capture_output": True, "timeout": 120, "cwd": "/tmp",
            "env": {"WALK_FROM": "/tmp"}}  # only /tmp: a walk of the whole host would leave marks everywhere
    try:
        subprocess.run([PY, "-I", "-S", "-c", WRITE], **bare)
        found = json.loads(subprocess.run([PY, "-I", "-S", "-c", READ], **bare).stdout)
        assert {"shm", "sem", "msg", "mqueue", "key-user", f"/tmp/{MARK}"} <= set(found)
    finally:
        subprocess.run(["ipcrm", "-M", str(KEY), "-S", str(KEY), "-Q", str(KEY)], capture_output=True)
        subprocess.run([PY, "-I", "-S", "-c", _IPC + "rt.mq_unlink(b'/' + MARK.encode())"], **bare)
        subprocess.run([PY, "-I", "-S", "-c", _IPC + "libc.syscall(SYS_KEYCTL, 7, -4)"], **bare)
        for folder in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock"):
            try:
                os.unlink(os.path.join(folder, MARK))
            except OSError:
                pass
