"""Sparsity patterns as the graph kernels read them: a stored zero no edge, a pair stored twice summed (one
edge, none where its values cancel: the matrix's entry, as scipy reads it).

The per-block pieces of the symmetry check (:func:`workbench.partition.check_symmetric`, which runs
:func:`pattern_hashes` on each block's worker) and the host helpers the kernels and validators share.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def splitmix64(z: Any) -> Any:
    """splitmix64's finalizer over a uint64 array (numpy or cupy): a well-mixed 64-bit word per input,
    the hash every rank computes alike (edge hashes here, coloring's tie-break priorities)."""
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _edge_hash(xp: Any, rows: Any, cols: Any) -> Any:
    """A different 64-bit word per ordered pair (row, col) of ids below 2**32: splitmix64(row * 2**32 + col)."""
    with np.errstate(over="ignore"):
        return splitmix64((rows.astype(xp.uint64) << xp.uint64(32)) + cols.astype(xp.uint64))


def pattern_hashes(block: Any, row0: int, col0: int = 0) -> tuple[int, int, int]:
    """Sums (mod 2**64) of the hashes of a CSR block's pairs (i, j) and of the
    reversed pairs (j, i), global ids, and its pair count (runs on a worker).
    A stored zero is no edge and a pair stored twice is summed, as the graph
    kernels read them."""
    from ..backend import namespace

    xp = namespace(block.indptr)
    if xp is np:
        from ._pattern import pattern_sums

        fwd, bwd, count, ordered = pattern_sums(block.indptr, block.indices, block.data, int(row0), int(col0))
        if ordered:
            return int(fwd), int(bwd), int(count)
    block = _summed(block)
    rows = xp.searchsorted(block.indptr, xp.arange(block.indptr[-1]), side="right") - 1
    cols = block.indices.astype(xp.int64)
    edge = block.data != 0
    rows, cols = rows[edge].astype(xp.int64) + row0, cols[edge] + col0
    with np.errstate(over="ignore"):
        fwd = _edge_hash(xp, rows, cols).sum(dtype=xp.uint64)
        bwd = _edge_hash(xp, cols, rows).sum(dtype=xp.uint64)
    return int(fwd), int(bwd), int(rows.shape[0])


def edge_pattern(block: Any) -> Any:
    """A sparse block as host CSR with the edges the graph kernels read: its nonzero entries, a stored zero
    no edge (the searches and colorings followed stored zeros, where the symmetry checks did not).  The
    block's own arrays are never changed: one with stored zeros is copied first.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> A = sp.csr_matrix((np.array([1.0, 0.0]), np.array([1, 0]), np.array([0, 1, 2])), shape=(2, 2))
    >>> edge_pattern(A).nnz, A.nnz
    (1, 2)
    """
    import scipy.sparse as sp

    from ..backend import to_host

    A = _summed(sp.csr_matrix(to_host(block)))
    if A.nnz and not A.data.all():
        A = A.copy()
        A.eliminate_zeros()
    return A


def _summed(A: Any) -> Any:
    """A CSR block (scipy or cupyx) with each pair stored once, its values summed as the matrix's entry is
    (a copy where a pair was stored twice; the caller's arrays stay as they were)."""
    if A.has_canonical_format:
        return A
    A = A.copy()
    A.sum_duplicates()
    return A


def pattern_symmetric(A: Any) -> bool:
    """Whether a host sparse matrix's pattern is symmetric: its nonzero entries, a stored zero no edge
    and a pair stored twice summed, as :func:`check_symmetric` and the graph kernels read them (values
    play no part: any nonzero is an edge).

    Examples
    --------
    >>> pattern_symmetric(sp.csr_matrix(np.array([[0, 1], [2, 0]])))     # doctest: +SKIP
    True
    """
    import scipy.sparse as sp

    if A.shape[0] != A.shape[1]:
        return False
    # a CSC matrix's transpose is CSR on the same arrays (symmetric alike); the pair hashes that
    # check_symmetric sums on the workers, in one pass (comparing A with A.T built the transpose:
    # 0.4 s of every call that passed a SCALE 20 graph, 33M entries)
    B = A.T if getattr(A, "format", None) == "csc" else sp.csr_matrix(A)
    fwd, bwd, _ = pattern_hashes(B, 0, 0)
    return fwd == bwd


def check_symmetric(G: Any, client: Any = None) -> bool:
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
    from ..cluster import default_client

    client = default_client(client)
    if hasattr(G, "offsets"):   # RowBlocks (a BlockGrid has row_offsets and col_offsets)
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
