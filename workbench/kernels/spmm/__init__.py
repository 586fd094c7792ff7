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
...     C = wb.spmm(A, B, client=client)
...     np.allclose(np.asarray(C), A @ B), C.stats["backend"]
(True, 'cpu')
"""

from __future__ import annotations

import collections
import time
import uuid
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ... import comms
from ...backend import namespace, to_host
from ...cluster import default_client, worker_addresses
from ...partition import (
    BlockGrid,
    RowBlocks,
    _is_dask,
    _scatter_all,
    all_finite,
    array_of,
    as_array,
    block_offsets,
    check_bool,
    check_int,
    check_one_per_worker,
    distribute,
    move_keys,
    persist,
    resilient,
    rows_of,
)
from .cpu import _split_tiles_nb  # noqa: F401  (re-exported, with _split_tiles_xp: tests compare the two)
from .ranks import (
    _Layout,
    _prepare_rank_tiles,
    _spgemm_rank,
    _split_tiles_xp,  # noqa: F401
    _spmm_rank,
    _warm_kernels,
    result_dtype,
)

__all__ = ["spmm", "spgemm", "validate_spmm", "SparseResult", "ALGORITHMS", "traffic_bytes"]

ALGORITHMS = ("stationary-c", "stationary-a", "summa", "work-stealing")
#: Tiles a chunk of a dask B is cut into when B has fewer chunks than there are workers (dask's 128 MiB chunks:
#: one for R-MAT SCALE 18 x 64): a rank without B multiplies one while the next arrives.  2 workers, medians of
#: 3 x 4 calls: SCALE 18, k = 64, 0.114 s a call in one tile, 0.101 in 2 or 4; k = 32, 0.071, 0.064 in 2.
#: Cutting where every worker holds a chunk only adds passes over C (SCALE 20, four chunks: 0.43 s, 0.51 in 8).
_B_PIECES = 2


@resilient
def spmm(A: Any, B: Any, *, algorithm: str = "auto", grid: tuple[int, int] | None = None, client: Any = None,
         return_stats: bool | None = None, seed: int = 0) -> Any:
    """Distributed ``A @ B`` for sparse A (m x n) and dense B (n x k).

    Parameters
    ----------
    A : scipy.sparse matrix, RowBlocks or BlockGrid (kind "csr")
        Host input is distributed first (1-D row blocks, or a grid when
        ``grid`` is given); distributed input stays where it is.
    B : array_like, dask array or dense RowBlocks, 2-D (n x k)
        With 1-D A, a dask array's row chunks are used where they live (any
        row chunking; columns are joined into one chunk first), a dense
        RowBlocks on A's workers is used in place, and a host array is split
        into A's row blocks.
    algorithm : {"auto", "stationary-c", "stationary-a", "summa", "work-stealing"}
        "auto" is stationary-C.
    grid : (R, C), optional
        Tile a host A over an R x C worker grid instead of 1-D row blocks.
    client : distributed.Client, optional
        Default: the cluster that holds the distributed inputs, else the current client.
    return_stats : bool, optional
        Deprecated (a ``DeprecationWarning``): the stats are ``C.stats``.
        ``True`` still returns ``(C, C.stats)``.
    seed : int
        Seed of the work-stealing victim order.

    Returns
    -------
    dask.array.Array
        C (m x k), its blocks left on the workers that computed them:
        float32 when A and B hold float32 (or bool), else float64 (integer
        inputs are multiplied in float64, exact while sums stay below 2**53).
        ``C.stats`` holds ``backend`` (the path that ran: "cpu", "gpu" or
        "gpu-sim"), ``seconds`` (wall, launch to finish), ``gflops``
        (2 nnz k / seconds), ``effective_gbps`` and ``traffic_bytes`` (model
        ``nnz (12 + 8k) + m k 8``), ``bytes_moved`` (worker-to-worker bytes),
        ``phases`` (per-rank seconds in
        prepare/issue/fetch_wait/compute/accumulate/sync), ``phases_cpu``
        (the same phases in the rank thread's CPU seconds: wall well above
        CPU means the rank was waiting for a core), ``units``, ``steals``,
        ``tiles_reused`` (A's tiles were cut by an earlier call), ``algorithm``,
        ``grid``.

    Examples
    --------
    >>> C = spmm(A, B, client=client)                                # doctest: +SKIP
    >>> C = spmm(G, B, algorithm="work-stealing")                    # doctest: +SKIP
    >>> C.stats["gflops"] > 0                                        # doctest: +SKIP
    True
    """
    _warn_return_stats("spmm", return_stats)
    check_int("seed", seed, low=0)
    B = as_array("B", B)
    plan = _validate_spmm(A, B, algorithm, grid)
    client = default_client(client, A, B)
    t0 = time.perf_counter()
    lay, a_args, b_args = _place(plan, A, B, client)
    P = lay.size
    # compile/load the numba kernels here, never concurrently on the workers
    _warm_kernels(plan["dtype"], np.diff(lay.joffs))
    reused = False
    if isinstance(A, RowBlocks | BlockGrid):
        a_args, reused = _prepared_tiles(A, lay, a_args, client)  # cut once per distributed A and placement of B
    rank_args = [(a_args[r], b_args[r]) for r in range(P)]
    # rank r's block is tile (r // nJ, r % nJ) of C: the answer is made of the ranks' futures (nothing left to
    # run when the caller persists or computes it), their infos published as they finish
    futs = comms.run_spmd(_spmm_rank, rank_args, lay, plan["algorithm"], plan["check_finite"], seed,
                          client=client, workers=lay.workers, name=f"spmm-{plan['algorithm']}",
                          publish_info=True, chunk_index=[lay.c_tile(r) for r in range(P)])
    comms.wait_group(futs)
    blocks, infos = comms.split_results(futs)
    seconds = time.perf_counter() - t0
    C = array_of(blocks, (tuple(np.diff(lay.roffs)), tuple(np.diff(lay.joffs))), plan["dtype"])
    _remember_finite(A, plan["check_finite"][0])
    _remember_finite(B, plan["check_finite"][1])
    C.stats = _spmm_stats(infos, lay, plan, seconds)
    C.stats["tiles_reused"] = reused
    return (C, C.stats) if return_stats else C


@resilient
def spgemm(A: Any, B: Any, *, client: Any = None, return_stats: bool | None = None) -> Any:
    """Distributed sparse ``A @ B`` (stationary-C with partial-sum accumulation).

    Rank i owns row block i of A and of C; for each row block l of B
    (staggered, its own first) it fetches only the rows of B(l) that A(i, l)
    touches, multiplies, and sums the partial products.

    Parameters
    ----------
    A, B : scipy.sparse matrix or RowBlocks (kind "csr")
        m x n and n x p.  B's row blocks define the inner tiles.
    client : distributed.Client, optional
    return_stats : bool, optional
        Deprecated (a ``DeprecationWarning``): the stats are ``C.stats``.
        ``True`` still returns ``(C, C.stats)``.

    Returns
    -------
    SparseResult
        Row blocks of C on the workers; ``to_scipy()`` gathers it.  Its
        dtype follows :func:`spmm`'s (float32 or float64; integers in float64).
        ``C.stats`` holds ``backend``, ``seconds``, ``bytes_moved``, ``nnz``,
        ``phases`` and ``units``.

    Examples
    --------
    >>> C = spgemm(A, A, client=client)                          # doctest: +SKIP
    >>> abs(C.to_scipy() - A @ A).max() <= 1e-12 * abs(A @ A).max()   # doctest: +SKIP
    True
    """
    _warn_return_stats("spgemm", return_stats)
    plan = _validate_spgemm(A, B)
    client = default_client(client, A, B)
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
                          plan["check_finite"], client=client, workers=workers, name="spgemm", publish_info=True)
    comms.wait_group(futs)
    parts, infos = comms.split_results(futs)
    seconds = time.perf_counter() - t0
    nnz = sum(i["nnz"] for i in infos)
    _remember_finite(A, plan["check_finite"][0])
    _remember_finite(B, plan["check_finite"][1])
    out = SparseResult(parts, np.asarray(Ad.offsets), (A.shape[0], B.shape[1]), plan["dtype"], workers,
                       kind="csr", nnz=nnz)
    out.stats = {"backend": infos[0]["backend"], "seconds": seconds, "nnz": nnz,
                 "bytes_moved": sum(i["bytes_sent"] for i in infos), "phases": [i["phases"] for i in infos],
                 "units": sum(i["units"] for i in infos)}
    return (out, out.stats) if return_stats else out


def _warn_return_stats(name: str, return_stats: bool | None) -> None:
    if return_stats is not None:
        check_bool("return_stats", return_stats)
        warnings.warn(f"{name}(return_stats=...) is deprecated: the result carries its stats as .stats",
                      DeprecationWarning, stacklevel=3)


@dataclass
class SparseResult(RowBlocks):
    """Distributed CSR row blocks of an SpGEMM result, with the call's ``stats``."""

    stats: dict = field(default_factory=dict)

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


def _is_sparse_host(x: Any) -> bool:
    import scipy.sparse as sp

    return sp.issparse(x) or (hasattr(x, "tocsr") and hasattr(x, "nnz") and not isinstance(x, RowBlocks | BlockGrid))


def _check_dtype(name: str, dtype: Any) -> None:
    dt = np.dtype(dtype)
    if dt.kind not in "fiub":
        raise TypeError(f"{name} must hold real numbers (float32/float64 or integers), got dtype {dt}")


#: Names of dask arrays found finite by an earlier call.  A dask array's name is a token of its
#: graph (its content), so the same name is the same data: its scan is not repeated per call.
_FINITE_DASK: collections.OrderedDict[str, None] = collections.OrderedDict()


def _needs_finite_check(x: Any) -> bool:
    """Whether the workers must scan distributed ``x`` for NaN/inf (not yet known finite)."""
    if isinstance(x, RowBlocks | BlockGrid):
        return not x.meta.get("finite", False)
    return getattr(x, "name", None) not in _FINITE_DASK


def _remember_finite(x: Any, checked: bool) -> None:
    """After a call that scanned ``x`` and found it finite: remember it on the container (or its name)."""
    if not checked:
        return
    if isinstance(x, RowBlocks | BlockGrid):
        x.meta["finite"] = True
    elif _is_dask(x):
        _FINITE_DASK[x.name] = None
        while len(_FINITE_DASK) > 1024:
            _FINITE_DASK.popitem(last=False)


def _check_finite_host(name: str, x: Any) -> None:
    vals = x.data if hasattr(x, "indptr") else x
    if namespace(vals).asarray(vals).dtype.kind == "f" and not all_finite(vals):
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
    elif not (_is_dask(B) or hasattr(B, "__array__") or hasattr(B, "__cuda_array_interface__")):
        raise TypeError(f"B must be a dense array, dask array or RowBlocks, got {type(B).__name__}")
    if _is_sparse_host(B):
        raise TypeError("B must be dense; for sparse x sparse use spgemm")
    if len(B.shape) != 2:
        raise ValueError(f"B must be 2-D (n x k), got shape {tuple(B.shape)}")
    if len(A.shape) != 2:
        raise ValueError(f"A must be 2-D, got shape {tuple(A.shape)}")
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"inner dimensions differ: A is {tuple(A.shape)}, B is {tuple(B.shape)}")
    for name, x in (("A", A), ("B", B)):
        if min(x.shape) == 0:
            raise ValueError(f"{name} is empty (shape {tuple(x.shape)}); spmm needs rows and columns in A and B")
    _check_dtype("A", A.dtype)
    _check_dtype("B", B.dtype)
    if grid is not None:
        if (not isinstance(grid, tuple | list) or len(grid) != 2
                or not all(isinstance(g, int | np.integer) and g >= 1 for g in grid)):
            raise ValueError(f"grid must be (R, C) with positive ints, got {grid!r}")
    host_a, host_b = not isinstance(A, RowBlocks | BlockGrid), not (isinstance(B, RowBlocks) or _is_dask(B))
    if host_a:
        _check_finite_host("A", A)
    if host_b:
        _check_finite_host("B", B)
    dtype = result_dtype(A.dtype, B.dtype)
    algo = "stationary-c" if algorithm == "auto" else algorithm
    # distributed inputs are checked for NaN/inf on the workers, inside the group
    return {"algorithm": algo, "grid": grid, "dtype": dtype,
            "check_finite": (not host_a and _needs_finite_check(A), not host_b and _needs_finite_check(B)),
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
        if min(x.shape) == 0:
            raise ValueError(f"{name} is empty (shape {tuple(x.shape)})")
        _check_dtype(name, x.dtype)
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"inner dimensions differ: A is {tuple(A.shape)}, B is {tuple(B.shape)}")
    host = [not isinstance(x, RowBlocks) for x in (A, B)]
    for name, x, h in (("A", A, host[0]), ("B", B, host[1])):
        if h:
            _check_finite_host(name, x)
    return {"dtype": result_dtype(A.dtype, B.dtype),
            "check_finite": (not host[0] and _needs_finite_check(A), not host[1] and _needs_finite_check(B))}


# --------------------------------------------------------------------------
# Placement (client side)
# --------------------------------------------------------------------------


def _place(plan: dict, A: Any, B: Any, client: Any) -> tuple[_Layout, list, list]:
    """Distribute what is on the host and describe every rank's tiles."""
    k = plan["shape"][2]
    if isinstance(A, RowBlocks) or (not isinstance(A, BlockGrid) and plan["grid"] is None):
        Ad = A if isinstance(A, RowBlocks) else distribute(A, client)
        check_one_per_worker(Ad, "A: spmm")
        workers = list(Ad.workers)
        a_args = [{(r, -1): Ad.parts[r]} for r in range(len(workers))]
        if _is_dask(B):
            # B's own row chunks are the inner tiles, each served by the rank on whose worker it lives:
            # no rechunk to A's row blocks and no chunk shipped through the scheduler on every call
            koffs, owners, b_args = _dask_rows_in_place(B, client, workers)
            lay = _Layout("1d", workers, np.asarray(Ad.offsets), koffs, np.array([0, k]), grid=(len(workers), 1),
                          b_owner=owners)
            return lay, a_args, b_args
        Bd = _rows_on(B, client, workers)
        lay = _Layout("1d", workers, np.asarray(Ad.offsets), np.asarray(Bd.offsets), np.array([0, k]),
                      grid=(len(workers), 1))
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
    tiles = []
    for l in range(lay.nL):
        for j in range(lay.nJ):
            o = lay.owner_b(l, j)
            sl = (slice(int(lay.koffs[l]), int(lay.koffs[l + 1])), slice(int(lay.joffs[j]), int(lay.joffs[j + 1])))
            if _is_dask(Bsrc):
                b_args[o][(l, j)] = client.compute(Bsrc[sl], workers=[lay.workers[o]], allow_other_workers=False)
            else:
                tiles.append((o, (l, j), Bsrc[sl]))
    # host tiles all at once, each copied out of the client by its worker (a column block row by row)
    futs = _scatter_all(client, [t for _, _, t in tiles], [lay.workers[o] for o, _, _ in tiles], device=False)
    for (o, lj, _), fut in zip(tiles, futs, strict=True):
        b_args[o][lj] = fut
    return lay, a_args, b_args


def _dask_rows_in_place(B: Any, client: Any, workers: Sequence[str]) -> tuple[np.ndarray, tuple, list]:
    """A dask B's row chunks as 1-D inner tiles where they live: (row offsets, owning rank per tile, per-rank
    {(l, 0): future, or (future, first row, end row) for a piece of a chunk}).  A chunk on none of
    ``workers`` goes to a rank in proportion and moves there before the group (move_keys).  In fewer chunks
    than workers (so some rank holds none), every chunk is cut in ``_B_PIECES`` tiles: a rank without B
    multiplies one while the next arrives, instead of waiting for all the rows it needs first."""
    from distributed import futures_of

    if B.numblocks[1] != 1:
        B = B.rechunk({1: -1})              # whole rows per chunk: a tile is a row range of B
    Bp = persist(B, client)                 # already persisted: the same keys, nothing runs
    fmap = {f.key: f for f in futures_of(Bp)}
    keys = [(Bp.name, l, 0) for l in range(Bp.numblocks[0])]
    who = client.who_has([fmap[key] for key in keys])
    rank_of = {w: r for r, w in enumerate(workers)}
    sizes = Bp.chunks[0]
    chunks, start = [], 0      # (rank, key, chunk index) of each non-empty chunk; start: its first row
    away: dict[str, list] = collections.defaultdict(list)
    for l, key in enumerate(keys):
        if sizes[l] == 0:
            continue
        held = [rank_of[w] for w in who.get(key, ()) if w in rank_of]
        r = min(held) if held else min(len(workers) - 1, start * len(workers) // int(Bp.shape[0]))
        if not held and who.get(key):
            away[workers[r]].append(key)
        chunks.append((r, key, l))
        start += int(sizes[l])
    move_keys(client, away)   # before the group, not pulled by the rank (move_keys says why)
    # decided by the chunking alone, so A's tiles (cut by these offsets) serve every placement of B's chunks
    pieces = _B_PIECES if len(chunks) < len(workers) else 1
    koffs, owners = [0], []
    b_args: list[dict] = [{} for _ in workers]
    for r, key, l in chunks:
        cuts = [int(sizes[l]) * q // pieces for q in range(pieces + 1)]
        for c0, c1 in zip(cuts[:-1], cuts[1:], strict=True):
            if c1 > c0:
                b_args[r][(len(owners), 0)] = fmap[key] if pieces == 1 else (fmap[key], c0, c1)
                owners.append(r)
                koffs.append(koffs[-1] + c1 - c0)
    return np.asarray(koffs, dtype=np.int64), tuple(owners), b_args


def _rows_on(B: Any, client: Any, workers: Sequence[str]) -> RowBlocks:
    """B as dense row blocks, one per worker of ``workers`` (used in place when it already is)."""
    if isinstance(B, RowBlocks) and list(B.workers) == list(workers):
        return B
    if isinstance(B, RowBlocks):
        return rows_of(B.to_dask_array(), client, workers=workers)
    if _is_dask(B):
        return rows_of(B, client, workers=workers)
    return distribute(B, client, workers=workers)


def _prepared_tiles(A: Any, lay: _Layout, a_args: list, client: Any) -> tuple[list, bool]:
    """Futures of every rank's prepared A tiles, cached on the distributed A.

    Cutting A into compressed tiles costs about as much as a multiply, so it
    is done once per (A, inner partition) on the workers that own the blocks
    and kept in ``A.meta`` as futures: later calls with the same A and the
    same row partition of B start multiplying at once, wherever dask placed
    B's chunks (a tile's column index into a local B block is added on its
    worker the first time that block is local).  The key holds the blocks'
    future keys, so a rebuilt A never sees stale tiles; the tiles are
    recomputed from A's futures if a worker is lost.
    """
    keys = tuple(tuple(sorted((k, f.key) for k, f in a.items())) for a in a_args)
    ck = (lay.kind, tuple(int(x) for x in lay.koffs), keys)
    cache = A.meta.setdefault("_spmm_prepared", {})
    futs = cache.get(ck)
    if futs is not None and not any(f.status in ("error", "cancelled", "lost") for f in futs):
        return list(futs), True
    cache.clear()  # one partition of B at a time: don't pile up copies of A
    futs = [client.submit(_prepare_rank_tiles, a_args[r], lay, workers=[lay.workers[r]],
                          allow_other_workers=False, pure=False, key=f"spmm-prepare-{uuid.uuid4().hex[:12]}-{r}")
            for r in range(lay.size)]
    cache[ck] = futs
    return list(futs), False


def _spmm_stats(infos: list[dict], lay: _Layout, plan: dict, seconds: float) -> dict:
    m, _, k = plan["shape"]
    nnz = sum(i["nnz"] for i in infos)
    traffic = traffic_bytes(nnz, m, k)
    return {"backend": infos[0]["backend"], "seconds": seconds, "rank_seconds": max(i["seconds"] for i in infos),
            "gflops": 2.0 * nnz * k / seconds / 1e9, "traffic_bytes": traffic,
            "effective_gbps": traffic / seconds / 1e9, "bytes_moved": sum(i["bytes_sent"] for i in infos),
            "phases": [i["phases"] for i in infos], "phases_cpu": [i["phases_cpu"] for i in infos],
            "units": [i["units"] for i in infos],
            "steals": sum(i["steals"] for i in infos), "nnz": nnz, "algorithm": plan["algorithm"],
            "layout": lay.kind, "grid": lay.grid, "n_workers": lay.size}
