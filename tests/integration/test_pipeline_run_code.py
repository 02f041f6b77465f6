"""The `run_code` pipeline in-process (workers.runner.score, the stage code the farm runs) in the real
sandbox: SandboxFusion's answers for Python and C++ programs, their stdin, files and limits.
Refusals of bad input, admission and the answer's shape without a sandbox: tests/unit/test_run_code_payload.py."""

from __future__ import annotations

import base64

import pytest

from farm.app.gateway.sandbox_fusion import RunCodeResponse
from farm.results import Outcome, Status
from workers.pipelines.code.run_code import pipeline
from workers.runner import score

pytestmark = pytest.mark.timeout(120)

MUL = "#include <iostream>\nint main() { int a, b; std::cin >> a >> b; std::cout << a * b; }"


def run(**payload):
    result = score(pipeline, {"language": "python", **payload})
    RunCodeResponse(**result.details)  # every answer is one SandboxFusion's clients can read
    return result, result.details


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_a_python_program_prints_hello_and_succeeds_with_reward_one():
    result, answer = run(code="print('hello')")
    assert (result.status, result.reward, result.outcome) == (Status.OK, 1.0, Outcome.SUCCESS)
    assert (answer["status"], answer["message"], answer["compile_result"], answer["files"]) == ("Success", "", None, {})
    assert answer["run_result"]["stdout"] == "hello\n" and answer["run_result"]["return_code"] == 0
    assert answer["run_result"]["status"] == "Finished" and answer["run_result"]["execution_time"] > 0
    assert answer["executor_pod_name"] == "in-process" and [s.name for s in result.stages] == ["run"]


def test_a_python_program_reads_its_stdin_and_its_output_comes_back():
    result, answer = run(code="import sys\nprint(sys.stdin.read().upper(), end='')", stdin="hello\nworld")
    assert result.status is Status.OK and answer["run_result"]["stdout"] == "HELLO\nWORLD"


def test_a_non_zero_exit_is_failed_as_a_runtime_error_with_its_return_code_and_stderr():
    result, answer = run(code="import sys\nsys.stderr.write('boom')\nsys.exit(3)")
    assert (result.status, result.reward, result.stage) == (Status.RUNTIME_ERROR, 0.0, "run")
    assert answer["status"] == "Failed" and answer["message"] == "exit status 3"
    assert (answer["run_result"]["return_code"], answer["run_result"]["stderr"]) == (3, "boom")


def test_an_uncaught_exception_is_failed_with_its_traceback_in_stderr():
    result, answer = run(code="raise ValueError('nope')")
    assert result.status is Status.RUNTIME_ERROR and answer["run_result"]["return_code"] == 1
    assert "ValueError: nope" in answer["run_result"]["stderr"]


def test_a_program_past_its_run_timeout_is_a_time_limit_exceeded_and_failed():
    result, answer = run(code="while True: pass", run_timeout=0.5)
    assert (result.status, result.reward, answer["status"]) == (Status.TIMEOUT, 0.0, "Failed")
    assert answer["run_result"]["status"] == "TimeLimitExceeded" and answer["run_result"]["return_code"] is None
    assert 0.5 <= answer["run_result"]["execution_time"] < 5


def test_a_cpp_program_is_compiled_then_run_and_both_results_come_back():
    result, answer = run(language="cpp", code=MUL, stdin="6 7")
    assert (result.status, result.reward, answer["status"]) == (Status.OK, 1.0, "Success")
    assert answer["run_result"]["stdout"] == "42" and [s.name for s in result.stages] == ["compile", "run"]
    assert answer["compile_result"]["status"] == "Finished" and answer["compile_result"]["return_code"] == 0


def test_a_cpp_compile_error_is_failed_with_the_compilers_words_and_no_run():
    result, answer = run(language="cpp", code="int main() { return undeclared_name; }")
    assert (result.status, result.stage, result.outcome) == (Status.COMPILE_ERROR, "compile", Outcome.COMPILE_FAILED)
    assert answer["status"] == "Failed" and answer["run_result"] is None
    assert answer["compile_result"]["return_code"] != 0 and "undeclared_name" in answer["compile_result"]["stderr"]
    assert answer["message"] == "g++ failed (exit status 1)" and [s.name for s in result.stages] == ["compile"]


def test_a_cpp_compile_past_its_compile_timeout_is_a_time_limit_and_no_run():
    result, answer = run(language="cpp", code=MUL, compile_timeout=0.001)
    assert (result.status, result.stage, answer["status"]) == (Status.TIMEOUT, "compile", "Failed")
    assert answer["compile_result"]["status"] == "TimeLimitExceeded" and answer["run_result"] is None


def test_a_cpp_program_that_crashes_returns_minus_its_signal():
    result, answer = run(language="cpp", code="int main() { volatile int *p = nullptr; return *p; }")
    assert result.status is Status.RUNTIME_ERROR and answer["status"] == "Failed"
    assert answer["run_result"]["return_code"] == -11 and "SIGSEGV" in answer["message"]


def test_files_are_placed_and_fetched_files_come_back_in_base64_under_the_names_asked():
    code = ("import os\ndata = open('in/data.txt').read()\nopen('out.txt', 'w').write(data[::-1])\n"
            "print(os.path.exists('skip.txt'))")
    result, answer = run(code=code, files={"in/data.txt": b64(b"abc"), "skip.txt": None},
                         fetch_files=["out.txt", "./out.txt"])
    assert result.status is Status.OK and answer["run_result"]["stdout"] == "False\n"
    assert answer["files"] == {"out.txt": b64(b"cba"), "./out.txt": b64(b"cba")}


def test_a_fetched_file_that_is_not_there_is_left_out_and_the_message_says_so():
    result, answer = run(code="open('made.bin', 'wb').write(bytes(range(256)))",
                         fetch_files=["made.bin", "missing.txt"])
    assert result.status is Status.OK and answer["status"] == "Success"
    assert answer["files"] == {"made.bin": b64(bytes(range(256)))} and "'missing.txt'" in answer["message"]


def test_a_fetched_name_that_leads_out_through_a_symlink_is_not_followed():
    code = "import os\nos.symlink('/etc', 'out')\nos.symlink('/etc/hostname', 'host')"
    result, answer = run(code=code, fetch_files=["out/hostname", "out/passwd", "host"])
    assert result.status is Status.OK and answer["files"] == {}


def test_a_python_program_imports_a_module_placed_beside_it_as_on_sandbox_fusion():
    result, answer = run(code="import helper\nprint(helper.VALUE)", files={"helper.py": b64(b"VALUE = 41 + 1")})
    assert result.status is Status.OK and answer["run_result"]["stdout"] == "42\n"


def test_a_cpp_program_includes_a_header_placed_beside_it():
    code = '#include "answer.h"\n#include <cstdio>\nint main() { printf("%d", ANSWER); }'
    result, answer = run(language="cpp", code=code, files={"answer.h": b64(b"#define ANSWER 42\n")})
    assert result.status is Status.OK and answer["run_result"]["stdout"] == "42"


def test_memory_limit_mb_caps_what_the_program_may_allocate():
    code = "x = bytearray(300 * 1024 * 1024)\nprint('allocated')"
    small, answer = run(code=code, memory_limit_MB=128)
    assert (small.status, answer["status"]) == (Status.RUNTIME_ERROR, "Failed")
    assert "MemoryError" in answer["run_result"]["stderr"]
    big, answer = run(code=code, memory_limit_MB=1024)
    assert big.status is Status.OK and answer["run_result"]["stdout"] == "allocated\n"


def test_output_that_is_not_utf8_comes_back_with_replacement_characters():
    result, answer = run(code="import sys\nsys.stdout.buffer.write(b'ok\\xff')")
    assert result.status is Status.OK and answer["run_result"]["stdout"] == "ok\ufffd"


def test_a_program_flooding_its_output_is_killed_and_what_comes_back_is_cut_at_one_mib():
    result, answer = run(code="import sys\nwhile True: sys.stdout.write('x' * 65536)")
    assert result.status is Status.RUNTIME_ERROR and answer["message"] == "output limit exceeded (killed)"
    assert len(answer["run_result"]["stdout"]) == 1 << 20


def test_the_program_runs_without_network_and_under_an_unprivileged_uid():
    code = ("import os, socket\nprint(os.getuid() != 0)\ntry:\n"
            "    socket.create_connection(('1.1.1.1', 53), timeout=2)\n    print('network')\n"
            "except OSError:\n    print('no network')")
    result, answer = run(code=code)
    assert result.status is Status.OK and answer["run_result"]["stdout"] == "True\nno network\n"


def test_a_language_the_farm_does_not_run_visits_no_stage_and_says_which_it_runs():
    result = score(pipeline, {"language": "go", "code": "package main"})
    assert (result.status, result.stages, result.reward) == (Status.INVALID_INPUT, (), 0.0)
    assert result.message == "language 'go' is not supported by this farm (supported: python, cpp)"


def test_a_worker_that_cannot_contain_code_fails_closed_with_a_sandbox_error(monkeypatch):
    from workers import sandbox
    from workers.sandbox import isolation

    def unavailable():
        raise sandbox.SandboxUnavailable("no namespaces here")

    monkeypatch.setattr(isolation, "mode", unavailable)  # a machine without namespaces, as test_pipeline_code does
    result, answer = run(code="print(1)")
    assert (result.status, result.stage, result.reward) == (Status.INFRA_ERROR, "run", 0.0)
    assert answer["status"] == "SandboxError" and "no namespaces here" in answer["message"]
    assert answer["run_result"] is None
