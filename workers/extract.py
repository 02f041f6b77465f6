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

Answers (`extract_answer`), in order: the last `\\boxed{...}` or `\\fbox{...}` (balanced braces);
else the last `#### x` line (GSM8K); else the last "final answer is x" / "Answer: x"; else None.
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


def _balanced(text: str, open_at: int) -> str | None:
    """The content of the brace group opening at text[open_at] == '{', or None if it never closes."""
    depth = 0
    for i in range(open_at, len(text)):
        c = text[i]
        if c == "\\" and i + 1 < len(text) and text[i + 1] in "{}":
            continue
        if c == "{" and (i == 0 or text[i - 1] != "\\"):
            depth += 1
        elif c == "}" and (i == 0 or text[i - 1] != "\\"):
            depth -= 1
            if depth == 0:
                return text[open_at + 1:i]
    return None


_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_HASHES = re.compile(r"^\s*####\s*(.+?)\s*$", re.MULTILINE)
_SAID = re.compile(r"(?:final answer is|final answer:|answer is|^\s*answer\s*:)\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)


def extract_answer(text: str) -> str | None:
    """The final answer's text (no surrounding \\boxed{} or $), following the documented order."""
    if not isinstance(text, str):
        return None
    boxed = [m for m in _BOXED.finditer(text)]
    for m in reversed(boxed):
        inner = _balanced(text, m.end() - 1)
        if inner is not None and inner.strip():
            return inner.strip()
    for pattern in (_HASHES, _SAID):
        found = pattern.findall(text)
        if found:
            answer = found[-1].strip().rstrip(".").strip().strip("$").strip()
            if answer:
                return answer
    return None
