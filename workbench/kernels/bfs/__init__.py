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

The local steps are numba kernels on CPU workers (``cpu.py``) and their
numba.cuda twins on GPU and simulated-GPU workers (``cuda.py``); on a GPU the
block, the visited state and the frontier stay in device memory and only the
per-level counts reach the host.  The SPMD rank bodies are in ``ranks.py``.

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

import numpy as np
import scipy.sparse as sp

from ... import comms
from ...backend import concatenate
from ...cluster import default_client
from ...partition import (
    BlockGrid,
    RowBlocks,
    check_bool,
    check_entries,
    check_int,
    check_one_per_worker,
    edge_pattern,
    grid_shape,
    pattern_symmetric,
    resilient,
)
from .ranks import ALPHA, BETA, _bfs_rank, _ensure_symmetric, _merge_stats, _placed, _prepare
from .rules import _RULES as _RULES
from .rules import _check_block

__all__ = ["bfs", "graph500", "validate_bfs", "BFSResult", "Graph500Result", "ValidationReport",
           "harmonic_stats"]

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
        ``backend`` (the path that ran: "cpu", "gpu" or "gpu-sim"),
        ``seconds`` (in-group search time), ``wall_seconds`` (whole call),
        ``teps``, ``edges_traversed`` (undirected edges in the traversed
        component), ``edges_examined``, ``levels``, ``bytes_moved``,
        ``partition``, ``grid``, ``per_level`` (list of dicts: frontier,
        direction, rank 0's ``local_s``/``fold_s``/``expand_s``, bytes, and
        the level's time split into ``compute_s`` (local work),
        ``exchange_s`` (the collectives' own cost: serialising, sending,
        copying) and ``wait_s`` (blocked on peers: their data, or a slower
        rank), each the mean over ranks, with ``compute_max_s`` the slowest
        rank's compute), and ``compute_seconds``/``exchange_seconds``/
        ``wait_seconds``, their sums over levels; ``path``: ``"distributed"``,
        or ``"replicated"`` for a source outside the component of the graph's
        highest-degree vertex when the rest of the graph is small (at most a
        sixteenth of the edges): every rank keeps a copy of that rest, found
        once per container, and searches it alone, with no exchange.
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


@resilient
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
        Default: the cluster that holds the distributed inputs, else the current client.
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
    client = default_client(client, graph)
    G, layout = _placed(graph, client, partition, (R, C))
    _ensure_symmetric(G, client)
    prep = _prepare(G, client, layout)
    futs = comms.run_spmd(_bfs_rank, [(p, None) for p in prep], [int(source)],
                          dict(direction=direction, alpha=float(alpha), beta=float(beta)),
                          client=client, workers=layout.workers, name="bfs", fetch=True)
    outs = comms.fetch_group(futs)
    # widened as they are joined (no narrow temporary to copy again)
    parent = concatenate([o["searches"][0]["parent"] for o in outs], dtype=np.int64)
    level = concatenate([o["searches"][0]["level"] for o in outs], dtype=np.int64)
    stats = _merge_stats([o["searches"][0]["stats"] for o in outs])
    stats.update(partition="1d" if C == 1 else "2d", grid=(R, C),
                 construction_seconds=G.meta["_bfs_prep"][(R, C)].seconds,
                 wall_seconds=time.perf_counter() - t_wall)
    return BFSResult(parent, level, int(source), stats)


@resilient
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
        ``stats`` holds ``backend``, ``seconds`` (the whole call, generation included),
        ``generation_seconds``, ``construction_seconds``,
        ``min/firstquartile/median/thirdquartile/max_TEPS``,
        ``harmonic_mean_TEPS``, ``harmonic_stddev_TEPS``, ``bytes_moved``.

    Examples
    --------
    >>> g = wb.graph500(12, n_roots=8, client=client)            # doctest: +SKIP
    >>> bool(g.valid.all()), g.stats["harmonic_mean_TEPS"] > 0   # doctest: +SKIP
    (True, True)
    """
    check_int("n_roots", n_roots, low=1)
    check_bool("validate", validate)
    if graph is not None and not isinstance(graph, RowBlocks):
        raise TypeError(f"graph must be the RowBlocks of rmat_distributed, got {type(graph).__name__}")
    if graph is not None and tuple(graph.shape) != (1 << int(scale),) * 2:
        raise ValueError(f"graph has {graph.shape[0]} vertices, not the 2**{scale} of scale={scale}")
    if partition == "auto":
        partition = "1d"
    from ... import data

    data._validate_scale(scale, edgefactor, seed)
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
                          client=client, workers=layout.workers, name="graph500", fetch=True)
    outs = comms.fetch_group(futs)
    per = [_merge_stats([o["searches"][k]["stats"] for o in outs]) for k in range(len(roots))]
    seconds = np.array([s["seconds"] for s in per])
    edges = np.array([s["edges_traversed"] for s in per], dtype=np.int64)
    teps = edges / seconds
    valid = np.array([s.get("valid", True) for s in per], dtype=bool)
    stats = harmonic_stats(teps)
    stats.update(backend=per[0]["backend"], seconds=time.perf_counter() - t0, generation_seconds=t_gen,
                 construction_seconds=record.seconds,
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
    A = edge_pattern(graph)
    if result is None or isinstance(result, str | bytes):
        raise TypeError(f"result must be a BFSResult or a parent array, got {type(result).__name__}")
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
    if lvl is not None and lvl.shape != (n,):
        raise ValueError(f"level: expected an array of shape ({n},), got {lvl.shape}")
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
        if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0 or not math.isfinite(v):
            raise ValueError(f"{name} must be a positive finite number, got {v!r}")
    if grid is not None:
        if (not isinstance(grid, tuple | list) or len(grid) != 2
                or not all(isinstance(g, int | np.integer) and not isinstance(g, bool) and g >= 1 for g in grid)):
            raise ValueError(f"grid must be a pair of positive ints (R, C), got {grid!r}")
        if partition == "1d" and grid[1] != 1:
            raise ValueError(f"partition='1d' needs grid (P, 1), got {grid!r}")
    if isinstance(graph, RowBlocks | BlockGrid):
        if graph.kind != "csr":
            raise TypeError(f"graph must hold sparse (csr) blocks, got kind={graph.kind!r}")
        check_one_per_worker(graph, "graph: bfs")
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
    if not isinstance(graph, _Shape):
        check_entries("graph", graph)  # any nonzero is an edge, but NaN, inf or complex is a mistake
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
    if sp.issparse(graph) and not pattern_symmetric(graph):
        raise ValueError("graph must be symmetric (an undirected graph): its pattern differs from A.T's")
    if P is None:
        from ...cluster import worker_addresses
        P = len(worker_addresses(default_client(client, graph)))
    if partition == "2d" or (partition == "auto" and isinstance(graph, BlockGrid)):
        RC = tuple(grid) if grid is not None else (graph.grid if isinstance(graph, BlockGrid) else grid_shape(P))
    else:
        RC = (P, 1)
    if RC[0] * RC[1] != P:
        raise ValueError(f"grid {RC} needs {RC[0] * RC[1]} ranks, the graph is on {P} workers")
    return n, (int(RC[0]), int(RC[1]))


def _report(counts: dict) -> ValidationReport:
    rules = {k: v == 0 for k, v in counts.items()}
    msgs = [f"rule {k}: {v} violation(s)" for k, v in counts.items() if v]
    return ValidationReport(all(rules.values()), rules, msgs)

