"""The docstrings' examples run: every example not marked ``+SKIP`` (those need a cluster or R's data) gives
the output its docstring shows, so the examples a user copies stay true as the code moves."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import workbench

MODULES = sorted(m.name for m in pkgutil.walk_packages(workbench.__path__, "workbench."))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_give_what_they_show(name):
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    out: list[str] = []
    for test in doctest.DocTestFinder(exclude_empty=True).find(module, name):
        if test.filename and not test.filename.endswith(name.replace(".", "/") + ".py") and \
                not test.filename.endswith(name.replace(".", "/") + "/__init__.py"):
            continue        # names a module imports from elsewhere are tested in their own module
        runner.run(test, out=out.append)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, "".join(out)


def test_the_examples_are_found():
    # a finder that saw nothing would pass every module: the package has examples that run (not skipped)
    runner = doctest.DocTestRunner()
    for test in doctest.DocTestFinder().find(importlib.import_module("workbench.data"), "workbench.data"):
        runner.run(test, out=lambda s: None)
    assert runner.summarize(verbose=False).attempted >= 3
