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
   decided by `workers.pipelines.math_answer` before math-verify's verdict, from its text: `\\pm` / `\\mp`;
   `\\lor`, `\\vee`, `\\cup` and friends; the words or/and/either; a comma or semicolon outside brackets
   (`1,000` is one number); more than one relation, or one other than `=` / `\\approx` / `\\equiv`; an equation
   whose left side is not a name (`3 = 5`, `3\\text{ m} = 5`; but `x = 5`, `x_1 = 5`, `f(2) = 5`); a digit
   inside or after the first `\\text{}`-like group, other than a unit's exponent (`5\\text{ cm}^2` and a lone
   `\\text{5}` pass, `5\\text{ cm (not 3)}` does not); and from math-verify's parse of it: a set (even
   `\\{5\\}`), interval, tuple, matrix, inequality or logical combination (`x = ...` by its right side).
4. Read as a whole: the answer is parsed as LaTeX only. math-verify would otherwise fall back to picking a
   number out of unparseable text (`3 \\lor 5` reads as 5), so that fallback is used only for an answer that
   writes at most one number, and is `wrong` ("not one expression") otherwise.
A reference with several values is compared by math-verify as before (`\\{2,1\\}` against `\\{1,2\\}` passes).
Its leniencies that hide no second value stay: a bare unit (`5\\text{ cm}`), `x = 3` for 3, `10\\%` for 0.1.

math-verify parses with sympy, which evaluates strings, and its own timeout uses SIGALRM, which fails
off the main thread: so it runs in a forked, contained child (`workers.sandbox.call`) with its own
timeouts off and the stage's timeout as a hard kill (`timeout` status). A verifier error is
`infra_error` (the reward says nothing about the response).
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
from dataclasses import replace
from typing import Any, Mapping

from farm.pipeline import Admission, InvalidInput, Pipeline, Stage, StageContext, StageOutcome
from farm.results import Outcome, Status
from workers import sandbox
from workers.extract import answer_flood, extract_answer, final_answers
from workers.pipelines.common import contained, text_field
from workers.pipelines.math_answer import count_numbers, distinct_answers, several_values_parsed, several_values_text

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


def _several(why: str) -> dict[str, Any]:
    return {"ok": False, "why": f"it gives several values ({why}) where the reference is one value"}


def equivalent(pair: Mapping[str, str]) -> dict[str, Any]:
    """Runs in the contained child: the single-value rule, then math-verify's verdict on (reference, answer).

    Errors are raised, not swallowed: an ImportError or OSError (the child, an unprivileged uid, cannot
    import a module the worker did not preload) becomes `infra_error`, never a false `wrong`; any other
    error is the answer's (it cannot be parsed or compared).
    """
    from math_verify import LatexExtractionConfig, parse, verify  # sympy and friends: in the child, not in clients

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # "timeout disabled" notices: ours is the hard kill
    reference, answer = pair["reference"], pair["answer"]
    try:
        gold = parse(_wrap(reference), parsing_timeout=None, raise_on_error=True)
    except (ImportError, OSError):
        raise
    except Exception:
        gold = []
    if not gold:
        return {"ok": False, "why": "the reference answer could not be parsed", "bad_reference": True}
    parsed_several = not isinstance(gold[0], str) and several_values_parsed(gold[0])
    one_value = not (several_values_text(reference) or parsed_several)
    if one_value and (why := several_values_text(answer)):
        return _several(why)
    try:
        boxed = f"\\boxed{{{answer}}}"
        pred = parse(boxed, [LatexExtractionConfig()], parsing_timeout=None, raise_on_error=True)
        if all(isinstance(p, str) for p in pred):  # not LaTeX: math-verify falls back to a number found in the text
            if count_numbers(answer) > 1:
                return {"ok": False, "why": "it is not one expression: the verifier would read one of its numbers"}
            pred = parse(boxed, parsing_timeout=None, raise_on_error=True)
        if not pred:
            return {"ok": False, "why": "the answer could not be parsed"}
        if one_value and not isinstance(pred[0], str) and (why := several_values_parsed(pred[0])):
            return _several(why)
        ok = verify(gold, pred, timeout_seconds=None, raise_on_error=True)
    except (ImportError, OSError):
        raise
    except Exception as exc:
        return {"ok": False, "why": f"the answer could not be compared ({type(exc).__name__})"}
    return {"ok": bool(ok), "why": "", "parsed": [str(gold[0]), str(pred[0])]}


# Verified once in the worker before any fork, so that the lazy imports of sympy and the LaTeX parser
# happen there (the contained child runs as an unprivileged uid that may not read the site-packages), and
# checked against the verdicts this judge is tested with: math-verify's LaTeX parser is generated per ANTLR
# runtime, and another runtime (hydra and omegaconf, which verl installs, pin 4.9) reads some answers
# differently. A worker whose verdicts differ refuses to judge rather than score responses by another rule.
_SELF_TEST = (("\\frac{1}{2}", "0.5", True), ("\\sqrt{8}", "2\\sqrt{2}", True), ("x^2+2x+1", "(x+1)^2", True),
              ("\\{1,2\\}", "\\{2,1\\}", True), ("[1,2)", "[1, 2)", True), ("(1,2)", "(1, 2)", True), ("x=3", "3", True),
              ("\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", "[[1,2],[3,4]]", False), ("10\\%", "0.1", True),
              ("\\pi/2", "1.5708", False), ("\\infty", "oo", False), ("3!", "6", True), ("\\log(e)", "1", False),
              ("\\sin(x)^2+\\cos(x)^2", "1", True), ("\\int_0^1 x dx", "1/2", True), ("\\sum_{k=1}^{3} k", "6", True),
              ("a", "b", False))


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


@contained
def verify_stage(ctx: StageContext) -> StageOutcome:
    refused = warm_up()  # once per worker process: each forked child then starts with everything imported
    if refused:
        return StageOutcome(Status.INFRA_ERROR, message=refused)
    reference, answer = _answers(ctx.payload)
    limits = replace(LIMITS, wall_s=ctx.timeout_s)
    result = sandbox.call(equivalent, {"reference": reference, "answer": answer}, limits=limits)
    if result.timed_out:
        return StageOutcome(Status.TIMEOUT, message=f"verification killed at the {ctx.timeout_s:g} s timeout",
                            outcome=Outcome.EXECUTE_ERROR, details={"answer": answer[:500]})
    if result.error:
        return StageOutcome(Status.INFRA_ERROR, message=f"math-verify failed: {result.error}")
    verdict = result.value
    if verdict.get("bad_reference"):
        return StageOutcome(Status.INVALID_INPUT, message=f"math 'answer' {reference[:200]!r}: {verdict['why']}")
    details = {"answer": answer[:500], **({"parsed": verdict["parsed"]} if "parsed" in verdict else {})}
    if verdict["ok"]:
        return StageOutcome(None, reward=1.0, outcome=Outcome.SUCCESS, details=details)
    why = verdict["why"] or "not equivalent to the reference"
    return StageOutcome(Status.WRONG, message=f"answer {answer[:200]!r}: {why}", outcome=Outcome.EXECUTE_ERROR, details=details)


pipeline = Pipeline(
    "math",
    (Stage("verify", "cpu", 0.2, 10.0, verify_stage),),
    admit,
    description="exactly one final answer (\\boxed{}), one value if the reference is one, verified by math-verify",
)
