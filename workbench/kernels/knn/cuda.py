"""Device twins of the kNN kernels (numba.cuda), launched by the rank bodies on "gpu" and "gpu-sim" workers.

Same names and argument lists as :mod:`.cpu` (outputs preallocated by the
caller); each kernel is a grid-stride loop whose thread owns whole rows of
its outputs, so no two threads write one list:

* :func:`_scan_kernel` -- the exact mode's scan of a GEMM tile (a block pair):
  threads ``0..nq-1`` each scan one row of the tile into that row's list,
  threads ``nq..nq+nc-1`` (when ``do_cols``) one column into that column's
  list.  Each list sees the same candidates in the same order as in the CPU
  twin, so the lists come out identical.
* :func:`_fill_exact_kernel` -- exact float64 distances of the kept candidates.
* :func:`_top_bounds`, :func:`_scan_rows`, :func:`_pair_sqdist`,
  :func:`_merge_candidates` -- the approximate mode's probe bounds, per-cell
  row scans, exact pair distances and candidate merges.  ``_merge_candidates``
  gives each run of equal ``rows`` to one thread: the caller passes rows
  grouped (equal rows adjacent), as ``np.nonzero`` and a stable sort give them.
* :func:`_local_join` -- the NN-descent join.  The CPU twin mends the lists
  in place row after row; here the join only reads the lists: one thread per
  row of ``order`` writes the row's candidates (neighbours of neighbours
  nearer than its k-th) into its own row of a candidate buffer, which
  ``_merge_candidates`` then inserts.  Its arguments are the CPU twin's, plus
  those outputs (the count it returns on the CPU comes back per row).

Keys are computed with the same operations and types as the CPU twins.  On a
GPU the compiler may fuse a multiply and an add in the exact float64 sums
(a rounding difference of an ulp); the keys' ``-2 q.y`` term is exact, so
fusing it changes nothing.  This module is imported only on the device path.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

_F = ("float32", "float64")
PTX_SIGNATURES = {
    # G/qn/yn in the GEMM dtype (float32, float64 in the certificate's fallback), points in the input dtype
    "_scan_kernel": [f"void({g}[:, ::1], {g}[::1], {g}[::1], int64[::1], int64[::1], {x}[:, ::1], {x}[:, ::1], "
                     "float64[:, ::1], int64[:, ::1], float64[:, ::1], float64[:, ::1], int64[:, ::1], "
                     "float64[:, ::1], boolean)" for g in _F for x in _F],
    "_fill_exact_kernel": [f"void(int64[:, ::1], float64[:, ::1], {x}[:, ::1], {x}[:, ::1], int64)" for x in _F],
    "_top_bounds": ["void(float32[:, ::1], float32[:, ::1], int64[:, ::1], float32[:, ::1])"],
    # float64 products for the spans too wide for float32 keys (ranks._cell_pass)
    "_scan_rows": [f"void({g}[:, ::1], {g}[::1], {g}[::1], int64[::1], int64[::1], int64, "
                   "float32[:, ::1], int64[:, ::1])" for g in _F],
    "_pair_sqdist": [f"void({x}[:, ::1], {x}[:, ::1], int64[::1], int64[::1], float64[::1])" for x in _F],
    "_merge_candidates": ["void(int64[:, ::1], float64[:, ::1], int64[::1], int64[::1], float64[::1])"],
    "_local_join": [f"void({x}[:, ::1], float32[:, ::1], int64[:, ::1], float64[:, ::1], int64, int64[::1], "
                    "int64[:, ::1], float64[:, ::1], int64[::1])" for x in _F],
}


@cuda.jit
def _scan_kernel(G, qn, yn, qg, yg, Qo, Yo, rk, ri, rd, ck, ci, cd, do_cols):  # pragma: no cover - device
    # key = |q|^2 + |y|^2 - 2 q.y; a key below the list's current worst enters, exact distance left NaN
    nq, nc = G.shape
    m = rk.shape[1]
    n = nq + nc if do_cols else nq
    for t in range(cuda.grid(1), n, cuda.gridsize(1)):
        if t < nq:
            i = t
            thr = rk[i, m - 1]
            qni = np.float64(qn[i])
            gi = qg[i]
            for j in range(nc):
                key = qni + np.float64(yn[j]) - 2.0 * np.float64(G[i, j])
                if key < thr and yg[j] != gi:
                    p = m - 1
                    while p > 0 and rk[i, p - 1] > key:
                        rk[i, p] = rk[i, p - 1]
                        ri[i, p] = ri[i, p - 1]
                        rd[i, p] = rd[i, p - 1]
                        p -= 1
                    rk[i, p] = key
                    ri[i, p] = yg[j]
                    rd[i, p] = np.nan
                    thr = rk[i, m - 1]
        else:
            j = t - nq
            thr = ck[j, m - 1]
            ynj = np.float64(yn[j])
            gj = yg[j]
            for i in range(nq):
                key = np.float64(qn[i]) + ynj - 2.0 * np.float64(G[i, j])
                if key < thr and qg[i] != gj:
                    p = m - 1
                    while p > 0 and ck[j, p - 1] > key:
                        ck[j, p] = ck[j, p - 1]
                        ci[j, p] = ci[j, p - 1]
                        cd[j, p] = cd[j, p - 1]
                        p -= 1
                    ck[j, p] = key
                    ci[j, p] = qg[i]
                    cd[j, p] = np.nan
                    thr = ck[j, m - 1]


@cuda.jit
def _fill_exact_kernel(ri, rd, Qo, Yo, ylo):  # pragma: no cover - device
    # one thread per list entry: exact float64 |q - y|^2 where the entry lacks it and its id is a row of Yo
    n, m = ri.shape
    ny = Yo.shape[0]
    for e in range(cuda.grid(1), n * m, cuda.gridsize(1)):
        i = e // m
        t = e - i * m
        g = ri[i, t] - ylo
        if rd[i, t] != rd[i, t] and 0 <= g < ny:     # NaN
            s = 0.0
            for u in range(Qo.shape[1]):
                z = np.float64(Qo[i, u]) - np.float64(Yo[g, u])
                s += z * z
            rd[i, t] = s


@cuda.jit
def _top_bounds(D, inv, probes, bounds):  # pragma: no cover - device
    # per row of D (|c|^2 - 2 q.c): own cell = argmin, then the p - 1 smallest bisector bounds, ties by cell id
    C = D.shape[1]
    p = probes.shape[1]
    for i in range(cuda.grid(1), D.shape[0], cuda.gridsize(1)):
        a = 0
        for c in range(1, C):
            if D[i, c] < D[i, a]:
                a = c
        probes[i, 0] = a
        bounds[i, 0] = 0.0
        size = 1
        for c in range(C):
            if c == a:
                continue
            b = (D[i, c] - D[i, a]) * inv[a, c]
            if size == p and b >= bounds[i, p - 1]:
                continue
            if size < p:
                size += 1
            pos = size - 1
            while pos > 1 and (bounds[i, pos - 1] > b or (bounds[i, pos - 1] == b and probes[i, pos - 1] > c)):
                bounds[i, pos] = bounds[i, pos - 1]
                probes[i, pos] = probes[i, pos - 1]
                pos -= 1
            bounds[i, pos] = b
            probes[i, pos] = c


@cuda.jit
def _scan_rows(G, qn, yn, rows, qpos, y0, keys, ids):  # pragma: no cover - device
    # row i of the GEMM tile belongs to list rows[i] (distinct rows): keys below its worst enter, ties by id
    nq, nc = G.shape
    k = keys.shape[1]
    for i in range(cuda.grid(1), nq, cuda.gridsize(1)):
        r = rows[i]
        thr = keys[r, k - 1]
        for j in range(nc):
            s = qn[r] + yn[j]                                       # float32, as in the CPU twin
            key = np.float64(s) - 2.0 * np.float64(G[i, j])
            if key < thr and y0 + j != qpos[r]:
                ident = y0 + j
                pos = k - 1
                while pos > 0 and (keys[r, pos - 1] > key or (keys[r, pos - 1] == key and ids[r, pos - 1] > ident)):
                    keys[r, pos] = keys[r, pos - 1]
                    ids[r, pos] = ids[r, pos - 1]
                    pos -= 1
                keys[r, pos] = key
                ids[r, pos] = ident
                thr = keys[r, k - 1]


@cuda.jit
def _pair_sqdist(X, Y, qi, yi, out):  # pragma: no cover - device
    # exact float64 squared distances of the pairs (qi, yi)
    for t in range(cuda.grid(1), qi.shape[0], cuda.gridsize(1)):
        s = 0.0
        for u in range(X.shape[1]):
            z = np.float64(X[qi[t], u]) - np.float64(Y[yi[t], u])
            s += z * z
        out[t] = s


@cuda.jit
def _merge_candidates(ind, d2, rows, cand, dist):  # pragma: no cover - device
    # (row, candidate, exact d^2) into sorted lists, skipping ids already there; a thread takes a run of equal rows
    k = ind.shape[1]
    n = rows.shape[0]
    for t0 in range(cuda.grid(1), n, cuda.gridsize(1)):
        if t0 > 0 and rows[t0 - 1] == rows[t0]:
            continue
        i = rows[t0]
        t = t0
        while t < n and rows[t] == i:
            g = cand[t]
            dd = dist[t]
            t += 1
            if dd > d2[i, k - 1] or (dd == d2[i, k - 1] and g >= ind[i, k - 1] and ind[i, k - 1] >= 0):
                continue
            dup = False
            for u in range(k):
                if ind[i, u] == g:
                    dup = True
                    break
            if dup:
                continue
            pos = k - 1
            while pos > 0 and (d2[i, pos - 1] > dd or (d2[i, pos - 1] == dd and ind[i, pos - 1] > g)):
                d2[i, pos] = d2[i, pos - 1]
                ind[i, pos] = ind[i, pos - 1]
                pos -= 1
            d2[i, pos] = dd
            ind[i, pos] = g


@cuda.jit
def _local_join(X, Xc, ind, d2, off, order, cand, dist, evals):  # pragma: no cover - device
    # thread t takes row i = order[t]: every neighbour l of a neighbour (both rows of this rank, l not i and not
    # in i's list) passes a float32 screen, then its exact float64 d^2 against i's k-th (as the lists were at
    # launch); the nearer ones go to cand[t]/dist[t] in the order found, each once, the rest of the row -1.
    # evals[t]: the candidates screened.  No list is written here, so no thread reads a row another writes
    nl, k = ind.shape
    S = cand.shape[1]
    for t in range(cuda.grid(1), order.shape[0], cuda.gridsize(1)):
        i = order[t]
        thr = d2[i, k - 1]
        lim = thr * (1.0 + 1e-4) + 1e-6
        cnt = 0
        ev = 0
        for a in range(k):
            j = ind[i, a] - off
            if j < 0 or j >= nl:
                continue
            for u in range(k):
                g = ind[j, u]
                l = g - off
                if l < 0 or l >= nl or l == i:
                    continue
                seen = False
                for v in range(k):
                    if ind[i, v] == g:
                        seen = True
                        break
                for v in range(cnt):
                    if cand[t, v] == g:
                        seen = True
                        break
                if seen:
                    continue
                ev += 1
                # float32 screen; exact float64 only for the few that may enter
                s32 = np.float32(0.0)
                for w in range(Xc.shape[1]):
                    z = Xc[i, w] - Xc[l, w]
                    s32 += z * z
                if s32 > lim:
                    continue
                s = 0.0
                for w in range(X.shape[1]):
                    z64 = np.float64(X[i, w]) - np.float64(X[l, w])
                    s += z64 * z64
                if s < thr:
                    cand[t, cnt] = g
                    dist[t, cnt] = s
                    cnt += 1
        for v in range(cnt, S):
            cand[t, v] = -1
        evals[t] = ev
