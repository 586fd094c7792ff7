"""A seeded random sparse matrix, built in memory proportional to its nonzeros.

``scipy.sparse.random`` draws its nonzeros from the whole ``m * n`` index
space, which at 200000 x 80000 asks for tens of GiB before it has placed a
single entry.  Here rows come in fixed blocks of :data:`ROW_BLOCK`, each from
its own RNG stream ``(seed, block)``: a binomial count of nonzeros per row,
that many uniform column ids (duplicates in a row merged, which removes about
``count / 2n`` of them), then the values.  A block depends only on
``(shape, density, seed, block)``, so the matrix is the same however many
workers build it, and a worker builds only the blocks that overlap its rows.

Examples
--------
>>> A = random_sparse((1000, 500), 0.01, seed=3)
>>> A.shape, 4000 < A.nnz < 6000
((1000, 500), True)
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..backend import unique_sorted

__all__ = ["random_sparse", "random_sparse_rows", "random_sparse_bytes", "ROW_BLOCK"]

#: Rows per RNG stream.  Fixed, so the matrix does not depend on the worker count.
ROW_BLOCK = 1 << 14

_VALUES = ("uniform", "normal", "ones")


def check_seed(seed: Any) -> None:
    """A generator's seed: a non-negative int (1.5 or True would be truncated to another graph's seed)."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")


def _check(shape: Any, density: Any, seed: Any, values: str) -> tuple[int, int]:
    if (not isinstance(shape, Sequence) or len(shape) != 2
            or not all(isinstance(s, int | np.integer) and s >= 1 for s in shape)):
        raise ValueError(f"shape must be two positive ints (rows, columns), got {shape!r}")
    if not isinstance(density, int | float | np.number) or not 0.0 <= float(density) <= 1.0:
        raise ValueError(f"density must be a number in [0, 1], got {density!r}")
    check_seed(seed)
    if values not in _VALUES:
        raise ValueError(f"values must be one of {_VALUES}, got {values!r}")
    return int(shape[0]), int(shape[1])


def _real_dtype(dtype: Any) -> np.dtype:
    try:
        dtype = np.dtype(dtype)
    except TypeError as e:   # numpy's "data type 'foo' not understood"
        raise TypeError(f"dtype must be a real numeric dtype, got {dtype!r}") from e
    if dtype.kind not in "fiu":
        raise TypeError(f"dtype must be a real numeric dtype, got {dtype}")
    return dtype


def _block(m: int, n: int, density: float, seed: int, block: int, values: str,
           dtype: np.dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows ``[block * ROW_BLOCK, ...)`` as (row counts, column ids, values)."""
    r0 = block * ROW_BLOCK
    rows = min(ROW_BLOCK, m - r0)
    rng = np.random.default_rng([int(seed), 0x5A45E, int(block)])
    counts = rng.binomial(n, density, size=rows)
    # each row's columns: a uniform subset of its count, drawn as the zeros' complement past half full
    dense = density > 0.5
    key = _distinct_per_row(rng, n - counts if dense else counts, n)
    if dense:
        full = np.arange(rows, dtype=np.int64)[:, None] * np.int64(n) + np.arange(n, dtype=np.int64)
        key = np.setdiff1d(full.ravel(), key, assume_unique=True)
    local, cols = np.divmod(key, np.int64(n))             # sorted by row, then column
    del key
    counts = np.bincount(local, minlength=rows)
    if values == "uniform":
        vals = rng.random(cols.size)
    elif values == "normal":
        vals = rng.standard_normal(cols.size)
    else:
        vals = np.ones(cols.size)
    return counts, cols, vals.astype(dtype, copy=False)


def _distinct_per_row(rng: np.random.Generator, counts: np.ndarray, n: int) -> np.ndarray:
    """Sorted keys ``row * n + col`` of ``counts[row]`` distinct uniform columns per row (counts <= n / 2):
    draws with replacement, merged, and the shortfall drawn again (it at least halves each round)."""
    rows = np.arange(counts.size, dtype=np.int64)
    key = np.empty(0, np.int64)
    need = counts.astype(np.int64)
    while need.any():
        local = np.repeat(rows, need)
        key = unique_sorted(np.concatenate([key, local * np.int64(n) + rng.integers(0, n, local.size)]))
        need = counts - np.bincount(key // n, minlength=counts.size)
    return key


def random_sparse_rows(shape: Sequence[int], density: float, seed: int, lo: int, hi: int, *,
                       values: str = "uniform", dtype: Any = np.float64) -> sp.csr_matrix:
    """Rows ``[lo, hi)`` of :func:`random_sparse` as a CSR block (global column ids).

    What each worker runs; only the row blocks that overlap ``[lo, hi)`` are drawn.
    """
    m, n = _check(shape, density, seed, values)
    if not 0 <= lo <= hi <= m:
        raise ValueError(f"row range [{lo}, {hi}) is not inside [0, {m})")
    dtype = _real_dtype(dtype)
    counts, cols, vals = [], [], []
    for b in range(lo // ROW_BLOCK, -(-hi // ROW_BLOCK)):
        c, j, v = _block(m, n, float(density), int(seed), b, values, dtype)
        b0 = b * ROW_BLOCK
        a, z = max(lo, b0) - b0, min(hi, b0 + len(c)) - b0
        start, stop = int(c[:a].sum()), int(c[:z].sum())
        counts.append(c[a:z])
        cols.append(j[start:stop])
        vals.append(v[start:stop])
    counts = np.concatenate(counts) if counts else np.zeros(0, np.int64)
    cols = np.concatenate(cols) if cols else np.zeros(0, np.int64)
    vals = np.concatenate(vals) if vals else np.zeros(0, dtype)
    idx = np.int32 if n < 2**31 and cols.size < 2**31 else np.int64
    indptr = np.zeros(hi - lo + 1, dtype=idx)
    np.cumsum(counts, out=indptr[1:])
    return sp.csr_matrix((vals, cols.astype(idx), indptr), shape=(hi - lo, n))


def random_sparse_bytes(shape: Sequence[int], density: float) -> int:
    """Peak bytes :func:`random_sparse` needs on one host, from the expected nonzeros.

    About 40 B per nonzero of the row block being drawn and merged, 28 B per
    nonzero for the blocks' pieces, their concatenation and the CSR's index
    copy, and 16 B per row.
    """
    m, n = _check(shape, density, 0, "uniform")
    nnz = m * n * float(density)
    block_nnz = min(m, ROW_BLOCK) * n * float(density)
    return int(28 * nnz + 16 * (m + 1) + 40 * block_nnz) + (1 << 20)


def random_sparse(shape: Sequence[int], density: float, seed: int = 0, client: Any = None, *,
                  values: str = "uniform", dtype: Any = np.float64,
                  workers: Sequence[str] | None = None) -> Any:
    """A seeded random sparse matrix: host CSR, or row blocks built on the workers.

    Each row has a binomial(``n``, ``density``) number of nonzeros at distinct
    uniform random columns, as ``scipy.sparse.random``
    but drawn per row block, so memory is linear in the nonzeros and rows,
    never in ``m * n``.  The same seed gives the same matrix on the host and
    on any number of workers.

    Parameters
    ----------
    shape : (int, int)
        Rows and columns.
    density : float
        Expected fraction of nonzeros, in [0, 1].
    seed : int
        RNG seed (non-negative).
    client : distributed.Client, optional
        Without one, the matrix is built here and returned as
        ``scipy.sparse.csr_matrix``.  With one, every worker builds its own
        contiguous rows and a :class:`~workbench.partition.RowBlocks` comes
        back; the matrix never passes through the client.
    values : {"uniform", "normal", "ones"}
        Values: uniform in [0, 1) (scipy's default), standard normal, or 1.
    dtype : numpy dtype
        Value dtype (float64 by default).
    workers : list of str, optional
        Worker addresses, one row block each (default: every worker).

    Returns
    -------
    scipy.sparse.csr_matrix or RowBlocks

    Examples
    --------
    >>> A = random_sparse((200000, 80000), 5e-5, seed=1)       # ~800k nonzeros, tens of MB
    >>> A.shape
    (200000, 80000)
    >>> G = random_sparse((200000, 80000), 5e-5, seed=1, client=client)   # doctest: +SKIP
    >>> (G.gather(client) != A).nnz                                        # doctest: +SKIP
    0
    """
    m, n = _check(shape, density, seed, values)
    if client is None and workers is None:
        return random_sparse_rows((m, n), density, seed, 0, m, values=values, dtype=dtype)
    from ..cluster import chosen_workers, default_client
    from ..partition import RowBlocks, TaskLineage, block_offsets

    client = default_client(client)
    addrs = chosen_workers(client, workers)
    offsets = block_offsets(m, len(addrs))
    parts = [client.submit(random_sparse_rows, (m, n), density, int(seed), int(offsets[r]), int(offsets[r + 1]),
                           values=values, dtype=dtype, workers=[w], allow_other_workers=False, pure=False)
             for r, w in enumerate(addrs)]
    nnz = sum(client.gather([client.submit(getattr, f, "nnz", workers=[w], pure=False)
                             for f, w in zip(parts, addrs, strict=True)]))
    # a lost partition is generated again from its seed, alone (the same rows, bit for bit)
    lineage = TaskLineage(functools.partial(random_sparse_rows, values=values, dtype=dtype),
                          [((m, n), density, int(seed), int(offsets[r]), int(offsets[r + 1]))
                           for r in range(len(addrs))])
    return RowBlocks(parts, offsets, (m, n), np.dtype(dtype), addrs, kind="csr", nnz=int(nnz), symmetric=False,
                     lineage=lineage,
                     meta={"generator": "random_sparse", "density": float(density), "seed": int(seed),
                           "values": values})
