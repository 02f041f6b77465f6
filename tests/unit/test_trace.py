"""The reward-trace/1 reader and writer (planner/trace.py)."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from farm.pipeline import RESOURCES
from planner.eval import trace as tracefile
from planner.eval.trace import Trace, TraceBatch, TraceError, TraceStage

STAGES = (TraceStage("compile", "cpu", 1.0, 120.0), TraceStage("execute", "gpu", 8.0, 60.0))
HEADER = {"format": "reward-trace/1", "stages": [
    {"name": "compile", "resource": "cpu", "cost": 1.0, "timeout_s": 120.0},
    {"name": "execute", "resource": "gpu", "cost": 8.0, "timeout_s": 60.0},
]}


def batch_line(task="cuda-0", batch=0, start_s=0.0, requests=None, **extra):
    line = {"task": task, "batch": batch, "start_s": start_s,
            "requests": [[151.2, 48.9, 3.1], [160.0, 0, 0]] if requests is None else requests}
    line.update(extra)
    return line


def write_lines(path, *objects):
    path.write_text("\n".join(o if isinstance(o, str) else json.dumps(o) for o in objects) + "\n")
    return path


def sample_trace() -> Trace:
    return Trace(stages=STAGES, batches=(
        TraceBatch("cuda-1", 0, 30.0, np.array([[120.5, 50.0, 2.5], [130.0, 120.0, 0.0]]), outcomes="ec"),
        TraceBatch("cuda-0", 1, 700.25, np.array([[110.0, 0.0, 0.0]])),
        TraceBatch("cuda-0", 0, 0.0, np.array([[101.0, 49.5, 60.0], [140.0, 51.0, 3.0], [90.0, 0.0, 0.0]])),
    ))


@pytest.mark.parametrize("name", ["t.jsonl", "t.jsonl.gz"])
def test_a_written_trace_reads_back_equal(tmp_path, name):
    trace = sample_trace()
    tracefile.write(tmp_path / name, trace)
    assert tracefile.read(tmp_path / name) == trace


def test_a_gz_name_writes_gzip_and_a_plain_name_writes_text(tmp_path):
    tracefile.write(tmp_path / "t.jsonl.gz", sample_trace())
    tracefile.write(tmp_path / "t.jsonl", sample_trace())
    assert gzip.decompress((tmp_path / "t.jsonl.gz").read_bytes()) == (tmp_path / "t.jsonl").read_bytes()


def test_writing_the_same_trace_twice_gives_the_same_bytes(tmp_path):
    for name in ("a.jsonl.gz", "b.jsonl.gz"):
        tracefile.write(tmp_path / name, sample_trace())
    assert (tmp_path / "a.jsonl.gz").read_bytes() == (tmp_path / "b.jsonl.gz").read_bytes()


def test_the_writer_rounds_to_milliseconds_but_keeps_a_tiny_visited_stage_visited(tmp_path):
    trace = Trace(STAGES, (TraceBatch("t", 0, 1.23456, np.array([[1.00049, 0.0001, 0.0]])),))
    tracefile.write(tmp_path / "t.jsonl", trace)
    back = tracefile.read(tmp_path / "t.jsonl").batches[0]
    assert back.start_s == 1.235
    assert back.requests.tolist() == [[1.0, 0.001, 0.0]]


def test_the_header_is_the_first_line_in_the_documented_format(tmp_path):
    tracefile.write(tmp_path / "t.jsonl", sample_trace())
    first = json.loads((tmp_path / "t.jsonl").read_text().splitlines()[0])
    assert first == HEADER


def test_batches_are_sorted_by_start_then_task_then_batch():
    trace = sample_trace()
    assert [(b.task, b.batch) for b in trace.batches] == [("cuda-0", 0), ("cuda-1", 0), ("cuda-0", 1)]


def test_the_helpers_give_tasks_batches_of_a_task_and_request_counts():
    trace = sample_trace()
    assert trace.tasks == ("cuda-0", "cuda-1")
    assert [b.batch for b in trace.batches_of("cuda-0")] == [0, 1]
    assert trace.num_requests == 6
    first = trace.batches_of("cuda-0")[0]
    assert first.size == 3
    assert first.arrivals.tolist() == [101.0, 140.0, 90.0]
    assert first.times.shape == (3, 2)
    assert trace.timeouts.tolist() == [120.0, 60.0]


def test_a_batchs_requests_cannot_be_modified_in_place():
    batch = sample_trace().batches[0]
    with pytest.raises(ValueError):
        batch.requests[0, 0] = 5.0


def test_a_trace_rejects_requests_whose_width_does_not_match_its_stages():
    with pytest.raises(TraceError, match="expected 3"):
        Trace(STAGES, (TraceBatch("t", 0, 0.0, np.array([[1.0, 2.0]])),))


def test_a_trace_built_in_memory_is_checked_like_a_file_so_it_can_be_written_and_read():
    with pytest.raises(TraceError, match="exceeds its stage's timeout"):
        Trace(STAGES, (TraceBatch("t", 0, 0.0, np.array([[1.0, 2.0, 61.0]])),))
    with pytest.raises(TraceError, match="finite numbers >= 0"):
        TraceBatch("t", 0, 0.0, np.array([[1.0, np.nan, 0.0]]))
    with pytest.raises(TraceError, match="start_s"):
        TraceBatch("t", 0, -1.0, np.array([[1.0, 2.0, 0.0]]))
    with pytest.raises(TraceError, match="n >= 1"):
        TraceBatch("t", 0, 0.0, np.zeros((0, 3)))
    with pytest.raises(TraceError, match="'outcomes'"):
        TraceBatch("t", 0, 0.0, np.array([[1.0, 2.0, 0.0]]), outcomes="gg")


def test_unknown_keys_in_the_header_stages_and_batches_are_ignored(tmp_path):
    header = json.loads(json.dumps(HEADER))
    header["producer"] = "recorder 1.2"
    header["stages"][0]["image"] = "nvcc:12"
    path = write_lines(tmp_path / "t.jsonl", header, batch_line(trainer="verl", tokens=[1, 2]))
    trace = tracefile.read(path)
    assert trace.stages == STAGES
    assert trace.batches[0].requests.tolist() == [[151.2, 48.9, 3.1], [160.0, 0.0, 0.0]]


def test_blank_lines_are_skipped_and_lines_keep_their_numbers_in_errors(tmp_path):
    path = write_lines(tmp_path / "t.jsonl", HEADER, "", batch_line(), "   ", batch_line(batch="x"))
    with pytest.raises(TraceError, match=r"t\.jsonl:5: 'batch'"):
        tracefile.read(path)


def test_a_gzip_file_is_recognised_by_its_content(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(gzip.compress((json.dumps(HEADER) + "\n" + json.dumps(batch_line()) + "\n").encode()))
    assert tracefile.read(path).num_requests == 2


def test_a_header_only_trace_has_no_batches(tmp_path):
    trace = tracefile.read(write_lines(tmp_path / "t.jsonl", HEADER))
    assert trace.batches == () and trace.tasks == ()


def _header(**stage0):
    header = json.loads(json.dumps(HEADER))
    header["stages"][0].update(stage0)
    return header


MALFORMED_HEADERS = {
    "invalid JSON": ("{not json", "invalid JSON"),
    "not an object": ("[1, 2]", "must be a JSON object"),
    "wrong format": ({"format": "reward-trace/2", "stages": HEADER["stages"]}, "not a reward-trace/1 trace"),
    "no stages": ({"format": "reward-trace/1", "stages": []}, "non-empty list"),
    "stage not an object": ({"format": "reward-trace/1", "stages": ["compile"]}, "must be an object"),
    "stage without a name": (_header(name=""), "'name'"),
    "unknown resource": (_header(resource="tpu"), "'resource' must be one of cpu, gpu, io"),
    "zero cost": (_header(cost=0), "'cost' must be a finite number > 0"),
    "negative timeout": (_header(timeout_s=-1), "'timeout_s' must be a finite number > 0"),
    "string timeout": (_header(timeout_s="120"), "'timeout_s'"),
    "duplicate stage names": (_header(name="execute"), "unique, repeated: execute"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED_HEADERS))
def test_a_malformed_header_is_rejected_naming_line_1(tmp_path, case):
    header, message = MALFORMED_HEADERS[case]
    path = write_lines(tmp_path / "t.jsonl", header, batch_line())
    with pytest.raises(TraceError) as err:
        tracefile.read(path)
    assert f"{path}:1:" in str(err.value)
    assert message in str(err.value)


MALFORMED_BATCHES = {
    "invalid JSON": ('{"task": "cuda-0", "batch": 1,', "invalid JSON"),
    "not an object": ("[1, 2, 3]", "must be a JSON object"),
    "missing task": (batch_line(task=None), "'task' must be a non-empty string"),
    "task not a string": (batch_line(task=3), "'task'"),
    "batch not an integer": (batch_line(batch=1.5), "'batch' must be an integer"),
    "batch a boolean": (batch_line(batch=True), "'batch' must be an integer"),
    "negative batch": (batch_line(batch=-1), "'batch' must be an integer >= 0"),
    "missing start": (batch_line(start_s=None), "'start_s'"),
    "negative start": (batch_line(start_s=-5), "'start_s' must be a finite number >= 0"),
    "no requests": (batch_line(requests=[]), "'requests' must be a non-empty list"),
    "requests not a list": (batch_line(requests={"a": 1}), "'requests' must be a non-empty list"),
    "request too short": (batch_line(requests=[[1.0, 2.0]]), "request 0 must be a list of 3 numbers"),
    "request too long": (batch_line(requests=[[1, 2, 3], [1, 2, 3, 4]]), "request 1 must be a list of 3"),
    "negative time": (batch_line(requests=[[1.0, -2.0, 0.0]]), "finite numbers >= 0"),
    "negative arrival": (batch_line(requests=[[-1.0, 2.0, 0.0]]), "finite numbers >= 0"),
    "NaN time": ('{"task": "t", "batch": 0, "start_s": 0, "requests": [[1, NaN, 0]]}', "finite numbers >= 0"),
    "string time": (batch_line(requests=[[1.0, "2", 0.0]]), "finite numbers >= 0"),
    "over the timeout": (batch_line(requests=[[1.0, 50.0, 60.5]]), "exceeds its timeout 60 s"),
    "bad outcomes": (batch_line(outcomes="gx"), "'outcomes' must be a string of 2 characters"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED_BATCHES))
def test_a_malformed_batch_is_rejected_naming_its_line(tmp_path, case):
    line, message = MALFORMED_BATCHES[case]
    path = write_lines(tmp_path / "t.jsonl", HEADER, batch_line(batch=0), line)
    with pytest.raises(TraceError) as err:
        tracefile.read(path)
    assert f"{path}:3:" in str(err.value)
    assert message in str(err.value)


def test_a_repeated_task_and_batch_is_rejected_naming_both_lines(tmp_path):
    path = write_lines(tmp_path / "t.jsonl", HEADER, batch_line(), batch_line(task="cuda-1"), batch_line())
    with pytest.raises(TraceError, match=r":4: batch 'cuda-0'/0 already appeared on line 2"):
        tracefile.read(path)


def test_a_time_equal_to_the_timeout_is_accepted_as_killed_there(tmp_path):
    path = write_lines(tmp_path / "t.jsonl", HEADER, batch_line(requests=[[1.0, 120.0, 0.0], [2.0, 50.0, 60.0]]))
    assert tracefile.read(path).batches[0].times.max(axis=0).tolist() == [120.0, 60.0]


def test_an_empty_file_is_rejected(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("")
    with pytest.raises(TraceError, match="empty file"):
        tracefile.read(path)


def test_a_missing_file_is_a_trace_error_naming_it(tmp_path):
    with pytest.raises(TraceError, match="nope.jsonl: cannot open"):
        tracefile.read(tmp_path / "nope.jsonl")


def test_a_truncated_gzip_file_is_a_trace_error(tmp_path):
    path = tmp_path / "t.jsonl.gz"
    tracefile.write(path, sample_trace())
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(TraceError, match="cannot read"):
        tracefile.read(path)


@pytest.mark.parametrize("name", tracefile.BUNDLED)
def test_every_bundled_trace_loads_and_validates(name):
    trace = tracefile.read(tracefile.bundled(name))
    assert trace.num_requests > 0
    assert [s.name for s in trace.stages] == ["compile", "execute"]


def test_an_unknown_bundled_name_lists_the_bundled_traces():
    with pytest.raises(ValueError, match="cuda-colocated, cuda-disaggregated, demo"):
        tracefile.bundled("cuda-huge")


def test_resolve_prefers_an_existing_file_and_falls_back_to_a_bundled_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert tracefile.resolve("demo") == tracefile.bundled("demo")
    (tmp_path / "demo").write_text("")
    assert tracefile.resolve("demo").resolve() == (tmp_path / "demo").resolve()
    assert str(tracefile.resolve("other.jsonl")) == "other.jsonl"


@st.composite
def traces(draw):
    """Valid traces of any shape, with times at millisecond precision (what a file holds)."""
    timeouts = draw(st.lists(st.integers(1, 200_000), min_size=1, max_size=3))
    stages = tuple(TraceStage(f"s{j}", draw(st.sampled_from(RESOURCES)), draw(st.integers(1, 16)) / 2,
                              t / 1000) for j, t in enumerate(timeouts))
    keys = draw(st.lists(st.tuples(st.sampled_from(["a", "b", "é task"]), st.integers(0, 5)), unique=True,
                         max_size=5))
    batches = []
    for task, number in keys:
        rows = draw(st.lists(st.tuples(st.integers(0, 10**7), *[st.integers(0, t) for t in timeouts]),
                             min_size=1, max_size=6))
        batches.append(TraceBatch(task, number, draw(st.integers(0, 10**8)) / 1000, np.array(rows) / 1000))
    return Trace(stages, tuple(batches))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trace=traces(), gz=st.booleans())
def test_any_valid_trace_survives_a_write_and_read(tmp_path, trace, gz):
    path = tmp_path / ("t.jsonl.gz" if gz else "t.jsonl")
    tracefile.write(path, trace)
    assert tracefile.read(path) == trace
