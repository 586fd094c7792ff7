"""SpMM peer on the device: cupyx's CSR @ dense (cuSPARSE's generic SpMM) on one
GPU, on the same matrices as :func:`workbench.spmm` (notebook 05).

Examples
--------
>>> import scipy.sparse as sp
>>> rows = device_spmm(sp.identity(4, format="csr"), np.ones((4, 2)), matrix="I4")   # doctest: +SKIP
>>> rows[0]["name"]                                                                   # doctest: +SKIP
'cupyx CSR @ dense (1 GPU)'
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from ._device import memory_short, missing, release, timed_row, unavailable_row

__all__ = ["spmm_device_bytes", "device_spmm"]

NAME = "cupyx CSR @ dense (1 GPU)"


def spmm_device_bytes(A: Any, k: int) -> int:
    """Device bytes of CSR ``A`` (values, int32 indices, row pointers), its dense
    ``(m, k)`` operand and the ``(n, k)`` product, all float64.

    Examples
    --------
    >>> spmm_device_bytes(sp.identity(10, format="csr"), 2)
    484
    """
    n, m = A.shape
    return int(A.nnz * (8 + 4) + (n + 1) * 4 + (m + n) * k * 8)


def device_spmm(A: Any, B: Any, *, warmup: int = 1, repeat: int = 3, ours_s: float | None = None,
                check_rows: int = 256, **labels: Any) -> list[dict]:
    """Time ``cupyx.scipy.sparse.csr_matrix(A) @ B`` on the device (one row).

    ``A`` (host sparse, ``(n, m)``) and ``B`` (host dense, ``(m, k)``) go to
    the device untimed, ``B`` in Fortran order (cupyx would convert a
    C-ordered ``B`` on every call).  ``max_rel_err`` compares the product's
    first ``check_rows`` rows with scipy's.

    Returns
    -------
    list of dict
        One row (:meth:`workbench.bench.Timing.row` columns, ``role="peer"``,
        ``device``, ``max_rel_err``, ``skipped``); NaN times and ``skipped``
        saying why when there is no device or cupy.
    """
    A = sp.csr_matrix(A)
    B = np.asarray(B)
    if B.ndim != 2 or B.shape[0] != A.shape[1]:
        raise ValueError(f"B must be ({A.shape[1]}, k) to multiply A {A.shape}, got shape {B.shape}")
    why = missing() or memory_short(spmm_device_bytes(A, B.shape[1]))
    if why is not None:
        return [unavailable_row(NAME, why, **labels)]
    try:
        row = _timed(A, B, warmup, repeat, ours_s, check_rows, labels)
    finally:
        release()   # after _timed returned: its device arrays are gone
    row["skipped"] = None
    return [row]


def _timed(A: sp.csr_matrix, B: np.ndarray, warmup: int, repeat: int, ours_s: float | None, check_rows: int,
           labels: dict) -> dict:
    import cupy as cp
    import cupyx.scipy.sparse as csp

    Ad = csp.csr_matrix(A.astype(np.float64))
    Bd = cp.asfortranarray(cp.asarray(B, dtype=cp.float64))
    row, C = timed_row(NAME, lambda: Ad @ Bd, warmup=warmup, repeat=repeat, ours_s=ours_s, keep_value=True,
                       **labels)
    r = min(int(check_rows), A.shape[0])
    ref = A[:r] @ B
    got = cp.asnumpy(C[:r])
    row["max_rel_err"] = float(np.abs(got - ref).max() / max(float(np.abs(ref).max()), 1e-300)) if r else 0.0
    return row
