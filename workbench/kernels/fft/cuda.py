"""FFT's device kernels: cuFFT (through cupy) for the local transforms and a
numba.cuda kernel for the pack/unpack of the transposes.

Imported only on the device path (GPU or simulated GPU workers), so
``import workbench`` never imports numba.cuda.  A transpose moves boxes that
are cut along two axes at once (the axis becoming whole and the axis being
split); :func:`box5` views any C-contiguous array as 5-D so that one kernel
copies (and scales) every such box: into a send buffer (pack), from a
received piece into place (unpack), and the rank's own block.
"""

from __future__ import annotations

import math
from typing import Any

from numba import cuda

from .plan import _Stage


@cuda.jit
def _copy_box(src, dst, s1, s3, d1, d3, n1, n3, scale):  # pragma: no cover - compiled
    """``dst[a, d1 + j, b, d3 + k, c] = scale * src[a, s1 + j, b, s3 + k, c]`` for the
    ``(A, n1, B, n3, C)`` box (A, B, C: ``dst``'s extents), grid-stride, the last axis fastest."""
    nb = dst.shape[2]
    nc = dst.shape[4]
    total = dst.shape[0] * n1 * nb * n3 * nc
    for e in range(cuda.grid(1), total, cuda.gridsize(1)):
        c = e % nc
        r = e // nc
        k = r % n3
        r = r // n3
        b = r % nb
        r = r // nb
        j = r % n1
        a = r // n1
        if scale == 1.0:
            dst[a, d1 + j, b, d3 + k, c] = src[a, s1 + j, b, s3 + k, c]
        else:
            dst[a, d1 + j, b, d3 + k, c] = src[a, s1 + j, b, s3 + k, c] * scale


_BOX = "void({dt}[:, :, :, :, ::1], {dt}[:, :, :, :, ::1], int64, int64, int64, int64, int64, int64, float64)"

#: Every argument-type combination the transposes launch with: complex stages, and real arrays where a
#: transpose comes before any FFT (r2c/c2r work in float32/float64).
PTX_SIGNATURES = {
    "_copy_box": [_BOX.format(dt=dt) for dt in ("complex128", "complex64", "float64", "float32")],
}


def box5(a: Any, p: int, q: int) -> Any:
    """``a`` (C-contiguous) as 5-D: the axes before ``p``, axis ``p``, those between, axis ``q``, those after."""
    s = a.shape
    return a.reshape(math.prod(s[:p]), s[p], math.prod(s[p + 1:q]), s[q], math.prod(s[q + 1:]))


def _cupy_fft_into(a: Any, out: Any, st: _Stage) -> None:
    import cupy as cp
    import cupyx.scipy.fft as cf

    # a chunk of a transposing stage is a strided view: cuFFT gets it contiguous (cupy copies one anyway),
    # ruling strides out of the CUFFT_EXEC_FAILED the first device run met on such stages (cause not found)
    a = cp.ascontiguousarray(a)
    if st.kind == "fwd":
        r = cf.fftn(a, axes=st.axes)
    elif st.kind == "bwd":
        r = cf.ifftn(a, axes=st.axes, norm="forward")
    elif st.kind == "r2c":
        r = cf.rfftn(a, axes=st.axes)
    else:
        s = [a.shape[ax] for ax in st.axes[:-1]] + [st.n_out]
        r = cf.irfftn(a, s=s, axes=st.axes, norm="forward")
    out[...] = r
