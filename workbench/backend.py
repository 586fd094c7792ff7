"""The one module that knows numpy/scipy from cupy/cupyx.

Worker-local code asks for the array namespace of its inputs and uses only
operations numpy and cupy share.  cupy is never imported unless an input is a
cupy array or the GPU backend was explicitly requested, so ``import workbench``
works on machines without it.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any

import numpy as np

__all__ = [
    "namespace",
    "sparse_namespace",
    "is_device_array",
    "to_host",
    "asarray_like",
    "synchronize",
    "gpu_available",
    "require_gpu",
]


def _cupy_if_loaded() -> ModuleType | None:
    # Only look at cupy when something has already imported it: an input that
    # is a cupy array implies cupy is in sys.modules.
    return sys.modules.get("cupy")


def is_device_array(x: Any) -> bool:
    """True when ``x`` is a cupy array (dense or cupyx sparse)."""
    cp = _cupy_if_loaded()
    if cp is None:
        return False
    if isinstance(x, cp.ndarray):
        return True
    sp = sys.modules.get("cupyx.scipy.sparse")
    return bool(sp is not None and sp.issparse(x))


def namespace(*arrays: Any) -> ModuleType:
    """Array module (``numpy`` or ``cupy``) of the given arrays.

    Examples
    --------
    >>> import numpy as np
    >>> namespace(np.zeros(3)).__name__
    'numpy'
    """
    for a in arrays:
        if is_device_array(a):
            return _cupy_if_loaded()
    return np


def sparse_namespace(*arrays: Any) -> ModuleType:
    """``scipy.sparse`` or ``cupyx.scipy.sparse`` matching the inputs."""
    if namespace(*arrays) is np:
        return importlib.import_module("scipy.sparse")
    return importlib.import_module("cupyx.scipy.sparse")


def to_host(x: Any) -> Any:
    """Bring an array (dense or sparse, numpy or cupy) to host memory.

    Host inputs are returned unchanged (no copy).
    """
    if is_device_array(x):
        if hasattr(x, "get"):
            return x.get()
    return x


def asarray_like(x: Any, like: Any) -> Any:
    """``x`` as an array on the same device as ``like``."""
    return namespace(like).asarray(x)


def synchronize(*arrays: Any) -> None:
    """Block until device work on the arrays' device has finished (no-op on CPU)."""
    if any(is_device_array(a) for a in arrays) or (not arrays and _cupy_if_loaded()):
        cp = _cupy_if_loaded()
        if cp is not None:
            cp.cuda.get_current_stream().synchronize()


def gpu_available() -> tuple[bool, str]:
    """Whether the GPU backend can run here, and if not, what is missing."""
    try:
        cp = importlib.import_module("cupy")
    except Exception as e:  # ImportError, or a broken CUDA install
        return False, f"cupy is not importable ({e.__class__.__name__}: {e}); install workbench[gpu]"
    try:
        ok = bool(cp.cuda.is_available())
    except Exception as e:
        return False, f"cupy cannot reach a CUDA device ({e})"
    if not ok:
        return False, "cupy is installed but cupy.cuda.is_available() is False: no CUDA device"
    return True, "ok"


def require_gpu(need_dask_cuda: bool = False) -> None:
    """Raise a RuntimeError naming what is missing for the GPU backend."""
    ok, why = gpu_available()
    if not ok:
        raise RuntimeError(f"backend='gpu' is unavailable: {why}")
    if need_dask_cuda:
        for mod, pkg in (("dask_cuda", "dask-cuda"), ("cuda.bindings", "cuda-bindings")):
            try:
                importlib.import_module(mod)
            except Exception as e:
                raise RuntimeError(
                    f"backend='gpu' is unavailable: {mod} is not importable ({e}); "
                    f"install {pkg} (pip install workbench[gpu])"
                ) from e
