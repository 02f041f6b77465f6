"""The test tree itself: pytest imports test files by their basename (the folders have no __init__.py), so
two files with one name in different folders make a collection error in the whole run."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_no_two_test_files_share_a_name():
    names = Counter(p.name for p in (ROOT / "tests").rglob("test_*.py"))
    assert not [n for n, count in names.items() if count > 1], sorted(n for n, c in names.items() if c > 1)
