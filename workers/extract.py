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

Answers (`final_answers`): the first of these kinds the response holds, every one of that kind, in order:
1. every closed, non-empty `\\boxed{...}` or `\\fbox{...}` (balanced braces), nested ones too; a box whose whole
   content is another box stands for that box's content (`\\boxed{\\boxed{5}}` is 5);
2. else every `#### x` line (GSM8K);
3. else every "final answer is x" / "final answer: x" / a line starting "Answer: x";
4. else the last "answer is x" (prose: an earlier one is a step of the reasoning, not an answer).
`extract_answer` is the last of them, or None when there is none. Only the first kind found is read: once
a box is there, "####" lines and phrases are not read. Whether several answers may differ is the pipeline's rule
(`workers/pipelines/math.py`: they may not).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([^\n`]*)$", re.MULTILINE)

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


def code_blocks(text: str) -> list[CodeBlock]:
    """Every fenced block, in order; a fence must be closed by the same kind of fence, at least as long."""
    blocks: list[CodeBlock] = []
    pos = 0
    while (opening := _FENCE.search(text, pos)) is not None:
        fence = opening.group(1)
        info = opening.group(2).strip().split()
        body_start = opening.end() + 1
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.MULTILINE)
        end = closing.search(text, body_start)
        lang = info[0].lower().lstrip("{.").rstrip("}") if info else ""
        if end is None:
            blocks.append(CodeBlock(lang, text[body_start:], closed=False))
            break
        blocks.append(CodeBlock(lang, text[body_start:end.start()].rstrip("\n") + "\n"))
        pos = end.end()
    return blocks


_CODE_START = re.compile(r"^\s*(#include|#define|#pragma|template\s*<|__global__|__device__|extern\s|"
                         r"using\s|namespace\s|int\s+main|static\s|void\s|struct\s|class\s|import\s|from\s|def\s)",
                         re.MULTILINE)


def extract_code(text: str, languages: tuple[str, ...], *, any_fence: bool = False,
                 raw_fallback: str | None = None) -> CodeBlock | None:
    """The code to verify, following the documented order; None when there is none."""
    if not isinstance(text, str) or not text.strip():
        return None
    blocks = [b for b in code_blocks(text) if b.code.strip()]
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
        start = _CODE_START.search(text)
        return CodeBlock("", text[start.start():] if start else text)
    return None


def guess_language(block: CodeBlock, default: str) -> str:
    """'python' or 'cpp' from a block's tag, else from its content, else `default`."""
    for lang in ("python", "cpp"):
        if block.language in LANGUAGES[lang]:
            return lang
    if re.search(r"^\s*#include\s*[<\"]|\bint\s+main\s*\(|std::", block.code, re.MULTILINE):
        return "cpp"
    return default


_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_HASHES = re.compile(r"^\s*####\s*(.+?)\s*$", re.MULTILINE)
_MARKED = re.compile(r"(?:final answer is|final answer:|^\s*answer\s*:)\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)
_SAID = re.compile(r"answer is\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)
_BRACE = re.compile(r"\\?[{}]")
_SPACE = re.compile(r"\s*")
_HELD = 200  # characters kept of a box that holds other boxes: it differs from each of them, whatever it says


def _boxed_answers(text: str) -> list[str]:
    """The content of every closed box, by where it starts, in one pass over the braces (a response may nest
    thousands of boxes). A box whose whole content is one box is that box's answer, so it is left out;
    a box holding boxes beside other text is cut to `_HELD` characters."""
    commands = {m.end() - 1: m.start() for m in _BOXED.finditer(text)}  # a box's opening brace -> its command
    spans, stack = [], []
    for brace in _BRACE.finditer(text):
        if brace.group() == "{":
            stack.append(brace.start())
        elif brace.group() == "}" and stack:
            opening = stack.pop()
            if opening in commands:
                spans.append((commands[opening], opening, brace.start()))
    spans.sort()
    answers = []
    for k, (_, opening, closing) in enumerate(spans):
        inner = spans[k + 1] if k + 1 < len(spans) and spans[k + 1][0] < closing else None
        if inner is None:
            answers.append(text[opening + 1:closing].strip())
        elif not (_SPACE.match(text, opening + 1).end() == inner[0] and not text[inner[2] + 1:closing].strip()):
            held = text[opening + 1:min(closing, opening + 1 + _HELD)].strip()
            answers.append(held + ("..." if closing > opening + 1 + _HELD else ""))
    return [a for a in answers if a]


def final_answers(text: str) -> list[str]:
    """Every final answer of the first kind the response holds, in order (see the module's docstring)."""
    if not isinstance(text, str):
        return []
    answers = _boxed_answers(text)
    if answers:
        return answers
    for pattern, every in ((_HASHES, True), (_MARKED, True), (_SAID, False)):
        found = [a for a in (f.strip().rstrip(".").strip().strip("$").strip() for f in pattern.findall(text)) if a]
        if found:
            return found if every else found[-1:]
    return []


def extract_answer(text: str) -> str | None:
    """The final answer's text (no surrounding \\boxed{} or $): the last of `final_answers`, None if none."""
    answers = final_answers(text)
    return answers[-1] if answers else None
