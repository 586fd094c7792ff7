"""Device twins of the coloring kernels (numba.cuda), launched by the rank body on "gpu" and "gpu-sim" workers.

Same names and argument lists as :mod:`.cpu`; every kernel is a grid-stride
loop (correct for any grid) with one thread per listed vertex, writing only
that vertex's own slots.  The vertex space and the constraint sets are the
ones described in :mod:`.cpu`.

The CPU first-fit colors its batch in sequence; the device one is
speculative (Gebremedhin-Manne, as in the paper's GPU kernels): every vertex
of the batch picks the smallest color free among the colors fixed before the
launch and writes it *tentatively* as ``-2 - c``.  Tentative colors are
negative, so a thread never lets another batch vertex constrain it, whether
that vertex has written yet or not: the result does not depend on thread
timing.  :func:`_tentative_losers` then marks the batch vertices that share
their tentative color with a higher-priority batch vertex in their constraint
set (the priority of :func:`_find_losers`); the caller commits the others and
repeats with the losers.  The highest-priority vertex of any conflict always
commits, so the loop ends.

This module is imported only on the device path (it imports numba.cuda).
"""

from __future__ import annotations

import numpy as np
from numba import cuda

_WINDOW = 32                  # colors examined per pass over a constraint set
_FULL = (1 << _WINDOW) - 1    # a window whose colors are all taken
#: Threads sharing one vertex in the ``_wide`` kernels (a block per vertex).
WIDE = 128

_I = "int64[::1]"
PTX_SIGNATURES = {
    "_first_fit": [f"void({_I}, {_I}, {_I}, {_I}, {_I}, int64, boolean, {_I})"],
    "_tentative_losers": [f"void({_I}, {_I}, {_I}, {_I}, {_I}, int64, boolean, {_I}, {_I}, {_I}, {_I}, boolean, "
                          "boolean[::1])"],
    "_find_losers": [f"void({_I}, int64, {_I}, {_I}, {_I}, {_I}, int64, boolean, {_I}, {_I}, {_I}, {_I}, boolean, "
                     "boolean[::1])"],
    "_has_remote": [f"void(int64, {_I}, {_I}, {_I}, {_I}, int64, boolean, boolean[::1])"],
}
PTX_SIGNATURES["_first_fit_wide"] = PTX_SIGNATURES["_first_fit"]
PTX_SIGNATURES["_tentative_losers_wide"] = PTX_SIGNATURES["_tentative_losers"]


@cuda.jit(device=True, inline="always")  # inlined: a called device function makes compile_ptx look for a driver
def _bit(c, base):  # pragma: no cover - device
    # color c's bit in the window [base, base + _WINDOW); uncolored and tentative (< 0) take none
    if c >= base and c < base + _WINDOW:
        return 1 << (c - base)
    return 0


@cuda.jit(device=True, inline="always")  # inlined: a called device function makes compile_ptx look for a driver
def _loses(du, dw, hu, hw, gu, gw, use_degree):  # pragma: no cover - device
    # the order of cpu._loses, on scalars: lower degree, then lower hash, then lower id loses
    if use_degree and du != dw:
        return du < dw
    if hu != hw:
        return hu < hw
    return gu < gw


@cuda.jit(device=True, inline="always")
def _taken(u, first, step, ip1, ix1, ip2, ix2, depth, mids_are_vertices, colors, base):  # pragma: no cover - device
    # the colors of [base, base + _WINDOW) fixed in u's constraint set, over its entries first, first + step, ...
    mask = 0
    for p in range(ip1[u] + first, ip1[u + 1], step):
        m = ix1[p]
        if depth == 1 or mids_are_vertices:
            if m != u:
                mask |= _bit(colors[m], base)
        if depth == 2:
            for q in range(ip2[m], ip2[m + 1]):
                w = ix2[q]
                if w != u:
                    mask |= _bit(colors[w], base)
    return mask


@cuda.jit(device=True, inline="always")
def _first_free(mask, base):  # pragma: no cover - device
    # the smallest color >= base whose bit in the window mask is clear
    c = base
    while (mask >> (c - base)) & 1:
        c += 1
    return c


@cuda.jit(device=True, inline="always")
def _beaten(u, cu, first, step, ip1, ix1, ip2, ix2, depth, mids_are_vertices, colors, deg, hsh, gid,
            use_degree):  # pragma: no cover - device
    # some vertex of u's constraint set (entries first, first + step, ...) holds color cu with priority over u
    for p in range(ip1[u] + first, ip1[u + 1], step):
        m = ix1[p]
        if depth == 1 or mids_are_vertices:
            if m != u and colors[m] == cu and _loses(deg[u], deg[m], hsh[u], hsh[m], gid[u], gid[m], use_degree):
                return True
        if depth == 2:
            for q in range(ip2[m], ip2[m + 1]):
                w = ix2[q]
                if w != u and colors[w] == cu and _loses(deg[u], deg[w], hsh[u], hsh[w], gid[u], gid[w], use_degree):
                    return True
    return False


@cuda.jit
def _first_fit(order, ip1, ix1, ip2, ix2, depth, mids_are_vertices, colors):  # pragma: no cover - device
    # speculative first fit: colors[u] = -2 - (smallest color >= 0 not fixed in u's constraint set)
    for t in range(cuda.grid(1), order.shape[0], cuda.gridsize(1)):
        u = order[t]
        base = 0
        while True:
            mask = _taken(u, 0, 1, ip1, ix1, ip2, ix2, depth, mids_are_vertices, colors, base)
            if mask != _FULL:
                break
            base += _WINDOW
        colors[u] = -2 - _first_free(mask, base)


@cuda.jit
def _tentative_losers(order, ip1, ix1, ip2, ix2, depth, mids_are_vertices, colors, deg, hsh, gid, use_degree,
                      out):  # pragma: no cover - device
    # out[u]: some other vertex of u's constraint set holds u's tentative color and has priority over u
    for t in range(cuda.grid(1), order.shape[0], cuda.gridsize(1)):
        u = order[t]
        out[u] = _beaten(u, colors[u], 0, 1, ip1, ix1, ip2, ix2, depth, mids_are_vertices, colors, deg, hsh, gid,
                         use_degree)


# The _wide twins give the same answers with a block per vertex, its threads striding over the vertex's
# constraint set.  One thread per vertex left a pass waiting on the batch's largest scan: the first device
# run took 22 s at SCALE 22 (0.32 s at SCALE 16), and a host emulation of the passes puts ~3e7 dependent
# reads on that critical path at SCALE 22 (max degree x windows of colors, summed over ~300 passes).


@cuda.jit
def _first_fit_wide(order, ip1, ix1, ip2, ix2, depth, mids_are_vertices, colors):  # pragma: no cover - device
    # _first_fit, a block per vertex: the threads' masks meet in shared memory
    mask = cuda.shared.array(1, dtype=np.int64)
    tid, width = cuda.threadIdx.x, cuda.blockDim.x
    for t in range(cuda.blockIdx.x, order.shape[0], cuda.gridDim.x):
        u = order[t]
        base = 0
        while True:
            if tid == 0:
                mask[0] = 0
            cuda.syncthreads()
            mine = _taken(u, tid, width, ip1, ix1, ip2, ix2, depth, mids_are_vertices, colors, base)
            if mine != 0:
                cuda.atomic.or_(mask, 0, mine)
            cuda.syncthreads()
            seen = mask[0]
            cuda.syncthreads()            # all have read the mask before thread 0 clears it again
            if seen != _FULL:
                break
            base += _WINDOW
        if tid == 0:
            colors[u] = -2 - _first_free(seen, base)


@cuda.jit
def _tentative_losers_wide(order, ip1, ix1, ip2, ix2, depth, mids_are_vertices, colors, deg, hsh, gid, use_degree,
                           out):  # pragma: no cover - device
    # _tentative_losers, a block per vertex: any thread that finds a winner over u raises the block's flag
    beaten = cuda.shared.array(1, dtype=np.int32)
    tid, width = cuda.threadIdx.x, cuda.blockDim.x
    for t in range(cuda.blockIdx.x, order.shape[0], cuda.gridDim.x):
        u = order[t]
        cu = colors[u]
        if tid == 0:
            beaten[0] = 0
        cuda.syncthreads()
        if _beaten(u, cu, tid, width, ip1, ix1, ip2, ix2, depth, mids_are_vertices, colors, deg, hsh, gid,
                   use_degree):
            beaten[0] = 1
        cuda.syncthreads()
        if tid == 0:
            out[u] = beaten[0] != 0
        cuda.syncthreads()                # thread 0 has read the flag before the next vertex clears it


@cuda.jit
def _find_losers(cand, n_loc, ip1, ix1, ip2, ix2, depth, mids_are_vertices, colors, deg, hsh, gid, use_degree,
                 out):  # pragma: no cover - device
    # out[u]: a ghost of u's constraint set holds u's color and has priority over u (cpu._find_losers per thread)
    for t in range(cuda.grid(1), cand.shape[0], cuda.gridsize(1)):
        u = cand[t]
        cu = colors[u]
        if cu < 0:
            continue
        lost = False
        for p in range(ip1[u], ip1[u + 1]):
            m = ix1[p]
            if depth == 1 or mids_are_vertices:
                if m >= n_loc and colors[m] == cu and _loses(deg[u], deg[m], hsh[u], hsh[m], gid[u], gid[m],
                                                             use_degree):
                    lost = True
                    break
            if depth == 2:
                for q in range(ip2[m], ip2[m + 1]):
                    w = ix2[q]
                    if w >= n_loc and colors[w] == cu and _loses(deg[u], deg[w], hsh[u], hsh[w], gid[u], gid[w],
                                                                 use_degree):
                        lost = True
                        break
                if lost:
                    break
        out[u] = lost


@cuda.jit
def _has_remote(n_loc, ip1, ix1, ip2, ix2, depth, mids_are_vertices, out):  # pragma: no cover - device
    # out[u]: u's constraint set reaches a ghost (u is on the boundary)
    for u in range(cuda.grid(1), n_loc, cuda.gridsize(1)):
        found = False
        for p in range(ip1[u], ip1[u + 1]):
            m = ix1[p]
            if (depth == 1 or mids_are_vertices) and m >= n_loc:
                found = True
                break
            if depth == 2:
                for q in range(ip2[m], ip2[m + 1]):
                    if ix2[q] >= n_loc:
                        found = True
                        break
                if found:
                    break
        out[u] = found
