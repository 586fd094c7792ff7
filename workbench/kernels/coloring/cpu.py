"""Worker-local kernels of the coloring rank body (numba; the numba.cuda twins in cuda.py take the same arguments).

Vertex space of a rank: owned vertices 0..n_loc-1, then its ghosts.  A
vertex u reaches its constraint set through "mids" ix1[ip1[u]:ip1[u+1]]:
depth 1 -> the mids themselves (distance-1 neighbours); depth 2 -> also the
mids' adjacency ix2[ip2[m]:ip2[m+1]] (for distance 2 the mids are vertices
and constrain too; for partial distance 2 they are matrix rows and do not).
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True)
def _first_fit(order, ip1, ix1, ip2, ix2, depth, mids_are_vertices, colors):  # pragma: no cover - numba
    forbid = np.zeros(len(colors) + 1, dtype=np.int64)
    for t in range(len(order)):
        u = order[t]
        stamp = t + 1
        for p in range(ip1[u], ip1[u + 1]):
            m = ix1[p]
            if depth == 1 or mids_are_vertices:
                if m != u:
                    c = colors[m]
                    if c >= 0:
                        forbid[c] = stamp
            if depth == 2:
                for q in range(ip2[m], ip2[m + 1]):
                    w = ix2[q]
                    if w != u:
                        c = colors[w]
                        if c >= 0:
                            forbid[c] = stamp
        c = 0
        while forbid[c] == stamp:
            c += 1
        colors[u] = c


@numba.njit(cache=True, inline="always")
def _loses(u, w, deg, hsh, gid, use_degree):  # pragma: no cover - numba
    if use_degree and deg[u] != deg[w]:
        return deg[u] < deg[w]
    if hsh[u] != hsh[w]:
        return hsh[u] < hsh[w]
    return gid[u] < gid[w]


@numba.njit(cache=True)
def _find_losers(cand, n_loc, ip1, ix1, ip2, ix2, depth, mids_are_vertices, colors, deg, hsh, gid, use_degree,
                 out):  # pragma: no cover - numba
    for t in range(len(cand)):
        u = cand[t]
        cu = colors[u]
        if cu < 0:
            continue
        lost = False
        for p in range(ip1[u], ip1[u + 1]):
            m = ix1[p]
            if depth == 1 or mids_are_vertices:
                if m >= n_loc and colors[m] == cu and _loses(u, m, deg, hsh, gid, use_degree):
                    lost = True
                    break
            if depth == 2:
                for q in range(ip2[m], ip2[m + 1]):
                    w = ix2[q]
                    if w >= n_loc and colors[w] == cu and _loses(u, w, deg, hsh, gid, use_degree):
                        lost = True
                        break
                if lost:
                    break
        out[u] = lost


@numba.njit(cache=True)
def _has_remote(n_loc, ip1, ix1, ip2, ix2, depth, mids_are_vertices, out):  # pragma: no cover - numba
    # out[u] (zeroed by the caller): u's constraint set reaches a ghost
    for u in range(n_loc):
        for p in range(ip1[u], ip1[u + 1]):
            m = ix1[p]
            if (depth == 1 or mids_are_vertices) and m >= n_loc:
                out[u] = True
                break
            if depth == 2:
                for q in range(ip2[m], ip2[m + 1]):
                    if ix2[q] >= n_loc:
                        out[u] = True
                        break
                if out[u]:
                    break
