"""bench/cost.py's pairing: the order of the sides in a round, and the verdict against SandboxFusion measured in the
same run (issue 34's 0.8x targets)."""

from __future__ import annotations

import pytest

from bench import cost
from bench.cost_sf import SandboxFusion


def test_with_sandboxfusion_each_side_leads_one_round_in_three():
    firsts = [cost.sides(k, True)[0] for k in range(3)]
    assert sorted(firsts) == ["bare", "farm", "sf"]
    assert all(sorted(cost.sides(k, True)) == ["bare", "farm", "sf"] for k in range(6))


def test_without_sandboxfusion_the_farm_and_the_bare_side_alternate():
    assert [cost.sides(k, False) for k in range(3)] == [("farm", "bare"), ("bare", "farm"), ("farm", "bare")]


def test_a_short_workload_meets_its_target_at_0_8x_sandboxfusion_and_not_above():
    assert cost.same_run_sf("py_io", 20.0, [24.0, 25.0, 26.0], [50.0])["meets_sf_target"] is True
    over = cost.same_run_sf("py_io", 20.1, [24.0, 25.0, 26.0], [50.0])
    assert over["meets_sf_target"] is False
    assert over["sf_target_ms"] == 20.0 and over["farm_over_sf"] == 0.8


def test_cpp_is_compared_with_sandboxfusion_but_has_no_target():
    row = cost.same_run_sf("cpp", 250.0, [290.0], [7.0])
    assert row["farm_over_sf"] == 0.86 and "meets_sf_target" not in row


def test_a_row_sandboxfusion_did_not_run_has_no_same_run_figures():
    assert cost.same_run_sf("math", 30.0, [], []) == {}


def test_a_directory_that_is_not_a_sandboxfusion_checkout_is_refused(tmp_path):
    with pytest.raises(ValueError, match="not a SandboxFusion checkout"):
        SandboxFusion(tmp_path, "python3", "python3", 1)
