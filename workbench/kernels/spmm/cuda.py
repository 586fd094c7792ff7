"""SpMM's device kernels (numba.cuda), twins of :mod:`.cpu` with the same arguments.

Imported only on the device path (GPU or simulated GPU workers), so
``import workbench`` never imports numba.cuda.  Local products whose operands
fit cuSPARSE go through cupyx instead (see ``ranks._multiply``); this row
kernel covers the rest: an aligned local B tile read in place through a
tile's direct column index (no gather of B's rows), mixed dtypes and int64
indices.
"""

from __future__ import annotations

from numba import cuda


@cuda.jit
def _spmm_nb(indptr, indices, data, B, C, accumulate, dist):  # pragma: no cover - compiled
    """``C (+)= A @ B`` for CSR A, one thread per element of C (grid-stride).

    Consecutive threads take consecutive columns of one row of C, so a warp
    reads a row of B coalesced and the row's nonzeros as broadcasts.  ``dist``
    (the CPU twin's prefetch distance) is unused: the warps in flight hide
    the latency instead.
    """
    m = indptr.shape[0] - 1
    K = C.shape[1]
    for e in range(cuda.grid(1), m * K, cuda.gridsize(1)):
        i = e // K
        t = e - i * K
        acc = C[i, t] if accumulate else C.dtype.type(0)
        for p in range(indptr[i], indptr[i + 1]):
            acc += data[p] * B[indices[p], t]
        C[i, t] = acc


_ROW = "void(int64[::1], {idx}[::1], {dt}[::1], {dt}[:, ::1], {dt}[:, ::1], boolean, int64)"

#: Every argument-type combination ``ranks._multiply`` launches with: int64 indptr, int32 indices (int64 when
#: B has 2**31 rows or more), A, B and C converted to C's dtype.
PTX_SIGNATURES = {
    "_spmm_nb": [_ROW.format(idx=idx, dt=dt) for idx in ("int32", "int64") for dt in ("float32", "float64")],
}
