"""numba.cuda kernels of Ripley's K (the device twins of :mod:`.cpu`, same
names and arguments).

:func:`_sweep` gives each owned point of the tile one thread (grid-stride):
the thread finds its point's column, then scans the same candidates as the
CPU sweep (later points of its own column and the y-window of the ``reach``
columns to the right, both directions; the halo's y-windows in the ``reach``
columns either side, its own direction), with each window's start found by
binary search instead of the CPU's forward-moving pointers.  Pair weights go
to the histogram with float64 atomics, pair counts with int64 atomics, and a
recorded pair (``action`` 2) takes its slot with an atomic on ``counts[1]``,
so slots are in no particular order (their consumer only sums).  Float sums
are therefore in a different order than on the CPU: equal to 1e-10
relative, not bitwise; pair counts are exact.

This module imports ``numba.cuda``: import it only on the device path.
"""

from __future__ import annotations

import math

from numba import cuda

from .cpu import _iso_weight_of, _trans_weight_of, _tweight_of

# Inlined at numba IR level: a called device function is compiled for the current device's compute capability,
# which needs a GPU, while inlined ones let cuda.compile_ptx type-check the kernels on machines without one.
_iso_weight = cuda.jit(device=True, inline="always")(_iso_weight_of)
_trans_weight = cuda.jit(device=True, inline="always")(_trans_weight_of)
_tweight = cuda.jit(device=True, inline="always")(_tweight_of)

_F1 = "float64[::1]"
_I1 = "int64[::1]"
_F2 = "float64[:, ::1]"
#: Every argument-type combination the rank bodies launch each kernel with.
PTX_SIGNATURES = {
    "_sweep": [f"void({_F1}, {_F1}, {_F1}, {_I1}, {_I1}, {_I1}, {_F2}, {_F1}, {_F1}, {_F1}, {_I1}, {_I1}, {_F2}, "
               f"int64, float64, {_F1}, {_I1}, float64, {_F1}, int64, boolean, {_F1}, {_F1}, {_F2}, int64, "
               f"{_I1}, {_I1}, {_I1}, {_F1}, {_F1}, {_I1})"],
    "_hist_from_cache": [f"void({_I1}, {_I1}, {_I1}, {_F1}, {_F1}, {_F1}, {_F1}, {_F1}, {_F2})"],
}


@cuda.jit
def _sweep(ox, oy, ot, olim, ostart, opos, oang, hx, hy, ht, hstart, hpos, hang, reach, ywin, r2, lut, scale, tr,
           mode, has_t, win, twin, hist, action, ci, cj, ck, cwi, cwj, counts):  # pragma: no cover - device
    """One thread per owned point: its pairs with later owned points (both
    directions) and with the halo (its own direction), as :func:`.cpu._sweep`."""
    ncol = ostart.shape[0] - 1
    no = ox.shape[0]
    nlut = lut.shape[0]
    nh = hist.shape[0]
    r2max = r2[r2.shape[0] - 1]
    tmax = tr[tr.shape[0] - 1]
    x0 = win[0]
    x1 = win[1]
    y0 = win[2]
    y1 = win[3]
    for i in range(cuda.grid(1), no, cuda.gridsize(1)):
        # column of i: the last cx with ostart[cx] <= i (ostart[ncol] = no > i)
        lo = 0
        hi = ncol
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if ostart[mid] <= i:
                lo = mid
            else:
                hi = mid
        cx = lo
        xi = ox[i]
        yi = oy[i]
        li = olim[i]
        ti = ot[i] if has_t else 0.0
        ylo = yi - ywin
        yhi = yi + ywin
        # fast isotropic path: circles shorter than the distance to every edge are whole
        ei = min(min(xi - x0, x1 - xi), min(yi - y0, y1 - yi))
        pairs = 0
        seen = 0
        # segment 0: own column after i; 1..reach: owned columns to the right; then the halo's 2 reach + 1
        for seg in range(3 * reach + 2):
            halo = seg > reach
            if seg == 0:
                a = i + 1
                end = ostart[cx + 1]
            else:
                nx = cx + seg if not halo else cx - reach + (seg - reach - 1)
                if nx < 0 or nx >= ncol:
                    continue
                a = hstart[nx] if halo else ostart[nx]
                end = hstart[nx + 1] if halo else ostart[nx + 1]
                # the first candidate at or above ylo (each column is sorted by y)
                b = end
                while a < b:
                    mid = (a + b) // 2
                    if (hy[mid] if halo else oy[mid]) < ylo:
                        a = mid + 1
                    else:
                        b = mid
            both = not halo
            for j in range(a, end):
                xj = hx[j] if halo else ox[j]
                yj = hy[j] if halo else oy[j]
                if yj > yhi:
                    break
                dx = xj - xi
                dy = yj - yi
                d2 = dx * dx + dy * dy
                if d2 > r2max:
                    continue
                kt = 0
                dt = 0.0
                tj = 0.0
                if has_t:
                    tj = ht[j] if halo else ot[j]
                    dt = abs(tj - ti)
                    if dt > tmax:
                        continue
                    while tr[kt] < dt:
                        kt += 1
                # radius bin: the table's first candidate, then a short forward scan
                m = int(d2 * scale)
                if m >= nlut:
                    m = nlut - 1
                k = lut[m]
                while r2[k] < d2:
                    k += 1
                wi = 1.0
                wj = 1.0
                if mode == 2:
                    if d2 > ei * ei:
                        p = opos[i]
                        wi = _iso_weight(xi, yi, math.sqrt(d2), x0, x1, y0, y1, oang[p, 0], oang[p, 1], oang[p, 2],
                                         oang[p, 3], oang[p, 4], oang[p, 5], oang[p, 6], oang[p, 7])
                    if both:
                        ej = min(min(xj - x0, x1 - xj), min(yj - y0, y1 - yj))
                        if d2 > ej * ej:
                            p = opos[j]
                            wj = _iso_weight(xj, yj, math.sqrt(d2), x0, x1, y0, y1, oang[p, 0], oang[p, 1],
                                             oang[p, 2], oang[p, 3], oang[p, 4], oang[p, 5], oang[p, 6], oang[p, 7])
                elif mode == 1:
                    wi = _trans_weight(dx, dy, x1 - x0, y1 - y0)
                    wj = wi
                if action == 0:
                    if has_t:
                        wi *= _tweight(ti, dt, twin[0], twin[1])
                        if both:
                            wj *= _tweight(tj, dt, twin[0], twin[1])
                    # difference form: +w at the pair's bin, -w at the point's border limit
                    if li > k:
                        cuda.atomic.add(hist, (k, kt), wi)
                        if li < nh - 1:
                            cuda.atomic.add(hist, (li, kt), -wi)
                    if both:
                        lj = olim[j]
                        if lj > k:
                            cuda.atomic.add(hist, (k, kt), wj)
                            if lj < nh - 1:
                                cuda.atomic.add(hist, (lj, kt), -wj)
                elif action == 2:
                    slot = cuda.atomic.add(counts, 1, 1)
                    ci[slot] = i
                    cj[slot] = j + no if halo else j
                    ck[slot] = k
                    cwi[slot] = wi
                    cwj[slot] = wj if both else 0.0
                seen += 1
                pairs += 2 if both else 1
        cuda.atomic.add(counts, 0, pairs)
        if action != 2:
            cuda.atomic.add(counts, 1, seen)


@cuda.jit
def _hist_from_cache(pi, pj, kr, wij, wji, t, tr, twin, hist):  # pragma: no cover - device
    """Space-time histogram of cached spatial pairs under times ``t``, one
    pair per thread (grid-stride), as :func:`.cpu._hist_from_cache`."""
    tmax = tr[tr.shape[0] - 1]
    for m in range(cuda.grid(1), pi.shape[0], cuda.gridsize(1)):
        ti = t[pi[m]]
        tj = t[pj[m]]
        dt = abs(tj - ti)
        if dt > tmax:
            continue
        kt = 0
        while tr[kt] < dt:
            kt += 1
        cuda.atomic.add(hist, (kr[m], kt), wij[m] * _tweight(ti, dt, twin[0], twin[1]))
        if wji[m] != 0.0:
            cuda.atomic.add(hist, (kr[m], kt), wji[m] * _tweight(tj, dt, twin[0], twin[1]))
