"""Worker-local CPU kernels (numba): the sweeps of the two-pass solver, the fused single pass,
the serial Thomas reference and the compact stencil.  ``cuda.py`` holds their device twins.
"""

from __future__ import annotations

import numba
import numpy as np

from .._intrinsics import _prefetch
from .params import _CHK_SCALE, _PREFETCH_COLUMNS
from .simd import (
    _backsub2_x8,
    _eliminate2_x8,
    _eliminate2v_x8,
    _halo2_x8,
    _store_fence,
    _transpose4,
    _transpose4_nt,
)

# Kernels compile on first call and are cached on disk (module-level functions: numba cannot cache
# closures, and every worker process would compile them again).
_njit = numba.njit(cache=True, error_model="numpy", nogil=True)
_inline = numba.njit(inline="always", error_model="numpy", cache=True)


@_njit
def reduce_kernel(dl, d, du, b, starts, lens, rows0, RA, RC, RD, chk, G, Vt):
    S = starts.size
    V = d.shape[1]
    R = b.shape[1]
    sa = np.empty((G, Vt))
    sc = np.empty((G, Vt))
    sd = np.empty((G, R, Vt))
    ri = np.empty((G, Vt))
    cacc = np.zeros((G, Vt))
    for s0 in range(0, S, G):
        gn = min(G, S - s0)
        Lmax = 0
        for g in range(gn):
            Lmax = max(Lmax, lens[s0 + g])
        for v0 in range(0, V, Vt):
            vn = min(Vt, V - v0)
            cacc[:, :] = 0.0
            # downward sweep: row i as  sa x_first + x_i + sc x_{i+1} = sd
            for j in range(Lmax):
                for g in range(gn):
                    L = lens[s0 + g]
                    if j >= L:
                        continue
                    i = starts[s0 + g] + j
                    if j < 2:
                        for v in range(vn):
                            inv = 1.0 / d[i, v0 + v]
                            a = dl[i, v0 + v]
                            c = du[i, v0 + v]
                            sa[g, v] = a * inv
                            sc[g, v] = c * inv
                            ri[g, v] = inv
                            cacc[g, v] += (abs(a) + abs(c) + abs(d[i, v0 + v]) + abs(inv)) * _CHK_SCALE
                        for q in range(R):
                            for v in range(vn):
                                bv = b[i, q, v0 + v]
                                sd[g, q, v] = bv * ri[g, v]
                                cacc[g, v] += abs(bv) * _CHK_SCALE
                    else:
                        for v in range(vn):
                            a = dl[i, v0 + v]
                            c = du[i, v0 + v]
                            dd = d[i, v0 + v]
                            inv = 1.0 / (dd - a * sc[g, v])
                            sa[g, v] = -a * sa[g, v] * inv
                            sc[g, v] = c * inv
                            ri[g, v] = inv
                            cacc[g, v] += (abs(a) + abs(c) + abs(dd) + abs(inv)) * _CHK_SCALE
                        for q in range(R):
                            for v in range(vn):
                                bv = b[i, q, v0 + v]
                                sd[g, q, v] = (bv - dl[i, v0 + v] * sd[g, q, v]) * ri[g, v]
                                cacc[g, v] += abs(bv) * _CHK_SCALE
                    if j == L - 1:
                        r = rows0[s0 + g] + (1 if L >= 2 else 0)
                        for v in range(vn):
                            RA[r, v0 + v] = sa[g, v]
                            RC[r, v0 + v] = sc[g, v]
                        for q in range(R):
                            for v in range(vn):
                                RD[r, q, v0 + v] = sd[g, q, v]
            # upward sweep: row i as  sa x_{i-1} + x_i + sc x_last = sd
            for j in range(Lmax):
                for g in range(gn):
                    L = lens[s0 + g]
                    if j >= L or L < 2:
                        continue
                    i = starts[s0 + g] + L - 1 - j
                    if j < 2:
                        for v in range(vn):
                            inv = 1.0 / d[i, v0 + v]
                            sa[g, v] = dl[i, v0 + v] * inv
                            sc[g, v] = du[i, v0 + v] * inv
                            ri[g, v] = inv
                        for q in range(R):
                            for v in range(vn):
                                sd[g, q, v] = b[i, q, v0 + v] * ri[g, v]
                    else:
                        for v in range(vn):
                            c = du[i, v0 + v]
                            inv = 1.0 / (d[i, v0 + v] - c * sa[g, v])
                            sa[g, v] = dl[i, v0 + v] * inv
                            sc[g, v] = -c * sc[g, v] * inv
                            ri[g, v] = inv
                            cacc[g, v] += abs(inv) * _CHK_SCALE
                        for q in range(R):
                            for v in range(vn):
                                sd[g, q, v] = (b[i, q, v0 + v] - du[i, v0 + v] * sd[g, q, v]) * ri[g, v]
                    if j == L - 1:
                        r = rows0[s0 + g]
                        for v in range(vn):
                            RA[r, v0 + v] = sa[g, v]
                            RC[r, v0 + v] = sc[g, v]
                        for q in range(R):
                            for v in range(vn):
                                RD[r, q, v0 + v] = sd[g, q, v]
            for g in range(gn):
                t = 0.0
                for v in range(vn):
                    t += cacc[g, v]
                chk[s0 + g] += t

@_njit
def expand_kernel(dl, d, du, b, starts, lens, Y0, Y1, x, cs, G, Vt):
    # cs: scratch for c', (max(lens), G, Vt) (the device twin keeps it per row and system, (m, V))
    S = starts.size
    V = d.shape[1]
    R = b.shape[1]
    ri = np.empty((G, Vt))
    for s0 in range(0, S, G):
        gn = min(G, S - s0)
        Lg = 0
        for g in range(gn):
            Lg = max(Lg, lens[s0 + g])
        for v0 in range(0, V, Vt):
            vn = min(Vt, V - v0)
            for g in range(gn):
                s = s0 + g
                i0 = starts[s]
                i1 = i0 + lens[s] - 1
                for q in range(R):
                    for v in range(vn):
                        x[i0, q, v0 + v] = Y0[s, q, v0 + v]
                        x[i1, q, v0 + v] = Y1[s, q, v0 + v]
            # forward elimination of the interior rows 1..L-2, x_first/x_last known
            for j in range(1, Lg - 1):
                for g in range(gn):
                    L = lens[s0 + g]
                    if j > L - 2:
                        continue
                    i = starts[s0 + g] + j
                    last = j == L - 2
                    for v in range(vn):
                        if j == 1:
                            piv = d[i, v0 + v]
                        else:
                            piv = d[i, v0 + v] - dl[i, v0 + v] * cs[j - 1, g, v]
                        inv = 1.0 / piv
                        ri[g, v] = inv
                        cs[j, g, v] = 0.0 if last else du[i, v0 + v] * inv
                    for q in range(R):
                        for v in range(vn):
                            t = b[i, q, v0 + v] - dl[i, v0 + v] * x[i - 1, q, v0 + v]
                            if last:
                                t -= du[i, v0 + v] * x[i + 1, q, v0 + v]
                            x[i, q, v0 + v] = t * ri[g, v]
            for j in range(Lg - 3, 0, -1):
                for g in range(gn):
                    L = lens[s0 + g]
                    if j > L - 3:
                        continue
                    i = starts[s0 + g] + j
                    for q in range(R):
                        for v in range(vn):
                            x[i, q, v0 + v] -= cs[j, g, v] * x[i + 1, q, v0 + v]

@_njit
def thomas_kernel(dl, d, du, b, x):
    nb, n = d.shape
    cp = np.empty(n)
    for k in range(nb):
        inv = 1.0 / d[k, 0]
        cp[0] = du[k, 0] * inv if n > 1 else 0.0
        x[k, 0] = b[k, 0] * inv
        for i in range(1, n):
            inv = 1.0 / (d[k, i] - dl[k, i - 1] * cp[i - 1])
            cp[i] = du[k, i] * inv if i < n - 1 else 0.0
            x[k, i] = (b[k, i] - dl[k, i - 1] * x[k, i - 1]) * inv
        for i in range(n - 2, -1, -1):
            x[k, i] -= cp[i] * x[k, i + 1]

@_njit
def reduce1_kernel(dl, d, du, b, starts, lens, rows0, RA, RC, RD, chk):
    S = starts.size
    R = b.shape[1]
    dn = np.empty(R)
    up = np.empty(R)
    # one system: each sub-block's downward and upward sweeps run in one loop
    # (two independent dependency chains); same arithmetic as reduce_kernel
    for s in range(S):
        L = lens[s]
        i0 = starts[s]
        acc = 0.0
        da = dc = ua = uc = 0.0
        for j in range(L):
            # downward row i (x_first, x_i, x_{i+1}) and upward row k (x_{k-1}, x_k, x_last): independent chains
            i = i0 + j
            a = dl[i]
            c = du[i]
            dd = d[i]
            if j < 2:
                inv = 1.0 / dd
                da = a * inv
                for q in range(R):
                    dn[q] = b[i, q] * inv
            else:
                inv = 1.0 / (dd - a * dc)
                da = -a * da * inv
                for q in range(R):
                    dn[q] = (b[i, q] - a * dn[q]) * inv
            dc = c * inv
            tt = abs(a) + abs(c) + abs(dd) + abs(inv)
            for q in range(R):
                tt += abs(b[i, q])
            acc += tt * _CHK_SCALE
            if L >= 2:
                k = i0 + L - 1 - j
                a2 = dl[k]
                c2 = du[k]
                if j < 2:
                    inv2 = 1.0 / d[k]
                    uc = c2 * inv2
                    for q in range(R):
                        up[q] = b[k, q] * inv2
                else:
                    inv2 = 1.0 / (d[k] - c2 * ua)
                    uc = -c2 * uc * inv2
                    for q in range(R):
                        up[q] = (b[k, q] - c2 * up[q]) * inv2
                    acc += abs(inv2) * _CHK_SCALE
                ua = a2 * inv2
        r = rows0[s]
        if L >= 2:
            RA[r] = ua
            RC[r] = uc
            for q in range(R):
                RD[r, q] = up[q]
            r += 1
        RA[r] = da
        RC[r] = dc
        for q in range(R):
            RD[r, q] = dn[q]
        chk[s] = acc

@_njit
def expand1_kernel(dl, d, du, b, starts, lens, Y0, Y1, x):
    S = starts.size
    R = b.shape[1]
    Lmax = 1
    for s in range(S):
        Lmax = max(Lmax, lens[s])
    cs = np.empty(Lmax)
    for s in range(S):
        L = lens[s]
        i0 = starts[s]
        i1 = i0 + L - 1
        for q in range(R):
            x[i0, q] = Y0[s, q]
            x[i1, q] = Y1[s, q]
        prev = 0.0
        for j in range(1, L - 1):
            i = i0 + j
            piv = d[i] if j == 1 else d[i] - dl[i] * prev
            inv = 1.0 / piv
            last = j == L - 2
            prev = 0.0 if last else du[i] * inv
            cs[j] = prev
            for q in range(R):
                tq = b[i, q] - dl[i] * x[i - 1, q]
                if last:
                    tq -= du[i] * x[i + 1, q]
                x[i, q] = tq * inv
        for j in range(L - 3, 0, -1):
            i = i0 + j
            for q in range(R):
                x[i, q] -= cs[j] * x[i + 1, q]

# One right-hand side of one system: the sweeps are latency-bound chains (a division per row), so
# two sub-blocks of equal length run interleaved -- four (reduce) or two (expand) independent chains
# per iteration -- with the chain state in registers.  Same arithmetic as reduce1/expand1.
@_inline
def down_row(j, a, dd, c, bb, da, dc, dn):
    if j < 2:
        inv = 1.0 / dd
        da = a * inv
        dn = bb * inv
    else:
        inv = 1.0 / (dd - a * dc)
        da = -a * da * inv
        dn = (bb - a * dn) * inv
    return da, c * inv, dn, (abs(a) + abs(c) + abs(dd) + abs(inv) + abs(bb)) * _CHK_SCALE

@_inline
def up_row(j, a, dd, c, bb, ua, uc, up):
    if j < 2:
        inv = 1.0 / dd
        uc = c * inv
        up = bb * inv
        t = 0.0
    else:
        inv = 1.0 / (dd - c * ua)
        uc = -c * uc * inv
        up = (bb - c * up) * inv
        t = abs(inv) * _CHK_SCALE
    return a * inv, uc, up, t

@_inline
def store_rows(s, L, rows0, RA, RC, RD, chk, da, dc, dn, ua, uc, up, acc):
    r = rows0[s]
    if L >= 2:
        RA[r] = ua
        RC[r] = uc
        RD[r] = up
        r += 1
    RA[r] = da
    RC[r] = dc
    RD[r] = dn
    chk[s] = acc

@_njit
def reduce1p_kernel(dl, d, du, b, starts, lens, rows0, RA, RC, RD, chk):
    S = starts.size
    s = 0
    while s < S:
        L = lens[s]
        i0 = starts[s]
        da = dc = dn = ua = uc = up = acc = 0.0
        if s + 1 < S and lens[s + 1] == L and L >= 2:
            p0 = starts[s + 1]
            ea = ec = en = va = vc = vp = acc2 = 0.0
            for j in range(L):
                i, k = i0 + j, i0 + L - 1 - j
                da, dc, dn, t = down_row(j, dl[i], d[i], du[i], b[i], da, dc, dn)
                acc += t
                ua, uc, up, t = up_row(j, dl[k], d[k], du[k], b[k], ua, uc, up)
                acc += t
                i, k = p0 + j, p0 + L - 1 - j
                ea, ec, en, t = down_row(j, dl[i], d[i], du[i], b[i], ea, ec, en)
                acc2 += t
                va, vc, vp, t = up_row(j, dl[k], d[k], du[k], b[k], va, vc, vp)
                acc2 += t
            store_rows(s, L, rows0, RA, RC, RD, chk, da, dc, dn, ua, uc, up, acc)
            store_rows(s + 1, L, rows0, RA, RC, RD, chk, ea, ec, en, va, vc, vp, acc2)
            s += 2
            continue
        for j in range(L):
            i = i0 + j
            da, dc, dn, t = down_row(j, dl[i], d[i], du[i], b[i], da, dc, dn)
            acc += t
            if L >= 2:
                k = i0 + L - 1 - j
                ua, uc, up, t = up_row(j, dl[k], d[k], du[k], b[k], ua, uc, up)
                acc += t
        store_rows(s, L, rows0, RA, RC, RD, chk, da, dc, dn, ua, uc, up, acc)
        s += 1

@_inline
def fwd_row(j, L, a, dd, c, bb, prev, xprev, xlast):
    piv = dd if j == 1 else dd - a * prev
    inv = 1.0 / piv
    t = bb - a * xprev
    if j == L - 2:
        return 0.0, (t - c * xlast) * inv
    return c * inv, t * inv

@_njit
def expand1p_kernel(dl, d, du, b, starts, lens, Y0, Y1, x):
    S = starts.size
    Lmax = 1
    for s in range(S):
        Lmax = max(Lmax, lens[s])
    cs = np.empty((2, Lmax))
    s = 0
    while s < S:
        L = lens[s]
        i0 = starts[s]
        x[i0] = Y0[s]
        x[i0 + L - 1] = Y1[s]
        pair = s + 1 < S and lens[s + 1] == L
        p0 = starts[s + 1] if pair else i0
        if pair:
            x[p0] = Y0[s + 1]
            x[p0 + L - 1] = Y1[s + 1]
        prev = prev2 = 0.0
        xp_ = Y0[s]
        xq = Y0[s + 1] if pair else 0.0
        for j in range(1, L - 1):
            i = i0 + j
            prev, xp_ = fwd_row(j, L, dl[i], d[i], du[i], b[i], prev, xp_, x[i0 + L - 1])
            cs[0, j] = prev
            x[i] = xp_
            if pair:
                i = p0 + j
                prev2, xq = fwd_row(j, L, dl[i], d[i], du[i], b[i], prev2, xq, x[p0 + L - 1])
                cs[1, j] = prev2
                x[i] = xq
        if L >= 3:
            xn = x[i0 + L - 2]
            xm = x[p0 + L - 2]
            for j in range(L - 3, 0, -1):
                xn = x[i0 + j] - cs[0, j] * xn
                x[i0 + j] = xn
                if pair:
                    xm = x[p0 + j] - cs[1, j] * xm
                    x[p0 + j] = xm
        s += 2 if pair else 1

# A batch with one right-hand side: one fused loop over the tile's systems per row, the sweep
# state (a few rows of Vt doubles) in L1.  Same arithmetic as reduce_kernel/expand_kernel.
@_njit
def reduce_b1_kernel(dl, d, du, b, starts, lens, rows0, RA, RC, RD, chk, Vt):
    S = starts.size
    V = d.shape[1]
    sa = np.empty(Vt)
    sc = np.empty(Vt)
    sd = np.empty(Vt)
    cacc = np.empty(Vt)
    for s in range(S):
        L = lens[s]
        i0 = starts[s]
        r = rows0[s]
        for v0 in range(0, V, Vt):
            vn = min(Vt, V - v0)
            cacc[:vn] = 0.0
            for j in range(L):
                i = i0 + j
                if j < 2:
                    for v in range(vn):
                        a = dl[i, v0 + v]
                        c = du[i, v0 + v]
                        dd = d[i, v0 + v]
                        bv = b[i, v0 + v]
                        inv = 1.0 / dd
                        sa[v] = a * inv
                        sc[v] = c * inv
                        sd[v] = bv * inv
                        cacc[v] += (abs(a) + abs(c) + abs(dd) + abs(inv) + abs(bv)) * _CHK_SCALE
                else:
                    for v in range(vn):
                        a = dl[i, v0 + v]
                        c = du[i, v0 + v]
                        dd = d[i, v0 + v]
                        bv = b[i, v0 + v]
                        inv = 1.0 / (dd - a * sc[v])
                        sa[v] = -a * sa[v] * inv
                        sc[v] = c * inv
                        sd[v] = (bv - a * sd[v]) * inv
                        cacc[v] += (abs(a) + abs(c) + abs(dd) + abs(inv) + abs(bv)) * _CHK_SCALE
            rl = r + (1 if L >= 2 else 0)
            for v in range(vn):
                RA[rl, v0 + v] = sa[v]
                RC[rl, v0 + v] = sc[v]
                RD[rl, v0 + v] = sd[v]
            if L >= 2:
                for j in range(L):
                    i = i0 + L - 1 - j
                    if j < 2:
                        for v in range(vn):
                            inv = 1.0 / d[i, v0 + v]
                            sa[v] = dl[i, v0 + v] * inv
                            sc[v] = du[i, v0 + v] * inv
                            sd[v] = b[i, v0 + v] * inv
                    else:
                        for v in range(vn):
                            c = du[i, v0 + v]
                            inv = 1.0 / (d[i, v0 + v] - c * sa[v])
                            sa[v] = dl[i, v0 + v] * inv
                            sc[v] = -c * sc[v] * inv
                            sd[v] = (b[i, v0 + v] - c * sd[v]) * inv
                            cacc[v] += abs(inv) * _CHK_SCALE
                for v in range(vn):
                    RA[r, v0 + v] = sa[v]
                    RC[r, v0 + v] = sc[v]
                    RD[r, v0 + v] = sd[v]
            tsum = 0.0
            for v in range(vn):
                tsum += cacc[v]
            chk[s] += tsum

@_njit
def expand_b1_kernel(dl, d, du, b, starts, lens, Y0, Y1, x, Vt):
    S = starts.size
    V = d.shape[1]
    Lmax = 1
    for s in range(S):
        Lmax = max(Lmax, lens[s])
    cs = np.empty((Lmax, Vt))
    # the neighbouring row's values live in their own scratch rows, so the compiler sees
    # no dependence between rows of x (or of cs) and vectorizes across systems
    cprev = np.empty(Vt)
    xnb = np.empty(Vt)
    for s in range(S):
        L = lens[s]
        i0 = starts[s]
        i1 = i0 + L - 1
        for v0 in range(0, V, Vt):
            vn = min(Vt, V - v0)
            for v in range(vn):
                xnb[v] = Y0[s, v0 + v]
                x[i0, v0 + v] = Y0[s, v0 + v]
                x[i1, v0 + v] = Y1[s, v0 + v]
                cprev[v] = 0.0
            for j in range(1, L - 1):
                i = i0 + j
                if j == L - 2:
                    for v in range(vn):
                        a = dl[i, v0 + v]
                        piv = d[i, v0 + v] if j == 1 else d[i, v0 + v] - a * cprev[v]
                        inv = 1.0 / piv
                        cs[j, v] = 0.0
                        xv = (b[i, v0 + v] - a * xnb[v] - du[i, v0 + v] * Y1[s, v0 + v]) * inv
                        x[i, v0 + v] = xv
                        xnb[v] = xv
                elif j == 1:
                    for v in range(vn):
                        inv = 1.0 / d[i, v0 + v]
                        cj = du[i, v0 + v] * inv
                        cs[j, v] = cj
                        cprev[v] = cj
                        xv = (b[i, v0 + v] - dl[i, v0 + v] * xnb[v]) * inv
                        x[i, v0 + v] = xv
                        xnb[v] = xv
                else:
                    for v in range(vn):
                        a = dl[i, v0 + v]
                        inv = 1.0 / (d[i, v0 + v] - a * cprev[v])
                        cj = du[i, v0 + v] * inv
                        cs[j, v] = cj
                        cprev[v] = cj
                        xv = (b[i, v0 + v] - a * xnb[v]) * inv
                        x[i, v0 + v] = xv
                        xnb[v] = xv
            # xnb holds row L-2 now: walk back up
            for j in range(L - 3, 0, -1):
                i = i0 + j
                for v in range(vn):
                    xv = x[i, v0 + v] - cs[j, v] * xnb[v]
                    x[i, v0 + v] = xv
                    xnb[v] = xv


@_njit
def fused_kernel(dl, d, du, b, starts, lens, x, VS, WS, edge, chk, tau, Vt, W, H):
    # one pass per tile of Vt systems over the rank's blocks: forward elimination into x (b') and a ring of
    # c'; every W rows, back-substitute the window from H rows further down (x there taken as 0: the
    # dropped term is prod |c'| over the halo, tracked in tau[0]).  Rows go in pairs, the recurrences held
    # in registers across the pair (W, H and the ring even; windows end on odd rows): a third fewer loads
    # and stores per element.  Inner loops touch an array at one row per slice: a loop that indexes two
    # rows of one array through the same view falls off LLVM's vector path.
    # Finiteness: every b' is stored as b' + 0 * (pivot + c'), non-finite iff an input is (a at a block's
    # first row: inf * 0 = nan) or a pivot is 0; the back-substitution carries a nan or inf up to its
    # window's top row, whose values are summed into chk.  Huge finite values may overflow it too, which
    # only sends the solve to the two-pass path.
    S = starts.size
    V = d.shape[1]
    RB = W + H
    rc = np.empty((RB, Vt))
    # rows of unit stride: the forward rows go eight systems at a time in explicit vector code
    wide = V < 2 or (dl.strides[1] == 8 and d.strides[1] == 8 and du.strides[1] == 8 and b.strides[1] == 8
                     and x.strides[1] == 8)
    vs = np.empty((H, Vt))      # the x_prev column of the block's first H rows (v' on the way down)
    ws = np.empty((H, Vt))      # the x_next column of the previous block's last H rows
    cp = np.empty(Vt)
    bp = np.empty(Vt)
    vp = np.empty(Vt)
    xn = np.empty(Vt)
    pp = np.empty(Vt)
    top_sum = np.empty(Vt)
    p = np.empty(Vt)
    q = np.empty(Vt)
    t_halo = 0.0
    t_v = 0.0
    t_w = 0.0
    for v0 in range(0, V, Vt):
        vn = min(Vt, V - v0)
        v1 = v0 + vn
        for v in range(vn):
            top_sum[v] = 0.0
        for s in range(S):
            i0 = starts[s]
            L = lens[s]
            for v in range(vn):
                cp[v] = 0.0
                bp[v] = 0.0
                vp[v] = -1.0
            k = 0
            j = 0
            while j < L:
                e = min((k + 1) * W + H, L) - 1
                # ---- forward rows j..e: pairs, then the block's last row when L is odd
                # the ring's row of j, stepped: a modulo per row cost a 16-system tile ~20% (j and RB are even,
                # so jr + 1 < RB)
                jr = j % RB
                while j < e:
                    i = i0 + j
                    jn = jr
                    jr += 2
                    if jr == RB:
                        jr = 0
                    # the first H rows also carry v' (x_prev's column) in their own loop
                    if j < H:
                        v8 = 0
                        if wide:
                            while v8 + 8 <= vn:
                                _eliminate2v_x8(v0 + v8, v8, i, jn, dl, d, du, b, x, rc, cp, bp, vs, j, vp)
                                v8 += 8
                        for v in range(v8, vn):
                            inv0, inv1 = _eliminate2(i, v0 + v, jn, v, dl, d, du, b, x, rc, cp, bp)
                            w0 = -dl[i, v0 + v] * vp[v] * inv0
                            w1 = -dl[i + 1, v0 + v] * w0 * inv1
                            vs[j, v] = w0
                            vs[j + 1, v] = w1
                            vp[v] = w1
                    else:
                        v8 = 0
                        if wide:
                            while v8 + 8 <= vn:
                                _eliminate2_x8(v0 + v8, v8, i, jn, dl, d, du, b, x, rc, cp, bp)
                                v8 += 8
                        for v in range(v8, vn):
                            _eliminate2(i, v0 + v, jn, v, dl, d, du, b, x, rc, cp, bp)
                    j += 2
                if j == e:
                    i = i0 + j
                    a0, d0, c0, b0, x0 = dl[i, v0:v1], d[i, v0:v1], du[i, v0:v1], b[i, v0:v1], x[i, v0:v1]
                    r0_ = rc[j % RB]
                    if j < H:
                        vs0 = vs[j]
                        for v in range(vn):
                            inv0 = _eliminate(v, a0, d0, c0, b0, cp, bp, r0_, x0)
                            w0 = -a0[v] * vp[v] * inv0
                            vs0[v] = w0
                            vp[v] = w0
                    else:
                        for v in range(vn):
                            _eliminate(v, a0, d0, c0, b0, cp, bp, r0_, x0)
                    j += 1
                # ---- window k: rows r0 .. r1-1 become final (up to the block's edge columns)
                last = e == L - 1
                r0 = k * W
                k += 1
                if last:
                    for v in range(vn):
                        xn[v] = x[i0 + L - 1, v0 + v]
                    top = L - 2
                else:
                    r1 = k * W
                    je = e % RB
                    for v in range(vn):
                        xn[v] = x[i0 + e, v0 + v]
                        pp[v] = abs(rc[je, v])
                    jj = e - 1
                    jr = jj % RB
                    while jj > r1:
                        ja, jb = jr, jr - 1 if jr > 0 else RB - 1
                        jr -= 2
                        if jr < 0:
                            jr += RB
                        ia = i0 + jj
                        v8 = 0
                        if wide:
                            while v8 + 8 <= vn:
                                _halo2_x8(v0 + v8, v8, ia, ja, jb, x, rc, xn, pp)
                                v8 += 8
                        for v in range(v8, vn):
                            ca = rc[ja, v]
                            cb = rc[jb, v]
                            xn[v] = x[ia - 1, v0 + v] - cb * (x[ia, v0 + v] - ca * xn[v])
                            pp[v] *= abs(ca) * abs(cb)
                        jj -= 2
                    if jj == r1:
                        jc = jj % RB
                        for v in range(vn):
                            cv = rc[jc, v]
                            xn[v] = x[i0 + jj, v0 + v] - cv * xn[v]
                            pp[v] *= abs(cv)
                    for v in range(vn):
                        t_halo = max(t_halo, pp[v])
                    top = r1 - 1
                jj = top
                jr = jj % RB
                while jj > r0:
                    ja, jb = jr, jr - 1 if jr > 0 else RB - 1
                    jr -= 2
                    if jr < 0:
                        jr += RB
                    ia = i0 + jj
                    v8 = 0
                    if wide:
                        while v8 + 8 <= vn:
                            _backsub2_x8(v0 + v8, v8, ia, ja, jb, x, rc, xn)
                            v8 += 8
                    for v in range(v8, vn):
                        ya = x[ia, v0 + v] - rc[ja, v] * xn[v]
                        x[ia, v0 + v] = ya
                        yb = x[ia - 1, v0 + v] - rc[jb, v] * ya
                        x[ia - 1, v0 + v] = yb
                        xn[v] = yb
                    jj -= 2
                if jj == r0:
                    jc = jj % RB
                    for v in range(vn):
                        xv = x[i0 + jj, v0 + v] - rc[jc, v] * xn[v]
                        xn[v] = xv
                        x[i0 + jj, v0 + v] = xv
                for v in range(vn):
                    top_sum[v] += xn[v]
                if r0 == 0:
                    # v = the x_prev column back-substituted over the first H rows (dropped: |v'_{H-1}|)
                    vl = vs[H - 1]
                    for v in range(vn):
                        t_v = max(t_v, abs(vl[v]))
                        xn[v] = vl[v]
                    for jj in range(H - 2, -1, -1):
                        jc = jj % RB
                        for v in range(vn):
                            xv = vs[jj, v] - rc[jc, v] * xn[v]
                            xn[v] = xv
                            vs[jj, v] = xv
                    if s == 0:
                        x0 = x[i0, v0:v1]
                        for v in range(vn):
                            edge[0, v0 + v] = x0[v]
                            edge[1, v0 + v] = vs[0, v]
                        for t_ in range(H):
                            VS[t_, v0:v1] = vs[t_, :vn]
                    else:
                        # the interface (block s-1 | block s), solved and applied as fused_fix does between
                        # ranks (the same helpers), so answers do not depend on where ranks split the line
                        ip = starts[s - 1] + lens[s - 1] - H
                        if _interface(x[ip + H - 1, v0:v1], ws[H - 1], x[i0, v0:v1], vs[0], p, q, vn):
                            t_halo = np.inf
                        _minus_column(x, ip, ws, q, v0, vn)
                        _minus_column(x, i0, vs, p, v0, vn)
                if last:
                    # w = the x_next column over the last H rows (dropped: |w_{L-H}|)
                    rcl = rc[(L - 1) % RB]
                    wt = ws[H - 1]
                    for v in range(vn):
                        wt[v] = rcl[v]
                        xn[v] = rcl[v]
                    for t_ in range(H - 2, -1, -1):
                        jc = (L - H + t_) % RB
                        for v in range(vn):
                            xv = -rc[jc, v] * xn[v]
                            xn[v] = xv
                            ws[t_, v] = xv
                    for v in range(vn):
                        t_w = max(t_w, abs(xn[v]))
                    if s == S - 1:
                        xl = x[i0 + L - 1, v0:v1]
                        for v in range(vn):
                            edge[2, v0 + v] = xl[v]
                            edge[3, v0 + v] = ws[H - 1, v]
                        for t_ in range(H):
                            WS[t_, v0:v1] = ws[t_, :vn]
        tsum = 0.0
        for v in range(vn):
            tsum += top_sum[v]
        chk[0] += tsum
    tau[0] = max(tau[0], t_halo)
    tau[1] = max(tau[1], t_v)
    tau[2] = max(tau[2], t_w)


@_inline
def _step(a, d, c, b, cprev, bprev):
    # one row of the forward elimination for one system: 1 / pivot, c', b', and b' as stored in x (with
    # the finiteness term: non-finite iff an input is or the pivot is 0)
    piv = d - a * cprev
    inv = 1.0 / piv
    c1 = c * inv
    b1 = (b - a * bprev) * inv
    return inv, c1, b1, b1 + 0.0 * (piv + c1)


@_inline
def _eliminate(v, ar, dr, cr, br, cp, bp, rcs, xr):
    # one row for system v: c' into the ring and cp, b' into x and bp; returns 1 / pivot
    inv, c1, b1, xr[v] = _step(ar[v], dr[v], cr[v], br[v], cp[v], bp[v])
    cp[v] = c1
    bp[v] = b1
    rcs[v] = c1
    return inv


@_inline
def _eliminate2(i, c, jr, v, dl, d, du, b, x, rc, cp, bp):
    # two rows (i, i + 1; the ring's jr, jr + 1) of _eliminate for system v (column c of the inputs and x), the
    # first row's c' and b' kept in registers for the second.  The hot loops index 2-D arrays instead of
    # taking row views: each view of an array costs an atomic reference-count update and a call (~400
    # cycles per row pair here, as much as the arithmetic of 128 systems).
    inv0, cc, bb, x[i, c] = _step(dl[i, c], d[i, c], du[i, c], b[i, c], cp[v], bp[v])
    rc[jr, v] = cc
    inv1, cc, bb, x[i + 1, c] = _step(dl[i + 1, c], d[i + 1, c], du[i + 1, c], b[i + 1, c], cc, bb)
    rc[jr + 1, v] = cc
    cp[v] = cc
    bp[v] = bb
    return inv0, inv1


@_njit
def compact_rhs_kernel(f, left, right, c1, c2, rhs):
    # the compact scheme's explicit stencil, c1 (f[i+1] - f[i-1]) + c2 (f[i+2] - f[i-2]), rows outside the
    # block from the halos (left: rows -2, -1; right: rows m, m+1); numpy's operation order
    m, V = f.shape
    for i in range(m):
        fm2 = f[i - 2] if i >= 2 else left[i]
        fm1 = f[i - 1] if i >= 1 else left[i + 1]
        fp1 = f[i + 1] if i + 1 < m else right[i + 1 - m]
        fp2 = f[i + 2] if i + 2 < m else right[i + 2 - m]
        out = rhs[i]
        for v in range(V):
            out[v] = c1 * (fp1[v] - fm1[v]) + c2 * (fp2[v] - fm2[v])


@_njit
def decay_kernel(dl, d, du, skip, upto, worst):
    # the largest product, over one system's rows skip..upto-1, of |c'| (how x_next's influence decays
    # going up) or of |a / pivot| (x_prev's going down) in a forward elimination from row 0, maxed into worst[0]
    V = d.shape[1]
    cp = np.zeros(V)
    pc = np.ones(V)
    pa = np.ones(V)
    for i in range(upto):
        ar = dl[i]
        dr = d[i]
        cr = du[i]
        if i < skip:
            for v in range(V):
                cp[v] = cr[v] / (dr[v] - ar[v] * cp[v])
        else:
            for v in range(V):
                inv = 1.0 / (dr[v] - ar[v] * cp[v])
                c1 = cr[v] * inv
                cp[v] = c1
                pc[v] *= abs(c1)
                pa[v] *= abs(ar[v] * inv)
    w = worst[0]
    for v in range(V):
        w = max(w, pc[v], pa[v])
    worst[0] = w


@_njit
def fused_fix_kernel(x, r0, C, yl, wl, yr, vr, side, bad):
    # an interface between ranks: the same 2x2 solve and correction as fused_kernel's inside a rank
    V = x.shape[1]
    p = np.empty(V)
    q = np.empty(V)
    if _interface(yl, wl, yr, vr, p, q, V):
        bad[0] = 1.0
    _minus_column(x, r0, C, p if side == 0 else q, 0, V)


@_inline
def _interface(yl, wl, yr, vr, p, q, n):
    # the 2x2 system of an interface, for n systems: p = x_last of the upper block, q = x_first of the
    # lower, from y_last, w_last (upper) and y_first, v_first (lower); True when one is singular
    bad = False
    for v in range(n):
        det = 1.0 - wl[v] * vr[v]
        p[v] = (yl[v] - wl[v] * yr[v]) / det
        q[v] = (yr[v] - vr[v] * yl[v]) / det
        if det == 0.0:
            bad = True
    return bad


@_inline
def _minus_column(x, r0, C, sol, v0, n):
    # rows r0.. of x (systems v0..v0+n) minus C[t] * sol: a neighbour's unknown entering through its column
    for t_ in range(C.shape[0]):
        for v in range(n):
            x[r0 + t_, v0 + v] = x[r0 + t_, v0 + v] - C[t_, v] * sol[v]


# --------------------------------------------------------------------------
# The (batch, n) layout (LAPACK gtsv's, each system a contiguous row): panels of systems transposed in cache
# --------------------------------------------------------------------------


@_inline
def _prefetch_rows(a, v, j):
    # the line holding column j of each of a's rows v..v+7 (those it has)
    if j >= a.shape[1]:
        return
    if v + 8 <= a.shape[0]:
        _prefetch(a, v, j)
        _prefetch(a, v + 1, j)
        _prefetch(a, v + 2, j)
        _prefetch(a, v + 3, j)
        _prefetch(a, v + 4, j)
        _prefetch(a, v + 5, j)
        _prefetch(a, v + 6, j)
        _prefetch(a, v + 7, j)
    else:
        for q in range(a.shape[0] - v):
            _prefetch(a, v + q, j)


@_inline
def _unit_rows(a):
    return a.shape[1] < 2 or a.strides[1] == 8


@_njit
def load_panel_kernel(a, r0, s, v0, vn, i0, i1):
    # s[i - i0, v] = row i (the rank's local line index) of system v0 + v, for the rows i in [i0, i1) that a
    # covers: column j of the (Va, w) block a is row r0 + j; a block of one system (Va == 1, constant
    # coefficients) is broadcast.  Eight systems at a time, each read along its row (eight streams the
    # prefetcher follows), in 4 x 4 tiles transposed in registers: each panel row gets a whole 64-byte line
    # per step (four systems at a time wrote half lines, and ran this pass at half the read bandwidth).
    # It reads ~20 GB/s on one core here against ~40 for one contiguous stream; none of these read faster:
    # 8 x 8 tiles (whole lines per load), prefetching 32-256 columns or the next group of rows ahead, and
    # segments two to six times as long (panels of 16 or 32 systems over fewer blocks).
    Va, w = a.shape
    lo = max(i0, r0)
    hi = min(i1, r0 + w)
    if hi <= lo:
        return
    if Va == 1:
        src = a[0]
        for i in range(lo, hi):
            val = src[i - r0]
            for v in range(vn):
                s[i - i0, v] = val
        return
    vb = 0
    if _unit_rows(a) and _unit_rows(s):
        while vb + 8 <= vn:
            t = lo
            while t + 4 <= hi:
                # a line ahead on each of the eight rows, or on the next eight's once this segment ends
                if (t - lo) % 8 == 0:
                    if t + _PREFETCH_COLUMNS < hi:
                        _prefetch_rows(a, v0 + vb, t - r0 + _PREFETCH_COLUMNS)
                    else:
                        _prefetch_rows(a, v0 + vb + 8, lo - r0 + (t + _PREFETCH_COLUMNS - hi))
                _transpose4(a, v0 + vb, t - r0, s, t - i0, vb)
                _transpose4(a, v0 + vb + 4, t - r0, s, t - i0, vb + 4)
                t += 4
            for i in range(t, hi):
                for q in range(8):
                    s[i - i0, vb + q] = a[v0 + vb + q, i - r0]
            vb += 8
    while vb + 4 <= vn:
        q0, q1, q2, q3 = a[v0 + vb], a[v0 + vb + 1], a[v0 + vb + 2], a[v0 + vb + 3]
        for i in range(lo, hi):
            sr = s[i - i0, vb:vb + 4]
            j = i - r0
            sr[0] = q0[j]
            sr[1] = q1[j]
            sr[2] = q2[j]
            sr[3] = q3[j]
        vb += 4
    for v in range(vb, vn):
        q0 = a[v0 + v]
        for i in range(lo, hi):
            s[i - i0, v] = q0[i - r0]


@_njit
def store_panel_kernel(s, x, v0, vn):
    # x[v0 + v, i] = s[i, v]: a panel's answers back into the (batch, m) block, eight systems' rows at a time
    # in 4 x 4 tiles as load_panel_kernel reads them.  Streaming stores fill a 64-byte line of four rows,
    # then of the next four: with eight rows' half lines open at once (partial lines flushed) the README
    # case's rank share took 0.30-0.32 s in this host's slow-memory state, against 0.22-0.25 with ordinary
    # stores; whole lines at a time it takes 0.19-0.21 s there (same bits)
    m = s.shape[0]
    vb = 0
    unit = _unit_rows(s) and _unit_rows(x)
    streaming = unit and x.ctypes.data % 32 == 0 and x.strides[0] % 32 == 0
    if unit:
        while vb + 8 <= vn:
            t = 0
            if streaming:
                while t + 8 <= m:
                    _transpose4_nt(s, t, vb, x, v0 + vb, t)
                    _transpose4_nt(s, t + 4, vb, x, v0 + vb, t + 4)
                    _transpose4_nt(s, t, vb + 4, x, v0 + vb + 4, t)
                    _transpose4_nt(s, t + 4, vb + 4, x, v0 + vb + 4, t + 4)
                    t += 8
                while t + 4 <= m:
                    _transpose4_nt(s, t, vb, x, v0 + vb, t)
                    _transpose4_nt(s, t, vb + 4, x, v0 + vb + 4, t)
                    t += 4
            while t + 4 <= m:
                _transpose4(s, t, vb, x, v0 + vb, t)
                _transpose4(s, t, vb + 4, x, v0 + vb + 4, t)
                t += 4
            for i in range(t, m):
                for q in range(8):
                    x[v0 + vb + q, i] = s[i, vb + q]
            vb += 8
    while vb + 4 <= vn:
        q0, q1, q2, q3 = x[v0 + vb], x[v0 + vb + 1], x[v0 + vb + 2], x[v0 + vb + 3]
        for i in range(m):
            sr = s[i, vb:vb + 4]
            q0[i] = sr[0]
            q1[i] = sr[1]
            q2[i] = sr[2]
            q3[i] = sr[3]
        vb += 4
    for v in range(vb, vn):
        q0 = x[v0 + v]
        for i in range(m):
            q0[i] = s[i, v]
    if streaming:
        _store_fence()


@_njit
def fused_batch_kernel(dl, dl2, d, d2, du, du2, b, b2, r0, starts, lens, x, VS, WS, edge, chk, tau, Vt, W, H):
    # fused_kernel on (batch, m) blocks (each system a contiguous row, LAPACK's layout) without a whole-array
    # transpose.  For each panel of Vt systems, block by block of the line: the block's rows are transposed
    # into line-major scratch that stays in L2, solved there by fused_kernel itself (one block at a time, the
    # same arithmetic), and the interface with the previous block is solved and applied as fused_kernel does
    # inside a rank (the same helpers, so the answers are the same bit for bit while H <= W, as params.py's
    # halos and window are: fused_kernel applies it after a block's first window, which then holds the
    # block's first H rows already final); the panel's x goes back into
    # x (V, m) once its blocks are done.  Inputs are read once from memory and x written once.
    # (Prefetching the next block's rows while this one is solved, to overlap the two, made the pass slower at
    # every rate tried: the solve slowed by more than the loads gained.)
    # Each input comes as up to two blocks of columns (a dask chunk and the few columns of its neighbour
    # that the rank's rows reach into, or gtsv's sub-diagonal entry a rank's neighbour holds), read where
    # they lie: input k's blocks start at local rows r0[2k], r0[2k + 1]; rows neither covers are 0 (gtsv's
    # missing corners).  A last, narrow panel is padded with unit rows (finite padding systems).  Only the
    # blocks' rows of x are written: a run of a rank's blocks is joined to the next as between ranks.
    V, m = x.shape
    S = starts.size
    Lmax = 1
    for s_ in range(S):
        Lmax = max(Lmax, lens[s_])
    # x's columns this call writes: its blocks' rows (a rank's line may be solved in runs of blocks)
    first = starts[0]
    end = starts[S - 1] + lens[S - 1]
    sin = np.empty((4, Lmax, Vt))
    sx = np.empty((m, Vt))
    vs = np.empty((H, Vt))
    ws = np.empty((H, Vt))
    wprev = np.empty((H, Vt))
    ed = np.empty((4, Vt))
    eprev = np.empty((4, Vt))
    p = np.empty(Vt)
    q = np.empty(Vt)
    one = np.zeros(1, np.int64)
    ln = np.empty(1, np.int64)
    ins = ((dl, dl2), (d, d2), (du, du2), (b, b2))
    for v0 in range(0, V, Vt):
        vn = min(Vt, V - v0)
        for s_ in range(S):
            i0 = starts[s_]
            L = lens[s_]
            k = 0
            for pair in ins:
                sk = sin[k]
                pa, pb = pair
                # rows neither block covers are 0, padding systems' rows unit rows
                ra, rb = r0[2 * k], r0[2 * k + 1]
                lo = min(max(ra, i0), max(rb, i0) if pb.shape[1] else i0 + L)
                hi = max(min(ra + pa.shape[1], i0 + L), min(rb + pb.shape[1], i0 + L) if pb.shape[1] else i0)
                if lo > i0 or hi < i0 + L or vn < Vt:
                    for i in range(L):
                        if i < lo - i0 or i >= hi - i0:
                            for v in range(vn):
                                sk[i, v] = 0.0
                        for v in range(vn, Vt):
                            sk[i, v] = 1.0 if k == 1 else 0.0
                load_panel_kernel(pa, r0[2 * k], sk, v0, vn, i0, i0 + L)
                load_panel_kernel(pb, r0[2 * k + 1], sk, v0, vn, i0, i0 + L)
                k += 1
            ln[0] = L
            fused_kernel(sin[0, :L], sin[1, :L], sin[2, :L], sin[3, :L], one, ln, sx[i0:i0 + L], vs, ws, ed, chk,
                         tau, Vt, W, H)
            if s_ == 0:
                for v in range(vn):
                    edge[0, v0 + v] = ed[0, v]
                    edge[1, v0 + v] = ed[1, v]
                    for t_ in range(H):
                        VS[t_, v0 + v] = vs[t_, v]
            else:
                if _interface(eprev[2], eprev[3], ed[0], ed[1], p, q, vn):
                    tau[0] = np.inf
                _minus_column(sx, i0 - H, wprev, q, 0, vn)
                _minus_column(sx, i0, vs, p, 0, vn)
            for t_ in range(4):
                for v in range(Vt):
                    eprev[t_, v] = ed[t_, v]
            for t_ in range(H):
                for v in range(Vt):
                    wprev[t_, v] = ws[t_, v]
        store_panel_kernel(sx[first:end], x[:, first:end], v0, vn)
        for v in range(vn):
            edge[2, v0 + v] = eprev[2, v]
            edge[3, v0 + v] = eprev[3, v]
            for t_ in range(H):
                WS[t_, v0 + v] = wprev[t_, v]


@_njit
def fused_fix_batch_kernel(x, r0, C, yl, wl, yr, vr, side, bad):
    # fused_fix_kernel for x in (batch, m) layout: columns r0.. of every system's row minus C[t] * sol
    V = x.shape[0]
    p = np.empty(V)
    q = np.empty(V)
    if _interface(yl, wl, yr, vr, p, q, V):
        bad[0] = 1.0
    sol = p if side == 0 else q
    for v in range(V):
        xv = x[v]
        for t_ in range(C.shape[0]):
            xv[r0 + t_] = xv[r0 + t_] - C[t_, v] * sol[v]


@_njit
def compact_rhs_batch_kernel(f, left, right, c1, c2, rhs):
    # compact_rhs_kernel for (batch, m) rows: left (V, 2) holds columns -2, -1, right (V, 2) columns m, m+1
    V, m = f.shape
    for v in range(V):
        fv = f[v]
        out = rhs[v]
        for i in range(m):
            fm2 = fv[i - 2] if i >= 2 else left[v, i]
            fm1 = fv[i - 1] if i >= 1 else left[v, i + 1]
            fp1 = fv[i + 1] if i + 1 < m else right[v, i + 1 - m]
            fp2 = fv[i + 2] if i + 2 < m else right[v, i + 2 - m]
            out[i] = c1 * (fp1 - fm1) + c2 * (fp2 - fm2)
