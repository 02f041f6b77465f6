"""The workload generator (planner/tracegen.py) against §3 and Figures 5-6 of the paper."""

from __future__ import annotations

import numpy as np
import pytest

from planner.eval import trace as tracefile
from planner.eval import tracestats
from planner.eval.tracegen import GeneratorParams, generate, outcome_mix

P = GeneratorParams()
SMALL = GeneratorParams(tasks=2, batches=6, batch_size=512)


@pytest.fixture(scope="module")
def colocated():
    return generate(SMALL, seed=11)


@pytest.fixture(scope="module")
def disaggregated():
    return generate(SMALL.with_(mode="disaggregated"), seed=11)


@pytest.fixture(scope="module")
def training_run():
    """One task over a whole training run, big batches: the outcome mix of Fig. 6(b)."""
    return generate(GeneratorParams(tasks=1, batches=11, batch_size=2048), seed=5)


def all_times(trace):
    return np.vstack([b.times for b in trace.batches])


def test_the_same_seed_gives_the_same_trace_and_another_seed_another():
    assert generate(SMALL, seed=3) == generate(SMALL, seed=3)
    assert generate(SMALL, seed=3) != generate(SMALL, seed=4)


def test_adding_tasks_leaves_the_first_tasks_unchanged():
    two, three = generate(SMALL, seed=3), generate(SMALL.with_(tasks=3), seed=3)
    assert two.batches_of("cuda-1") == three.batches_of("cuda-1")


def test_a_generated_trace_is_a_fixed_point_of_write_and_read(tmp_path, colocated):
    tracefile.write(tmp_path / "t.jsonl.gz", colocated)
    assert tracefile.read(tmp_path / "t.jsonl.gz") == colocated


def test_the_header_has_compile_on_cpu_and_execute_on_gpu_with_the_papers_timeouts(colocated):
    assert [(s.name, s.resource, s.cost, s.timeout_s) for s in colocated.stages] == [
        ("compile", "cpu", 1.0, 120.0), ("execute", "gpu", 8.0, 60.0)]


def test_every_task_has_its_batches_of_the_requested_size(colocated):
    assert colocated.tasks == ("cuda-0", "cuda-1")
    assert [b.batch for b in colocated.batches_of("cuda-1")] == list(range(6))
    assert {b.size for b in colocated.batches} == {512}


def test_the_six_tasks_start_within_the_window():
    trace = generate(GeneratorParams(batches=1, batch_size=16), seed=2)
    starts = [trace.batches_of(t)[0].start_s for t in trace.tasks]
    assert len(starts) == 6
    assert 0 <= min(starts) and max(starts) <= P.task_start_window_s
    assert len(set(starts)) == 6


def test_no_request_arrives_before_the_first_responses_are_generated(colocated):
    arrivals = np.concatenate([b.arrivals for b in colocated.batches])
    assert arrivals.min() >= P.first_arrival_s
    assert arrivals.max() <= P.max_rollout_s


def test_arrivals_rise_steeply_and_decay_into_a_long_tail(colocated):
    for b in colocated.batches:
        first, median, last = np.percentile(b.arrivals, [0, 50, 100])
        assert last - median > 2 * (median - first)
        counts, edges = np.histogram(b.arrivals, bins=np.arange(first, last + 10, 10))
        assert edges[np.argmax(counts)] < first + (last - first) / 3


def test_roughly_half_of_a_colocated_iteration_sees_no_arrival(colocated):
    for task in colocated.tasks:
        assert 0.4 <= tracestats.arrival_gap_fraction(colocated, task) <= 0.65


def test_a_colocated_iteration_lasts_over_600_s_and_the_next_rollout_waits_for_the_rewards(colocated):
    for task in colocated.tasks:
        batches = colocated.batches_of(task)
        for b, nxt in zip(batches, batches[1:]):
            completion = float((b.arrivals + b.times.sum(axis=1)).max())
            assert nxt.start_s - b.start_s >= completion
            assert nxt.start_s - b.start_s > 600


def test_adjacent_batches_of_a_task_have_alike_arrivals(colocated):
    for task in colocated.tasks:
        medians = [np.median(b.arrivals) for b in colocated.batches_of(task)]
        assert np.all(np.abs(np.diff(medians)) / medians[:-1] < 0.15)


def test_compile_takes_about_50_s_and_execute_a_few_seconds(colocated):
    times = all_times(colocated)
    compile_s, execute_s = times[:, 0][times[:, 0] > 0], times[:, 1][times[:, 1] > 0]
    assert 47 <= np.median(compile_s) <= 53
    assert 45 <= compile_s.mean() <= 60
    assert 2 <= np.median(execute_s) <= 5


def test_some_requests_run_to_the_timeout_of_each_stage(colocated):
    times = all_times(colocated)
    for j, stage in enumerate(colocated.stages):
        visited = times[:, j][times[:, j] > 0]
        at_timeout = np.mean(visited == stage.timeout_s)
        assert 0.005 <= at_timeout <= 0.1
        assert visited.max() <= stage.timeout_s


def test_outcomes_match_the_stages_each_request_visits(colocated):
    for b in colocated.batches:
        codes = np.array(list(b.outcomes))
        visited = b.times > 0
        assert not visited[codes == "g"].any()
        assert visited[codes == "c", 0].all() and not visited[codes == "c", 1].any()
        assert visited[np.isin(codes, ["e", "s"])].all()


def test_the_outcome_mix_follows_figure_6b_over_training(training_run):
    batches = training_run.batches_of("cuda-0")
    first, mid, last = (tracestats.outcome_shares(training_run, [b]) for b in (batches[0], batches[5], batches[-1]))
    for failed in ("generation failed", "compile failed"):
        assert first[failed] > mid[failed] > last[failed]
    assert mid["execute error"] > first["execute error"] and mid["execute error"] > last["execute error"]
    assert last["success"] > 2 * first["success"]
    expected = outcome_mix(P, 1.0)
    assert abs(last["success"] - expected[3]) < 0.05


def test_resource_demand_grows_over_training(training_run):
    batches = training_run.batches_of("cuda-0")
    busy = np.array([b.times.sum(axis=0) for b in batches])
    for j in range(2):
        slope = np.polyfit(np.arange(len(batches)), busy[:, j], 1)[0]
        assert slope > 0 and busy[-1, j] > 1.1 * busy[0, j]


def test_disaggregated_batches_follow_back_to_back_without_idle_gaps(colocated, disaggregated):
    for task in disaggregated.tasks:
        # Only the sparse end of a long tail leaves a short pause; colocated pauses last minutes.
        assert tracestats.longest_idle_gap(disaggregated, task) < 60
        assert tracestats.longest_idle_gap(colocated, task) > P.train_s
        assert tracestats.arrival_gap_fraction(disaggregated, task) < 0.25


def test_a_disaggregated_rollout_opens_before_the_previous_batchs_arrivals_end(disaggregated):
    for task in disaggregated.tasks:
        batches = disaggregated.batches_of(task)
        for b, nxt in zip(batches, batches[1:]):
            assert b.start_s < nxt.start_s < b.start_s + b.arrivals.max()


def test_the_time_scale_shrinks_every_time_including_the_timeouts():
    full, quick = generate(SMALL, seed=1), generate(SMALL.with_(time_scale=0.1), seed=1)
    assert quick.timeouts.tolist() == [12.0, 6.0]
    for a, b in zip(full.batches, quick.batches):
        assert b.start_s == pytest.approx(0.1 * a.start_s, abs=2e-3)
        assert np.allclose(b.requests, 0.1 * a.requests, atol=2e-3)


def test_the_bundled_traces_are_regenerated_byte_for_byte_by_the_commands_in_the_docstring():
    assert tracefile.read(tracefile.resolve("cuda-colocated")) == generate(P.with_(tasks=6, batches=12, batch_size=512), 1)
    assert tracefile.read(tracefile.resolve("demo")) == generate(
        P.with_(tasks=2, batches=5, batch_size=48, time_scale=0.03), 3)


def group_likeness(trace, g: int) -> tuple[float, float]:
    """Mean spread of log-arrivals within consecutive groups of g, and the share with the group's first outcome."""
    b = trace.batches[0]
    log = np.log(np.maximum(b.arrivals - P.first_arrival_s, 1e-3)).reshape(-1, g)
    codes = np.array(list(b.outcomes)).reshape(-1, g)
    return float(log.std(axis=1).mean()), float((codes == codes[:, :1]).mean())


def test_the_responses_of_a_grpo_group_arrive_alike_and_share_outcomes():
    one = GeneratorParams(tasks=1, batches=1, batch_size=4096)
    grouped = group_likeness(generate(one.with_(group_size=8, group_correlation=0.9), 2), 8)
    alone = group_likeness(generate(one, 2), 8)
    assert grouped[0] < 0.5 * alone[0]
    assert grouped[1] > alone[1] + 0.4


@pytest.mark.parametrize("change, message", [
    ({"mode": "async"}, "mode must be one of colocated, disaggregated"),
    ({"batch_size": 0}, "batch_size must be >= 1"),
    ({"compile_median_s": -1.0}, "compile_median_s must be >= 0"),
    ({"time_scale": 0.0}, "time_scale must be > 0"),
    ({"mix_end": (0.5, 0.5, 0.5, 0.5)}, "mix_end must be four shares"),
    ({"execute_slow_range_s": (10.0, 90.0)}, "execute_slow_range_s"),
    ({"max_rollout_s": 50.0}, "max_rollout_s must exceed first_arrival_s"),
    ({"group_size": 0}, "group_size must be >= 1"),
    ({"group_correlation": 1.5}, "group_correlation must be within"),
])
def test_invalid_parameters_are_rejected_with_the_reason(change, message):
    with pytest.raises(ValueError, match=message):
        GeneratorParams(**change)
