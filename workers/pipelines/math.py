"""The `math` pipeline: one `verify` stage checks the response's final answer against the reference.

Payload: `response` (the model's text) and `answer` (the reference, LaTeX or plain: `\\frac{1}{2}`,
`0.5`, `x^2+1`, `\\{1,2\\}`). The final answer is found as `workers.extract.extract_answer` documents
(`\\boxed{}` / `\\fbox{}`, then `#### x`, then "the answer is x" / "Answer: x"); none -> `wrong`,
generation failed, no stage visited.

math-verify parses with sympy, which evaluates strings, and its own timeout uses SIGALRM, which fails
off the main thread: so it runs in a forked, contained child (`workers.sandbox.call`) with its own
timeouts off and the stage's timeout as a hard kill (`timeout` status). A verifier error is
`infra_error` (the reward says nothing about the response).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import replace
from typing import Any, Mapping

from farm.pipeline import Admission, Pipeline, Stage, StageContext, StageOutcome
from farm.results import Outcome, Status
from workers import sandbox
from workers.extract import extract_answer
from workers.pipelines.common import contained, text_field

LIMITS = sandbox.Limits(memory_bytes=2 * sandbox.GiB, nproc=4, output_bytes=1 * sandbox.MiB)


def _answers(payload: Mapping[str, Any]) -> tuple[str, str | None]:
    reference = text_field(payload, "answer")
    if not reference.strip():
        raise ValueError("math 'answer' (the reference) is empty")
    return reference, extract_answer(text_field(payload, "response"))


def admit(payload: Mapping[str, Any]) -> Admission:
    _, answer = _answers(payload)
    if answer is None:
        return Admission((), Status.WRONG, 0.0, "no final answer found in the response", Outcome.GENERATION_FAILED)
    return Admission(("verify",))


def _wrap(text: str) -> str:
    stripped = text.strip()
    if stripped.startswith("$") or "\\boxed" in stripped:
        return stripped
    return f"${stripped}$"


def equivalent(pair: Mapping[str, str]) -> dict[str, Any]:
    """Runs in the contained child: math-verify's verdict on (reference, answer).

    Errors are raised, not swallowed: an ImportError or OSError (the child, an unprivileged uid, cannot
    import a module the worker did not preload) becomes `infra_error`, never a false `wrong`; any other
    error is the answer's (it cannot be parsed or compared).
    """
    from math_verify import parse, verify  # sympy and friends: loaded in the verifying child, not in clients

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # "timeout disabled" notices: ours is the hard kill
    try:
        gold = parse(_wrap(pair["reference"]), parsing_timeout=None, raise_on_error=True)
    except (ImportError, OSError):
        raise
    except Exception:
        gold = []
    if not gold:
        return {"ok": False, "why": "the reference answer could not be parsed", "bad_reference": True}
    try:
        pred = parse(f"\\boxed{{{pair['answer']}}}", parsing_timeout=None, raise_on_error=True)
        if not pred:
            return {"ok": False, "why": "the answer could not be parsed"}
        ok = verify(gold, pred, timeout_seconds=None, raise_on_error=True)
    except (ImportError, OSError):
        raise
    except Exception as exc:
        return {"ok": False, "why": f"the answer could not be compared ({type(exc).__name__})"}
    return {"ok": bool(ok), "why": "", "parsed": [str(gold[0]), str(pred[0])]}


# Verified once in the worker before any fork, so that the lazy imports of sympy and the LaTeX parser
# happen there: the contained child runs as an unprivileged uid that may not read the site-packages.
_WARM_UP = (("\\frac{1}{2}", "0.5"), ("\\sqrt{8}", "2\\sqrt{2}"), ("x^2+2x+1", "(x+1)^2"), ("\\{1,2\\}", "\\{2,1\\}"),
            ("[1,2)", "[1, 2)"), ("(1,2)", "(1, 2)"), ("x=3", "3"), ("\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", "[[1,2],[3,4]]"),
            ("10\\%", "0.1"), ("\\pi/2", "1.5708"), ("\\infty", "oo"), ("3!", "6"), ("\\log(e)", "1"),
            ("\\sin(x)^2+\\cos(x)^2", "1"), ("\\int_0^1 x dx", "1/2"), ("\\sum_{k=1}^{3} k", "6"), ("a", "b"))


@functools.lru_cache(maxsize=1)
def warm_up() -> None:
    import sympy.combinatorics  # noqa: F401 - reached lazily by simplify
    import sympy.tensor.tensor  # noqa: F401

    for reference, answer in _WARM_UP:
        equivalent({"reference": reference, "answer": answer})


@contained
def verify_stage(ctx: StageContext) -> StageOutcome:
    warm_up()  # once per worker process: each forked child then starts with everything imported
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
    description="extract the final answer (\\boxed{}), verify it against the reference with math-verify",
)
