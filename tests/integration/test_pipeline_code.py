"""The `code` pipeline in-process (workers.runner.score, the stage code the farm runs): HumanEval and I/O judging."""

from __future__ import annotations

import json

import pytest

from farm.results import Outcome, Status
from workers.pipelines.code import pipeline
from workers.runner import score
from workers.testcases import DirectoryStore, HumanEvalStore, Problem, ProblemNotFound

pytestmark = pytest.mark.timeout(120)

HUMANEVAL = HumanEvalStore()
IDS = HUMANEVAL.ids()
ADD = "```cpp\n#include <iostream>\nint main() { long a, b; std::cin >> a >> b; std::cout << a + b << std::endl; }\n```"
CASES = [{"input": "1 2\n", "output": "3\n"}, {"input": "5 5\n", "output": "10"}, {"input": "7 1\n", "output": "9\n"}]


def _canonical(pid: str) -> str:
    return HUMANEVAL.raw(pid)["canonical_solution"]


def _without_last_line(pid: str) -> str:
    lines = [line for line in _canonical(pid).rstrip().split("\n")]
    return "\n".join(lines[:-1]) + "\n"


def _with_wrong_return(pid: str) -> str:
    entry = HUMANEVAL.raw(pid)["entry_point"]
    return _canonical(pid) + (
        f"\n\n_farm_right = {entry}\n"
        f"def {entry}(*args, **kwargs):\n"
        "    r = _farm_right(*args, **kwargs)\n"
        "    if isinstance(r, bool): return not r\n"
        "    if isinstance(r, (int, float)): return r + 1\n"
        "    if isinstance(r, str): return r + 'x'\n"
        "    if isinstance(r, (list, tuple)): return type(r)(list(r) + list(r[:1] or [1]))\n"
        "    return 1 if r is None else None\n"
    )


def test_humaneval_ships_its_164_problems():
    assert len(IDS) == 164 and IDS[0] == "HumanEval/0" and IDS[-1] == "HumanEval/163"


@pytest.mark.slow
def test_every_humaneval_canonical_solution_scores_one():
    failed = {pid: r.message for pid in IDS if (r := score(pipeline, {"response": _canonical(pid), "problem": pid})).reward != 1.0}
    assert failed == {}


@pytest.mark.slow
def test_every_humaneval_solution_without_its_last_line_scores_zero():
    results = {pid: score(pipeline, {"response": _without_last_line(pid), "problem": pid}) for pid in IDS}
    assert {pid: r.reward for pid, r in results.items() if r.reward != 0.0} == {}
    allowed = {Status.WRONG, Status.RUNTIME_ERROR, Status.COMPILE_ERROR}
    assert {pid: r.status for pid, r in results.items() if r.status not in allowed} == {}


@pytest.mark.slow
def test_every_humaneval_solution_with_a_wrong_return_value_is_wrong():
    results = {pid: score(pipeline, {"response": _with_wrong_return(pid), "problem": pid}) for pid in IDS}
    assert {pid: (r.status, r.message[-300:]) for pid, r in results.items() if r.status is not Status.WRONG or r.reward} == {}
    assert all(r.stage == "run" and r.outcome is Outcome.EXECUTE_ERROR for r in results.values())


def test_a_fenced_full_definition_is_judged_against_the_prompt():
    code = "```python\ndef add(x: int, y: int):\n    return x + y\n```"
    assert score(pipeline, {"response": code, "problem": "HumanEval/53"}).status is Status.OK


def test_a_python_syntax_error_is_a_compile_error():
    r = score(pipeline, {"response": "    return (", "problem": "HumanEval/53"})
    assert r.status is Status.COMPILE_ERROR and r.outcome is Outcome.COMPILE_FAILED


def test_exiting_early_with_status_zero_does_not_pass():
    r = score(pipeline, {"response": "    import os; os._exit(0)\n", "problem": "HumanEval/53"})
    assert (r.status, r.reward) == (Status.RUNTIME_ERROR, 0.0) and "ended during call 1" in r.message


def test_a_response_without_code_visits_no_stage():
    r = score(pipeline, {"response": "  \n", "problem": "HumanEval/0"})
    assert (r.status, r.outcome, r.stages) == (Status.WRONG, Outcome.GENERATION_FAILED, ())


def test_cpp_is_compiled_then_run_against_every_case():
    r = score(pipeline, {"response": ADD, "tests": CASES[:2]})
    assert r.status is Status.OK and [s.name for s in r.stages] == ["compile", "run"]
    assert r.details["passed"] == 2


def test_all_or_nothing_stops_at_the_first_failing_case_and_names_it():
    r = score(pipeline, {"response": ADD, "tests": CASES})
    assert (r.status, r.reward, r.stage) == (Status.WRONG, 0.0, "run")
    assert r.details["first_failure"]["case"] == 2 and r.details["first_failure"]["got"].strip() == "8"


def test_fraction_mode_rewards_the_share_of_cases_passed():
    r = score(pipeline, {"response": ADD, "tests": CASES, "reward": "fraction"})
    assert r.status is Status.WRONG and r.reward == pytest.approx(2 / 3)


def test_a_cpp_compile_error_stops_at_compile():
    r = score(pipeline, {"response": "```cpp\nint main() { return x; }\n```", "tests": CASES})
    assert (r.status, r.stage, r.outcome) == (Status.COMPILE_ERROR, "compile", Outcome.COMPILE_FAILED)
    assert "was not declared" in r.message


def test_python_reads_stdin_and_crashes_are_runtime_errors():
    ok = score(pipeline, {"response": "```python\na, b = map(int, input().split())\nprint(a + b)\n```", "tests": CASES[:2]})
    crash = score(pipeline, {"response": "```python\nraise SystemExit(3)\n```", "tests": CASES[:1]})
    assert ok.status is Status.OK and [s.name for s in ok.stages] == ["run"]
    assert crash.status is Status.RUNTIME_ERROR and crash.details["first_failure"]["message"] == "exit status 3"


def test_problems_come_from_the_configured_directory_store(tmp_path, monkeypatch):
    (tmp_path / "sum").mkdir()
    (tmp_path / "sum" / "two.json").write_text(json.dumps({"cases": CASES[:2], "time_limit_s": 2}))
    monkeypatch.setenv("FARM_TESTCASES", f"dir:{tmp_path}")
    r = score(pipeline, {"response": ADD, "problem": "sum/two"})
    assert r.status is Status.OK and [s.name for s in r.stages] == ["compile", "fetch_tests", "run"]


def test_an_unknown_problem_is_invalid_input_not_the_models_fault(tmp_path):
    with pytest.raises(ProblemNotFound):
        DirectoryStore(str(tmp_path)).get("missing")
    r = score(pipeline, {"response": "    return 1\n", "problem": "HumanEval/999"})
    assert r.status is Status.INVALID_INPUT and "HumanEval/999" in r.message


@pytest.mark.parametrize("payload, words", [
    ({"problem": "HumanEval/0"}, "'response'"),
    ({"response": "x", "problem": "HumanEval/0", "language": "rust"}, "language"),
    ({"response": "x", "problem": "HumanEval/0", "reward": "most"}, "reward"),
    ({"response": "x"}, "exactly one of"),
    ({"response": "x", "tests": [{"input": "1"}]}, "case 0"),
    ({"response": "x", "problem": "../etc/passwd"}, "problem id"),
])
def test_a_malformed_payload_is_refused_with_a_reason(payload, words):
    r = score(pipeline, payload)
    assert r.status is Status.INVALID_INPUT and words in r.message


def test_a_problem_needs_cases_or_a_check_program():
    with pytest.raises(ValueError, match="needs 'cases' or a 'test'"):
        Problem.from_dict({"cases": []})


def test_a_worker_that_cannot_contain_code_fails_closed(monkeypatch):
    from workers import sandbox
    from workers.sandbox import isolation

    def unavailable():
        raise sandbox.SandboxUnavailable("no namespaces here")

    monkeypatch.setattr(isolation, "mode", unavailable)
    r = score(pipeline, {"response": "    return 1\n", "problem": "HumanEval/53"})
    assert (r.status, r.stage, r.reward) == (Status.INFRA_ERROR, "run", 0.0) and "no namespaces here" in r.message


def test_problems_come_from_an_http_store_and_a_missing_one_is_not_found():
    import http.server
    import threading

    from workers.testcases import HttpStore

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            found = self.path == "/sum/two"
            body = json.dumps({"cases": CASES[:1]}).encode() if found else b""
            self.send_response(200 if found else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        store = HttpStore(f"http://127.0.0.1:{server.server_port}")
        assert store.get("sum/two").cases[0].output == "3\n"
        with pytest.raises(ProblemNotFound):
            store.get("sum/three")
    finally:
        server.shutdown()
