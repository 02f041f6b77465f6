"""No response chooses a masked status: with the trainer's own fields valid, whatever a response holds (random
text, code raising every builtin exception, exits, forged lines on the judge's pipes, huge or deeply nested
values, bytes that are not UTF-8, mutated arguments) ends as `ok` or a model failure with reward 0, never
`infra_error`, `invalid_input` or `cancelled`, which trainers drop; and its message stays short.

Property tests, one per pipeline that reads a response (`synthetic` reads none), each run through
`workers.runner.run_stage`, which turns a stage's crash into `infra_error`, so a crash on hostile content is
caught here too. The example counts are modest: a sandboxed run costs 30-100 ms (nvcc, seconds).
"""

from __future__ import annotations

import builtins
import shutil
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from farm.knobs import Knobs
from farm.pipeline import StageContext
from farm.results import Status
from workers.judge import plain
from workers.pipelines import code, cuda, math
from workers.pipelines.code import run_code
from workers.pipelines.common import unpack_binary
from workers.runner import run_stage, score

pytestmark = pytest.mark.timeout(300)

MASKED = {Status.INFRA_ERROR, Status.INVALID_INPUT, Status.CANCELLED}
MESSAGE_CAP = 10_000  # characters: a verdict's message quotes, it never carries a response back
FEW = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)

EXCEPTIONS = sorted(name for name, value in vars(builtins).items()
                    if isinstance(value, type) and issubclass(value, BaseException))
_leaves = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20) | st.binary(max_size=20))
PLAIN_VALUES = st.recursive(_leaves, lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner)
                            | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=10)
# what a forged line on the judge's pipes may say: raw bytes, or plain data shaped like the protocol's messages
FORGED_LINES = st.one_of(
    st.binary(max_size=200),
    st.tuples(st.sampled_from(["ready", "value", "raised", "unplain", "compile_error", "load_raised", "missing"]),
              st.lists(PLAIN_VALUES, max_size=4)).map(lambda t: plain.encode((t[0], *t[1])).encode()),
    st.integers(1, 3 << 20).map(lambda n: b'["' + b"x" * n + b'"]'),
    st.integers(4000, 50000).map(lambda n: b'{"__plain__":"int","v":"' + b"f" * n + b'"}'),
    st.integers(60, 2000).map(lambda n: b"[" * n + b"]" * n),
)


def _forge(line: bytes) -> str:
    data = line + b"\n"
    return f"import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, {data!r})\n    except OSError:\n" \
           "        pass"


# the statements a hostile response runs, at load or inside its function
STATEMENTS = st.one_of(
    st.sampled_from(EXCEPTIONS).map(lambda name: f"raise {name}"),
    st.sampled_from(EXCEPTIONS).map(lambda name: f"raise {name}('x' * 100000)"),
    st.integers(-3, 300).map(lambda n: f"import sys\nsys.exit({n})"),
    st.integers(0, 255).map(lambda n: f"import os\nos._exit({n})"),
    st.sampled_from(["import numpy", "import signal, os\nos.kill(os.getpid(), signal.SIGSEGV)",
                     "raise ValueError(10 ** 5000)", "import sys\nsys.setrecursionlimit(10)\nraise StopIteration",
                     "def f(n):\n    return f(n + 1)\nf(0)"]),
    FORGED_LINES.map(_forge),
    st.binary(max_size=200).map(lambda b: f"import os\nos.write(1, {b!r})\nos.write(2, {b!r})"),
)
RESULTS = st.one_of(
    PLAIN_VALUES.map(lambda v: f"return {v!r}"),
    st.integers(1, 300000).map(lambda k: f"return 7 ** {k}"),
    st.integers(1, 12 << 20).map(lambda k: f"return 'x' * {k}"),
    st.integers(1, 200).map(lambda k: f"v = []\nfor _ in range({k}):\n    v = [v]\nreturn v"),
    st.sampled_from(["return object()", "return (i for i in [])", "return type('L', (list,), {})()",
                     "x.append(x)\nreturn x", "x.clear()\nreturn []", "x.append(object())\nreturn x",
                     "return sorted(x)", "return x + [1]", "x.sort()\nreturn x"]),
)


def _python(load: str, body: str, result: str, entry: str) -> str:
    return f"{load}\ndef {entry}(x):\n{textwrap.indent(body, '    ')}\n{textwrap.indent(result, '    ')}\n"


def _fenced(text: str, tag: str) -> str:
    return f"```{tag}\n{text}\n```"


RAISES = st.sampled_from(EXCEPTIONS).map(lambda name: f"raise {name}")


def _function(load: st.SearchStrategy, body: st.SearchStrategy, result: st.SearchStrategy) -> st.SearchStrategy:
    return st.builds(lambda *parts: _fenced(_python(*parts, "ordered"), "python"), load, body, result)


# most examples are hostile code: random text mostly fails to compile, which says little
PYTHON_RESPONSES = st.one_of(
    st.text(max_size=300),
    st.builds(lambda text: _fenced(text, "cpp"), st.text(max_size=200)),
    _function(STATEMENTS, st.just("pass"), RESULTS),
    _function(st.just(""), STATEMENTS, RESULTS),
    _function(st.just(""), RAISES, RESULTS),
    _function(st.just(""), st.just("pass"), RESULTS),
    _function(st.just("calls = []"), st.just("calls.append(1)\nif len(calls) > 1:\n    raise StopIteration"),
              st.just("return sorted(x)")),
)
# the trainer's side: valid problems whose tests call the function in the usual ways
SORT_TESTS = [
    "def check(candidate):\n    assert candidate([3, 1, 2]) == [1, 2, 3]\n",
    "def check(candidate):\n    xs = [3, 1, 2]\n    assert candidate(xs) == [1, 2, 3]\n    assert xs == [3, 1, 2]\n",
    "def check(candidate):\n    for got in map(candidate, [[2, 1], [1]]):\n        assert got == sorted(got)\n",
    ("def check(candidate):\n    try:\n        candidate([1, 'a'])\n    except TypeError:\n        pass\n"
     "    assert candidate([[2], [1]]) == [[1], [2]]\n"),
]


def _verdict_is_a_model_failure_or_ok(r) -> None:
    assert r.status not in MASKED, r.message[:3000]
    assert (r.reward == 1.0) == (r.status is Status.OK), (r.status, r.reward)
    assert len(r.message) <= MESSAGE_CAP


@settings(FEW, max_examples=80)
@given(response=PYTHON_RESPONSES, test=st.sampled_from(SORT_TESTS))
def test_no_response_to_a_function_problem_gets_a_masked_status(response, test):
    problem = {"prompt": "def ordered(x):\n    \"\"\"x sorted.\"\"\"\n", "test": test, "entry_point": "ordered",
               "time_limit_s": 1}
    _verdict_is_a_model_failure_or_ok(score(code.pipeline, {"response": response, "tests": problem}))


IO_PROGRAMS = st.one_of(
    st.text(max_size=300),
    st.builds(lambda load: _fenced(load + "\nprint(input())", "python"), STATEMENTS),
    st.builds(lambda text: _fenced(text, "python"), st.text(max_size=200)),
)


@settings(FEW, max_examples=15)
@given(response=IO_PROGRAMS, mode=st.sampled_from(["all", "fraction"]))
def test_no_response_to_an_io_problem_gets_a_masked_status(response, mode):
    tests = {"cases": [{"input": "5\n", "output": "5\n"}, {"input": "x\n", "output": "x\n"}], "time_limit_s": 1}
    r = score(code.pipeline, {"response": response, "tests": tests, "reward": mode})
    assert r.status not in MASKED, r.message[:3000]
    assert len(r.message) <= MESSAGE_CAP


@settings(FEW, max_examples=4)
@given(response=st.builds(lambda text: _fenced(text, "cpp"), st.sampled_from([
    "int main() { return 3; }", "#include <cstdio>\nint main() { puts(\"5\"); }", "garbage (", "",
    "#include <cstdlib>\nint main() { abort(); }", "int main() { while (1); }"]) | st.text(max_size=100)))
def test_no_cpp_response_gets_a_masked_status(response):
    tests = {"cases": [{"input": "", "output": "5"}], "time_limit_s": 1}
    r = score(code.pipeline, {"response": response, "tests": tests, "language": "cpp"})
    assert r.status not in MASKED, r.message[:3000]


LATEX = ["\\frac{", "}", "{", "\\sqrt{", "^", "_", "1", "2", "x", "+", "-", "\\cdot", "(", ")", "\\pi", "\\infty",
         "=", ",", "\\{", "\\}", "\\le", "\\pm", "!", "\\sum_{k=1}^{", "\\int", "\\lim_{x\\to", "\\binom{",
         "\\begin{pmatrix}",
         "\\end{pmatrix}", "&", "\\\\", "\\text{", "\\mathrm{", "e", "i", "0.5", "%", "\\%", "$", "\\boxed{", "\\log",
         "\\sin", "\\det", "\\mod", "\\left(", "\\right)"]
MATH_RESPONSES = st.one_of(
    st.text(max_size=300),
    st.lists(st.sampled_from(LATEX), max_size=30).map(lambda parts: "\\boxed{" + "".join(parts) + "}"),
    st.integers(1, 20000).map(lambda k: "\\boxed{" + "9" * k + "}"),
    st.integers(1, 100000).map(lambda k: f"\\boxed{{10^{{{k}}}+1}}"),
    st.integers(1, 3000).map(lambda k: "\\boxed{" + "\\frac{1}{" * k + "2" + "}" * k + "}"),
    st.integers(1, 5000).map(lambda k: "\\boxed{" + "(" * k + "1" + ")" * k + "}"),
    st.integers(1, 2000).map(lambda k: "\\boxed{" * k + "1" + "}" * k),
    st.text(max_size=100).map(lambda t: f"The final answer is {t}"),
    st.text(max_size=100).map(lambda t: f"#### {t}"),
)


@settings(FEW, max_examples=20)
@given(response=MATH_RESPONSES, reference=st.sampled_from(["1", "\\frac{1}{2}", "x^2+1", "\\{1,2\\}"]))
def test_no_math_response_gets_a_masked_status(response, reference):
    knobs = Knobs().with_stage("math.verify", timeout_s=2.0)  # a slow answer is a timeout: no need to wait long
    r = score(math.pipeline, {"response": response, "answer": reference}, knobs=knobs)
    _verdict_is_a_model_failure_or_ok(r)


RUN_CODE_PROGRAMS = st.one_of(
    st.text(max_size=300),
    STATEMENTS,
    st.builds(lambda load, result: _python(load, "pass", result, "f") + "print(f([3, 1]))", STATEMENTS, RESULTS),
)


@settings(FEW, max_examples=15)
@given(program=RUN_CODE_PROGRAMS)
def test_no_run_code_program_gets_a_masked_status(program):
    r = score(run_code.pipeline, {"code": program, "language": "python", "run_timeout": 1, "stdin": "1\n"})
    assert r.status not in MASKED, r.message[:3000]
    assert len(r.message) <= MESSAGE_CAP


CUDA_RESPONSES = st.one_of(
    st.text(max_size=200),
    st.sampled_from([
        "void fill(float* out, int n) { for (int i = 0; i < n; i++) out[i] = 2.0f * i; }",
        "void fill(float* out, int n) { out[0] = 1e30f * 1e30f; }",
        "#include <cstdlib>\nvoid fill(float* out, int n) { exit(0); }",
        "int main() { return 0; }",
        "asm(\".section .init_array,\\\"aw\\\"\\n.quad 0\\n.text\");\nvoid fill(float* out, int n) {}",
        "__global__ void k() {}\nvoid fill(float* out, int n) { for (;;); }",
        "void fill(float* out, int n) { out[1 << 30] = 1; }",
        "#include \"main.cu\"",
    ]).map(lambda text: _fenced(text, "cuda")),
)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@settings(FEW, max_examples=5)
@given(response=CUDA_RESPONSES)
def test_no_cuda_response_gets_a_masked_status_at_compile_or_on_a_cpu_harness(response):
    from tests.integration.test_pipeline_cuda import CPU_PAYLOAD

    payload = dict(CPU_PAYLOAD, response=response)
    admission = cuda.pipeline.checked_admit(payload)
    if not admission.stages:
        assert admission.status not in MASKED
        return
    stage = cuda.pipeline.stage("compile")
    compiled = run_stage(StageContext("p", "p", "p", payload, {}, stage, 60.0, "test"))
    assert compiled.status not in MASKED, compiled.message[:3000]
    if compiled.status is None:  # the execute stage's judging, without its GPU check: the harness needs none
        ran = cuda.run_program(payload, unpack_binary(compiled.carry), 5.0)
        assert ran.status not in MASKED, ran.message[:3000]
