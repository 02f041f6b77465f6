"""How the `math` pipeline compares numbers (the rule is stated in math.py). math-verify rounds floats to six
decimal places and chops tiny differences, so 1.67e-27 passed for 9.11e-31; here a decimal must agree to a
relative 1e-6, and exact values (integers, fractions, surds) exactly. Pure text functions and exact fractions;
sympy is imported inside the functions that take its objects (in the verifying child, never in clients).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

TOLERANCE = Fraction(1, 10**6)  # relative, to the reference
ROUNDED_DIGITS = 6  # a decimal this precise may be the other side correctly rounded (half a unit: <= 5e-6)
EXPONENT_LIMIT = 100_000  # sizes compared: 10^-100000 .. 10^100000
DIGITS_LIMIT = 20_000  # significant digits compared (a 2000-digit integer is one number)


class OutOfRange(ValueError):
    """A number too large, too small or too long to compare (its digits alone would cost minutes)."""


# spacing that may separate groups of three digits: `10\,000`, `10{,}000`, `10\ 000`, `10\;000`, `10~000`, `10 000`
_SPACE = r"(?:\s|(?<!\\)\\[,;: ]|~|\{,\}|\\(?:thinspace|medspace|thickspace)(?![a-zA-Z]))"
_DIGIT_RUN = re.compile(rf"\d+(?:{_SPACE}+\d+)*")  # one token at a time: linear on any text
_LOOSE = re.compile(rf"(?<!\d)\d++(?:{_SPACE}|\\q?quad(?![a-zA-Z])|\\!)+\d+")
_ARGUMENT = re.compile(r"(?:\\[dt]?frac|\\binom|\\sqrt|[\^_])\s*$")  # `\frac 1 2`, `\log_2 8`: digits as arguments
_E_NOTATION = re.compile(r"\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+))[eE]([+-]?\d+)\s*")
_LITERAL = re.compile(r"""(?P<sign>[+-]?)(?P<int>\d{1,3}(?:,\d{3})+|\d*)(?:\.(?P<frac>\d*))?
    (?:[eE](?P<e>[+-]?\d+)|\s*(?:\\times|\\cdot|×)\s*10\s*\^\s*(?:\{\s*(?P<p>[+-]?\d+)\s*\}|(?P<p1>\d)))?
    \s*(?P<percent>\\?%)?""", re.VERBOSE)


def ungroup_digits(latex: str) -> str:
    """`latex` with thousands separators dropped: `5\\,000` is 5000 (math-verify read it as 5*000 = 0). Only
    groups of exactly three digits are joined: after the first group (1 to 3 digits) of an integer, or before
    the last group after a decimal point (`0.000\\,001`). `1\\,5`, `3{,}14` and `x^2 000` stay apart."""

    def join(run: re.Match[str]) -> str:
        groups = re.split(f"{_SPACE}+", run.group())
        if len(groups) == 1 or _argument(latex, run.start()):
            return run.group()
        if latex[run.start() - 1:run.start()] == ".":
            grouped = all(len(g) == 3 for g in groups[:-1]) and len(groups[-1]) <= 3
        else:
            grouped = len(groups[0]) <= 3 and all(len(g) == 3 for g in groups[1:])
        return "".join(groups) if grouped else run.group()

    return _DIGIT_RUN.sub(join, latex)


def _argument(latex: str, start: int) -> bool:
    """Whether the digits at `start` are a command's argument or an index (`\\frac 1 2`, `x^2 3`, `\\log_2 8`)."""
    return _ARGUMENT.search(latex[max(0, start - 16):start]) is not None


def loose_digits(latex: str) -> str | None:
    """Digits side by side with only spacing between them, once thousands separators are joined (`1\\,5`,
    `12 34`, `3{,}14`): math-verify reads `12 34` as 12 + 34; it is no one number. None when there are none."""
    for found in _LOOSE.finditer(latex):
        if not _argument(latex, found.start()):
            return f"'{found.group()}' writes digits apart that are not groups of three"
    return None


def normalize(latex: str) -> str:
    """`latex` as the verifier reads it: digit groups joined, and a whole answer in e-notation (`9.11e-31`,
    which math-verify reads as 9.11e - 31) written as `9.11\\times10^{-31}`."""
    text = ungroup_digits(latex)
    if found := _E_NOTATION.fullmatch(text.strip("$")):
        return f"{found.group(1)}\\times10^{{{found.group(2)}}}"
    return text


@dataclass(frozen=True)
class Number:
    """One value: exact (integer, fraction, exact expression) or decimal (written with a point or an exponent)."""

    real: Fraction
    imag: Fraction = Fraction(0)
    exact: bool = True
    half_unit: Fraction | None = None  # a decimal with >= ROUNDED_DIGITS significant digits: half its last unit
    expr: Any = None  # an exact irrational value's sympy expression: compared exactly, not by its digits
    count: Number | None = None  # a percentage's number of percent (10 for 10%), which may stand for a value


def _integer(digits: str) -> int:
    """int(digits) without Python's 4300-digit guard (a 5000-digit answer is still a number to compare)."""
    n = 0
    for start in range(0, len(digits), 4000):
        chunk = digits[start:start + 4000]
        n = n * 10 ** len(chunk) + int(chunk)
    return n


def _scaled(n: int, exponent: int) -> Fraction:
    return Fraction(n * 10**exponent) if exponent >= 0 else Fraction(n, 10**-exponent)


def literal(latex: str) -> Number | None:
    """The number a bare literal writes (`-12.5`, `1,000`, `9.11\\times10^{-31}`, `2e5`, `10\\%`), exactly as
    written; None for anything else. Raises OutOfRange past the sizes compared."""
    found = _LITERAL.fullmatch(latex.strip().strip("$").strip())
    if found is None or not (found["int"] or found["frac"]):
        return None
    digits = found["int"].replace(",", "") + (found["frac"] or "")
    power = found["e"] or found["p"] or found["p1"] or "0"
    significant = digits.lstrip("0")
    exact = found["frac"] is None and not (found["e"] or found["p"] or found["p1"])
    if not significant:
        return Number(Fraction(0), exact=exact)
    if len(power) > 9 or len(significant) > DIGITS_LIMIT:
        raise OutOfRange(f"a number written with {len(significant)} digits and an exponent of {len(power)} digits")
    exponent = int(power) - len(found["frac"] or "") - (2 if found["percent"] else 0)
    if abs(len(significant) + exponent) > EXPONENT_LIMIT:
        raise OutOfRange(f"a number of about 10^{len(significant) + exponent}")
    value = _scaled(_integer(significant), exponent) * (-1 if found["sign"] == "-" else 1)
    half = _scaled(1, exponent) / 2 if not exact and len(significant) >= ROUNDED_DIGITS else None
    number = Number(value, exact=exact, half_unit=half)
    if found["percent"]:
        return replace(number, count=Number(value * 100, exact=exact, half_unit=half and half * 100))
    return number


def _agree(reference: Number, answer: Number) -> bool:
    if reference.exact and answer.exact:
        if reference.expr is None and answer.expr is None:
            return (reference.real, reference.imag) == (answer.real, answer.imag)
        return _exactly_equal(_sympy(reference), _sympy(answer))
    size = reference.real**2 + reference.imag**2
    miss = (answer.real - reference.real) ** 2 + (answer.imag - reference.imag) ** 2
    if size == 0:  # no scale to be relative to: only a zero is zero (0.0 and 0\times10^{5} are)
        return miss == 0
    if miss < TOLERANCE**2 * size:
        return True
    return any(side.half_unit is not None and miss <= side.half_unit**2 for side in (reference, answer))


def same_value(reference: Number, answer: Number) -> bool:
    """Whether `answer` is `reference`: exactly when both are exact, else to a relative 1e-6 (or the other side
    correctly rounded to a decimal of >= 6 significant digits); a reference of 0 takes only 0. A percentage
    on one side is its value or its number of percent (10% is 0.1 or 10); on both sides, its value."""
    if (reference.count is None) == (answer.count is None):
        return _agree(reference, answer)
    if reference.count is not None:
        return _agree(reference, answer) or _agree(reference.count, answer)
    return _agree(reference, answer) or _agree(reference, answer.count)


def _sympy(number: Number) -> Any:
    from sympy import I, Rational

    if number.expr is not None:
        return number.expr
    real, imag = number.real, number.imag
    return Rational(real.numerator, real.denominator) + I * Rational(imag.numerator, imag.denominator)


def _exactly_equal(a: Any, b: Any) -> bool:
    """Exact values: equal when their difference is 0, or has no digit sympy can find and is not proved nonzero
    (atan(1/2) + atan(1/3) - pi/4); `\\sqrt{2}\\cdot10^{-40}` is not 0, however small."""
    from sympy import N

    difference = a - b
    if difference == 0:
        return True
    if not all(part == 0 or (part.is_Float and part._prec <= 1) for part in N(difference, 30).as_real_imag()):
        return False
    return difference.equals(0) is not False


def _fraction(part: Any) -> Fraction:
    """A sympy Float or Rational as an exact fraction; a Float whose digits sympy could not find is 0."""
    if part.is_Rational:
        p, q = int(part.p), int(part.q)
        if abs(p.bit_length() - q.bit_length()) * 0.302 > EXPONENT_LIMIT:
            raise OutOfRange("a number of more than 100000 digits")
        return Fraction(p, q)
    sign, mantissa, exponent, bits = part._mpf_
    if mantissa == 0 or part._prec <= 1:
        return Fraction(0)
    if abs(exponent + bits) * 0.302 > EXPONENT_LIMIT:
        raise OutOfRange(f"a number of about 2^{exponent + bits}")
    value = Fraction(mantissa * 2**exponent) if exponent >= 0 else Fraction(mantissa, 2**-exponent)
    return -value if sign else value


def _evaluated(expr: Any) -> Number | None:
    from sympy import Derivative, Float, Integral, Limit, N, Product, Sum

    parts = N(expr, 40).as_real_imag()  # first, cheaply: a size past the limit is refused before doit() builds it
    if not all(part.is_Number and part.is_finite for part in parts):  # a NaN or an infinity is no value
        return None
    real, imag = (_fraction(part) for part in parts)
    if expr.atoms(Float) or expr.has(Integral, Limit, Sum, Product, Derivative):  # a reference `\int_0^1 x^2 e^x dx`:
        return Number(real, imag, exact=False)  # its value by quadrature (symbolic integration may need other modules)
    value = expr.doit()
    if value.is_Rational:
        return Number(_fraction(value))
    return Number(real, imag, expr=value)


def parsed_number(value: Any) -> Number | None:
    """The number a parsed answer or reference (math-verify's sympy object) is, evaluated; None for anything that
    is not one number (a symbol, an undefined function, a set, matrix or relation, infinity) or that sympy cannot
    evaluate. An integral or sum counts by its numeric value (the answer may only write one where the reference
    does). Raises OutOfRange past the sizes compared."""
    from sympy import Expr, Rational, S, UnevaluatedExpr
    from sympy.core.function import AppliedUndef

    if not isinstance(value, Expr) or getattr(value, "is_Matrix", False) or value.free_symbols:
        return None
    if value.atoms(AppliedUndef) or value.has(S.Infinity, S.NegativeInfinity, S.ComplexInfinity, S.NaN):
        return None
    percent = UnevaluatedExpr(Rational(1, 100))  # how latex2sympy writes `\%`
    unwrapped = value.replace(lambda e: isinstance(e, UnevaluatedExpr), lambda e: e.args[0])
    number = _evaluated(unwrapped)
    if number is None or not value.has(percent):
        return number
    count = _evaluated(value.replace(lambda e: e == percent, lambda e: S.One).replace(
        lambda e: isinstance(e, UnevaluatedExpr), lambda e: e.args[0]))
    return replace(number, count=count)


def compared_values(gold: Any, pred: Any) -> tuple[Any, Any]:
    """The values math-verify would compare: an answer `f(2) = 5` against a reference that is no equation is 5,
    a reference `x = 5` against an answer that is none is 5, and `x = 5` against `x = 5` compares 5 with 5."""
    from latex2sympy2_extended import is_expr_of_only_symbols
    from sympy import Eq

    gold_eq, pred_eq = isinstance(gold, Eq), isinstance(pred, Eq)
    if gold_eq and pred_eq:
        if is_expr_of_only_symbols(gold.lhs) and gold.lhs == pred.lhs:
            return gold.rhs, pred.rhs
        return gold, pred
    if pred_eq:
        return gold, pred.rhs
    if gold_eq and is_expr_of_only_symbols(gold.lhs):
        return gold.rhs, pred
    return gold, pred


def _terms(expr: Any) -> dict[Any, Any]:
    from sympy import Add

    terms: dict[Any, Any] = {}
    for term in Add.make_args(expr):
        coefficient, rest = term.as_coeff_Mul()
        terms[rest] = terms.get(rest, 0) + coefficient
    return terms


def _close_terms(gold: Any, pred: Any) -> bool:
    """Two expressions with symbols agree term by term: each coefficient as `same_value` compares numbers
    (math-verify chopped `x - 1.67\\cdot10^{-27}` to `x - 9.11\\cdot10^{-31}`). Exact ones are left to its
    symbolic check (a False here only moves math-verify on to it)."""
    from sympy import Expr, Float

    if not (isinstance(gold, Expr) and isinstance(pred, Expr)):
        return False
    if (gold - pred) == 0:
        return True
    if not (gold.atoms(Float) or pred.atoms(Float)):
        return False
    ours, theirs = _terms(gold.evalf(20)), _terms(pred.evalf(20))  # 9.11*x/10**31 is 9.11e-31*x
    if ours.keys() != theirs.keys():
        return False
    for key, coefficient in ours.items():
        reference, answer = parsed_number(coefficient), parsed_number(theirs[key])
        if reference is None or answer is None or not same_value(reference, answer):
            return False
    return True


def install(grader: Any) -> None:
    """Make math-verify's numeric comparison (`sympy_numeric_eq`, which its set, tuple, interval, matrix and
    relation comparisons call for their parts) ours: `\\{9.11\\times10^{-31}\\}` no longer matches
    `\\{1.67\\times10^{-27}\\}`. It has no hook for this; the worker's self-test proves the patch holds."""
    original: Callable[..., bool] = grader.sympy_numeric_eq  # AttributeError: a math-verify this code does not know
    if getattr(original, "farm_numbers", False):
        return

    def numeric_eq(a: Any, b: Any, float_rounding: int, numeric_precision: int) -> bool:
        if getattr(a, "is_Matrix", False) or getattr(b, "is_Matrix", False):
            return original(a, b, float_rounding, numeric_precision)  # element by element, through this function
        try:
            gold, pred = parsed_number(a), parsed_number(b)
        except OutOfRange:
            return False
        if gold is not None and pred is not None:
            return same_value(gold, pred)
        return _close_terms(a, b)

    numeric_eq.farm_numbers = True  # type: ignore[attr-defined]
    grader.sympy_numeric_eq = numeric_eq
