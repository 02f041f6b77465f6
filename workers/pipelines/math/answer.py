"""The `math` pipeline's rules on an answer's form (documented in math.py): one value, and no restated problem.
Apart so that math.py stays under 300 lines."""

from __future__ import annotations

import re
from typing import Any

_SPACING = re.compile(r"\s+|\\[,;:! ]|~|\\q?quad(?![a-zA-Z])|\\(?:left|right|displaystyle)(?![a-zA-Z])")


def answer_form(answer: str) -> str:
    """The answer as compared with the other final answers: no whitespace or LaTeX spacing, `\\dfrac` and
    `\\frac12` are `\\frac{1}{2}`."""
    form = re.sub(r"\\[dt]frac(?![a-zA-Z])", r"\\frac", _SPACING.sub("", answer))
    return re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", form).strip("$").rstrip(".")


def distinct_answers(answers: list[str]) -> list[str]:
    """The answers that differ in `answer_form`, each once, in the order they first appear."""
    seen: dict[str, str] = {}
    for answer in answers:
        seen.setdefault(answer_form(answer), answer)
    return list(seen.values())


_PLUS_MINUS = re.compile(r"\\(?:pm|mp)(?![a-zA-Z])|[±∓]")
_JOINS = re.compile(r"\\(?:lor|vee|land|wedge|cup|cap|setminus|bigcup|bigcap|sqcup)(?![a-zA-Z])|[∪∩∨∧]")
_WORDS = re.compile(r"(?<![a-zA-Z\\])(?:or|and|either)(?![a-zA-Z])", re.IGNORECASE)
_TEXT = re.compile(r"\\(?:text[a-z]*|mbox|hbox|math(?:rm|it|bf|sf|tt))\s*\{")
_TEXT_NUMBER = re.compile(_TEXT.pattern + r"\s*-?\d+(?:\.\d+)?\s*\}")  # \text{5}: one number in one group
_UNIT_EXPONENT = re.compile(r"\^\s*(?:\{\s*\d\s*\}|\d)")
_RELATION = re.compile(r"<=|>=|!=|=|<|>|[≤≥≠≈∈]|\\(?:leq?|geq?|leqslant|geqslant|neq?|lt|gt|approx|equiv|sim|"
                       r"simeq|cong|in|notin|ni|subset|subseteq|supset|supseteq|to|rightarrow|Rightarrow|"
                       r"longrightarrow|implies|iff|Leftrightarrow|mapsto|propto)(?![a-zA-Z])")
_EQUALITY = ("=", "\\approx", "≈", "\\equiv")
_SEPARATOR = re.compile(r"(?<!\\)[;,](?!(?<=\d,)\d{3}(?!\d))")  # a thousands separator (1,000) is not a list
_NAME_PARTS = re.compile(r"_\s*(?:\{[^{}]*\}|\w)|(?<=[a-zA-Z])\s*\([^()]*\)")  # x_{1}, a_n, f(2): parts of a name


def _top_level(latex: str) -> str:
    """`latex` with everything inside brackets or braces blanked out (same length, so positions still hold)."""
    out, depth = [], 0
    for c in latex:
        if c in ")]}":
            depth = max(0, depth - 1)
        out.append(c if depth == 0 else " ")
        if c in "([{":
            depth += 1
    return "".join(out)


def several_values_text(latex: str) -> str | None:
    """Why this LaTeX gives several values (a short noun phrase), read from its text; None when nothing shows."""
    if _PLUS_MINUS.search(latex):
        return "a ± sign"
    if join := _JOINS.search(latex):
        return f"'{join.group().strip()}' joining values"
    if word := _WORDS.search(latex):
        return f"the word '{word.group().lower()}'"
    top = _top_level(latex)
    if _SEPARATOR.search(top):
        return "a list"
    relations = list(_RELATION.finditer(top))
    if len(relations) > 1:
        return "a chain of relations"
    if relations:
        relation = relations[0]
        if relation.group() not in _EQUALITY:
            return f"the relation '{relation.group()}', not one value"
        if re.search(r"\d", _NAME_PARTS.sub("", latex[:relation.start()])):
            return "an equation between two values (its left side is not a name)"
    if _TEXT_NUMBER.fullmatch(latex.strip()):
        return None
    if (text := _TEXT.search(latex)) and re.search(r"\d", _UNIT_EXPONENT.sub("", latex[text.start():])):
        return "a number inside or after \\text{}"
    return None


def count_numbers(latex: str) -> int:
    """How many numbers the text writes (1,000 and 2.5 are one each)."""
    return len(re.findall(r"\d+(?:[.,]\d+)*", latex))


def several_values_parsed(value: Any) -> str | None:
    """Why this parsed answer (math-verify's sympy object) holds several values; None for one value."""
    # sympy: loaded in the verifying child (and the worker's warm-up), never in clients
    from sympy import Eq, FiniteSet, Interval, Tuple
    from sympy.core.relational import Relational
    from sympy.logic.boolalg import BooleanAtom, BooleanFunction
    from sympy.matrices import MatrixBase
    from sympy.sets.sets import Set

    if isinstance(value, (list, tuple, Tuple)):
        return "a tuple or list"
    if isinstance(value, MatrixBase):
        return "a matrix or vector"
    if isinstance(value, Interval):
        return "an interval"
    if isinstance(value, FiniteSet):
        return "a set" if len(value) == 1 else f"a set of {len(value)} values"
    if isinstance(value, Set):
        return "a set"
    if isinstance(value, Eq):
        return several_values_parsed(value.rhs) or several_values_parsed(value.lhs)
    if isinstance(value, Relational):
        return "an inequality"
    if isinstance(value, BooleanFunction):  # And, Or, Not (not Boolean: a Symbol is one too)
        return "a logical combination of relations"
    if isinstance(value, BooleanAtom):
        return "a true/false statement"
    return None


_CALCULUS = re.compile(r"\\(?:i{1,3}nt|oint|lim(?:sup|inf)?|sum|prod|partial)(?![a-zA-Z])")
_D = r"(?:\\mathrm\s*\{\s*d\s*\}|\\mathrm\s*d|\\operatorname\s*\{\s*d\s*\}|d)"
_DERIVATIVE = re.compile(rf"\\[dt]?frac\s*\{{\s*{_D}(?:[^{{}}]|\{{[^{{}}]*\}})*\}}\s*\{{\s*{_D}\s*\\?[a-zA-Z]")  # d/dx


def restated_text(latex: str) -> str | None:
    """What unevaluated integral, limit, sum, product or derivative this LaTeX writes (`\\int_0^1 x^2 e^x\\,dx`
    stands for e - 2 but is the problem, not its answer); None when it writes none."""
    if found := _CALCULUS.search(latex):
        return f"'{found.group()}'"
    if found := _DERIVATIVE.search(latex):
        return f"a derivative '{found.group()}'"
    return None


def restated_parsed(value: Any) -> str | None:
    """The same, read from math-verify's parse: an unevaluated Integral, Limit, Sum, Product or Derivative
    anywhere in it; None when there is none."""
    from sympy import Derivative, Integral, Limit, Product, Sum  # in the verifying child

    if not hasattr(value, "has"):  # math-verify's text fallback (a str)
        return None
    for kind, name in ((Integral, "an integral"), (Limit, "a limit"), (Sum, "a sum"), (Product, "a product"),
                       (Derivative, "a derivative")):
        if value.has(kind):
            return name
    return None
