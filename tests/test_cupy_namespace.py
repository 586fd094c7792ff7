"""Every cupy / cupyx attribute the device path calls exists.

Rank bodies take their array module from their arrays (``xp = namespace(x)``:
numpy on the host, cupy on a GPU) and must use only what both share.  No GPU
runs here, so this scans the kernels' source for ``xp.<name>`` (and
``sparse_namespace`` results, ``cupy.``/``cupyx.`` references) and checks
each name on the installed cupy, which imports without a device.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted(p for p in (ROOT / "workbench").rglob("*.py"))
# names bound to the array / sparse namespace of a device array
_NS_CALLS = {"namespace": "cupy", "device_namespace": "cupy", "sparse_namespace": "cupyx.scipy.sparse"}
_DIRECT = {"cupy": "cupy", "cp": "cupy", "cupyx": "cupyx"}


def _chain(node: ast.AST) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def _walk_scope(scope: ast.AST):
    """The nodes of one function (or the module), not of the functions nested in it."""
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            todo.extend(ast.iter_child_nodes(node))


def _uses(path: Path) -> set[tuple[str, str, int]]:
    """(module, dotted attribute, line) for each namespace attribute used in ``path``."""
    tree = ast.parse(path.read_text())
    found = set()
    scopes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))]
    for scope in scopes:
        ns: dict[str, str] = {}
        other: set[str] = set()
        if not isinstance(scope, ast.Module):
            ns.update({a.arg: "cupy" for a in scope.args.args + scope.args.kwonlyargs if a.arg == "xp"})
        for node in _walk_scope(scope):
            if isinstance(node, ast.Assign):
                fn = _chain(node.value.func) if isinstance(node.value, ast.Call) else None
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        if fn and fn[-1] in _NS_CALLS:
                            ns[t.id] = _NS_CALLS[fn[-1]]
                        else:
                            other.add(t.id)
        bound = {**_DIRECT, **{k: v for k, v in ns.items() if k not in other}}
        for node in _walk_scope(scope):
            if isinstance(node, ast.Attribute):
                ch = _chain(node)
                if ch and ch[0] in bound and len(ch) > 1:
                    found.add((bound[ch[0]], ".".join(ch[1:]), node.lineno))
    return found


def _resolve(module: str, dotted: str) -> bool:
    obj = importlib.import_module(module)
    for i, part in enumerate(dotted.split(".")):
        if hasattr(obj, part):
            obj = getattr(obj, part)
            continue
        try:  # a submodule not imported yet (cupy.fft, cupyx.scipy.sparse.linalg ...)
            obj = importlib.import_module(f"{obj.__name__}.{part}")
        except Exception:
            return i > 0 and not isinstance(obj, type(importlib))  # attribute of a returned object: not ours to check
    return True


def test_every_namespace_attribute_exists_in_cupy():
    pytest.importorskip("cupy", reason="cupy is not installed (pip install cupy-cuda12x): cannot check names")
    missing = []
    for path in SOURCES:
        for module, dotted, line in sorted(_uses(path)):
            # array attributes (x.shape) are not namespace calls: only check the namespace's own names
            if not _resolve(module, dotted):
                missing.append(f"{path.relative_to(ROOT)}:{line}: {module}.{dotted}")
    assert not missing, "names the device path calls that cupy lacks:\n" + "\n".join(missing)


def test_the_scan_sees_namespace_code():
    # guard against a scan that silently finds nothing
    uses = {u for p in SOURCES for u in _uses(p)}
    assert any(d == "asarray" for _, d, _ in uses), "the scan found no xp.asarray: the parser is broken"
