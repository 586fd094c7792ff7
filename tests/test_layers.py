"""The package's import graph follows DESIGN.md's layers: imports go down only, no cycles.

Static (ast, nothing is executed); lazy imports inside functions count too, since
they are the same dependency taken later.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "workbench"

# Top to bottom (DESIGN.md). A module may import its own layer or any layer below it.
LAYERS: list[tuple[str, ...]] = [
    ("workbench", "workbench.__main__"),
    ("workbench.experiment", "workbench.report"),
    ("workbench.bench", "workbench.peers", "workbench.faults"),
    ("workbench.kernels",),
    ("workbench.data",),
    ("workbench.partition",),
    ("workbench.comms", "workbench._samehost"),
    ("workbench.cluster",),
    ("workbench.backend",),
    ("workbench._progress", "workbench._monitor"),
]


def _modules() -> dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def layer_of(module: str) -> int:
    best, depth = None, -1
    for i, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and name.count(".") > depth and (
                    name != "workbench" or module in ("workbench",)):
                best, depth = i, name.count(".")
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS in tests/test_layers.py (and DESIGN.md)")
    return best


def _imports(module: str, path: Path, known: set[str]) -> set[str]:
    is_pkg = path.name == "__init__.py"
    base = module.split(".") if is_pkg else module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                root = base[: len(base) - (node.level - 1)]
                stem = ".".join(root + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            # `from pkg import sub` imports the submodule when one exists
            names = [f"{stem}.{a.name}" if f"{stem}.{a.name}" in known else stem for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name.startswith("workbench") and name != module:
                found.add(name)
    return found


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    return {m: _imports(m, p, known) for m, p in mods.items()}


def test_every_module_has_a_layer():
    for m in _modules():
        layer_of(m)


def test_imports_go_down_only():
    up = [f"{a} (layer {layer_of(a)}) imports {b} (layer {layer_of(b)})"
          for a, deps in _graph().items() for b in deps
          if layer_of(b) < layer_of(a) and not b.startswith(a + ".")]
    assert not up, "imports that go up DESIGN.md's layers:\n" + "\n".join(sorted(up))


def test_no_import_cycles():
    # A package importing its own submodules is how a package exposes them; a
    # submodule importing back from its package's __init__ while that __init__
    # imports it is a cycle.
    g = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(g.get(m, ())):
            if d == "workbench" or m == "workbench":
                continue  # the top-level package re-exports; nothing below may import it (checked above)
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("path", sorted(p for p in PKG.rglob("*.py")), ids=lambda p: str(p.relative_to(PKG)))
def test_module_size(path):
    n = len(path.read_text().splitlines())
    assert n <= 1200, f"{path.relative_to(PKG.parent)} has {n} lines (limit 1,200): split it"


def test_kernel_packages_load_on_first_use():
    """``wb.kernels.<kernel>`` (the docstrings' examples use it) reaches every kernel package."""
    import workbench as wb
    from workbench import kernels

    assert sorted(kernels._PACKAGES) == sorted(p.parent.name for p in (PKG / "kernels").glob("*/__init__.py"))
    assert wb.kernels.knn.knn_graph is wb.knn_graph
    with pytest.raises(AttributeError, match="nope"):
        wb.kernels.nope  # noqa: B018
