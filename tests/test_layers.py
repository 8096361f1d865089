"""The package's import graph, read with ``ast`` from the source files: layers import
downward only (the ``commbench`` parts -> ``commbench.analysis`` -> ``commbench.kernels``),
no module imports a command-line module, and there is no circle anywhere."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: import name -> source folder (setup.cfg's package_dir, code packages only)
PACKAGES = {
    "commbench.kernels": ROOT / "kernels",
    "commbench.analysis": ROOT / "analysis",
    "commbench": ROOT / "suite",
}
#: commbench's own parts, lowest first: a part imports only parts below it (and itself).
PARTS = (
    "commbench.kernels",
    "commbench.analysis",
    "commbench.foundation",  # errors, units, config, launch: used by every part above
    "commbench.cluster",
    "commbench.harness",
    "commbench.jobs",
    "commbench.model",
    "commbench.compare",
    "commbench.sweep",
    "commbench.gpucheck",
    "commbench.benchmarks",
    "commbench.report",
    "commbench.cli",
)
FOUNDATION = {"commbench", "commbench.errors", "commbench.units", "commbench.config",
              "commbench.launch"}  # fmt: skip


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for name, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(folder).with_suffix("").parts
            if rel[-1] == "__init__":
                rel = rel[:-1]
            mod = ".".join((name, *rel))
            found.setdefault(mod, path)  # commbench.kernels.* comes from kernels/, not suite/
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The project module ``name`` refers to (a package's ``from X import name`` may name a
    submodule or an attribute)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(mod: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            # ``from pkg import sub`` imports the module pkg.sub; ``from mod import attr``, mod
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                     for a in node.names]  # fmt: skip
        for name in names:
            if name.split(".")[0] in ("suite", "kernels", "analysis"):
                out.add(name)  # an old top-level name: reported by the test below
            elif name.startswith("commbench") and (target := _resolve(name)) and target != mod:
                out.add(target)
    return out


GRAPH = {mod: _imports(mod, path) for mod, path in MODULES.items()}


def _part(mod: str) -> str:
    if mod in FOUNDATION or mod == "commbench.__main__":
        return "commbench.cli" if mod == "commbench.__main__" else "commbench.foundation"
    for part in sorted(PARTS, key=len, reverse=True):
        if mod == part or mod.startswith(part + "."):
            return part
    raise AssertionError(f"{mod} belongs to no part: add it to PARTS in {__file__}")


def test_no_old_top_level_names():
    bad = {m: sorted(i for i in imps if not i.startswith("commbench")) for m, imps in GRAPH.items()}
    assert not {m: i for m, i in bad.items() if i}


def test_layers_import_downward_only():
    rank = {part: k for k, part in enumerate(PARTS)}
    wrong = [
        f"{mod} -> {target}"
        for mod, imps in GRAPH.items()
        for target in imps
        if target.startswith("commbench") and rank[_part(target)] > rank[_part(mod)]
    ]
    assert not wrong, "imports from a lower layer to a higher one:\n" + "\n".join(wrong)


def test_nothing_imports_a_command_line_module():
    def is_cli(m: str) -> bool:
        return m.endswith((".cli", ".__main__")) or m == "commbench.cli"

    wrong = [f"{m} -> {t}" for m, imps in GRAPH.items() for t in imps if is_cli(t)]
    allowed = {"commbench.__main__ -> commbench.cli"}
    assert not set(wrong) - allowed


def test_no_import_circles():
    state: dict[str, int] = {}
    stack: list[str] = []
    circles: list[str] = []

    def visit(mod: str) -> None:
        state[mod] = 1
        stack.append(mod)
        for nxt in sorted(GRAPH.get(mod, ())):
            if state.get(nxt) == 1:
                circles.append(" -> ".join(stack[stack.index(nxt) :] + [nxt]))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[mod] = 2

    for mod in sorted(GRAPH):
        if mod not in state:
            visit(mod)
    assert not circles, "import circles:\n" + "\n".join(circles)


@pytest.mark.parametrize("mod", sorted(m for m in MODULES if m.startswith("commbench.kernels")))
def test_kernels_import_nothing_else_of_the_project(mod):
    assert all(t.startswith("commbench.kernels") for t in GRAPH[mod])
