"""The `math` pipeline: one `verify` stage checks the response's final answer against the reference.

Payload: `response` (the model's text) and `answer` (the reference, LaTeX or plain: `\\frac{1}{2}`,
`0.5`, `x^2+1`, `\\{1,2\\}`). The response is the adversary, so exactly one final answer counts:

1. Which: `workers.extract.final_answers` reads the first kind the response holds: its `\\boxed{}` /
   `\\fbox{}` answers, else its `#### x` lines, else its "final answer is x" / "Answer: x" lines, else its last
   "answer is x". Once a box is there, "####" lines and phrases are not read (and so on down the list).
   None -> `wrong`, generation failed, no stage visited.
2. One: those answers must all be the same once whitespace and LaTeX spacing are dropped (`\\dfrac{1}{2}`
   and `\\frac12` are `\\frac{1}{2}`); otherwise the response is `wrong` without a stage ("gives 2 different
   final answers"), whichever of them is right. The final answer is then the last one. Admission runs in the
   trainer's client, so it reads no flood: a response writing `\\boxed`/`\\fbox`, `####` or "answer" more than
   1,000 times, or more than 20,000 braces from its first box on, is `wrong` unread (`workers.extract.answer_flood`),
   and so are answers that differ as text and run past `MAX_COMPARED` (64 Ki) characters in all.
3. One value: the reference is one value unless its text or its parse shows several (the tests below). Against
   a one-value reference, an answer that holds several values is `wrong` ("gives several values (a set)"),
   decided by `workers.pipelines.math.answer` before math-verify's verdict, from its text: `\\pm` / `\\mp`;
   `\\lor`, `\\vee`, `\\cup` and friends; the words or/and/either; a comma or semicolon outside brackets
   (`1,000` is one number); more than one relation, or one other than `=` / `\\approx` / `\\equiv`; an equation
   whose left side is not a name (`3 = 5`, `3\\text{ m} = 5`; but `x = 5`, `x_1 = 5`, `f(2) = 5`); a digit
   inside or after the first `\\text{}`-like group, other than a unit's exponent (`5\\text{ cm}^2` and a lone
   `\\text{5}` pass, `5\\text{ cm (not 3)}` does not); and from math-verify's parse of it: a set (even
   `\\{5\\}`), interval, tuple, matrix, inequality or logical combination (`x = ...` by its right side).
4. Read as a whole: the answer is parsed as LaTeX only. math-verify would otherwise fall back to picking a
   number out of unparseable text (`3 \\lor 5` reads as 5), so that fallback is used only for an answer that
   writes at most one number, and is `wrong` ("not one expression") otherwise.
5. Evaluated: an answer that writes or parses to an integral, limit, sum, product or derivative (`\\int`,
   `\\lim`, `\\sum`, `\\prod`, `\\partial`, `\\frac{d}{dx}`; sympy's Integral & co. anywhere in it) is `wrong`
   ("leaves the problem unevaluated"), unless the reference writes one too: `\\int_0^1 x^2 e^x\\,dx` is the
   problem that e - 2 answers.
6. Numbers (`workers.pipelines.math.numbers`): digits apart in groups of three are one number (`10\\,000`,
   `10{,}000`, `10 000`; math-verify read `5\\,000` as 5*000), other digits apart (`1\\,5`) are `wrong`; a
   whole answer in e-notation is scientific (`2e-2` is 0.02). Two numbers are compared by us, not by
   math-verify (whose 6 decimal places passed 1.67e-27 for 9.11e-31): exact ones (integers up to 20000 digits,
   fractions, surds) must be equal; else agree to a relative 1e-6 (`0.3333333` for 1/3, not `0.33`), or one
   side is a decimal of >= 6 significant digits that the other rounds to (`0.333333`). A reference of 0 takes
   only 0 (`0.0` too): with no scale, any bound passes every tiny number. 10% is 0.1 or 10. Inside sets,
   intervals, matrices and relations, math-verify's numeric comparison is this one too.
A reference with several values is compared by math-verify as before (`\\{2,1\\}` against `\\{1,2\\}` passes).
Its leniencies that hide no second value stay: a bare unit (`5\\text{ cm}`), `x = 3` for 3, `10\\%` for 0.1.

math-verify parses with sympy, which evaluates strings, and its own timeout uses SIGALRM, which fails off the
main thread: so it runs in a forked, contained child (`workers.sandbox.call`) with its own timeouts off and the
stage's timeout as a hard kill (`timeout`). The answer chooses what the verifier computes, so any failure on it
is `wrong` (saying which): a RecursionError, MemoryError, a child that dies or raises. Only when the reference
against itself fails too is it `infra_error` (masked: the reward says nothing about the response).
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from farm.pipeline import Admission, InvalidInput, Pipeline, Stage, StageContext, StageOutcome
from farm.results import Outcome, Status
from workers import sandbox
from workers.extract import answer_flood, extract_answer, final_answers
from workers.pipelines.math import numbers
from workers.pipelines.common import contained, text_field
from workers.pipelines.math.answer import (count_numbers, distinct_answers, restated_parsed, restated_text,
                                           several_values_parsed, several_values_text)
from workers.pipelines.math.numbers import (Number, OutOfRange, compared_values, literal, loose_digits, normalize,
                                            parsed_number, same_value)
from workers.shown import clip

LIMITS = sandbox.Limits(memory_bytes=2 * sandbox.GiB, nproc=4, output_bytes=1 * sandbox.MiB)
MAX_COMPARED = 1 << 16  # characters of differing final answers compared at admission (each is normalised)


def _reference(payload: Mapping[str, Any]) -> str:
    reference = text_field(payload, "answer")
    if not reference.strip():
        raise InvalidInput("math 'answer' (the reference) is empty")
    return reference


def _answers(payload: Mapping[str, Any]) -> tuple[str, str | None]:
    return _reference(payload), extract_answer(text_field(payload, "response"))


def admit(payload: Mapping[str, Any]) -> Admission:
    _reference(payload)
    response = text_field(payload, "response")
    flood = answer_flood(response)
    if flood:  # counted, not read: admission runs in the trainer's client
        return Admission((), Status.WRONG, 0.0, flood, Outcome.GENERATION_FAILED)
    answers = final_answers(response)
    if not answers:
        return Admission((), Status.WRONG, 0.0, "no final answer found in the response", Outcome.GENERATION_FAILED)
    unique = list(dict.fromkeys(answers))  # the same text is the same answer: nothing to compare
    if len(unique) > 1:
        written = sum(map(len, unique))
        if written > MAX_COMPARED:
            message = (f"the response gives {len(unique)} final answers that differ as text, {written} characters "
                       f"in all: at most {MAX_COMPARED} are compared, and exactly one counts")
            return Admission((), Status.WRONG, 0.0, message, Outcome.GENERATION_FAILED)
        different = distinct_answers(unique)
        if len(different) > 1:
            shown = ", ".join(repr(a[:60]) for a in different[:4]) + (", ..." if len(different) > 4 else "")
            message = f"the response gives {len(different)} different final answers ({shown}): exactly one counts"
            return Admission((), Status.WRONG, 0.0, message, Outcome.GENERATION_FAILED)
    return Admission(("verify",))


def _wrap(text: str) -> str:
    stripped = text.strip()
    if stripped.startswith("$") or "\\boxed" in stripped:
        return stripped
    return f"${stripped}$"


def _wrong(why: str) -> dict[str, Any]:
    return {"ok": False, "why": why if len(why) <= 400 else why[:397] + "..."}  # quotes of the answer: bounded


def _several(why: str) -> dict[str, Any]:
    return _wrong(f"it gives several values ({why}) where the reference is one value")


def _shown(value: Any) -> str:
    """A parsed value for the details, short: str() of a sympy integer past 4300 digits raises, and a reply
    over the sandbox's output cap would lose the verdict."""
    try:
        text = str(value)
    except Exception:  # noqa: BLE001 - ValueError past Python's digit guard, or a printer's own error
        return f"({type(value).__name__})"
    return clip(text, 200)


def _verdict(ok: bool, gold: Any, pred: Any, why: str = "") -> dict[str, Any]:
    return {"ok": bool(ok), "why": "" if ok else why, "parsed": [_shown(gold), _shown(pred)]}


_MISSED = "not equivalent to the reference (as numbers: a decimal must agree to a relative 1e-6, exact values exactly)"


def _number(value: Any) -> Number | None:
    """The reference's value as a number, or None to let math-verify compare it (on any error but the farm's)."""
    try:
        return parsed_number(value)
    except (ImportError, OSError):
        raise
    except Exception:  # noqa: BLE001 - a reference math-verify parses but we cannot evaluate (OutOfRange too)
        return None


def _judge(reference: str, gold: list[Any], expected: Number | None, answer: str) -> dict[str, Any]:
    """The verdict on one answer once the reference is read: the answer-form rules, then numbers by
    `numbers`, then math-verify (whose numeric comparison is ours too, see `numbers.install`)."""
    from math_verify import LatexExtractionConfig, parse, verify

    first = gold[0] if gold and not isinstance(gold[0], str) else None
    one_value = not (several_values_text(reference) or (first is not None and several_values_parsed(first)))
    unevaluated = restated_text(reference) or (first is not None and restated_parsed(first))
    if one_value and (why := several_values_text(answer)):
        return _several(why)
    if why := loose_digits(answer):
        return _wrong(f"it is not one number: {why}")
    if not unevaluated and (why := restated_text(answer)):
        return _wrong(f"it leaves the problem unevaluated ({why}); the reference is a value")
    try:
        got = literal(answer)
    except OutOfRange as exc:
        return _wrong(f"its number is beyond the ones compared ({exc})")
    if expected is not None and got is not None:
        return _verdict(same_value(expected, got), reference, answer, _MISSED)
    boxed = f"\\boxed{{{answer}}}"
    pred = parse(boxed, [LatexExtractionConfig()], parsing_timeout=None, raise_on_error=True)
    if all(isinstance(p, str) for p in pred):  # not LaTeX: math-verify falls back to a number found in the text
        if count_numbers(answer) > 1:
            return _wrong("it is not one expression: the verifier would read one of its numbers")
        pred = parse(boxed, parsing_timeout=None, raise_on_error=True)
    if not pred:
        return _wrong("the answer could not be parsed")
    if not isinstance(pred[0], str):
        if one_value and (why := several_values_parsed(pred[0])):
            return _several(why)
        if not unevaluated and (why := restated_parsed(pred[0])):
            return _wrong(f"it leaves the problem unevaluated ({why}); the reference is a value")
        ours, theirs = compared_values(first, pred[0])
        reference_number = expected if expected is not None else _number(ours)
        if reference_number is not None:
            try:
                number = got if got is not None else parsed_number(theirs)  # a literal keeps its written digits
            except OutOfRange as exc:
                return _wrong(f"its number is beyond the ones compared ({exc})")
            if number is not None:
                return _verdict(same_value(reference_number, number), ours, theirs, _MISSED)
    if not gold:  # a reference only our reading takes (a number past math-verify's digit guard)
        return _wrong("it is not a number, and the reference is one")
    return _verdict(verify(gold, pred, timeout_seconds=None, raise_on_error=True), gold[0], pred[0])


def equivalent(pair: Mapping[str, str]) -> dict[str, Any]:
    """Runs in the contained child: reads the reference, then judges the answer against it (`_judge`).

    A reference math-verify cannot parse (and that is no number we read) is `bad_reference` (invalid_input).
    Any error while judging the answer is the answer's (`wrong`, saying which): the answer chose what the
    verifier computed. An ImportError or OSError (the child, an unprivileged uid, cannot import a module the
    worker did not preload) is flagged `environment`: the stage checks the reference alone before blaming
    the answer. On the reference they are raised, and the stage reports `infra_error`.
    """
    from math_verify import grader, parse  # sympy and friends: in the child, not in clients

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # "timeout disabled" notices: ours is the hard kill
    numbers.install(grader)
    reference = normalize(pair["reference"])
    try:
        gold = parse(_wrap(reference), parsing_timeout=None, raise_on_error=True)
    except (ImportError, OSError):
        raise
    except Exception:  # noqa: BLE001 - math-verify's parser raises anything on text it cannot read
        gold = []
    try:
        expected = literal(reference)
    except OutOfRange:
        expected = None
    if not gold and expected is None:
        return {"ok": False, "why": "the reference answer could not be parsed", "bad_reference": True}
    try:
        return _judge(reference, gold, expected, normalize(pair["answer"]))
    except Exception as exc:  # noqa: BLE001 - RecursionError, MemoryError, ValueError...: the answer drove it there
        failed = f"{type(exc).__name__}: {_shown(exc)}"  # its message may quote a value that str() refuses
        verdict = _wrong(f"the verifier failed on it ({failed})")
        return {**verdict, "environment": failed} if isinstance(exc, (ImportError, OSError)) else verdict


# Verified once in the worker before any fork, so that the lazy imports of sympy and the LaTeX parser
# happen there (the contained child runs as an unprivileged uid that may not read the site-packages), and
# checked against the verdicts this judge is tested with: math-verify's LaTeX parser is generated per ANTLR
# runtime, and another runtime (hydra and omegaconf, which verl installs, pin 4.9) reads some answers
# differently. A worker whose verdicts differ refuses to judge rather than score responses by another rule.
_SELF_TEST = (("\\frac{1}{2}", "0.5", True), ("\\sqrt{8}", "2\\sqrt{2}", True), ("x^2+2x+1", "(x+1)^2", True),
              ("\\{1,2\\}", "\\{2,1\\}", True), ("[1,2)", "[1, 2)", True), ("(1,2)", "(1, 2)", True),
              ("x=3", "3", True), ("\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", "[[1,2],[3,4]]", False),
              ("10\\%", "0.1", True), ("\\pi/2", "1.5708", False), ("\\infty", "oo", False), ("3!", "6", True),
              ("\\log(e)", "1", False), ("\\sin(x)^2+\\cos(x)^2", "1", True), ("\\int_0^1 x dx", "1/2", True),
              ("\\sum_{k=1}^{3} k", "6", True), ("1/2", "\\int_0^1 x dx", False), ("6", "\\sum_{k=1}^{3} k", False),
              ("\\frac{1}{3}", "0.3333333", True), ("\\frac{\\sqrt2}{2}", "0.70710678", True),
              ("10000", "10\\,000", True), ("9.11\\times10^{-31}", "1.67\\times10^{-27}", False),
              ("\\{9.11\\times10^{-31}, 1\\}", "\\{1.67\\times10^{-27}, 1\\}", False), ("a", "b", False))


@functools.lru_cache(maxsize=1)
def warm_up() -> str | None:
    """Import and exercise the verifier once per worker process; a message when its verdicts are not the
    ones this judge is tested with (then every request is an infra_error, which trainers mask)."""
    import sympy.combinatorics  # noqa: F401 - reached lazily by simplify
    import sympy.tensor.tensor  # noqa: F401

    wrong = [(reference, answer) for reference, answer, expected in _SELF_TEST
             if equivalent({"reference": reference, "answer": answer})["ok"] is not expected]
    if not wrong:
        return None
    refusal = (f"math-verify's verdicts differ from the tested ones on {len(wrong)} of {len(_SELF_TEST)} self-test "
            f"pairs (first: {wrong[0][1]!r} against {wrong[0][0]!r}) with antlr4-python3-runtime "
            f"{_antlr_version()}: run math workers in an environment with 4.13.2, apart from trainer packages "
            f"that pin another runtime")
    logging.getLogger(__name__).error("refusing to judge: %s", refusal)
    return refusal


def _antlr_version() -> str:
    try:
        return importlib.metadata.version("antlr4-python3-runtime")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


def _unjudged(reference: str, answer: str, failure: str, deadline: float) -> StageOutcome:
    """The verifier failed on this pair (a child that died or raised, a module it could not import): the
    reference checked against itself says whose failure it is. Failing there too, it is the farm's; else the
    answer drove the verifier to it, and it is `wrong` (a masked status would let a response dodge its zero)."""
    left = deadline - time.monotonic()
    if left > 0:
        control = sandbox.call(equivalent, {"reference": reference, "answer": reference},
                               limits=replace(LIMITS, wall_s=left))
        value = control.value if isinstance(control.value, dict) else {}
        if control.error or value.get("environment") or not (control.timed_out or value.get("ok")):
            why = control.error or value.get("environment") or value.get("why") or "not equal to itself"
            return StageOutcome(Status.INFRA_ERROR, message=f"math-verify failed: {failure} (on the reference "
                                f"alone too: {why})")
    logging.getLogger(__name__).warning("the verifier failed on an answer, not on its reference: %s", failure)
    return StageOutcome(Status.WRONG, message=f"answer {answer[:200]!r}: the verifier failed on it ({failure})",
                        outcome=Outcome.EXECUTE_ERROR, details={"answer": answer[:500]})


@contained
def verify_stage(ctx: StageContext) -> StageOutcome:
    refused = warm_up()  # once per worker process: each forked child then starts with everything imported
    if refused:
        return StageOutcome(Status.INFRA_ERROR, message=refused)
    deadline = time.monotonic() + ctx.timeout_s
    reference, answer = _answers(ctx.payload)
    limits = replace(LIMITS, wall_s=ctx.timeout_s)
    result = sandbox.call(equivalent, {"reference": reference, "answer": answer}, limits=limits)
    if result.timed_out:
        return StageOutcome(Status.TIMEOUT, message=f"verification killed at the {ctx.timeout_s:g} s timeout",
                            outcome=Outcome.EXECUTE_ERROR, details={"answer": answer[:500]})
    verdict = result.value if isinstance(result.value, dict) else {}
    failure = result.error or result.ended or verdict.get("environment")  # ended: killed at its memory cap, say
    if failure:
        return _unjudged(reference, answer, failure, deadline)
    if verdict.get("bad_reference"):
        return StageOutcome(Status.INVALID_INPUT, message=f"math 'answer' {reference[:200]!r}: {verdict['why']}")
    details = {"answer": answer[:500], **({"parsed": verdict["parsed"]} if "parsed" in verdict else {})}
    if verdict.get("ok"):
        return StageOutcome(None, reward=1.0, outcome=Outcome.SUCCESS, details=details)
    why = verdict.get("why") or "not equivalent to the reference"
    return StageOutcome(Status.WRONG, message=f"answer {answer[:200]!r}: {why}", outcome=Outcome.EXECUTE_ERROR,
                        details=details)


pipeline = Pipeline(
    "math",
    (Stage("verify", "cpu", 0.2, 10.0, verify_stage),),
    admit,
    description="exactly one final answer (\\boxed{}), one value if the reference is one, verified by math-verify",
)
