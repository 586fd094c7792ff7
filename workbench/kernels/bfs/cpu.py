"""Worker-local BFS kernels on the CPU (numba): top-down frontier expansion
and bottom-up parent checks.

Their device twins, with the same names and arguments, are in ``cuda.py``.
Both append the vertices they discover to the queue ``out_rows``/``out_par``
(vertex, parent) at ``counts[0]``, advance ``counts[0]`` past them and add the
edges they examined to ``counts[1]``; the caller zeroes ``counts`` per level.
"""

from __future__ import annotations

import numba


@numba.njit(cache=True, nogil=True)
def top_down(ptr, idx, front, visited, out_rows, out_par, counts):  # pragma: no cover - compiled
    """Every unvisited neighbour ``idx[ptr[f]:ptr[f+1]]`` of a frontier vertex ``f`` is claimed once."""
    cnt = counts[0]
    ex = 0
    for f in front:
        for k in range(ptr[f], ptr[f + 1]):
            r = idx[k]
            if not visited[r]:
                visited[r] = True
                out_rows[cnt] = r
                out_par[cnt] = f
                cnt += 1
        ex += ptr[f + 1] - ptr[f]
    counts[0] = cnt
    counts[1] += ex


@numba.njit(cache=True, nogil=True)
def bottom_up(ptr, idx, fbits, visited, out_rows, out_par, counts):  # pragma: no cover - compiled
    """Every unvisited row ``r`` scans its neighbours for one in the frontier ``fbits`` and stops at the first."""
    cnt = counts[0]
    ex = 0
    for r in range(len(ptr) - 1):
        if visited[r]:
            continue
        k = ptr[r]
        end = ptr[r + 1]
        while k < end:
            c = idx[k]
            k += 1
            if fbits[c]:
                visited[r] = True
                out_rows[cnt] = r
                out_par[cnt] = c
                cnt += 1
                break
        ex += k - ptr[r]
    counts[0] = cnt
    counts[1] += ex
