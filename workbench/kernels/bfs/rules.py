"""The five Graph500 BFS validation rules on one row block: the host validator
(:func:`workbench.kernels.bfs.validate_bfs`) and the ranks of :func:`graph500` share them."""

from __future__ import annotations

import math

import numpy as np

# --------------------------------------------------------------------------
# The five rules on one row block (host validator and the workers share it)
# --------------------------------------------------------------------------


_RULES = ("1: tree rooted at source, levels = depths", "2: tree edges span one level",
          "3: graph edges span at most one level", "4: tree spans the component",
          "5: parent edges exist in the graph")


def _tree_depth(parent: np.ndarray, source: int) -> tuple[np.ndarray, int]:
    """Depth of every reached vertex by pointer jumping; (depth, #vertices not reaching the root)."""
    n = len(parent)
    reached = parent >= 0
    bad_ptr = reached & ((parent >= n) | (parent < 0))
    par = np.where(reached & ~bad_ptr, parent, -1)
    jump = np.where(reached, par, np.arange(n))
    jump[source] = source
    dist = np.where(reached & (np.arange(n) != source), 1, 0).astype(np.int64)
    for _ in range(int(math.log2(max(n, 2))) + 2):
        ok = jump >= 0
        j = np.where(ok, jump, 0)
        dist = np.where(ok, dist + dist[j], dist)
        jump = np.where(ok, jump[j], -1)
    stuck = reached & (jump != source)
    depth = np.where(reached & ~stuck, dist, -1)
    return depth, int(stuck.sum() + bad_ptr.sum())


def _check_block(indptr: np.ndarray, indices: np.ndarray, row_lo: int, parent: np.ndarray,
                 level: np.ndarray | None, source: int) -> dict:
    """Violation counts per rule for rows ``row_lo:row_lo+len(indptr)-1`` (global column ids)."""
    n = len(parent)
    counts = dict.fromkeys(_RULES, 0)
    depth, stuck = _tree_depth(parent, source)
    counts[_RULES[0]] += int(parent[source] != source) + stuck
    if level is not None:
        counts[_RULES[0]] += int(((level >= 0) != (depth >= 0)).sum() + ((level >= 0) & (level != depth)).sum())
    lvl = depth if level is None else level
    nrows = len(indptr) - 1
    vs = np.arange(row_lo, row_lo + nrows, dtype=np.int64)
    # rule 2 on the block's own vertices: level(v) == level(parent(v)) + 1
    pv = parent[vs]
    tree = (pv >= 0) & (vs != source) & (pv < n)
    counts[_RULES[1]] += int((lvl[vs[tree]] != lvl[pv[tree]] + 1).sum())
    rows = np.repeat(vs, np.diff(indptr))
    cols = indices.astype(np.int64)
    lr, lc = lvl[rows], lvl[cols]
    both = (lr >= 0) & (lc >= 0)
    counts[_RULES[2]] += int((both & (np.abs(lr - lc) > 1)).sum())
    counts[_RULES[3]] += int(((lr >= 0) != (lc >= 0)).sum())
    # rule 5: (v, parent v) is an edge; row-major keys are sorted when rows' indices are
    keys = (rows - row_lo) * n + cols
    if len(keys) > 1 and not bool((keys[1:] >= keys[:-1]).all()):
        keys = np.sort(keys)
    want = (vs[tree] - row_lo) * n + pv[tree]
    at = np.searchsorted(keys, want)
    found = (at < len(keys)) & (keys[np.minimum(at, len(keys) - 1)] == want) if len(keys) else np.zeros(len(want), bool)
    counts[_RULES[4]] += int((~found).sum())
    return counts
