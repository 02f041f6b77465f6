"""Long hostile responses are read in time linear in their length, and read right.

Each family below once took minutes or hours to read (a lazy `(.+?)\\s*$` after 60,000 blanks, `^\\s*` over
60,000 blank lines, a fence line of blanks then a backtick, ...). The timeout only guards against a hang: a
quadratic reading of these 256 KiB texts would take far longer. What each reading finds is asserted too, beside
honest look-alikes that must keep their code and answers.
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workers.extract import (
    INT_MAIN,
    MAX_BOX_BRACES,
    MAX_FENCES,
    MAX_MARKS,
    CodeBlock,
    answer_flood,
    code_blocks,
    extract_answer,
    extract_code,
    final_answers,
    guess_language,
)
from workers.pipelines.math import answer as math_answer
from workers.pipelines.cuda.harness import harness_problem

pytestmark = pytest.mark.timeout(120)
N = 1 << 18  # characters of a hostile run
SMALL = 1 << 16  # for the math stage's checks, which read an answer (not a response) character by character

CONFIGS = {"code": (("python", "cpp"), {"any_fence": True, "raw_fallback": "always"}),
           "cpp": (("cpp",), {"any_fence": True, "raw_fallback": INT_MAIN}),
           "cuda": (("cuda",), {"any_fence": True, "raw_fallback": "__global__"})}


def code(text, config):
    languages, options = CONFIGS[config]
    return extract_code(text, languages, **options)


def read_all(text):
    """Every reading a response goes through at admission or at a stage; what each returned."""
    out = {"blocks": code_blocks(text), "answers": final_answers(text), "answer": extract_answer(text),
           "flood": answer_flood(text), "harness": harness_problem(text),
           "guess": guess_language(CodeBlock("", text), "python")}
    out.update({config: code(text, config) for config in CONFIGS})
    short = text[:SMALL]
    out.update(form=math_answer.answer_form(short), several=math_answer.several_values_text(short),
               numbers=math_answer.count_numbers(short), distinct=math_answer.distinct_answers([short, short + "1"]))
    return out


def test_an_answer_line_of_blanks_between_two_words_is_read_whole():
    text = "Answer: x" + " " * N + "y"
    assert read_all(text)["answers"] == ["x" + " " * N + "y"]


def test_an_answer_is_phrase_followed_by_blanks_is_read_whole():
    text = "So the answer is x" + " " * N + "y"
    assert read_all(text)["answers"] == ["x" + " " * N + "y"]


def test_a_hash_line_of_blanks_between_two_words_is_read_whole():
    assert read_all("#### x" + " " * N + "y")["answers"] == ["x" + " " * N + "y"]


def test_blank_lines_hold_no_answer_and_no_code():
    out = read_all("\n" * N)
    assert out["answers"] == [] and out["blocks"] == [] and out["cpp"] is None and out["cuda"] is None


def test_blank_lines_in_an_untagged_fence_are_an_empty_block_and_the_raw_text_is_python():
    text = "```\n" + "\n" * N
    out = read_all(text)
    assert out["blocks"] == [CodeBlock("", "\n" * N, closed=False)]
    assert out["code"] == CodeBlock("", text) and out["cuda"] is None


def test_a_kernel_below_blank_lines_is_taken_with_the_blank_lines_just_above_it():
    text = "Sure:" + "\n" * N + "__global__ void k() {}"
    assert read_all(text)["cuda"] == CodeBlock("", text[len("Sure:\n"):])


def test_blanks_between_a_fence_and_a_backtick_make_no_fence():
    out = read_all("```" + " " * N + "`")
    assert out["blocks"] == [] and out["code"].code.startswith("```")


def test_a_run_of_backticks_is_more_fences_than_are_read():
    out = read_all("`" * N)
    assert out["code"] is None and out["cpp"] is None and out["cuda"] is None


def test_a_run_of_tildes_is_more_fences_than_are_read():
    assert read_all("~" * N)["code"] is None


def test_fence_lines_past_the_bound_hold_no_code_and_at_the_bound_keep_it():
    assert read_all("```\nx\n```\n" * (MAX_FENCES // 2 + 1))["code"] is None
    assert code("```\nx\n```\n" * (MAX_FENCES // 2), "code") == CodeBlock("", "x\n")


def test_unclosed_python_fences_are_one_block_holding_the_others():
    text = "```python\n" * (MAX_FENCES // 2)
    assert code(text, "code") == CodeBlock("python", text[len("```python\n"):], closed=False)


def test_a_long_fence_is_closed_only_by_a_fence_as_long():
    body = "```\n" * (MAX_FENCES // 2)
    text = "`" * 70 + "\n" + body + "`" * 69 + "\n" + "`" * 70
    assert code(text, "code") == CodeBlock("", body + "`" * 69 + "\n")


def test_include_lines_mid_line_are_not_cpp_and_one_at_a_line_start_is():
    flood = "x#include <a>\n" * (N // 14)
    assert read_all(flood)["guess"] == "python"
    assert guess_language(CodeBlock("", flood + "  #include <vector>\n"), "python") == "cpp"


def test_int_floods_are_not_cpp_until_int_main_follows():
    flood = "int " * (N // 4)
    assert read_all(flood)["guess"] == "python"
    assert guess_language(CodeBlock("", flood + "main("), "python") == "cpp"
    assert read_all("xint main(" * (N // 10))["cpp"] is None


def test_boxed_openings_never_closed_hold_no_answer():
    out = read_all("\\boxed{" * (N // 7))
    assert out["answers"] == [] and "at most" in out["flood"]


def test_deeply_nested_boxes_are_one_answer():
    depth = N // 8
    assert read_all("\\boxed{" * depth + "5" + "}" * depth)["answers"] == ["5"]


def test_a_chain_of_boxes_in_boxes_gives_each_box_once():
    k = N // 64
    text = "\\boxed{\\boxed{x} " * k + "}" * k
    answers = read_all(text)["answers"]
    assert len(answers) == 2 * k - 1 and answers[1::2] == ["x"] * (k - 1) and answers[-1] == "x"
    assert answers[0] == text[7:207].strip() + "..."  # a box holding boxes beside other text: cut short


def test_braces_in_a_box_are_its_answer():
    text = "\\boxed{" + "{}" * N + "}"
    out = read_all(text)
    assert out["answers"] == ["{}" * N] and "braces" in out["flood"]


def test_escaped_braces_do_not_close_a_box():
    assert final_answers("\\boxed{" + "\\}" * N + "5}") == ["\\}" * N + "5"]
    assert final_answers("\\boxed{" + "\\{" * N + "5}") == ["\\{" * N + "5"]


def test_backslashes_hold_no_answer():
    assert read_all("\\" * N)["answers"] == []


def test_repeated_answer_phrases_on_one_line_are_one_answer():
    text = "answer is " * (N // 10)
    assert read_all(text)["answers"] == [text[len("answer is "):].strip()]
    folded = "anſwer iſ " * (N // 10)
    assert final_answers(folded) == [folded[len("anſwer iſ "):].strip()]


def test_answer_lines_read_the_next_line_when_their_own_is_empty():
    assert read_all("Answer:\n" * 1001)["answers"] == ["Answer:"] * 500


def test_hash_lines_are_each_an_answer():
    assert read_all("#### 1\n" * (N // 7))["answers"] == ["1"] * (N // 7)


def test_a_run_of_hashes_is_an_answer_of_hashes():
    assert read_all("#" * N)["answers"] == ["#" * (N - 4)]


def test_a_harness_of_blank_lines_is_accepted_and_one_including_the_kernel_is_not():
    assert read_all("\n" * N)["harness"] is None
    assert "kernel.cu" in harness_problem("\n" * N + '  #  include "kernel.cu"\n')


def test_admission_counts_answer_marks_and_box_braces_without_reading_them():
    assert answer_flood("\\boxed{5}" * MAX_MARKS) is None
    assert "\\boxed or \\fbox 1001 times" in answer_flood("\\boxed{5}" * (MAX_MARKS + 1))
    assert "####" in answer_flood("#### 5\n" * (MAX_MARKS + 1))
    assert "'answer'" in answer_flood("ANSWER: 5\n" * (MAX_MARKS + 1))
    assert answer_flood("{}" * MAX_BOX_BRACES + "\\boxed{5}") is None  # braces before the first box are not read
    assert "braces" in answer_flood("\\boxed{5}" + "{}" * MAX_BOX_BRACES)


# honest look-alikes: long, but what they hold is what an honest response holds

def test_an_answer_followed_by_trailing_blanks_and_blank_lines_is_the_answer():
    assert final_answers("Answer: 5" + " " * N + "\n" + "\n" * N) == ["5"]
    assert final_answers("The answer is 7." + "\n" * N) == ["7"]
    assert final_answers("#### 42" + " " * N) == ["42"]


def test_code_between_many_blank_lines_in_a_fence_is_the_code():
    text = "```python\n" + "\n" * N + "print(1)\n" + "\n" * N + "```\nDone."
    assert code(text, "code") == CodeBlock("python", "\n" * N + "print(1)\n")


def test_a_cpp_program_below_prose_and_blank_lines_is_taken_from_the_blank_lines():
    text = "Here is my solution.\n" + "\n" * N + "#include <cstdio>\nint main() { return 0; }\n"
    assert code(text, "cpp") == CodeBlock("", text[len("Here is my solution.\n"):])


def test_indented_fences_in_a_long_list_are_blocks():
    text = "1. First:\n" + "   note\n" * (N // 8) + "    ```cpp\n    int main() {}\n    ```\n"
    assert code(text, "code") == CodeBlock("cpp", "    int main() {}\n")


def test_a_tower_of_fractions_in_a_box_is_one_answer():
    tower = "\\frac{1}{" * 300 + "2" + "}" * 300
    assert final_answers("We get " + "x " * N + "\\boxed{" + tower + "}") == [tower]


pieces = st.sampled_from([" ", "\n", "\t", "`", "~", "```", "~~~", "{", "}", "\\", "\\boxed{", "\\fbox{", "####",
                          "answer is ", "Answer:", "final answer:", "#include <a>", "int main(", "__global__",
                          "std::", "x", "5", "$", ".", "\u2028", "\xa0", "ſ"])
runs = st.lists(st.tuples(pieces, st.integers(1, 1 << 14)), min_size=1, max_size=6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(runs)
def test_long_runs_of_hostile_pieces_are_read_and_what_is_read_comes_from_the_text(parts):
    text = "".join(piece * count for piece, count in parts)
    out = read_all(text)
    for config in CONFIGS:
        assert out[config] is None or out[config].code in text
    for answer in out["answers"]:
        assert answer.removesuffix("...") in text
    assert out["answer"] == (out["answers"][-1] if out["answers"] else None)
    assert out["flood"] is None or "at most" in out["flood"]
