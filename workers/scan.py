"""Finding lines and words in hostile text in time linear in its length, fast enough for a trainer's client.

Python's `re` searches a pattern led by a literal far faster than one it must try at every character (`^` under
MULTILINE, `\\b`, IGNORECASE): so these find candidates by a literal (a newline, a mark, a lower-cased word) and
check where each stands. Each walk only moves forward, and looks back at most to where it last stood.
"""

from __future__ import annotations

import re


class LinePattern:
    """`^[^\\S\\n]*(body)` under MULTILINE (the body after a line's leading blanks), searched as a literal newline
    (the text's start apart): `^` would be tried at every character, and `^\\s*` read every blank line below each
    line start again, quadratic in a run of blank lines."""

    def __init__(self, body: str) -> None:
        self._first = re.compile(rf"[^\S\n]*+(?:{body})")
        self._later = re.compile(rf"\n[^\S\n]*+(?:{body})")

    def line(self, text: str) -> int | None:
        """Where the first line that matches starts; None when none does."""
        if self._first.match(text):
            return 0
        later = self._later.search(text)
        return later.start() + 1 if later else None


class MarkedLines:
    """The lines of a text that hold a mark (a literal such as ```), walked forward: each mark's next place is
    found once per stretch of text, however many searches ask for it."""

    def __init__(self, text: str, marks: tuple[str, ...]) -> None:
        self.text = text
        self.next = {mark: text.find(mark) for mark in marks}

    def line(self, start: int, marks: tuple[str, ...], pattern: re.Pattern[str]) -> re.Match[str] | None:
        """The first line from `start` (a line's start, at or after the last search's) holding one of `marks`
        that `pattern` matches from the line's start; None when there is none."""
        text = self.text
        while True:
            for mark in marks:
                if 0 <= self.next[mark] < start:
                    self.next[mark] = text.find(mark, start)
            hits = [self.next[mark] for mark in marks if self.next[mark] >= 0]
            if not hits:
                return None
            at = min(hits)
            found = pattern.match(text, max(text.rfind("\n", start, at) + 1, start))
            if found:
                return found
            start = text.find("\n", at) + 1
            if start == 0:
                return None


def line_start(text: str, at: int, after: int) -> bool:
    """Whether only blanks precede `at` on its line, given that `after - 1` holds a non-blank character (the last
    mark looked at) or `after` is 0: the line is looked at back to there only, so a walk's checks are linear."""
    newline = text.rfind("\n", after, at)
    if newline < 0 and after > 0:
        return False
    return at == newline + 1 or text[newline + 1:at].isspace()


def folded(text: str) -> str:
    """`text` in lower case, each character where it was: a plain search of it for an ASCII word is re's IGNORECASE
    search of `text` (which also matches 'ı' and 'İ' with i and 'ſ' with s; 'İ' alone lower-cases to two)."""
    if not text.isascii():
        text = text.replace("İ", "i").replace("ı", "i").replace("ſ", "s")
    return text.lower()
