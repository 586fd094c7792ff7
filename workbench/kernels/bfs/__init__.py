"""Distributed breadth-first search under the Graph500 rules.

Reproduces "Parallel Distributed Breadth First Search on the Kepler
Architecture" (Bernaschi, Bisson, Mastrostefano et al.): a level-synchronous
BFS over an R x C processor grid.  Per level every rank

1. *expands*: the ranks of a processor column gather the frontier of the
   vertices their block's columns cover (compact id lists, or bitmaps once
   the frontier is dense);
2. runs the *local expansion* over its block;
3. *folds*: discovered vertices (deduplicated, each sent once per owner) go
   along the processor row to their owners, which filter them through the
   visited state and record the parents.

Termination and the direction heuristic ride on the same collectives (the
counts are piggybacked on the frontier exchange), so a level of the 1-D
layout (R = P, C = 1) costs one collective and a 2-D level three.

Beyond the paper, Beamer's direction optimisation switches a level to a
*bottom-up* step (every unvisited vertex looks for a frontier parent and stops
at the first) when the frontier's edges exceed ``m_unvisited / alpha`` and back
to top-down when fewer than ``n / beta`` vertices are in a shrinking frontier
(GAPBS's rule, alpha = 15, beta = 18).

The whole search (all levels, and in :func:`graph500` all searches and their
validation) runs in one SPMD group over :mod:`workbench.comms`; Dask only
places the blocks and launches the group.  The per-rank layout (CSR and CSC of
the block with compact column ids) is derived once on the workers and cached in
the container's ``meta``, so repeated searches never move the graph.

Examples
--------
>>> import workbench as wb
>>> with wb.cluster(n_workers=2, quiet=True) as client:          # doctest: +SKIP
...     G = wb.data.rmat_distributed(12, client=client)
...     r = wb.bfs(G, source=int(wb.data.search_keys(wb.data.rmat(12), 1)[0]), client=client)
...     r.stats["teps"] > 0
True
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numba
import numpy as np
import scipy.sparse as sp

from ... import comms
from ...backend import namespace, to_host
from ...cluster import default_client
from ...partition import BlockGrid, RowBlocks, block_offsets, distribute, grid_shape

__all__ = ["bfs", "graph500", "validate_bfs", "run_peers", "BFSResult", "Graph500Result", "ValidationReport",
           "harmonic_stats"]

#: Beamer / GAPBS direction-switch parameters.
ALPHA, BETA = 15.0, 18.0
_DIRECTIONS = ("auto", "top-down", "bottom-up")
_PARTITIONS = ("auto", "1d", "2d")


@dataclass
class BFSResult:
    """One search: host arrays plus the search's statistics.

    Attributes
    ----------
    parent : ndarray of int64
        BFS tree; ``parent[source] == source``, -1 where unreached.
    level : ndarray of int64
        Hop distance from ``source``, -1 where unreached.
    source : int
    stats : dict
        ``seconds`` (in-group search time), ``wall_seconds`` (whole call),
        ``teps``, ``edges_traversed`` (undirected edges in the traversed
        component), ``edges_examined``, ``levels``, ``bytes_moved``,
        ``partition``, ``grid``, ``per_level`` (list of dicts: frontier,
        direction, expand/local/fold seconds, bytes).
    """

    parent: np.ndarray
    level: np.ndarray
    source: int
    stats: dict = field(default_factory=dict)


@dataclass
class ValidationReport:
    """Outcome of the five Graph500 BFS validation rules (truthy when all pass)."""

    ok: bool
    rules: dict
    messages: list

    def __bool__(self) -> bool:
        return self.ok


@dataclass
class Graph500Result:
    """A Graph500 run: per-search times, edge counts, TEPS and the spec's statistics."""

    scale: int
    edgefactor: int
    roots: np.ndarray
    seconds: np.ndarray
    edges: np.ndarray
    teps: np.ndarray
    valid: np.ndarray
    stats: dict = field(default_factory=dict)


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------


def bfs(graph: Any, source: int, *, client: Any = None, partition: str = "auto",
        grid: tuple[int, int] | None = None, direction: str = "auto", alpha: float = ALPHA,
        beta: float = BETA) -> BFSResult:
    """Breadth-first search from ``source`` on a distributed symmetric graph.

    Parameters
    ----------
    graph : scipy.sparse matrix, RowBlocks or BlockGrid
        Symmetric adjacency (any nonzero is an edge).  A host matrix is
        distributed first (once per call: distribute it yourself with
        ``wb.distribute`` to search it repeatedly).
    source : int
        Root vertex.
    client : distributed.Client, optional
        Default: the current client.
    partition : {"auto", "1d", "2d"}
        ``"1d"``: row blocks, R = P, C = 1 (no fold step).  ``"2d"``: the
        paper's R x C grid.  ``"auto"``: the container's own layout (nothing
        moves), ``"1d"`` for host input (it measured faster here).
    grid : (R, C), optional
        Grid for ``partition="2d"`` (default: the container's, else the most
        square factorisation of the worker count).
    direction : {"auto", "top-down", "bottom-up"}
        ``"auto"`` is Beamer's direction-optimising BFS.
    alpha, beta : float
        Direction-switch thresholds (GAPBS defaults 15 and 18).

    Returns
    -------
    BFSResult

    Examples
    --------
    >>> G = wb.distribute(wb.data.rmat(12), client=client)      # doctest: +SKIP
    >>> r = wb.bfs(G, 0, client=client)                          # doctest: +SKIP
    >>> wb.validate_bfs(wb.data.rmat(12), r).ok                  # doctest: +SKIP
    True
    """
    t_wall = time.perf_counter()
    n, (R, C) = _check_inputs(graph, [source], partition, grid, direction, alpha, beta, client)
    client = default_client(client)
    G, layout = _placed(graph, client, partition, (R, C))
    _ensure_symmetric(G, client)
    prep = _prepare(G, client, layout)
    futs = comms.run_spmd(_bfs_rank, [(p, None) for p in prep], [int(source)],
                          dict(direction=direction, alpha=float(alpha), beta=float(beta)),
                          client=client, workers=layout.workers, name="bfs")
    comms.wait_group(futs)
    outs = client.gather(list(futs))
    parent = np.concatenate([o["searches"][0]["parent"] for o in outs]).astype(np.int64)
    level = np.concatenate([o["searches"][0]["level"] for o in outs]).astype(np.int64)
    stats = _merge_stats([o["searches"][0]["stats"] for o in outs])
    stats.update(partition="1d" if C == 1 else "2d", grid=(R, C),
                 construction_seconds=G.meta["_bfs_prep"][(R, C)].seconds,
                 wall_seconds=time.perf_counter() - t_wall)
    return BFSResult(parent, level, int(source), stats)


def graph500(scale: int, edgefactor: int = 16, n_roots: int = 64, seed: int = 0, client: Any = None, *,
             partition: str = "1d", grid: tuple[int, int] | None = None, direction: str = "auto",
             alpha: float = ALPHA, beta: float = BETA, validate: bool = True,
             graph: RowBlocks | None = None) -> Graph500Result:
    """Run the Graph500 BFS benchmark on the cluster.

    The Kronecker graph is generated on the workers
    (:func:`workbench.data.rmat_distributed`), the per-rank BFS layout is
    built (the timed *construction*), ``n_roots`` search keys of degree >= 1
    are drawn, and all searches, each followed by the five-rule validation
    on the workers, run inside one SPMD group.  TEPS of a search = undirected
    edges (after the generator's dedup and loop removal) in the traversed
    component / search seconds.

    Parameters
    ----------
    scale, edgefactor, seed : int
        Graph500 problem (2**scale vertices, edgefactor * 2**scale edges).
    n_roots : int
        Number of searches (the spec's 64).
    client : distributed.Client, optional
    partition, grid, direction, alpha, beta
        As in :func:`bfs`.
    validate : bool
        Validate every search (untimed, on the workers).
    graph : RowBlocks, optional
        The already generated graph of this ``scale``/``edgefactor``/``seed``
        (skips generation, e.g. to run several configurations on one graph).

    Returns
    -------
    Graph500Result
        ``stats`` holds ``generation_seconds``, ``construction_seconds``,
        ``min/firstquartile/median/thirdquartile/max_TEPS``,
        ``harmonic_mean_TEPS``, ``harmonic_stddev_TEPS``, ``bytes_moved``.

    Examples
    --------
    >>> g = wb.graph500(12, n_roots=8, client=client)            # doctest: +SKIP
    >>> bool(g.valid.all()), g.stats["harmonic_mean_TEPS"] > 0   # doctest: +SKIP
    (True, True)
    """
    if not isinstance(n_roots, int | np.integer) or n_roots < 1:
        raise ValueError(f"n_roots must be a positive int, got {n_roots!r}")
    if graph is not None and not isinstance(graph, RowBlocks):
        raise TypeError(f"graph must be the RowBlocks of rmat_distributed, got {type(graph).__name__}")
    if partition == "auto":
        partition = "1d"
    from ... import data

    data._validate_scale(scale, edgefactor)
    n = 1 << int(scale)
    _, RC = _check_inputs(graph if graph is not None else _Shape(n), [0], partition, grid, direction, alpha, beta,
                          client)
    client = default_client(client)
    t0 = time.perf_counter()
    G = graph if graph is not None else data.rmat_distributed(scale, edgefactor, seed, client=client)
    t_gen = time.perf_counter() - t0
    _, layout = _placed(G, client, partition, RC)
    prep = _prepare(G, client, layout)
    record = G.meta["_bfs_prep"][layout.shape]
    roots = data.search_keys(record.degrees(client), n_roots, seed)
    rank_args = [(p, (part, int(G.offsets[r])) if validate else None)
                 for r, (p, part) in enumerate(zip(prep, G.parts, strict=True))]
    futs = comms.run_spmd(_bfs_rank, rank_args, [int(s) for s in roots],
                          dict(direction=direction, alpha=float(alpha), beta=float(beta), keep=False),
                          client=client, workers=layout.workers, name="graph500")
    comms.wait_group(futs)
    outs = client.gather(list(futs))
    per = [_merge_stats([o["searches"][k]["stats"] for o in outs]) for k in range(len(roots))]
    seconds = np.array([s["seconds"] for s in per])
    edges = np.array([s["edges_traversed"] for s in per], dtype=np.int64)
    teps = edges / seconds
    valid = np.array([s.get("valid", True) for s in per], dtype=bool)
    stats = harmonic_stats(teps)
    stats.update(generation_seconds=t_gen, construction_seconds=record.seconds,
                 bytes_moved=int(sum(s["bytes_moved"] for s in per)), n_roots=len(roots),
                 partition=partition, grid=layout.shape, direction=direction,
                 mean_levels=float(np.mean([s["levels"] for s in per])), per_search=per)
    return Graph500Result(int(scale), int(edgefactor), roots, seconds, edges, teps, valid, stats)


def validate_bfs(graph: Any, result: Any, source: int | None = None, *,
                 level: np.ndarray | None = None) -> ValidationReport:
    """Check a BFS tree against the five Graph500 validation rules.

    1. the parent array is a tree rooted at ``source`` (no cycles; levels,
       when given, equal the tree depths);
    2. every tree edge joins vertices whose levels differ by exactly one;
    3. every graph edge joins vertices whose levels differ by at most one;
    4. the tree spans the source's whole connected component (no edge joins a
       reached and an unreached vertex);
    5. every vertex and its parent are joined by a graph edge.

    Parameters
    ----------
    graph : scipy.sparse matrix (or a RowBlocks/BlockGrid, gathered for the check)
    result : BFSResult or ndarray
        A result of :func:`bfs` or any parent array (-1 = unreached), e.g.
        from networkx or scipy (convert scipy's -9999 to -1 first).
    source : int, optional
        Root (default: ``result.source``).
    level : ndarray, optional
        Levels to check as well (default: ``result.level`` when present).

    Returns
    -------
    ValidationReport
        ``ok``, ``rules`` (rule name -> bool), ``messages``.

    Examples
    --------
    >>> A = wb.data.grid_graph((4, 4))                           # doctest: +SKIP
    >>> wb.validate_bfs(A, wb.bfs(A, 0)).ok                      # doctest: +SKIP
    True
    """
    if isinstance(graph, RowBlocks | BlockGrid):
        graph = graph.gather()
    if not sp.issparse(graph):
        raise TypeError(f"graph must be a scipy sparse matrix or a graph container, got {type(graph).__name__}")
    A = sp.csr_matrix(graph)
    parent = np.asarray(getattr(result, "parent", result), dtype=np.int64)
    if source is None and not hasattr(result, "source"):
        raise ValueError("source is required when result is a plain parent array")
    source = int(result.source if source is None else source)
    level = getattr(result, "level", None) if level is None else level
    n = A.shape[0]
    if parent.shape != (n,):
        raise ValueError(f"result: expected a parent array of shape ({n},), got {parent.shape}")
    if not 0 <= source < n:
        raise ValueError(f"source must be in [0, {n}), got {source}")
    lvl = None if level is None else np.asarray(level, dtype=np.int64)
    counts = _check_block(A.indptr, A.indices, 0, parent, lvl, source)
    return _report(counts)


def harmonic_stats(teps: np.ndarray) -> dict:
    """Graph500's TEPS statistics: quartiles, harmonic mean and its standard error.

    The harmonic standard deviation follows the reference code (Norris 1940):
    ``std(1/teps, ddof=1) / (mean(1/teps)**2 * sqrt(n - 1))``.
    """
    t = np.asarray(teps, dtype=np.float64)
    inv = 1.0 / t
    q = np.quantile(t, [0.0, 0.25, 0.5, 0.75, 1.0])
    hstd = float(inv.std(ddof=1) / (inv.mean() ** 2 * math.sqrt(len(t) - 1))) if len(t) > 1 else 0.0
    return {"min_TEPS": float(q[0]), "firstquartile_TEPS": float(q[1]), "median_TEPS": float(q[2]),
            "thirdquartile_TEPS": float(q[3]), "max_TEPS": float(q[4]),
            "harmonic_mean_TEPS": float(1.0 / inv.mean()), "harmonic_stddev_TEPS": hstd}


# --------------------------------------------------------------------------
# Validation of the arguments (before any work reaches the cluster)
# --------------------------------------------------------------------------


@dataclass
class _Shape:
    n: int

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.n)


def _check_inputs(graph: Any, sources: list, partition: str, grid: Any, direction: str, alpha: float,
                  beta: float, client: Any) -> tuple[int, tuple[int, int]]:
    if partition not in _PARTITIONS:
        raise ValueError(f"partition must be one of {_PARTITIONS}, got {partition!r}")
    if direction not in _DIRECTIONS:
        raise ValueError(f"direction must be one of {_DIRECTIONS}, got {direction!r}")
    for name, v in (("alpha", alpha), ("beta", beta)):
        if not isinstance(v, int | float) or not v > 0 or not math.isfinite(v):
            raise ValueError(f"{name} must be a positive finite number, got {v!r}")
    if grid is not None:
        if (not isinstance(grid, tuple | list) or len(grid) != 2
                or not all(isinstance(g, int | np.integer) and g >= 1 for g in grid)):
            raise ValueError(f"grid must be a pair of positive ints (R, C), got {grid!r}")
        if partition == "1d" and grid[1] != 1:
            raise ValueError(f"partition='1d' needs grid (P, 1), got {grid!r}")
    if isinstance(graph, RowBlocks | BlockGrid):
        if graph.kind != "csr":
            raise TypeError(f"graph must hold sparse (csr) blocks, got kind={graph.kind!r}")
        if len(set(graph.workers)) != graph.n_parts:
            raise ValueError(f"graph: bfs needs one block per worker, got {graph.n_parts} blocks on "
                             f"{len(set(graph.workers))} workers")
        P = graph.n_parts
        if graph.symmetric is False:
            raise ValueError("graph must be symmetric (an undirected graph); its container says it is not")
    elif isinstance(graph, _Shape):
        P = None
    elif sp.issparse(graph):
        if graph.ndim != 2:
            raise ValueError(f"graph must be 2-D, got ndim={graph.ndim}")
        P = None
    else:
        raise TypeError(f"graph must be a scipy sparse matrix, RowBlocks or BlockGrid, got {type(graph).__name__}")
    if graph.shape[0] != graph.shape[1]:
        raise ValueError(f"graph must be square (an adjacency matrix), got shape {graph.shape}")
    n = int(graph.shape[0])
    if n == 0:
        raise ValueError("graph has no vertices")
    for s in sources:
        if isinstance(s, bool) or not isinstance(s, int | np.integer):
            raise TypeError(f"source must be an int, got {type(s).__name__}")
        if not 0 <= int(s) < n:
            raise ValueError(f"source must be in [0, {n}), got {s}")
    if sp.issparse(graph):
        A = graph.tocsr()
        if (abs(A - A.T) > 0).nnz:
            raise ValueError("graph must be symmetric (an undirected graph): A != A.T")
    if P is None:
        from ...cluster import worker_addresses
        P = len(worker_addresses(default_client(client)))
    if partition == "2d" or (partition == "auto" and isinstance(graph, BlockGrid)):
        RC = tuple(grid) if grid is not None else (graph.grid if isinstance(graph, BlockGrid) else grid_shape(P))
    else:
        RC = (P, 1)
    if RC[0] * RC[1] != P:
        raise ValueError(f"grid {RC} needs {RC[0] * RC[1]} ranks, the graph is on {P} workers")
    if RC[0] > n:
        raise ValueError(f"graph has {n} vertices, fewer than the {RC[0]} row blocks")
    return n, (int(RC[0]), int(RC[1]))


# --------------------------------------------------------------------------
# Layout: the R x C grid and who owns which vertices
# --------------------------------------------------------------------------


@dataclass
class _Layout:
    """Rank (i, j) = i*C + j holds rows ``roffs[i]:roffs[i+1]`` and the columns
    of pieces (i', j) for all i'; it owns vertex piece k = i*C + j
    ``voffs[k]:voffs[k+1]`` (piece (i, j) is the j-th of C sub-blocks of row
    block i).  So a column's frontier lives within a processor column and a
    row's owners within a processor row, as the paper's expand/fold need."""

    n: int
    R: int
    C: int
    roffs: np.ndarray
    voffs: np.ndarray
    workers: list

    @property
    def shape(self) -> tuple[int, int]:
        return (self.R, self.C)


def _make_layout(n: int, R: int, C: int, roffs: np.ndarray, workers: list) -> _Layout:
    voffs = np.concatenate([[0]] + [roffs[i] + block_offsets(int(roffs[i + 1] - roffs[i]), C)[1:]
                                    for i in range(R)]).astype(np.int64)
    return _Layout(n, R, C, np.asarray(roffs, dtype=np.int64), voffs, list(workers))


def _placed(graph: Any, client: Any, partition: str, RC: tuple[int, int]) -> tuple[Any, _Layout]:
    """The graph as a container on the workers, and the BFS layout for it."""
    R, C = RC
    if not isinstance(graph, RowBlocks | BlockGrid):
        graph = distribute(graph, client, partition="1d" if C == 1 else "2d", grid=None if C == 1 else (R, C),
                           symmetric=True)
    n = int(graph.shape[0])
    if isinstance(graph, RowBlocks) and R == graph.n_parts:
        roffs = graph.offsets
    elif isinstance(graph, BlockGrid) and graph.grid[0] == R:
        roffs = graph.row_offsets
    else:
        roffs = block_offsets(n, R)
    return graph, _make_layout(n, R, C, roffs, graph.workers)


def _ensure_symmetric(G: Any, client: Any) -> None:
    """Trust ``G.symmetric`` when set; otherwise check on the workers (once)."""
    if G.symmetric is None:
        outs = comms.spmd(_symmetry_rank, list(_rank_sources(G)), _source_layout(G), client=client,
                          workers=G.workers)
        G.symmetric = bool(all(outs))
    if not G.symmetric:
        raise ValueError("graph must be symmetric (an undirected graph): A != A.T on the workers")


def _source_layout(G: Any) -> dict:
    if isinstance(G, RowBlocks):
        return {"kind": "rows", "roffs": np.asarray(G.offsets), "coffs": np.array([0, G.shape[1]])}
    return {"kind": "grid", "roffs": np.asarray(G.row_offsets), "coffs": np.asarray(G.col_offsets)}


def _rank_sources(G: Any) -> list:
    return list(G.parts)


def _global_coo(part: Any, rank: int, src: dict) -> tuple[np.ndarray, np.ndarray]:
    A = sp.csr_matrix(to_host(part))
    C = len(src["coffs"]) - 1
    i, j = (rank, 0) if src["kind"] == "rows" else divmod(rank, C)
    rows = np.repeat(np.arange(A.shape[0], dtype=np.int64), np.diff(A.indptr)) + int(src["roffs"][i])
    cols = A.indices.astype(np.int64) + int(src["coffs"][j])
    keep = A.data != 0
    return rows[keep], cols[keep]


def _symmetry_rank(comm: Any, part: Any, src: dict) -> bool:
    # Send every transposed entry to the rank holding that position; compare sorted key sets.
    rows, cols = _global_coo(part, comm.rank, src)
    n = int(src["roffs"][-1])
    C = len(src["coffs"]) - 1
    dest = (np.searchsorted(src["roffs"], cols, side="right") - 1) * C + \
        (np.searchsorted(src["coffs"], rows, side="right") - 1)
    tkeys = cols * n + rows
    order = np.argsort(dest, kind="stable")
    cuts = np.searchsorted(dest[order], np.arange(comm.size + 1))
    got = comm.alltoallv([tkeys[order][cuts[r]:cuts[r + 1]] for r in range(comm.size)])
    mine = np.sort(rows * n + cols)
    theirs = np.sort(np.concatenate(got))
    ok = mine.shape == theirs.shape and bool(np.array_equal(mine, theirs))
    return bool(comm.allreduce(ok, op="and"))


# --------------------------------------------------------------------------
# Prepared per-rank structures (built once per container and grid, cached)
# --------------------------------------------------------------------------


@dataclass
class _Prepared:
    futures: list
    layout: _Layout
    seconds: float
    bytes_moved: int
    _deg: np.ndarray | None = None

    def degrees(self, client: Any) -> np.ndarray:
        """Degree of every vertex (for picking search keys), gathered once."""
        if self._deg is None:
            parts = client.gather([client.submit(_degrees_of, f, workers=[a], pure=False)
                                   for f, a in zip(self.futures, self.layout.workers, strict=True)])
            self._deg = np.concatenate(parts)
        return self._deg


def _degrees_of(prep: dict) -> np.ndarray:
    return to_host(prep["deg"]).astype(np.int32)


def _prepare(G: Any, client: Any, layout: _Layout) -> list:
    """Futures of the per-rank BFS structures, built on the workers once per (container, grid)."""
    cache = G.meta.setdefault("_bfs_prep", {})
    rec = cache.get(layout.shape)
    if rec is None:
        src = _source_layout(G)
        identity = (src["kind"] == "rows" and layout.C == 1 and np.array_equal(src["roffs"], layout.roffs))
        t0 = time.perf_counter()
        futs = comms.run_spmd(_prepare_rank, _rank_sources(G), src, layout, identity, client=client,
                              workers=layout.workers, name="bfs-prepare", publish_info=True)
        comms.wait_group(futs)
        parts, infos = comms.split_results(futs)
        rec = cache[layout.shape] = _Prepared(parts, layout, time.perf_counter() - t0,
                                              sum(i["bytes_sent"] for i in infos))
    return rec.futures


def _prepare_rank(comm: Any, part: Any, src: dict, L: _Layout, identity: bool) -> tuple[dict, dict]:
    i, j = divmod(comm.rank, L.C)
    rlo, rhi = int(L.roffs[i]), int(L.roffs[i + 1])
    nr = rhi - rlo
    # column set of processor column j: pieces (i', j), i' = 0..R-1, concatenated
    col_pieces = np.array([[L.voffs[ip * L.C + j], L.voffs[ip * L.C + j + 1]] for ip in range(L.R)], dtype=np.int64)
    col_sizes = col_pieces[:, 1] - col_pieces[:, 0]
    col_local0 = np.concatenate([[0], np.cumsum(col_sizes)]).astype(np.int64)
    nc = int(col_local0[-1])
    if identity:
        csr = sp.csr_matrix(to_host(part))
        csr = sp.csr_matrix((np.ones(csr.nnz, np.int8), csr.indices, csr.indptr), shape=(nr, nc))
    else:
        rows, cols = _global_coo(part, comm.rank, src)
        k_u = np.searchsorted(L.voffs, cols, side="right") - 1
        dest = (np.searchsorted(L.roffs, rows, side="right") - 1) * L.C + k_u % L.C
        order = np.argsort(dest, kind="stable")
        cuts = np.searchsorted(dest[order], np.arange(comm.size + 1))
        rows, cols = rows[order], cols[order]
        got = comm.alltoallv([np.stack([rows[cuts[r]:cuts[r + 1]], cols[cuts[r]:cuts[r + 1]]])
                              for r in range(comm.size)])
        e = np.concatenate(got, axis=1)
        ip = (np.searchsorted(L.voffs, e[1], side="right") - 1) // L.C
        cl = col_local0[ip] + (e[1] - col_pieces[ip, 0])
        csr = sp.csr_matrix((np.ones(e.shape[1], np.int8), (e[0] - rlo, cl)), shape=(nr, nc))
    csr.sort_indices()
    csc = csr.tocsc()
    rowc = comm.split(i, j)
    deg_rows = rowc.allreduce(np.diff(csr.indptr).astype(np.int64))
    olo, ohi = int(L.voffs[comm.rank]), int(L.voffs[comm.rank + 1])
    idx_t = np.int32 if max(nr, nc) < 2**31 else np.int64
    prep = {
        "csr_ptr": csr.indptr.astype(np.int64), "csr_idx": csr.indices.astype(idx_t),
        "csc_ptr": csc.indptr.astype(np.int64), "csc_idx": csc.indices.astype(idx_t),
        "colmap": None if L.C == 1 else np.concatenate([np.arange(a, b) for a, b in col_pieces]).astype(np.int64),
        "col_local0": col_local0, "deg": deg_rows[olo - rlo:ohi - rlo].copy(),
        "nnz_total": int(comm.allreduce(int(csr.nnz))), "layout": L, "rlo": rlo,
        "row_sub": (L.voffs[i * L.C:(i + 1) * L.C + 1] - rlo).astype(np.int64),
    }
    if namespace(part) is not np:  # device input: keep the search structures on the device
        xp = namespace(part)
        for k in ("csr_ptr", "csr_idx", "csc_ptr", "csc_idx", "colmap", "deg"):
            if prep[k] is not None:
                prep[k] = xp.asarray(prep[k])
    return prep, {"bytes_sent": comm.stats["bytes_sent"], "nnz": int(csr.nnz)}


# --------------------------------------------------------------------------
# The SPMD search
# --------------------------------------------------------------------------


def _bfs_rank(comm: Any, rank_arg: tuple, sources: list, opts: dict) -> dict:
    prep, check = rank_arg  # check: (original row block, its first row) to validate against, or None
    s = _Searcher(comm, prep, opts)
    keep = opts.get("keep", True)
    out = []
    for src in sources:
        parent, level, st = s.run(src)
        if check is not None:
            st["valid"] = s.validate(*check, parent, level, src)
        out.append({"parent": np.array(to_host(parent)) if keep else None,
                    "level": np.array(to_host(level)) if keep else None, "stats": st})
    return {"searches": out}


class _Searcher:
    """One rank's state for searches on its prepared block (buffers reused across searches)."""

    def __init__(self, comm: Any, prep: dict, opts: dict):
        self.comm, self.p, self.opts = comm, prep, opts
        L = prep["layout"]
        self.L = L
        self.i, self.j = divmod(comm.rank, L.C)
        self.rowc = comm.split(self.i, self.j) if L.C > 1 else None
        self.colc = comm.split(self.j, self.i) if L.C > 1 else comm
        self.xp = xp = namespace(prep["csr_idx"])
        self.olo, self.ohi = int(L.voffs[comm.rank]), int(L.voffs[comm.rank + 1])
        self.no = self.ohi - self.olo
        self.nr = len(prep["csr_ptr"]) - 1
        self.nc = len(prep["csc_ptr"]) - 1
        self.own0 = self.olo - prep["rlo"]  # owned piece inside the row block
        self.parent = xp.full(self.no, -1, dtype=np.int64)
        self.level = xp.full(self.no, -1, dtype=np.int64)
        self.visited = xp.zeros(self.nr, dtype=bool)
        self.fbits = xp.zeros(self.nc, dtype=bool)
        self.out_rows = xp.empty(self.nr, dtype=prep["csr_idx"].dtype)
        self.out_par = xp.empty(self.nr, dtype=prep["csr_idx"].dtype)
        self.piece_sizes = np.diff(L.voffs)
        self.native = xp is np and opts.get("kernels", "native") == "native"
        if self.native:  # compile / load the numba kernels outside the timed searches
            z, seen = np.zeros(2, np.int64), np.ones(1, bool)
            i0 = np.zeros(1, self.out_rows.dtype)
            _td_numba(z, i0, z[:0], seen, i0, i0)
            _bu_numba(z, i0, seen, seen, i0, i0)

    # ---- one search ------------------------------------------------------

    def run(self, source: int) -> tuple[Any, Any, dict]:
        comm, L = self.comm, self.L
        self.parent.fill(-1)
        self.level.fill(-1)
        self.visited.fill(False)
        direction, alpha, beta = self.opts["direction"], self.opts["alpha"], self.opts["beta"]
        n = L.n
        comm.barrier()
        t_start = time.perf_counter()
        b0 = comm.stats["bytes_sent"]
        # The level-0 frontier is known everywhere: no exchange.  Only the owner knows the
        # source's degree; it rides on the first exchange (level 0 is top-down under "auto").
        k_src = int(np.searchsorted(L.voffs, source, side="right") - 1)
        i_s, j_s = divmod(k_src, L.C)
        src_deg = 0
        if k_src == comm.rank:
            self.parent[source - self.olo] = source
            self.level[source - self.olo] = 0
            src_deg = int(self.p["deg"][source - self.olo])
        if self.i == i_s:
            self.visited[source - self.p["rlo"]] = True
        empty = ("ids", np.zeros(0, np.int32))
        pieces = [empty] * L.R
        if self.j == j_s:
            pieces[i_s] = ("ids", np.array([source - L.voffs[k_src]], dtype=np.int32))
        n_f, m_f = 1, 0
        per_level = []
        m_u = self.p["nnz_total"]
        edges_reached, examined = 0, 0
        mode, prev_n_f, depth = "top-down", 0, 0
        while n_f > 0:
            if direction == "auto":
                if mode == "top-down" and m_f > m_u / alpha:
                    mode = "bottom-up"
                elif mode == "bottom-up" and n_f < n / beta and n_f <= prev_n_f:
                    mode = "top-down"
            else:
                mode = direction
            b_level = comm.stats["bytes_sent"]
            t1 = time.perf_counter()
            rows, par, ex = (self._top_down(pieces) if mode == "top-down" else self._bottom_up(pieces))
            examined += ex
            t2 = time.perf_counter()
            new = self._fold(rows, par, depth + 1)
            t3 = time.perf_counter()
            prev_n_f, n_f_level, m_f_level = n_f, n_f, m_f
            pieces, n_f, m_f, extra = self._publish(new, src_deg if depth == 0 else 0)
            t4 = time.perf_counter()
            # expand_s: the exchange that publishes this level's discoveries as the next frontier
            per_level.append({"level": depth, "frontier": int(n_f_level), "frontier_edges": int(m_f_level),
                              "direction": mode, "local_s": t2 - t1, "fold_s": t3 - t2, "expand_s": t4 - t3,
                              "bytes": comm.stats["bytes_sent"] - b_level, "edges_examined": int(ex)})
            per_level[-1]["frontier_edges"] += extra  # the source's degree, known after the first exchange
            m_u -= m_f + extra
            edges_reached += m_f + extra
            depth += 1
        seconds = time.perf_counter() - t_start
        stats = {"seconds": seconds, "levels": depth, "edges_traversed": int(edges_reached // 2),
                 "edges_examined": int(examined), "bytes_moved": comm.stats["bytes_sent"] - b0,
                 "per_level": per_level}
        return self.parent, self.level, stats

    # ---- expand: frontier of my column set (+ global counts) --------------

    def _publish(self, front: Any, extra: int = 0) -> tuple[list, int, int, int]:
        """Mark the new frontier visited across the processor row and gather
        it within the processor column; counts (and ``extra``) ride along."""
        xp = self.xp
        n_loc = int(front.shape[0])
        m_loc = int(self.p["deg"][front].sum()) if n_loc else 0
        if self.rowc is None:
            self.visited[front + self.own0] = True
            row = (n_loc, m_loc, extra)
        else:
            got = self.rowc.allgather((front, n_loc, m_loc, extra))
            sub = self.p["row_sub"]
            for jp, g in enumerate(got):
                self.visited[xp.asarray(g[0]) + int(sub[jp])] = True
            row = tuple(sum(g[k] for g in got) for k in (1, 2, 3))
        size = int(self.piece_sizes[self.comm.rank])
        if 4 * n_loc > (size + 7) // 8:  # dense frontier: a bitmap is smaller than the ids
            bits = xp.zeros(size, dtype=bool)
            bits[front] = True
            payload = ("bits", xp.packbits(bits))
        else:
            payload = ("ids", front.astype(np.int32) if self.no < 2**31 else front)
        got = self.colc.allgather((payload, *row))
        return [g[0] for g in got], *(sum(g[k] for g in got) for k in (1, 2, 3))

    def _front_ids(self, pieces: list) -> Any:
        xp = self.xp
        c0 = self.p["col_local0"]
        out = []
        for ip, (kind, data) in enumerate(pieces):
            size = int(c0[ip + 1] - c0[ip])
            ids = xp.asarray(data) if kind == "ids" else xp.flatnonzero(xp.unpackbits(xp.asarray(data))[:size])
            out.append(ids.astype(np.int64) + int(c0[ip]))
        return xp.concatenate(out) if out else xp.zeros(0, np.int64)

    def _front_bits(self, pieces: list) -> Any:
        xp = self.xp
        c0 = self.p["col_local0"]
        fb = self.fbits
        fb.fill(False)
        for ip, (kind, data) in enumerate(pieces):
            lo, hi = int(c0[ip]), int(c0[ip + 1])
            if kind == "ids":
                fb[xp.asarray(data).astype(np.int64) + lo] = True
            else:
                fb[lo:hi] = xp.unpackbits(xp.asarray(data))[:hi - lo].astype(bool)
        return fb

    # ---- local expansion ----------------------------------------------------

    def _top_down(self, pieces: list) -> tuple[Any, Any, int]:
        p = self.p
        front = self._front_ids(pieces)
        if self.native:
            cnt, ex = _td_numba(p["csc_ptr"], p["csc_idx"], front, self.visited, self.out_rows, self.out_par)
            return self.out_rows[:cnt], self.out_par[:cnt], ex
        return _td_xp(p["csc_ptr"], p["csc_idx"], front, self.visited)

    def _bottom_up(self, pieces: list) -> tuple[Any, Any, int]:
        p = self.p
        fb = self._front_bits(pieces)
        if self.native:
            cnt, ex = _bu_numba(p["csr_ptr"], p["csr_idx"], fb, self.visited, self.out_rows, self.out_par)
            return self.out_rows[:cnt], self.out_par[:cnt], ex
        return _bu_xp(p["csr_ptr"], p["csr_idx"], fb, self.visited)

    # ---- fold: discovered vertices to their owners along the processor row ---

    def _fold(self, rows: Any, par: Any, depth: int) -> Any:
        """Owners accept each discovered vertex once (first proposal wins) and
        record its parent and level; returns the new owned frontier."""
        xp = self.xp
        colmap = self.p["colmap"]
        gpar = par.astype(np.int64) if colmap is None else colmap[par]
        rows = rows.astype(np.int64)
        if self.rowc is None:  # 1-D: this rank owns its whole row block
            new, newpar = rows, gpar
        else:
            sub = self.p["row_sub"]
            dest = xp.searchsorted(xp.asarray(sub), rows, side="right") - 1
            order = xp.argsort(dest, kind="stable")
            rows, gpar, dest = rows[order], gpar[order], dest[order]
            cuts = to_host(xp.searchsorted(dest, xp.arange(self.L.C + 1)))
            got = self.rowc.alltoallv([(rows[cuts[k]:cuts[k + 1]] - int(sub[k]), gpar[cuts[k]:cuts[k + 1]])
                                       for k in range(self.L.C)])
            new = xp.concatenate([xp.asarray(g[0]) for g in got])
            newpar = xp.concatenate([xp.asarray(g[1]) for g in got])
            fresh = self.parent[new] < 0
            new, newpar = new[fresh], newpar[fresh]
            new, first = xp.unique(new, return_index=True)
            newpar = newpar[first]
        self.parent[new] = newpar
        self.level[new] = depth
        return new

    # ---- validation on the workers (graph500) ---------------------------------

    def validate(self, part: Any, lo: int, parent: Any, level: Any, source: int) -> bool:
        """The five Graph500 rules on this rank's original row block (first row
        ``lo``), with the tree allgathered on the workers (the client never sees it)."""
        small = np.int32 if self.L.n < 2**31 else np.int64
        full_p = np.concatenate(self.comm.allgather(to_host(parent).astype(small)))
        full_l = np.concatenate(self.comm.allgather(to_host(level).astype(small)))
        A = sp.csr_matrix(to_host(part))
        counts = _check_block(A.indptr, A.indices, lo, full_p.astype(np.int64), full_l.astype(np.int64), source)
        total = self.comm.allreduce(np.array(list(counts.values()), dtype=np.int64))
        return bool(total.sum() == 0)


def _merge_stats(per_rank: list[dict]) -> dict:
    """Rank 0's timings and level trace; bytes and examined edges summed over ranks."""
    s = dict(per_rank[0])
    s["bytes_moved"] = int(sum(r["bytes_moved"] for r in per_rank))
    s["edges_examined"] = int(sum(r["edges_examined"] for r in per_rank))
    s["edges_examined_per_rank"] = [int(r["edges_examined"]) for r in per_rank]
    lv = [dict(x) for x in s["per_level"]]
    for k, d in enumerate(lv):
        d["bytes"] = int(sum(r["per_level"][k]["bytes"] for r in per_rank))
        d["edges_examined"] = int(sum(r["per_level"][k]["edges_examined"] for r in per_rank))
    s["per_level"] = lv
    if "valid" in s:
        s["valid"] = bool(all(r["valid"] for r in per_rank))
    s["teps"] = s["edges_traversed"] / s["seconds"] if s["seconds"] > 0 else float("nan")
    return s


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


def _segments(ptr: Any, sel: Any) -> tuple[Any, Any, int]:
    """Positions of all entries of the rows ``sel`` of a CSR and each entry's segment."""
    xp = namespace(ptr)
    starts = ptr[sel]
    lens = ptr[sel + 1] - starts
    ends = xp.cumsum(lens)
    tot = int(ends[-1]) if len(ends) else 0
    pos = xp.arange(tot, dtype=np.int64)
    seg = xp.searchsorted(ends, pos, side="right")
    return pos - (ends - lens)[seg] + starts[seg], seg, tot


def _td_xp(ptr: Any, idx: Any, front: Any, visited: Any) -> tuple[Any, Any, int]:
    xp = namespace(ptr)
    pos, seg, tot = _segments(ptr, front)
    rows = idx[pos]
    keep = ~visited[rows]
    rows, par = rows[keep], front[seg[keep]]
    rows, first = xp.unique(rows, return_index=True)
    visited[rows] = True
    return rows, par[first], tot


def _bu_xp(ptr: Any, idx: Any, fbits: Any, visited: Any) -> tuple[Any, Any, int]:
    xp = namespace(ptr)
    todo = xp.flatnonzero(~visited)
    pos, seg, tot = _segments(ptr, todo)
    cols = idx[pos]
    hit = xp.flatnonzero(fbits[cols])
    rows, first = xp.unique(todo[seg[hit]], return_index=True)
    visited[rows] = True
    return rows, cols[hit[first]], tot


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


def _report(counts: dict) -> ValidationReport:
    rules = {k: v == 0 for k, v in counts.items()}
    msgs = [f"rule {k}: {v} violation(s)" for k, v in counts.items() if v]
    return ValidationReport(all(rules.values()), rules, msgs)


# --------------------------------------------------------------------------
# Peers: single-node BFS libraries on the same graph and roots (notebook, benchmark)
# --------------------------------------------------------------------------


def run_peers(A: Any, roots: Any, names: Any = ("scipy", "igraph", "networkit")) -> list[dict]:
    """Time single-node BFS libraries on host graph ``A`` from each root.

    Each peer's graph is built untimed; every search is timed with
    :func:`workbench.bench.measure` after one warm-up search.  TEPS uses the
    same edge count as :func:`graph500` (undirected edges in the traversed
    component, from scipy's traversal order).  Peers that are not installed
    are skipped.  ``"scipy"`` is ``csgraph.breadth_first_order(directed=True)``
    on the symmetric CSR (no symmetrisation inside the timed call).

    Returns
    -------
    list of dict
        One row per (peer, root): ``name``, ``root``, ``seconds``, ``edges``, ``teps``.
    """
    import scipy.sparse.csgraph as csgraph

    from ...bench import measure

    A = sp.csr_matrix(A)
    deg = np.diff(A.indptr)
    roots = [int(r) for r in roots]
    edges = {r: int(deg[csgraph.breadth_first_order(A, r, directed=True, return_predecessors=False)].sum() // 2)
             for r in roots}
    rows = []
    for name in names:
        search = _peer(name, A)
        if search is None:
            continue
        search(roots[0])  # warm-up (lazy init, caches)
        for r in roots:
            t = measure(lambda r=r, f=search: f(r), name=name, warmup=0, repeat=1)
            rows.append({"name": name, "root": r, "seconds": t.median, "edges": edges[r],
                         "teps": edges[r] / t.median})
    return rows


def _peer(name: str, A: sp.csr_matrix) -> Any:
    import importlib.util

    n = A.shape[0]
    if name == "scipy":
        import scipy.sparse.csgraph as csgraph
        return lambda r: csgraph.breadth_first_order(A, r, directed=True, return_predecessors=True)
    coo = sp.triu(A, 1).tocoo()
    if name == "igraph" and importlib.util.find_spec("igraph"):
        import igraph
        g = igraph.Graph(n=n, edges=np.stack([coo.row, coo.col], axis=1), directed=False)
        return lambda r: g.bfs(r)
    if name == "networkit" and importlib.util.find_spec("networkit"):
        import networkit as nk
        g = nk.Graph(n)
        g.addEdges((coo.row.astype(np.uint64), coo.col.astype(np.uint64)))
        return lambda r: nk.distance.BFS(g, r, storePaths=False).run()
    if name == "cugraph" and importlib.util.find_spec("cugraph"):
        import cudf
        import cugraph
        import cupy
        df = cudf.DataFrame({"src": coo.row, "dst": coo.col})
        g = cugraph.Graph(directed=False)
        g.from_cudf_edgelist(df, source="src", destination="dst")

        def search(r):
            out = cugraph.bfs(g, r)
            cupy.cuda.get_current_stream().synchronize()
            return out
        return search
    if name not in ("scipy", "igraph", "networkit", "cugraph"):
        raise ValueError(f"unknown peer {name!r}; use scipy, igraph, networkit or cugraph")
    return None
