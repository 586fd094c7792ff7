"""Worker-local BFS kernels on the CPU (numba): top-down frontier expansion
and bottom-up parent checks."""

from __future__ import annotations

import numba

# --------------------------------------------------------------------------
# Worker-local kernels: numba on the CPU, vectorised xp (numpy/cupy) otherwise
# --------------------------------------------------------------------------


@numba.njit(cache=True, nogil=True)
def _td_numba(ptr, idx, front, visited, out_rows, out_par):  # pragma: no cover - compiled
    cnt = 0
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
    return cnt, ex


@numba.njit(cache=True, nogil=True)
def _bu_numba(ptr, idx, fbits, visited, out_rows, out_par):  # pragma: no cover - compiled
    cnt = 0
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
    return cnt, ex
