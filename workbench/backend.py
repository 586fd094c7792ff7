"""The one module that knows numpy/scipy from cupy/cupyx.

Worker-local code asks for the array namespace of its inputs and uses only
operations numpy and cupy share.  cupy is never imported unless an input is a
cupy array or the GPU backend was explicitly requested, so ``import workbench``
works on machines without it.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import os
import sys
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np

__all__ = [
    "namespace",
    "sparse_namespace",
    "is_device_array",
    "to_host",
    "unique_sorted",
    "asarray_like",
    "empty",
    "concatenate",
    "synchronize",
    "gpu_available",
    "require_gpu",
    "DEVICE_KINDS",
    "ENV_DEVICE",
    "device_kind",
    "device_namespace",
    "to_device",
    "launch",
]

#: The paths a worker's kernels can take: numba on the host, numba.cuda on a
#: GPU (cupy arrays), numba.cuda under numba's CUDA simulator (numpy arrays).
DEVICE_KINDS = ("cpu", "gpu", "gpu-sim")

#: Set in every worker's environment by :func:`workbench.cluster` before the
#: worker process starts: the path is a property of the worker, fixed at start.
ENV_DEVICE = "WORKBENCH_BACKEND"


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


def unique_sorted(x: Any) -> Any:
    """The sorted distinct values of a 1-D integer array (numpy or cupy).

    Sort and compare neighbours: numpy 2.4's ``np.unique`` hashes first and
    was 6x slower on the tens of millions of edge keys graph builders dedupe.

    Examples
    --------
    >>> unique_sorted(np.array([3, 1, 3, 2]))
    array([1, 2, 3])
    """
    xp = namespace(x)
    key = xp.sort(x)
    if key.size < 2:
        return key
    keep = xp.empty(key.size, dtype=bool)
    keep[0] = True
    xp.not_equal(key[1:], key[:-1], out=keep[1:])
    return key[keep]


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


def empty(shape: Any, dtype: Any = np.float64, like: Any = None) -> Any:
    """An uninitialized output array on the device of ``like`` (host when None), 64-byte aligned.

    Host arrays of 1 MiB and more come from a per-process pool of retained buffers, the
    host counterpart of cupy's memory pool: on virtual machines that hand freed
    memory back to the hypervisor (free page reporting), every fresh large
    allocation pays a host page fault per page on first touch, about 1 ms per
    MiB here, as much as a kernel's whole pass over its data.  A buffer returns
    to the pool when the last view of the array dies.  Device arrays use cupy's
    own pool.  ``WORKBENCH_HOST_POOL_MB`` caps the pool (0 turns it off).

    Examples
    --------
    >>> x = empty((1024, 8))
    >>> x.shape, x.dtype
    ((1024, 8), dtype('float64'))
    """
    if like is not None and is_device_array(like):
        return namespace(like).empty(shape, dtype=dtype)
    return _HOST_POOL.empty(shape, dtype)


def concatenate(arrays: Sequence[Any], dtype: Any = None) -> np.ndarray:
    """``np.concatenate(arrays, dtype=dtype)`` of host arrays along axis 0, into a buffer from :func:`empty`.

    For a kernel's blocks joined on the client: a large result's fresh pages cost more than the copy (a BFS at
    SCALE 20, 16 MB: 3.2 ms against 2.3 ms a call), and a dropped result's buffer serves the next call.

    Examples
    --------
    >>> concatenate([np.arange(2, dtype=np.int32), np.arange(3, dtype=np.int8)], dtype=np.int64)
    array([0, 1, 0, 1, 2])
    """
    arrays = [np.asarray(a) for a in arrays]
    dtype = np.result_type(*arrays) if dtype is None else np.dtype(dtype)
    shape = (sum(a.shape[0] for a in arrays), *arrays[0].shape[1:])
    return np.concatenate(arrays, out=empty(shape, dtype))


def misalignment(x: Any) -> int:
    """How many bytes ``x``'s data starts past a 64-byte boundary (a cache line, an AVX-512 vector).

    ``empty`` gives 0.  numpy's large arrays start 16 bytes past one (malloc's header), and a chunk dask
    deserialized out of a task graph (``da.from_array`` of host data) anywhere, odd addresses included.

    Examples
    --------
    >>> misalignment(empty(1 << 18))
    0
    """
    spec = getattr(x, "__cuda_array_interface__", None) or x.__array_interface__
    return int(spec["data"][0]) % _HostPool.ALIGN


class _Lease:
    """Owner of one pooled buffer while arrays view it; gives it back when they die."""

    def __init__(self, pool: _HostPool, raw: np.ndarray, shape: tuple, dtype: np.dtype) -> None:
        self._pool, self._raw = pool, raw
        self.__array_interface__ = {"shape": shape, "typestr": dtype.str, "data": (raw.ctypes.data, False),
                                    "version": 3}

    def __del__(self) -> None:
        self._pool._give_back(self._raw)


class _HostPool:
    """Freed large host buffers kept mapped (and resident) for the next allocation of the same size."""

    # from the size of a cross-memory parcel (comms' CMA minimum): a BFS rank's 2.5 MB result at SCALE 20 took
    # 1.1 ms to copy into fresh pages, 0.35 ms into a pooled buffer
    MIN_BYTES = 1 << 20
    ALIGN = 64
    GRAIN = 2 << 20  # transparent huge page size: sizes round up to it

    def __init__(self) -> None:
        self._free: dict[int, list[np.ndarray]] = {}
        self._held = 0
        # re-entrant: a gc pass inside a locked section may finalize another lease in this thread
        self._lock = threading.RLock()

    @property
    def limit(self) -> int:
        return int(float(os.environ.get("WORKBENCH_HOST_POOL_MB", 2048)) * (1 << 20))

    def empty(self, shape: Any, dtype: Any) -> np.ndarray:
        dtype = np.dtype(dtype)
        shape = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if nbytes < self.MIN_BYTES or self.limit <= 0:
            return self._aligned(nbytes)[:nbytes].view(dtype).reshape(shape)
        size = -(-nbytes // self.GRAIN) * self.GRAIN
        with self._lock:
            stack = self._free.get(size)
            raw = stack.pop() if stack else None
            if raw is not None:
                self._held -= size
        if raw is None:
            raw = self._aligned(size)
        return np.asarray(_Lease(self, raw, shape, dtype))

    def _aligned(self, nbytes: int) -> np.ndarray:
        """``nbytes`` bytes at a 64-byte boundary (FFTW's and AVX-512's alignment), a view of its allocation."""
        pad = np.empty(nbytes + self.ALIGN, np.uint8)
        start = -pad.ctypes.data % self.ALIGN
        return pad[start:start + nbytes]

    def _give_back(self, raw: np.ndarray) -> None:
        size = raw.nbytes  # raw is a view of its padded allocation: keeps it alive
        with self._lock:
            if self._held + size > self.limit:
                # make room: drop the other sizes first (a new problem size replaces the old)
                for other in sorted(self._free, key=lambda s: s == size):
                    while self._free[other] and self._held + size > self.limit:
                        self._held -= self._free[other].pop().nbytes
                if self._held + size > self.limit:
                    return
            self._free.setdefault(size, []).append(raw)
            self._held += size

    def clear(self) -> None:
        with self._lock:
            self._free.clear()
            self._held = 0


_HOST_POOL = _HostPool()


def synchronize(*arrays: Any) -> None:
    """Block until device work on the arrays' device has finished (no-op on CPU)."""
    if any(is_device_array(a) for a in arrays) or (not arrays and _cupy_if_loaded() and gpu_available()[0]):
        _cupy_if_loaded().cuda.get_current_stream().synchronize()


def device_kind() -> str:
    """The path this process's kernels take: ``"cpu"``, ``"gpu"`` or ``"gpu-sim"``.

    Read from ``WORKBENCH_BACKEND``, which :func:`workbench.cluster` sets in each
    worker's environment when the cluster starts.  A worker of a cluster started
    elsewhere (``dask-cuda-worker``, an existing scheduler) without it takes the
    GPU path when it runs under dask-cuda (``CUDA_VISIBLE_DEVICES`` set) and cupy
    sees a device, else the CPU path.

    Examples
    --------
    >>> device_kind() in DEVICE_KINDS
    True
    """
    kind = os.environ.get(ENV_DEVICE)
    if kind in DEVICE_KINDS:
        return kind
    if os.environ.get("CUDA_VISIBLE_DEVICES") and gpu_available()[0]:
        return "gpu"
    return "cpu"


def device_namespace() -> ModuleType:
    """The array module this process's partitions live in: cupy on a GPU worker, else numpy."""
    return importlib.import_module("cupy") if device_kind() == "gpu" else np


def to_device(x: Any) -> Any:
    """``x`` in this worker's memory: moved to the GPU (dense or scipy sparse) on a
    ``"gpu"`` worker, unchanged on ``"cpu"`` and ``"gpu-sim"`` workers (whose
    device arrays are numpy arrays)."""
    if device_kind() != "gpu" or is_device_array(x):
        return x
    import cupy as cp

    if hasattr(x, "tocsr") and hasattr(x, "nnz"):  # scipy.sparse
        import cupyx.scipy.sparse as csp

        return csp.csr_matrix(x.tocsr())
    return cp.asarray(x)


def launch(kernel: Any, n: int, *args: Any, block: int = 256) -> None:
    """Launch a numba.cuda grid-stride ``kernel(*args)`` covering ``n`` items.

    Under the simulator each CUDA thread is a Python thread (about 1 ms per
    thread per launch), so the grid is two blocks of 32 and the kernel's
    grid-stride loop covers the data.  On a GPU the grid is sized for ``n``
    (capped at 32 blocks per SM) and the kernel runs on cupy's current stream,
    so cupy work before and after it is ordered with it.  Asynchronous on a GPU:
    :func:`synchronize` before the host reads results or a task returns.
    """
    import numba

    if device_kind() == "cpu":
        raise RuntimeError("launch() runs numba.cuda kernels on the device path ('gpu' or 'gpu-sim' workers); "
                           "this process is a CPU worker: call the kernel's cpu.py twin")
    if numba.config.ENABLE_CUDASIM:
        kernel[2, 32](*args)
        return
    import cupy as cp
    from numba import cuda

    stream = cp.cuda.get_current_stream()
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    grid = max(1, min(-(-max(int(n), 1) // block), 32 * sms))
    kernel[grid, block, cuda.external_stream(stream.ptr)](*args)


@functools.cache
def gpu_available() -> tuple[bool, str]:
    """Whether the GPU backend can run here, and if not, what is missing (asked once per process)."""
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


@functools.cache
def numba_cuda_problem() -> str | None:
    """Why numba-cuda cannot type a device kernel in this environment, or None.

    Loads numba-cuda's typing registries, as its first kernel compile does (no device needed, ~0.7 s):
    a numpy it does not support breaks there.  On the first device run numba-cuda 0.30.4 met numpy 2.5
    (which removed ``np.row_stack``) and every kernel failed on the workers with an AttributeError;
    now a GPU cluster refuses to start and says why.
    """
    try:
        from numba.cuda.descriptor import cuda_target
    except Exception:
        return None   # another numba-cuda layout (or the simulator): the kernels' own compile will tell
    try:
        cuda_target.typing_context.refresh()
    except Exception as e:
        try:
            version = importlib.metadata.version("numba-cuda")
        except Exception:
            version = "?"
        return (f"numba-cuda {version} cannot type kernels with numpy {np.__version__} "
                f"({type(e).__name__}: {e}); numba-cuda 0.30 needs numpy < 2.5")
    return None


def require_gpu(need_dask_cuda: bool = False) -> None:
    """Raise a RuntimeError naming what is missing for the GPU backend."""
    ok, why = gpu_available()
    if not ok:
        raise RuntimeError(f"backend='gpu' is unavailable: {why}")
    why = numba_cuda_problem()
    if why is not None:
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
