"""Device twins (numba.cuda) of the numba kernels in ``cpu.py``: same names, same argument lists.

Imported only on the device path (``gpu`` and ``gpu-sim`` workers), so ``import workbench`` never imports
numba.cuda.  Each CUDA thread takes one line of work and the grid strides over the lines, so any grid is
correct (the simulator launches ``[2, 32]``):

* ``reduce_kernel`` / ``expand_kernel``: one (sub-block, system) pair per thread; the CPU twins' tile
  arguments ``G``, ``Vt`` are accepted and unused.  ``expand_kernel``'s scratch ``cs`` is ``(m, V)`` here
  (row ``i`` of system ``v`` keeps its ``c'``), a ``(Lmax, G, Vt)`` tile on the CPU.
* ``fused_kernel``: one system per thread over the rank's blocks; its ring of ``c'`` and the two edge
  columns are thread-local arrays (``W + H <= _RING`` rows, ``H <= _HALO_MAX``).
* ``fused_fix_kernel``, ``decay_kernel``: one system per thread.

Per system the arithmetic is the CPU twins' in the same order (the row step ``_step`` is the same
function), so answers agree with the CPU path to rounding (bitwise under the simulator).  The
finiteness sums (``chk``) and the dropped couplings (``tau``, ``worst``) gather over threads with
float64 atomics; a NaN enters those maxima as ``inf`` (the CPU path reaches the same verdict through its
finiteness check).  The CPU's layout-specialised variants of the sweeps (``reduce1``, ``reduce1p``,
``reduce_b1`` and their ``expand`` twins) are the same arithmetic in other loop orders: on a device the
general kernels above cover those shapes with one thread per (sub-block, system).
"""

from __future__ import annotations

import math

from numba import cuda, float64

from . import cpu
from .params import _CHK_SCALE, _FUSED_HALOS, _FUSED_WINDOW

#: Thread-local rows of the fused pass: the ring of c' (window + halo) and the edge columns (halo).
_RING = _FUSED_WINDOW + max(_FUSED_HALOS)
_HALO_MAX = max(_FUSED_HALOS)

# Device functions take scalars and are inlined in numba's IR (inline="always"): a device function compiled
# on its own asks the driver for the compute capability, which the GPU-free cuda.compile_ptx check lacks.
# The fused pass's row step is the CPU twin's function.
_step = cuda.jit(device=True, inline="always")(cpu._step.py_func)

_F1, _F2, _F3 = "float64[::1]", "float64[:, ::1]", "float64[:, :, ::1]"
_I1, _I = "int64[::1]", "int64"


def _sig(*args: str) -> str:
    return f"void({', '.join(args)})"


#: Every argument-type combination the rank code launches each kernel with (checked by cuda.compile_ptx).
PTX_SIGNATURES = {
    "reduce_kernel": [_sig(_F2, _F2, _F2, _F3, _I1, _I1, _I1, _F2, _F2, _F3, _F1, _I, _I)],
    "expand_kernel": [_sig(_F2, _F2, _F2, _F3, _I1, _I1, _F3, _F3, _F3, _F2, _I, _I)],
    "fused_kernel": [_sig(_F2, _F2, _F2, _F2, _I1, _I1, _F2, _F2, _F2, _F2, _F1, _F1, _I, _I, _I)],
    "fused_fix_kernel": [_sig(_F2, _I, _F2, _F1, _F1, _F1, _F1, _I, _F1)],
    "decay_kernel": [_sig(_F2, _F2, _F2, _I, _I, _F1)],
}


@cuda.jit(device=True, inline="always")
def _no_nan(t):
    # the maxima gathered with atomics: a NaN counts as unbounded
    return math.inf if t != t else t


@cuda.jit
def reduce_kernel(dl, d, du, b, starts, lens, rows0, RA, RC, RD, chk, G, Vt):
    # sub-block s of system v: the downward sweep leaves its last row as  sa x_first + x_last + sc x_next = sd,
    # the upward sweep its first row as  sa x_prev + x_first + sc x_last = sd; the running sd of each
    # right-hand side lives in its RD row (one writer: this thread)
    S = starts.shape[0]
    V = d.shape[1]
    R = b.shape[1]
    for item in range(cuda.grid(1), S * V, cuda.gridsize(1)):
        s = item // V
        v = item - s * V
        L = lens[s]
        i0 = starts[s]
        acc = 0.0
        sa = 0.0
        sc = 0.0
        r = rows0[s] + (1 if L >= 2 else 0)
        for j in range(L):
            i = i0 + j
            a = dl[i, v]
            c = du[i, v]
            dd = d[i, v]
            if j < 2:
                inv = 1.0 / dd
                sa = a * inv
            else:
                inv = 1.0 / (dd - a * sc)
                sa = -a * sa * inv
            sc = c * inv
            acc += (abs(a) + abs(c) + abs(dd) + abs(inv)) * _CHK_SCALE
            for q in range(R):
                bv = b[i, q, v]
                RD[r, q, v] = bv * inv if j < 2 else (bv - a * RD[r, q, v]) * inv
                acc += abs(bv) * _CHK_SCALE
        RA[r, v] = sa
        RC[r, v] = sc
        if L >= 2:
            r = rows0[s]
            for j in range(L):
                i = i0 + L - 1 - j
                c = du[i, v]
                if j < 2:
                    inv = 1.0 / d[i, v]
                    sc = c * inv
                else:
                    inv = 1.0 / (d[i, v] - c * sa)
                    sc = -c * sc * inv
                    acc += abs(inv) * _CHK_SCALE
                sa = dl[i, v] * inv
                for q in range(R):
                    RD[r, q, v] = b[i, q, v] * inv if j < 2 else (b[i, q, v] - c * RD[r, q, v]) * inv
            RA[r, v] = sa
            RC[r, v] = sc
        cuda.atomic.add(chk, s, acc)


@cuda.jit
def expand_kernel(dl, d, du, b, starts, lens, Y0, Y1, x, cs, G, Vt):
    # the interior of sub-block s of system v, its first and last unknowns known: a Thomas solve
    S = starts.shape[0]
    V = d.shape[1]
    R = b.shape[1]
    for item in range(cuda.grid(1), S * V, cuda.gridsize(1)):
        s = item // V
        v = item - s * V
        L = lens[s]
        i0 = starts[s]
        i1 = i0 + L - 1
        for q in range(R):
            x[i0, q, v] = Y0[s, q, v]
            x[i1, q, v] = Y1[s, q, v]
        cprev = 0.0
        for j in range(1, L - 1):
            i = i0 + j
            piv = d[i, v] if j == 1 else d[i, v] - dl[i, v] * cprev
            inv = 1.0 / piv
            last = j == L - 2
            cprev = 0.0 if last else du[i, v] * inv
            cs[i, v] = cprev
            for q in range(R):
                t = b[i, q, v] - dl[i, v] * x[i - 1, q, v]
                if last:
                    t -= du[i, v] * x[i + 1, q, v]
                x[i, q, v] = t * inv
        for j in range(L - 3, 0, -1):
            i = i0 + j
            for q in range(R):
                x[i, q, v] -= cs[i, v] * x[i + 1, q, v]


@cuda.jit
def fused_kernel(dl, d, du, b, starts, lens, x, VS, WS, edge, chk, tau, Vt, W, H):
    # cpu.fused_kernel for one system per thread (read its comments first): forward elimination into x (b')
    # and the ring rc (c'); every W rows the window is back-substituted from H rows further down; the
    # x_prev column of a block's first H rows (vs) and the x_next column of its last H rows (ws) couple the
    # blocks, inside the rank at once, between ranks through edge, VS and WS.  Vt (the CPU's tile) is unused.
    S = starts.shape[0]
    V = d.shape[1]
    RB = W + H
    rc = cuda.local.array(_RING, float64)
    vs = cuda.local.array(_HALO_MAX, float64)
    ws = cuda.local.array(_HALO_MAX, float64)
    for v in range(cuda.grid(1), V, cuda.gridsize(1)):
        t_halo = 0.0
        t_v = 0.0
        t_w = 0.0
        top_sum = 0.0
        for s in range(S):
            i0 = starts[s]
            L = lens[s]
            cp = 0.0
            bp = 0.0
            vp = -1.0
            k = 0
            j = 0
            while j < L:
                e = min((k + 1) * W + H, L) - 1
                # ---- forward rows j..e: pairs, then the block's last row when L is odd
                while j < e:
                    i = i0 + j
                    a0 = dl[i, v]
                    a1 = dl[i + 1, v]
                    inv0, cc, bb, x[i, v] = _step(a0, d[i, v], du[i, v], b[i, v], cp, bp)
                    rc[j % RB] = cc
                    inv1, cc, bb, x[i + 1, v] = _step(a1, d[i + 1, v], du[i + 1, v], b[i + 1, v], cc, bb)
                    rc[(j + 1) % RB] = cc
                    cp = cc
                    bp = bb
                    if j < H:
                        w0 = -a0 * vp * inv0
                        w1 = -a1 * w0 * inv1
                        vs[j] = w0
                        vs[j + 1] = w1
                        vp = w1
                    j += 2
                if j == e:
                    i = i0 + j
                    a0 = dl[i, v]
                    inv0, cp, bp, x[i, v] = _step(a0, d[i, v], du[i, v], b[i, v], cp, bp)
                    rc[j % RB] = cp
                    if j < H:
                        w0 = -a0 * vp * inv0
                        vs[j] = w0
                        vp = w0
                    j += 1
                # ---- window k: rows r0 .. r1-1 become final (up to the block's edge columns)
                last = e == L - 1
                r0 = k * W
                k += 1
                if last:
                    xn = x[i0 + L - 1, v]
                    top = L - 2
                else:
                    r1 = k * W
                    xn = x[i0 + e, v]
                    pp = abs(rc[e % RB])
                    jj = e - 1
                    while jj > r1:
                        ca = rc[jj % RB]
                        cb = rc[(jj - 1) % RB]
                        xn = x[i0 + jj - 1, v] - cb * (x[i0 + jj, v] - ca * xn)
                        pp *= abs(ca) * abs(cb)
                        jj -= 2
                    if jj == r1:
                        cv = rc[jj % RB]
                        xn = x[i0 + jj, v] - cv * xn
                        pp *= abs(cv)
                    t_halo = max(t_halo, _no_nan(pp))
                    top = r1 - 1
                jj = top
                while jj > r0:
                    ya = x[i0 + jj, v] - rc[jj % RB] * xn
                    x[i0 + jj, v] = ya
                    yb = x[i0 + jj - 1, v] - rc[(jj - 1) % RB] * ya
                    x[i0 + jj - 1, v] = yb
                    xn = yb
                    jj -= 2
                if jj == r0:
                    xn = x[i0 + jj, v] - rc[jj % RB] * xn
                    x[i0 + jj, v] = xn
                top_sum += xn
                if r0 == 0:
                    # v = the x_prev column back-substituted over the first H rows (dropped: |v'_{H-1}|)
                    xn = vs[H - 1]
                    t_v = max(t_v, _no_nan(abs(xn)))
                    for jj in range(H - 2, -1, -1):
                        xn = vs[jj] - rc[jj % RB] * xn
                        vs[jj] = xn
                    if s == 0:
                        edge[0, v] = x[i0, v]
                        edge[1, v] = vs[0]
                        for t_ in range(H):
                            VS[t_, v] = vs[t_]
                    else:
                        # the interface (block s-1 | block s), as fused_fix_kernel solves it between ranks
                        ip = starts[s - 1] + lens[s - 1] - H
                        yl = x[ip + H - 1, v]
                        yr = x[i0, v]
                        det = 1.0 - ws[H - 1] * vs[0]
                        p = (yl - ws[H - 1] * yr) / det
                        q = (yr - vs[0] * yl) / det
                        if det == 0.0:
                            t_halo = math.inf
                        for t_ in range(H):
                            x[ip + t_, v] = x[ip + t_, v] - ws[t_] * q
                        for t_ in range(H):
                            x[i0 + t_, v] = x[i0 + t_, v] - vs[t_] * p
                if last:
                    # w = the x_next column over the last H rows (dropped: |w_{L-H}|)
                    xn = rc[(L - 1) % RB]
                    ws[H - 1] = xn
                    for t_ in range(H - 2, -1, -1):
                        xn = -rc[(L - H + t_) % RB] * xn
                        ws[t_] = xn
                    t_w = max(t_w, _no_nan(abs(xn)))
                    if s == S - 1:
                        edge[2, v] = x[i0 + L - 1, v]
                        edge[3, v] = ws[H - 1]
                        for t_ in range(H):
                            WS[t_, v] = ws[t_]
        cuda.atomic.add(chk, 0, top_sum)
        cuda.atomic.max(tau, 0, t_halo)
        cuda.atomic.max(tau, 1, t_v)
        cuda.atomic.max(tau, 2, t_w)


@cuda.jit
def fused_fix_kernel(x, r0, C, yl, wl, yr, vr, side, bad):
    # an interface between ranks for system v: cpu.fused_fix_kernel's 2x2 solve and column correction
    V = x.shape[1]
    for v in range(cuda.grid(1), V, cuda.gridsize(1)):
        det = 1.0 - wl[v] * vr[v]
        p = (yl[v] - wl[v] * yr[v]) / det
        q = (yr[v] - vr[v] * yl[v]) / det
        if det == 0.0:
            cuda.atomic.max(bad, 0, 1.0)
        sol = p if side == 0 else q
        for t_ in range(C.shape[0]):
            x[r0 + t_, v] = x[r0 + t_, v] - C[t_, v] * sol


@cuda.jit
def decay_kernel(dl, d, du, skip, upto, worst):
    # cpu.decay_kernel for system v: the products of |c'| and |a / pivot| over rows skip..upto-1, maxed into
    # worst[0]
    V = d.shape[1]
    for v in range(cuda.grid(1), V, cuda.gridsize(1)):
        cp = 0.0
        pc = 1.0
        pa = 1.0
        for i in range(upto):
            ar = dl[i, v]
            if i < skip:
                cp = du[i, v] / (d[i, v] - ar * cp)
            else:
                inv = 1.0 / (d[i, v] - ar * cp)
                cp = du[i, v] * inv
                pc *= abs(cp)
                pa *= abs(ar * inv)
        cuda.atomic.max(worst, 0, _no_nan(max(pc, pa)))
