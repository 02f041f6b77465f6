"""The `run_code` pipeline without a sandbox: SandboxFusion's request checked and admitted
(workers.pipelines.code.run_code_payload, run_code.admit), and SandboxFusion's answer built from runs
(workers.pipelines.code.run_code_shape)."""

from __future__ import annotations

import base64
import signal

import pytest

from farm.app.gateway.sandbox_fusion import RunCodeResponse
from farm.app.gateway.sandbox_fusion import answer as gateway_answer
from farm.pipeline import InvalidInput
from farm.results import Status
from workers import sandbox
from workers.pipelines.code.run_code import SETUP_S, pipeline
from workers.pipelines.code.run_code_payload import (MAX_FILES, MAX_FILES_BYTES, MAX_TIMEOUT_S,
                                                     SANDBOX_FUSION_LANGUAGES, read)
from workers.pipelines.code.run_code_shape import OUTPUT_CAP, answer, command_result, run_status, sandbox_error
from workers.runner import score

PY = {"language": "python", "code": "print(1)"}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# -- the request


def test_a_bare_request_gets_sandbox_fusions_defaults_and_the_farms_default_memory():
    run = read(PY)
    assert (run.compile_timeout_s, run.run_timeout_s) == (10.0, 10.0)
    assert run.memory_bytes == 1024 * sandbox.MiB and run.stdin == b"" and run.files == {} and run.fetch == ()


def test_the_body_the_gateway_forwards_with_its_nulls_is_read_as_sandbox_fusion_reads_it():
    body = {"compile_timeout": 10.0, "run_timeout": 10.0, "memory_limit_MB": -1, "code": "x", "stdin": None,
            "language": "cpp", "files": {}, "fetch_files": []}
    run = read(body)
    assert run.language == "cpp" and run.stdin == b"" and run.memory_bytes == 1024 * sandbox.MiB


@pytest.mark.parametrize("asked,seconds", [(0.25, 0.25), (30, 30.0), (61, MAX_TIMEOUT_S), (1e9, MAX_TIMEOUT_S),
                                           (10 ** 400, MAX_TIMEOUT_S)])
def test_timeouts_beyond_the_farms_limit_are_cut_to_it(asked, seconds):
    run = read({**PY, "run_timeout": asked, "compile_timeout": asked})
    assert run.run_timeout_s == run.compile_timeout_s == seconds


@pytest.mark.parametrize("asked,mb", [(-1, 1024), (0, 1024), (-7, 1024), (1, 32), (128, 128), (512.0, 512),
                                      (10 ** 6, 4096)])
def test_memory_limit_mb_is_honoured_between_a_floor_and_a_ceiling(asked, mb):
    assert read({**PY, "memory_limit_MB": asked}).memory_bytes == mb * sandbox.MiB


def test_files_are_decoded_under_clean_paths_and_a_null_one_is_not_written():
    run = read({**PY, "files": {"./in//data.txt": b64(b"abc"), "skip.txt": None, "wrapped": "YWJj\nZGVm\n"}})
    assert run.files == {"in/data.txt": b"abc", "wrapped": b"abcdef"}


def test_fetched_files_keep_the_names_asked_beside_their_clean_paths():
    assert read({**PY, "fetch_files": ["out.txt", "./d/x"]}).fetch == (("out.txt", "out.txt"), ("./d/x", "d/x"))


def test_every_sandbox_fusion_language_is_read_and_only_python_and_cpp_are_run():
    assert {lang for lang in SANDBOX_FUSION_LANGUAGES if read({"language": lang, "code": ""}).supported} == \
        {"python", "cpp"}


_HUGE = b64(b"\0" * (MAX_FILES_BYTES // 2 + 1))


@pytest.mark.parametrize("payload,message", [
    ({"language": "python"}, "'code' (a string) is required, not null"),
    ({"language": "python", "code": 5}, "'code' (a string) is required, not int"),
    ({"code": "x"}, "'language' (a string) is required, not null"),
    ({"code": "x", "language": ["python"]}, "'language' (a string) is required, not list"),
    ({"code": "x", "language": "klingon"}, "'language' 'klingon' is not one of SandboxFusion's languages"),
    ({**PY, "stdin": 5}, "'stdin' must be a string or null, not int"),
    ({**PY, "run_timeout": -1}, "'run_timeout' must be a finite number of seconds > 0, not -1"),
    ({**PY, "run_timeout": 0}, "'run_timeout' must be a finite number of seconds > 0, not 0"),
    ({**PY, "compile_timeout": float("nan")}, "'compile_timeout' must be a finite number of seconds > 0, not nan"),
    ({**PY, "compile_timeout": float("inf")}, "'compile_timeout' must be a finite number of seconds > 0, not inf"),
    ({**PY, "run_timeout": "10"}, "'run_timeout' must be a finite number of seconds > 0, not '10'"),
    ({**PY, "run_timeout": True}, "'run_timeout' must be a finite number of seconds > 0, not True"),
    ({**PY, "memory_limit_MB": "lots"}, "'memory_limit_MB' must be a whole number of MB (-1: the farm's default)"),
    ({**PY, "memory_limit_MB": 1.5}, "'memory_limit_MB' must be a whole number of MB"),
    ({**PY, "memory_limit_MB": float("inf")}, "'memory_limit_MB' must be a whole number of MB"),
    ({**PY, "files": ["a"]}, "'files' must be an object of relative path -> base64 content, not list"),
    ({**PY, "files": {f"f{i}": "" for i in range(MAX_FILES + 1)}}, "'files' holds 65 files, over the limit of 64"),
    ({**PY, "files": {"/etc/x": ""}}, "'files' path '/etc/x' is absolute"),
    ({**PY, "files": {"../x": ""}}, "'files' path '../x' contains '..'"),
    ({**PY, "files": {"a/../../x": ""}}, "'files' path 'a/../../x' contains '..'"),
    ({**PY, "files": {"a/../b": ""}}, "'files' path 'a/../b' contains '..'"),
    ({**PY, "files": {"./": ""}}, "'files' path './' names the working directory itself"),
    ({**PY, "files": {"": ""}}, "'files' path '' must be a path of 1-255 characters without NUL"),
    ({**PY, "files": {"a\0b": ""}}, "must be a path of 1-255 characters without NUL"),
    ({**PY, "files": {"x" * 256: ""}}, "must be a path of 1-255 characters without NUL"),
    ({**PY, "files": {"a": "***"}}, "'files' 'a' is not valid base64"),
    ({**PY, "files": {"a": "YWJ"}}, "'files' 'a' is not valid base64"),
    ({**PY, "files": {"a": 5}}, "'files' 'a' must be base64 text or null, not int"),
    ({**PY, "files": {"a": _HUGE, "b": _HUGE}}, "'files' hold over 16 MiB decoded, the limit"),
    ({**PY, "files": {"main.py": ""}}, "'files' path 'main.py' would replace the program's own 'main.py'"),
    ({"language": "cpp", "code": "", "files": {"./main": ""}}, "'files' path './main' would replace the program"),
    ({"language": "cpp", "code": "", "files": {"main.cpp": ""}}, "would replace the program's own 'main.cpp'"),
    ({**PY, "files": {"a": "", "./a": ""}}, "'files' paths 'a' and './a' name the same file"),
    ({**PY, "files": {"a": "", "a/b": ""}}, "'files' path 'a/b' is under 'a', which is a file"),
    ({**PY, "files": {"main.py/x": ""}}, "'files' path 'main.py/x' is under 'main.py', which is a file"),
    ({**PY, "fetch_files": "out.txt"}, "'fetch_files' must be a list of relative paths, not str"),
    ({**PY, "fetch_files": ["x"] * (MAX_FILES + 1)}, "'fetch_files' names 65 files, over the limit of 64"),
    ({**PY, "fetch_files": ["/etc/passwd"]}, "'fetch_files' path '/etc/passwd' is absolute"),
    ({**PY, "fetch_files": ["../../etc/passwd"]}, "'fetch_files' path '../../etc/passwd' contains '..'"),
    ({**PY, "fetch_files": [7]}, "'fetch_files' path 7 must be a path of 1-255 characters"),
])
def test_each_kind_of_bad_input_is_refused_saying_exactly_what_was_wrong(payload, message):
    with pytest.raises(InvalidInput) as refused:
        read(payload)
    assert message in str(refused.value)
    result = score(pipeline, payload)  # what a trainer gets back: invalid_input with that message, no stage run
    assert (result.status, result.stages) == (Status.INVALID_INPUT, ()) and message in result.message


# -- admission


def test_python_visits_the_run_stage_only_and_cpp_is_compiled_first():
    assert pipeline.checked_admit(PY).stages == ("run",)
    assert pipeline.checked_admit({"language": "cpp", "code": ""}).stages == ("compile", "run")


def test_a_language_the_farm_does_not_run_finishes_at_admission_saying_which_it_runs():
    admission = pipeline.checked_admit({"language": "go", "code": "package main"})
    assert (admission.stages, admission.status, admission.reward) == ((), Status.INVALID_INPUT, 0.0)
    assert admission.message == "language 'go' is not supported by this farm (supported: python, cpp)"


def test_a_language_the_farm_does_not_run_comes_back_from_the_gateway_as_a_sandbox_error():
    reply = gateway_answer(score(pipeline, {"language": "java", "code": "class A {}"}))
    assert RunCodeResponse(**reply).status == "SandboxError"
    assert reply["message"] == "language 'java' is not supported by this farm (supported: python, cpp)"
    assert (reply["compile_result"], reply["run_result"], reply["files"]) == (None, None, {})


def test_the_stage_timeouts_leave_room_for_the_longest_run_a_payload_may_ask():
    for stage in pipeline.stages:
        assert stage.timeout_s == MAX_TIMEOUT_S + SETUP_S and stage.resource == "cpu"


# -- the answer


def _run(**kw) -> sandbox.RunResult:
    args = {"returncode": 0, "signal": None, "stdout": b"", "stderr": b"", "wall_s": 0.5, **kw}
    return sandbox.RunResult(**args)


def test_a_finished_run_is_a_command_run_result_with_its_exit_status_and_output():
    assert command_result(_run(returncode=3, stdout=b"out", stderr=b"err")) == {
        "status": "Finished", "execution_time": 0.5, "return_code": 3, "stdout": "out", "stderr": "err"}


def test_a_run_past_its_time_limit_has_no_return_code_as_in_sandbox_fusion():
    result = command_result(_run(returncode=None, signal=signal.SIGKILL, timed_out=True))
    assert (result["status"], result["return_code"]) == ("TimeLimitExceeded", None)


def test_a_run_ended_by_a_signal_returns_minus_the_signal():
    assert command_result(_run(returncode=None, signal=signal.SIGSEGV))["return_code"] == -signal.SIGSEGV


def test_output_is_decoded_with_replacement_and_cut_at_one_mib():
    result = command_result(_run(stdout=b"\xff" + b"a" * (2 * OUTPUT_CAP), stderr=b"caf\xc3\xa9"))
    assert result["stdout"].startswith("\ufffda") and len(result["stdout"]) == OUTPUT_CAP
    assert result["stderr"] == "café"


@pytest.mark.parametrize("compile_status,compile_code,run_status_,run_code,expected", [
    (None, None, "Finished", 0, "Success"),
    ("Finished", 0, "Finished", 0, "Success"),
    (None, None, "Finished", 1, "Failed"),
    (None, None, "Finished", -9, "Failed"),
    (None, None, "TimeLimitExceeded", None, "Failed"),
    ("Finished", 1, None, None, "Failed"),
    ("TimeLimitExceeded", None, None, None, "Failed"),
    ("Finished", 0, "Error", None, "SandboxError"),
    ("Error", None, None, None, "SandboxError"),
])
def test_the_answers_status_follows_sandbox_fusions_rules(compile_status, compile_code, run_status_, run_code,
                                                          expected):
    compiled = {"status": compile_status, "return_code": compile_code} if compile_status else None
    ran = {"status": run_status_, "return_code": run_code} if run_status_ else None
    assert run_status(compiled, ran) == expected


def test_the_answer_has_sandbox_fusions_fields_and_the_worker_as_its_pod():
    ran = command_result(_run(stdout=b"hi"))
    reply = answer("w1", run_result=ran, files={"a": "Yg=="})
    assert RunCodeResponse(**reply).status == "Success"
    assert reply == {"status": "Success", "message": "", "compile_result": None, "run_result": ran,
                     "executor_pod_name": "w1", "files": {"a": "Yg=="}}
    assert sandbox_error("", "no sandbox")["status"] == "SandboxError"
    assert sandbox_error("", "no sandbox")["executor_pod_name"] is None
    with pytest.raises(ValueError):
        answer("w1", status="Crashed")
