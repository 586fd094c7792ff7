"""Distributed distance-1, distance-2 and partial distance-2 graph coloring.

Reproduces the speculative bulk-synchronous scheme of "Parallel Graph
Coloring Algorithms for Distributed GPU Environments" (Bogle, Boman, Devine,
Rajamanickam, Slota; the Zoltan2 D1/D2/PD2 algorithms), itself after
Gebremedhin and Manne:

1. Each rank owns a 1-D block of vertices (columns, for partial distance-2)
   plus ghost layers: one for distance-1, two (the ghosts' full adjacency)
   for distance-2 and partial distance-2.
2. Every rank colors its owned vertices first-fit, largest degree first,
   holding the ghosts' colors fixed (unknown ghosts do not constrain): one
   degree class (octave) a round, a class with many boundary vertices in
   supersteps of 4096 of them or more, so fewer vertices of a round can
   collide with another rank's (Bozdag et al.'s supersteps).
3. Ranks exchange the colors of their boundary vertices with the ranks that
   hold them as ghosts, then each rank uncolors the owned vertices that lose
   a conflict: the lower-degree vertex loses (the paper's communication
   reducing heuristic), ties broken by a hash of the global id, then the id.
4. Only losers are recolored and only changed colors are sent; the loop ends
   when an allreduce of the recolor count is zero.

The whole loop is one SPMD group (:mod:`workbench.comms`); Dask only places
the blocks and launches the ranks.

Examples
--------
>>> import workbench as wb
>>> with wb.cluster(n_workers=2, quiet=True) as client:          # doctest: +SKIP
...     A = wb.data.rmat(12, seed=1)
...     c = wb.color(A, distance=1, client=client)
...     wb.validate_coloring(A, c.colors, distance=1)
True
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from ... import comms
from ...backend import concatenate, to_host
from ...cluster import default_client
from ...partition import (
    BlockGrid,
    RowBlocks,
    block_offsets,
    check_entries,
    check_one_per_worker,
    check_symmetric,
    distribute,
    edge_pattern,
    pattern_symmetric,
    resilient,
)
from .ranks import _color_rank, _setup_rank, priority_hash

__all__ = ["color", "validate_coloring", "ColoringResult", "priority_hash"]

_DISTANCES = (1, 2, "partial2")
_TIE_BREAKS = ("degree", "random")


@dataclass
class ColoringResult:
    """A coloring and how it was obtained.

    Attributes
    ----------
    colors : ndarray of int64
        Color (>= 0) of every vertex, or of every column for ``"partial2"``.
    n_colors : int
        Number of distinct colors used (``colors.max() + 1``).
    distance : int or str
        ``1``, ``2`` or ``"partial2"``.
    stats : dict
        ``backend`` (the workers' path: "cpu", "gpu" or "gpu-sim"),
        ``seconds``, ``edges_per_second``, ``bytes_moved``, ``rounds``
        (color exchanges), ``conflicts`` (global losers found after each
        exchange but the last), ``recolored``, ``speculative_passes``
        (device paths: local first-fit passes, summed over ranks),
        ``n_workers``, ``workers`` and ``vertices_per_worker`` (who colored
        what), ``tie_break``, ``setup_seconds`` (slowest rank's ghost layers,
        subscriptions, degree order and renumbering of its vertices in that
        order; 0.0 and ``setup_reused`` True when an earlier call on the same
        container did them), ``color_seconds`` (slowest rank's rounds).
    """

    colors: np.ndarray
    n_colors: int
    distance: int | str
    stats: dict = field(default_factory=dict)


@resilient
def color(graph: Any, *, distance: int | str = 1, client: Any = None, tie_break: str = "degree",
          max_rounds: int = 500) -> ColoringResult:
    """Color a distributed graph (distance 1 or 2) or the columns of a sparse matrix (partial distance 2).

    Parameters
    ----------
    graph : scipy.sparse matrix or RowBlocks
        For ``distance`` 1 and 2: a square adjacency matrix with a symmetric
        pattern (diagonal entries are ignored).  For ``"partial2"``: any
        ``(m, n)`` sparse matrix; its columns are colored so that two columns
        sharing a nonzero row differ (Jacobian compression).  Host matrices
        are distributed by rows first; :class:`~workbench.partition.RowBlocks`
        are used in place (their symmetry is checked on the workers unless
        ``graph.symmetric`` is True).
    distance : {1, 2, "partial2"}
        Kind of coloring.
    client : distributed.Client, optional
        Default: the cluster that holds the distributed inputs, else the current client.
    tie_break : {"degree", "random"}
        Who loses a conflict: the lower-degree vertex (then a hash of the id),
        or the hash alone.
    max_rounds : int
        Safety cap on conflict-resolution rounds, the exchanges after every
        degree class has had its pass (the loop provably ends: the
        highest-priority recolored vertex never loses again).

    Returns
    -------
    ColoringResult
        ``colors`` (int64, host), ``n_colors`` and ``stats``.

    Raises
    ------
    ValueError
        Unknown ``distance``/``tie_break``; a non-square or non-symmetric
        graph for distance 1 or 2.
    TypeError
        ``graph`` is not a sparse matrix or CSR row blocks.

    Examples
    --------
    >>> A = wb.data.rmat(10, seed=1)                                 # doctest: +SKIP
    >>> c = wb.color(A, distance=2, client=client)                   # doctest: +SKIP
    >>> wb.validate_coloring(A, c.colors, distance=2)                # doctest: +SKIP
    True
    """
    kind, tie_break = _check_args(graph, distance, tie_break, max_rounds)
    client = default_client(client, graph)
    t0 = time.perf_counter()
    if isinstance(graph, RowBlocks):
        G = graph
        if kind != "partial2" and not check_symmetric(G, client):   # once per container, then remembered
            raise ValueError("graph must have a symmetric pattern for distance 1 or 2 "
                             "(checked on the workers: some edge (u, v) has no (v, u))")
    else:
        # partial2 takes any pattern: nothing to claim (False would be checked, and refuse a symmetric one)
        G = distribute(_host_csr(graph), client, symmetric=True if kind != "partial2" else None)
    addrs = list(G.workers)
    P = len(addrs)
    setup, setup_s, setup_bytes = _prepared_setup(G, kind, client)   # once per (container, kind), on the workers
    res = comms.spmd(_color_rank, setup, tie_break == "degree", int(max_rounds), client=client, workers=addrs,
                     name=f"color-{kind}")
    colors = concatenate([r[0] for r in res], dtype=np.int64)
    info = res[0][1]
    seconds = time.perf_counter() - t0
    nnz = int(G.nnz) if G.nnz is not None else sum(r[1]["nnz"] for r in res)
    stats = {
        "backend": info["backend"],
        "seconds": seconds,
        "edges_per_second": nnz / seconds if seconds > 0 else float("nan"),
        "bytes_moved": int(sum(r[1]["bytes_sent"] for r in res)) + setup_bytes,
        "rounds": info["rounds"],
        "conflicts": info["conflicts"],
        "recolored": int(sum(info["conflicts"])),
        "speculative_passes": int(sum(r[1]["speculative_passes"] for r in res)),
        "n_workers": P,
        "workers": [r[1]["worker"] for r in res],
        "vertices_per_worker": [len(r[0]) for r in res],
        "tie_break": tie_break,
        "setup_seconds": setup_s,
        "setup_reused": setup_s == 0.0,
        "color_seconds": max(r[1]["color_seconds"] for r in res),
    }
    n_colors = int(colors.max()) + 1 if colors.size else 0
    return ColoringResult(colors, n_colors, kind, stats)


def _prepared_setup(G: RowBlocks, kind: int | str, client: Any) -> tuple[list, float, int]:
    """Futures of every rank's :func:`~.ranks._setup_rank` for ``G`` and ``kind``, cached on ``G``.

    The ghost layers, subscriptions and degree order depend on the graph
    alone and cost more than the rounds, so they are built once per
    container and kind and stay on the workers; the key holds the blocks'
    future keys, so a repaired container (new partitions) builds afresh.
    Returns the futures, the slowest rank's setup seconds and the bytes the
    setup sent (0.0 and 0 when reused).
    """
    ck = (kind, tuple(f.key for f in G.parts))
    cache = G.meta.setdefault("_color_setup", {})
    futs = cache.get(ck)
    if futs is not None and not any(f.status in ("error", "cancelled", "lost") for f in futs):
        return futs, 0.0, 0
    n_rows, n_cols = (int(s) for s in G.shape)
    offs = np.asarray(G.offsets)
    col_offsets = offs if kind != "partial2" else block_offsets(n_cols, len(G.workers))
    group = comms.run_spmd(_setup_rank, list(G.parts), offs, col_offsets, n_rows, n_cols, kind, client=client,
                           workers=list(G.workers), name=f"color-setup-{kind}", publish_info=True)
    comms.wait_group(group)
    futs, infos = comms.split_results(group)
    cache.clear()  # one kind at a time: don't pile up setups of the same graph
    cache[ck] = futs
    return futs, float(max(i["seconds"] for i in infos)), int(sum(i["bytes_sent"] for i in infos))


def validate_coloring(graph: Any, colors: Any, *, distance: int | str = 1) -> bool:
    """Check a coloring against the graph, independently of how it was computed.

    Parameters
    ----------
    graph : scipy.sparse matrix or RowBlocks
        The graph (or, for ``"partial2"``, the matrix whose columns were colored).
        Row blocks are gathered: this is a check, not a kernel.
    colors : array_like of int
        One color per vertex (per column for ``"partial2"``).
    distance : {1, 2, "partial2"}

    Returns
    -------
    bool
        True when valid.

    Raises
    ------
    ValueError
        Naming the first offending pair of vertices (columns) and their
        shared color, or a wrong length / negative color.

    Examples
    --------
    >>> import scipy.sparse as sp, numpy as np
    >>> A = sp.csr_matrix(np.array([[0, 1], [1, 0]]))
    >>> validate_coloring(A, [0, 1])
    True
    """
    if distance not in _DISTANCES:
        raise ValueError(f"distance must be one of {_DISTANCES}, got {distance!r}")
    A = graph.gather() if isinstance(graph, RowBlocks) else graph
    if not sp.issparse(A):
        raise TypeError(f"graph must be a scipy.sparse matrix or RowBlocks, got {type(graph).__name__}")
    A = edge_pattern(A)
    c = np.asarray(to_host(colors))
    n_target = A.shape[1] if distance == "partial2" else A.shape[0]
    if c.ndim != 1 or c.shape[0] != n_target:
        raise ValueError(f"colors must have shape ({n_target},), got {c.shape}")
    if c.size and (not np.issubdtype(c.dtype, np.integer) or c.min() < 0):
        raise ValueError("colors must be non-negative integers")
    coo = A.tocoo()
    r, k = coo.row.astype(np.int64), coo.col.astype(np.int64)
    if distance == 1:
        bad = (r != k) & (c[r] == c[k])
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"distance-1 conflict: vertices {r[i]} and {k[i]} share color {c[r[i]]}")
        return True
    if distance == 2:
        # two vertices within distance 2 meet in some closed neighbourhood N[v]
        keep = r != k
        n = A.shape[0]
        r = np.concatenate([r[keep], np.arange(n)])
        k = np.concatenate([k[keep], np.arange(n)])
    # partial2: the columns of each row must carry distinct colors
    order = np.lexsort((k, c[k], r))
    r, k = r[order], k[order]
    dup = (r[1:] == r[:-1]) & (c[k[1:]] == c[k[:-1]])
    if dup.any():
        i = int(np.flatnonzero(dup)[0])
        what = "columns" if distance == "partial2" else "vertices"
        raise ValueError(f"distance-{distance} conflict: {what} {k[i]} and {k[i + 1]} share color {c[k[i]]} "
                         f"(both adjacent to row {r[i]})")
    return True


# --------------------------------------------------------------------------
# Validation (before any work reaches the cluster)
# --------------------------------------------------------------------------


def _host_csr(A: Any) -> sp.csr_matrix:
    A = sp.csr_matrix(A)
    if not A.has_sorted_indices:
        A = A.sorted_indices()
    return A


def _check_args(graph: Any, distance: Any, tie_break: Any, max_rounds: Any) -> tuple[int | str, str]:
    if isinstance(distance, bool | float | np.floating) or distance not in _DISTANCES:
        raise ValueError(f"distance must be one of {_DISTANCES}, got {distance!r}")
    if tie_break not in _TIE_BREAKS:
        raise ValueError(f"tie_break must be one of {_TIE_BREAKS}, got {tie_break!r}")
    if isinstance(max_rounds, bool) or not isinstance(max_rounds, int | np.integer) or max_rounds < 1:
        raise ValueError(f"max_rounds must be a positive int, got {max_rounds!r}")
    if isinstance(graph, BlockGrid):
        raise TypeError("graph: color needs a 1-D row partition; distribute with partition='1d'")
    if isinstance(graph, RowBlocks):
        if graph.kind != "csr":
            raise TypeError(f"graph: expected CSR row blocks, got kind={graph.kind!r}")
        check_one_per_worker(graph, "graph: color")
        shape = graph.shape
    elif sp.issparse(graph) or hasattr(graph, "tocsr"):
        shape = graph.shape
    else:
        raise TypeError(f"graph must be a scipy.sparse matrix or RowBlocks, got {type(graph).__name__}")
    if len(shape) != 2 or min(shape) < 1:
        raise ValueError(f"graph must be a non-empty 2-D matrix, got shape {shape}")
    check_entries("graph", graph)  # any nonzero is an edge, but NaN, inf or complex is a mistake
    if distance == "partial2":
        return distance, tie_break
    if shape[0] != shape[1]:
        raise ValueError(f"graph must be square for distance={distance}, got shape {shape}")
    if isinstance(graph, RowBlocks):
        if graph.symmetric is False:
            raise ValueError("graph must be symmetric for distance 1 or 2 (RowBlocks.symmetric is False)")
    else:
        if not pattern_symmetric(to_host(graph)):
            raise ValueError(f"graph must have a symmetric pattern for distance={distance}; "
                             "symmetrise it (A + A.T) or use distance='partial2' for a matrix")
    return distance, tie_break
