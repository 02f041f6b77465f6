"""docs/design.md's walk of one request and one knob names real code: every module, file, function and method
it names exists, so a rename that the walk does not follow fails here."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = (ROOT / "docs" / "design.md").read_text()
WALK = DESIGN[DESIGN.index("### A newcomer's walk"):DESIGN.index("## 6.")]
NAMES = re.findall(r"`([^`]+)`", WALK)


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def _defined(cls: str, attr: str) -> bool:
    """Somewhere in the code, `class cls` with `def attr` (or an attribute `attr`) in its body."""
    for path in (*ROOT.glob("farm/**/*.py"), *ROOT.glob("workers/**/*.py"), *ROOT.glob("planner/**/*.py")):
        text = path.read_text()
        found = re.search(rf"^class {cls}\b.*?(?=^\S|\Z)", text, re.S | re.M)
        if found and re.search(rf"^\s+(?:async )?def {attr}\b|^\s+{attr}\b\s*[:=]", found.group(0), re.M):
            return True
    return False


def test_the_walk_is_there():
    assert "One request" in WALK and "One knob" in WALK and len(NAMES) > 30


def test_every_module_and_function_the_walk_names_exists():
    dotted = {n.split("(")[0] for n in NAMES if re.fullmatch(r"(farm|workers|planner)(\.\w+)+(\(.*\))?", n)}
    assert dotted and not sorted(n for n in dotted if not _resolves(n))


def test_every_file_the_walk_names_exists():
    files = {n.split()[0] for n in NAMES if re.fullmatch(r"[\w/<>.-]+\.(py|lua)", n) and "<" not in n}
    files |= {n.rstrip("/") for n in NAMES if n.endswith("/") and "<" not in n}
    # a bare script name is one of the protocol's Lua scripts
    assert files and not sorted(f for f in files if not (ROOT / f).exists()
                                and not (ROOT / "farm/protocol/lua" / f).exists())


def test_every_method_the_walk_names_is_defined_on_its_class():
    methods = {tuple(n.split(".")) for n in NAMES if re.fullmatch(r"[A-Z]\w+\.\w+", n)}
    assert methods and not sorted(".".join(m) for m in methods if not _defined(*m))
