"""Distributed sparse x dense (SpMM) and sparse x sparse (SpGEMM) multiplication.

Reproduces Brock, Buluç and Yelick, "RDMA-Based Algorithms for Sparse Matrix
Multiplication on GPUs" (ICS'24).  ``C = A @ B`` is cut into multiply units
``C(i, j) += A(i, l) @ B(l, j)`` over tiles owned by the workers, and the
paper's variants schedule those units differently:

* ``"stationary-c"`` -- the owner of C(i, j) loops over ``l`` starting at
  ``(i + j) mod L`` (staggered), fetching A(i, l) and B(l, j) and prefetching
  the next pair while it multiplies the current one.
* ``"stationary-a"`` -- the owner of A(i, l) fetches B(l, j), multiplies and
  pushes the partial C(i, j) to its owner, which accumulates.
* ``"summa"`` -- bulk-synchronous broadcasts of A panels along grid rows and
  B panels along grid columns (the baseline).
* ``"work-stealing"`` -- units start queued at their C owner (locality-aware);
  a rank whose queue is empty claims units from the others, preferring units
  whose A tile it owns, in a random victim order.

Dask has no RDMA; the one-sided gets and claims are served by a thread per
peer on the owning rank, talking through :mod:`workbench.comms` inside one
SPMD group, so no coordinator sits on the path.  A tile request carries the
rows of B the A tile actually touches (its non-empty columns), so only those
rows travel -- the communication-minimal form for a 1-D row partition.

Layouts: with ``A`` in 1-D row blocks (the default for host input, or a
:class:`~workbench.partition.RowBlocks`), B is row-partitioned the same way
and the inner index runs over the P row blocks of B (a P x 1 grid).  With a
:class:`~workbench.partition.BlockGrid` (or ``grid=(R, C)``) A is tiled
R x C, B is tiled C x C over the grid's first rows and C(i, j) lives with
A(i, j).

Examples
--------
>>> import numpy as np, workbench as wb
>>> with wb.cluster(n_workers=2, quiet=True) as client:          # doctest: +SKIP
...     A = wb.data.rmat(10, seed=1)
...     B = np.random.default_rng(0).random((A.shape[1], 8))
...     C, stats = wb.spmm(A, B, client=client, return_stats=True)
...     np.allclose(np.asarray(C), A @ B), stats["gflops"] > 0
(True, True)
"""

from __future__ import annotations

import collections
import operator
import random
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ... import comms
from ...backend import empty, namespace, sparse_namespace, to_host
from ...cluster import default_client, worker_addresses
from ...partition import BlockGrid, RowBlocks, block_offsets, distribute, rows_of

__all__ = ["spmm", "spgemm", "validate_spmm", "SparseResult", "ALGORITHMS", "traffic_bytes"]

ALGORITHMS = ("stationary-c", "stationary-a", "summa", "work-stealing")
_PHASES = ("prepare", "issue", "fetch_wait", "compute", "accumulate", "sync")


def spmm(A: Any, B: Any, *, algorithm: str = "auto", grid: tuple[int, int] | None = None, client: Any = None,
         return_stats: bool = False, seed: int = 0) -> Any:
    """Distributed ``A @ B`` for sparse A (m x n) and dense B (n x k).

    Parameters
    ----------
    A : scipy.sparse matrix, RowBlocks or BlockGrid (kind "csr")
        Host input is distributed first (1-D row blocks, or a grid when
        ``grid`` is given); distributed input stays where it is.
    B : ndarray, dask array or dense RowBlocks, 2-D (n x k)
        With 1-D A, B is split into the same number of row blocks (a dense
        RowBlocks on A's workers is used in place).
    algorithm : {"auto", "stationary-c", "stationary-a", "summa", "work-stealing"}
        "auto" is stationary-C.
    grid : (R, C), optional
        Tile a host A over an R x C worker grid instead of 1-D row blocks.
    client : distributed.Client, optional
        Default: the current client.
    return_stats : bool
        Also return the stats dict: ``seconds`` (wall, launch to finish),
        ``gflops`` (2 nnz k / seconds), ``effective_gbps`` and
        ``traffic_bytes`` (model ``nnz (12 + 8k) + m k 8``), ``bytes_moved``
        (worker-to-worker bytes), ``phases`` (per-rank seconds in
        prepare/issue/fetch_wait/compute/accumulate/sync), ``phases_cpu``
        (the same phases in the rank thread's CPU seconds: wall well above
        CPU means the rank was waiting for a core), ``units``, ``steals``,
        ``algorithm``, ``grid``.
    seed : int
        Seed of the work-stealing victim order.

    Returns
    -------
    dask.array.Array, or (dask.array.Array, dict) with ``return_stats``
        C (m x k), its blocks left on the workers that computed them.

    Examples
    --------
    >>> C = spmm(A, B, client=client)                                # doctest: +SKIP
    >>> C, st = spmm(G, B, algorithm="work-stealing", return_stats=True)  # doctest: +SKIP
    """
    plan = _validate_spmm(A, B, algorithm, grid)
    client = default_client(client)
    t0 = time.perf_counter()
    lay, a_args, b_args = _place(plan, A, B, client)
    P = lay.size
    # compile/load the numba kernels here, never concurrently on the workers
    _warm_kernels(plan["dtype"], np.diff(lay.joffs))
    if isinstance(A, RowBlocks | BlockGrid):
        a_args = _prepared_tiles(A, lay, a_args, client)  # cut once per distributed A, reused by later calls
    rank_args = [(a_args[r], b_args[r]) for r in range(P)]
    futs = comms.run_spmd(_spmm_rank, rank_args, lay, plan["algorithm"], plan["check_finite"], seed,
                          client=client, workers=lay.workers, name=f"spmm-{plan['algorithm']}")
    comms.wait_group(futs)
    blocks, infos = comms.split_results(futs)
    seconds = time.perf_counter() - t0
    C = _as_dask_array(blocks, lay, plan["dtype"])
    if not return_stats:
        return C
    return C, _spmm_stats(infos, lay, plan, seconds)


def spgemm(A: Any, B: Any, *, client: Any = None, return_stats: bool = False) -> Any:
    """Distributed sparse ``A @ B`` (stationary-C with partial-sum accumulation).

    Rank i owns row block i of A and of C; for each row block l of B
    (staggered, its own first) it fetches only the rows of B(l) that A(i, l)
    touches, multiplies, and sums the partial products.

    Parameters
    ----------
    A, B : scipy.sparse matrix or RowBlocks (kind "csr")
        m x n and n x p.  B's row blocks define the inner tiles.
    client : distributed.Client, optional
    return_stats : bool
        Also return the stats dict (``seconds``, ``bytes_moved``, ``nnz``,
        ``phases``).

    Returns
    -------
    SparseResult (or (SparseResult, dict))
        Row blocks of C on the workers; ``to_scipy()`` gathers it.

    Examples
    --------
    >>> C = spgemm(A, A, client=client)                          # doctest: +SKIP
    >>> (C.to_scipy() != A @ A).nnz                              # doctest: +SKIP
    0
    """
    plan = _validate_spgemm(A, B)
    client = default_client(client)
    _warm_kernels()
    t0 = time.perf_counter()
    Ad = A if isinstance(A, RowBlocks) else distribute(A, client)
    workers = list(Ad.workers)
    if isinstance(B, RowBlocks) and list(B.workers) == workers:
        Bd = B
    else:
        Bd = distribute(B.gather(client) if isinstance(B, RowBlocks) else B, client, workers=workers)
    lay = _Layout("1d", workers, Ad.offsets, np.asarray(Bd.offsets), np.array([0, B.shape[1]]),
                  grid=(len(workers), 1))
    futs = comms.run_spmd(_spgemm_rank, [(a, b) for a, b in zip(Ad.parts, Bd.parts, strict=True)], lay,
                          plan["check_finite"], client=client, workers=workers, name="spgemm")
    comms.wait_group(futs)
    parts, infos = comms.split_results(futs)
    seconds = time.perf_counter() - t0
    nnz = sum(i["nnz"] for i in infos)
    out = SparseResult(parts, np.asarray(Ad.offsets), (A.shape[0], B.shape[1]), plan["dtype"], workers,
                       kind="csr", nnz=nnz)
    if not return_stats:
        return out
    return out, {"seconds": seconds, "nnz": nnz, "bytes_moved": sum(i["bytes_sent"] for i in infos),
                 "phases": [i["phases"] for i in infos], "units": sum(i["units"] for i in infos)}


class SparseResult(RowBlocks):
    """Distributed CSR row blocks of an SpGEMM result."""

    def to_scipy(self, client: Any = None) -> Any:
        """The whole result as one host ``scipy.sparse.csr_matrix``."""
        return self.gather(client)


def validate_spmm(A: Any, B: Any, C: Any, *, rtol: float | None = None, client: Any = None) -> dict:
    """Check a computed C against scipy's ``A @ B`` (an independent oracle).

    Distributed inputs are gathered to the client: a check for test-sized
    problems.  Returns ``{"ok", "max_rel_err", "rtol"}``; the error is
    ``max |C - A B| / max(max |A B|, tiny)``.
    """
    import scipy.sparse as sp

    def host(x: Any) -> Any:
        if isinstance(x, RowBlocks | BlockGrid):
            return x.gather(client)
        if hasattr(x, "compute") and hasattr(x, "dask"):
            return x.compute()
        if hasattr(x, "to_scipy"):
            return x.to_scipy(client)
        return to_host(x)

    Ah, Bh, Ch = host(A), host(B), host(C)
    ref = sp.csr_matrix(Ah) @ Bh
    if sp.issparse(ref):
        ref = ref.toarray()
        Ch = Ch.toarray() if sp.issparse(Ch) else np.asarray(Ch)
    Ch = np.asarray(Ch)
    if rtol is None:
        rtol = 1e-12 if np.result_type(Ah.dtype, Bh.dtype) == np.float64 else 1e-5
    if Ch.shape != ref.shape:
        return {"ok": False, "max_rel_err": np.inf, "rtol": rtol, "reason": f"shape {Ch.shape} != {ref.shape}"}
    scale = max(float(np.abs(ref).max(initial=0.0)), np.finfo(np.float64).tiny)
    err = float(np.abs(Ch - ref).max(initial=0.0)) / scale
    return {"ok": bool(err <= rtol), "max_rel_err": err, "rtol": rtol}


def traffic_bytes(nnz: int, m: int, k: int) -> int:
    """The no-reuse traffic model: every nonzero reads a row of B; C is written once."""
    return int(nnz) * (12 + 8 * int(k)) + int(m) * int(k) * 8


# --------------------------------------------------------------------------
# Validation (client side, before any work reaches the cluster)
# --------------------------------------------------------------------------


def _is_dask_array(x: Any) -> bool:
    try:
        import dask.array as da
    except ImportError:  # pragma: no cover
        return False
    return isinstance(x, da.Array)


def _is_sparse_host(x: Any) -> bool:
    import scipy.sparse as sp

    return sp.issparse(x) or (hasattr(x, "tocsr") and hasattr(x, "nnz") and not isinstance(x, RowBlocks | BlockGrid))


def _check_dtype(name: str, dtype: Any) -> None:
    dt = np.dtype(dtype)
    if dt.kind not in "fiub":
        raise TypeError(f"{name} must hold real numbers (float32/float64 or integers), got dtype {dt}")


def _check_finite_host(name: str, x: Any) -> None:
    vals = x.data if hasattr(x, "indptr") else x
    xp = namespace(vals)
    if xp.asarray(vals).dtype.kind == "f" and not bool(xp.isfinite(vals).all()):
        raise ValueError(f"{name} contains NaN or infinite values")


def _validate_spmm(A: Any, B: Any, algorithm: str, grid: tuple[int, int] | None) -> dict:
    if algorithm != "auto" and algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be 'auto' or one of {ALGORITHMS}, got {algorithm!r}")
    if isinstance(A, RowBlocks | BlockGrid):
        if A.kind != "csr":
            raise TypeError(f"A must be sparse (kind 'csr'), got a {A.kind} {type(A).__name__}")
        if grid is not None:
            raise ValueError("grid= applies to host A only; a distributed A keeps its own layout")
    elif not _is_sparse_host(A):
        raise TypeError(f"A must be a scipy/cupyx sparse matrix, RowBlocks or BlockGrid, got {type(A).__name__}")
    if isinstance(B, BlockGrid):
        raise TypeError("B as a BlockGrid is not supported; pass it host, as a dask array or as dense RowBlocks")
    if isinstance(B, RowBlocks):
        if B.kind != "dense":
            raise TypeError("B must be dense; for sparse x sparse use spgemm")
    elif not (_is_dask_array(B) or hasattr(B, "__array__") or hasattr(B, "__cuda_array_interface__")):
        raise TypeError(f"B must be a dense array, dask array or RowBlocks, got {type(B).__name__}")
    if _is_sparse_host(B):
        raise TypeError("B must be dense; for sparse x sparse use spgemm")
    if len(B.shape) != 2:
        raise ValueError(f"B must be 2-D (n x k), got shape {tuple(B.shape)}")
    if len(A.shape) != 2:
        raise ValueError(f"A must be 2-D, got shape {tuple(A.shape)}")
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"inner dimensions differ: A is {tuple(A.shape)}, B is {tuple(B.shape)}")
    _check_dtype("A", A.dtype)
    _check_dtype("B", B.dtype)
    if grid is not None:
        if (not isinstance(grid, tuple | list) or len(grid) != 2
                or not all(isinstance(g, int | np.integer) and g >= 1 for g in grid)):
            raise ValueError(f"grid must be (R, C) with positive ints, got {grid!r}")
    host_a, host_b = not isinstance(A, RowBlocks | BlockGrid), not (isinstance(B, RowBlocks) or _is_dask_array(B))
    if host_a:
        _check_finite_host("A", A)
    if host_b:
        _check_finite_host("B", B)
    dtype = np.result_type(A.dtype, B.dtype)
    if dtype.kind != "f":
        dtype = np.dtype(np.float64)
    algo = "stationary-c" if algorithm == "auto" else algorithm
    # distributed inputs are checked for NaN/inf on the workers, inside the group
    return {"algorithm": algo, "grid": grid, "dtype": dtype, "check_finite": (not host_a, not host_b),
            "shape": (int(A.shape[0]), int(A.shape[1]), int(B.shape[1])),
            "nnz": int(A.nnz) if A.nnz is not None else None}


def _validate_spgemm(A: Any, B: Any) -> dict:
    for name, x in (("A", A), ("B", B)):
        if isinstance(x, BlockGrid):
            raise TypeError(f"{name}: spgemm needs 1-D row blocks; distribute with partition='1d'")
        if isinstance(x, RowBlocks):
            if x.kind != "csr":
                raise TypeError(f"{name} must be sparse (kind 'csr'), got {x.kind}")
        elif not _is_sparse_host(x):
            raise TypeError(f"{name} must be a scipy sparse matrix or RowBlocks, got {type(x).__name__}")
        if len(x.shape) != 2:
            raise ValueError(f"{name} must be 2-D, got shape {tuple(x.shape)}")
        _check_dtype(name, x.dtype)
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"inner dimensions differ: A is {tuple(A.shape)}, B is {tuple(B.shape)}")
    host = [not isinstance(x, RowBlocks) for x in (A, B)]
    for name, x, h in (("A", A, host[0]), ("B", B, host[1])):
        if h:
            _check_finite_host(name, x)
    dtype = np.result_type(A.dtype, B.dtype)
    return {"dtype": dtype if dtype.kind == "f" else np.dtype(np.float64),
            "check_finite": (not host[0], not host[1])}


# --------------------------------------------------------------------------
# Tile layout and placement
# --------------------------------------------------------------------------


@dataclass
class _Layout:
    """Who owns which tile.  Rank r owns C(r // nJ, r % nJ)."""

    kind: str                 # "1d" (A row blocks, B row blocks) or "2d" (A on an R x C grid)
    workers: list
    roffs: np.ndarray         # rows of A / C
    koffs: np.ndarray         # inner index (columns of A, rows of B)
    joffs: np.ndarray         # columns of B / C
    grid: tuple = (1, 1)

    @property
    def size(self) -> int:
        return len(self.workers)

    @property
    def nI(self) -> int:
        return len(self.roffs) - 1

    @property
    def nL(self) -> int:
        return len(self.koffs) - 1

    @property
    def nJ(self) -> int:
        return len(self.joffs) - 1

    def owner_a(self, i: int, l: int) -> int:
        return i if self.kind == "1d" else i * self.nJ + l

    def owner_b(self, l: int, j: int) -> int:
        return l if self.kind == "1d" else (l % self.grid[0]) * self.nJ + j

    def owner_c(self, i: int, j: int) -> int:
        return i * self.nJ + j

    def c_tile(self, r: int) -> tuple[int, int]:
        return divmod(r, self.nJ)


def _place(plan: dict, A: Any, B: Any, client: Any) -> tuple[_Layout, list, list]:
    """Distribute what is on the host and describe every rank's tiles."""
    k = plan["shape"][2]
    if isinstance(A, RowBlocks) or (not isinstance(A, BlockGrid) and plan["grid"] is None):
        Ad = A if isinstance(A, RowBlocks) else distribute(A, client)
        workers = list(Ad.workers)
        if len(set(workers)) != len(workers):
            raise ValueError("A has several row blocks per worker; spmm needs one block per worker")
        Bd = _rows_on(B, client, workers)
        lay = _Layout("1d", workers, np.asarray(Ad.offsets), np.asarray(Bd.offsets), np.array([0, k]),
                      grid=(len(workers), 1))
        a_args = [{(r, -1): Ad.parts[r]} for r in range(lay.size)]
        b_args = [{(r, 0): Bd.parts[r]} for r in range(lay.size)]
        return lay, a_args, b_args
    if isinstance(A, BlockGrid):
        Ad = A
    else:
        R, C = plan["grid"]
        addrs = worker_addresses(client)
        if R * C > len(addrs):
            raise ValueError(f"grid {R}x{C} needs {R * C} workers, the cluster has {len(addrs)}")
        Ad = distribute(A, client, partition="2d", grid=(R, C))
    R, Cg = Ad.grid
    lay = _Layout("2d", list(Ad.workers), np.asarray(Ad.row_offsets), np.asarray(Ad.col_offsets),
                  block_offsets(k, Cg), grid=(R, Cg))
    a_args = [{} for _ in range(lay.size)]
    for i in range(R):
        for l in range(Cg):
            a_args[lay.owner_a(i, l)][(i, l)] = Ad.blocks[i][l]
    b_args = [{} for _ in range(lay.size)]
    Bsrc = B.to_dask_array() if isinstance(B, RowBlocks) else B
    for l in range(lay.nL):
        for j in range(lay.nJ):
            o = lay.owner_b(l, j)
            sl = (slice(int(lay.koffs[l]), int(lay.koffs[l + 1])), slice(int(lay.joffs[j]), int(lay.joffs[j + 1])))
            if _is_dask_array(Bsrc):
                fut = client.compute(Bsrc[sl], workers=[lay.workers[o]], allow_other_workers=False)
            else:
                tile = np.ascontiguousarray(Bsrc[sl]) if not hasattr(Bsrc, "__cuda_array_interface__") else Bsrc[sl]
                [fut] = client.scatter([tile], workers=[lay.workers[o]], direct=True, hash=False)
            b_args[o][(l, j)] = fut
    return lay, a_args, b_args


def _rows_on(B: Any, client: Any, workers: Sequence[str]) -> RowBlocks:
    """B as dense row blocks, one per worker of ``workers`` (used in place when it already is)."""
    if isinstance(B, RowBlocks) and list(B.workers) == list(workers):
        return B
    if isinstance(B, RowBlocks):
        return rows_of(B.to_dask_array(), client, workers=workers)
    if _is_dask_array(B):
        return rows_of(B, client, workers=workers)
    return distribute(B, client, workers=workers)


class _PreparedA:
    """One rank's A tiles, cut and index-compressed for multiplication (see
    :class:`_TileStore`), plus what the group needs to know about them."""

    def __init__(self, tiles: dict, finite: bool, dtypes: list) -> None:
        self.tiles, self.finite, self.dtypes = tiles, finite, dtypes


def _prepare_rank_tiles(a_in: dict, lay: _Layout, rank: int) -> _PreparedA:
    """Worker side: cut a rank's A blocks into tiles once (see :func:`_prepared_tiles`)."""
    tiles: dict = {}
    for key, blk in a_in.items():
        if lay.kind == "1d":
            # the row block holds global column ids: cut it into the L inner tiles at once
            for l, tile in enumerate(_split_tiles(blk, lay.koffs)):
                local = lay.owner_b(l, 0) == rank
                direct = local and namespace(tile[0].data) is np  # the CPU kernel's index into local B
                tiles[(key[0], l)] = (*tile, _direct_index(tile) if direct else None)
        else:
            tiles[key] = (*_split_tiles(blk, np.array([0, blk.shape[1]]))[0], None)
    finite = all(_all_finite(blk) for blk in a_in.values())
    return _PreparedA(tiles, finite, [blk.dtype for blk in a_in.values()])


def _prepared_tiles(A: Any, lay: _Layout, a_args: list, client: Any) -> list:
    """Futures of every rank's prepared A tiles, cached on the distributed A.

    Cutting A into compressed tiles (and, for the tile whose B is local, the
    column index into that B block) costs about as much as a multiply, so it
    is done once per (A, inner partition) on the workers that own the blocks
    and kept in ``A.meta`` as futures: later calls with the same A and the
    same row partition of B start multiplying at once.  The key holds the
    blocks' future keys, so a rebuilt A never sees stale tiles; the tiles are
    recomputed from A's futures if a worker is lost.
    """
    keys = tuple(tuple(sorted((k, f.key) for k, f in a.items())) for a in a_args)
    ck = (lay.kind, tuple(int(x) for x in lay.koffs), keys)
    cache = A.meta.setdefault("_spmm_prepared", {})
    futs = cache.get(ck)
    if futs is None or any(f.status in ("error", "cancelled", "lost") for f in futs):
        cache.clear()  # one partition of B at a time: don't pile up copies of A
        futs = [client.submit(_prepare_rank_tiles, a_args[r], lay, r, workers=[lay.workers[r]],
                              allow_other_workers=False, pure=False, key=f"spmm-prepare-{uuid.uuid4().hex[:12]}-{r}")
                for r in range(lay.size)]
        cache[ck] = futs
    return list(futs)


def _as_dask_array(blocks: list, lay: _Layout, dtype: Any) -> Any:
    import dask
    import dask.array as da

    rows = []
    for i in range(lay.nI):
        row = []
        for j in range(lay.nJ):
            shape = (int(lay.roffs[i + 1] - lay.roffs[i]), int(lay.joffs[j + 1] - lay.joffs[j]))
            row.append(da.from_delayed(dask.delayed(blocks[lay.owner_c(i, j)]), shape=shape, dtype=dtype))
        rows.append(row)
    return da.block(rows)


def _spmm_stats(infos: list[dict], lay: _Layout, plan: dict, seconds: float) -> dict:
    m, _, k = plan["shape"]
    nnz = sum(i["nnz"] for i in infos)
    traffic = traffic_bytes(nnz, m, k)
    return {"seconds": seconds, "rank_seconds": max(i["seconds"] for i in infos),
            "gflops": 2.0 * nnz * k / seconds / 1e9, "traffic_bytes": traffic,
            "effective_gbps": traffic / seconds / 1e9, "bytes_moved": sum(i["bytes_sent"] for i in infos),
            "phases": [i["phases"] for i in infos], "phases_cpu": [i["phases_cpu"] for i in infos],
            "units": [i["units"] for i in infos],
            "steals": sum(i["steals"] for i in infos), "nnz": nnz, "algorithm": plan["algorithm"],
            "layout": lay.kind, "grid": lay.grid, "n_workers": lay.size}


# --------------------------------------------------------------------------
# SPMD rank: SpMM
# --------------------------------------------------------------------------


class _Clock:
    """Per-phase wall time (``t``, the paper's stacked bars) and thread CPU
    time (``cpu``) of one rank."""

    def __init__(self) -> None:
        self.t = dict.fromkeys(_PHASES, 0.0)
        self.cpu = dict.fromkeys(_PHASES, 0.0)
        self._phase, self._t0, self._c0 = None, 0.0, 0.0

    def __call__(self, phase: str) -> _Clock:
        self._phase = phase
        return self

    def __enter__(self) -> None:
        self._t0, self._c0 = time.perf_counter(), time.thread_time()

    def __exit__(self, *exc: Any) -> None:
        self.t[self._phase] += time.perf_counter() - self._t0
        self.cpu[self._phase] += time.thread_time() - self._c0


class _TileStore:
    """A rank's tiles, prepared for multiplication.

    A tiles are kept as ``(csr, rows, direct)``: ``csr`` has compressed column
    ids, ``rows`` are the rows of B(l, .) its columns touch, so a consumer
    needs ``B(l, j)[rows]`` only; ``direct`` (or None) is ``rows[csr.indices]``,
    the column index into the whole B tile, kept for the tile whose B is local.
    """

    def __init__(self, lay: _Layout, rank: int, a_in: Any, b_in: dict, clock: _Clock) -> None:
        self.lay, self.rank = lay, rank
        self.b = dict(b_in)
        with clock("prepare"):
            prep = a_in if isinstance(a_in, _PreparedA) else _prepare_rank_tiles(a_in, lay, rank)
        self.a: dict = prep.tiles
        self.finite, self.dtypes = prep.finite, prep.dtypes


class _Service:
    """One-sided gets and work claims: a server thread per peer answers
    ("A", i, l), ("B", l, j, rows) and ("steal", thief) requests."""

    REQ, REP = "spmm-req", "spmm-rep"

    def __init__(self, comm: Any, store: _TileStore, queue: collections.deque | None = None) -> None:
        self.comm, self.store = comm, store
        self.queue = queue
        self.lock = threading.Lock()
        self.errors: list = []
        self.threads = [threading.Thread(target=self._serve, args=(p,), daemon=True, name=f"spmm-svc-{p}")
                        for p in range(comm.size) if p != comm.rank]
        for t in self.threads:
            t.start()

    def _serve(self, peer: int) -> None:
        try:
            while True:
                msg = self.comm.recv(peer, tag=self.REQ)
                if msg[0] == "stop":
                    return
                self.comm.send(peer, self._answer(msg), tag=self.REP)
        except comms.CommsError:
            return  # the group is aborting; the main thread reports why
        except BaseException as e:  # surfaced by close()
            self.errors.append(e)

    def _answer(self, msg: tuple, local: bool = False) -> Any:
        if msg[0] == "A":
            tile = self.store.a[(msg[1], msg[2])]
            return tile if local else (tile[0], tile[1], None)  # a peer has no use for our direct index
        if msg[0] == "B":
            tile = self.store.b[(msg[1], msg[2])]
            rows = msg[3]
            return tile if rows is None else _take_rows(tile, rows)
        if msg[0] == "steal":
            return self.claim(msg[1])
        raise ValueError(f"unknown request {msg[0]!r}")

    def claim(self, thief: int) -> tuple | None:
        """Pop a unit for ``thief``: the owner takes from the front, thieves from
        the back, preferring a unit whose A tile the thief owns."""
        with self.lock:
            if not self.queue:
                return None
            if thief == self.comm.rank:
                return self.queue.popleft()
            lay = self.store.lay
            for idx in range(len(self.queue) - 1, -1, -1):
                i, l, j = self.queue[idx]
                if lay.owner_a(i, l) == thief:
                    unit = self.queue[idx]
                    del self.queue[idx]
                    return unit
            return self.queue.pop()

    # requester side
    def get(self, owner: int, msg: tuple, clock: _Clock) -> Any:
        """Start a get; returns a handle for :meth:`wait`."""
        if owner == self.comm.rank:
            return ("local", self._answer(msg, local=True))
        with clock("issue"):
            self.comm.send(owner, msg, tag=self.REQ)
        return ("remote", owner)

    def wait(self, handle: tuple, clock: _Clock) -> Any:
        if handle[0] == "local":
            return handle[1]
        with clock("fetch_wait"):
            return self.comm.recv(handle[1], tag=self.REP)

    def close(self, clock: _Clock) -> None:
        with clock("sync"):
            self.comm.barrier()  # nobody will request anything any more
            for p in range(self.comm.size):
                if p != self.comm.rank:
                    self.comm.send(p, ("stop",), tag=self.REQ)
            for t in self.threads:
                t.join()
        if self.errors:
            raise self.errors[0]


def _spmm_rank(comm: Any, rank_arg: tuple, lay: _Layout, algorithm: str, check_finite: tuple,
               seed: int) -> tuple:
    a_in, b_in = rank_arg
    t_start = time.perf_counter()
    clock = _Clock()
    sent0 = comm.stats["bytes_sent"]
    store = _TileStore(lay, comm.rank, a_in, b_in, clock)
    with clock("prepare"):
        bad = ["A"] if check_finite[0] and not store.finite else []
        if check_finite[1] and not all(_all_finite(t) for t in b_in.values()):
            bad.append("B")
        # one collective for both: every rank's bad inputs and dtypes
        got = comm.allreduce([(bad, store.dtypes + [t.dtype for t in b_in.values()])], op=operator.add)
    bad = [name for b, _ in got for name in b]
    if bad:
        raise ValueError(f"{' and '.join(sorted(set(bad)))} contains NaN or infinite values")
    i, j = lay.c_tile(comm.rank)
    shape = (int(lay.roffs[i + 1] - lay.roffs[i]), int(lay.joffs[j + 1] - lay.joffs[j]))
    dtype = np.result_type(*[dt for _, dts in got for dt in dts])
    dtype = dtype if dtype.kind == "f" else np.dtype(np.float64)
    like = next(iter(b_in.values()), None)
    xp = namespace(like) if like is not None else np
    counters = {"units": 0, "steals": 0}
    try:
        if algorithm == "summa":
            C = _summa(comm, store, shape, dtype, xp, clock, counters)
        elif algorithm == "stationary-a":
            C = _stationary_a(comm, store, shape, dtype, xp, clock, counters)
        elif algorithm == "work-stealing":
            C = _work_stealing(comm, store, shape, dtype, xp, clock, counters, seed)
        else:
            C = _stationary_c(comm, store, shape, dtype, xp, clock, counters)
    except BaseException:
        _abort_own_box(comm)
        raise
    nnz = sum(int(t[0].nnz) for key, t in store.a.items() if lay.owner_a(*key) == comm.rank)
    info = {"rank": comm.rank, "seconds": time.perf_counter() - t_start, "phases": clock.t, "phases_cpu": clock.cpu,
            "bytes_sent": comm.stats["bytes_sent"] - sent0, "nnz": nnz, **counters}
    return C, info


def _abort_own_box(comm: Any) -> None:
    # wake this rank's own server threads, which wait for peers' "stop" messages
    box = getattr(comm, "_box", None)
    if box is not None:
        with box.cond:
            box.abort = box.abort or "local failure"
            box.cond.notify_all()


def _stationary_c(comm, store, shape, dtype, xp, clock, counters) -> Any:
    lay = store.lay
    svc = _Service(comm, store)
    i, j = lay.c_tile(comm.rank)
    L = lay.nL
    order = [(i + j + s) % L for s in range(L)]  # staggered: ranks start on different tiles
    C = xp.zeros(shape, dtype=dtype) if L == 0 else (empty(shape, dtype) if xp is np else xp.empty(shape, dtype=dtype))

    def issue(l):
        return l, svc.get(lay.owner_a(i, l), ("A", i, l), clock)

    def fetch_b(l, a):
        rows = a[1]
        local = lay.owner_b(l, j) == comm.rank
        return svc.get(lay.owner_b(l, j), ("B", l, j, None if local else rows), clock), local

    # two-deep pipeline: A of unit t+1 and B of unit t are in flight while unit t-1 multiplies
    pend_a = issue(order[0]) if L else None
    cur = None
    if pend_a is not None:
        a0 = svc.wait(pend_a[1], clock)
        cur = (order[0], a0, fetch_b(order[0], a0))
        pend_a = issue(order[1]) if L > 1 else None
    for t in range(L):
        l, a, (hb, local) = cur
        b = svc.wait(hb, clock)
        if pend_a is not None:
            a_next = svc.wait(pend_a[1], clock)
            cur = (pend_a[0], a_next, fetch_b(pend_a[0], a_next))
            pend_a = issue(order[t + 2]) if t + 2 < L else None
        with clock("compute"):
            _multiply(a, b, local, C, accumulate=t > 0)
        counters["units"] += 1
    svc.close(clock)
    return C


def _stationary_a(comm, store, shape, dtype, xp, clock, counters) -> Any:
    lay = store.lay
    svc = _Service(comm, store)
    ci, cj = lay.c_tile(comm.rank)
    C = xp.zeros(shape, dtype=dtype)
    mine = sorted(key for key in store.a if lay.owner_a(*key) == comm.rank)
    for i, l in mine:
        a = store.a[(i, l)]
        J = lay.nJ
        for s in range(J):
            j = (i + l + s) % J
            ob = lay.owner_b(l, j)
            b = svc.wait(svc.get(ob, ("B", l, j, None if ob == comm.rank else a[1]), clock), clock)
            oc = lay.owner_c(i, j)
            if oc == comm.rank:
                with clock("compute"):
                    _multiply(a, b, ob == comm.rank, C, accumulate=True)
            else:
                part = xp.empty((a[0].shape[0], int(b.shape[1])), dtype=dtype)
                with clock("compute"):
                    _multiply(a, b, ob == comm.rank, part, accumulate=False)
                with clock("accumulate"):
                    comm.send(oc, part, tag=("acc", i, l, j))
            counters["units"] += 1
    # partial C(ci, cj) from every other owner of an A(ci, l)
    for l in range(lay.nL):
        src = lay.owner_a(ci, l)
        if src != comm.rank:
            with clock("fetch_wait"):
                part = comm.recv(src, tag=("acc", ci, l, cj))
            with clock("accumulate"):
                C += part
    svc.close(clock)
    return C


def _summa(comm, store, shape, dtype, xp, clock, counters) -> Any:
    lay = store.lay
    i, j = lay.c_tile(comm.rank)
    with clock("sync"):
        row = comm.split(i, key=j)   # ranks owning C(i, .)
        col = comm.split(j, key=i)   # ranks owning C(., j)
    C = xp.zeros(shape, dtype=dtype)
    for l in range(lay.nL):
        oa, ob = lay.owner_a(i, l), lay.owner_b(l, j)
        with clock("fetch_wait"):
            a = row.bcast(store.a.get((i, l)) if oa == comm.rank else None, root=oa % lay.nJ)
            b = col.bcast(store.b.get((l, j)) if ob == comm.rank else None, root=ob // lay.nJ)
        with clock("compute"):
            _multiply(a, b, True, C, accumulate=True)
        counters["units"] += 1
    with clock("sync"):
        comm.barrier()
    return C


def _work_stealing(comm, store, shape, dtype, xp, clock, counters, seed) -> Any:
    lay = store.lay
    ci, cj = lay.c_tile(comm.rank)
    L = lay.nL
    queue = collections.deque((ci, (ci + cj + s) % L, cj) for s in range(L))
    svc = _Service(comm, store, queue)
    C = xp.zeros(shape, dtype=dtype)
    partials: dict = {}
    victims = [p for p in range(comm.size) if p != comm.rank]
    random.Random(hash((seed, comm.rank))).shuffle(victims)
    sources = [comm.rank] + victims
    for src in sources:
        while True:
            if src == comm.rank:
                unit = svc.claim(comm.rank)
            else:
                unit = svc.wait(svc.get(src, ("steal", comm.rank), clock), clock)
            if unit is None:
                break
            i, l, j = unit
            a = svc.wait(svc.get(lay.owner_a(i, l), ("A", i, l), clock), clock)
            ob = lay.owner_b(l, j)
            b = svc.wait(svc.get(ob, ("B", l, j, None if ob == comm.rank else a[1]), clock), clock)
            if (i, j) == (ci, cj):
                target = C
            else:
                counters["steals"] += 1
                if (i, j) not in partials:
                    partials[(i, j)] = xp.zeros((int(lay.roffs[i + 1] - lay.roffs[i]),
                                                 int(lay.joffs[j + 1] - lay.joffs[j])), dtype=dtype)
                target = partials[(i, j)]
            with clock("compute"):
                _multiply(a, b, ob == comm.rank, target, accumulate=True)
            counters["units"] += 1
    with clock("accumulate"):
        out = [None] * comm.size
        for (i, j), part in partials.items():
            out[lay.owner_c(i, j)] = part
        for part in comm.alltoallv(out):
            if part is not None:
                C += part
    svc.close(clock)
    return C


# --------------------------------------------------------------------------
# SPMD rank: SpGEMM
# --------------------------------------------------------------------------


def _spgemm_rank(comm: Any, rank_arg: tuple, lay: _Layout, check_finite: tuple) -> tuple:
    a_blk, b_blk = rank_arg
    clock = _Clock()
    sent0 = comm.stats["bytes_sent"]
    with clock("prepare"):
        bad = [name for name, chk, t in (("A", check_finite[0], a_blk), ("B", check_finite[1], b_blk))
               if chk and not _all_finite(t)]
        bad = comm.allreduce(bad, op=operator.add)
    if bad:
        raise ValueError(f"{' and '.join(sorted(set(bad)))} contains NaN or infinite values")
    store = _TileStore(lay, comm.rank, {(comm.rank, -1): a_blk}, {(comm.rank, 0): b_blk}, clock)
    svc = _Service(comm, store)
    sps = sparse_namespace(a_blk)
    dtype = np.result_type(a_blk.dtype, b_blk.dtype)
    i = comm.rank
    L = lay.nL
    order = [(i + s) % L for s in range(L)]
    try:
        handles = {}
        if L:
            l0 = order[0]
            handles[l0] = svc.get(lay.owner_b(l0, 0), ("B", l0, 0, store.a[(i, l0)][1]), clock)
        parts = []
        for t, l in enumerate(order):
            if t + 1 < L:  # prefetch the next B rows while this product runs
                ln = order[t + 1]
                handles[ln] = svc.get(lay.owner_b(ln, 0), ("B", ln, 0, store.a[(i, ln)][1]), clock)
            b = svc.wait(handles.pop(l), clock)
            a = store.a[(i, l)][0]
            with clock("compute"):
                parts.append(a.astype(dtype) @ b.astype(dtype))
        with clock("accumulate"):
            C = parts[0] if parts else sps.csr_matrix((a_blk.shape[0], b_blk.shape[1]), dtype=dtype)
            for p in parts[1:]:
                C = C + p
            C = sps.csr_matrix(C)
            C.sort_indices()
        svc.close(clock)
    except BaseException:
        _abort_own_box(comm)
        raise
    return C, {"nnz": int(C.nnz), "bytes_sent": comm.stats["bytes_sent"] - sent0, "phases": clock.t, "units": L}


# --------------------------------------------------------------------------
# Worker-local kernels
# --------------------------------------------------------------------------


def _take_rows(tile: Any, rows: Any) -> Any:
    if hasattr(tile, "indptr"):
        return tile[rows]
    xp = namespace(tile)
    if xp is np:  # the rows a peer asked for: a pooled buffer, not fresh pages
        # mode="clip": the rows are in range, and "raise" would buffer the output (a second copy)
        return np.take(tile, np.asarray(rows), axis=0, out=empty((len(rows),) + tile.shape[1:], tile.dtype),
                       mode="clip")
    return xp.take(tile, xp.asarray(rows), axis=0)


def _all_finite(x: Any) -> bool:
    vals = x.data if hasattr(x, "indptr") else x
    if vals.dtype.kind != "f":
        return True
    if namespace(vals) is np:
        return bool(_finite_nb(np.ascontiguousarray(vals).reshape(-1)))
    return bool(namespace(vals).isfinite(vals).all())


@numba.njit(cache=True, nogil=True)
def _finite_nb(v):  # pragma: no cover - compiled
    for x in v:
        if not np.isfinite(x):
            return False
    return True


def _split_tiles(blk: Any, koffs: np.ndarray) -> list[tuple]:
    """Cut a CSR block by column ranges ``koffs`` into compressed tiles.

    Returns ``[(csr_l, rows_l)]``: ``csr_l`` (m x len(rows_l)) with column c
    renumbered to its position in ``rows_l``, the sorted distinct columns of
    range l (relative to ``koffs[l]``) -- the rows of B(l) the tile needs.
    """
    sps = sparse_namespace(blk)
    blk = sps.csr_matrix(blk)
    m = blk.shape[0]
    if namespace(blk.data) is np:
        idx_dtype = np.int32 if blk.shape[1] < 2**31 else np.int64
        out_idx = np.empty(blk.nnz, idx_dtype)
        out_val = np.empty(blk.nnz, blk.data.dtype)
        indptrs, starts, nrows, rows = _split_tiles_nb(blk.indptr, blk.indices, blk.data,
                                                       np.asarray(koffs, np.int64), out_idx, out_val)
    else:
        indptrs, starts, nrows, rows, out_idx, out_val = _split_tiles_xp(blk.indptr, blk.indices, blk.data, koffs)
    tiles = []
    for t in range(len(koffs) - 1):
        s, e = int(starts[t]), int(starts[t + 1])
        A_t = sps.csr_matrix((out_val[s:e], out_idx[s:e], indptrs[t]), shape=(m, int(nrows[t + 1] - nrows[t])))
        tiles.append((A_t, rows[int(nrows[t]):int(nrows[t + 1])]))
    return tiles


@numba.njit(cache=True, nogil=True)
def _split_tiles_nb(indptr, indices, data, koffs, out_idx, out_val):  # pragma: no cover - compiled
    m = indptr.size - 1
    T = koffs.size - 1
    n = koffs[T]
    mark = np.zeros(n, np.uint8)
    counts = np.zeros((T, m + 1), np.int64)
    tile = np.empty(indices.size, np.int32)
    for i in range(m):
        for p in range(indptr[i], indptr[i + 1]):
            c = indices[p]
            t = 0
            while c >= koffs[t + 1]:  # T is the worker count: a scan beats a bisection
                t += 1
            tile[p] = t
            counts[t, i + 1] += 1
            mark[c] = 1
    pos = np.empty(n, np.int64)
    nrows = np.zeros(T + 1, np.int64)
    for t in range(T):
        q = 0
        for c in range(koffs[t], koffs[t + 1]):
            if mark[c]:
                pos[c] = q
                q += 1
        nrows[t + 1] = nrows[t] + q
    rows = np.empty(nrows[T], np.int64)
    for t in range(T):
        q = nrows[t]
        for c in range(koffs[t], koffs[t + 1]):
            if mark[c]:
                rows[q] = c - koffs[t]
                q += 1
    starts = np.zeros(T + 1, np.int64)
    for t in range(T):
        for i in range(m):
            counts[t, i + 1] += counts[t, i]
        starts[t + 1] = starts[t] + counts[t, m]
    fill = np.empty((T, m), np.int64)
    for t in range(T):
        for i in range(m):
            fill[t, i] = starts[t] + counts[t, i]
    for i in range(m):
        for p in range(indptr[i], indptr[i + 1]):
            t = tile[p]
            q = fill[t, i]
            fill[t, i] = q + 1
            out_idx[q] = pos[indices[p]]
            out_val[q] = data[p]
    return counts, starts, nrows, rows


def _split_tiles_xp(indptr: Any, indices: Any, data: Any, koffs: Any) -> tuple:
    """Array-namespace form of :func:`_split_tiles_nb` (the GPU path)."""
    xp = namespace(indices)
    koffs = xp.asarray(koffs, dtype=xp.int64)
    T = int(koffs.shape[0]) - 1
    n = int(koffs[-1])
    m = int(indptr.shape[0]) - 1
    row_of = xp.repeat(xp.arange(m), xp.diff(indptr).astype(xp.int64))
    idx = indices.astype(xp.int64)
    tile = xp.searchsorted(koffs, idx, side="right") - 1
    mark = xp.zeros(n, dtype=xp.int64)
    mark[idx] = 1
    csum = xp.cumsum(mark)
    before = xp.concatenate([xp.zeros(1, xp.int64), csum])[koffs]  # marked columns before each tile start
    nrows = before - before[0]
    pos = csum - 1 - before[xp.searchsorted(koffs, xp.arange(n), side="right") - 1]
    cols = xp.nonzero(mark)[0]
    rows = cols - koffs[xp.searchsorted(koffs, cols, side="right") - 1]
    order = xp.argsort(tile * (m + 1) + row_of, kind="stable")  # tile-major, row order kept inside
    out_idx = pos[idx[order]].astype(indices.dtype)
    out_val = data[order]
    key = tile * (m + 1) + row_of
    bounds = xp.searchsorted(key[order], xp.arange(T)[:, None] * (m + 1) + xp.arange(m + 1)[None, :], side="left")
    starts = xp.concatenate([bounds[:, 0], bounds[-1:, -1]]) if T else xp.zeros(1, xp.int64)
    indptrs = bounds - bounds[:, :1]
    return indptrs, starts, nrows, rows, out_idx, out_val


def _direct_index(tile: tuple) -> Any:
    """``rows[csr.indices]``: the tile's column ids as rows of the whole B tile."""
    csr, rows = tile[0], tile[1]
    xp = namespace(csr.indices)
    idx = xp.asarray(rows)[csr.indices]
    small = len(rows) == 0 or int(rows[-1]) < 2**31  # rows are sorted
    return idx.astype(xp.int32 if small else xp.int64)


def _multiply(a: tuple, b: Any, b_full: bool, C: Any, *, accumulate: bool) -> None:
    """``C (+)= A_tile @ B``: ``b`` is the whole B tile (``b_full``, rows picked
    through the tile's row list) or just the rows the tile needs.

    CPU: one pass of a numba kernel straight into ``C`` (no temporaries).
    GPU: cupyx's CSR @ dense on the gathered rows.
    """
    tile, rows = a[0], a[1]
    if namespace(b) is np and namespace(C) is np:
        if b_full:
            idx = a[2] if len(a) > 2 and a[2] is not None else _direct_index(a)
        else:
            idx = tile.indices
        if idx.dtype != np.int32 and b.shape[0] < 2**31:
            idx = idx.astype(np.int32)
        indptr = tile.indptr if tile.indptr.dtype == np.int64 else tile.indptr.astype(np.int64)
        data = tile.data if tile.data.dtype == C.dtype else tile.data.astype(C.dtype)
        if b.dtype != C.dtype or not b.flags.c_contiguous:
            b = np.ascontiguousarray(b, dtype=C.dtype)
        _FIXED_K.get(int(C.shape[1]), _spmm_nb)(indptr, idx, data, b, C, accumulate, _PREFETCH_DIST)
        return
    xp = namespace(b)
    bsub = xp.take(b, xp.asarray(rows), axis=0) if b_full else b
    prod = tile @ bsub
    if accumulate:
        C += prod
    else:
        C[...] = prod


# How many nonzeros ahead the CPU kernel prefetches B rows: B is read at random,
# one row per nonzero, and the hardware prefetcher cannot guess the next row.
_PREFETCH_DIST = 16


@intrinsic
def _prefetch(typingctx, arr, i, j):  # pragma: no cover - compiled
    """``llvm.prefetch`` (read, keep in all cache levels) of ``arr[i, j]``."""
    sig = types.void(arr, i, j)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ii = context.cast(builder, args[1], signature.args[1], types.intp)
        jj = context.cast(builder, args[2], signature.args[2], types.intp)
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [ii, jj], wraparound=False)
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        # the intrinsic's name mangles the pointer type: "p0" once LLVM has opaque pointers
        # (llvmlite >= 0.44, which grew this flag), "p0i8" before
        import llvmlite

        name = "llvm.prefetch.p0" if hasattr(llvmlite, "ir_layer_typed_pointers_enabled") else "llvm.prefetch.p0i8"
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                            name)
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen


@numba.njit(inline="always")
def _spmm_body(indptr, indices, data, B, C, accumulate, dist, K):  # pragma: no cover - compiled
    """``C (+)= A @ B`` for CSR A: a row loop, B's rows prefetched ``dist``
    nonzeros ahead, the K loop innermost over contiguous rows (SIMD) into a
    row accumulator that is written to C once."""
    m = indptr.size - 1
    nnz = indptr[m]
    line = max(1, 64 // B.itemsize)  # elements per cache line
    acc = np.empty(K, C.dtype)
    for i in range(m):
        if accumulate:
            for t in range(K):
                acc[t] = C[i, t]
        else:
            for t in range(K):
                acc[t] = 0
        for p in range(indptr[i], indptr[i + 1]):
            q = p + dist
            if q < nnz:
                rq = indices[q]
                for t in range(0, K, line):
                    _prefetch(B, rq, t)
            c = indices[p]
            v = data[p]
            for t in range(K):
                acc[t] += v * B[c, t]
        for t in range(K):
            C[i, t] = acc[t]


@numba.njit(cache=True, nogil=True, fastmath={"contract"})
def _spmm_nb(indptr, indices, data, B, C, accumulate, dist):  # pragma: no cover - compiled
    _spmm_body(indptr, indices, data, B, C, accumulate, dist, C.shape[1])


# The same kernel with k a compile-time constant (inlined): the k loop unrolls
# fully and the accumulator's size is known -- markedly faster at these widths.
@numba.njit(cache=True, nogil=True, fastmath={"contract"})
def _spmm_k16(indptr, indices, data, B, C, accumulate, dist):  # pragma: no cover - compiled
    _spmm_body(indptr, indices, data, B, C, accumulate, dist, 16)


@numba.njit(cache=True, nogil=True, fastmath={"contract"})
def _spmm_k32(indptr, indices, data, B, C, accumulate, dist):  # pragma: no cover - compiled
    _spmm_body(indptr, indices, data, B, C, accumulate, dist, 32)


@numba.njit(cache=True, nogil=True, fastmath={"contract"})
def _spmm_k64(indptr, indices, data, B, C, accumulate, dist):  # pragma: no cover - compiled
    _spmm_body(indptr, indices, data, B, C, accumulate, dist, 64)


@numba.njit(cache=True, nogil=True, fastmath={"contract"})
def _spmm_k128(indptr, indices, data, B, C, accumulate, dist):  # pragma: no cover - compiled
    _spmm_body(indptr, indices, data, B, C, accumulate, dist, 128)


_FIXED_K = {16: _spmm_k16, 32: _spmm_k32, 64: _spmm_k64, 128: _spmm_k128}
_WARM: set = set()


def _warm_kernels(dtype: Any = None, widths: Sequence[int] = ()) -> None:
    """Compile (or load from numba's cache) the CPU kernels in this process,
    before a group starts: worker processes compiling the same cached
    function at the same moment can leave a corrupt cache behind.  Covers the
    signatures :func:`_multiply` produces (int64 indptr, int32 indices,
    float32/float64, B writeable or read-only as it may arrive from a peer)
    and, for result ``dtype``, the fixed-width kernels of C's block ``widths``."""
    import scipy.sparse as sp

    todo = [("base", np.dtype(dt), 3) for dt in (np.float32, np.float64)]
    if dtype is not None:
        todo += [("fixed", np.dtype(dtype), int(w)) for w in set(widths) if int(w) in _FIXED_K]
    A = sp.random(6, 5, 0.5, format="csr", random_state=0)
    for kind, dt, k in todo:
        if (kind, dt.str, k) in _WARM:
            continue
        blk = A.astype(dt)
        if kind == "base":
            _all_finite(blk)
            _all_finite(np.ones((2, 2), dt))
        t0, r0 = _split_tiles(blk, np.array([0, 5]))[0]
        idx = np.asarray(r0, np.int64)[t0.indices].astype(np.int32)
        for writeable in (True, False):
            B = np.ones((5, k), dt)
            B.setflags(write=writeable)
            C = np.zeros((6, k), dt)
            kern = _spmm_nb if kind == "base" else _FIXED_K[k]
            kern(t0.indptr.astype(np.int64), idx, t0.data, B, C, False, _PREFETCH_DIST)
        _WARM.add((kind, dt.str, k))
