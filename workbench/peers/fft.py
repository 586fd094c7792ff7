"""FFT peer on the device: ``cupy.fft.fftn`` (cuFFT) of the whole array on one
GPU, on the same array as :func:`workbench.fftn` (notebook 07).

Examples
--------
>>> rows = device_fftn(np.zeros((8, 8, 8), complex), n=8)   # doctest: +SKIP
>>> rows[0]["name"]                                           # doctest: +SKIP
'cupy.fft.fftn (1 GPU)'
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import to_host
from ._device import memory_short, missing, release, timed_row, unavailable_row

__all__ = ["fft_device_bytes", "device_fftn"]

NAME = "cupy.fft.fftn (1 GPU)"


def fft_device_bytes(shape: tuple[int, ...], itemsize: int = 16) -> int:
    """Device bytes a complex ``fftn`` of ``shape`` needs: input, output and a
    cuFFT work area of the array's size (cuFFT's multi-dimensional plans need up
    to one more copy).

    Examples
    --------
    >>> fft_device_bytes((4, 4, 4))
    3072
    """
    return 3 * int(np.prod(shape)) * int(itemsize)


def device_fftn(x: Any, *, warmup: int = 1, repeat: int = 3, ours_s: float | None = None,
                **labels: Any) -> list[dict]:
    """Time ``cupy.fft.fftn`` of host array ``x`` (complex) on the device (one row).

    The array goes to the device untimed; the warm-up call builds and caches
    cuFFT's plan (as pyFFTW's planning is excluded).  ``max_rel_err`` compares
    the result with ``numpy.fft.fftn`` for arrays up to 2^21 elements (NaN
    above: the host transform would dominate the run).

    Returns
    -------
    list of dict
        One row (:meth:`workbench.bench.Timing.row` columns, ``role="peer"``,
        ``device``, ``max_rel_err``, ``skipped``); NaN times and ``skipped``
        saying why when there is no device or cupy.
    """
    x = to_host(x)
    x = np.asarray(x)
    if x.dtype.kind != "c":
        x = x.astype(np.complex128)
    why = missing() or memory_short(fft_device_bytes(x.shape, x.dtype.itemsize))
    if why is not None:
        return [unavailable_row(NAME, why, **labels)]
    try:
        row = _timed(x, warmup, repeat, ours_s, labels)
    finally:
        release()   # after _timed returned: its device arrays are gone
    row["skipped"] = None
    return [row]


def _timed(x: np.ndarray, warmup: int, repeat: int, ours_s: float | None, labels: dict) -> dict:
    import cupy as cp

    xd = cp.asarray(x)
    row, y = timed_row(NAME, lambda: cp.fft.fftn(xd), warmup=warmup, repeat=repeat, ours_s=ours_s,
                       keep_value=True, **labels)
    err = np.nan
    if x.size <= 1 << 21:
        ref = np.fft.fftn(x)
        err = float(np.abs(cp.asnumpy(y) - ref).max() / max(float(np.abs(ref).max()), 1e-300))
    row["max_rel_err"] = err
    return row
