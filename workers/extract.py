"""Finding the code or the final answer in a model's response. Pure, cheap functions: they run at
admission in the trainer's client, so a response with nothing to verify visits no stage.

Code (`extract_code`), in order:
1. the last fenced block (``` or ~~~) whose info string names one of the wanted languages;
2. else the last fenced block with no language tag;
3. else the last fenced block of any language when `any_fence` is set;
4. else the raw response when `raw_fallback` says so: `"always"` (HumanEval completions continue a
   prompt and carry no fence) or a regular expression the text must match (CUDA: `__global__`), taken
   from the first line that looks like code (`#include`, `__global__`, `template`, ...);
5. else None: the paper's "generation failed".
A block the response opens but never closes (a truncated generation) counts from its fence to the end.
A response that writes ``` or ~~~ more than `MAX_FENCES` times holds no code (None): no honest one does.

Answers (`final_answers`): the first of these kinds the response holds, every one of that kind, in order:
1. every closed, non-empty `\\boxed{...}` or `\\fbox{...}` (balanced braces), nested ones too; a box whose whole
   content is another box stands for that box's content (`\\boxed{\\boxed{5}}` is 5);
2. else every `#### x` line (GSM8K);
3. else every "final answer is x" / "final answer: x" / a line starting "Answer: x";
4. else the last "answer is x" (prose: an earlier one is a step of the reasoning, not an answer).
`extract_answer` is the last of them, or None when there is none. Only the first kind found is read: once
a box is there, "####" lines and phrases are not read. Whether several answers may differ is the pipeline's rule
(`workers/pipelines/math/`: they may not). `answer_flood` says when a response writes more answer marks than
admission reads (`MAX_MARKS` of a kind, `MAX_BOX_BRACES` braces from its first box on): no honest one does.

Time: the response is hostile and these run in the trainer's client and again at stages, so each reads the text
in time linear in its length, mostly by searching for a literal (which `re` runs far faster than a pattern it
tries at every character): candidates are found by their literal (a fence mark, `####`, `answer`, `\\boxed`), then
checked where they stand (`workers.scan`); a line is read whole and stripped in Python (a lazy `(.+?)\\s*$`
retries the rest of the line from every character); the quantifiers that face a run of blanks are possessive;
blocks and boxes are read in one pass each. With the bounds above, admission's Python work is bounded too
(bench/admission.py times it).
"""

from __future__ import annotations

import bisect
import functools
import re
from dataclasses import dataclass
from typing import Iterator

from workers.scan import LinePattern, MarkedLines, folded, line_start

MAX_FENCES = 1000
MAX_MARKS = 1000
MAX_BOX_BRACES = 20_000
INT_MAIN = r"int(?<!\wint)\s++main\s*+\("  # `\bint\s+main\s*\(` led by its literal, which re searches fast

LANGUAGES = {
    "python": ("python", "py", "python3"),
    "cpp": ("cpp", "c++", "cc", "cxx"),
    "cuda": ("cuda", "cu", "cpp", "c++", "c"),
}


@dataclass(frozen=True)
class CodeBlock:
    language: str  # the info string's first word, lower case ("" when untagged)
    code: str
    closed: bool = True


_FENCE = re.compile(r"[ \t]*+(`{3,}+|~{3,}+)[ \t]*+([^\n`]*+)$", re.MULTILINE)  # matched at a line's start
_FENCE_MARKS = ("```", "~~~")


@functools.lru_cache(maxsize=None)  # at most 2 x 62: longer fences share the 64 one and a length check
def _closing(char: str, length: int) -> re.Pattern[str]:
    return re.compile(rf"[ \t]*+({re.escape(char)}{{{length},}}+)[ \t]*+$", re.MULTILINE)


def _blocks(text: str) -> Iterator[CodeBlock]:
    lines = MarkedLines(text, _FENCE_MARKS)
    start = 0
    while (opening := lines.line(start, _FENCE_MARKS, _FENCE)) is not None:
        fence = opening.group(1)
        info = opening.group(2).split()
        lang = info[0].lower().lstrip("{.").rstrip("}") if info else ""
        body_start = opening.end() + 1
        mark, closing = (fence[0] * 3,), _closing(fence[0], min(len(fence), 64))
        end = lines.line(body_start, mark, closing)
        while end is not None and len(end.group(1)) < len(fence):
            end = lines.line(end.end() + 1, mark, closing)
        if end is None:
            yield CodeBlock(lang, text[body_start:], closed=False)
            return
        yield CodeBlock(lang, text[body_start:end.start()].rstrip("\n") + "\n")
        start = end.end() + 1


def code_blocks(text: str) -> list[CodeBlock]:
    """Every fenced block, in order; a fence must be closed by the same kind of fence, at least as long."""
    return list(_blocks(text))


_CODE_LINE = LinePattern(r"#include|#define|#pragma|template\s*<|__global__|__device__|extern\s|using\s|namespace\s|"
                         r"int\s+main|static\s|void\s|struct\s|class\s|import\s|from\s|def\s")


def _from_first_code_line(text: str) -> str:
    """The text from its first line of code on, with the blank lines just above it (as `^\\s*` read it)."""
    line = _CODE_LINE.line(text)
    if line is None:
        return text
    above = len(text[:line].rstrip())  # where the blank lines above the code line begin
    return text[text.index("\n", above) + 1 if above else 0:]


def extract_code(text: str, languages: tuple[str, ...], *, any_fence: bool = False,
                 raw_fallback: str | None = None) -> CodeBlock | None:
    """The code to verify, following the documented order; None when there is none."""
    if not isinstance(text, str) or not text.strip():
        return None
    if text.count("```") + text.count("~~~") > MAX_FENCES:
        return None
    blocks = [b for b in _blocks(text) if b.code.strip()]
    wanted = {alias for lang in languages for alias in LANGUAGES.get(lang, (lang,))}
    for pick in ([b for b in blocks if b.language in wanted], [b for b in blocks if not b.language],
                 blocks if any_fence else []):
        if pick:
            return pick[-1]
    if blocks or raw_fallback is None:
        return None
    if raw_fallback == "always":
        return CodeBlock("", text)
    if re.search(raw_fallback, text):
        return CodeBlock("", _from_first_code_line(text))
    return None


_INCLUDE_LINE = LinePattern(r"#include\s*+[<\"]")
_INT_MAIN = re.compile(INT_MAIN)


def guess_language(block: CodeBlock, default: str) -> str:
    """'python' or 'cpp' from a block's tag, else from its content (an `#include <...>` line, `int main(`,
    `std::`), else `default`."""
    for lang in ("python", "cpp"):
        if block.language in LANGUAGES[lang]:
            return lang
    code = block.code
    if "std::" in code or ("main" in code and _INT_MAIN.search(code)) or \
            ("#include" in code and _INCLUDE_LINE.line(code) is not None):
        return "cpp"
    return default


def answer_flood(text: str) -> str | None:
    """Why admission does not read this response's answers (more marks of a kind than `MAX_MARKS`, or more than
    `MAX_BOX_BRACES` braces from its first box on), or None. Counted by `str.count`: no per-mark work."""
    boxes = text.count("\\boxed") + text.count("\\fbox")
    marks = (("\\boxed or \\fbox", boxes), ("####", text.count("####")), ("'answer'", folded(text).count("answer")))
    for what, count in marks:
        if count > MAX_MARKS:
            return f"the response writes {what} {count} times: at most {MAX_MARKS} are read"
    if boxes:
        first = min(i for i in (text.find("\\boxed"), text.find("\\fbox")) if i >= 0)
        braces = text.count("{", first) + text.count("}", first)
        if braces > MAX_BOX_BRACES:
            return f"the response writes {braces} braces from its first box on: at most {MAX_BOX_BRACES} are read"
    return None


_BOX_COMMANDS = (re.compile(r"\\boxed\s*+\{"), re.compile(r"\\fbox\s*+\{"))  # each led by its literal: searched fast
_REST = re.compile(r"\s*+([^\n]*)")  # an answer: the rest of the line where the first character after the mark is
_COLON = re.compile(r"\s*+:")
_SPACE = re.compile(r"\s*")
_HELD = 200  # characters kept of a box that holds other boxes: it differs from each of them, whatever it says


def _box_spans(text: str) -> list[tuple[int, int, int]]:
    """(command, opening brace, closing brace) of every closed box, by where it starts. Only the braces from a
    box's opening to its closing are read (those before a box cannot change what closes it), in one pass; a brace
    right after a backslash is escaped."""
    commands = {m.end() - 1: m.start() for pattern in _BOX_COMMANDS for m in pattern.finditer(text)}
    openings = sorted(commands)  # a box's opening brace -> its command
    spans: list[tuple[int, int, int]] = []
    k = 0
    while k < len(openings):
        stack: list[int] = []
        at = openings[k]
        opens, closes = at, text.find("}", at)
        while True:
            if 0 <= opens < at:
                opens = text.find("{", at)
            if 0 <= closes < at:
                closes = text.find("}", at)
            brace = min(opens, closes) if opens >= 0 and closes >= 0 else max(opens, closes)
            if brace < 0:
                return sorted(spans)  # the boxes still open here are never closed
            at = brace + 1
            if brace and text[brace - 1] == "\\":
                continue
            if brace == opens:
                stack.append(brace)
                continue
            opening = stack.pop()
            if opening in commands:
                spans.append((commands[opening], opening, brace))
            if not stack:
                k = bisect.bisect_right(openings, brace)  # the next box after this one's closing
                break
    return sorted(spans)


def _boxed_answers(text: str) -> list[str]:
    """The content of every closed box, by where it starts (a response may nest thousands of boxes). A box whose
    whole content is one box is that box's answer, so it is left out; a box holding boxes beside other text is
    cut to `_HELD` characters."""
    spans = _box_spans(text)
    answers = []
    for k, (_, opening, closing) in enumerate(spans):
        inner = spans[k + 1] if k + 1 < len(spans) and spans[k + 1][0] < closing else None
        if inner is None:
            answers.append(text[opening + 1:closing].strip())
        elif not (_SPACE.match(text, opening + 1, inner[0]).end() == inner[0]
                  and _SPACE.match(text, inner[2] + 1, closing).end() == closing):
            held = text[opening + 1:min(closing, opening + 1 + _HELD)].strip()
            answers.append(held + ("..." if closing > opening + 1 + _HELD else ""))
    return [a for a in answers if a]


def _cleaned(found: list[str]) -> list[str]:
    return [a for a in (f.strip().rstrip(".").strip().strip("$").strip() for f in found) if a]


def _hash_lines(text: str) -> list[str]:
    """What follows `####` at the start of a line (after blanks), each line once."""
    found, end, after = [], 0, 0
    while (at := text.find("####", after)) >= 0:
        if at >= end and line_start(text, at, after):
            rest = _REST.match(text, at + 4)
            found.append(rest.group(1))
            end = rest.end()
        after = at + 4  # "####" within a run of #s is not at a line's start
    return found


def _marked(text: str, lowered: str) -> list[str]:
    """What follows "final answer is" / "final answer:" / a line's "answer:", case aside, in order; each match
    reads on to the end of its answer's line, and the next one starts after it."""
    found, end, after = [], 0, 0
    while (at := lowered.find("answer", after)) >= 0:
        mark = None
        if at >= 6 and lowered.startswith("final ", at - 6):
            mark = at + 9 if lowered.startswith(" is", at + 6) else at + 7 if lowered.startswith(":", at + 6) else None
            start = at - 6
        elif line_start(lowered, at, after):
            colon = _COLON.match(lowered, at + 6)
            mark, start = (colon.end() if colon else None), at
        if mark is not None and start >= end:
            rest = _REST.match(text, mark)
            found.append(rest.group(1))
            end = rest.end()
        after = at + 1
    return found


def _said(text: str, lowered: str) -> list[str]:
    """What follows each "answer is", case aside; each reads on to the end of its answer's line."""
    found, end = [], 0
    while (at := lowered.find("answer is", end)) >= 0:
        rest = _REST.match(text, at + 9)
        found.append(rest.group(1))
        end = rest.end()
    return found


def final_answers(text: str) -> list[str]:
    """Every final answer of the first kind the response holds, in order (see the module's docstring)."""
    if not isinstance(text, str):
        return []
    answers = _boxed_answers(text) if "\\boxed" in text or "\\fbox" in text else []
    if answers:
        return answers
    found = _cleaned(_hash_lines(text))
    if found:
        return found
    lowered = folded(text)
    return _cleaned(_marked(text, lowered)) or _cleaned(_said(text, lowered))[-1:]


def extract_answer(text: str) -> str | None:
    """The final answer's text (no surrounding \\boxed{} or $): the last of `final_answers`, None if none."""
    answers = final_answers(text)
    return answers[-1] if answers else None
