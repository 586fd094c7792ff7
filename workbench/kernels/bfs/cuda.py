"""Worker-local BFS kernels on a device (numba.cuda): the twins of ``cpu.py``,
with the same names and arguments.

Imported only on the device path (``gpu``, or ``gpu-sim`` under numba's CUDA
simulator).  The frontier stays in device memory: the top-down input is a
queue of local column ids, the bottom-up input a packed bitmap ``fbits`` read
by the candidate rows ``cand`` (see ``cpu.py``), and the output of both is the
queue ``out_rows``/``out_par`` (vertex, parent).  Only ``counts`` (int64:
queue tail, edges examined, candidates kept) goes to the host per level.

``visited`` is int32 here (one word per row) so that a vertex is claimed with
an atomic exchange, exactly once, however many frontier vertices reach it in
the same level; the queue tail and the edge count advance with atomic adds.
The order of the queue, and so which of several frontier neighbours becomes a
vertex's parent, depends on the schedule (every choice is a valid BFS tree);
levels and counts do not.
"""

from __future__ import annotations

from numba import cuda

#: Threads per frontier vertex in the top-down step: a hub's edges are spread over
#: a warp's worth of threads (adjacent threads read adjacent edges), not left to one.
LANES = 32


@cuda.jit
def top_down(ptr, idx, front, visited, out_rows, out_par, counts):  # pragma: no cover - device code
    """Every unvisited neighbour ``idx[ptr[f]:ptr[f+1]]`` of a frontier vertex ``f`` is claimed once."""
    for t in range(cuda.grid(1), front.shape[0] * LANES, cuda.gridsize(1)):
        f = front[t // LANES]
        lane = t % LANES
        lo = ptr[f]
        hi = ptr[f + 1]
        if lane == 0:
            cuda.atomic.add(counts, 1, hi - lo)
        for k in range(lo + lane, hi, LANES):
            r = idx[k]
            # the plain read skips most visited rows without an atomic; the exchange decides the race
            if visited[r] == 0 and cuda.atomic.exch(visited, r, 1) == 0:
                pos = cuda.atomic.add(counts, 0, 1)
                out_rows[pos] = r
                out_par[pos] = f


@cuda.jit
def bottom_up(ptr, idx, hub, fbits, cand, visited, out_rows, out_par, keep, counts):  # pragma: no cover - device code
    """Every unvisited candidate row ``r`` looks for a neighbour in the packed frontier ``fbits``: its hub
    first, then its edges in order, stopping at the first; the rows still unvisited go to ``keep``."""
    ex = 0
    for t in range(cuda.grid(1), cand.shape[0], cuda.gridsize(1)):
        r = cand[t]
        if visited[r] != 0:
            continue
        h = hub[r]
        ex += 1
        if fbits[h >> 3] & (128 >> (h & 7)):
            visited[r] = 1  # row r belongs to this thread alone: no race
            pos = cuda.atomic.add(counts, 0, 1)
            out_rows[pos] = r
            out_par[pos] = h
            continue
        lo = ptr[r]
        hi = ptr[r + 1]
        k = lo
        found = False
        while k < hi:
            c = idx[k]
            k += 1
            if fbits[c >> 3] & (128 >> (c & 7)):
                visited[r] = 1
                pos = cuda.atomic.add(counts, 0, 1)
                out_rows[pos] = r
                out_par[pos] = c
                found = True
                break
        ex += k - lo
        if not found:  # still a candidate; the order of keep depends on the schedule, its contents do not
            keep[cuda.atomic.add(counts, 2, 1)] = r
    cuda.atomic.add(counts, 1, ex)


# Argument types the rank bodies launch with: CSR/CSC pointers int64, column ids, hubs, candidate rows
# and the output queues int32 (int64 past 2**31 rows or columns), frontier ids int64, the bitmap uint8.
_IDX = ("int32", "int64")
PTX_SIGNATURES = {
    "top_down": [f"void(int64[::1], {t}[::1], int64[::1], int32[::1], {t}[::1], {t}[::1], int64[::1])"
                 for t in _IDX],
    "bottom_up": [f"void(int64[::1], {t}[::1], {t}[::1], uint8[::1], {t}[::1], int32[::1], {t}[::1], {t}[::1], "
                  f"{t}[::1], int64[::1])" for t in _IDX],
}
