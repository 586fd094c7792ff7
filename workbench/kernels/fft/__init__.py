"""Distributed N-D FFT with slab and pencil decompositions (AccFFT).

Reproduces Gholami et al., "AccFFT: A library for distributed-memory FFT on
CPU and GPU architectures": the array is split over a p0 (slab) or p0 x p1
(pencil) grid of workers; each worker runs batched local FFTs along the axes
it holds whole, then an all-to-all transpose inside one grid sub-communicator
makes the next axis whole, and so on.  The transpose can be pipelined
(``overlap``, the default on GPU workers): a rank FFTs its block in chunks
along the axis about to be exchanged and a sender thread ships each finished
chunk while the next one is transformed.  Send
buffers are recycled once a send returns (so a transpose touches a few chunks'
worth of fresh pages, not its whole volume), and on one host the comms layer
lets the peer copy large pieces straight out of the sender's memory.

The whole transform is one SPMD group over :mod:`workbench.comms` (no
scheduler round trip per transpose).  The output is left in the layout the
last transpose produces (AccFFT's "transposed" output) -- still an ordinary
dask array in natural index order, just chunked along different axes -- so a
forward/inverse pair does no extra transposes.

Local FFTs run through FFTW (pyFFTW, FFTW_MEASURE plans whose wisdom is kept
per worker process, for calls of at least ``_MEASURE_MIN`` elements; ESTIMATE
below) when available, else ``scipy.fft``; on GPU workers through
``cupyx.scipy.fft`` (cuFFT with cupy's plan cache).

Examples
--------
>>> import numpy as np, workbench as wb
>>> with wb.cluster(n_workers=2, quiet=True) as client:        # doctest: +SKIP
...     x = np.random.default_rng(0).random((64, 64, 64))
...     F = wb.fftn(x, client=client)
...     np.allclose(np.asarray(F), np.fft.fftn(x))
True
"""

from __future__ import annotations

import math
import operator
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ... import comms
from ...backend import namespace
from ...cluster import backend_of, default_client, worker_addresses
from ...partition import (
    BlockGrid,
    RowBlocks,
    _scatter_all,
    array_of,
    as_array,
    block_offsets,
    check_int,
    known_chunks,
    move_keys,
    persist,
    resilient,
)
from .plan import FFTPlan, _make_plan, _rank_box, _rank_coords
from .ranks import _fft_rank

__all__ = ["fftn", "ifftn", "rfftn", "irfftn", "validate_fft", "distributed_random", "FFTPlan"]

_NORMS = (None, "backward", "ortho", "forward")
_DECOMPOSITIONS = ("auto", "slab", "pencil")
#: Host inputs up to this size travel inside the task instead of a separate scatter.
_EMBED_BYTES = 1 << 20


@resilient
def fftn(x: Any, s: Sequence[int] | None = None, axes: Sequence[int] | None = None, norm: str | None = None, *,
         decomposition: str = "auto", grid: tuple[int, ...] | None = None, overlap: bool | None = None,
         workers: Sequence[str] | None = None, client: Any = None) -> Any:
    """N-D discrete Fourier transform of a distributed array (``numpy.fft.fftn`` semantics).

    Parameters
    ----------
    x : array_like, RowBlocks or dask.array.Array
        Host array (scattered to the workers on every call), its distributed
        form ``wb.distribute(x)`` (dense row blocks: slabs along axis 0,
        placed once and used in place by every call), or a dask array on the
        cluster (its chunks are used in place when they already form a
        slab/pencil layout, else redistributed worker to worker).
    s : sequence of int, optional
        Output length along each transformed axis (crop or zero-pad), as numpy.
    axes : sequence of int, optional
        Axes to transform (default: all, or the last ``len(s)``).
    norm : {None, "backward", "ortho", "forward"}
        Normalisation, as numpy.
    decomposition : {"auto", "slab", "pencil"}
        Slab: a 1-D grid of all workers.  Pencil: a p0 x p1 grid (``grid`` or
        the most square factorisation), transposes inside row/column
        sub-communicators.  Auto: slab unless the slab leaves workers idle.
        Pencil needs three or more dimensions.  An array whose split axes are
        shorter than the grid runs with some workers holding empty blocks.
    grid : tuple of int, optional
        Explicit process grid (its product must equal the worker count).
    overlap : bool, optional
        Pipeline the transposes (ship chunk k while chunk k+1 is transformed).
        Default (None): on GPU workers, where copy engines move the chunks
        while the SMs transform; not on CPU workers, where the copies would
        take the same cores as the FFTs (``stats["overlap"]`` says which ran).
    workers : list of str, optional
        Worker addresses to run on, in rank order (default: every worker).
    client : distributed.Client, optional
        Default: the cluster that holds the distributed inputs, else the current client.

    Returns
    -------
    dask.array.Array
        The transform, left distributed on the workers in the layout of the
        last transpose; ``np.asarray`` brings it home.  ``.stats`` holds
        ``backend`` (the path that ran: "cpu", "gpu" or "gpu-sim"),
        ``seconds``, ``gflops`` (5 N log2 N convention), ``bytes_moved``,
        ``fft_seconds``/``transpose_seconds`` (max over ranks; transpose is
        the rank's time outside local FFTs), its parts ``pack_seconds``
        (slicing FFT'd chunks into send buffers and the rank's own block),
        ``place_seconds`` (copying received pieces into place) and
        ``wait_seconds`` (blocked on peers, on the send queue or, with
        ``overlap=False``, in sends),
        ``bytes_pulled`` (the part of ``bytes_moved`` that same-host peers
        copied straight out of the sender's memory), ``n_transposes``,
        ``decomposition``, ``grid``, ``per_rank``.

    Examples
    --------
    >>> F = fftn(np.ones((8, 8, 8)), client=client)           # doctest: +SKIP
    >>> complex(np.asarray(F)[0, 0, 0])                        # doctest: +SKIP
    (512+0j)
    """
    return _transform("fwd", x, s, axes, norm, decomposition, grid, overlap, workers, client)


@resilient
def ifftn(x: Any, s: Sequence[int] | None = None, axes: Sequence[int] | None = None, norm: str | None = None, *,
          decomposition: str = "auto", grid: tuple[int, ...] | None = None, overlap: bool | None = None,
          workers: Sequence[str] | None = None, client: Any = None) -> Any:
    """Inverse of :func:`fftn` (``numpy.fft.ifftn`` semantics); same parameters and result.

    Examples
    --------
    >>> x = np.random.default_rng(0).random((8, 6, 4))
    >>> F = fftn(x, client=client)                               # doctest: +SKIP
    >>> np.allclose(np.asarray(ifftn(F, client=client)), x)     # doctest: +SKIP
    True
    """
    return _transform("bwd", x, s, axes, norm, decomposition, grid, overlap, workers, client)


@resilient
def rfftn(x: Any, s: Sequence[int] | None = None, axes: Sequence[int] | None = None, norm: str | None = None, *,
          decomposition: str = "auto", grid: tuple[int, ...] | None = None, overlap: bool | None = None,
          workers: Sequence[str] | None = None, client: Any = None) -> Any:
    """Real-to-complex N-D FFT (``numpy.fft.rfftn`` semantics); see :func:`fftn`.

    The last transformed axis is halved to ``n // 2 + 1`` in the first local stage.

    Examples
    --------
    >>> x = np.random.default_rng(0).random((8, 6, 4))
    >>> R = rfftn(x, client=client)                              # doctest: +SKIP
    >>> R.shape, R.stats["backend"]                              # doctest: +SKIP
    ((8, 6, 3), 'cpu')
    """
    return _transform("r2c", x, s, axes, norm, decomposition, grid, overlap, workers, client)


@resilient
def irfftn(x: Any, s: Sequence[int] | None = None, axes: Sequence[int] | None = None, norm: str | None = None, *,
           decomposition: str = "auto", grid: tuple[int, ...] | None = None, overlap: bool | None = None,
           workers: Sequence[str] | None = None, client: Any = None) -> Any:
    """Complex-to-real inverse of :func:`rfftn` (``numpy.fft.irfftn`` semantics); see :func:`fftn`.

    The complex-to-real axis (the last of ``axes``) is transformed last, on
    the worker that holds it whole.

    Examples
    --------
    >>> x = np.random.default_rng(0).random((8, 6, 4))
    >>> R = rfftn(x, client=client)                                              # doctest: +SKIP
    >>> np.allclose(np.asarray(irfftn(R, s=x.shape, client=client)), x)         # doctest: +SKIP
    True
    """
    return _transform("c2r", x, s, axes, norm, decomposition, grid, overlap, workers, client)


def validate_fft(result: Any, x: Any, kind: str = "fwd", *, s: Any = None, axes: Any = None, norm: str | None = None,
                 rtol: float = 1e-10) -> float:
    """Relative L2 error of ``result`` against ``numpy.fft`` on host ``x`` (the oracle).

    ``kind`` is "fwd", "bwd", "r2c" or "c2r".  ``s`` without ``axes`` means
    the last ``len(s)`` axes, as in :func:`fftn`.  Raises ``AssertionError``
    when the shapes differ or the error exceeds ``rtol``; returns the error.

    Examples
    --------
    >>> x = np.arange(8.0).reshape(2, 4)
    >>> validate_fft(np.fft.fftn(x, s=(2, 6), axes=(0, 1)), x, "fwd", s=(2, 6)) < 1e-15
    True
    """
    x = np.asarray(x)
    if s is not None and axes is None:
        # numpy >= 2 deprecates s without axes; spell out the axes it has always meant
        axes = tuple(range(x.ndim - len(s), x.ndim))
    ref = {"fwd": np.fft.fftn, "bwd": np.fft.ifftn, "r2c": np.fft.rfftn, "c2r": np.fft.irfftn}[kind](
        x, s=s, axes=axes, norm=norm)
    got = np.asarray(result)
    if got.shape != ref.shape:
        raise AssertionError(f"shape {got.shape} != numpy's {ref.shape}")
    err = float(np.linalg.norm((got - ref).ravel()) / max(np.linalg.norm(ref.ravel()), np.finfo(float).tiny))
    if not err <= rtol:
        raise AssertionError(f"relative error {err:.3e} exceeds {rtol:.1e}")
    return err


@resilient
def distributed_random(shape: Sequence[int], client: Any = None, *, dtype: Any = np.complex128, seed: int = 0,
                       workers: Sequence[str] | None = None) -> Any:
    """A seeded random array generated on the workers, in slabs along axis 0 (one per worker), persisted.

    The benchmark's "already distributed" input; values depend on ``seed`` and the slab count.
    """
    import dask.array as da
    from distributed import wait

    client = default_client(client)
    P = len(workers) if workers is not None else len(worker_addresses(client))
    shape = tuple(int(n) for n in shape)
    chunks = (tuple(int(c) for c in np.diff(block_offsets(shape[0], P))), *shape[1:])
    rng = da.random.default_rng(seed)
    dt = np.dtype(dtype)
    real = np.float32 if dt in (np.float32, np.complex64) else np.float64
    x = rng.standard_normal(shape, chunks=chunks, dtype=real)
    if dt.kind == "c":
        x = x + 1j * rng.standard_normal(shape, chunks=chunks, dtype=real)
    x = x.astype(dt)
    x = client.persist(x, workers=list(workers)) if workers is not None else client.persist(x)
    wait(x)
    return x


# --------------------------------------------------------------------------
# Validation (client side, before any work is sent)
# --------------------------------------------------------------------------


def _validate(kind: str, x: Any, s: Any, axes: Any, norm: Any, decomposition: Any,
              grid: Any) -> tuple[Any, tuple[int, ...], tuple[int, ...] | None, np.dtype]:
    """Check arguments (numpy's rules plus the grid's form; its size against the workers comes later, with
    the client); return the cropped/padded input, axes, s, out dtype."""
    import dask.array as da

    if norm not in _NORMS:
        raise ValueError(f"norm must be one of {_NORMS}, got {norm!r}")
    if decomposition not in _DECOMPOSITIONS:
        raise ValueError(f"decomposition must be one of {_DECOMPOSITIONS}, got {decomposition!r}")
    if not isinstance(x, da.Array):
        if hasattr(x, "__cuda_array_interface__"):
            x = x  # cupy host input: scattered as is
        else:
            try:
                x = np.asarray(x)
            except ValueError as e:   # a ragged list: numpy's "inhomogeneous shape"
                raise ValueError(f"x must be an array of numbers: {e}") from None
    dt = np.dtype(x.dtype)
    if dt.kind not in "biufc":
        raise ValueError(f"x must have a numeric dtype, got {dt}")
    if kind == "r2c" and dt.kind == "c":
        raise ValueError(f"rfftn needs real input, got dtype {dt}")
    ndim = x.ndim
    if ndim == 0:
        raise ValueError("x must have at least one dimension")
    known_chunks("x", x)
    if s is not None:
        try:   # ints only, as numpy: int() made s=(8.5, 6) an 8-point transform and s="88" (8, 8)
            if isinstance(s, str):
                raise TypeError(s)
            s = tuple(operator.index(v) for v in s)
        except TypeError as e:
            raise TypeError(f"s must be a sequence of ints, got {s!r}") from e
    if axes is None:
        if s is not None and len(s) > ndim:   # numpy's default axes are the last len(s): there are too few
            raise ValueError(f"s has {len(s)} entries for an array with {ndim} dimensions")
        axes = tuple(range(ndim - len(s), ndim)) if s is not None else tuple(range(ndim))
    else:
        try:
            axes = tuple(operator.index(a) for a in axes)
        except TypeError as e:
            raise ValueError(f"axes must be a sequence of ints, got {axes!r}") from e
    if not axes:
        raise ValueError("axes must name at least one axis")
    if any(not -ndim <= a < ndim for a in axes):
        raise ValueError(f"axes {axes} out of range for an array with {ndim} dimensions")
    axes = tuple(a % ndim for a in axes)
    if len(set(axes)) != len(axes):
        raise ValueError(f"axes must not repeat, got {axes}")
    if s is not None:
        if len(s) != len(axes):
            raise ValueError(f"s has {len(s)} entries for {len(axes)} axes")
        if any(v < 1 for v in s):
            raise ValueError(f"s must be positive, got {s}")
    if grid is not None:
        if not isinstance(grid, tuple | list):
            raise TypeError(f"grid must be a tuple (p0,) or (p0, p1) of ints, got {type(grid).__name__}")
        grid = tuple(check_int("grid entries", g) for g in grid)
        if len(grid) not in (1, 2) or any(g < 1 for g in grid):
            raise ValueError(f"grid must be (p0,) or (p0, p1) with positive entries, got {grid}")
        if decomposition == "slab" and len(grid) != 1 and grid[1] != 1:
            raise ValueError(f"decomposition='slab' needs a 1-D grid, got {grid}")
    # numpy's crop/zero-pad of the input; the c2r axis takes n//2+1 input points
    if s is not None:
        want = list(x.shape)
        for a, n in zip(axes, s, strict=True):
            want[a] = n
        if kind == "c2r":
            want[axes[-1]] = s[-1] // 2 + 1
        x = _crop_pad(x, tuple(want))
    if any(x.shape[a] < 1 for a in axes):
        raise ValueError(f"invalid number of data points along axes {axes} of shape {x.shape}")
    if kind == "c2r":
        n_last = s[-1] if s is not None else 2 * (x.shape[axes[-1]] - 1)
        if n_last < 1:
            raise ValueError(f"invalid number of data points ({n_last}) for the complex-to-real axis")
    probe = np.zeros((2,) * ndim, dtype=dt)
    ref = {"fwd": np.fft.fftn, "bwd": np.fft.ifftn, "r2c": np.fft.rfftn, "c2r": np.fft.irfftn}[kind]
    out_dtype = ref(probe, axes=axes).dtype
    return x, axes, s, out_dtype


def _crop_pad(x: Any, want: tuple[int, ...]) -> Any:
    import dask.array as da

    crop = tuple(slice(0, min(n, w)) for n, w in zip(x.shape, want, strict=True))
    x = x[crop]
    pad = [(0, max(0, w - n)) for n, w in zip(x.shape, want, strict=True)]
    if any(p[1] for p in pad):
        x = da.pad(x, pad) if isinstance(x, da.Array) else namespace(x).pad(x, pad)
    return x


# --------------------------------------------------------------------------
# Client orchestration
# --------------------------------------------------------------------------


def _transform(kind: str, x: Any, s: Any, axes: Any, norm: Any, decomposition: str, grid: Any,
               overlap: bool | None, workers: Any, client: Any) -> Any:
    import dask.array as da

    if overlap is not None and not isinstance(overlap, bool | np.bool_):
        raise TypeError(f"overlap must be True, False or None (auto), got {overlap!r}")
    x = as_array("x", x)
    rows = x if isinstance(x, RowBlocks | BlockGrid) else None
    if rows is not None:
        x = _rows_as_dask(rows)   # what wb.distribute(ndarray) returns: slabs along axis 0, used in place
    x, axes, s, out_dtype = _validate(kind, x, s, axes, norm, decomposition, grid)
    client = default_client(client, x)
    if overlap is None:
        # Overlap needs a second engine to move the data: a GPU's copy engines do, while on CPU
        # workers the copy takes the cores the FFT runs on (512^3 on 2 workers: 2.9 s pipelined,
        # 1.8 s not).
        overlap = backend_of(client) != "cpu"
    addrs = worker_addresses(client)
    if workers is not None:
        unknown = [w for w in workers if w not in addrs]
        if unknown or not workers or len(set(workers)) != len(workers):
            raise ValueError(f"workers must be distinct addresses of this cluster's workers, got {workers!r}")
        addrs = list(workers)
    if grid is not None and math.prod(grid) != len(addrs):
        raise ValueError(f"grid {grid} needs {math.prod(grid)} workers, the cluster has {len(addrs)}")
    plan, native = _make_plan(kind, x, axes, s, norm, decomposition, grid, len(addrs), out_dtype, overlap)
    P = max(1, math.prod(plan.grid))
    t0 = time.perf_counter()
    rank_args, workers = _place_input(client, x, plan, native, addrs[:P] if P <= len(addrs) else addrs, rows)
    index, chunks = _output_grid(plan)
    futs = comms.run_spmd(_fft_rank, rank_args, plan, client=client, workers=workers, name=f"fft-{kind}",
                          publish_info=True, chunk_index=index)
    comms.wait_group(futs)
    blocks, infos = comms.split_results(futs)
    seconds = time.perf_counter() - t0
    # the ranks' blocks are the answer's chunks: persisting or computing it runs no task of its own
    out = array_of(blocks, chunks, plan.out_dtype)
    for i, a in zip(infos, workers, strict=True):
        i["worker"] = a
    out.stats = {
        "backend": infos[0]["backend"],
        "seconds": seconds,
        "gflops": plan.flops / seconds / 1e9,
        "bytes_moved": int(sum(i["bytes_sent"] for i in infos)),
        "fft_seconds": max(i["fft_s"] for i in infos),
        "transpose_seconds": max(i["transpose_s"] for i in infos),
        "redistribute_seconds": max(i["redistribute_s"] for i in infos),
        "pack_seconds": max(i["pack_s"] for i in infos),
        "place_seconds": max(i["place_s"] for i in infos),
        "wait_seconds": max(i["wait_s"] for i in infos),
        "bytes_pulled": int(sum(i["bytes_pulled"] for i in infos)),
        "rank_seconds": max(i["total_s"] for i in infos),
        "n_transposes": plan.n_transposes,
        "decomposition": plan.decomposition,
        "grid": plan.grid,
        "overlap": plan.overlap,
        "input_redistributed": not native and isinstance(x, da.Array),
        "per_rank": infos,
    }
    return out


def _rows_as_dask(x: Any) -> Any:
    """Dense row blocks (``wb.distribute`` of a host array) as a dask array over the same futures.

    Its chunks are the blocks, one slab along axis 0 per worker, which is the
    slab layout itself when the transform runs on those workers: the blocks
    are used where they are, nothing moves before the first transpose.
    """
    if isinstance(x, BlockGrid) or x.kind != "dense":
        raise TypeError(f"x: fftn needs a dense array, dense row blocks (wb.distribute of an ndarray) or a dask "
                        f"array, got {type(x).__name__} of kind {x.kind!r}")
    return x.to_dask_array()


def _place_input(client: Any, x: Any, plan: FFTPlan, native: bool, addrs: list[str],
                 rows: RowBlocks | None = None) -> tuple[list, list[str]]:
    """Per-rank input: ("block", future) when the chunks are the layout, else ("pieces", [(box, future)]).

    ``rows``: the row blocks ``x`` was made from; when they are the slab layout on these workers their futures
    go to the ranks as they are (no persist round trip per call)."""
    import dask.array as da
    from distributed import futures_of

    P = max(1, math.prod(plan.grid))
    shape0 = plan.stages[0].in_shape
    if not isinstance(x, da.Array):
        blocks = []
        for r in range(P):
            box = _rank_box(r, plan, 0, shape0)
            blk = x[tuple(slice(lo, hi) for lo, hi in box)]
            blocks.append(np.ascontiguousarray(blk) if namespace(x) is np else blk.copy())
        if x.nbytes <= _EMBED_BYTES:
            # small inputs ride inside the rank tasks: saves a scheduler round trip per rank
            return [("block", b) for b in blocks], list(addrs)
        # each worker copies its block out of this process (same host), all at once
        futs = _scatter_all(client, blocks, [addrs[r] for r in range(len(blocks))], device=False)
        return [("block", f) for f in futs], list(addrs)
    if native and rows is not None and len(rows.parts) == P and set(rows.workers) <= set(addrs) \
            and len(set(rows.workers)) == P and plan.grid == (P,):
        return [("block", f) for f in rows.parts], list(rows.workers)
    xp = persist(x, client)   # a from_array of a host array: its chunks copied out of the client by their workers
    fmap = {f.key: f for f in futures_of(xp)}
    keys = {idx: (xp.name, *idx) for idx in np.ndindex(*xp.numblocks)}
    who = client.who_has([fmap[k] for k in keys.values()])
    if native:
        # order ranks so each rank's block already lives on its worker
        workers: list[str | None] = [None] * P
        free = list(addrs)
        block_keys = []
        for r in range(P):
            idx = [0] * xp.ndim
            for (a, _), c in zip(plan.layouts[0], _rank_coords(r, plan.grid), strict=True):
                idx[a] = c
            block_keys.append(keys[tuple(idx)])
        for r, k in enumerate(block_keys):
            for w in who.get(k, ()):
                if w in free:
                    workers[r] = w
                    free.remove(w)
                    break
        for r in range(P):
            if workers[r] is None:
                workers[r] = free.pop(0)
        # a block held elsewhere moves to its rank's worker before the group (move_keys says why)
        move_keys(client, {w: [k] for w, k in zip(workers, block_keys, strict=True)
                           if who.get(k) and w not in who[k]})
        return [("block", fmap[k]) for k in block_keys], list(workers)
    # arbitrary chunking: each chunk goes to the rank on its worker; ranks redistribute in the group
    pieces: list[list] = [[] for _ in range(P)]
    away: dict[str, list] = {}
    starts = [np.concatenate([[0], np.cumsum(c)]) for c in xp.chunks]
    for n, (idx, k) in enumerate(keys.items()):
        holders = [addrs.index(w) for w in who.get(k, ()) if w in addrs]
        r = holders[0] if holders else n % P
        if not holders and who.get(k):
            away.setdefault(addrs[r], []).append(k)
        box = tuple((int(starts[a][i]), int(starts[a][i + 1])) for a, i in enumerate(idx))
        pieces[r].append((box, fmap[k]))
    move_keys(client, away)
    return [("pieces", p) for p in pieces], list(addrs)


def _output_grid(plan: FFTPlan) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """Each rank's chunk index in the answer, and the answer's chunks: rank r holds the block of its grid
    coordinates in the plan's last layout."""
    shape = plan.out_shape
    chunks = [(n,) for n in shape]
    for a, offs in plan.layouts[-1]:
        chunks[a] = tuple(int(hi - lo) for lo, hi in zip(offs[:-1], offs[1:], strict=True))
    index = []
    for r in range(max(1, math.prod(plan.grid))):
        idx = [0] * len(shape)
        for (a, _), c in zip(plan.layouts[-1], _rank_coords(r, plan.grid), strict=True):
            idx[a] = c
        index.append(tuple(idx))
    return index, chunks
