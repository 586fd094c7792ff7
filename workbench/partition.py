"""Distributed containers the kernels share.

* :class:`RowBlocks` -- a 1-D row-block partition: worker ``r`` owns rows
  ``offsets[r]:offsets[r+1]`` of a CSR matrix (global column ids) or of a dense
  array (points, batches).  ``owner_of(v)`` maps a row/vertex to its rank.
* :class:`BlockGrid` -- a 2-D R x C grid of blocks; block (i, j) holds rows
  ``row_offsets[i]:row_offsets[i+1]`` and columns ``col_offsets[j]:...`` and
  lives on ``workers[i * C + j]``.

Both hold one Dask future per block, pinned to its worker; the client keeps
only the futures and the offsets.  :func:`distribute` is the public way to
build them from host data; generators in :mod:`workbench.data` build them on
the workers directly.  Kernels never rebuild their own.

Examples
--------
>>> import scipy.sparse as sp, workbench as wb
>>> with wb.cluster(n_workers=2, quiet=True) as client:        # doctest: +SKIP
...     G = wb.distribute(sp.random(100, 100, 0.05, format="csr"), client=client)
...     G.n_parts, G.offsets
(2, array([  0,  50, 100]))
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .cluster import backend_of, default_client, worker_addresses

__all__ = [
    "RowBlocks",
    "BlockGrid",
    "distribute",
    "block_offsets",
    "owner_of",
    "grid_shape",
    "rows_of",
    "as_row_blocks",
]


def block_offsets(n: int, n_parts: int) -> np.ndarray:
    """Offsets (n_parts + 1,) splitting ``range(n)`` into near-equal contiguous blocks.

    The first ``n % n_parts`` blocks get one extra element.
    """
    if n_parts < 1:
        raise ValueError(f"n_parts must be >= 1, got {n_parts}")
    base, extra = divmod(int(n), int(n_parts))
    sizes = np.full(n_parts, base, dtype=np.int64)
    sizes[:extra] += 1
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def owner_of(index: Any, offsets: np.ndarray) -> Any:
    """Rank owning each global index given block ``offsets`` (works on cupy too)."""
    from .backend import namespace

    xp = namespace(index)
    offs = xp.asarray(offsets)
    return xp.searchsorted(offs, index, side="right") - 1


def grid_shape(n_workers: int) -> tuple[int, int]:
    """The most square R x C factorisation of ``n_workers`` with R >= C."""
    c = int(math.isqrt(n_workers))
    while n_workers % c:
        c -= 1
    return n_workers // c, c


@dataclass
class RowBlocks:
    """1-D row-block partition held on the workers.

    Attributes
    ----------
    parts : list of distributed.Future
        One block per rank: a CSR matrix (``kind="csr"``, global column ids)
        or a dense array (``kind="dense"``).
    offsets : ndarray (n_parts + 1,)
        Row ``v`` lives on rank ``owner_of(v)``.
    shape : tuple
        Global shape.
    workers : list of str
        Worker address of each rank.
    """

    parts: list
    offsets: np.ndarray
    shape: tuple
    dtype: np.dtype
    workers: list[str]
    kind: str = "csr"
    nnz: int | None = None
    symmetric: bool | None = None
    meta: dict = field(default_factory=dict)

    @property
    def n_parts(self) -> int:
        return len(self.parts)

    @property
    def backend(self) -> str:
        return self.meta.get("backend", "cpu")

    def owner_of(self, index: Any) -> Any:
        """Rank that owns row/vertex ``index`` (scalar or array)."""
        return owner_of(index, self.offsets)

    def to_dask_array(self) -> Any:
        """The dense blocks as a dask array (chunked by rank along axis 0)."""
        import dask.array as da
        from dask import delayed

        if self.kind != "dense":
            raise TypeError("to_dask_array needs dense row blocks")
        blocks = [
            da.from_delayed(delayed(f), shape=(int(self.offsets[r + 1] - self.offsets[r]),) + tuple(self.shape[1:]),
                            dtype=self.dtype)
            for r, f in enumerate(self.parts)
        ]
        return da.concatenate(blocks, axis=0)

    def gather(self, client: Any = None) -> Any:
        """Bring the whole container to the client (explicit, for checks only)."""
        client = default_client(client)
        blocks = client.gather(list(self.parts))
        if self.kind == "csr":
            import scipy.sparse as sp

            from .backend import to_host
            return sp.vstack([to_host(b) for b in blocks], format="csr")
        from .backend import to_host
        return np.concatenate([to_host(b) for b in blocks], axis=0)

    def __repr__(self) -> str:
        return (f"RowBlocks(kind={self.kind!r}, shape={self.shape}, n_parts={self.n_parts}, "
                f"nnz={self.nnz}, dtype={self.dtype})")


@dataclass
class BlockGrid:
    """2-D block grid held on the workers; block (i, j) on ``workers[i*C + j]``."""

    blocks: list[list]
    row_offsets: np.ndarray
    col_offsets: np.ndarray
    shape: tuple
    dtype: np.dtype
    workers: list[str]
    kind: str = "csr"
    nnz: int | None = None
    symmetric: bool | None = None
    meta: dict = field(default_factory=dict)

    @property
    def grid(self) -> tuple[int, int]:
        return len(self.blocks), len(self.blocks[0])

    @property
    def n_parts(self) -> int:
        r, c = self.grid
        return r * c

    @property
    def parts(self) -> list:
        """Blocks in rank order (row-major)."""
        return [b for row in self.blocks for b in row]

    def worker_of(self, i: int, j: int) -> str:
        return self.workers[i * self.grid[1] + j]

    def gather(self, client: Any = None) -> Any:
        """Bring the whole matrix to the client (explicit, for checks only)."""
        import scipy.sparse as sp

        from .backend import to_host

        client = default_client(client)
        rows = [[to_host(b) for b in client.gather(list(row))] for row in self.blocks]
        if self.kind == "csr":
            return sp.bmat(rows, format="csr")
        return np.block(rows)

    def __repr__(self) -> str:
        return f"BlockGrid(kind={self.kind!r}, shape={self.shape}, grid={self.grid}, nnz={self.nnz})"


# --------------------------------------------------------------------------
# distribute
# --------------------------------------------------------------------------


def _is_sparse(obj: Any) -> bool:
    import scipy.sparse as sp

    if sp.issparse(obj):
        return True
    from .backend import is_device_array
    return is_device_array(obj) and not hasattr(obj, "__array_namespace__") and hasattr(obj, "tocsr")


def _scatter_to(client: Any, obj: Any, worker: str) -> Any:
    [fut] = client.scatter([obj], workers=[worker], direct=True, hash=False, broadcast=False)
    if backend_of(client) == "gpu":
        # on GPU workers a partition lives in device memory: moved there once, when distributed
        from .backend import to_device

        fut = client.submit(to_device, fut, workers=[worker], allow_other_workers=False, pure=False)
    return fut


def distribute(obj: Any, client: Any = None, *, partition: str = "1d", grid: tuple[int, int] | None = None,
               workers: Sequence[str] | None = None, n_parts: int | None = None,
               symmetric: bool | None = None) -> RowBlocks | BlockGrid | Any:
    """Place a host matrix, array or point set on the workers, once.

    Parameters
    ----------
    obj : scipy.sparse matrix, ndarray, dask array, or a container
        Sparse matrices become CSR blocks, dense arrays row blocks.  A
        :class:`RowBlocks`/:class:`BlockGrid` or a dask array is returned as is.
    client : distributed.Client, optional
        Default: the current client.
    partition : {"1d", "2d"}
        Row blocks (one per worker) or an R x C block grid.
    grid : (R, C), optional
        Grid for ``partition="2d"``; default the most square factorisation
        of the worker count.
    workers : list of str, optional
        Workers to use, in rank order.  Default: all, sorted.
    n_parts : int, optional
        Number of row blocks (default: one per worker; blocks are dealt to
        workers round-robin when larger).
    symmetric : bool, optional
        Record that a sparse matrix is symmetric (checked by graph kernels).

    Returns
    -------
    RowBlocks or BlockGrid

    Examples
    --------
    >>> G = distribute(A, client=client)                         # doctest: +SKIP
    >>> G2 = distribute(A, client=client, partition="2d")        # doctest: +SKIP
    """
    if isinstance(obj, RowBlocks | BlockGrid):
        return obj
    try:
        import dask.array as da
        if isinstance(obj, da.Array):
            return obj
    except ImportError:  # pragma: no cover
        pass
    if partition not in ("1d", "2d"):
        raise ValueError(f"partition must be '1d' or '2d', got {partition!r}")
    client = default_client(client)
    addrs = list(workers) if workers is not None else worker_addresses(client)
    if not addrs:
        raise ValueError("the cluster has no workers")

    if _is_sparse(obj):
        A = obj.tocsr()
        if A.ndim != 2:
            raise ValueError(f"expected a 2-D sparse matrix, got ndim={A.ndim}")
        if not A.has_sorted_indices:
            A = A.sorted_indices()
        if partition == "1d":
            P = n_parts or len(addrs)
            offs = block_offsets(A.shape[0], P)
            parts = [_scatter_to(client, A[offs[r]:offs[r + 1]], addrs[r % len(addrs)]) for r in range(P)]
            return RowBlocks(parts, offs, tuple(A.shape), A.dtype, [addrs[r % len(addrs)] for r in range(P)],
                             kind="csr", nnz=int(A.nnz), symmetric=symmetric)
        R, C = grid or grid_shape(len(addrs))
        if R * C > len(addrs):
            raise ValueError(f"grid {R}x{C} needs {R * C} workers, the cluster has {len(addrs)}")
        roffs, coffs = block_offsets(A.shape[0], R), block_offsets(A.shape[1], C)
        blocks = []
        for i in range(R):
            rows = A[roffs[i]:roffs[i + 1]].tocsc()
            row = []
            for j in range(C):
                blk = rows[:, coffs[j]:coffs[j + 1]].tocsr()
                row.append(_scatter_to(client, blk, addrs[i * C + j]))
            blocks.append(row)
        return BlockGrid(blocks, roffs, coffs, tuple(A.shape), A.dtype, addrs[:R * C], kind="csr",
                         nnz=int(A.nnz), symmetric=symmetric)

    x = np.asarray(obj) if not hasattr(obj, "__cuda_array_interface__") else obj
    if x.ndim == 0:
        raise ValueError("cannot distribute a scalar")
    if partition == "2d":
        if x.ndim != 2:
            raise ValueError("partition='2d' needs a 2-D array")
        R, C = grid or grid_shape(len(addrs))
        roffs, coffs = block_offsets(x.shape[0], R), block_offsets(x.shape[1], C)
        blocks = [[_scatter_to(client, np.ascontiguousarray(x[roffs[i]:roffs[i + 1], coffs[j]:coffs[j + 1]]),
                               addrs[i * C + j]) for j in range(C)] for i in range(R)]
        return BlockGrid(blocks, roffs, coffs, tuple(x.shape), x.dtype, addrs[:R * C], kind="dense")
    P = n_parts or len(addrs)
    offs = block_offsets(x.shape[0], P)
    parts = [_scatter_to(client, np.ascontiguousarray(x[offs[r]:offs[r + 1]]), addrs[r % len(addrs)])
             for r in range(P)]
    return RowBlocks(parts, offs, tuple(x.shape), x.dtype, [addrs[r % len(addrs)] for r in range(P)], kind="dense")


def rows_of(x: Any, client: Any = None, workers: Sequence[str] | None = None) -> RowBlocks:
    """A dense dask array (or RowBlocks) as :class:`RowBlocks` pinned one block
    per worker, computed on the workers (the client never holds the data).

    The array is rechunked along axis 0 to one chunk per worker first.
    """
    if isinstance(x, RowBlocks):
        return x
    import dask.array as da

    if not isinstance(x, da.Array):
        raise TypeError(f"expected a dask array or RowBlocks, got {type(x).__name__}")
    client = default_client(client)
    addrs = list(workers) if workers is not None else worker_addresses(client)
    offs = block_offsets(x.shape[0], len(addrs))
    chunks0 = tuple(int(s) for s in np.diff(offs))
    xr = x.rechunk({0: chunks0, **{i: -1 for i in range(1, x.ndim)}})
    delayed_blocks = xr.to_delayed().ravel()
    futs = [client.compute(d, workers=[addrs[r]], allow_other_workers=False)
            for r, d in enumerate(delayed_blocks)]
    return RowBlocks(futs, offs, tuple(x.shape), x.dtype, addrs, kind="dense")


def as_row_blocks(obj: Any, client: Any = None, *, kind: str | None = None) -> RowBlocks:
    """Host data, a dask array or RowBlocks as :class:`RowBlocks` (the kernels' entry)."""
    if isinstance(obj, RowBlocks):
        if kind is not None and obj.kind != kind:
            raise TypeError(f"expected {kind} row blocks, got {obj.kind}")
        return obj
    if isinstance(obj, BlockGrid):
        raise TypeError("this kernel needs a 1-D partition; distribute with partition='1d'")
    try:
        import dask.array as da
        if isinstance(obj, da.Array):
            return rows_of(obj, client)
    except ImportError:  # pragma: no cover
        pass
    out = distribute(obj, client)
    assert isinstance(out, RowBlocks)
    return out


# --------------------------------------------------------------------------
# Properties checked once per container
# --------------------------------------------------------------------------

_MIX1, _MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _edge_hash(xp: Any, rows: Any, cols: Any) -> Any:
    """splitmix64 of the ordered pair (row, col): a different 64-bit word per pair."""
    z = rows.astype(xp.uint64) * _GOLDEN + cols.astype(xp.uint64)
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def pattern_hashes(block: Any, row0: int, col0: int = 0) -> tuple[int, int, int]:
    """Sums (mod 2**64) of the hashes of a CSR block's pairs (i, j) and of the
    reversed pairs (j, i), global ids, and its entry count (runs on a worker)."""
    from .backend import namespace

    xp = namespace(block.indptr)
    counts = xp.diff(block.indptr)
    rows = xp.repeat(xp.arange(row0, row0 + block.shape[0], dtype=xp.int64), counts)
    cols = block.indices.astype(xp.int64) + col0
    with np.errstate(over="ignore"):
        fwd = _edge_hash(xp, rows, cols).sum(dtype=xp.uint64)
        bwd = _edge_hash(xp, cols, rows).sum(dtype=xp.uint64)
    return int(fwd), int(bwd), int(block.nnz)


def check_symmetric(G: RowBlocks | BlockGrid, client: Any = None) -> bool:
    """Whether a distributed sparse matrix has a symmetric pattern; checked once
    and remembered on the container (``G.symmetric``).

    Each worker hashes its own entries and their transposes; the pattern is
    symmetric exactly when the multiset of pairs (i, j) equals that of (j, i),
    which the sums of a 64-bit mixing hash over both tell apart (a false "yes"
    needs a 2**-64 coincidence).  Only three integers per block travel, so the
    check costs one round of tiny tasks instead of an all-to-all of every edge.

    Examples
    --------
    >>> G = distribute(A, client=client)              # doctest: +SKIP
    >>> check_symmetric(G), G.symmetric               # doctest: +SKIP
    (True, True)
    """
    if G.symmetric is not None:
        return bool(G.symmetric)
    if G.kind != "csr":
        raise TypeError(f"check_symmetric needs a sparse (csr) container, got kind={G.kind!r}")
    if G.shape[0] != G.shape[1]:
        G.symmetric = False
        return False
    client = default_client(client)
    if isinstance(G, RowBlocks):
        where = [(f, int(G.offsets[r]), 0, G.workers[r]) for r, f in enumerate(G.parts)]
    else:
        R, C = G.grid
        where = [(G.blocks[i][j], int(G.row_offsets[i]), int(G.col_offsets[j]), G.worker_of(i, j))
                 for i in range(R) for j in range(C)]
    futs = [client.submit(pattern_hashes, f, r0, c0, workers=[w], pure=False) for f, r0, c0, w in where]
    sums = client.gather(futs)
    mask = (1 << 64) - 1
    fwd = sum(s[0] for s in sums) & mask
    bwd = sum(s[1] for s in sums) & mask
    G.symmetric = fwd == bwd
    return bool(G.symmetric)
