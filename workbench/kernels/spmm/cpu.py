"""SpMM's local CPU kernels (numba): the CSR x dense row kernel with software
prefetch of B's rows (and its fixed-width variants), the column-range tile
splitter, the row gather and the finiteness scan.  Their numba.cuda twins live in
:mod:`.cuda`."""

from __future__ import annotations

import numba
import numpy as np

from .._intrinsics import _prefetch, _row_buffer


@numba.njit(cache=True, nogil=True)
def _finite_nb(v):  # pragma: no cover - compiled
    for x in v:
        if not np.isfinite(x):
            return False
    return True


@numba.njit(cache=True, nogil=True)
def _split_tiles_nb(indptr, indices, data, koffs, out_idx, out_val):  # pragma: no cover - compiled
    m = indptr.size - 1
    T = koffs.size - 1
    n = koffs[T]
    mark = np.zeros(n, np.uint8)
    counts = np.zeros((T, m + 1), np.int64)
    tile = np.empty(indices.size, np.int32)
    for i in range(m):
        for p in range(indptr[i], indptr[i + 1]):
            c = indices[p]
            t = 0
            while c >= koffs[t + 1]:  # T is the worker count: a scan beats a bisection
                t += 1
            tile[p] = t
            counts[t, i + 1] += 1
            mark[c] = 1
    pos = np.empty(n, np.int64)
    nrows = np.zeros(T + 1, np.int64)
    for t in range(T):
        q = 0
        for c in range(koffs[t], koffs[t + 1]):
            if mark[c]:
                pos[c] = q
                q += 1
        nrows[t + 1] = nrows[t] + q
    rows = np.empty(nrows[T], np.int64)
    for t in range(T):
        q = nrows[t]
        for c in range(koffs[t], koffs[t + 1]):
            if mark[c]:
                rows[q] = c - koffs[t]
                q += 1
    starts = np.zeros(T + 1, np.int64)
    for t in range(T):
        for i in range(m):
            counts[t, i + 1] += counts[t, i]
        starts[t + 1] = starts[t] + counts[t, m]
    fill = np.empty((T, m), np.int64)
    for t in range(T):
        for i in range(m):
            fill[t, i] = starts[t] + counts[t, i]
    for i in range(m):
        for p in range(indptr[i], indptr[i + 1]):
            t = tile[p]
            q = fill[t, i]
            fill[t, i] = q + 1
            out_idx[q] = pos[indices[p]]
            out_val[q] = data[p]
    return counts, starts, nrows, rows


@numba.njit(cache=True, nogil=True)
def _take_rows_nb(src, rows, out):  # pragma: no cover - compiled
    K = src.shape[1]
    for i in range(rows.size):
        r = rows[i]
        for t in range(K):
            out[i, t] = src[r, t]


def _prefetch_distance(k: int, itemsize: int) -> int:
    """How many nonzeros ahead the CPU kernel prefetches B's rows: about 8 KiB of them, 8 to 32 rows.

    B is read at random, a row per nonzero, and the hardware prefetcher cannot guess the next row.  One core,
    half of R-MAT SCALE 20, float64, 16 rows ahead at every k (the old rule) against this: k = 16 178 -> 163 ms
    (32 rows), k = 64 359 ms either way (16), k = 128 723 -> 650 ms (8); further ahead was slower again
    (k = 8: 146 ms at 32 rows, 204 ms at 64).
    """
    return max(8, min(32, 8192 // max(1, k * itemsize)))


@numba.njit(inline="always")
def _spmm_body(indptr, indices, data, B, C, accumulate, dist, K):  # pragma: no cover - compiled
    """``C (+)= A @ B`` for CSR A: a row loop, B's rows prefetched ``dist``
    nonzeros ahead, the K loop innermost over contiguous rows (SIMD) into a
    row accumulator that is written to C once."""
    m = indptr.size - 1
    nnz = indptr[m]
    line = max(1, 64 // B.itemsize)  # elements per cache line
    lines = (K + line - 1) // line   # (the prefetch loop counting its own trips cost a division per nonzero)
    # on the stack for a compile-time K, where LLVM keeps it in registers instead of loading and storing it
    # around every FMA (one core, half of R-MAT SCALE 20, interleaved with the heap row: k = 8 0.186 -> 0.155 s,
    # k = 16 0.257 -> 0.216 s, k = 64 0.521 -> 0.499 s)
    acc = _row_buffer(K, C.dtype)
    for i in range(m):
        if accumulate:
            for t in range(K):
                acc[t] = C[i, t]
        else:
            for t in range(K):
                acc[t] = 0
        for p in range(indptr[i], indptr[i + 1]):
            q = p + dist
            if q < nnz:
                rq = indices[q]
                for u in range(lines):
                    _prefetch(B, rq, u * line)
            c = indices[p]
            v = data[p]
            for t in range(K):
                acc[t] += v * B[c, t]
        for t in range(K):
            C[i, t] = acc[t]


@numba.njit(cache=True, nogil=True, fastmath={"contract"})
def _spmm_nb(indptr, indices, data, B, C, accumulate, dist):  # pragma: no cover - compiled
    _spmm_body(indptr, indices, data, B, C, accumulate, dist, C.shape[1])


# The same kernel with k a compile-time constant (inlined): the k loop unrolls
# fully and the accumulator's size is known -- markedly faster at these widths.
# Below 16 the runtime-k loop ran all in its scalar remainder (one core, R-MAT
# SCALE 18: k = 4 0.039 -> 0.017 s, k = 8 0.060 -> 0.043 s; scipy 0.029, 0.049).
@numba.njit(cache=True, nogil=True, fastmath={"contract"})
def _spmm_k1(indptr, indices, data, B, C, accumulate, dist):  # pragma: no cover - compiled
    _spmm_body(indptr, indices, data, B, C, accumulate, dist, 1)


@numba.njit(cache=True, nogil=True, fastmath={"contract"})
def _spmm_k2(indptr, indices, data, B, C, accumulate, dist):  # pragma: no cover - compiled
    _spmm_body(indptr, indices, data, B, C, accumulate, dist, 2)


@numba.njit(cache=True, nogil=True, fastmath={"contract"})
def _spmm_k4(indptr, indices, data, B, C, accumulate, dist):  # pragma: no cover - compiled
    _spmm_body(indptr, indices, data, B, C, accumulate, dist, 4)


@numba.njit(cache=True, nogil=True, fastmath={"contract"})
def _spmm_k8(indptr, indices, data, B, C, accumulate, dist):  # pragma: no cover - compiled
    _spmm_body(indptr, indices, data, B, C, accumulate, dist, 8)


@numba.njit(cache=True, nogil=True, fastmath={"contract"})
def _spmm_k16(indptr, indices, data, B, C, accumulate, dist):  # pragma: no cover - compiled
    _spmm_body(indptr, indices, data, B, C, accumulate, dist, 16)


@numba.njit(cache=True, nogil=True, fastmath={"contract"})
def _spmm_k32(indptr, indices, data, B, C, accumulate, dist):  # pragma: no cover - compiled
    _spmm_body(indptr, indices, data, B, C, accumulate, dist, 32)


@numba.njit(cache=True, nogil=True, fastmath={"contract"})
def _spmm_k64(indptr, indices, data, B, C, accumulate, dist):  # pragma: no cover - compiled
    _spmm_body(indptr, indices, data, B, C, accumulate, dist, 64)


@numba.njit(cache=True, nogil=True, fastmath={"contract"})
def _spmm_k128(indptr, indices, data, B, C, accumulate, dist):  # pragma: no cover - compiled
    _spmm_body(indptr, indices, data, B, C, accumulate, dist, 128)


_FIXED_K = {1: _spmm_k1, 2: _spmm_k2, 4: _spmm_k4, 8: _spmm_k8, 16: _spmm_k16, 32: _spmm_k32, 64: _spmm_k64,
            128: _spmm_k128}
