"""FFT's worker-local CPU engines: FFTW (pyFFTW, with per-process wisdom) and
scipy.fft (pocketfft).  The device engine (cuFFT) is in :mod:`.cuda`."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ...backend import misalignment
from .plan import _Stage

#: Below this many elements per transform call FFTW_MEASURE costs more than it saves: its planning (0.1-2 s
#: per new shape, stride and alignment; seconds for non-power-of-two lengths) dwarfs the transforms a call
#: makes, so ESTIMATE plans win there even though they run slower.
#: Above it MEASURE plans run 3-5x faster than ESTIMATE ones (512^2 planes, strided axis-0 batches).
_MEASURE_MIN = 1 << 20


#: Worker-local FFT engine on CPU workers: "auto" (pyFFTW when installed, else scipy.fft) or "scipy".
_ENGINE = "auto"
_PLANNED: set = set()
_PLAN_LOCK = threading.Lock()


def _fft_into(a: Any, out: Any, st: _Stage) -> None:
    """Transform ``a`` along ``st.axes`` into ``out`` (``out`` may be ``a``), unnormalised."""
    if a.size == 0:
        return
    try:
        if _ENGINE == "scipy":
            raise ImportError
        import pyfftw
    except ImportError:
        _scipy_fft_into(a, out, st)
        return
    direction = "FFTW_FORWARD" if st.kind in ("fwd", "r2c") else "FFTW_BACKWARD"
    same = a is out or (a.__array_interface__["data"][0] == out.__array_interface__["data"][0]
                        and a.strides == out.strides)
    key = (a.shape, a.strides, a.dtype.str, out.shape, out.strides, out.dtype.str, st.axes, direction, same,
           misalignment(a), misalignment(out))
    flags = ("FFTW_DESTROY_INPUT",) if st.kind == "c2r" else ()
    if a.size >= _MEASURE_MIN and key not in _PLANNED:
        with _PLAN_LOCK:
            if key not in _PLANNED:
                # Measure on scratch arrays with the same strides and alignment; the wisdom FFTW keeps
                # makes the WISDOM_ONLY plan on the real arrays below instant and non-destructive.
                sa = _scratch_like(a)
                so = sa if same else _scratch_like(out)
                pyfftw.FFTW(sa, so, axes=st.axes, direction=direction, flags=("FFTW_MEASURE", *flags), threads=1)
                _PLANNED.add(key)
    plan = None
    if key in _PLANNED:
        try:
            plan = pyfftw.FFTW(a, out, axes=st.axes, direction=direction, flags=("FFTW_WISDOM_ONLY", *flags),
                               threads=1)
        except RuntimeError:
            plan = None
    if plan is None:
        plan = pyfftw.FFTW(a, out, axes=st.axes, direction=direction, flags=("FFTW_ESTIMATE", *flags), threads=1)
    plan.execute()


def _scratch_like(a: np.ndarray) -> np.ndarray:
    """A fresh array with ``a``'s shape, strides and address alignment (so FFTW wisdom carries over)."""
    import pyfftw

    span = sum((n - 1) * st for n, st in zip(a.shape, a.strides, strict=True)) + a.itemsize
    off = misalignment(a)
    base = pyfftw.empty_aligned(span + 64 + a.itemsize, dtype=np.uint8, n=64)
    flat = base[off:off + span + (-span) % a.itemsize].view(a.dtype)
    return np.lib.stride_tricks.as_strided(flat, shape=a.shape, strides=a.strides)


def _same_view(a: np.ndarray, b: np.ndarray) -> bool:
    return (a.__array_interface__["data"][0] == b.__array_interface__["data"][0] and a.shape == b.shape
            and a.strides == b.strides)


def _scipy_fft_into(a: np.ndarray, out: np.ndarray, st: _Stage) -> None:
    """scipy.fft (pocketfft, one thread per rank): complex transforms run in place in ``out``
    (``overwrite_x`` on a view computes into it), so no temporary the size of the chunk is allocated."""
    import scipy.fft as sf

    if st.kind in ("fwd", "bwd"):
        if not _same_view(a, out):
            out[...] = a
        f = sf.fftn if st.kind == "fwd" else sf.ifftn
        r = f(out, axes=st.axes, norm="backward" if st.kind == "fwd" else "forward", workers=1, overwrite_x=True)
        if not _same_view(r, out):
            out[...] = r
        return
    if st.kind == "r2c":
        r = sf.rfftn(a, axes=st.axes, workers=1)
    else:
        s = [a.shape[ax] for ax in st.axes[:-1]] + [st.n_out]
        r = sf.irfftn(a, s=s, axes=st.axes, norm="forward", workers=1, overwrite_x=True)
    out[...] = r
