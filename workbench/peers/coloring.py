"""Peer runners for graph coloring: single-node greedy colorings by igraph and
networkx, the references for color counts and times in the coloring benchmark
and notebook (:func:`workbench.color` is what they are compared with)."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = ["sequential_greedy", "to_igraph"]


def to_igraph(A: Any) -> Any:
    """An undirected igraph Graph with the pattern of symmetric ``A`` (for the peer runs)."""
    import igraph as ig

    coo = sp.triu(sp.csr_matrix(A), k=1).tocoo()
    return ig.Graph(n=A.shape[0], edges=np.column_stack([coo.row, coo.col]))


def sequential_greedy(A: Any, method: str = "igraph") -> np.ndarray:
    """Single-node greedy coloring by a peer library, the reference for color counts.

    ``method``: ``"igraph"`` (``vertex_coloring_greedy``, COLORED_NEIGHBORS),
    ``"igraph-dsatur"``, or ``"nx-<strategy>"`` (networkx ``greedy_color``,
    e.g. ``"nx-largest_first"``, ``"nx-smallest_last"``).  ``A`` may also be a
    prebuilt igraph Graph.
    """
    if method.startswith("igraph"):
        g = A if not sp.issparse(A) else to_igraph(A)
        how = "DSATUR" if method == "igraph-dsatur" else "COLORED_NEIGHBORS"
        return np.asarray(g.vertex_coloring_greedy(method=how), dtype=np.int64)
    if method.startswith("nx-"):
        import networkx as nx

        d = nx.greedy_color(nx.from_scipy_sparse_array(sp.csr_matrix(A)), strategy=method[3:])
        out = np.zeros(A.shape[0], dtype=np.int64)
        out[list(d)] = list(d.values())
        return out
    raise ValueError(f"method must be 'igraph', 'igraph-dsatur' or 'nx-<strategy>', got {method!r}")
