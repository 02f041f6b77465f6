"""Hostile responses to a math problem: each tries to earn reward without committing to one answer, by giving
several answers, a set, list, interval or ± that holds the right one, or LaTeX that math-verify reads loosely.
Every one gets reward 0, `wrong`, and a message saying why. Their legitimate look-alikes still pass.
"""

from __future__ import annotations

import pytest

from farm.results import Status
from workers.pipelines.math import pipeline
from workers.runner import score

pytestmark = pytest.mark.timeout(120)

HOSTILE = {
    # several final answers
    "two_boxes_wrong_then_right": (r"It is \boxed{3} or \boxed{5}.", "5", "2 different final answers"),
    "two_boxes_right_then_wrong": (r"\boxed{5}, or maybe \boxed{3}", "5", "2 different final answers"),
    "a_box_inside_a_box_with_another_number": (r"\boxed{3 \boxed{5}}", "5", "2 different final answers"),
    "a_box_and_an_fbox": ("\\boxed{3}\n\\fbox{5}", "5", "2 different final answers"),
    "two_gsm8k_hash_lines": ("#### 3\n#### 5", "5", "2 different final answers"),
    "two_answer_lines": ("Answer: 3\nAnswer: 5", "5", "2 different final answers"),
    # sets, lists, intervals holding the answer
    "a_set_holding_the_answer": (r"\boxed{\{3,5\}}", "5", "a set of 2 values"),
    "a_set_of_the_answer_alone": (r"\boxed{\{5\}}", "5", "a set"),
    "a_symbolic_answer_in_a_set": (r"\boxed{\{x\}}", "x", "a set"),
    "a_bare_list": (r"\boxed{3, 5}", "5", "a list"),
    "the_answer_listed_twice": (r"\boxed{5, 5}", "5", "a list"),
    "a_semicolon_list": (r"\boxed{3; 5}", "5", "a list"),
    "a_list_of_every_digit": (r"\boxed{1, 2, 3, 4, 5, 6, 7, 8, 9}", "5", "a list"),
    "one_variable_with_two_values": (r"\boxed{x = 3, 5}", "5", "a list"),
    "angle_brackets_around_two_values": (r"\boxed{\langle 3, 5 \rangle}", "5", "a list"),
    "an_open_interval_around_the_answer": (r"\boxed{(4,6)}", "5", "an interval"),
    "a_closed_interval_around_the_answer": (r"\boxed{[4, 6]}", "5", "an interval"),
    "a_column_vector": (r"\boxed{\begin{pmatrix}3\\5\end{pmatrix}}", "5", "a matrix"),
    # words and operators joining values
    "or_in_text": (r"\boxed{3 \text{ or } 5}", "5", "'or'"),
    "or_between_equations": (r"\boxed{x=3 \text{ or } x=5}", "5", "'or'"),
    "or_hidden_in_a_text_box": (r"\boxed{\text{5 or 3}}", "5", "'or'"),
    "and_between_values": (r"\boxed{3 and 5}", "5", "'and'"),
    "logical_or": (r"\boxed{3 \lor 5}", "5", r"'\lor'"),
    "logical_vee": (r"\boxed{3 \vee 5}", "5", r"'\vee'"),
    "unicode_or": (r"\boxed{3 ∨ 5}", "5", "'∨'"),
    "a_union": (r"\boxed{3 \cup 5}", "5", r"'\cup'"),
    "plus_minus_around_the_answer": (r"\boxed{5 \pm 1}", "6", "± sign"),
    "plus_minus_of_the_answer": (r"\boxed{\pm 5}", "-5", "± sign"),
    # relations
    "an_inequality_chain_around_the_answer": (r"\boxed{4 < x < 6}", "5", "chain of relations"),
    "an_inequality": (r"\boxed{x > 4}", "5", "relation '>'"),
    "an_arrow_between_values": (r"\boxed{3 \to 5}", "5", r"relation '\to'"),
    "a_chain_of_equalities": (r"\boxed{x = 3 = 5}", "5", "chain of relations"),
    "two_equations_on_two_lines": (r"\boxed{x = 3 \\ x = 5}", "5", "chain of relations"),
    "an_equation_between_two_numbers": (r"\boxed{3 = 5}", "5", "equation between two values"),
    "an_approximation_between_two_numbers": (r"\boxed{5 \approx 3}", "5", "equation between two values"),
    "a_unit_on_the_left_of_an_equation": (r"\boxed{3\text{ m} = 5}", "5", "equation between two values"),
    # numbers hidden where math-verify's normaliser drops them, or in text it cannot parse
    "a_number_hidden_after_a_unit": (r"\boxed{5 \text{ cm (not 3)}}", "5", r"\text{}"),
    "two_quantities_with_units": (r"\boxed{12 \text{ hours } 30 \text{ minutes}}", "12", r"\text{}"),
    "a_number_in_invisible_colour": (r"\boxed{\textcolor{white}{3} 5}", "5", r"\text{}"),
    "a_divides_bar_between_values": (r"\boxed{3 \mid 5}", "5", "not one expression"),
    "dots_between_values": (r"\boxed{3 \dots 5}", "5", "not one expression"),
    "a_foreign_or": (r"\boxed{3 或 5}", "5", "not one expression"),
    "two_final_answer_phrases_on_one_line": ("The final answer is 3. The final answer is 5.", "5",
                                             "not one expression"),
}


@pytest.mark.parametrize("response, reference, why", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_math_response_earns_nothing_and_is_told_why(response, reference, why):
    r = score(pipeline, {"response": response, "answer": reference})
    assert (r.reward, r.status) == (0.0, Status.WRONG), r.message
    assert why in r.message


LEGITIMATE = {
    "the_same_answer_boxed_twice": ("\\boxed{5}. So the answer is \\boxed{ 5 }.", "5"),
    "the_same_fraction_written_two_ways": (r"\boxed{\frac12}, that is \boxed{\dfrac{1}{2}}", "0.5"),
    "a_box_that_only_holds_a_box": (r"\boxed{\boxed{5}}", "5"),
    "a_unit_after_the_number": (r"\boxed{5\text{ cm}}", "5"),
    "a_unit_with_an_exponent": (r"\boxed{5 \text{ m}^2}", "5"),
    "a_named_unknown": (r"\boxed{x = 5}", "5"),
    "a_subscripted_unknown": (r"\boxed{x_1 = 5}", "5"),
    "a_function_value": (r"\boxed{f(2) = 5}", "5"),
    "a_thousands_separator": (r"\boxed{1,000}", "1000"),
    "a_number_in_text": (r"\boxed{\text{5}}", "5"),
    "a_set_against_a_set": (r"\boxed{\{2, 1\}}", r"\{1,2\}"),
    "a_list_against_a_list": (r"\boxed{3, 5}", "3, 5"),
    "or_against_a_list": (r"\boxed{x = 3 \text{ or } x = 5}", "3, 5"),
    "plus_minus_against_plus_minus": (r"\boxed{\pm 5}", r"\pm 5"),
    "an_interval_against_an_interval": (r"\boxed{(4, 6)}", "(4,6)"),
    "a_percentage_against_a_fraction": (r"\boxed{10\%}", "0.1"),
}


@pytest.mark.parametrize("response, reference", LEGITIMATE.values(), ids=LEGITIMATE.keys())
def test_a_legitimate_look_alike_still_verifies(response, reference):
    r = score(pipeline, {"response": response, "answer": reference})
    assert (r.reward, r.status) == (1.0, Status.OK), r.message


def test_an_answer_the_verifier_cannot_import_for_is_wrong_and_flagged_for_the_stage_to_check(monkeypatch):
    """An answer may reach a part of sympy nothing preloaded; on a worker whose sandbox uid cannot read the
    site-packages that is an ImportError, which must not let the answer pick `infra_error`: the verdict is
    `wrong`, flagged so that the stage checks the reference alone before blaming the answer."""
    import math_verify

    from workers.pipelines.math import equivalent

    def verify(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'sympy.series.limits'")

    monkeypatch.setattr(math_verify, "verify", verify)
    verdict = equivalent({"reference": "1", "answer": r"\sin(x)^2 + \cos(x)^2"})
    assert verdict["ok"] is False and "ModuleNotFoundError" in verdict["why"] and "environment" in verdict
    assert "bad_reference" not in verdict


def test_the_reference_failing_to_import_stays_the_farms_error(monkeypatch):
    import math_verify

    from workers.pipelines.math import equivalent

    def parse(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'latex2sympy2_extended'")

    monkeypatch.setattr(math_verify, "parse", parse)
    with pytest.raises(ModuleNotFoundError):
        equivalent({"reference": "1", "answer": "1"})


def test_a_parsed_answer_too_long_to_print_is_cut_in_the_details():
    r = score(pipeline, {"response": "\\boxed{" + "9" * 6000 + "}", "answer": "1"})
    assert (r.status, r.reward) == (Status.WRONG, 0.0), r.message
    assert all(len(p) <= 500 for p in r.details["parsed"])
