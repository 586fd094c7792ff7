"""Worker-local kernels of the kNN rank bodies (numba; the numba.cuda twins in cuda.py take the same arguments).

Exact mode: the fused tile scan into running candidate lists and the exact
float64 fill of the survivors.  Approximate mode: the probe bounds, the
per-cell row scan, exact pair distances, the NN-descent join and the
candidate merge.  Plus the recall count of the public helper.
"""

from __future__ import annotations

import numba
import numpy as np

from .._intrinsics import _cttz


@numba.njit(cache=True, nogil=True)
def _insert(keys, ids, d2s, i, key, gid, dd) -> None:
    m = keys.shape[1]
    p = m - 1
    while p > 0 and keys[i, p - 1] > key:
        keys[i, p] = keys[i, p - 1]
        ids[i, p] = ids[i, p - 1]
        d2s[i, p] = d2s[i, p - 1]
        p -= 1
    keys[i, p] = key
    ids[i, p] = gid
    d2s[i, p] = dd


@numba.njit(cache=True, nogil=True)
def _sqdist64(A, i, B, j) -> float:
    s = 0.0
    for t in range(A.shape[1]):
        z = np.float64(A[i, t]) - np.float64(B[j, t])
        s += z * z
    return s


@numba.njit(cache=True, nogil=True)
def _scan_kernel(G, qn, yn, qg, yg, Qo, Yo, rk, ri, rd, ck, ci, cd, do_cols) -> None:
    # one pass over the GEMM tile: key = |q|^2 + |y|^2 - 2 q.y; a key below the
    # list's current worst enters with its exact distance left NaN (filled in
    # for the survivors by _fill_exact once the block is done).  Almost every
    # key is rejected, so each chunk of columns is first tested branch-free (the
    # loop vectorises); only chunks holding a key below a threshold are rescanned.
    nq, nc = G.shape
    m = rk.shape[1]
    # self pairs only occur when the id ranges overlap (diagonal tiles)
    check_self = nq > 0 and nc > 0 and qg.min() <= yg.max() and yg.min() <= qg.max()
    cthr = np.full(nc, -np.inf, dtype=np.float64)
    if do_cols:
        for j in range(nc):
            cthr[j] = ck[j, m - 1]
    ynd = np.empty(nc, dtype=np.float64)
    for j in range(nc):
        ynd[j] = yn[j]
    CH = 32
    for i in range(nq):
        thr = rk[i, m - 1]
        qni = np.float64(qn[i])
        gi = qg[i]
        Gi = G[i]
        for j0 in range(0, nc, CH):
            j1 = min(nc, j0 + CH)
            hits = 0
            for j in range(j0, j1):
                key = qni + ynd[j] - 2.0 * np.float64(Gi[j])
                lim = thr if thr > cthr[j] else cthr[j]
                hits += key < lim
            if hits == 0:
                continue
            for j in range(j0, j1):
                key = qni + ynd[j] - 2.0 * np.float64(Gi[j])
                if key < thr:
                    if check_self and yg[j] == gi:
                        continue
                    _insert(rk, ri, rd, i, key, yg[j], np.nan)
                    thr = rk[i, m - 1]
                if do_cols and key < cthr[j]:
                    if check_self and yg[j] == gi:
                        continue
                    _insert(ck, ci, cd, j, key, gi, np.nan)
                    cthr[j] = ck[j, m - 1]


@numba.njit(cache=True, nogil=True)
def _fill_exact_kernel(ri, rd, Qo, Yo, ylo):
    ny = Yo.shape[0]
    for i in range(ri.shape[0]):
        for t in range(ri.shape[1]):
            g = ri[i, t] - ylo
            if np.isnan(rd[i, t]) and 0 <= g < ny:
                rd[i, t] = _sqdist64(Qo, i, Yo, g)


@numba.njit(inline="always")
def _sift_in(vals, ids, r, pos, lo, key, ident):  # pragma: no cover - compiled
    # insert (key, ident) into row r's list ascending by (key, id): entries lo..pos-1 after it move up
    # one, the one at pos drops off (ties go by id, so the order does not depend on the visiting order)
    while pos > lo and (vals[r, pos - 1] > key or (vals[r, pos - 1] == key and ids[r, pos - 1] > ident)):
        vals[r, pos] = vals[r, pos - 1]
        ids[r, pos] = ids[r, pos - 1]
        pos -= 1
    vals[r, pos] = key
    ids[r, pos] = ident


@numba.njit(cache=True, nogil=True)
def _lane_minima(v, lane) -> None:
    # lane u's minimum over v[u], v[u + L], ... (elementwise across the lanes: vectorised)
    n, L = v.shape[0], lane.shape[0]
    lane[:] = np.inf
    for s in range(0, n - L + 1, L):
        vs = v[s:s + L]
        for u in range(L):
            lane[u] = vs[u] if vs[u] < lane[u] else lane[u]
    t0 = n - n % L
    for u in range(t0, n):
        lane[u - t0] = v[u] if v[u] < lane[u - t0] else lane[u - t0]


@numba.njit(cache=True, nogil=True)
def _smallest(lane, q):
    # the q-th smallest value of lane, ties counted: the largest with fewer than q values below it (branch-free)
    t = lane.dtype.type(-np.inf)
    for u in range(lane.shape[0]):
        x = lane[u]
        below = np.int32(0)
        for v in range(lane.shape[0]):
            below += np.int32(lane[v] < x)
        t = x if (below < q) & (x > t) else t
    return t


#: Lanes of _top_bounds's bound; at most this many kept cells are placed by counting, more by insertion.
_BOUND_LANES, _RANKED = 32, 64


@numba.njit(cache=True, nogil=True)
def _top_bounds(D, inv, probes, bounds):
    # per row of D (|c|^2 - 2 q.c): own cell a = argmin, then the q = p - 1 other
    # cells of smallest bisector bound (inv: 1 / (2 |a - c|)), ties by cell.
    # The q-th smallest of 32 lane minima (a left out) has q other cells at or
    # below it, so no cell above it is kept; the few at or below it (~20 of 158
    # here) are placed by counting the kept cells ahead of each in (bound, cell)
    # order.  The twin in cuda.py sifts every cell in: the same lists
    C = D.shape[1]
    p = probes.shape[1]
    q = p - 1
    lane = np.empty(_BOUND_LANES, dtype=np.float32)
    b = np.empty(C, dtype=np.float32)
    kept = np.empty(C, dtype=np.int64)
    kb = np.empty(C, dtype=np.float32)
    for i in range(D.shape[0]):
        Di = D[i]
        _lane_minima(Di, lane)
        m = lane.min()
        a = 0
        while Di[a] != m:               # the first column holding the row's minimum, as a scan finds it
            a += 1
        probes[i, 0] = a
        bounds[i, 0] = 0.0
        if q == 0:
            continue
        for c in range(C):
            b[c] = (Di[c] - Di[a]) * inv[a, c]
        b[a] = np.inf
        lim = np.float32(np.inf)
        if C >= _BOUND_LANES and q <= _BOUND_LANES:
            _lane_minima(b, lane)
            lim = _smallest(lane, q)
        nk = 0
        for c in range(C):
            kept[nk] = c
            kb[nk] = b[c]
            nk += (b[c] <= lim) & (c != a)
        if nk <= _RANKED:
            for e in range(nk):
                r = 0
                for f in range(nk):
                    r += (kb[f] < kb[e]) | ((kb[f] == kb[e]) & (f < e))
                if r < q:
                    bounds[i, 1 + r] = kb[e]
                    probes[i, 1 + r] = kept[e]
        else:
            size = 1
            for e in range(nk):
                if size == p and kb[e] >= bounds[i, p - 1]:
                    continue
                if size < p:
                    size += 1
                _sift_in(bounds, probes, i, size - 1, 1, kb[e], kept[e])


#: Lanes of _scan_rows's bound, and columns per chunk of its scan (one bit each in a uint64 mask).
_LANES = 64


@numba.njit(cache=True, nogil=True, fastmath={"contract", "reassoc"})    # not "ninf": thresholds start at inf
def _scan_rows(G, qn, yn, rows, qpos, y0, keys, ids):
    # GEMM tile of rows ``rows`` against Y rows y0, y0+1, ...: keys below the
    # row's current worst enter its sorted list.  Approximate mode ranks by
    # float32 keys (exact distances come after).  Each chunk of 64 columns is
    # first tested branch-free (vectorised) into a bit mask; only its set bits
    # are visited.  A row whose list is still empty (its own cell, the first
    # pass) would let almost every chunk through, so it first takes a bound
    # from the lanes' minima (see below) as its threshold.  The twin in cuda.py
    # visits every column: the same lists
    nq, nc = G.shape
    k = keys.shape[1]
    L = _LANES
    lane = np.empty(L, dtype=np.float64)
    for i in range(nq):
        r = rows[i]
        thr = keys[r, k - 1]
        qni = qn[r]
        Gi = G[i]
        if thr == np.inf and nc >= L and L > k:
            # lane l's minimum over columns l, l + 64, ... (vectorised): k + 1 lanes hold a key at or below
            # the (k+1)-th smallest minimum, at most one of them the self pair, so the list ends at or below
            # it, and a key whose float32 rounding lies above that bound's never ends in the list (nor
            # moves one that does): skipping those keys leaves the list as the full scan leaves it
            lane[:] = np.inf
            for b in range(nc // L):
                gs = Gi[b * L:(b + 1) * L]
                ys = yn[b * L:(b + 1) * L]
                for u in range(L):
                    x = qni + ys[u] - 2.0 * gs[u]
                    lane[u] = x if x < lane[u] else lane[u]
            thr = min(thr, np.nextafter(np.float32(_smallest(lane, k + 1)), np.float32(np.inf)))
        for j0 in range(0, nc, L):
            n = min(L, nc - j0)
            gs = Gi[j0:j0 + n]
            ys = yn[j0:j0 + n]
            mask = np.uint64(0)
            for u in range(n):
                mask |= np.uint64(qni + ys[u] - 2.0 * gs[u] < thr) << np.uint64(u)
            while mask:
                u = _cttz(mask)
                mask &= mask - np.uint64(1)
                key = qni + ys[u] - 2.0 * gs[u]
                if key < thr and y0 + j0 + u != qpos[r]:
                    _sift_in(keys, ids, r, k - 1, 0, key, y0 + j0 + u)
                    thr = min(thr, keys[r, k - 1])


@numba.njit(cache=True, nogil=True, fastmath=True)
def _pair_sqdist(X, Y, qi, yi, out):
    # exact float64 squared distances of the pairs (qi, yi) into out; fastmath
    # only reorders the sum (vectorised), an error of a few ulps
    for t in range(qi.shape[0]):
        s = 0.0
        for u in range(X.shape[1]):
            z = np.float64(X[qi[t], u]) - np.float64(Y[yi[t], u])
            s += z * z
        out[t] = s


@numba.njit(cache=True, nogil=True, fastmath=True)
def _sqdist32(A, i, B, j):
    # search distances only (candidates are re-measured exactly in float64):
    # fastmath lets the reduction vectorise
    s = np.float32(0.0)
    for t in range(A.shape[1]):
        z = A[i, t] - B[j, t]
        s += z * z
    return s


@numba.njit(cache=True, nogil=True)
def _local_join(X, Xc, ind, d2, off, order):
    # one NN-descent join on the local graph: every neighbour of a neighbour
    # (both on this rank) is a candidate, measured exactly in float64 and
    # merged in place; mends the lists where a point's neighbours lie outside
    # its probed cells (weakly clustered or uniform data)
    nl, k = ind.shape
    evals = 0
    stamp = np.full(nl, -1, dtype=np.int64)
    for ii in range(order.shape[0]):
        i = order[ii]                   # the rows to mend, cell by cell: the neighbourhoods stay in cache
        stamp[i] = i
        for t in range(k):
            g = ind[i, t] - off
            if 0 <= g < nl:
                stamp[g] = i
        for t in range(k):
            j = ind[i, t] - off
            if j < 0 or j >= nl:
                continue
            for u in range(k):
                l = ind[j, u] - off
                if l < 0 or l >= nl or stamp[l] == i:
                    continue
                stamp[l] = i
                evals += 1
                # float32 screen (vectorised); exact float64 only for the few that may enter
                if _sqdist32(Xc, i, Xc, l) > d2[i, k - 1] * (1.0 + 1e-4) + 1e-6:
                    continue
                dd = _sqdist64(X, i, X, l)
                if dd < d2[i, k - 1]:
                    _sift_in(d2, ind, i, k - 1, 0, dd, l + off)
    return evals


@numba.njit(cache=True, nogil=True)
def _merge_candidates(ind, d2, rows, cand, dist):
    # insert (row, candidate, exact d^2) into sorted lists, skipping ids already there
    k = ind.shape[1]
    for t in range(rows.shape[0]):
        i = rows[t]
        g = cand[t]
        dd = dist[t]
        if dd > d2[i, k - 1] or (dd == d2[i, k - 1] and g >= ind[i, k - 1] and ind[i, k - 1] >= 0):
            continue
        dup = False
        for u in range(k):
            if ind[i, u] == g:
                dup = True
                break
        if dup:
            continue
        _sift_in(d2, ind, i, k - 1, 0, dd, g)


@numba.njit(cache=True, nogil=True)
def _count_hits(a, e):
    hits = 0
    for i in range(e.shape[0]):
        for s in range(e.shape[1]):
            x = e[i, s]
            if x < 0:
                continue
            for t in range(a.shape[1]):
                if a[i, t] == x:
                    hits += 1
                    break
    return hits
