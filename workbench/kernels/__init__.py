"""One package per kernel: the distributed algorithm, its validation, its local kernels.

Imported on first use (``wb.kernels.knn``), as ``workbench``'s own kernel functions are.
"""

from __future__ import annotations

import importlib
from typing import Any

_PACKAGES = ("bfs", "coloring", "fft", "knn", "ripley", "spmm", "tridiag")


def __getattr__(name: str) -> Any:
    if name not in _PACKAGES:
        raise AttributeError(f"module 'workbench.kernels' has no attribute {name!r}")
    return importlib.import_module(f"{__name__}.{name}")
