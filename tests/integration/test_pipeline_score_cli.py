"""`farm score`: one request in-process through the real pipelines, from a file or stdin."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from farm.app.cli.score import score

pytestmark = pytest.mark.timeout(60)

PAYLOAD = {"response": "The answer is \\boxed{\\frac{1}{2}}", "answer": "0.5"}


def test_json_output_has_reward_status_and_stages(tmp_path):
    path = tmp_path / "req.json"
    path.write_text(json.dumps(PAYLOAD))
    out = CliRunner().invoke(score, ["--pipeline", "math", "--input", str(path), "--json"])
    assert out.exit_code == 0, out.output
    result = json.loads(out.output)
    assert (result["reward"], result["status"]) == (1.0, "ok")
    assert [(s["name"], s["status"]) for s in result["stages"]] == [("verify", "passed")]
    assert {"seconds", "message"} <= set(result["stages"][0])


def test_stdin_and_a_readable_summary_with_the_failing_stage():
    payload = {"response": "```cpp\nint main() { return x; }\n```", "tests": [{"input": "", "output": "1"}]}
    out = CliRunner().invoke(score, ["--pipeline", "code", "--input", "-"], input=json.dumps(payload))
    assert out.exit_code == 0, out.output
    assert "status   compile_error (at stage compile)" in out.output and "reward   0" in out.output


def test_bad_json_and_unknown_pipelines_are_refused_with_a_reason():
    bad = CliRunner().invoke(score, ["--pipeline", "math", "--input", "-"], input="{nope")
    unknown = CliRunner().invoke(score, ["--pipeline", "nope", "--input", "-"], input="{}")
    not_object = CliRunner().invoke(score, ["--pipeline", "math", "--input", "-"], input="[1]")
    assert bad.exit_code == 2 and "not valid JSON" in bad.output
    assert unknown.exit_code == 2 and "unknown pipeline 'nope'" in unknown.output
    assert not_object.exit_code == 2 and "JSON object" in not_object.output


def test_an_invalid_payload_is_reported_not_crashed():
    out = CliRunner().invoke(score, ["--pipeline", "math", "--input", "-", "--json"], input='{"response": "x"}')
    assert out.exit_code == 0 and json.loads(out.output)["status"] == "invalid_input"
