"""Data generators (seeded, deterministic per block, runnable on the workers) and loaders.

The Graph500 Kronecker generator follows the specification's reference
(``kronecker_generator.m``): SCALE levels of quadrant choices with
A=0.57, B=0.19, C=0.19, a random vertex relabeling and an edge shuffle.
Edges are produced in fixed-size blocks, each from its own RNG stream
``(seed, block)``, so the same seed gives the same edge list however many
workers produce it.  The relabeling is a seeded bijection of ``[0, 2**SCALE)``
(multiply-xorshift rounds), computable per vertex without holding a
permutation table, which is what lets large scales generate on the workers.

Examples
--------
>>> A = rmat(10, seed=1)
>>> A.shape, (A != A.T).nnz, bool(A.diagonal().any())
((1024, 1024), 0, False)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..backend import unique_sorted
from ..partition import edge_pattern, resilient
from .datasets import SPATSTAT_PATTERNS, PointPattern, digits, spatstat_data_dir, spatstat_names, spatstat_pattern
from .loaders import load_edgelist, load_mtx, mtx_header
from .sparse import check_seed, random_sparse, random_sparse_bytes  # noqa: F401  (seeded sparse generator, memory linear in nnz)

__all__ = [
    "kronecker_edges",
    "kronecker_block",
    "rmat",
    "rmat_distributed",
    "search_keys",
    "grid_graph",
    "load_edgelist",
    "load_mtx",
    "mtx_header",
    "spatstat_pattern",
    "spatstat_names",
    "spatstat_data_dir",
    "PointPattern",
    "SPATSTAT_PATTERNS",
    "digits",
    "EDGE_BLOCK",
]

#: Edges generated per RNG stream.  Fixed, so the graph does not depend on the worker count.
EDGE_BLOCK = 1 << 18

_A, _B, _C = 0.57, 0.19, 0.19


def _validate_scale(scale: int, edgefactor: int, seed: int) -> None:
    if isinstance(scale, bool) or not isinstance(scale, int | np.integer) or not 1 <= scale <= 40:
        raise ValueError(f"scale must be an int in [1, 40], got {scale!r}")
    if isinstance(edgefactor, bool) or not isinstance(edgefactor, int | np.integer) or edgefactor < 1:
        raise ValueError(f"edgefactor must be a positive int, got {edgefactor!r}")
    check_seed(seed)


#: Bytes per generated edge that building the host CSR surely needs (its peak measured here: ~150).
_HOST_EDGE_BYTES = 64


def _check_fits(scale: int, edgefactor: int) -> None:
    """Refuse up front a host graph that cannot fit this machine's memory (it would run for minutes first)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # no sysconf: nothing to compare against
        return
    need = _HOST_EDGE_BYTES * edgefactor * (1 << int(scale))
    if need > total:
        raise ValueError(f"scale={scale} (edgefactor={edgefactor}) needs over {need / 2**30:.0f} GiB to build on "
                         f"this host, which has {total / 2**30:.0f} GiB: use a smaller scale, or "
                         "rmat_distributed to build it on the workers")


def _relabel(v: np.ndarray, scale: int, seed: int) -> np.ndarray:
    """Seeded bijection of [0, 2**scale): rounds of odd multiply and xorshift mod 2**scale."""
    mask = np.uint64((1 << scale) - 1)
    rng = np.random.default_rng([int(seed), 0x5EED])
    mults = rng.integers(1, 1 << 62, size=4, dtype=np.uint64) | np.uint64(1)
    adds = rng.integers(0, 1 << 62, size=4, dtype=np.uint64)
    x = v.astype(np.uint64) & mask
    shift = np.uint64(max(1, (scale + 1) // 2))
    with np.errstate(over="ignore"):
        for m, a in zip(mults, adds, strict=True):
            x = (x * m + a) & mask
            x = x ^ (x >> shift)
    return x.astype(np.int64)


def kronecker_block(scale: int, edgefactor: int, seed: int, block: int) -> np.ndarray:
    """Edge block ``block`` of the Graph500 Kronecker graph, shape (2, m_block), int64.

    Blocks ``0 .. n_blocks-1`` together form the whole edge list (with
    relabeled vertices and shuffled within each block); a block depends only
    on ``(scale, edgefactor, seed, block)``.

    Examples
    --------
    >>> b = kronecker_block(8, 16, 1, 0)
    >>> b.shape, bool((b == kronecker_edges(8, 16, seed=1)[:, :b.shape[1]]).all())
    ((2, 4096), True)
    """
    _validate_scale(scale, edgefactor, seed)
    m = edgefactor * (1 << scale)
    start = block * EDGE_BLOCK
    if not 0 <= start < m:
        raise ValueError(f"block {block} out of range for {m} edges")
    size = min(EDGE_BLOCK, m - start)
    rng = np.random.default_rng([int(seed), int(scale), int(block)])
    ab = _A + _B
    c_norm = _C / (1.0 - ab)
    a_norm = _A / ab
    ii = np.zeros(size, dtype=np.int64)
    jj = np.zeros(size, dtype=np.int64)
    for ib in range(scale):
        ii_bit = rng.random(size) > ab
        jj_bit = rng.random(size) > np.where(ii_bit, c_norm, a_norm)
        ii |= ii_bit.astype(np.int64) << ib
        jj |= jj_bit.astype(np.int64) << ib
    ij = np.stack([_relabel(ii, scale, seed), _relabel(jj, scale, seed)])
    return ij[:, rng.permutation(size)]


def kronecker_edges(scale: int, edgefactor: int = 16, seed: int = 0,
                    blocks: Sequence[int] | None = None) -> np.ndarray:
    """The Graph500 edge list (2, edgefactor * 2**scale) (or the given blocks of it).

    Examples
    --------
    >>> kronecker_edges(8, 16, seed=1).shape
    (2, 4096)
    """
    _validate_scale(scale, edgefactor, seed)
    n_blocks = -(-edgefactor * (1 << scale) // EDGE_BLOCK)
    blocks = range(n_blocks) if blocks is None else blocks
    parts = [kronecker_block(scale, edgefactor, seed, b) for b in blocks]
    return np.concatenate(parts, axis=1) if parts else np.zeros((2, 0), np.int64)


def _symmetric_csr(src: np.ndarray, dst: np.ndarray, n_rows: int, n_cols: int, row0: int = 0,
                   dtype: Any = np.float64) -> sp.csr_matrix:
    """CSR of the given (already symmetrised) edges, loops and duplicates removed."""
    keep = src != dst
    src, dst = src[keep], dst[keep]
    key = unique_sorted((src - row0) * np.int64(n_cols) + dst)
    rows, cols = np.divmod(key, np.int64(n_cols))
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n_rows), out=indptr[1:])
    idx_dtype = np.int32 if n_cols < 2**31 else np.int64
    return sp.csr_matrix((np.ones(len(cols), dtype=dtype), cols.astype(idx_dtype), indptr.astype(idx_dtype)),
                         shape=(n_rows, n_cols))


def rmat(scale: int, edgefactor: int = 16, seed: int = 0) -> sp.csr_matrix:
    """Graph500 Kronecker (R-MAT) graph as a symmetric host CSR matrix.

    Self-loops and duplicate edges are removed; values are 1.0 (float64).

    Parameters
    ----------
    scale : int
        log2 of the number of vertices.
    edgefactor : int
        Edges generated per vertex (before symmetrisation and dedup).
    seed : int
        RNG seed; the same seed gives the same graph everywhere.

    Examples
    --------
    >>> A = rmat(8, seed=3)
    >>> A.shape
    (256, 256)
    """
    _validate_scale(scale, edgefactor, seed)
    _check_fits(scale, edgefactor)
    ij = kronecker_edges(scale, edgefactor, seed)
    n = 1 << scale
    src = np.concatenate([ij[0], ij[1]])
    dst = np.concatenate([ij[1], ij[0]])
    return _symmetric_csr(src, dst, n, n)


def _rmat_rank(comm: Any, blocks: list[int], scale: int, edgefactor: int, seed: int,
               offsets: np.ndarray) -> tuple:
    from ..partition import owner_of

    ij = kronecker_edges(scale, edgefactor, seed, blocks)
    src = np.concatenate([ij[0], ij[1]])
    dst = np.concatenate([ij[1], ij[0]])
    own = owner_of(src, offsets)
    order = np.argsort(own, kind="stable")
    src, dst, own = src[order], dst[order], own[order]
    cuts = np.searchsorted(own, np.arange(comm.size + 1))
    parts = [np.stack([src[cuts[r]:cuts[r + 1]], dst[cuts[r]:cuts[r + 1]]]) for r in range(comm.size)]
    got = comm.alltoallv(parts)
    e = np.concatenate(got, axis=1)
    lo, hi = int(offsets[comm.rank]), int(offsets[comm.rank + 1])
    n = 1 << scale
    block = _symmetric_csr(e[0], e[1], hi - lo, n, row0=lo)
    return block, {"nnz": int(block.nnz), "bytes_sent": comm.stats["bytes_sent"]}


def _rmat_part(scale: int, edgefactor: int, seed: int, lo: int, hi: int) -> sp.csr_matrix:
    """Rows ``lo:hi`` of ``rmat(scale, edgefactor, seed)`` built alone on one worker: the lineage
    of a :func:`rmat_distributed` partition (every edge block is generated and filtered, block by
    block, so memory stays at one block plus the partition)."""
    n = 1 << scale
    src, dst = [], []
    for b in range(-(-edgefactor * n // EDGE_BLOCK)):
        ij = kronecker_block(scale, edgefactor, seed, b)
        for s, d in ((ij[0], ij[1]), (ij[1], ij[0])):  # both directions, as the symmetrised graph
            keep = (s >= lo) & (s < hi)
            src.append(s[keep])
            dst.append(d[keep])
    return _symmetric_csr(np.concatenate(src), np.concatenate(dst), hi - lo, n, row0=lo)


@resilient
def rmat_distributed(scale: int, edgefactor: int = 16, seed: int = 0, client: Any = None,
                     workers: Sequence[str] | None = None):
    """Generate the Graph500 graph on the workers as :class:`~workbench.partition.RowBlocks`.

    Each worker generates its share of the edge blocks, then an all-to-all
    sends every edge to the owner of its source vertex, which builds its CSR
    row block.  The graph equals ``rmat(scale, edgefactor, seed)`` for any
    worker count; the client never holds it.

    Examples
    --------
    >>> G = rmat_distributed(16, seed=1, client=client)        # doctest: +SKIP
    """
    from .. import comms
    from ..cluster import chosen_workers, default_client
    from ..partition import RowBlocks, TaskLineage, block_offsets

    _validate_scale(scale, edgefactor, seed)
    client = default_client(client)
    addrs = chosen_workers(client, workers)
    P = len(addrs)
    n = 1 << scale
    n_blocks = -(-edgefactor * n // EDGE_BLOCK)
    offsets = block_offsets(n, P)
    rank_blocks = [list(range(r, n_blocks, P)) for r in range(P)]
    futs = comms.run_spmd(_rmat_rank, rank_blocks, scale, edgefactor, seed, offsets, client=client,
                          workers=addrs, name="rmat", publish_info=True)
    comms.wait_group(futs)
    parts, infos = comms.split_results(futs)
    return RowBlocks(parts, offsets, (n, n), np.dtype(np.float64), addrs, kind="csr",
                     nnz=sum(i["nnz"] for i in infos), symmetric=True,
                     meta={"generator": "graph500", "scale": scale, "edgefactor": edgefactor, "seed": seed,
                           "bytes_moved": sum(i["bytes_sent"] for i in infos)},
                     lineage=TaskLineage(_rmat_part, [(scale, edgefactor, seed, int(offsets[r]), int(offsets[r + 1]))
                                                      for r in range(P)]))


def search_keys(degrees_or_graph: Any, n: int = 64, seed: int = 0) -> np.ndarray:
    """Graph500 search keys: ``n`` distinct random vertices of degree >= 1.

    Accepts a degree vector or a host sparse matrix.  Fewer keys are returned
    when fewer vertices have edges.

    Examples
    --------
    >>> search_keys(rmat(8, seed=3), 4, seed=1).size
    4
    """
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    check_seed(seed)
    if sp.issparse(degrees_or_graph):
        deg = np.diff(edge_pattern(degrees_or_graph).indptr)   # a stored zero is no edge
    else:
        deg = np.asarray(degrees_or_graph)
        if deg.ndim != 1 or deg.dtype.kind not in "iuf":
            raise TypeError(f"degrees_or_graph must be a degree vector or a sparse matrix, got "
                            f"{type(degrees_or_graph).__name__}")
    candidates = np.flatnonzero(deg > 0)
    rng = np.random.default_rng([int(seed), 0xB5F])
    k = min(int(n), len(candidates))
    return np.sort(rng.choice(candidates, size=k, replace=False)).astype(np.int64)


def grid_graph(shape: Sequence[int], periodic: bool = False) -> sp.csr_matrix:
    """Symmetric adjacency of a 1-D, 2-D or 3-D lattice (a stencil graph, many BFS levels).

    Examples
    --------
    >>> grid_graph((4, 5)).shape
    (20, 20)
    """
    if (not isinstance(shape, Sequence) or not 1 <= len(shape) <= 3
            or not all(isinstance(s, int | np.integer) and not isinstance(s, bool) and s >= 1 for s in shape)):
        raise ValueError(f"shape must be one to three positive ints, got {shape!r}")
    if not isinstance(periodic, bool | np.bool_):
        raise TypeError(f"periodic must be a bool, got {type(periodic).__name__} {periodic!r}")
    shape = tuple(int(s) for s in shape)
    n = int(np.prod(shape))
    idx = np.arange(n).reshape(shape)
    src, dst = [], []
    for ax in range(len(shape)):
        a = idx
        b = np.roll(idx, -1, axis=ax)
        if not periodic:
            sl = [slice(None)] * len(shape)
            sl[ax] = slice(0, shape[ax] - 1)
            a, b = a[tuple(sl)], b[tuple(sl)]
        src.append(a.ravel())
        dst.append(b.ravel())
    s, d = np.concatenate(src), np.concatenate(dst)
    return _symmetric_csr(np.concatenate([s, d]), np.concatenate([d, s]), n, n)
