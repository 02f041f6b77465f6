"""Hostile math responses that aim at how values are compared rather than at how many are given: a tiny number
for another (math-verify compared floats to 6 decimal places), the problem restated as its answer (an
unevaluated integral evaluates to the reference), digit groups read as a product (`5\\,000` was 0), and answers
that make the verifier fail so that the request is masked. Every one earns 0 with a model-failure status; the
honest look-alikes keep 1.0.
"""

from __future__ import annotations

import os
import signal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from farm.knobs import Knobs
from farm.results import Status
from workers.pipelines import math
from workers.pipelines.math import pipeline
from workers.runner import score

pytestmark = pytest.mark.timeout(300)

HOSTILE = {
    # tiny numbers: math-verify rounded both to 6 decimal places (or chopped their difference) and saw 0 = 0
    "a_proton_mass_for_an_electron_mass": (r"\boxed{1.67\times10^{-27}}", r"9.11\times10^{-31}", "as numbers"),
    "e_notation_of_another_mass": (r"\boxed{1.67e-27}", "9.11e-31", "as numbers"),
    "zero_for_a_small_probability": (r"\boxed{0}", r"1.2\times10^{-7}", "as numbers"),
    "a_decimal_zero_for_a_small_probability": (r"\boxed{0.0}", r"1.2\times10^{-7}", "as numbers"),
    "six_decimal_zeros_for_a_small_decimal": (r"\boxed{0.000000}", "0.0000003", "as numbers"),
    "zero_point_zero_for_a_tiny_fraction": (r"\boxed{0.0}", r"\frac{1}{10^{9}}", "as numbers"),
    "a_tiny_number_for_zero": (r"\boxed{1e-13}", "0", "as numbers"),
    "a_tiny_surd_for_another": (r"\boxed{\sqrt{3}\cdot 10^{-20}}", r"\sqrt{2}\cdot 10^{-20}", "as numbers"),
    "six_decimals_of_a_small_number": (r"\boxed{0.000001}", "0.0000014", "as numbers"),
    "an_assignment_of_a_tiny_number": (r"\boxed{x = 1.67\times10^{-27}}", r"9.11\times10^{-31}", "as numbers"),
    "a_tiny_number_in_a_set": (r"\boxed{\{1.67\times10^{-27}, 1\}}", r"\{9.11\times10^{-31}, 1\}", "not equivalent"),
    "a_tiny_endpoint_of_an_interval": (r"\boxed{(1.67\times10^{-27}, 1)}", r"(9.11\times10^{-31}, 1)",
                                       "not equivalent"),
    "a_tiny_bound_of_an_inequality": (r"\boxed{x < 1.67\times10^{-27}}", r"x < 9.11\times10^{-31}", "not equivalent"),
    "a_tiny_constant_term": (r"\boxed{x + 1.67\times10^{-27}}", r"x + 9.11\times10^{-31}", "not equivalent"),
    # the problem restated: math-verify evaluated it and found the reference
    "the_integral_itself": (r"\boxed{\int_0^1 x^2 e^x\,dx}", "e - 2", r"unevaluated ('\int')"),
    "the_limit_itself": (r"\boxed{\lim_{x\to0}\frac{\sin x}{x}}", "1", r"unevaluated ('\lim')"),
    "the_sum_itself": (r"\boxed{\sum_{k=1}^{100} k}", "5050", r"unevaluated ('\sum')"),
    "the_product_itself": (r"\boxed{\prod_{k=1}^{5} k}", "120", r"unevaluated ('\prod')"),
    "the_derivative_itself": (r"\boxed{\frac{d}{dx} x^3}", "3x^2", "unevaluated (a derivative"),
    "the_partial_derivative_itself": (r"\boxed{\frac{\partial}{\partial x}(x^2 y)}", "2xy", r"('\partial')"),
    "an_integral_inside_an_answer": (r"\boxed{1 + \int_0^1 x\,dx}", r"\frac{3}{2}", r"unevaluated ('\int')"),
    # digit groups read as a product or a sum
    "five_thousand_for_zero": (r"\boxed{5\,000}", "0", "as numbers"),
    "digits_apart_summed_into_the_answer": (r"\boxed{1\,5}", "6", "not one number"),
    "two_numbers_side_by_side": (r"\boxed{12 34}", "46", "not one number"),
    "a_decimal_comma_in_braces": (r"\boxed{3{,}14}", "314", "not one number"),
}


@pytest.mark.parametrize("response, reference, why", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_response_aiming_at_how_values_compare_earns_nothing_and_is_told_why(response, reference, why):
    r = score(pipeline, {"response": response, "answer": reference})
    assert (r.reward, r.status) == (0.0, Status.WRONG), r.message
    assert why in r.message


LEGITIMATE = {
    "a_thin_space_thousands_separator": (r"\boxed{10\,000}", "10000"),
    "a_braced_comma_thousands_separator": (r"\boxed{10{,}000}", "10000"),
    "a_spaced_thousands_separator": (r"\boxed{10 000}", "10000"),
    "a_control_space_thousands_separator": (r"\boxed{10\ 000}", "10000"),
    "five_thousand_with_a_thin_space": (r"\boxed{5\,000}", "5000"),
    "millions_in_groups": (r"\boxed{1\,234\,567}", "1234567"),
    "a_reference_written_in_groups": (r"\boxed{10000}", r"10\,000"),
    "grouped_decimals": (r"\boxed{0.000\,001}", r"10^{-6}"),
    "groups_before_a_unit": (r"\boxed{5\,000\,\text{m}}", "5000"),
    "times_ten_for_e_notation": (r"\boxed{9.11\times10^{-31}}", "9.11e-31"),
    "e_notation_for_times_ten": (r"\boxed{9.11e-31}", r"9.11\times10^{-31}"),
    "a_cdot_and_another_mantissa": (r"\boxed{0.911\cdot 10^{-30}}", "9.11e-31"),
    "a_more_precise_constant": (r"\boxed{1.672621\times10^{-27}}", "1.67262192e-27"),
    "a_named_tiny_number": (r"\boxed{x = 9.11\times10^{-31}}", "9.11e-31"),
    "the_same_tiny_set": (r"\boxed{\{1, 9.11\times10^{-31}\}}", r"\{9.11\times10^{-31}, 1\}"),
    "a_tiny_surd_written_another_way": (r"\boxed{\frac{\sqrt{2}}{10^{20}}}", r"\sqrt{2}\cdot10^{-20}"),
    "e_minus_two_without_spaces": (r"\boxed{e-2}", "e - 2"),
    "the_value_of_an_integral_reference": (r"\boxed{e - 2}", r"\int_0^1 x^2 e^x\,dx"),
    "an_integral_against_the_same_integral": (r"\boxed{\int_0^1 x^2 e^x\,dx}", r"\int_0^1 x^2 e^x\,dx"),
    "the_value_of_a_sum_reference": (r"\boxed{6}", r"\sum_{k=1}^{3} k"),
    "a_fraction_for_nine_decimals": (r"\boxed{\frac{1}{3}}", "0.333333333"),
    "seven_decimals_of_a_third": (r"\boxed{0.3333333}", r"\frac{1}{3}"),
    "a_third_rounded_to_six_digits": (r"\boxed{0.333333}", r"\frac{1}{3}"),
    "a_third_for_its_six_digit_rounding": (r"\boxed{\frac{1}{3}}", "0.333333"),
    "a_surd_in_decimals": (r"\boxed{0.70710678}", r"\frac{\sqrt{2}}{2}"),
    "two_pi_in_decimals": (r"\boxed{6.283185}", r"2\pi"),
    "zero_point_zero_for_zero": (r"\boxed{0.0}", "0"),
    "minus_zero_for_zero": (r"\boxed{-0}", "0"),
    "a_percentage_for_its_value": (r"\boxed{50\%}", "0.5"),
    "a_percentage_for_its_number": (r"\boxed{50}", r"50\%"),
    "a_decimal_for_an_integer": (r"\boxed{3.0}", "3"),
    "a_logarithm_with_a_bare_base": (r"\boxed{\log_2 8}", "3"),
    "a_fraction_with_bare_arguments": (r"\boxed{\frac 1 2}", "0.5"),
}


@pytest.mark.parametrize("response, reference", LEGITIMATE.values(), ids=LEGITIMATE.keys())
def test_an_honest_value_in_another_form_still_verifies(response, reference):
    r = score(pipeline, {"response": response, "answer": reference})
    assert (r.reward, r.status) == (1.0, Status.OK), r.message


BIG = "1234567890" * 200  # 2000 digits


@pytest.mark.parametrize("digits", [BIG, "7" * 5000], ids=["2000_digits", "5000_digits_past_pythons_guard"])
def test_a_long_integer_is_compared_exactly(digits):
    assert score(pipeline, {"response": f"\\boxed{{{digits}}}", "answer": digits}).status is Status.OK
    other = digits[:-1] + str((int(digits[-1]) + 1) % 10)
    r = score(pipeline, {"response": f"\\boxed{{{other}}}", "answer": digits})
    assert (r.status, r.reward) == (Status.WRONG, 0.0) and "as numbers" in r.message


def test_a_long_integer_reference_is_met_by_an_expression_of_it():
    r = score(pipeline, {"response": r"\boxed{10^{5000} - 1}", "answer": "9" * 5000})
    assert r.status is Status.OK, r.message


UNHANDLED = {
    "a_binomial_past_pythons_digit_guard": (r"\binom{20000}{10000}", "as numbers"),  # was infra_error
    "a_power_tower": (r"10^{10^{10}}", "beyond the ones compared"),
    "an_exponent_of_a_billion": ("1e999999999", "beyond the ones compared"),
    "a_factorial_of_a_hundred_thousand": ("(10^{5})!", "beyond the ones compared"),
    "thirty_thousand_digits": ("9" * 30000, "beyond the ones compared"),
    "roots_nested_five_hundred_deep": ("\\sqrt{" * 500 + "2" + "}" * 500, "answer"),
}


@pytest.mark.parametrize("answer, why", UNHANDLED.values(), ids=UNHANDLED.keys())
def test_an_answer_the_verifier_cannot_handle_is_wrong_not_masked(answer, why):
    r = score(pipeline, {"response": f"\\boxed{{{answer}}}", "answer": "5"})
    assert (r.status, r.reward) == (Status.WRONG, 0.0), r.message
    assert why in r.message


def test_an_answer_whose_parse_is_too_long_to_send_back_is_judged_not_lost():
    entries = " & ".join([r"\binom{14000}{7000}"] * 300)  # 1.2 MB of digits once parsed: over the reply cap
    r = score(pipeline, {"response": f"\\boxed{{\\begin{{pmatrix}}{entries}\\end{{pmatrix}}}}",
                         "answer": r"\begin{pmatrix}1 & 2\end{pmatrix}"})
    assert (r.status, r.reward) == (Status.WRONG, 0.0), r.message


def _failing_on(trigger: str, failure):
    judge = math._judge

    def failing(reference, gold, expected, answer):
        if trigger in (answer, "*"):
            failure()
        return judge(reference, gold, expected, answer)

    return failing


def _missing_module():
    raise ModuleNotFoundError("No module named 'sympy.not_preloaded'")


def _endless():
    _endless()


def test_an_answer_that_reaches_a_module_the_child_cannot_import_is_wrong(monkeypatch):
    math.warm_up()
    monkeypatch.setattr(math, "_judge", _failing_on("14/2", _missing_module))  # forked children inherit it
    r = score(pipeline, {"response": r"\boxed{14/2}", "answer": "7"})
    assert (r.status, r.reward) == (Status.WRONG, 0.0) and "ModuleNotFoundError" in r.message


def test_a_verifier_that_cannot_import_for_the_reference_alone_either_is_an_infra_error(monkeypatch):
    math.warm_up()
    monkeypatch.setattr(math, "_judge", _failing_on("*", _missing_module))
    r = score(pipeline, {"response": r"\boxed{7}", "answer": "7"})
    assert r.status is Status.INFRA_ERROR and "on the reference alone too" in r.message


def test_an_answer_that_drives_the_verifier_past_its_recursion_limit_is_wrong(monkeypatch):
    math.warm_up()
    monkeypatch.setattr(math, "_judge", _failing_on("14/2", _endless))
    r = score(pipeline, {"response": r"\boxed{14/2}", "answer": "7"})
    assert (r.status, r.reward) == (Status.WRONG, 0.0) and "RecursionError" in r.message


def test_a_verifier_child_that_dies_on_an_answer_is_wrong(monkeypatch):
    math.warm_up()
    monkeypatch.setattr(math, "_judge", _failing_on("14/2", lambda: os.kill(os.getpid(), signal.SIGSEGV)))
    r = score(pipeline, {"response": r"\boxed{14/2}", "answer": "7"})
    assert (r.status, r.reward) == (Status.WRONG, 0.0) and "the verifier failed on it" in r.message


_TOKENS = ["1", "0", "5", "9", ".", ",", r"\,", " ", "{,}", "e", "-", "+", "^", "{", "}", "(", ")", r"\frac{",
           r"\sqrt{", r"\int", r"\sum", r"\lim", "x", r"\%", r"\times10^{", r"\binom{", r"\pi", "=", r"\infty", "!",
           r"\text{", "\\"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_TOKENS), min_size=1, max_size=14).map("".join))
def test_no_answer_makes_the_math_stage_mask_its_request(answer):
    r = score(pipeline, {"response": f"The answer is {answer}", "answer": r"9.11\times10^{-31}"},
              knobs=Knobs().with_stage("math.verify", timeout_s=5))
    assert r.status in (Status.OK, Status.WRONG, Status.TIMEOUT), r.message
