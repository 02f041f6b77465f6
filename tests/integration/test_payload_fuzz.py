"""1,000 malformed payloads through the trainer's client into real stage workers, across the built-in pipelines
(hypothesis). The design: a pipeline's admission runs in the client, so most malformed payloads become an
`invalid_input` result at once, in their batch, without a stage; those only a stage can judge (a problem id its
store lacks, a reference math-verify cannot read) reach a worker and come back `invalid_input` from it. Either
way each says what was wrong, no worker dies, and the well-formed requests interleaved with them in the same
batches get their right results. A payload that is not JSON at all (NaN, infinities, nesting past the encoder)
is the caller's error at submit, refused before anything is sent."""

from __future__ import annotations

import math
import os
import string
import sys

import psutil
import pytest
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from farm.client.sync import RewardClient
from farm.errors import InvalidInput
from farm.results import Status
from tests.integration.conftest import spawn_worker, wait_ready

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300),
              pytest.mark.skipif(os.geteuid() != 0, reason="the full sandbox needs root")]

MALFORMED = 1000
EVERY = 10  # a well-formed request after every this many malformed ones
QUEUES = ("synthetic.compile", "code.fetch_tests", "code.run", "math.verify", "run_code.run")

# -- what goes wrong in a payload

ATOMS = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
         | st.text(max_size=12))
JUNK = st.recursive(ATOMS, lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids,
                                                                                        max_size=3), max_leaves=8)
HUGE_TEXT = st.integers(2_000, 200_000).map(lambda n: "x" * n)
HUGE_INT = st.integers(400, 1000).map(lambda n: -(10 ** n) if n % 2 else 10 ** n)
NESTED = st.integers(20, 200).map(lambda depth: _nest(depth))
LONE_SURROGATE = st.builds(lambda a, s, b: a + s + b, st.text(max_size=8),
                           st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), st.text(max_size=8))
NOT_TEXT = (st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | HUGE_INT | NESTED
            | st.lists(JUNK, max_size=3) | st.dictionaries(st.text(max_size=6), JUNK, max_size=3))
NOT_NUMBER = st.text(max_size=20) | st.booleans() | st.lists(JUNK, max_size=3) | NESTED | HUGE_TEXT
NEGATIVE = (st.floats(max_value=-1e-9, allow_nan=False, allow_infinity=False) | st.integers(max_value=-1)
            | HUGE_INT.map(lambda n: -abs(n)))


def _nest(depth: int):
    value = ["deep"]
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def bad_text(required: bool = True):
    """What a text field must not be: another type, a lone surrogate, or (required) missing."""
    return (NOT_TEXT | LONE_SURROGATE) if not required else (NOT_TEXT | LONE_SURROGATE | st.just(MISSING))


MISSING = object()  # the key is left out


@st.composite
def malformed(draw, base: dict, breakers: dict):
    """`base` (well-formed) with one field broken as `breakers[field]` draws it, and junk keys added; the
    payload and what its refusal must name."""
    field = draw(st.sampled_from(sorted(breakers)))
    strategy, named = breakers[field]
    payload = dict(base)
    for key, value in draw(st.dictionaries(st.text(string.ascii_lowercase, min_size=9, max_size=12), JUNK,
                                           max_size=2)).items():
        payload[f"junk_{key}"] = value  # not a field of any pipeline: ignored, never the reason
    broken = draw(strategy)
    if isinstance(broken, dict) and broken.get("__replace__"):
        payload = {**{k: v for k, v in payload.items() if k not in broken["drop"]}, **broken["set"]}
    elif broken is MISSING:
        payload.pop(field, None)
    else:
        payload[field] = broken
    return payload, named


def replace(set_=None, drop=()):
    return {"__replace__": True, "set": set_ or {}, "drop": drop}


SYNTHETIC = {"times": [0.01, 0.0]}
SYNTHETIC_CASES = malformed(SYNTHETIC, {
    "times": (st.just(MISSING) | NOT_TEXT.filter(lambda v: not isinstance(v, (list, dict))) | HUGE_TEXT
              | st.lists(st.floats(0, 1), min_size=3, max_size=5) | st.lists(st.floats(0, 1), max_size=1)
              | st.tuples(NOT_NUMBER | st.none() | st.booleans(), st.floats(0, 1)).map(list)
              | st.tuples(st.floats(0, 1), NEGATIVE).map(list)
              | st.fixed_dictionaries({"compile": NOT_NUMBER | NEGATIVE}), "time"),
    "times by stage": (st.dictionaries(st.text(min_size=1).filter(lambda k: k not in ("compile", "execute")),
                                       st.floats(0, 1), min_size=1, max_size=3).map(lambda t: replace({"times": t})),
                       "unknown stages"),
    "reward": (NOT_NUMBER | st.none() | HUGE_INT, "'reward'"),
})

CUDA = {"response": "```cuda\n__global__ void k() {}\nint main() { return 0; }\n```", "expected_output": ""}
CUDA_CASES = malformed(CUDA, {
    "response": (bad_text(), "'response'"),
    "harness": (bad_text(required=False) | st.just('#include "kernel.cu"\nint main() {}'), "'harness'"),
    "stdin": (bad_text(required=False), "'stdin'"),
    "expected_output": (st.just(MISSING) | st.integers() | st.booleans() | st.dictionaries(st.text(), JUNK)
                        | st.lists(NOT_NUMBER | st.none() | HUGE_INT, min_size=1, max_size=3), "'expected_output'"),
    "nvcc_flags": (st.text() | st.integers() | st.dictionaries(st.text(), JUNK, min_size=1)
                   | st.lists(st.sampled_from(["-O3", "-G", "--compiler-bindir=/tmp", "-Xcompiler", "; rm -rf /"])
                              | NOT_TEXT, min_size=1, max_size=3).filter(lambda f: f != ["-O3"] * len(f)),
                   "'nvcc_flags'"),
    "rtol": (NOT_NUMBER | NEGATIVE | st.none(), "'rtol'"),
    "atol": (NOT_NUMBER | NEGATIVE | st.none(), "'atol'"),
})

CODE = {"response": "```python\nprint(1)\n```", "tests": [{"input": "", "output": "1"}]}


def inline(tests):
    """The problem given inline as `tests`."""
    return replace({"tests": tests})

CODE_CASES = malformed(CODE, {
    "response": (bad_text(), "'response'"),
    "language": (JUNK.filter(lambda v: v not in (None, "python", "cpp")) | HUGE_TEXT, "'language'"),
    "reward": (JUNK.filter(lambda v: v not in ("all", "fraction")) | HUGE_TEXT, "'reward'"),
    "problem": (st.builds(lambda tests: replace({"problem": "HumanEval/0", "tests": tests}), st.just(CODE["tests"]))
                | st.just(replace(drop=("tests",))), "exactly one of 'problem'"),
    "problem id": (NOT_TEXT.filter(lambda v: v is not None).map(lambda p: replace({"problem": p}, ("tests",)))
                   | st.sampled_from(["../etc/passwd", "a b", "", "/abs", "x/../y", "HumanEval/0;"]).map(
                       lambda p: replace({"problem": p}, ("tests",))), "problem id"),
    "unknown problem": (st.from_regex(r"\A(HumanEval/[1-9][0-9]{3}|nope-[a-z]{1,8})\Z").map(
        lambda p: replace({"problem": p}, ("tests",))), "no problem"),  # judged by the fetch_tests worker
    "tests": (st.text(min_size=1) | st.integers() | st.booleans() | HUGE_TEXT, "problem"),
    "cases": (st.builds(lambda cases: {"cases": cases}, st.text(min_size=1) | st.integers()
                        | st.dictionaries(st.text(), JUNK, min_size=1)).map(inline), "'cases'"),
    "case": (st.lists(st.fixed_dictionaries({"input": st.text(), "output": NOT_TEXT | LONE_SURROGATE | st.none()})
                      | st.fixed_dictionaries({"input": NOT_TEXT | LONE_SURROGATE, "output": st.text()})
                      | NOT_TEXT.filter(lambda v: not isinstance(v, dict)), min_size=1, max_size=2).map(inline),
             "problem case"),
    "time_limit_s": (st.builds(lambda limit: {"cases": CODE["tests"], "time_limit_s": limit},
                               NOT_NUMBER | NEGATIVE | st.just(0) | st.floats(60.001, 1e300) | HUGE_INT).map(inline),
                     "'time_limit_s'"),
    "entry_point": (st.builds(lambda test: {"cases": CODE["tests"], "test": test}, st.text(min_size=1)).map(inline),
                    "'entry_point'"),
})

MATH = {"response": "so the answer is \\boxed{2}", "answer": "2"}
MATH_CASES = malformed(MATH, {
    "response": (bad_text(), "'response'"),
    "answer": (bad_text() | st.text(" \t\n", max_size=5), "'answer'"),
    "unreadable answer": (st.sampled_from(["$$", "\\\\", "\\text{}"]).map(lambda a: replace({"answer": a})),
                          "'answer'"),  # judged by the verify worker: math-verify reads nothing in it
})

RUN_CODE = {"code": "print(1)", "language": "python"}
BAD_PATHS = (st.sampled_from(["/etc/passwd", "..", "a/../../b", "", ".", "./", "a\0b", "x" * 300])
             | LONE_SURROGATE.map(lambda s: "f" + s))
RUN_CODE_CASES = malformed(RUN_CODE, {
    "code": (bad_text(), "'code'"),
    "language": (bad_text() | st.text(min_size=1).filter(lambda v: v not in ("python", "cpp")) | HUGE_TEXT
                 | st.sampled_from(["go", "java", "rust", "nodejs", "bash"]), "language"),
    "stdin": (bad_text(required=False).filter(lambda v: v is not None), "'stdin'"),
    "run_timeout": (NOT_NUMBER | NEGATIVE | st.just(0), "'run_timeout'"),
    "compile_timeout": (NOT_NUMBER | NEGATIVE | st.just(0.0), "'compile_timeout'"),
    "memory_limit_MB": (st.text() | st.booleans() | st.floats(0.01, 1e6).filter(lambda v: not v.is_integer())
                        | st.lists(JUNK, min_size=1), "'memory_limit_MB'"),
    "files": (st.text(min_size=1) | st.integers(min_value=1) | st.lists(JUNK, min_size=1) | st.just(True)
              | st.dictionaries(BAD_PATHS, st.just("aGk="), min_size=1, max_size=2)
              | st.dictionaries(st.sampled_from(["a.txt", "b/c.txt"]), NOT_TEXT | st.just("not base64!"), min_size=1)
              | st.just({"main.py": "aGk="}) | st.just({f"f{i}": None for i in range(65)}), "'files'"),
    "fetch_files": (st.text(min_size=1) | st.integers(min_value=1) | st.dictionaries(st.text(), JUNK, min_size=1)
                    | st.lists(BAD_PATHS, min_size=1, max_size=2) | st.just([f"f{i}" for i in range(65)]),
                    "'fetch_files'"),
})

CASES = {"synthetic": SYNTHETIC_CASES, "cuda": CUDA_CASES, "code": CODE_CASES, "math": MATH_CASES,
         "run_code": RUN_CODE_CASES}

# -- well-formed requests and their right results: (payload, status, reward, message part)

WELL_FORMED = {
    "synthetic": [({"times": [0.01, 0.0], "reward": 0.25}, Status.OK, 0.25, ""),
                  ({"times": [0.0, 0.0]}, Status.WRONG, 0.0, "visits no stage")],
    "cuda": [({"response": "no kernel here", "expected_output": [1, 2]}, Status.WRONG, 0.0, "no CUDA code")],
    "code": [({"response": "```python\nprint(int(input()) * 2)\n```", "tests": [{"input": "21\n", "output": "42"}]},
              Status.OK, 1.0, ""),
             ({"response": "```python\nprint(41)\n```", "tests": [{"input": "", "output": "42"}]},
              Status.WRONG, 0.0, "wrong answer"),
             ({"response": "def add(a, b):\n    return a + b\n", "problem": "HumanEval/53"}, Status.OK, 1.0, "")],
    "math": [({"response": "so \\boxed{\\frac{1}{2}}", "answer": "0.5"}, Status.OK, 1.0, ""),
             ({"response": "\\boxed{3}", "answer": "4"}, Status.WRONG, 0.0, "not equivalent")],
    "run_code": [({"code": "print(int(input()) * 2)", "language": "python", "stdin": "21"}, Status.OK, 1.0, ""),
                 ({"code": "import sys; sys.exit(3)", "language": "python"}, Status.RUNTIME_ERROR, 0.0,
                  "exit status 3")],
}


def draw_malformed(n: int) -> list[tuple[str, dict, str]]:
    """`n` malformed payloads, as many per pipeline: (pipeline, payload, what its refusal names), drawn by
    hypothesis."""
    drawn: list[tuple[str, dict, str]] = []
    for i, (name, cases) in enumerate(CASES.items()):
        mine: list[tuple[str, dict, str]] = []
        want = n // len(CASES) + (i < n % len(CASES))

        @hsettings(max_examples=want, deadline=None, phases=[Phase.generate], database=None,
                   suppress_health_check=list(HealthCheck))
        @given(cases)
        def collect(case):
            payload, named = case
            mine.append((name, payload, named))

        while len(mine) < want:
            collect()
        drawn += mine[:want]
    return drawn


@pytest.fixture
def farm_workers(settings, tmp_path):
    """One real worker per stage queue the requests can reach, started together."""
    workers = [spawn_worker(settings, q, f"{q}-w", tmp_path / f"{q}.log") for q in QUEUES]
    try:
        wait_ready(settings, workers, timeout=90)
        yield workers
    finally:
        for w in workers:
            w.kill()


def pool_pids(workers) -> dict[str, set[int]]:
    return {w.name: {c.pid for c in psutil.Process(w.pid).children()} for w in workers}


def test_a_thousand_malformed_payloads_are_each_invalid_input_saying_why_and_harm_no_one(settings, farm_workers):
    drawn = draw_malformed(MALFORMED)
    pools = pool_pids(farm_workers)
    expected: dict[str, dict[str, tuple]] = {name: {} for name in CASES}
    requests: dict[str, list] = {name: [] for name in CASES}
    for i, (name, payload, named) in enumerate(drawn):
        requests[name].append((f"bad-{i}", payload))
        expected[name][f"bad-{i}"] = (Status.INVALID_INPUT, 0.0, named)
        if len(requests[name]) % (EVERY + 1) == EVERY:
            good, status, reward, part = WELL_FORMED[name][len(requests[name]) % len(WELL_FORMED[name])]
            requests[name].append((f"good-{i}", good))
            expected[name][f"good-{i}"] = (status, reward, part)
    wrong: list[str] = []
    with RewardClient(settings) as client:
        batches = {name: client.open_batch(f"fuzz-{name}", name, len(reqs)) for name, reqs in requests.items()}
        for name, batch in batches.items():
            batch.submit_many(requests[name])
        for name, batch in batches.items():
            results = batch.gather(timeout=180)
            assert [r.request_id for r in results] == [rid for rid, _ in requests[name]]  # each exactly once
            for r in results:
                status, reward, part = expected[name][r.request_id]
                if (r.status, r.reward) != (status, reward) or part not in r.message or len(r.message) > 600:
                    payload = dict(requests[name])[r.request_id]
                    wrong.append(f"{name} {r.request_id} {payload!r:.200}: {r.status.value} {r.reward} "
                                 f"{r.message[:300]!r} (expected {status.value} naming {part!r})")
    assert not wrong, f"{len(wrong)} wrong results:\n" + "\n".join(wrong[:20])
    assert all(w.proc.poll() is None for w in farm_workers)
    assert pool_pids(farm_workers) == pools  # no pool process died and was replaced
    assert sum(len(r) for r in requests.values()) >= MALFORMED + MALFORMED // (EVERY + 1)


NOT_JSON = (st.sampled_from([math.nan, math.inf, -math.inf])
            | st.integers(20_000, 50_000).map(lambda depth: _nest(depth)))  # past any recursion limit in use


@hsettings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(bad=NOT_JSON, where=st.sampled_from(["times", "junk"]))
def test_a_payload_that_is_not_json_is_refused_at_submit_saying_so_and_its_batch_goes_on(settings, bad, where):
    with RewardClient(settings) as client:
        batch = client.open_batch("not-json", "synthetic", 1)
        payload = {"times": [bad, 0.0]} if where == "times" else {"times": [0.0, 0.0], "junk": bad}
        with pytest.raises(InvalidInput, match="not JSON-serialisable: (Out of range float|its arrays and objects)"):
            batch.submit_many([("r0", {"times": [0.0, 0.0]}), ("r1", payload)])
        assert batch.progress().arrived == 0  # nothing of the refused call was sent
        assert batch.submit("r0", {"times": [0.0, 0.0]}) == "finished"
        [result] = batch.gather(timeout=10)
    assert (result.request_id, result.status) == ("r0", Status.WRONG)


def test_a_payload_nested_too_deep_for_the_worker_to_decode_is_invalid_input_at_once(settings, start_workers):
    start_workers("synthetic.compile")
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)  # a trainer that raised its own limit encodes what a worker cannot decode
    try:
        with RewardClient(settings) as client:
            batch = client.open_batch("deep", "synthetic", 2)
            batch.submit_many([("deep", {"times": [0.01, 0.0], "junk": _nest(3000)}),
                               ("next", {"times": [0.01, 0.0]})])
            deep, after = batch.gather(timeout=30)
    finally:
        sys.setrecursionlimit(limit)
    assert (deep.status, deep.stage) == (Status.INVALID_INPUT, "compile") and "nested too deeply" in deep.message
    assert [s.status for s in deep.stages] == ["invalid_input"]  # once: not retried until the farm gave up on it
    assert after.status is Status.OK
