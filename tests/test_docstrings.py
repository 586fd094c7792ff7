"""The docstrings' examples run: every example not marked ``+SKIP`` (those need a cluster or R's data) gives
the output its docstring shows, so the examples a user copies stay true as the code moves."""

from __future__ import annotations

import doctest
import importlib
import inspect
import pkgutil
import re
from typing import Any

import pytest

import workbench

MODULES = sorted(m.name for m in pkgutil.walk_packages(workbench.__path__, "workbench."))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_give_what_they_show(name):
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    out: list[str] = []
    for test in doctest.DocTestFinder(exclude_empty=True).find(module, name):   # its own names only
        runner.run(test, out=out.append)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, "".join(out)


def test_the_examples_are_found():
    # a finder that saw nothing would pass every module: the package has examples that run (not skipped)
    runner = doctest.DocTestRunner()
    for test in doctest.DocTestFinder().find(importlib.import_module("workbench.data"), "workbench.data"):
        runner.run(test, out=lambda s: None)
    assert runner.summarize(verbose=False).attempted >= 3


#: Examples marked +SKIP only because they need a cluster (``client``), self-contained and small: they run
#: on the shared 2-worker cluster.  Left out: examples that start clusters of their own, kill workers,
#: read files or R's data, or build the benchmarks' gigabyte systems.
ON_A_CLUSTER = [
    "workbench.bench.comms_pingpong", "workbench.bench.scheduler_roundtrip", "workbench.comms.spmd",
    "workbench.kernels.bfs.bfs", "workbench.kernels.bfs.graph500", "workbench.kernels.coloring.color",
    "workbench.kernels.fft.fftn", "workbench.kernels.fft.ifftn", "workbench.kernels.fft.rfftn",
    "workbench.kernels.fft.irfftn", "workbench.kernels.tridiag.compact_derivative",
    "workbench.kernels.tridiag.tridiag_solve", "workbench.partition.RowBlocks", "workbench.partition.BlockGrid",
]


def _docstring_of(dotted: str) -> tuple[Any, str]:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = module = importlib.import_module(".".join(parts[:i]))
            break
        except ImportError:
            continue
    for p in parts[i:]:
        obj = getattr(obj, p)
    return module, inspect.getdoc(obj)


@pytest.mark.parametrize("name", ON_A_CLUSTER)
def test_cluster_examples_give_what_they_show(client, name):
    import numpy as np

    module, doc = _docstring_of(name)
    assert "+SKIP" in doc and "client" in doc, "the list names an example that runs without a cluster"
    globs = {**vars(module), "client": client, "wb": workbench, "np": np}
    test = doctest.DocTestParser().get_doctest(re.sub(r"#\s*doctest:\s*\+SKIP", "", doc), globs, name, None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    out: list[str] = []
    runner.run(test, out=out.append)
    result = runner.summarize(verbose=False)
    assert result.attempted >= 2 and result.failed == 0, "".join(out)
