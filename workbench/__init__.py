"""workbench: Dask-distributed scientific kernels that reproduce distributed-GPU papers.

Examples
--------
>>> import workbench as wb
>>> with wb.cluster(backend="cpu", n_workers=2) as client:       # doctest: +SKIP
...     A = wb.data.rmat(scale=12, seed=1)
...     G = wb.distribute(A, client=client)
...     r = wb.bfs(G, source=0, client=client)
"""

from __future__ import annotations

import importlib
from typing import Any

from . import backend, bench, comms, data, experiment, partition  # noqa: F401
from .cluster import cluster
from .partition import BlockGrid, RowBlocks, distribute

__version__ = "0.1.0"

# Kernels are imported on first use so `import workbench` stays light.
_KERNELS = {
    "bfs": "workbench.kernels.bfs",
    "graph500": "workbench.kernels.bfs",
    "validate_bfs": "workbench.kernels.bfs",
    "color": "workbench.kernels.coloring",
    "validate_coloring": "workbench.kernels.coloring",
    "knn_graph": "workbench.kernels.knn",
    "ripley_k": "workbench.kernels.ripley",
    "spmm": "workbench.kernels.spmm",
    "spgemm": "workbench.kernels.spmm",
    "tridiag_solve": "workbench.kernels.tridiag",
    "compact_derivative": "workbench.kernels.tridiag",
    "fftn": "workbench.kernels.fft",
    "ifftn": "workbench.kernels.fft",
    "rfftn": "workbench.kernels.fft",
    "irfftn": "workbench.kernels.fft",
}

__all__ = ["cluster", "distribute", "RowBlocks", "BlockGrid", "backend", "comms", "data", "partition", "bench",
           "experiment", *_KERNELS]


def __getattr__(name: str) -> Any:
    if name == "kernels":   # wb.kernels.<kernel> in examples, without importing every kernel up front
        return importlib.import_module("workbench.kernels")
    mod = _KERNELS.get(name)
    if mod is None:
        raise AttributeError(f"module 'workbench' has no attribute {name!r}")
    try:
        module = importlib.import_module(mod)
    except ModuleNotFoundError as e:
        if e.name == mod:
            raise AttributeError(f"workbench.{name} is not available: {mod} is not built yet") from e
        raise
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_KERNELS))
