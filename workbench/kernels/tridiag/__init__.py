"""Distributed tridiagonal solver (DistD2-TDS) and the sixth-order compact derivative.

Reproduces Akkurt, Lemaire, Bartholomew & Laizet, "A Distributed-memory
Tridiagonal Solver Based on a Specialised Data Structure Optimised for CPU and
GPU Architectures" (DistD2-TDS): batches of tridiagonal systems whose line
dimension is split across workers, solved with one modified (hybrid) Thomas
sweep per block and a small coupling system.

Algorithm
---------
The line ``0..n-1`` is cut into ``K`` contiguous *sub-blocks* by a grid that
depends only on ``n`` (:func:`block_grid`; ``K`` is a multiple of 12 so 1, 2,
3, 4, 6, 12 workers get equal shares); worker ``r`` owns a contiguous run of
sub-blocks.  Because the grid never depends on the worker count, every
floating-point operation is the same for 1, 2 or 3 workers and the answers are
bitwise identical.  Inside one SPMD group (:mod:`workbench.comms`):

1. *Reduce* (worker-local, one read of the inputs): a downward and an upward
   elimination sweep over each sub-block express its first and last rows as
   ``A x_prev + x_first + C x_last = D`` and ``A x_first + x_last + C x_next = D``.
   Equivalently every interior unknown satisfies
   ``x_j = d~_j - sa_j x_first - sc_j x_last``; the kernel keeps only the two
   boundary rows (the interior is re-solved in step 3 instead of being stored,
   which saves three array writes and reads).
2. *Couple*: the boundary rows form a tridiagonal (cyclic when periodic)
   system of ``2K`` unknowns per system with unit diagonal.

   * ``reduced="exact"``: one ``allgather`` of the boundary rows; every rank
     solves the whole reduced system with the same kernels (any nonsingular
     system without a zero pivot is solved exactly).
   * ``reduced="truncated"`` (the paper's method, akin to PDD): the far
     couplings ``A`` of a block's last row and ``C`` of its first row are
     dropped, so each interface is a 2x2 system that needs only the
     neighbour's boundary row (one ``neighbor_exchange``).
     **Accuracy bound**: the dropped coefficients are at most
     ``tau = max |A_last|, |C_first|`` (reported as
     ``stats["truncation_coupling"]``); the truncated solution differs from the
     exact one by ``O(tau * max|x|)``.  For a diagonally dominant system with
     dominance ratio ``rho = max (|dl|+|du|)/|d| < 1`` and sub-blocks of ``L``
     rows, ``tau <= rho**(L-1)``.
   * ``reduced="auto"`` (default): truncated when ``tau <= 2**-53`` over all
     ranks (the dropped terms are below rounding), else exact.
3. *Expand*: with each sub-block's ``x_first``/``x_last`` known, its interior
   is a Thomas solve (a second read of the inputs, one write of ``x``).

Per rank, DRAM traffic is two reads of the four inputs and one write of ``x``;
sweeps run over tiles of the batch (``V``) axis small enough for L2 so the
upward sweep and the Thomas back-substitution hit cache.

Fused single pass (batches of dominant systems)
-----------------------------------------------
For a batch with one right-hand side and ``reduced="auto"`` (and the compact
derivative's systems, the paper's use case), the line is cut
into *blocks* (runs of the grid's sub-blocks; cut again at rank edges): the
fewest of at most 768 rows among its sixths and its 12, 24, 36, ...-ths
(every twelfth an edge), since each block pays for its edges; a line too
short for sixths of ``2 H + 2`` rows is cut in quarters, halves or not at
all.  The worker counts dividing the number of blocks see the same blocks
(1, 2, 3 and 6 where the line takes sixths or finer; 4 and 12 too past 4608
rows), so the same answers.  Each rank makes one pass over its inputs, tile by tile of 2048
systems:

* a forward elimination writes ``b'`` into ``x`` and ``c'`` into a ring of
  rows; every ``W = 64`` rows, the window is back-substituted starting
  ``H`` rows further down with ``x`` there taken as 0.  The dropped term
  is ``prod |c'|`` over the halo times ``|x|`` (checked).  ``H`` (32 to 64)
  is sized from the decay measured on the line's first rows, once per matrix:
  a matrix already on the workers (dask keys) keeps its halo for later
  solves (``x.stats["halo_from"]``), as a compact scheme's time steps do.
  Rows go in pairs, the recurrences held in registers across the pair;
* the neighbours' unknowns enter a block only through the columns
  ``x_j = y_j - v_j x_prev - w_j x_next``; ``v`` decays from the block's top and
  ``w`` from its bottom, so they are kept for the first and last ``H`` rows
  only (the dropped ``|v_{H-1}|``, ``|w_{L-H}|`` are checked);
* each interface is then a 2x2 system in ``(x_last, x_first)``: inside a rank
  it is solved while the rows are in cache, between ranks after one exchange
  of two rows of ``V`` values with each neighbour.

So the inputs are read once and ``x`` written once (the paper's five arrays).
When any checked term exceeds ``2**-53`` (the coupling does not decay within
the halo), or a value is non-finite, every rank falls back to the two-pass
path above, which also reports bad input.  ``x.stats["path"]`` says which ran.

Layout and distribution
-----------------------
Inside a rank the batch axis is the vector axis: sweeps run over rows of ``V``
systems (the paper's interleaved layout, ``(m, V)`` coefficients and an
``(m, R, V)`` right-hand side).  Inputs may come in three layouts; what each
costs (``m``: a rank's rows, every figure per element of the five arrays):

* **gtsv layout** ``(batch, n)`` (``axis=-1``, the default; LAPACK's, each
  system a contiguous row), host or dask.  The fast path: each rank takes its
  chunks as they lie and, panel by panel of systems (64 on short blocks,
  16 on n = 4096's) and block by block of the line (~680 rows at
  n = 4096), transposes the rows into line-major scratch that stays in L2
  (4 x 4 tiles in registers, eight systems' rows at a time), runs the fused
  pass there (the same kernel, so the same answers bit for bit) and writes
  ``x`` back into the same layout, whole lines at a time; the inputs are read
  once and ``x`` written once, as in the line-major pass, plus the in-cache
  transposes.  Dask arrays chunked along ``n`` are read where they lie: each
  rank goes to the worker holding most of its chunks, and chunks of
  ``ceil(n / P)`` columns over ``P`` workers end where the ranks' rows do
  (:func:`block_grid`), so each rank solves the chunk it holds; in fewer
  chunks along ``n`` than workers (past 16 MiB of input a worker) each
  chunk gets a rank and the other workers rest, since a rank without a
  chunk of its own would borrow all its rows on every call.  Where a
  rank's rows reach a few columns into a neighbour's chunk (a gtsv
  sub-diagonal's one entry per system, or chunks cut elsewhere), the rank that
  holds that chunk lends those columns inside the group, or, when no rank takes
  the chunk whole, they are cut beside the chunk and only they travel; a rank
  whose rows span three or more chunks of an input solves its blocks of the
  line in runs that each read two chunks at most, joined as ranks are (the
  same bits); only where one block (~680 rows at n = 4096) reaches into three
  chunks are they copied into one block first (``stats["gtsv_in_place"]``
  says which).  Dask arrays chunked along the batch, or along both axes (a
  grid of chunks, as dask's ``chunks="auto"`` cuts a large square batch),
  give each worker whole rows of ``b``'s chunks (inputs chunked apart, as
  ``chunks="auto"`` cuts ``dl``'s ``n - 1`` columns, are not rechunked: a chunk
  is read in place by the rank taking most of its systems, and only the rows
  another rank needs travel); fewer rows than workers leave workers
  idle, unless the input is under 16 MiB a worker: then the line split
  over every worker), and so do host batches of at least 8
  systems per worker: whole systems, no exchange at all (the blocks along
  the line are the same, so are the answers); a row's chunks along the line
  are read in place in runs of blocks as above.  Host
  arrays travel to the workers on every call.  Several right-hand sides, fewer
  than 8 systems, non-decaying couplings (the two-pass path), the compact
  derivative and device workers transpose each rank's blocks (one extra read
  and write of each array).
* **line-major arrays** ``(n, batch)`` (``axis=0``), host or dask chunked
  along ``n``: the fused pass reads the blocks in place; the gtsv sub-diagonal
  (``n-1`` entries, shifted by one row) and the last rank's super-diagonal are
  copied once per rank to align them.  Host batches of at least 8 systems per
  worker are cut along the batch, as in gtsv layout (each worker's columns
  copied on the way), so each worker solves whole lines as one worker does.
* :class:`~workbench.partition.RowBlocks` in the solver's *line-major* layout
  (rows = the line index, whatever ``axis`` says): ``dl``, ``d``, ``du`` of
  shape ``(n,)`` or ``(n, V)`` (``dl[0]``, ``du[n-1]`` are the periodic
  corners and are ignored otherwise) and ``b`` of shape ``(n,)``, ``(n, V)``
  or ``(n, R, V)``: :func:`distribute_system` and :func:`random_system` build
  them.

The result is a dask array of futures pinned where they were computed, in the
caller's layout and chunked as the solver split the work (along ``n``, or
along the batch when each worker held whole systems); line-major for RowBlocks
inputs.  For a dask ``b`` chunked along ``n`` the blocks meet at ``b``'s chunk
edge nearest each rank edge (the ranks pass each other the few rows between),
so with one chunk per worker ``x`` comes back chunked exactly as ``b``.  No
pivoting is done (as in the paper and cuSPARSE ``gtsv2_nopivot``): a zero
pivot raises :class:`numpy.linalg.LinAlgError`.

Package layout
--------------
This module holds the public functions, their validation and the client-side
placement and launch; ``ranks`` the SPMD rank bodies (two-pass solve, fused
pass, reduced systems, compact stencil) and their local dispatch; ``cpu`` the
numba kernels; ``params`` the constants all of them share.

Example
-------
>>> import numpy as np, workbench as wb
>>> with wb.cluster(backend="cpu", n_workers=2) as client:              # doctest: +SKIP
...     x = wb.tridiag_solve(np.ones(99), np.full(100, 4.0), np.ones(99), np.ones(100), client=client)
...     float(wb.kernels.tridiag.validate_tridiag(np.ones(99), np.full(100, 4.0), np.ones(99),
...                                               np.ones(100), np.asarray(x))) < 1e-14
True
"""

from __future__ import annotations

import collections
import operator
import time
import warnings
from typing import Any

import numpy as np

from ... import comms
from ...backend import to_host
from ...cluster import backend_of, default_client, worker_addresses
from ...partition import (
    RowBlocks,
    TaskLineage,
    _literal,
    _scatter_all,
    array_of,
    as_array,
    block_offsets,
    chunk_sources,
    compute_all,
    move_keys,
    resilient,
)

# the numba kernels (cpu.py) and the reduced-system solver (ranks.py) stay importable from here (`x as x`:
# re-exports)
from .cpu import compact_rhs_kernel as compact_rhs_kernel
from .cpu import decay_kernel as decay_kernel
from .cpu import expand1_kernel as expand1_kernel
from .cpu import expand1p_kernel as expand1p_kernel
from .cpu import expand_b1_kernel as expand_b1_kernel
from .cpu import expand_kernel as expand_kernel
from .cpu import fused_fix_kernel as fused_fix_kernel
from .cpu import fused_kernel as fused_kernel
from .cpu import reduce1_kernel as reduce1_kernel
from .cpu import reduce1p_kernel as reduce1p_kernel
from .cpu import reduce_b1_kernel as reduce_b1_kernel
from .cpu import reduce_kernel as reduce_kernel
from .cpu import thomas_kernel
from .params import (
    _BLOCK_ROWS,
    _BLOCK_ROWS_BATCH,
    _BLOCK_ROWS_SINGLE,
    _FUSED_BLOCKS,
    _FUSED_COARSER,
    _FUSED_HALOS,
    _FUSED_ROWS,
    _MOVE_COST,
    _PROBE,
    _SPREAD_BYTES,
    _TRUNC_WARN,
    COMPACT6,
)
from .ranks import Borrow, _random_rank, _tridiag_rank, random_part
from .ranks import _solve_chain as _solve_chain
from .validation import _Spec, _validate_compact, _validate_system

__all__ = [
    "tridiag_solve",
    "compact_derivative",
    "validate_tridiag",
    "distribute_system",
    "random_system",
    "gtsv_system",
    "block_grid",
    "thomas_reference",
    "COMPACT6",
]


def block_grid(n: int, batch: int = 1) -> np.ndarray:
    """Sub-block offsets of a line of ``n`` rows (independent of the worker count).

    ``K = 12 * ceil(n / (12 * L))`` sub-blocks for ``n >= 24`` (so 1, 2, 3, 4,
    6 and 12 workers get equal shares), ``n // 2`` below that; ``L = 8192``
    rows for one system, ``L = 512`` for a few (2 to 7), ``L = 64`` for a
    batch of 8 or more.  The twelfths end at ``ceil(k n / 12)``, where a dask
    array chunked along the line over ``P`` workers (chunks of ``ceil(n / P)``)
    has its edges, for ``P`` dividing ``n`` and for the first edge otherwise:
    then each worker solves the rows of the chunk it holds, and none moves.

    Examples
    --------
    >>> block_grid(4096)[:3]
    array([  0, 342, 683])
    >>> block_grid(4096, batch=16384)[:3]
    array([  0,  57, 114])
    """
    rows = _BLOCK_ROWS_BATCH if batch >= 8 else _BLOCK_ROWS if batch > 1 else _BLOCK_ROWS_SINGLE
    if n < 24:
        return block_offsets(n, max(1, n // 2))
    q = max(1, -(-n // (12 * rows)))
    twelfths = -(-np.arange(13, dtype=np.int64) * n // 12)
    return np.concatenate([[0]] + [t0 + block_offsets(int(t1 - t0), q)[1:]
                                   for t0, t1 in zip(twelfths[:-1], twelfths[1:], strict=True)]).astype(np.int64)


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------


@resilient
def tridiag_solve(dl: Any, d: Any, du: Any, b: Any, *, axis: int = -1, periodic: bool = False,
                  reduced: str = "auto", engine: str = "auto", client: Any = None) -> Any:
    """Solve tridiagonal systems ``A x = b`` whose line is distributed over the workers.

    Parameters
    ----------
    dl, d, du : array_like, dask array or RowBlocks
        Sub-diagonal, diagonal and super-diagonal in LAPACK ``gtsv`` form:
        ``d`` has length ``n``; ``dl``/``du`` length ``n-1`` (``n`` when
        ``periodic``, with ``dl[0] = A[0, n-1]`` and ``du[n-1] = A[n-1, 0]``).
        A leading axis makes a batch: ``d`` of shape ``(batch, n)``.
        RowBlocks use the line-major layout described in the module docstring.
    b : array_like, dask array or RowBlocks
        Right-hand sides: ``(n,)`` or ``(n, nrhs)``; batched ``(batch, n)`` or
        ``(batch, n, nrhs)`` (``d``'s shape, then an optional ``nrhs`` axis).
    axis : int
        The axis of ``d`` along which each system runs (scipy style): ``-1``
        (default) is gtsv's ``(batch, n)``, ``0`` takes line-major
        ``(n, batch)`` arrays (``dl``/``du`` then ``(n-1, batch)``, ``b``
        ``(n, batch)`` or ``(n, batch, nrhs)``).  Both go in without
        whole-array transposes; the module docstring lists what each layout
        and chunking costs.  RowBlocks are always line-major.
    periodic : bool
        Cyclic systems (compact schemes on periodic domains); needs ``n >= 3``.
    reduced : {"auto", "exact", "truncated"}
        How the coupling system is solved (see the module docstring for the
        truncation's accuracy bound).  ``"truncated"`` warns (RuntimeWarning)
        when the couplings it drops exceed ``2**-26``.
    engine : {"auto", "numba", "array"}
        Worker-local kernels: numba loops (the default: numba on CPU workers,
        their numba.cuda twins on GPU and simulated-GPU workers) or
        row-vectorized array-namespace code (numpy or cupy).
    client : distributed.Client, optional
        Default: the cluster that holds the distributed inputs, else the current client.

    Returns
    -------
    dask.array.Array
        ``x`` shaped like ``b`` (line-major for RowBlocks input), float64, its
        blocks left on the workers.  For array input each chunk is a rank's
        own result, as in a persisted array: ``client.persist(x)`` or
        ``x.compute()`` runs no further task (a batch of zero systems gives an empty ``x`` and
        runs nothing).  ``x.stats["split"]`` says how the work was
        cut: ``"line"`` (each worker a run of every system's rows) or
        ``"batch"`` (each worker whole systems, ``systems_per_worker``).  ``x.stats`` holds ``backend`` (the
        workers' path: ``"cpu"``, ``"gpu"`` or ``"gpu-sim"``), ``engine``, ``seconds``,
        ``bandwidth_gbps`` (the paper's ``5 * ndof * 8 B / t``), ``bytes_moved``,
        ``blocks``, ``reduced`` (the mode used), ``truncation_coupling``,
        ``path`` (``"fused"`` single pass or ``"two-pass"``), ``gtsv_in_place``
        (``(batch, n)`` input: True when every rank's fused pass read its chunks
        where they lie, False when they were copied into line-major blocks
        first; None for other layouts), ``halo_rows`` (the
        fused pass's halo), per-phase times (``phase_seconds``: the slowest
        rank's; ``rank_phase_seconds``: each rank's) and ``rank_spans``, each
        rank's ``(start, end)`` on ``time.perf_counter`` (a clock shared by the
        processes of one host: subtract the client's own reading before the
        call to see launch latency and skew).

    Examples
    --------
    >>> import numpy as np, workbench as wb
    >>> n = 1000
    >>> x = wb.tridiag_solve(np.ones(n - 1), np.full(n, 4.0), np.ones(n - 1),
    ...                      np.ones(n), client=client)               # doctest: +SKIP
    >>> np.asarray(x)[:2]                                              # doctest: +SKIP
    array([0.21132487, 0.15470054])
    >>> import dask.array as da                                        # a batch, chunked along n
    >>> d = da.full((64, n), 4.0, chunks=(64, 500)); o = da.ones((64, n - 1), chunks=(64, 500))
    >>> x = wb.tridiag_solve(o, d, o, da.ones((64, n), chunks=(64, 500)), client=client)   # doctest: +SKIP
    >>> xt = wb.tridiag_solve(o.T, d.T, o.T, da.ones((n, 64)), axis=0, client=client)      # doctest: +SKIP
    """
    dl, d, du, b = (as_array(name, v) for name, v in zip(("dl", "d", "du", "b"), (dl, d, du, b), strict=True))
    spec = _validate_system(dl, d, du, b, periodic, reduced, engine, axis)
    client = default_client(client, d, b, dl, du)
    return _run(spec, client, mode="solve")


@resilient
def compact_derivative(f: Any, h: float, *, axis: int = -1, order: int = 1, periodic: bool = True,
                       reduced: str = "auto", engine: str = "auto", client: Any = None) -> Any:
    """Sixth-order compact first derivative along ``axis``, fused with the solve.

    ``alpha f'_{i-1} + f'_i + alpha f'_{i+1} = a (f_{i+1}-f_{i-1})/(2h) + b (f_{i+2}-f_{i-2})/(4h)``
    with ``alpha = 1/3, a = 14/9, b = 1/9``.  Each rank builds its right-hand
    side from its block plus a two-point halo from its neighbours, then solves,
    all in one SPMD group; a batch of 8 or more lines whose blocks are long
    enough (~100 rows) takes the fused single pass (``stats["path"]``).
    Non-periodic ends use Lele's closures: the third-order
    ``f'_0 + 2 f'_1 = (-5/2 f_0 + 2 f_1 + 1/2 f_2)/h`` and the fourth-order
    Pade scheme (``alpha = 1/4``) on the next row.

    Parameters
    ----------
    f : array_like, dask array or RowBlocks
        Samples ``(n,)`` or ``(batch, n)`` (RowBlocks: line-major ``(n,)`` or
        ``(n, batch)``), ``n >= 5``.
    axis : int
        The axis of ``f`` to differentiate along: ``-1`` (default) for
        ``(batch, n)``, ``0`` for line-major ``(n, batch)`` (read in place).
        In the ``(batch, n)`` layout each rank transposes its block into the
        solver's layout and its answer back (one extra read and write of ``f``
        and ``f'``, in the rank, never a whole-array transpose).
    h : float
        Grid spacing (``2*pi/n`` on a periodic ``[0, 2*pi)``).
    order : int
        Derivative order; only 1 is implemented.
    periodic : bool
        Periodic domain (default) or one-sided boundary closures.
    reduced, engine, client
        As in :func:`tridiag_solve`.

    Returns
    -------
    dask.array.Array
        ``f'`` shaped like ``f``, with ``.stats`` as in :func:`tridiag_solve`.

    Examples
    --------
    >>> n = 512; x = 2 * np.pi * np.arange(n) / n
    >>> df = wb.compact_derivative(np.sin(x), 2 * np.pi / n, client=client)   # doctest: +SKIP
    >>> float(np.abs(np.asarray(df) - np.cos(x)).max()) < 1e-8               # doctest: +SKIP
    True
    """
    f = as_array("f", f)
    spec = _validate_compact(f, h, order, periodic, reduced, engine, axis)
    client = default_client(client, f)
    return _run(spec, client, mode="compact")


def validate_tridiag(dl: Any, d: Any, du: Any, b: Any, x: Any, *, periodic: bool = False) -> float:
    """Scaled residual ``max |A x - b| / (|A| |x| + |b|)`` on the host (LAPACK-style check).

    Takes the :func:`tridiag_solve` arguments in gtsv form (host or dask) and
    its answer; values near machine epsilon mean a backward-stable solve.

    Examples
    --------
    >>> validate_tridiag(dl, d, du, b, x) < 1e-14                       # doctest: +SKIP
    True
    """
    dl, d, du, b, x = (np.asarray(to_host(np.asarray(a)), dtype=np.float64) for a in (dl, d, du, b, x))
    single = d.ndim == 1
    if single:
        dl, d, du = dl[None], d[None], du[None]
        b, x = b[None], x[None]
    if b.ndim == 2:
        b, x = b[..., None], x[..., None]
    n = d.shape[1]
    dlf, duf = _pad_host(dl, du, n, periodic)
    ax = d[..., None] * x
    bound = np.abs(d[..., None]) * np.abs(x) + np.abs(b)
    if n > 1:
        lo = dlf[:, 1:, None] * x[:, :-1]
        up = duf[:, :-1, None] * x[:, 1:]
        ax[:, 1:] += lo
        ax[:, :-1] += up
        bound[:, 1:] += np.abs(lo)
        bound[:, :-1] += np.abs(up)
    if periodic:
        c0 = dlf[:, 0, None] * x[:, -1]
        c1 = duf[:, -1, None] * x[:, 0]
        ax[:, 0] += c0
        ax[:, -1] += c1
        bound[:, 0] += np.abs(c0)
        bound[:, -1] += np.abs(c1)
    res = np.abs(ax - b) / np.maximum(bound, np.finfo(np.float64).tiny)
    return float(res.max()) if res.size else 0.0


def distribute_system(dl: Any, d: Any, du: Any, b: Any, *, periodic: bool = False,
                      client: Any = None) -> tuple[RowBlocks, RowBlocks, RowBlocks, RowBlocks]:
    """Place a host system on the workers in the solver's line-major layout, once.

    Returns four :class:`RowBlocks` (``dl``, ``d``, ``du``, ``b``) cut on
    :func:`block_grid` boundaries; pass them to :func:`tridiag_solve` to solve
    repeatedly without re-distributing.

    Examples
    --------
    >>> sys_ = distribute_system(dl, d, du, b, client=client)          # doctest: +SKIP
    >>> x = tridiag_solve(*sys_, client=client)                        # doctest: +SKIP
    """
    spec = _validate_system(dl, d, du, b, periodic, "auto", "auto")
    if spec.source != "host":
        raise TypeError("distribute_system takes host arrays")
    client = default_client(client)
    addrs = _addresses(client)
    offs = _rank_offsets(spec.n, len(addrs), spec.V)
    dlf, duf = _pad_host(spec.dl, spec.du, spec.n, periodic)
    lm = _line_major_host
    arrays = (lm(dlf, spec.batched), lm(spec.d, spec.batched), lm(duf, spec.batched),
              lm(spec.b, spec.batched, rhs=True, b_ndim=spec.b_ndim))
    out = []
    for a in arrays:
        parts = _scatter_all(client, [a[offs[r]:offs[r + 1]] for r in range(len(addrs))], addrs)
        out.append(RowBlocks(parts, offs, tuple(a.shape), np.dtype(np.float64), addrs, kind="dense",
                             meta={"layout": "tridiag-line-major", "periodic": periodic}))
    return tuple(out)


@resilient
def random_system(n: int, batch: int | None = None, *, nrhs: int | None = None, dominance: float = 2.0,
                  seed: int = 0, client: Any = None) -> tuple[RowBlocks, RowBlocks, RowBlocks, RowBlocks]:
    """A random system generated on the workers in line-major layout (nothing passes the client).

    Off-diagonals are uniform in ``[-1, 1)``, the diagonal is
    ``dominance * (|dl| + |du|) + U[0, 1)`` (strictly dominant for
    ``dominance > 1``), ``b`` uniform.  Each row is seeded by its global index,
    so the system is the same for any worker count.  ``batch=None`` gives one
    system (shapes ``(n,)``).

    Examples
    --------
    >>> dl, d, du, b = random_system(4096, 16384, client=client)       # doctest: +SKIP
    """
    if not isinstance(n, int | np.integer) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    if batch is not None and (not isinstance(batch, int | np.integer) or batch < 1):
        raise ValueError(f"batch must be a positive int or None, got {batch!r}")
    client = default_client(client)
    addrs = _addresses(client)
    offs = _rank_offsets(int(n), len(addrs), 1 if batch is None else int(batch))
    futs = comms.run_spmd(_random_rank, [(int(offs[r]), int(offs[r + 1])) for r in range(len(addrs))],
                          batch, nrhs, float(dominance), int(seed), client=client, workers=addrs,
                          name="tridiag-random")
    comms.wait_group(futs)
    V = 1 if batch is None else int(batch)
    shapes = [(n,), (n,), (n,), (n,)] if batch is None else [(n, V)] * 3 + [(n, V)]
    if nrhs is not None:
        shapes[3] = (n, nrhs) if batch is None else (n, nrhs, V)
    out = []
    for k in range(4):
        parts = [client.submit(operator.getitem, f, k, workers=[a], pure=False) for f, a in zip(futs, addrs,
                                                                                               strict=True)]
        lineage = TaskLineage(random_part, [(k, (int(offs[r]), int(offs[r + 1])), batch, nrhs, float(dominance),
                                             int(seed)) for r in range(len(addrs))])
        out.append(RowBlocks(parts, offs, shapes[k], np.dtype(np.float64), addrs, kind="dense",
                             meta={"layout": "tridiag-line-major", "seed": seed}, lineage=lineage))
    return tuple(out)


def gtsv_system(n: int, batch: int | None = None, *, seed: int = 1, along: str = "n", axis: int = -1,
                client: Any = None) -> tuple:
    """A random diagonally dominant system as the README has a user hold it: dask arrays ``(dl, d, du, b)``
    in gtsv form (``(batch, n)``, ``dl`` and ``du`` with ``n - 1`` entries per system; ``axis=0``: C-ordered
    line-major ``(n, batch)``), generated and persisted on the workers (nothing passes the client).

    ``along="n"`` chunks the line over the workers (``ceil(n / P)`` columns each), ``along="batch"`` the
    systems.  Chunk ``i`` of all four arrays is made on worker ``i``, as a user's arrays computed from one
    another lie.  The matrix is :func:`random_system`'s for the same ``seed`` (the solver's internal
    line-major layout): off-diagonals uniform in ``[-1, 1)``, the diagonal ``2 (|dl| + |du|) + U[0, 1)``;
    the same numbers for any worker count and chunking.  The benchmarks' and the notebook's headline input.

    Examples
    --------
    >>> dl, d, du, b = gtsv_system(4096, 16384, client=client)          # doctest: +SKIP
    >>> x = wb.tridiag_solve(dl, d, du, b)                              # doctest: +SKIP
    """
    import uuid

    from distributed import wait

    if not isinstance(n, int | np.integer) or n < 2:
        raise ValueError(f"n must be an int >= 2, got {n!r}")
    if batch is not None and (not isinstance(batch, int | np.integer) or batch < 1):
        raise ValueError(f"batch must be a positive int or None, got {batch!r}")
    if along not in ("n", "batch"):
        raise ValueError(f"along must be 'n' or 'batch', got {along!r}")
    if isinstance(axis, bool) or axis not in (0, -1, 1):
        raise ValueError(f"axis must be 0 (line-major) or -1 (gtsv's (batch, n); 1 is the same axis), got {axis!r}")
    client = default_client(client)
    addrs = _addresses(client)
    P = len(addrs)
    n = int(n)
    V = 1 if batch is None else int(batch)
    by_n = along == "n" or batch is None
    ch_n, ch_v = (-(-n // P), V) if by_n else (n, -(-V // P))
    cols = [list(range(0, m, ch_n)) + [m] for m in (n - 1, n, n - 1, n)]    # chunk edges along the line
    systems = list(range(0, V, ch_v)) + [V]
    token = uuid.uuid4().hex[:12]
    futs: list[list] = [[] for _ in range(4)]
    for i in range(len(cols[1]) - 1):
        for j in range(len(systems) - 1):
            c0, c1, s0, s1 = cols[1][i], cols[1][i + 1], systems[j], systems[j + 1]
            w = [addrs[(i if by_n else j) % P]]
            blocks = client.submit(_gtsv_chunk, n, batch, seed, c0, c1, s0, s1, axis == 0, workers=w,
                                   allow_other_workers=True, pure=False)
            for k in range(4):
                if c0 < cols[k][-1]:   # dl and du have n - 1 columns: one chunk fewer when they end at c0
                    idx = (i,) if batch is None else ((i, j) if axis == 0 else (j, i))
                    futs[k].append(client.submit(operator.getitem, blocks, k, key=(f"gtsv-{token}-{k}", *idx),
                                                 workers=w, allow_other_workers=True))
    wait([f for fs in futs for f in fs])
    out = []
    for k in range(4):
        line = tuple(np.diff(cols[k]))
        chunks = (line,) if batch is None else ((line, tuple(np.diff(systems))) if axis == 0 else
                                                (tuple(np.diff(systems)), line))
        out.append(array_of(futs[k], chunks, np.float64))
    return tuple(out)


def _gtsv_chunk(n: int, batch: int | None, seed: int, c0: int, c1: int, s0: int, s1: int,
                line_major: bool) -> tuple:
    """gtsv_system's blocks for columns ``c0:c1`` of the line and systems ``s0:s1``: random_system's rows,
    made in slabs (the lower diagonal's column j is row j + 1's entry, so the slab reaches one row on)."""
    hi = min(c1 + 1, n)
    out = [np.empty((hi - c0, s1 - s0)) for _ in range(4)]
    slab = 256
    for r0 in range(c0, hi, slab):
        r1 = min(r0 + slab, hi)
        parts = _random_rank(None, (r0, r1), batch, None, 2.0, seed)
        for k, a in enumerate(parts):
            out[k][r0 - c0:r1 - c0] = a.reshape(r1 - r0, -1)[:, s0:s1]
    m = c1 - c0
    e = min(c1, n - 1) - c0              # the off-diagonals' columns in this chunk
    rows = (out[0][1:e + 1], out[1][:m], out[2][:e], out[3][:m])
    if batch is None:
        return tuple(np.ascontiguousarray(r[:, 0]) for r in rows)
    return tuple(np.ascontiguousarray(r if line_major else r.T) for r in rows)


def thomas_reference(dl: np.ndarray, d: np.ndarray, du: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Serial Thomas algorithm on the host (numba, one thread): the single-node peer.

    gtsv-form host arrays, single ``(n,)`` or batched ``(batch, n)``, one
    right-hand side; no pivoting.

    Examples
    --------
    >>> x = thomas_reference(np.ones(2), np.full(3, 4.0), np.ones(2), np.ones(3))
    >>> np.round(x, 4)
    array([0.2143, 0.1429, 0.2143])
    """
    single = np.ndim(d) == 1
    dl, d, du, b = (np.ascontiguousarray(np.atleast_2d(a), dtype=np.float64) for a in (dl, d, du, b))
    x = np.empty_like(b)
    thomas_kernel(dl, d, du, b, x)
    return x[0] if single else x


def _addresses(client: Any) -> list[str]:
    addrs = worker_addresses(client)
    if not addrs:
        raise RuntimeError("the cluster has no workers")
    return addrs


# --------------------------------------------------------------------------
# Placement and launch (client side)
# --------------------------------------------------------------------------


def _rank_offsets(n: int, P: int, batch: int = 1) -> np.ndarray:
    grid = block_grid(n, batch)
    return grid[block_offsets(len(grid) - 1, P)]


def _line_offsets(n: int, P: int, batch: int, edges: np.ndarray) -> np.ndarray:
    """Rank offsets along the line for inputs whose chunks end at ``edges``: equal shares of the grid, each
    rank edge moved to the edge of the fused pass's blocks (:func:`_fused_grid`) nearest a chunk edge where
    the rows that then need not move between workers outweigh the imbalance (``_MOVE_COST``).  Those edges
    keep the fused pass's blocks, so the answers do not change by a bit."""
    offs = _rank_offsets(n, P, batch)
    grid = block_grid(n, batch)
    coarse = _fused_grid(grid)
    if P < 2 or len(edges) < 3 or coarse is None:
        return offs

    def cost(o: np.ndarray) -> int:   # the largest share, plus the rows read from a chunk a neighbour takes
        return int(np.diff(o).max()) + _MOVE_COST * sum(int(np.abs(edges - o[r]).min()) for r in range(1, P))

    for r in range(1, P):
        c = coarse[np.abs(coarse - edges[np.abs(edges - offs[r]).argmin()]).argmin()]
        if offs[r - 1] < c < offs[r + 1]:
            trial = offs.copy()
            trial[r] = c
            offs = trial if cost(trial) < cost(offs) else offs
    return offs


def _sub_blocks(lo: int, hi: int, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Local (starts, lengths) of the sub-blocks in rows [lo, hi): grid cuts, none shorter than 2."""
    if hi <= lo:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    cuts = [int(g) for g in grid if lo + 2 <= g <= hi - 2]
    edges = np.array([lo, *cuts, hi], dtype=np.int64) - lo
    return edges[:-1], np.diff(edges)


def _fused_grid(grid: np.ndarray) -> np.ndarray | None:
    """Where the fused pass's blocks may end along the line (before rank edges cut them): the fewest blocks of at
    most ``_FUSED_ROWS`` rows among the grid's sixths and its ``12 j``-ths (every twelfth an edge), so a block's
    edges cost little against its rows and a gtsv panel of it keeps two vectors of systems; on a line too short
    for sixths of ``2 * halo + 2`` rows its quarters, halves or the whole line, the finest that long, so a short
    line (a 256-point axis of a 3-D field) still takes the single pass (65536 systems of 256 rows, 2 workers:
    0.45 s a call on the two-pass path).  A function of the grid alone: every worker count that divides the
    number of blocks gets the same blocks, so the same answers (1, 2, 3 and 6 workers where the line takes
    sixths or finer; 4 and 12 too from 4609 rows, where sixths are too long)."""
    K = len(grid) - 1
    if K % _FUSED_BLOCKS:
        return None
    shortest = 2 * _FUSED_HALOS[0] + 2

    def cut(parts: int) -> np.ndarray:     # floor(i K / parts): the twelfths are edges of every 12 j-th cut
        return grid[np.arange(parts + 1, dtype=np.int64) * K // parts]

    coarse = cut(_FUSED_COARSER[0])
    if np.diff(coarse).max() > _FUSED_ROWS:
        fits = (cut(_FUSED_BLOCKS * j) for j in range(1, K // _FUSED_BLOCKS + 1))
        # a grid of sub-blocks longer than that (few systems, no fused pass) keeps its twelfths
        coarse = next((c for c in fits if np.diff(c).max() <= _FUSED_ROWS), cut(_FUSED_BLOCKS))
    if np.diff(coarse).min() >= shortest:
        return coarse
    for parts in _FUSED_COARSER[1:]:
        coarse = cut(parts)
        if np.diff(coarse).min() >= shortest:
            return coarse
    return None


def _fused_blocks(spec: _Spec, offs: np.ndarray, grid: np.ndarray) -> list | None:
    """Per-rank (starts, lengths) of the fused pass's blocks, or None where it does not apply.

    The blocks are runs of the grid's sub-blocks cut at :func:`_fused_grid`'s edges (and at rank edges),
    so for the worker counts dividing the number of blocks (1, 2, 3 and 6 where the line takes sixths or
    finer) they are the same blocks and the answers stay bitwise identical.
    """
    P = len(offs) - 1
    coarse = _fused_grid(grid)
    if (spec.reduced != "auto" or spec.R != 1 or spec.V < 8 or spec.engine == "array"
            or coarse is None or any(offs[r + 1] <= offs[r] for r in range(P))):
        return None
    out = []
    for r in range(P):
        lo, hi = int(offs[r]), int(offs[r + 1])
        edges = np.array([lo, *[int(g) for g in coarse if lo < g < hi], hi], dtype=np.int64) - lo
        lens = np.diff(edges)
        if (lens < 2 * _FUSED_HALOS[0] + 2).any():
            return None
        out.append((edges[:-1], lens))
    return out


#: The fused pass's halo per matrix (the probe's verdict: rows, or None for "no fused pass"), so repeated
#: solves with one matrix (a compact scheme's time steps, a benchmark's repeats) skip the probe and its
#: broadcast.  Keyed by the coefficients' dask keys, which name immutable data; host inputs are not cached.
_HALO_CACHE: collections.OrderedDict = collections.OrderedDict()
_HALO_CACHE_SIZE = 64


def _matrix_key(spec: _Spec, offs: np.ndarray) -> tuple | None:
    """What the halo probe's verdict depends on: the coefficients' identity and the rank layout."""
    if spec.compact:  # the compact scheme's matrix depends on n and the boundaries only
        return ("compact", spec.n, spec.V, tuple(int(o) for o in offs), spec.periodic)
    if spec.source == "host":
        return None
    if spec.source == "rows":
        coef = tuple(tuple(getattr(f, "key", None) for f in a.parts) for a in (spec.dl, spec.d, spec.du))
        if any(k is None for ks in coef for k in ks):
            return None
    else:
        coef = (spec.dl.name, spec.d.name, spec.du.name)
    return (spec.source, coef, tuple(int(o) for o in offs), spec.periodic)


def _remember_halo(key: tuple, halo: int | None) -> None:
    _HALO_CACHE[key] = halo
    _HALO_CACHE.move_to_end(key)
    while len(_HALO_CACHE) > _HALO_CACHE_SIZE:
        _HALO_CACHE.popitem(last=False)


def _pad_host(dl: np.ndarray, du: np.ndarray, n: int, periodic: bool) -> tuple[np.ndarray, np.ndarray]:
    if periodic:
        return dl, du
    z = np.zeros(dl.shape[:-1] + (1,))
    return np.concatenate([z, dl], axis=-1), np.concatenate([du, z], axis=-1)


def _line_major_host(a: np.ndarray, batched: bool, rhs: bool = False, b_ndim: int = 1) -> np.ndarray:
    if not batched:
        return a
    if rhs and b_ndim == 3:
        return a.transpose(1, 2, 0)
    return a.T


def _place(spec: _Spec, client: Any) -> tuple[list, np.ndarray, list[str], np.ndarray | None]:
    """Per-rank inputs, the rank offsets along the line, the workers, and the batch offsets when each
    worker holds whole systems (``None``: the line is split)."""
    if spec.source == "rows":
        parts = ([spec.b.parts] if spec.compact else [spec.dl.parts, spec.d.parts, spec.du.parts, spec.b.parts])
        return [tuple(p[r] for p in parts) for r in range(len(spec.b.parts))], np.asarray(spec.b.offsets), \
            list(spec.b.workers), None
    if spec.source == "host":
        return _place_host(spec, client)
    return _place_dask(spec, client)


def _inputs(spec: _Spec) -> list[tuple[Any, int]]:
    """The array inputs with each one's shift: its column ``c`` along the line holds row ``c - shift``
    (gtsv's sub-diagonal, ``dl[k] = A[k+1, k]``, is shifted by -1)."""
    if spec.compact:
        return [(spec.b, 0)]
    return [(spec.dl, 0 if spec.periodic else -1), (spec.d, 0), (spec.du, 0), (spec.b, 0)]


def _batch_split(spec: _Spec, P: int) -> bool:
    """Whole systems per worker: no exchange at all, and each system a contiguous row in gtsv layout."""
    return spec.batched and P > 1 and spec.V >= 8 * P


def _cols(a: Any, ax: int, c0: int, c1: int) -> Any:
    return a[tuple(slice(c0, c1) if i == ax else slice(None) for i in range(a.ndim))]


def _place_host(spec: _Spec, client: Any) -> tuple:
    addrs = _addresses(client)
    P = len(addrs)
    lax, n = spec.nax, spec.n
    inputs = _inputs(spec)
    if _batch_split(spec, P):
        # cut along the batch: each worker solves whole systems, as one worker does (the same bits); in gtsv
        # layout a worker's block is contiguous rows, scattered without a copy, line-major its columns are copied
        boffs = block_offsets(spec.V, P)
        futs = _scatter_all(client, [np.ascontiguousarray(_cols(a, 1 - lax, boffs[r], boffs[r + 1]))
                                     for r in range(P) for a, _ in inputs], [w for w in addrs for _ in inputs])
        out = [tuple([(-sh, futs[r * len(inputs) + k])] for k, (_, sh) in enumerate(inputs)) for r in range(P)]
        return out, np.array([0, n], np.int64), addrs, boffs
    offs = _rank_offsets(n, P, spec.V)
    pieces, starts = [], []
    for r in range(P):
        lo, hi = int(offs[r]), int(offs[r + 1])
        for a, sh in inputs:
            c0, c1 = max(lo + sh, 0), min(hi + sh, a.shape[lax])
            pieces.append(_cols(a, lax, c0, max(c0, c1)))   # a view: a column block is read row by row
            starts.append(c0 - sh - lo)
    futs = _scatter_all(client, pieces, [w for w in addrs for _ in inputs])
    out = [tuple([(starts[r * len(inputs) + k], futs[r * len(inputs) + k])] for k in range(len(inputs)))
           for r in range(P)]
    return out, offs, addrs, None


def _nonempty(chunks: tuple) -> tuple:
    """A dask axis's chunk sizes without the empty ones (unless all are)."""
    return tuple(c for c in chunks if c) or chunks


def _holders(client: Any, keys: list) -> list[set]:
    """The workers holding each key (empty sets for keys not in memory: a lazy graph)."""
    try:  # by key: Client.who_has takes futures only (plain keys come back as an empty answer)
        got = client.sync(client.scheduler.who_has, keys=list(keys))
    except Exception:  # pragma: no cover - an old scheduler without who_has: no locality
        return [set() for _ in keys]
    return [set(got.get(k, ())) for k in keys]


def _rank_workers(client: Any, want: list[list], addrs: list[str]) -> list[str]:
    """A worker per rank, preferring the one that already holds the rank's chunks (so the blocks do not
    move); ``want[r]``: the keys rank ``r`` reads with their sizes.  The chunks in memory on other workers
    only, read by this rank alone, move to its worker now and stay there, so the next call finds them in
    place."""
    keys = list({k for w in want for k, _ in w})
    held = dict(zip(keys, _holders(client, keys), strict=True))
    free, out = list(addrs), []
    for w in want:
        score = {a: sum(sz for k, sz in w if a in held[k]) for a in free}
        best = max(free, key=lambda a: (score[a], -free.index(a)))
        out.append(best)
        free.remove(best)
    takers = collections.Counter(k for w in want for k in {k for k, _ in w})
    moved = {a: [k for k, _ in w if held[k] and a not in held[k] and takers[k] == 1]
             for a, w in zip(out, want, strict=True)}
    move_keys(client, {a: ks for a, ks in moved.items() if ks})
    return out


def _batch_pieces(a: Any, sh: int, boffs: np.ndarray, bax: int, lax: int) -> list[list[tuple]]:
    """Per rank of a batch split (systems ``boffs[r]:boffs[r + 1]``), its pieces of the input ``a`` (dask, its
    line shifted by ``sh``), chunk row by chunk row: ``(line offset, source, rows, mine, size)``.  The rank
    taking most of a chunk's systems reads it in place (``rows``: the systems it reads, None for all); the
    others get theirs cut beside it (``mine`` False: computed where the chunk is, only those rows travel); a
    host chunk (``dask.array.from_array``) is cut here.  ``size``: the elements read, for placement."""
    import dask

    P = len(boffs) - 1
    grid = np.moveaxis(chunk_sources(a), (bax, lax), (0, 1)).reshape(len(a.chunks[bax]), -1)
    rows = np.concatenate([[0], np.cumsum(a.chunks[bax])]).astype(np.int64)
    edges = np.concatenate([[0], np.cumsum(a.chunks[lax])]).astype(np.int64)
    out: list[list[tuple]] = [[] for _ in range(P)]
    for c in range(grid.shape[0]):
        r0, r1 = int(rows[c]), int(rows[c + 1])
        share = [(max(int(boffs[r]), r0) - r0, min(int(boffs[r + 1]), r1) - r0) for r in range(P)]
        owner = max(range(P), key=lambda r: (share[r][1] - share[r][0], -r))
        for r, (v0, v1) in enumerate(share):
            if v1 <= v0:
                continue
            whole = (v0, v1) == (0, r1 - r0)
            for j in range(grid.shape[1]):
                src, cut, mine = grid[c, j], None if whole else (v0, v1), True
                if (data := _literal(src)) is not None:
                    src, cut = (data if whole else _cols(data, bax, v0, v1)), None
                elif not whole and r != owner:
                    src, cut, mine = dask.delayed(_cols, pure=True)(src, bax, v0, v1), None, False
                out[r].append((int(edges[j]) - sh, src, cut, mine, (v1 - v0) * int(edges[j + 1] - edges[j])))
    return out


def _place_dask(spec: _Spec, client: Any) -> tuple:
    import dask

    addrs = _addresses(client)
    lax, n = spec.nax, spec.n
    arrays = [(a.astype(np.float64), sh) for a, sh in _inputs(spec)]
    bax = 1 - lax if spec.batched else None
    # empty chunks hold nothing to solve (and would read as a row of their own below)
    bch = _nonempty(spec.b.chunks[bax]) if bax is not None else (spec.V,)
    nb_batch = len(bch)
    # small inputs spread over every worker (the rows moved cost about a group's round trip); large ones
    # never leave a rank without a chunk of its own
    small = sum(a.nbytes for a, _ in arrays) / len(addrs) < _SPREAD_BYTES
    if bax is not None and nb_batch > 1 and (nb_batch >= len(addrs) or not small):
        # chunked along the batch (and maybe along the line too): each worker takes whole rows of chunks, so
        # whole systems, and nothing moves between the ranks; a chunk held on another worker moves to its
        # rank's worker once and stays there, so the next call finds it in place
        cuts = block_offsets(nb_batch, min(len(addrs), nb_batch))
        P = len(cuts) - 1
        boffs = np.concatenate([[0], np.cumsum(bch)]).astype(np.int64)[cuts]
        # every input keeps its own chunks of systems (dask's chunks="auto" cuts dl's n - 1 columns into other
        # rows than d's n): each rank cuts its inputs to the same systems itself (views, _common_rows), where
        # rechunking them alike copied dl and du, and moved rows between the workers, on every call
        arrays = [(a.rechunk({i: _nonempty(a.chunks[i]) if i in (bax, lax) else -1 for i in range(a.ndim)}), sh)
                  for a, sh in arrays]
        per_input = [_batch_pieces(a, sh, boffs, bax, lax) for a, sh in arrays]
        plans = [[pieces[r] for pieces in per_input] for r in range(P)]   # per rank and input
        want = [[(src.key, size) for pieces in plan for _, src, _, mine, size in pieces
                 if mine and hasattr(src, "key")] for plan in plans]
        ws = _rank_workers(client, want, addrs)
        where = [(r, k, i) for r in range(P) for k in range(len(arrays)) for i in range(len(plans[r][k]))]
        futs = dict(zip(where, compute_all(client, [(plans[r][k][i][1], [ws[r]] if plans[r][k][i][3] else None)
                                                    for r, k, i in where]), strict=True))
        # an input's pieces: its chunks row by row, each row's first piece starting the line (_batch_rows); a
        # chunk the rank reads in part names the rows of systems it reads
        out = [tuple([(p[0], futs[r, k, i]) + (p[2] or ()) for i, p in enumerate(plans[r][k])]
                     for k in range(len(arrays))) for r in range(P)]
        return out, np.array([0, n], np.int64), ws, boffs
    line_b = arrays[-1][0]
    P, nb_line = len(addrs), len(_nonempty(line_b.chunks[lax]))
    if nb_line < P and not small:
        # a rank per chunk: a rank beyond them would borrow all its rows from the others on every call
        # (moving a row costs ~10 times solving it)
        P = nb_line
    offs = _line_offsets(n, P, spec.V, np.concatenate([[0], np.cumsum(line_b.chunks[lax])]))
    plans = []   # per input: per rank: [(local start row, delayed piece, key, width)]
    for a, sh in arrays:
        if bax is not None and len(a.chunks[bax]) > 1:   # chunked both ways: whole batch per line chunk (a copy)
            a = a.rechunk({bax: -1})
        a = a.rechunk({i: -1 for i in range(a.ndim) if i != lax})
        bounds = np.concatenate([[0], np.cumsum(a.chunks[lax])]).astype(np.int64)
        blocks = np.moveaxis(chunk_sources(a), lax, 0).reshape(-1)
        per_rank = []
        for r in range(P):
            lo, hi = int(offs[r]), int(offs[r + 1])
            c_lo, c_hi = max(lo + sh, 0), min(hi + sh, int(a.shape[lax]))
            pieces = []
            for c in range(len(blocks)):
                b0, b1 = int(bounds[c]), int(bounds[c + 1])
                o0, o1 = max(b0, c_lo), min(b1, c_hi)
                if o1 <= o0:
                    continue
                if (o0, o1) == (b0, b1) or (o1 - o0) * 2 >= b1 - b0:
                    # the whole chunk, as it is (no copy; rows beyond the rank's are never read)
                    pieces.append((b0 - sh - lo, blocks[c], blocks[c].key, o1 - o0))
                else:
                    # a few columns of a neighbour's chunk: cut where the chunk lies (placed by the scheduler
                    # beside its input), so only they travel to the rank
                    piece = dask.delayed(_cols, pure=True)(blocks[c], lax, o0 - b0, o1 - b0)
                    pieces.append((o0 - sh - lo, piece, None, o1 - o0, (blocks[c].key, o0 - b0, o1 - b0)))
            if not pieces:
                # no column of this input in the rank's rows (a rank without rows on a short line, gtsv's
                # sub-diagonal of a one-row share or of n = 1): an empty block, as the host path sends
                shape = tuple(0 if i == lax else int(s) for i, s in enumerate(a.shape))
                pieces.append((c_lo - sh - lo, np.empty(shape), None, 0))
            per_rank.append(pieces)
        whole = {p[2]: (r, i) for r in range(P) for i, p in enumerate(per_rank[r]) if p[2] is not None}
        for r in range(P):
            for i, p in enumerate(per_rank[r]):
                if len(p) == 5 and p[4][0] in whole and whole[p[4][0]][0] != r:   # a cut (see above)
                    per_rank[r][i] = (p[0], Borrow(*whole[p[4][0]], *p[4][1:]), None, p[3])
        plans.append(per_rank)
    want = [[(p[2], p[3]) for k in range(len(arrays)) for p in plans[k][r] if p[2] is not None] for r in range(P)]
    ws = _rank_workers(client, want, addrs)
    # a whole chunk runs (if it is not in memory) only on its rank's worker, a cut beside its chunk; a cut
    # of a chunk that another rank takes whole is lent by that rank inside the group (no task to wait for), an
    # empty block goes as it is
    where = [(k, r, i) for r in range(P) for k in range(len(arrays)) for i in range(len(plans[k][r]))
             if not isinstance(plans[k][r][i][1], Borrow | np.ndarray)]
    futs = dict(zip(where, compute_all(client, [(plans[k][r][i][1], None if plans[k][r][i][2] is None else [ws[r]])
                                                for k, r, i in where]), strict=True))
    out = [tuple([(p[0], futs[k, r, i] if (k, r, i) in futs else p[1]) for i, p in enumerate(plans[k][r])]
                 for k in range(len(arrays))) for r in range(P)]
    return out, offs, ws, None


def _run(spec: _Spec, client: Any, mode: str) -> Any:
    import dask
    import dask.array as da

    if spec.batched and spec.V == 0:
        return _no_systems(spec, client)
    t0 = time.perf_counter()
    parts, offs, addrs, boffs = _place(spec, client)
    P = len(addrs)
    grid = block_grid(spec.n, spec.V)
    split = "line" if boffs is None else "batch"
    # with whole systems per worker, every rank runs the line as one rank would: the same blocks (the same
    # answers, bit for bit) and no exchange
    lines = offs if split == "line" else np.array([0] * P + [spec.n], np.int64)
    spans = [(int(offs[r]), int(offs[r + 1])) if split == "line" else (0, spec.n) for r in range(P)]
    blocks = [_sub_blocks(lo, hi, grid) for lo, hi in spans]
    if spec.reduced == "truncated" and any((ln < 2).any() for _, ln in blocks):
        raise ValueError("reduced='truncated' needs every sub-block to have >= 2 rows; use 'exact' or 'auto'")
    nrows = [int(np.minimum(ln, 2).sum()) for _, ln in blocks]
    nonempty = [r for r in range(P) if spans[r][1] > spans[r][0]]
    if spec.compact and any(spans[r][1] - spans[r][0] < 2 for r in nonempty):
        raise ValueError("compact_derivative needs every non-empty block to hold >= 2 rows")
    cfg = {"n": spec.n, "V": spec.V, "R": spec.R, "periodic": spec.periodic, "reduced": spec.reduced,
           "engine": spec.engine, "form": "rows" if spec.source == "rows" else "array", "nax": spec.nax,
           "split": split, "b_ndim": spec.b_ndim, "batched": spec.batched, "nrows": nrows, "nonempty": nonempty,
           "h": spec.h, "mode": mode}
    if split == "line":
        fused = _fused_blocks(spec, offs, grid)
    else:
        one = _fused_blocks(spec, np.array([0, spec.n], np.int64), grid)
        fused = None if one is None else one * P
    cfg["fused_min_rows"] = 0 if fused is None else int(min(ln.min() for _, ln in fused))
    matrix = _matrix_key(spec, lines if boffs is None else np.concatenate([offs, boffs])) \
        if fused is not None else None
    cfg["halo"] = _HALO_CACHE.get(matrix, _PROBE) if matrix is not None else _PROBE
    out_edges = _out_edges(spec, offs) if split == "line" else None
    cfg["out_edges"] = None if out_edges is None else [int(e) for e in out_edges]
    lends: list[list] = [[] for _ in range(P)]   # per rank: (to rank, input, piece, c0, c1), in the order taken
    for r in range(P):
        for k, pieces in enumerate(parts[r] if spec.source != "rows" else ()):
            for q in pieces:
                if isinstance(p := q[1], Borrow):
                    lends[p.rank].append((r, k, p.index, p.c0, p.c1))
    cfg["lends"] = lends if any(lends) else None
    rank_args = [(parts[r], spans[r][0], spans[r][1], blocks[r][0], blocks[r][1],
                  None if fused is None else fused[r]) for r in range(P)]
    cat = spec.nax if split == "line" else 1 - spec.nax    # the axis along which the ranks' blocks meet
    index = None
    if spec.source != "rows":
        # a rank's block is a chunk of the answer: the array is made of the ranks' futures (nothing left
        # to run when the caller persists or computes it)
        index = [None] * P
        for j, r in enumerate(nonempty):
            index[r] = tuple(j if a == cat else 0 for a in range(spec.b.ndim))
    futs = comms.run_spmd(_tridiag_rank, rank_args, cfg, client=client, workers=addrs, name=f"tridiag-{mode}",
                          publish_info=True, chunk_index=index)
    comms.wait_group(futs)
    xf, infos = comms.split_results(futs)
    seconds = time.perf_counter() - t0
    if matrix is not None and "halo_probed" in infos[0]:
        _remember_halo(matrix, infos[0]["halo_probed"])
    R, V = spec.R, spec.V
    if spec.source == "rows":
        X = da.concatenate([da.from_delayed(dask.delayed(xf[r]), shape=(int(offs[r + 1] - offs[r]), R, V),
                                            dtype=np.float64) for r in nonempty], axis=0)
        X = _user_layout(X, spec)
    else:
        ext = spans if out_edges is None else [(int(out_edges[r]), int(out_edges[r + 1])) for r in range(P)]
        shapes = [_block_shape(spec, *ext[r], None if boffs is None else int(boffs[r + 1] - boffs[r]))
                  for r in nonempty]
        chunks = [tuple(sh[a] for sh in shapes) if a == cat else (shapes[0][a],) for a in range(spec.b.ndim)]
        X = array_of([xf[r] for r in nonempty], chunks, np.float64)
    ndof = spec.n * V * R
    X.stats = {
        "backend": infos[0]["backend"],
        "seconds": seconds,
        "kernel_seconds": max(i["seconds"] for i in infos),
        "bandwidth_gbps": 5 * ndof * 8 / seconds / 1e9,
        "kernel_bandwidth_gbps": 5 * ndof * 8 / max(max(i["seconds"] for i in infos), 1e-12) / 1e9,
        "bytes_moved": int(sum(i["bytes_sent"] for i in infos)),
        "workers": P,
        "blocks": len(grid) - 1,
        "reduced_rows": int(sum(nrows)),
        "reduced": infos[0]["reduced"],
        "truncation_coupling": infos[0]["tau"],
        "engine": infos[0]["engine"],
        "path": infos[0]["path"],
        "gtsv_in_place": None if infos[0]["gtsv_in_place"] is None else all(i["gtsv_in_place"] for i in infos),
        "halo_rows": infos[0].get("halo"),
        "halo_from": None if fused is None else ("probe" if cfg["halo"] == _PROBE else "cache"),
        "phase_seconds": {k: max(i["phases"][k] for i in infos) for k in infos[0]["phases"]},
        "rank_phase_seconds": [i["phases"] for i in infos],
        "rank_spans": [i["span"] for i in infos],
        "rows_per_worker": [hi - lo for lo, hi in spans],
        "split": split,
        "systems_per_worker": None if boffs is None else [int(v) for v in np.diff(boffs)],
    }
    if spec.reduced == "truncated" and infos[0]["tau"] > _TRUNC_WARN:
        # asked for by name, the truncation answers whatever the coupling: say when it costs digits
        warnings.warn(f"reduced='truncated' dropped couplings up to {infos[0]['tau']:.2g} "
                      "(stats['truncation_coupling']): the answer may be off by that times max|x|; "
                      "reduced='auto' or 'exact' solves the coupling exactly", RuntimeWarning, stacklevel=4)
    return X


def _no_systems(spec: _Spec, client: Any) -> Any:
    """The answer to a batch of zero systems: an empty array shaped like ``b`` (numpy's and scipy's
    convention for empty batches); nothing goes to the workers."""
    import dask.array as da

    X = da.zeros(tuple(int(s) for s in spec.b.shape), dtype=np.float64)
    X.stats = {"backend": backend_of(client), "seconds": 0.0, "kernel_seconds": 0.0, "bandwidth_gbps": 0.0,
               "kernel_bandwidth_gbps": 0.0, "bytes_moved": 0, "workers": 0, "path": None, "split": None,
               "systems_per_worker": None}
    return X


def _out_edges(spec: _Spec, offs: np.ndarray) -> np.ndarray | None:
    """Where the answer's blocks meet along the line for a dask ``b`` chunked along it: at ``b``'s chunk edge
    nearest each rank edge, so ``x`` comes back chunked as the caller's input (the ranks pass each other the
    few rows between the two edges); None where they are the ranks' own edges already, or cannot be."""
    if spec.source != "dask" or len(offs) < 3 or np.any(np.diff(offs) <= 0):
        return None
    bounds = np.concatenate([[0], np.cumsum(spec.b.chunks[spec.nax])]).astype(np.int64)
    if len(bounds) < 3:
        return None
    out = offs.copy()
    for r in range(1, len(offs) - 1):
        u = int(bounds[np.argmin(np.abs(bounds - offs[r]))])
        if offs[r - 1] < u < offs[r + 1]:   # the rows that move belong to the two ranks beside the edge
            out[r] = u
    return None if np.array_equal(out, offs) or np.any(np.diff(out) <= 0) else out


def _block_shape(spec: _Spec, lo: int, hi: int, vr: int | None) -> tuple:
    """A rank's answer block in the caller's layout: rows ``lo:hi`` of the line, ``vr`` systems (None: all)."""
    shape = list(spec.b.shape)
    shape[spec.nax] = hi - lo
    if vr is not None:
        shape[1 - spec.nax] = vr
    return tuple(int(s) for s in shape)


def _user_layout(X: Any, spec: _Spec) -> Any:
    """(n, R, V) line-major blocks -> the caller's layout (lazy views)."""
    if spec.source == "rows":
        if spec.compact:
            return X[:, 0, :] if spec.batched else X[:, 0, 0]
        if spec.b_ndim == 3 or (not spec.batched and spec.b_ndim == 2):
            return X if spec.batched else X[:, :, 0]
        return X[:, 0, :] if spec.batched else X[:, 0, 0]
    raise AssertionError("array inputs come back from the ranks in the caller's layout")
