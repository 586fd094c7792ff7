"""Worker-local BFS kernels on the CPU (numba): top-down frontier expansion
and bottom-up parent checks.

Their device twins, with the same names and arguments, are in ``cuda.py``.
Both append the vertices they discover to the queue ``out_rows``/``out_par``
(vertex, parent) at ``counts[0]``, advance ``counts[0]`` past them and add the
edges they examined to ``counts[1]``; the caller zeroes ``counts`` per level.

The bottom-up step reads the frontier as a packed bitmap (numpy's
``packbits`` order: bit ``7 - c % 8`` of byte ``c // 8``), which stays in
cache where a byte per column does not, and visits only the candidate rows
``cand`` (rows with edges, not yet visited when the list was last compacted):
the rows it leaves unvisited are appended to ``keep`` at ``counts[2]``,
so each bottom-up level sweeps only what the previous one left.  Every row
first probes ``hub[r]``, its neighbour of highest degree, which is in a heavy
frontier far more often than a random neighbour; a row that finds its hub in
the frontier reads nothing of its edge list.
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
def bottom_up(ptr, idx, hub, fbits, cand, visited, out_rows, out_par, keep, counts):  # pragma: no cover - compiled
    """Every unvisited candidate row ``r`` looks for a neighbour in the packed frontier ``fbits``: its hub
    first, then its edges in order, stopping at the first; the rows still unvisited go to ``keep``."""
    cnt = counts[0]
    ex = 0
    nk = counts[2]
    for t in range(cand.shape[0]):
        r = cand[t]
        if visited[r]:
            continue  # claimed by a top-down level since the list was compacted: never a candidate again
        h = hub[r]
        ex += 1
        if fbits[h >> 3] & (128 >> (h & 7)):
            visited[r] = True
            out_rows[cnt] = r
            out_par[cnt] = h
            cnt += 1
            continue
        k = ptr[r]
        end = ptr[r + 1]
        found = False
        while k < end:
            c = idx[k]
            k += 1
            if fbits[c >> 3] & (128 >> (c & 7)):
                visited[r] = True
                out_rows[cnt] = r
                out_par[cnt] = c
                cnt += 1
                found = True
                break
        ex += k - ptr[r]
        if not found:
            keep[nk] = r
            nk += 1
    counts[0] = cnt
    counts[1] += ex
    counts[2] = nk


@numba.njit(cache=True, nogil=True)
def row_hubs(ptr, idx, col_deg, hub):  # pragma: no cover - compiled
    """``hub[r]``: the neighbour of row ``r`` with the highest ``col_deg`` (the first of equals).

    Run once per prepared block, on the host, for CPU and device workers alike (the device path
    moves the result to the device with the rest of the block)."""
    for r in range(ptr.shape[0] - 1):
        best = -1
        h = 0
        for k in range(ptr[r], ptr[r + 1]):
            c = idx[k]
            if col_deg[c] > best:
                best = col_deg[c]
                h = c
        hub[r] = h


@numba.njit(cache=True, nogil=True)
def component_bfs(ptr, idx, start, order, parent, level):  # pragma: no cover - compiled
    """Serial BFS of ``start``'s component of a small CSR graph (``parent`` and ``level`` -1 on entry):
    its vertices in BFS order into ``order``; returns how many.  Host-only on every path: it searches the
    replicated rest of the graph outside the giant component (``ranks._rest_of_graph``), which is tiny."""
    parent[start] = start
    level[start] = 0
    order[0] = start
    head, tail = 0, 1
    while head < tail:
        u = order[head]
        head += 1
        for k in range(ptr[u], ptr[u + 1]):
            v = idx[k]
            if parent[v] < 0:
                parent[v] = u
                level[v] = level[u] + 1
                order[tail] = v
                tail += 1
    return tail
