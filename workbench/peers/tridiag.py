"""Tridiagonal peer on the device: cuSPARSE's ``gtsv2`` (one system, with
partial pivoting) and ``gtsv2StridedBatch`` (a batch, cyclic + parallel cyclic
reduction, no pivoting), called through cupy's cuSPARSE bindings
(``cupy_backends.cuda.libs.cusparse``; cupy has no high-level wrapper for them).

Layouts.  :func:`workbench.tridiag_solve` takes LAPACK ``gtsv``'s: ``dl`` and
``du`` hold the ``n - 1`` off-diagonals, batch leading.  cuSPARSE takes all
three diagonals with ``n`` entries: ``dl[0] = 0`` and ``du[n - 1] = 0``, row
``i`` reading ``dl[i] x[i-1] + d[i] x[i] + du[i] x[i+1] = b[i]``; the batch
variant reads system ``j`` at offset ``j * batchStride`` of each array, and both
overwrite the right-hand side with the solution.  :func:`gtsv2_layout` converts.

Examples
--------
>>> import numpy as np
>>> dlp, d, dup = gtsv2_layout(np.array([1.0, 2.0]), np.array([4.0, 5.0, 6.0]), np.array([7.0, 8.0]))
>>> dlp.tolist(), dup.tolist()
([0.0, 1.0, 2.0], [7.0, 8.0, 0.0])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import namespace
from ._device import memory_short, missing, release, timed_row, unavailable_row

__all__ = ["gtsv2_layout", "gtsv2_call", "device_gtsv2"]

#: cuSPARSE's type prefix per numpy dtype character.
_PREFIX = {"f": "s", "d": "d", "F": "c", "D": "z"}


def gtsv2_layout(dl: Any, d: Any, du: Any) -> tuple[Any, Any, Any]:
    """LAPACK ``gtsv`` diagonals (``dl``, ``du``: ``(..., n - 1)``; ``d``: ``(..., n)``)
    as cuSPARSE's three ``(..., n)`` C-contiguous arrays, ``dl`` padded with a
    leading zero and ``du`` with a trailing one, in the namespace of ``d``
    (numpy or cupy).

    Examples
    --------
    >>> dlp, d, dup = gtsv2_layout(np.ones((2, 3)), np.full((2, 4), 3.0), 2 * np.ones((2, 3)))
    >>> dlp[:, 0].tolist(), dup[:, -1].tolist(), dlp.shape == dup.shape == (2, 4)
    ([0.0, 0.0], [0.0, 0.0], True)
    """
    xp = namespace(d)
    d = xp.ascontiguousarray(d)
    if d.ndim not in (1, 2) or d.shape[-1] < 1:
        raise ValueError(f"d must be (n,) or (batch, n), got shape {d.shape}")
    want = d.shape[:-1] + (d.shape[-1] - 1,)
    for label, a in (("dl", dl), ("du", du)):
        if tuple(a.shape) != want:
            raise ValueError(f"{label} must have shape {want} (n - 1 off-diagonal entries, LAPACK gtsv), "
                             f"got {tuple(a.shape)}")
    dlp = xp.zeros(d.shape, dtype=d.dtype)
    dup = xp.zeros(d.shape, dtype=d.dtype)
    dlp[..., 1:] = dl
    dup[..., :-1] = du
    return dlp, d, dup


def gtsv2_call(shape: tuple[int, ...], dtype: Any) -> dict:
    """Which cuSPARSE routine solves systems of ``shape`` (``(n,)`` or ``(batch, n)``
    in :func:`gtsv2_layout`'s layout) and its integer arguments.

    Returns ``{"function", "buffer_function", "int_args"}``: ``int_args`` are the
    integers between the handle and the pointers (``m, n_rhs`` for ``gtsv2``:
    ``(dl, d, du, B, ldb)`` follow) or after the pointers (``batchCount,
    batchStride`` for ``gtsv2StridedBatch``).

    Examples
    --------
    >>> gtsv2_call((5,), np.float64)
    {'function': 'dgtsv2', 'buffer_function': 'dgtsv2_bufferSizeExt', 'int_args': (5, 1, 5)}
    >>> gtsv2_call((3, 8), np.float32)["int_args"]
    (8, 3, 8)
    """
    dt = np.dtype(dtype)
    if dt.char not in _PREFIX:
        raise TypeError(f"dtype must be float32, float64, complex64 or complex128, got {dt}")
    if len(shape) not in (1, 2):
        raise ValueError(f"shape must be (n,) or (batch, n), got {shape}")
    n = int(shape[-1])
    if n < 3:
        raise ValueError(f"cuSPARSE gtsv2 needs n >= 3 rows, got n = {n}")
    p = _PREFIX[dt.char]
    if len(shape) == 1:  # m = n, one right-hand side, ldb = m
        return {"function": f"{p}gtsv2", "buffer_function": f"{p}gtsv2_bufferSizeExt", "int_args": (n, 1, n)}
    # m = n, batchCount, batchStride = n (systems stored back to back)
    return {"function": f"{p}gtsv2StridedBatch", "buffer_function": f"{p}gtsv2StridedBatch_bufferSizeExt",
            "int_args": (n, int(shape[0]), n)}


def _solver(dlp: Any, d: Any, dup: Any, b: Any) -> Any:
    """A callable solving the device system (returns x; b is left alone) with its buffer allocated once."""
    import cupy as cp
    from cupy.cuda import device as cuda_device
    from cupy_backends.cuda.libs import cusparse

    spec = gtsv2_call(d.shape, d.dtype)
    fn, size_fn = getattr(cusparse, spec["function"]), getattr(cusparse, spec["buffer_function"])
    handle = cuda_device.get_cusparse_handle()
    x = b.copy()
    if d.ndim == 1:
        m, nrhs, ldb = spec["int_args"]
        ptrs = (dlp.data.ptr, d.data.ptr, dup.data.ptr)
        size = size_fn(handle, m, nrhs, *ptrs, x.data.ptr, ldb)
        buf = cp.empty(max(int(size), 1), dtype=cp.uint8)

        def solve():
            x[...] = b                      # gtsv2 overwrites its right-hand side
            fn(handle, m, nrhs, *ptrs, x.data.ptr, ldb, buf.data.ptr)
            return x
    else:
        m, count, stride = spec["int_args"]
        ptrs = (dlp.data.ptr, d.data.ptr, dup.data.ptr)
        size = size_fn(handle, m, *ptrs, x.data.ptr, count, stride)
        buf = cp.empty(max(int(size), 1), dtype=cp.uint8)

        def solve():
            x[...] = b
            fn(handle, m, *ptrs, x.data.ptr, count, stride, buf.data.ptr)
            return x
    return solve


def device_gtsv2(dl: Any, d: Any, du: Any, b: Any, *, warmup: int = 1, repeat: int = 3,
                 ours_s: float | None = None, **labels: Any) -> list[dict]:
    """Time cuSPARSE on host systems in LAPACK ``gtsv`` form (one row).

    One system (``d``: ``(n,)``) runs ``gtsv2`` (partial pivoting, as LAPACK's
    ``dgtsv``); a batch (``d``: ``(batch, n)``, batch leading) runs
    ``gtsv2StridedBatch`` (no pivoting: the diagonally dominant systems the
    notebook times).  The diagonals are padded to cuSPARSE's layout and copied
    to the device untimed; each timed call copies ``b`` into the solution
    buffer (cuSPARSE solves in place) and solves.  The row's ``max_rel_err``
    is the solution's scaled residual ``max|A x - b| / max|b|``.

    Returns
    -------
    list of dict
        One row (:meth:`workbench.bench.Timing.row` columns, ``role="peer"``,
        ``device``, ``max_rel_err``, ``skipped``); with NaN times and
        ``skipped`` saying why when there is no device or cupy.

    Examples
    --------
    >>> rows = device_gtsv2(np.ones(3), 4 * np.ones(4), np.ones(3), np.ones(4))   # doctest: +SKIP
    >>> rows[0]["name"], rows[0]["skipped"] is None          # on a GPU machine   # doctest: +SKIP
    ('cuSPARSE gtsv2 (1 GPU)', True)
    """
    d = np.asarray(d)
    spec = gtsv2_call(d.shape, d.dtype)            # bad shapes and dtypes fail here, device or not
    dlp, d, dup = gtsv2_layout(np.asarray(dl), d, np.asarray(du))
    b = np.asarray(b, dtype=d.dtype)
    if b.shape != d.shape:
        raise ValueError(f"b must have d's shape {d.shape}, got {b.shape}")
    name = f"cuSPARSE {spec['function'][1:]} (1 GPU)"
    why = missing() or memory_short(6 * d.nbytes)   # 3 diagonals, b, x and cuSPARSE's buffer
    if why is not None:
        return [unavailable_row(name, why, **labels)]
    try:
        row = _timed(name, dlp, d, dup, b, warmup, repeat, ours_s, labels)
    finally:
        release()   # after _timed returned: its device arrays are gone
    row["skipped"] = None
    return [row]


def _timed(name: str, dlp: np.ndarray, d: np.ndarray, dup: np.ndarray, b: np.ndarray, warmup: int, repeat: int,
           ours_s: float | None, labels: dict) -> dict:
    import cupy as cp

    gdl, gd, gdu, gb = (cp.asarray(a) for a in (dlp, d, dup, b))
    row, x = timed_row(name, _solver(gdl, gd, gdu, gb), warmup=warmup, repeat=repeat, ours_s=ours_s,
                       keep_value=True, **labels)
    ax = gd * x   # A x in cuSPARSE's layout: dl[i] x[i-1] + d[i] x[i] + du[i] x[i+1]
    ax[..., 1:] += gdl[..., 1:] * x[..., :-1]
    ax[..., :-1] += gdu[..., :-1] * x[..., 1:]
    row["max_rel_err"] = float(cp.abs(ax - gb).max() / max(float(cp.abs(gb).max()), 1e-300))
    return row
