"""numba kernels of Ripley's K (the CPU twins of :mod:`.cuda`): edge and time
weights, radius bins and the per-tile column sweep that fills the weighted
pair histogram.

The weights are plain scalar formulas (``*_of``), compiled here with
``numba.njit`` and in :mod:`.cuda` as device functions, so both back ends
evaluate the same expressions."""

from __future__ import annotations

import math

import numba
import numpy as np

#: spatstat's default ``maxedgewt``: edge weights are trimmed to this value.
MAX_WEIGHT = 100.0


# ---- scalar weight formulas, shared with the device twins -------------------


def _iso_weight_of(x: float, y: float, d: float, x0: float, x1: float, y0: float, y1: float, bLU: float,
                   bLD: float, bRU: float, bRD: float, bUL: float, bUR: float, bDL: float, bDR: float) -> float:
    """Ripley's isotropic weight for a circle of radius d at (x, y) in the
    rectangle (x0, x1, y0, y1): spatstat edge.Ripley's closed form
    (ripleybox), given the point's corner angles (a row of
    :func:`~.ranks._edge_angles`' table)."""
    dL = x - x0
    dR = x1 - x
    dD = y - y0
    dU = y1 - y
    if d <= dL and d <= dR and d <= dD and d <= dU:
        return 1.0
    aL = math.acos(dL / d) if dL < d else 0.0
    aR = math.acos(dR / d) if dR < d else 0.0
    aD = math.acos(dD / d) if dD < d else 0.0
    aU = math.acos(dU / d) if dU < d else 0.0
    cL = min(aL, bLU) + min(aL, bLD)
    cR = min(aR, bRU) + min(aR, bRD)
    cU = min(aU, bUL) + min(aU, bUR)
    cD = min(aD, bDL) + min(aD, bDR)
    ext = (cL + cR + cU + cD) / (2.0 * math.pi)
    eps = 1e-12 * max(x1 - x0, y1 - y0)
    ncor = (abs(dL) < eps) + (abs(dR) < eps) + (abs(dD) < eps) + (abs(dU) < eps)
    if ncor >= 2:
        ext += 0.25
    if ext >= 1.0 - 1.0 / MAX_WEIGHT:
        return MAX_WEIGHT
    return 1.0 / (1.0 - ext)


def _trans_weight_of(dx: float, dy: float, w: float, h: float) -> float:
    """Translation weight ``w h / ((w - |dx|)(h - |dy|))``, capped at 100."""
    den = (w - abs(dx)) * (h - abs(dy))
    if den * 100.0 <= w * h:
        return 100.0
    return w * h / den


def _tweight_of(ti: float, dt: float, t0: float, t1: float) -> float:
    """Space-time edge weight of the lag dt at time ti: 1 inside [t0, t1], else 2."""
    return 1.0 if (ti - dt >= t0 and ti + dt <= t1) else 2.0


# ---- numba kernels (CPU) ------------------------------------------------------
# The entry kernels release the GIL so the worker keeps heartbeating while a rank counts.

_iso_weight_s = numba.njit(cache=True)(_iso_weight_of)
_trans_weight = numba.njit(cache=True)(_trans_weight_of)
_tweight = numba.njit(cache=True)(_tweight_of)


@numba.njit(cache=True)
def _iso_weight(x: float, y: float, d: float, win: np.ndarray, ang: np.ndarray, p: int) -> float:
    """:func:`_iso_weight_of` with the corner angles of row ``p`` of ``ang``."""
    return _iso_weight_s(x, y, d, win[0], win[1], win[2], win[3], ang[p, 0], ang[p, 1], ang[p, 2], ang[p, 3],
                         ang[p, 4], ang[p, 5], ang[p, 6], ang[p, 7])


@numba.njit(cache=True)
def _rbin(d2: float, r2: np.ndarray, lut: np.ndarray, scale: float) -> int:
    m = int(d2 * scale)
    if m >= lut.shape[0]:
        m = lut.shape[0] - 1
    k = lut[m]
    while r2[k] < d2:
        k += 1
    return k


@numba.njit(cache=True)
def _tbin(dt: float, tr: np.ndarray) -> int:
    k = 0
    while tr[k] < dt:
        k += 1
    return k


@numba.njit(cache=True)
def _add(hist: np.ndarray, k: int, kt: int, lim: int, w: float) -> None:
    if lim > k:
        hist[k, kt] += w
        if lim < hist.shape[0] - 1:
            hist[lim, kt] -= w


@numba.njit(cache=True)
def _visit(i, xi, yi, ti, li, iang, ip, xs, ys, ts, lims, pos, ang, a, b, both, jbase, r2, lut, scale, tr, mode,
           has_t, win, twin, hist, action, ci, cj, ck, cwi, cwj, m):  # pragma: no cover - compiled
    """Pairs (i, j) for j in [a, b) of one column: weights, bins and the
    histogram (action 0), or count (1) / record (2) the spatial pairs."""
    r2max = r2[r2.shape[0] - 1]
    tmax = tr[tr.shape[0] - 1]
    # fast isotropic path: circles shorter than the distance to every edge are whole
    ei = min(min(xi - win[0], win[1] - xi), min(yi - win[2], win[3] - yi))
    pairs = 0
    for j in range(a, b):
        dx = xs[j] - xi
        dy = ys[j] - yi
        d2 = dx * dx + dy * dy
        if d2 > r2max:
            continue
        kt = 0
        dt = 0.0
        if has_t:
            dt = abs(ts[j] - ti)
            if dt > tmax:
                continue
            kt = _tbin(dt, tr)
        k = _rbin(d2, r2, lut, scale)
        if mode == 2:
            wi = 1.0
            wj = 1.0
            if d2 > ei * ei:
                wi = _iso_weight(xi, yi, math.sqrt(d2), win, iang, ip)
            if both:
                xj, yj = xs[j], ys[j]
                ej = min(min(xj - win[0], win[1] - xj), min(yj - win[2], win[3] - yj))
                if d2 > ej * ej:
                    wj = _iso_weight(xj, yj, math.sqrt(d2), win, ang, pos[j])
        elif mode == 1:
            wi = _trans_weight(dx, dy, win[1] - win[0], win[3] - win[2])
            wj = wi
        else:
            wi = 1.0
            wj = 1.0
        if action == 0:
            if has_t:
                wi *= _tweight(ti, dt, twin[0], twin[1])
                if both:
                    wj *= _tweight(ts[j], dt, twin[0], twin[1])
            _add(hist, k, kt, li, wi)
            if both:
                _add(hist, k, kt, lims[j], wj)
        elif action == 2:
            ci[m[0]] = i
            cj[m[0]] = jbase + j
            ck[m[0]] = k
            cwi[m[0]] = wi
            cwj[m[0]] = wj if both else 0.0
        m[0] += 1
        pairs += 2 if both else 1
    return pairs


@numba.njit(cache=True)
def _advance(ys, lo, hi, end, ylo, yhi):  # pragma: no cover - compiled
    while lo < end and ys[lo] < ylo:
        lo += 1
    if hi < lo:
        hi = lo
    while hi < end and ys[hi] <= yhi:
        hi += 1
    return lo, hi


@numba.njit(cache=True, nogil=True)
def _sweep(ox, oy, ot, olim, ostart, opos, oang, hx, hy, ht, hstart, hpos, hang, reach, ywin, r2, lut, scale, tr,
           mode, has_t, win, twin, hist, action, ci, cj, ck, cwi, cwj, counts):  # pragma: no cover - compiled
    """Column sweep: owned points against later owned points (own column,
    then the ``reach`` columns to the right; each unordered pair once, both
    directions) and against the halo (``reach`` columns either side, this
    side's direction only).  Per column, y-window pointers only move forward.
    Adds to ``hist`` (action 0) or records the spatial pairs (action 2) from
    slot ``counts[1]`` on; adds the ordered pairs to ``counts[0]`` and the
    spatial pairs to ``counts[1]`` (``counts`` zeroed by the caller)."""
    ncol = ostart.shape[0] - 1
    no = ox.shape[0]
    olo = np.empty(reach + 1, np.int64)
    ohi = np.empty(reach + 1, np.int64)
    hlo = np.empty(2 * reach + 1, np.int64)
    hhi = np.empty(2 * reach + 1, np.int64)
    m = counts[1:]  # the next record slot
    total = 0
    for cx in range(ncol):
        for s in range(reach + 1):
            nx = min(cx + s, ncol - 1)
            olo[s] = ostart[nx]
            ohi[s] = ostart[nx]
        for s in range(2 * reach + 1):
            nx = min(max(cx - reach + s, 0), ncol - 1)
            hlo[s] = hstart[nx]
            hhi[s] = hstart[nx]
        end_c = ostart[cx + 1]
        for i in range(ostart[cx], end_c):
            xi, yi, li = ox[i], oy[i], olim[i]
            ti = ot[i] if has_t else 0.0
            ylo, yhi = yi - ywin, yi + ywin
            b = i + 1
            while b < end_c and oy[b] <= yhi:
                b += 1
            ip = opos[i]
            total += _visit(i, xi, yi, ti, li, oang, ip, ox, oy, ot, olim, opos, oang, i + 1, b, True, 0, r2, lut,
                            scale, tr, mode, has_t, win, twin, hist, action, ci, cj, ck, cwi, cwj, m)
            for s in range(1, reach + 1):
                nx = cx + s
                if nx >= ncol:
                    break
                olo[s], ohi[s] = _advance(oy, olo[s], ohi[s], ostart[nx + 1], ylo, yhi)
                total += _visit(i, xi, yi, ti, li, oang, ip, ox, oy, ot, olim, opos, oang, olo[s], ohi[s], True, 0,
                                r2, lut, scale, tr, mode, has_t, win, twin, hist, action, ci, cj, ck, cwi, cwj, m)
            for s in range(2 * reach + 1):
                nx = cx - reach + s
                if nx < 0 or nx >= ncol or hstart[nx] == hstart[nx + 1]:
                    continue
                hlo[s], hhi[s] = _advance(hy, hlo[s], hhi[s], hstart[nx + 1], ylo, yhi)
                total += _visit(i, xi, yi, ti, li, oang, ip, hx, hy, ht, olim, hpos, hang, hlo[s], hhi[s], False,
                                no, r2, lut, scale, tr, mode, has_t, win, twin, hist, action, ci, cj, ck, cwi, cwj, m)
    counts[0] += total


@numba.njit(cache=True, nogil=True)
def _hist_from_cache(pi, pj, kr, wij, wji, t, tr, twin, hist):  # pragma: no cover - compiled
    """Space-time histogram of cached spatial pairs under times ``t``."""
    tmax = tr[tr.shape[0] - 1]
    for m in range(pi.shape[0]):
        ti = t[pi[m]]
        tj = t[pj[m]]
        dt = abs(tj - ti)
        if dt > tmax:
            continue
        kt = _tbin(dt, tr)
        hist[kr[m], kt] += wij[m] * _tweight(ti, dt, twin[0], twin[1])
        if wji[m] != 0.0:
            hist[kr[m], kt] += wji[m] * _tweight(tj, dt, twin[0], twin[1])
