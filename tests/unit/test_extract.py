"""Finding code and final answers in model responses."""

import pytest

from workers.extract import code_blocks, extract_answer, extract_code, final_answers, guess_language


def test_the_last_block_in_a_wanted_language_is_taken():
    text = "```python\nprint(1)\n```\nthen\n```cpp\nint main(){}\n```\n```python\nprint(2)\n```"
    assert extract_code(text, ("python",)).code == "print(2)\n"


def test_an_untagged_block_is_taken_when_no_block_names_the_language():
    text = "```\nx = 1\n```\n```java\nclass A {}\n```"
    assert extract_code(text, ("python",)).code == "x = 1\n"


def test_a_block_in_another_language_is_taken_only_when_any_fence_is_allowed():
    text = "```java\nclass A {}\n```"
    assert extract_code(text, ("python",)) is None
    assert extract_code(text, ("python",), any_fence=True).language == "java"


def test_a_truncated_block_counts_from_its_fence_to_the_end():
    (block,) = code_blocks("here:\n```cuda\n__global__ void k() {")
    assert block.code == "__global__ void k() {" and not block.closed


def test_tilde_fences_and_longer_fences_are_blocks():
    text = "~~~cpp\nint a;\n~~~\n````python\n```not a close\n````"
    assert [b.language for b in code_blocks(text)] == ["cpp", "python"]
    assert "```not a close" in code_blocks(text)[1].code


def test_a_response_without_fences_is_code_only_under_the_raw_fallback():
    text = "Sure! Here it is:\n#include <cstdio>\n__global__ void k() {}\n"
    assert extract_code(text, ("cuda",)) is None
    assert extract_code(text, ("cuda",), raw_fallback=r"__global__").code.startswith("#include")
    assert extract_code("no kernel here", ("cuda",), raw_fallback=r"__global__") is None
    assert extract_code("    return x\n", ("python",), raw_fallback="always").code == "    return x\n"


def test_an_empty_response_has_no_code():
    assert extract_code("   \n", ("python",), raw_fallback="always") is None


def test_the_language_is_guessed_from_the_tag_then_the_content():
    text = "```\n#include <iostream>\nint main() {}\n```"
    assert guess_language(extract_code(text, ("python", "cpp")), "python") == "cpp"
    assert guess_language(extract_code("```py\nx=1\n```", ("python",)), "cpp") == "python"


def test_the_last_boxed_answer_wins_and_nested_braces_are_kept():
    assert extract_answer(r"first \boxed{1}, finally \boxed{\frac{1}{2}}") == r"\frac{1}{2}"
    assert extract_answer(r"\boxed{ \{1, 2\} }") == r"\{1, 2\}"


def test_an_unclosed_boxed_falls_back_to_the_next_rule():
    assert extract_answer("\\boxed{12\nThe answer is 7.") == "7"


def test_gsm8k_hashes_and_answer_phrases_are_fallbacks():
    assert extract_answer("work...\n#### 42") == "42"
    assert extract_answer("So the final answer is $3\\pi$.") == "3\\pi"
    assert extract_answer("Answer: 5") == "5"


def test_a_response_without_a_final_answer_has_none():
    assert extract_answer("I think it is probably large.") is None
    assert extract_answer(None) is None


def test_every_boxed_answer_is_a_final_answer_in_order():
    assert final_answers(r"\boxed{3} or \fbox{5}, not \boxed{} nor \boxed{7") == ["3", "5"]


def test_a_box_holding_only_a_box_is_one_answer_and_a_box_holding_more_is_two():
    assert final_answers(r"\boxed{ \boxed{5} }") == ["5"]
    assert final_answers(r"\boxed{3 \boxed{5}}") == [r"3 \boxed{5}", "5"]


@pytest.mark.timeout(10)
def test_thousands_of_nested_boxes_are_read_in_one_pass():
    deep = "\\boxed{" * 20000 + "5" + "}" * 20000
    assert final_answers(deep) == ["5"]
    assert len(final_answers("\\boxed{x " * 20000 + "5" + "}" * 20000)) == 20000


def test_every_hash_line_and_answer_line_is_a_final_answer():
    assert final_answers("#### 3\nthen\n#### 5") == ["3", "5"]
    assert final_answers("Answer: 3\nThe final answer is $5$.") == ["3", "5"]


def test_only_the_last_answer_is_phrase_is_read():
    assert final_answers("The answer is 3? No.\nSo the answer is 5.") == ["5"]


def test_boxes_are_read_before_hash_lines_and_phrases():
    assert final_answers("\\boxed{5}\n#### 3\nThe final answer is 4") == ["5"]
