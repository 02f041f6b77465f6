"""The math pipeline's answer-form rules: one final answer, one value where the reference is one value, and
no unevaluated integral, limit, sum, product or derivative standing for the value."""

import pytest
from sympy import (And, Derivative, Eq, FiniteSet, Integer, Integral, Interval, Limit, Matrix, Product, Sum, Symbol,
                   Tuple, sin)

from workers.pipelines.math.answer import (
    answer_form,
    count_numbers,
    distinct_answers,
    restated_parsed,
    restated_text,
    several_values_parsed,
    several_values_text,
)

x = Symbol("x")


def test_answers_differing_only_in_spacing_are_one_answer():
    assert distinct_answers(["5", " 5 ", r"5\,", r"\left(1\right)", "(1)"]) == ["5", r"\left(1\right)"]


def test_fraction_spellings_are_one_answer():
    assert answer_form(r"\dfrac{1}{2}") == answer_form(r"\frac12") == answer_form(r"\frac{1}{2}")


def test_different_answers_are_kept_in_the_order_they_first_appear():
    assert distinct_answers(["3", "5", "3"]) == ["3", "5"]


@pytest.mark.parametrize("latex, why", [
    (r"5 \pm 1", "±"), (r"\mp 2", "±"),
    (r"3 \lor 5", r"\lor"), (r"\{3\} \cup \{5\}", r"\cup"),
    (r"3 \text{ or } 5", "'or'"), ("3 and 5", "'and'"),
    ("3, 5", "a list"), ("3; 5", "a list"), ("x = 3, 5", "a list"),
    ("4 < x < 6", "chain"), ("x = 3 = 5", "chain"),
    ("x > 4", "relation '>'"), (r"x \in (4, 6)", r"relation '\in'"),
    ("3 = 5", "equation between two values"), (r"3\text{ m} = 5", "equation between two values"),
    (r"5 \text{ cm (not 3)}", r"\text{}"), (r"12 \text{ h } 30 \text{ min}", r"\text{}"),
])
def test_several_values_are_seen_in_the_text(latex, why):
    assert why in several_values_text(latex)


@pytest.mark.parametrize("latex", [
    "5", r"\frac{1}{2}", "1,000", "12,345,678", r"1{,}000", r"5\,\text{cm}", r"5 \text{ m}^2", r"5\text{ cm}^{3}",
    "x = 5", "x_1 = 5", "x_{12} = 5", "f(2) = 5", "a + b = 5", r"x \approx 5", r"\text{5}", r"\mathbf{5}",
    r"\max(3, 5)", r"\lim_{x \to 0} \frac{\sin x}{x}", r"\text{Tuesday}", r"\operatorname{color}",
])
def test_one_value_shows_nothing_in_the_text(latex):
    assert several_values_text(latex) is None


def test_numbers_are_counted_with_their_separators():
    assert [count_numbers(t) for t in ("1,000", "2.5", r"3 \lor 5", "x")] == [1, 1, 2, 0]


@pytest.mark.parametrize("value, why", [
    (FiniteSet(3, 5), "a set of 2 values"), (FiniteSet(5), "a set"), (Interval(4, 6), "an interval"),
    (Tuple(3, 5), "a tuple"), ([3, 5], "a tuple or list"), (Matrix([[3], [5]]), "a matrix"),
    (x > 4, "an inequality"), (And(x > 4, x < 6), "logical combination"),
    (Eq(x, FiniteSet(3, 5), evaluate=False), "a set"),
    (Eq(3, 5), "true/false"),
])
def test_several_values_are_seen_in_the_parsed_answer(value, why):
    assert why in several_values_parsed(value)


@pytest.mark.parametrize("value", [Integer(5), x + 1, Eq(x, 5), x])
def test_one_parsed_value_is_one_value(value):
    assert several_values_parsed(value) is None


@pytest.mark.parametrize("latex, why", [
    (r"\int_0^1 x^2 e^x\,dx", r"\int"), (r"\iint_D f", r"\iint"), (r"\oint_C f", r"\oint"),
    (r"\lim_{x\to0}\frac{\sin x}{x}", r"\lim"), (r"\limsup a_n", r"\limsup"), (r"\sum_{k=1}^{3} k", r"\sum"),
    (r"\prod_{k=1}^{5} k", r"\prod"), (r"\frac{\partial}{\partial x} x^2y", r"\partial"),
    (r"\frac{d}{dx} x^3", "derivative"), (r"\frac{dy}{dx}", "derivative"),
    (r"\dfrac{\mathrm{d}}{\mathrm{d}t} t^2", "derivative"),
    (r"\frac{d^{2}}{dx^{2}} x^4", "derivative"), (r"1 + \int_0^1 x\,dx", r"\int"),
])
def test_an_unevaluated_problem_is_seen_in_the_text(latex, why):
    assert why in restated_text(latex)


@pytest.mark.parametrize("latex", ["e - 2", r"\frac{d}{2}", r"\frac{d}{d+1}", r"\sin x", r"\interval", r"\summary",
                                   r"\frac{1}{2}", r"\text{dx}"])
def test_a_value_is_no_unevaluated_problem(latex):
    assert restated_text(latex) is None


@pytest.mark.parametrize("value, why", [
    (Integral(x**2, (x, 0, 1)), "an integral"), (Limit(sin(x) / x, x, 0), "a limit"), (Sum(x, (x, 1, 3)), "a sum"),
    (Product(x, (x, 1, 5)), "a product"), (Derivative(x**3, x), "a derivative"),
    (1 + Integral(x, (x, 0, 1)), "an integral"), (FiniteSet(1, Sum(x, (x, 1, 3))), "a sum"),
])
def test_an_unevaluated_problem_is_seen_in_the_parse_anywhere(value, why):
    assert restated_parsed(value) == why


@pytest.mark.parametrize("value", [Integer(5), x + 1, "a string", Matrix([[1, 2]])])
def test_a_parsed_value_is_no_unevaluated_problem(value):
    assert restated_parsed(value) is None
