"""A worker of a stage that runs untrusted code says at its start what contains that code, and refuses to
start where nothing can."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from farm.app.cli import main
from workers.sandbox import isolation


@pytest.fixture
def uncontainable(monkeypatch):
    monkeypatch.setattr(isolation, "_why_not_contained", lambda: "no cgroup hierarchy for per-run limits: test")
    monkeypatch.delenv("FARM_SANDBOX_ALLOW_UNCONTAINED", raising=False)
    isolation.mode.cache_clear()
    yield
    isolation.mode.cache_clear()


def test_a_worker_of_a_contained_stage_refuses_to_start_where_nothing_can_contain_its_code(uncontainable):
    result = CliRunner().invoke(main, ["worker", "--stage", "code.run"])
    assert result.exit_code == 1
    assert "refused to start" in result.output and "no cgroup hierarchy for per-run limits" in result.output


@pytest.mark.skipif(os.geteuid() != 0, reason="the full sandbox needs root")
def test_the_sandbox_says_what_contains_the_code_it_runs():
    line = isolation.describe()
    assert "bubblewrap" in line and "allow-list root" in line and "cgroup v" in line


def test_stages_that_run_untrusted_code_are_marked_and_the_others_are_not():
    from farm import registry

    marked = {f"{p}.{s}" for p in ("code", "math", "run_code", "cuda", "synthetic")
              for s in [stage.name for stage in registry.get(p).stages]
              if getattr(registry.stage_by_queue(f"{p}.{s}")[1].run, "contained", False)}
    assert marked == {"code.compile", "code.run", "math.verify", "run_code.compile", "run_code.run", "cuda.compile",
                      "cuda.execute"}
