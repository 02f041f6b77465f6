"""The linear reading of responses finds what the documented patterns find.

`workers.extract` once read responses with the regular expressions below, which state its rules plainly but take
time quadratic in a line of blanks, a run of blank lines or a long fence line. Here they are the reference: on
short texts built from the pieces those rules turn on, the linear reading must agree with them exactly.
"""

import re
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from workers import extract
from workers.scan import folded
from workers.extract import INT_MAIN, CodeBlock

_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([^\n`]*)$", re.MULTILINE)
_CODE_START = re.compile(r"^\s*(#include|#define|#pragma|template\s*<|__global__|__device__|extern\s|"
                         r"using\s|namespace\s|int\s+main|static\s|void\s|struct\s|class\s|import\s|from\s|def\s)",
                         re.MULTILINE)
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_HASHES = re.compile(r"^\s*####\s*(.+?)\s*$", re.MULTILINE)
_MARKED = re.compile(r"(?:final answer is|final answer:|^\s*answer\s*:)\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)
_SAID = re.compile(r"answer is\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)
_BRACE = re.compile(r"\\?[{}]")
_SPACE = re.compile(r"\s*")


def reference_blocks(text):
    blocks, pos = [], 0
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


def reference_code(text, languages, *, any_fence=False, raw_fallback=None):
    if not text.strip():
        return None
    blocks = [b for b in reference_blocks(text) if b.code.strip()]
    wanted = {alias for lang in languages for alias in extract.LANGUAGES.get(lang, (lang,))}
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


def reference_language(block, default):
    for lang in ("python", "cpp"):
        if block.language in extract.LANGUAGES[lang]:
            return lang
    if re.search(r"^\s*#include\s*[<\"]|\bint\s+main\s*\(|std::", block.code, re.MULTILINE):
        return "cpp"
    return default


def reference_answers(text):
    commands = {m.end() - 1: m.start() for m in _BOXED.finditer(text)}
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
            held = text[opening + 1:min(closing, opening + 1 + 200)].strip()
            answers.append(held + ("..." if closing > opening + 1 + 200 else ""))
    answers = [a for a in answers if a]
    if answers:
        return answers
    for pattern, every in ((_HASHES, True), (_MARKED, True), (_SAID, False)):
        found = [a for a in (f.strip().rstrip(".").strip().strip("$").strip() for f in pattern.findall(text)) if a]
        if found:
            return found if every else found[-1:]
    return []


PIECES = ["```", "~~~", "````", "`" * 65, "`" * 66, "~" * 64, "`", "~", "\n", "\n\n", " ", "  ", "\t", "\r", "\x0b",
          "\xa0", "\u2028", "python", "cpp", "c++", "java", "{.py}", "x", "5", ".", "$", ":", "{", "}", "\\", "\\{",
          "\\}", "\\boxed{", "\\fbox {", "\\boxed", "####", "#### ", "#", "##########", "answer is", "Answer:",
          "answer :", "answer\n:", "final answer:", "Final Answer is", "FINAL ANSWER:", "ANSWER IS", "anſwer iſ",
          "fİnal answer:", "İ", "ı", "final answer\n\n", "#include <a>", "#include", "int main(", "xint main(",
          "__global__", "std::", "def ", "from x", "template <", " void ", "static "]
texts = st.lists(st.sampled_from(PIECES), max_size=30).map("".join)
chars = st.lists(st.sampled_from(list("`~\n \t{}\\#:$.x5aAnswerisfl\r\u2028\xa0ſı") + PIECES), max_size=40).map("".join)
SETTINGS = settings(max_examples=1500, deadline=None)
FALLBACKS = ((("python", "cpp"), {"any_fence": True, "raw_fallback": "always"}),
             (("cpp",), {"any_fence": True, "raw_fallback": INT_MAIN}),
             (("cuda",), {"any_fence": True, "raw_fallback": "__global__"}),
             (("python",), {}))


def as_tuple(block):
    return None if block is None else (block.language, block.code, block.closed)


@SETTINGS
@given(texts | chars)
def test_fenced_blocks_are_the_ones_the_fence_patterns_find(text):
    assert [as_tuple(b) for b in extract.code_blocks(text)] == [as_tuple(b) for b in reference_blocks(text)]


@SETTINGS
@given(texts | chars)
def test_the_code_taken_is_the_one_the_documented_order_takes(text):
    for languages, options in FALLBACKS:
        reference_options = dict(options)
        if reference_options.get("raw_fallback") == INT_MAIN:
            reference_options["raw_fallback"] = r"\bint\s+main\s*\("
        assert as_tuple(extract.extract_code(text, languages, **options)) == \
            as_tuple(reference_code(text, languages, **reference_options))


@SETTINGS
@given(texts | chars)
def test_the_language_guessed_from_code_is_the_documented_guess(text):
    for tag in ("", "cpp", "py", "java"):
        block = CodeBlock(tag, text)
        assert extract.guess_language(block, "python") == reference_language(block, "python")


@SETTINGS
@given(texts | chars)
def test_final_answers_are_the_ones_the_answer_patterns_find(text):
    assert extract.final_answers(text) == reference_answers(text)


@SETTINGS
@given(st.lists(st.sampled_from(["int", " ", "\n", "main", "(", "x", "_", "é", "1", "\u2028", "mint", "intmain"]),
                max_size=12).map("".join))
def test_int_main_led_by_its_literal_is_the_word_boundary_pattern(text):
    reference = re.search(r"\bint\s+main\s*\(", text)
    found = re.search(INT_MAIN, text)
    assert (found and found.span()) == (reference and reference.span())


def test_folding_a_text_finds_the_answer_words_where_ignorecase_does_for_every_character():
    every = "".join(chr(code) for code in range(sys.maxunicode + 1) if not 0xD800 <= code < 0xE000)
    lowered = folded(every)
    assert len(lowered) == len(every)  # each character where it was
    for letter in "finalswer ":
        ignorecase = {m.start() for m in re.finditer("(?i)" + re.escape(letter), every)}
        assert {m.start() for m in re.finditer(re.escape(letter), lowered)} == ignorecase, letter
