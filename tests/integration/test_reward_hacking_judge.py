"""Hostile responses aimed at the function judge's channel rather than at the tests: exceptions that steer
the tests' loops, failures dressed as the farm's (a masked status), arguments the tests see as copies,
values too large to show, replies too large to quote. Each gets reward 0 with a model-failure status and a
reason; beside them, honest look-alikes (a function raising the ValueError the tests expect, a 2000-digit
factorial, a function that sorts its argument in place) keep scoring 1.0.

Each problem is inline, with a one- or two-second limit, so a hang costs little.
"""

from __future__ import annotations

import textwrap

import pytest

from farm.results import Status
from workers.judge.check import MESSAGE_CAP
from workers.pipelines.code import pipeline
from workers.runner import score

pytestmark = pytest.mark.timeout(120)

MASKED = {Status.INFRA_ERROR, Status.INVALID_INPUT, Status.CANCELLED}

DOUBLE = "def double(x):\n    \"\"\"Return twice x.\"\"\"\n"
# tests that call through zip/map/all: a StopIteration raised by the function would end them early
ZIP_MAP = """
def check(candidate):
    xs = [1, 2, 3, 10]
    for got, want in zip(map(candidate, xs), [2, 4, 6, 20]):
        assert got == want
"""
ALL_MAP = """
def check(candidate):
    assert all(map(lambda x: candidate(x) == 2 * x, [1, 2, 3, 10]))
"""
ASYNC_FOR = """
class Doubled:
    def __init__(self, xs, f):
        self.xs, self.f = list(xs), f
    def __aiter__(self):
        return self
    async def __anext__(self):
        if not self.xs:
            raise StopAsyncIteration
        x = self.xs.pop(0)
        return x, self.f(x)

async def collect(xs, f):
    return [pair async for pair in Doubled(xs, f)]

def check(candidate):
    try:
        collect([1, 2, 3], candidate).send(None)
    except StopIteration as done:
        pairs = done.value
    for x, got in pairs:
        assert got == 2 * x
"""
GENERATOR = """
def results(f, xs):
    for x in xs:
        yield f(x)

def check(candidate):
    for got, x in zip(results(candidate, [1, 2, 3]), [1, 2, 3]):
        assert got == 2 * x
"""
PLAIN = """
def check(candidate):
    assert candidate(1) == 2
    assert candidate(21) == 42
"""
EXPECTS_VALUE_ERROR = """
def check(candidate):
    assert candidate(2) == 4
    try:
        candidate(-1)
    except ValueError as exc:
        assert str(exc) == "negative", str(exc)
    else:
        assert False, "no ValueError for -1"
"""
WRAPS_FAILURES_IN_OS_ERROR = """
def check(candidate):
    try:
        assert candidate(1) == 2
    except Exception as exc:
        raise OSError("the check failed") from exc
"""
LOOKS_UP_THE_RESULT = """
def check(candidate):
    names = {2: "two", 4: "four"}
    assert names[candidate(1)] == "two"
"""
CALLS_TWICE_NESTED = """
def check(candidate):
    assert candidate(candidate([1])) == [1]
"""
SORT_PROMPT = "def ordered(xs):\n    \"\"\"Return xs sorted.\"\"\"\n"
KEEPS_INPUT = """
def check(candidate):
    xs = [3, 1, 2]
    assert candidate(xs) == [1, 2, 3]
    assert xs == [3, 1, 2], "the function must not change its argument"
"""
KEEPS_NESTED_INPUT = """
def check(candidate):
    rows = ([3, 1, 2], {"k": [9, 8]}, {5, 4})
    kept = ([3, 1, 2], {"k": [9, 8]}, {5, 4})
    assert candidate(rows) == [1, 2, 3]
    assert rows == kept, "the function must not change its argument"
"""
KEEPS_KEYWORD_INPUT = """
def check(candidate):
    xs = [3, 1, 2]
    assert candidate(xs=xs) == [1, 2, 3]
    assert xs == [3, 1, 2]
"""
KEEPS_INPUT_WHEN_RAISING = """
def check(candidate):
    xs = [3, 1, 2]
    assert candidate(xs) == [1, 2, 3]
    ys = [2, "a"]
    try:
        candidate(ys)
    except TypeError:
        pass
    assert ys == [2, "a"], "a failed call must leave its argument alone"
"""
SORTS_IN_PLACE = """
def check(candidate):
    xs = [3, 1, 2]
    alias = xs
    candidate(xs)
    assert alias == [1, 2, 3]
    grid = [[2, 1], [4, 3]]
    row = grid[0]
    candidate(row)
    assert grid == [[1, 2], [4, 3]]
"""
FACTORIAL_PROMPT = "def fact(n):\n    \"\"\"Return n!.\"\"\"\n"
FACTORIAL = """
import math
def check(candidate):
    assert candidate(5) == 120
    assert candidate(2000) == math.factorial(2000)
"""
POWER_PROMPT = "def power_of_ten(n):\n    \"\"\"10 ** n.\"\"\"\n"
HUGE_POWER = """
def check(candidate):
    assert candidate(3) == 1000
    assert candidate(10 ** 6) == 10 ** (10 ** 6)
"""
ECHO = """
def check(candidate):
    assert candidate("naïve – ✓") == "naïve – ✓"
"""

# hostile: (prompt, tests, response code, status, words the message holds)
HOSTILE = {
    # 1. exceptions that would steer the tests' control flow
    "raises_stop_iteration_under_zip_map": (DOUBLE, ZIP_MAP, """
        def double(x):
            raise StopIteration
        """, Status.RUNTIME_ERROR, "StopIteration"),
    "raises_stop_iteration_under_all_map": (DOUBLE, ALL_MAP, """
        def double(x):
            raise StopIteration("done")
        """, Status.RUNTIME_ERROR, "StopIteration: done"),
    "raises_stop_iteration_after_a_right_answer": (DOUBLE, ZIP_MAP, """
        calls = []
        def double(x):
            calls.append(x)
            if len(calls) > 1:
                raise StopIteration
            return 2 * x
        """, Status.RUNTIME_ERROR, "StopIteration"),
    "raises_stop_async_iteration_under_async_for": (DOUBLE, ASYNC_FOR, """
        def double(x):
            raise StopAsyncIteration
        """, Status.RUNTIME_ERROR, "StopAsyncIteration"),
    "raises_generator_exit_inside_the_tests_generator": (DOUBLE, GENERATOR, """
        def double(x):
            raise GeneratorExit
        """, Status.RUNTIME_ERROR, "GeneratorExit"),
    # 2. failures dressed as the farm's own (masked statuses)
    "raises_os_error": (DOUBLE, PLAIN, """
        def double(x):
            raise OSError(28, "No space left on device")
        """, Status.RUNTIME_ERROR, "OSError"),
    "imports_numpy_inside_the_function": (DOUBLE, PLAIN, """
        def double(x):
            import numpy
            return int(numpy.multiply(x, 2))
        """, Status.RUNTIME_ERROR, "ModuleNotFoundError"),
    "raises_what_the_tests_wrap_in_an_os_error": (DOUBLE, WRAPS_FAILURES_IN_OS_ERROR, """
        def double(x):
            raise ValueError("no")
        """, Status.RUNTIME_ERROR, "OSError"),
    "forges_a_ready_line_holding_a_huge_int": (DOUBLE, PLAIN, """
        import os
        line = '{"__plain__":"int","v":"' + "f" * 20000 + '"}\\n'
        for fd in range(3, 64):
            try:
                os.write(fd, line.encode())
            except OSError:
                pass
        def double(x):
            return 2 * x
        """, Status.WRONG, "an int of 24083 digits"),
    "returns_a_huge_int_the_tests_use_as_a_key": (DOUBLE, LOOKS_UP_THE_RESULT, """
        def double(x):
            return 10 ** 5000
        """, Status.RUNTIME_ERROR, "KeyError"),
    "answers_a_python_problem_in_cpp": (DOUBLE, PLAIN, None, Status.COMPILE_ERROR, "checks a Python function"),
    "returns_a_value_nested_to_the_limit_for_the_tests_to_pass_back": (DOUBLE, CALLS_TWICE_NESTED, """
        def double(x):
            deep = []
            for _ in range(63):
                deep = [deep]
            return deep
        """, Status.WRONG, "assertion failed"),
    "sends_bytes_that_are_not_utf8": (DOUBLE, PLAIN, """
        import os
        def double(x):
            for fd in range(3, 64):
                try:
                    os.write(fd, b'{"__plain__":"tuple","v":["value","\\xff\\xfe",false]}\\n')
                except OSError:
                    pass
            os._exit(0)
        """, Status.WRONG, "not plain data"),
    # 3. arguments changed in place, which the tests now see
    "sorts_an_argument_the_tests_require_unchanged": (SORT_PROMPT, KEEPS_INPUT, """
        def ordered(xs):
            xs.sort()
            return xs
        """, Status.WRONG, "must not change its argument"),
    "changes_lists_dicts_and_sets_nested_in_a_tuple_argument": (SORT_PROMPT, KEEPS_NESTED_INPUT, """
        def ordered(rows):
            rows[1]["k"].append(7)
            rows[2].discard(5)
            return sorted(rows[0])
        """, Status.WRONG, "must not change its argument"),
    "clears_a_keyword_argument": (SORT_PROMPT, KEEPS_KEYWORD_INPUT, """
        def ordered(xs):
            result = sorted(xs)
            xs.clear()
            return result
        """, Status.WRONG, "assertion failed"),
    "changes_its_argument_then_raises": (SORT_PROMPT, KEEPS_INPUT_WHEN_RAISING, """
        def ordered(xs):
            copy = list(xs)
            xs.clear()
            if any(type(x) is not int for x in copy):
                raise TypeError("not comparable")
            xs.extend(copy)
            return sorted(copy)
        """, Status.WRONG, "must leave its argument alone"),
    "sends_back_arguments_of_another_shape": (SORT_PROMPT, KEEPS_INPUT, """
        import os
        def ordered(xs):
            for fd in range(3, 64):
                try:
                    os.write(fd, b'{"__plain__":"tuple","v":["value",[1,2,3],true]}\\n[1,2]\\n')
                except OSError:
                    pass
            os._exit(0)
        """, Status.WRONG, "as its arguments"),
    "makes_its_argument_contain_itself": (SORT_PROMPT, KEEPS_INPUT, """
        def ordered(xs):
            xs.append(xs)
            return [1, 2, 3]
        """, Status.WRONG, "an argument, as the call left it"),
    # 4. values too large to show
    "returns_a_huge_wrong_int": (DOUBLE, PLAIN, """
        def double(x):
            return 7 ** 20000
        """, Status.WRONG, "an int of 16902 digits"),
    "returns_a_wrong_int_of_a_million_digits": (POWER_PROMPT, HUGE_POWER, """
        def power_of_ten(n):
            return 10 ** n + (n > 3)
        """, Status.WRONG, "an int of about 1000001 digits"),
    "raises_an_exception_holding_a_huge_int": (DOUBLE, PLAIN, """
        def double(x):
            raise ValueError(10 ** 6000)
        """, Status.RUNTIME_ERROR, "ValueError"),
    # 5. replies and hellos too large to quote in a verdict
    "forges_a_load_raised_hello_of_megabytes": (DOUBLE, PLAIN, """
        import os
        line = '{"__plain__":"tuple","v":["load_raised","' + "x" * (3 << 20) + '"]}\\n'
        for fd in range(3, 64):
            try:
                os.write(fd, line.encode())
            except OSError:
                pass
        os._exit(0)
        """, Status.RUNTIME_ERROR, "raised while being loaded"),
    "forges_a_compile_error_hello_of_megabytes": (DOUBLE, PLAIN, """
        import os
        line = '{"__plain__":"tuple","v":["compile_error","' + "y" * (3 << 20) + '"]}\\n'
        for fd in range(3, 64):
            try:
                os.write(fd, line.encode())
            except OSError:
                pass
        os._exit(0)
        """, Status.COMPILE_ERROR, "syntax error"),
    "forges_a_reply_tuple_with_two_mebibytes_of_text": (DOUBLE, PLAIN, """
        import os
        def double(x):
            line = '{"__plain__":"tuple","v":["junk","' + "z" * (2 << 20) + '"]}\\n'
            for fd in range(3, 64):
                try:
                    os.write(fd, line.encode())
                except OSError:
                    pass
            os._exit(0)
        """, Status.WRONG, "which is not a reply"),
    "forges_a_raised_reply_with_megabytes_of_text": (DOUBLE, PLAIN, """
        import os
        def double(x):
            line = '{"__plain__":"tuple","v":["raised","ValueError","' + "w" * (3 << 20) + '",false]}\\n'
            for fd in range(3, 64):
                try:
                    os.write(fd, line.encode())
                except OSError:
                    pass
            os._exit(0)
        """, Status.RUNTIME_ERROR, "ValueError"),
    "returns_megabytes_of_text": (DOUBLE, PLAIN, """
        def double(x):
            return "v" * (12 << 20)
        """, Status.WRONG, "assertion failed"),
}
CPP_DOUBLE = ("```cpp\n#include <iostream>\nint double_it(int x) { return 2 * x; }\n"
              "int main() { std::cout << double_it(1); }\n```")


def judged(prompt: str, test: str, code: str | None, entry: str, time_limit_s: float = 2):
    response = CPP_DOUBLE if code is None else "```python\n" + textwrap.dedent(code) + "\n```"
    tests = {"prompt": prompt, "test": test, "entry_point": entry, "time_limit_s": time_limit_s}
    return score(pipeline, {"response": response, "tests": tests})


def _entry(prompt: str) -> str:
    return prompt.split("def ", 1)[1].split("(", 1)[0]


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_response_to_the_judge_gets_no_reward_a_model_failure_and_a_reason(name):
    prompt, test, code, status, words = HOSTILE[name]
    r = judged(prompt, test, code, _entry(prompt))
    assert (r.reward, r.status) == (0.0, status), r.message[:2000]
    assert words in r.message, r.message[:2000]
    assert len(r.message) < MESSAGE_CAP + 200  # the verdict fits the result pipe whatever was sent


def test_the_hostile_cases_are_at_least_twenty_distinct_responses():
    assert len({code for _, _, code, _, _ in HOSTILE.values()}) == len(HOSTILE) >= 20


# honest look-alikes: (prompt, tests, code, time limit)
HONEST = {
    "raises_the_value_error_the_tests_expect": (DOUBLE, EXPECTS_VALUE_ERROR, """
        def double(x):
            if x < 0:
                raise ValueError("negative")
            return 2 * x
        """, 2),
    "returns_a_2000_digit_factorial": (FACTORIAL_PROMPT, FACTORIAL, """
        def fact(n):
            result = 1
            for k in range(2, n + 1):
                result *= k
            return result
        """, 2),
    "returns_an_int_of_a_million_digits": (POWER_PROMPT, HUGE_POWER, """
        def power_of_ten(n):
            return 10 ** n
        """, 10),
    "sorts_in_place_where_the_tests_check_the_callers_list": (SORT_PROMPT, SORTS_IN_PLACE, """
        def ordered(xs):
            xs.sort()
            return xs
        """, 2),
    "returns_a_sorted_copy_leaving_the_argument_alone": (SORT_PROMPT, KEEPS_INPUT, """
        def ordered(xs):
            return sorted(xs)
        """, 2),
    "leaves_a_nested_argument_alone": (SORT_PROMPT, KEEPS_NESTED_INPUT, """
        def ordered(rows):
            return sorted(rows[0])
        """, 2),
    "uses_generators_and_next_with_a_default": (DOUBLE, ZIP_MAP, """
        def _twice(values):
            for v in values:
                yield v + v
        def double(x):
            it = _twice([x])
            first = next(it)
            assert next(it, None) is None
            return first
        """, 2),
    "uses_its_own_generator_under_the_tests_generator": (DOUBLE, GENERATOR, """
        def double(x):
            return sum(x for _ in range(2))
        """, 2),
    "returns_a_value_the_tests_pass_back": (DOUBLE, CALLS_TWICE_NESTED, """
        def double(x):
            return x
        """, 2),
    "returns_non_ascii_text": ("def echo(s):\n    \"\"\"Return s.\"\"\"\n", ECHO, """
        def echo(s):
            return s
        """, 2),
}


@pytest.mark.parametrize("name", sorted(HONEST))
def test_an_honest_look_alike_scores_one(name):
    prompt, test, code, limit = HONEST[name]
    r = judged(prompt, test, code, _entry(prompt), limit)
    assert (r.status, r.reward) == (Status.OK, 1.0), r.message[:2000]


def test_the_tests_failing_before_any_call_is_the_farms_error_not_the_models():
    r = judged(DOUBLE, "import no_such_module_here\n" + PLAIN, "def double(x):\n    return 2 * x\n", "double")
    assert r.status is Status.INFRA_ERROR and "no_such_module_here" in r.message


def test_the_tests_own_os_error_after_a_call_stays_the_farms_error():
    test = "def check(candidate):\n    assert candidate(1) == 2\n    open('/nonexistent/reference.json')\n"
    r = judged(DOUBLE, test, "def double(x):\n    return 2 * x\n", "double")
    assert r.status is Status.INFRA_ERROR and "FileNotFoundError" in r.message


def test_an_ordinary_exception_reaches_the_tests_as_its_own_type():
    test = "def check(candidate):\n    try:\n        candidate(1)\n    except KeyError:\n        pass\n"
    r = judged(DOUBLE, test, "def double(x):\n    return {}[x]\n", "double")
    assert (r.status, r.reward) == (Status.OK, 1.0), r.message


def test_no_hostile_status_is_masked():
    assert not {status for *_, status, _ in HOSTILE.values()} & MASKED


@pytest.mark.parametrize("ending", ["import sys\nsys.exit(163)", "import os\nos.kill(os.getpid(), 35)"],
                         ids=["exit_status_of_a_real_time_signal", "killed_by_a_real_time_signal"])
@pytest.mark.parametrize("pipeline_name", ["code", "run_code"])
def test_a_program_ending_by_a_real_time_signal_is_a_runtime_error(ending, pipeline_name):
    from workers.pipelines.code import run_code

    if pipeline_name == "code":
        tests = {"cases": [{"input": "", "output": "5"}], "time_limit_s": 2}
        r = score(pipeline, {"response": "```python\n" + ending + "\n```", "tests": tests})
    else:
        r = score(run_code.pipeline, {"code": ending, "language": "python"})
    assert (r.status, r.reward) == (Status.RUNTIME_ERROR, 0.0), r.message
    assert "signal 35" in r.message, r.message


@pytest.mark.parametrize("tests", [{"prompt": DOUBLE, "test": PLAIN, "entry_point": "double", "time_limit_s": 1},
                                   {"cases": [{"input": "", "output": "1"}]}], ids=["function", "io"])
def test_code_too_large_for_the_sandboxs_disk_is_a_compile_error(tests):
    response = "```python\n" + "x = 1\n" * (12 << 20) + "```"  # 72 MiB: past the 64 MiB working directory
    r = score(pipeline, {"response": response, "tests": tests})
    assert (r.status, r.reward) == (Status.COMPILE_ERROR, 0.0) and "MiB" in r.message, r.message
