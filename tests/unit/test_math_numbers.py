"""The math pipeline's number rules: digit groups, e-notation, literals as written, and the comparison itself
(exact where both sides are exact, else relative 1e-6 or correct rounding to 6 significant digits; 0 only for 0)."""

from fractions import Fraction
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sympy import E, Float, Integer, Integral, Matrix, Pow, Rational, Symbol, UnevaluatedExpr, atan, exp, oo, pi, sqrt

from workers.pipelines.math.numbers import (
    Number,
    OutOfRange,
    compared_values,
    install,
    literal,
    loose_digits,
    normalize,
    parsed_number,
    same_value,
    ungroup_digits,
)

x = Symbol("x")


@pytest.mark.parametrize("latex, joined", [
    (r"5\,000", "5000"), (r"10{,}000", "10000"), (r"10\ 000", "10000"), (r"10\;000", "10000"), ("10~000", "10000"),
    ("10 000", "10000"), (r"12\,345\,678", "12345678"), (r"0.000\,001", "0.000001"), (r"3.141\,59", "3.14159"),
    (r"5\,000\,\text{m}", r"5000\,\text{m}"), (r"x = 1\,000", "x = 1000"), (r"10\thinspace 000", "10000"),
])
def test_groups_of_three_digits_are_one_number(latex, joined):
    assert ungroup_digits(latex) == joined


@pytest.mark.parametrize("latex", [r"1\,5", r"3{,}14", r"1\,0000", r"1234\,567", r"1.5\,000", r"10^2\,000", "x_1 000", r"\frac 1 000",
                                   r"\begin{pmatrix}1 & 2 \\ 300 & 4\end{pmatrix}"])
def test_digits_apart_in_other_groups_stay_apart(latex):
    assert ungroup_digits(latex) == latex


@pytest.mark.parametrize("latex", [r"1\,5", "12 34", r"3{,}14", r"1\quad 2", r"1.5\,000", r"x + 12 34"])
def test_digits_apart_that_are_no_groups_are_not_one_number(latex):
    assert "not groups of three" in loose_digits(ungroup_digits(latex))


@pytest.mark.parametrize("latex", [r"5\,\text{cm}", r"3\,\frac12", r"\begin{pmatrix}1 & 2 \\ 3 & 4\end{pmatrix}",
                                   "2x + 3", r"10\,000", r"\log_2 8", r"\frac 1 2", r"\dfrac 3 4", "x^2 3"])
def test_spacing_that_does_not_part_digits_is_no_loose_number(latex):
    assert loose_digits(ungroup_digits(latex)) is None


@pytest.mark.parametrize("latex, read", [
    ("9.11e-31", r"9.11\times10^{-31}"), ("2e-2", r"2\times10^{-2}"), (" -1.5E+3 ", r"-1.5\times10^{+3}"),
    ("e-2", "e-2"), ("2e-2x", "2e-2x"), ("2e - 2", "2e - 2"), (r"5\,000", "5000"),
])
def test_a_whole_answer_in_e_notation_is_scientific(latex, read):
    assert normalize(latex) == read


@pytest.mark.parametrize("latex, value, exact", [
    ("42", Fraction(42), True), ("-7", Fraction(-7), True), ("1,000", Fraction(1000), True), ("007", Fraction(7), True),
    ("0.5", Fraction(1, 2), False), (".25", Fraction(1, 4), False), ("5.", Fraction(5), False),
    (r"9.11\times10^{-31}", Fraction(911, 10**33), False), (r"2 \cdot 10^{5}", Fraction(200000), False),
    ("1e-5", Fraction(1, 10**5), False), ("$12$", Fraction(12), True), (r"10\%", Fraction(1, 10), True),
    (r"0\times10^{99999999}", Fraction(0), False),
])
def test_a_literal_is_read_exactly_as_written(latex, value, exact):
    number = literal(latex)
    assert (number.real, number.exact) == (value, exact)


@pytest.mark.parametrize("latex", ["x", r"\frac{1}{2}", "1/3", "2^{10}", "1,5", "1,0000", "", ".", "e", r"5\text{ cm}"])
def test_anything_but_a_bare_number_is_no_literal(latex):
    assert literal(latex) is None


def test_a_decimal_of_six_significant_digits_may_be_a_rounding_but_a_shorter_one_not():
    assert literal("0.333333").half_unit == Fraction(1, 2 * 10**6)
    assert literal("0.33").half_unit is None and literal("33333").half_unit is None


def test_a_percentage_keeps_its_number_of_percent():
    assert literal(r"12.5\%").count.real == Fraction(25, 2)


def test_a_five_thousand_digit_integer_is_read_past_pythons_digit_guard():
    assert literal("7" * 5000).real == int("7" * 2500) * 10**2500 + int("7" * 2500)


@pytest.mark.parametrize("latex", ["1" * 20001, "1e100001", "1e-100002", "1e1234567890"])
def test_a_number_past_the_sizes_compared_is_refused_not_computed(latex):
    with pytest.raises(OutOfRange):
        literal(latex)


def _same(reference: str, answer: str) -> bool:
    return same_value(literal(reference), literal(answer))


@pytest.mark.parametrize("reference, answer", [
    ("5", "5.0"), ("0.5", "0.50"), (r"9.11\times10^{-31}", "9.11e-31"), ("9.11e-31", r"0.911\times10^{-30}"),
    ("1.67262192e-27", r"1.672621\times10^{-27}"), ("0.333333333", "0.3333333"), ("0.333333", "0.3333333333"),
    ("0", "0.0"), ("0", "-0"), ("0.0", r"0\times10^{5}"), (r"50\%", "0.5"), (r"50\%", "50"), ("50", r"50\%"),
    ("0.5", r"50\%"), (r"50\%", r"50.0\%"), ("1" * 2000, "1" * 2000), ("123456789", "123456789.1"),
])
def test_equal_numbers_agree(reference, answer):
    assert _same(reference, answer)


@pytest.mark.parametrize("reference, answer", [
    (r"9.11\times10^{-31}", r"1.67\times10^{-27}"), ("1e-7", "0"), ("1.2e-7", "0"), ("0", "1e-13"), ("0", "0.000001"),
    ("0.0000014", "0.000001"), ("0.33", "0.333333"), ("0.333333", "0.333334"), ("1" * 2000, "1" * 1999 + "2"),
    ("5", "5.1"), ("12.75", "12.754"), ("0.5", "0.54"), (r"10\%", r"0.1\%"), ("1e-100", "2e-100"), ("1e100", "2e100"),
    ("1000000", "1000001"),
])
def test_different_numbers_do_not(reference, answer):
    assert not _same(reference, answer)


def test_relative_one_in_a_million_is_the_line():
    # 1/3 is 0.333333... : 0.3333333 misses by 1e-7 relative and passes; 0.33333 misses by 1e-5 and fails
    third = Number(Fraction(1, 3))
    assert same_value(third, literal("0.3333333")) and not same_value(third, literal("0.33333"))
    assert not same_value(third, Number(Fraction(333333, 10**6), exact=False))  # 1e-6 exactly, no rounding credit


@given(st.integers(min_value=-(10**3000), max_value=10**3000))
def test_any_integer_is_itself_and_not_its_neighbour(n):
    assert _same(str(n), str(n)) and not _same(str(n), str(n + 1))


@given(st.integers(min_value=1000, max_value=10**30), st.sampled_from([r"\,", "{,}", r"\ ", r"\;", " ", "~"]))
def test_any_integer_written_in_groups_of_three_is_that_integer(n, separator):
    digits = str(n)
    head = len(digits) % 3 or 3
    grouped = separator.join([digits[:head]] + [digits[i:i + 3] for i in range(head, len(digits), 3)])
    assert literal(ungroup_digits(grouped)).real == n


@given(st.integers(min_value=1, max_value=10**12), st.integers(min_value=-10**7, max_value=10**7),
       st.integers(min_value=-300, max_value=300))
def test_a_verdict_on_decimals_does_not_depend_on_their_scale(mantissa, offset, power):
    # the class of 1.67e-27 passing for 9.11e-31: whether two decimals agree cannot depend on the unit they are in
    reference, answer = Fraction(mantissa), Fraction(mantissa) + Fraction(offset, 10**6)
    scale = Fraction(10) ** power
    plain = same_value(Number(reference, exact=False), Number(answer, exact=False))
    scaled = same_value(Number(reference * scale, exact=False), Number(answer * scale, exact=False))
    assert plain == scaled


def test_exact_values_are_compared_exactly_however_small():
    tiny = parsed_number(sqrt(2) * Integer(10) ** -40)
    assert not same_value(Number(Fraction(0)), tiny)
    assert not same_value(parsed_number(sqrt(3) * Integer(10) ** -40), tiny)
    assert same_value(parsed_number(pi / 4), parsed_number(atan(Rational(1, 2)) + atan(Rational(1, 3))))


def test_an_exact_surd_agrees_with_its_decimal_to_a_millionth():
    root = parsed_number(sqrt(2) / 2)
    assert same_value(root, literal("0.70710678")) and not same_value(root, literal("0.7071"))


@pytest.mark.parametrize("value", [x, x + 1, oo, -oo, Matrix([1, 2]), Symbol("y") * 0 + Symbol("z")])
def test_what_is_not_one_number_is_left_to_math_verify(value):
    assert parsed_number(value) is None


def test_a_parsed_value_is_evaluated():
    assert parsed_number(Integer(2) * Integer(10) ** 5).real == 200000
    assert parsed_number(E - 2).exact and not parsed_number(Float("0.5") * sqrt(2)).exact


def test_an_integral_counts_by_its_value_as_a_decimal():
    integral = parsed_number(Integral(x**2 * exp(x), (x, 0, 1)))
    assert not integral.exact and same_value(integral, parsed_number(E - 2))


def test_a_parsed_percentage_is_its_value_or_its_number_of_percent():
    number = parsed_number(Integer(10) * UnevaluatedExpr(Rational(1, 100)))
    assert (number.real, number.count.real) == (Fraction(1, 10), Fraction(10))


def test_a_parsed_value_past_the_sizes_compared_is_refused_before_it_is_computed():
    with pytest.raises(OutOfRange):
        parsed_number(Pow(10, Integer(10) ** 10, evaluate=False))


def test_an_equation_is_compared_by_its_right_side_as_math_verify_would():
    from sympy import Eq, Function

    assert compared_values(Integer(5), Eq(x, 5)) == (5, 5)
    assert compared_values(Eq(x, 5), Integer(5)) == (5, 5)
    assert compared_values(Integer(5), Eq(Function("f")(2), 5)) == (5, 5)
    assert compared_values(Eq(x, 3), Eq(Symbol("y"), 3)) == (Eq(x, 3), Eq(Symbol("y"), 3))


def test_installed_math_verify_compares_numbers_by_our_rule_and_matrices_element_by_element():
    calls = []
    grader = SimpleNamespace(sympy_numeric_eq=lambda a, b, r, p: calls.append((a, b)) or True)
    install(grader)
    install(grader)  # once only: a second install does not wrap the first
    assert not grader.sympy_numeric_eq(Float("9.11e-31"), Float("1.67e-27"), 6, 15)
    assert grader.sympy_numeric_eq(Rational(1, 3), Float("0.3333333"), 6, 15)
    assert not grader.sympy_numeric_eq(x - Float("9.11e-31"), x - Float("1.67e-27"), 6, 15)
    assert grader.sympy_numeric_eq(x / 3, Float("0.3333333") * x, 6, 15)
    assert grader.sympy_numeric_eq(Matrix([1]), Matrix([1]), 6, 15) and len(calls) == 1
