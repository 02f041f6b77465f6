"""The layers of the code import in one direction only (docs/design.md, "Layers").

Read from the source, every import statement counts, those inside functions too: a dependency hidden in
a function is still one. The base (what a trainer imports) sits at the bottom; the application on top.
Within the application, the read-models (`farm status`, the metrics) read the planner's state from the
protocol (farm.protocol.heartbeat) and load no planner code.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIRST_PARTY = ("farm", "planner", "workers", "migrations")

# layer -> module prefixes, the most specific first wins
LAYERS = {
    "app": ("farm.app",),
    "integrations": ("farm.integrations",),
    "store": ("farm.store", "migrations"),
    "base": ("farm",),
    "workers": ("workers",),
    "policy": ("planner.policy",),
    "eval": ("planner.eval",),
    "runtime": ("planner.runtime", "planner.backends"),
    "planner": ("planner",),
}
MAY_IMPORT = {
    "base": {"base"},
    "integrations": {"base", "integrations"},  # trainer adapters: on the client, beside the base, never under it
    "store": {"base", "store"},
    "workers": {"base", "workers"},
    "policy": {"policy"},  # and farm.knobs, its input: see POLICY_FROM_BASE
    "eval": {"base", "policy", "eval"},
    "runtime": {"base", "store", "workers", "policy", "runtime"},
    "planner": set(),
    "app": set(LAYERS),
}
POLICY_FROM_BASE = {"farm.knobs"}
# the policy does no I/O and reads no clock: what it may import from outside the project
POLICY_STDLIB = {"__future__", "collections", "dataclasses", "heapq", "itertools", "math", "random", "re", "typing",
                 "numpy"}


def layer_of(module: str) -> str:
    best = max(((p, layer) for layer, prefixes in LAYERS.items() for p in prefixes
                if module == p or module.startswith(p + ".")), key=lambda x: len(x[0]))
    return best[1]


def modules() -> list[tuple[str, Path]]:
    out = []
    for top in FIRST_PARTY:
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out.append((name, path))
    return out


def imports(module: str, path: Path) -> list[str]:
    found = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            found.append(base)
            found += [f"{base}.{a.name}" for a in node.names]  # `from farm import registry` imports farm.registry
    return found


def first_party(name: str) -> bool:
    return name.split(".")[0] in FIRST_PARTY


def test_every_layer_imports_only_the_layers_below_it():
    wrong = []
    for module, path in modules():
        layer = layer_of(module)
        for target in imports(module, path):
            if not first_party(target) or target in FIRST_PARTY:
                continue
            knobs = any(target == m or target.startswith(m + ".") for m in POLICY_FROM_BASE)
            allowed = MAY_IMPORT[layer] | ({"base"} if layer == "policy" and knobs else set())
            if layer_of(target) not in allowed and not target.startswith(module + "."):
                wrong.append(f"{module} ({layer}) imports {target} ({layer_of(target)})")
    assert not wrong, "\n".join(sorted(set(wrong)))


def test_the_policy_core_does_no_io_and_reads_no_clock():
    for module, path in modules():
        if layer_of(module) != "policy":
            continue
        outside = {t.split(".")[0] for t in imports(module, path) if not first_party(t)}
        assert outside <= POLICY_STDLIB, f"{module} imports {sorted(outside - POLICY_STDLIB)}"


def test_a_base_module_importing_upward_is_caught(tmp_path):
    path = tmp_path / "client.py"
    path.write_text("def f():\n    from planner.runtime import daemon\n")
    targets = [t for t in imports("farm.client.extra", path) if first_party(t)]
    assert [layer_of(t) for t in targets] == ["runtime", "runtime"]
    assert "runtime" not in MAY_IMPORT[layer_of("farm.client.extra")]


@pytest.mark.parametrize("entry", ["farm.client", "farm.protocol.dispatch"])
def test_a_trainer_importing_the_base_loads_no_layer_above_it(entry):
    probe = (f"import sys, {entry}\n"
             "above = sorted(m for m in sys.modules if m.split('.')[0] in ('planner', 'workers', 'sqlalchemy')"
             " or m.startswith(('farm.store', 'farm.app')))\n"
             "print(above)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def loaded_by(entry: str, tops: tuple[str, ...]) -> list[str]:
    """The modules of these top-level packages that importing `entry` loads, in a fresh interpreter."""
    probe = f"import sys, {entry}\nprint(sorted(m for m in sys.modules if m.split('.')[0] in {tops!r}))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
    return ast.literal_eval(out.stdout.strip())


@pytest.mark.parametrize("entry", ["farm.app.cli.status", "farm.app.metrics"])
def test_the_status_and_the_metrics_read_the_planners_heartbeat_without_loading_the_planner(entry):
    assert loaded_by(entry, ("planner",)) == []


def test_farm_status_loads_no_sql_and_no_numpy():
    assert loaded_by("farm.app.cli.status", ("sqlalchemy", "numpy")) == []


def test_a_read_model_importing_the_planner_is_caught():
    assert "planner.runtime.service" in loaded_by("farm.app.cli.planner", ("planner",))


def test_a_trainer_importing_the_client_loads_no_trainer_package():
    probe = ("import sys, farm.client, farm.integrations\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('trl', 'verl', 'torch', 'transformers', 'ray')"
             " or m.startswith('farm.integrations.')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"
