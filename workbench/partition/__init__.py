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

import functools
import inspect
import math
import os
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..cluster import chosen_workers, default_client, worker_addresses
from .args import as_array, check_bool, check_int, refuse_dask_collection
from .pattern import check_symmetric, edge_pattern, pattern_symmetric
from .pattern import pattern_hashes as pattern_hashes
from .pattern import splitmix64 as splitmix64
from .placement import (
    _LOSS_ERRORS,
    _literal_rows,
    _scatter_all,
    _scatter_to,
    array_of,
    chunk_sources,
    compute_all,
    held,
    known_chunks,
    make_again_if_lost,
    move_keys,
    persist,
    remember_call,
    unheld,
)

# (`x as x`: re-exports, the kernels and tests take them from here)
from .placement import _is_future as _is_future
from .placement import _literal as _literal
from .placement import _result_type as _result_type
from .placement import as_block as as_block

__all__ = ["RowBlocks", "BlockGrid", "distribute", "block_offsets", "owner_of", "grid_shape", "rows_of",
           "chunk_sources", "compute_all", "array_of", "move_keys", "persist", "as_row_blocks", "Lineage",
           "TaskLineage", "GraphLineage", "HostLineage", "WorkerLostWarning", "WorkerMemoryError", "repair",
           "spread", "check_one_per_worker", "resilient", "lost_parts", "await_workers", "check_entries",
           "check_symmetric", "check_int", "as_array", "check_bool", "pattern_symmetric", "edge_pattern"]


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
    from ..backend import namespace

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

    Examples
    --------
    >>> X = wb.distribute(np.arange(12.0).reshape(6, 2), client=client)       # doctest: +SKIP
    >>> X                                                                      # doctest: +SKIP
    RowBlocks(kind='dense', shape=(6, 2), n_parts=2, nnz=None, dtype=float64)
    >>> int(X.owner_of(4))                                                     # doctest: +SKIP
    1
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
    #: How each partition is rebuilt after its worker is lost (see :func:`repair`).
    lineage: Lineage | None = field(default=None, repr=False, compare=False)

    @property
    def n_parts(self) -> int:
        return len(self.parts)

    def _set_part(self, i: int, future: Any, worker: str) -> None:
        self.parts[i] = future
        self.workers[i] = worker

    def owner_of(self, index: Any) -> Any:
        """Rank that owns row/vertex ``index`` (scalar or array); an IndexError outside ``0..n-1``."""
        from ..backend import to_host

        idx = np.asarray(to_host(index))
        if idx.size and (idx.min() < 0 or idx.max() >= self.offsets[-1]):
            raise IndexError(f"index outside 0..{int(self.offsets[-1]) - 1}: {idx.min()}..{idx.max()}")
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
        blocks = _gather_whole(self, client, lambda: list(self.parts))
        if self.kind == "csr":
            import scipy.sparse as sp

            from ..backend import to_host
            return sp.vstack([to_host(b) for b in blocks], format="csr")
        from ..backend import to_host
        return np.concatenate([to_host(b) for b in blocks], axis=0)

    def __repr__(self) -> str:
        return (f"RowBlocks(kind={self.kind!r}, shape={self.shape}, n_parts={self.n_parts}, "
                f"nnz={self.nnz}, dtype={self.dtype})")


@dataclass
class BlockGrid:
    """2-D block grid held on the workers; block (i, j) on ``workers[i*C + j]``.

    Examples
    --------
    >>> A = wb.data.rmat(10, seed=1)                                          # doctest: +SKIP
    >>> H = wb.distribute(A, client=client, partition="2d", grid=(1, 2))      # doctest: +SKIP
    >>> H                                                                      # doctest: +SKIP
    BlockGrid(kind='csr', shape=(1024, 1024), grid=(1, 2), nnz=21140)
    """

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
    #: How each block (in rank order) is rebuilt after its worker is lost (see :func:`repair`).
    lineage: Lineage | None = field(default=None, repr=False, compare=False)

    def _set_part(self, i: int, future: Any, worker: str) -> None:
        C = self.grid[1]
        self.blocks[i // C][i % C] = future
        self.workers[i] = worker

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

        from ..backend import to_host

        client = default_client(client)
        got = _gather_whole(self, client, lambda: [f for row in self.blocks for f in row])
        C = self.grid[1]
        rows = [[to_host(b) for b in got[i * C:(i + 1) * C]] for i in range(self.grid[0])]
        if self.kind == "csr":
            return sp.bmat(rows, format="csr")
        return np.block(rows)

    def __repr__(self) -> str:
        return f"BlockGrid(kind={self.kind!r}, shape={self.shape}, grid={self.grid}, nnz={self.nnz})"


# --------------------------------------------------------------------------
# Lineage and recovery: a lost worker loses nothing (DESIGN rule 7)
# --------------------------------------------------------------------------

#: Reruns of a kernel call whose workers were lost (override with WORKBENCH_RETRIES).
RETRIES = int(os.environ.get("WORKBENCH_RETRIES", "2"))
#: Seconds a recovery waits for a nanny to replace a lost worker before it re-places the lost
#: partitions on the workers that remain (override with WORKBENCH_REPLACE_WAIT).
REPLACE_WAIT = float(os.environ.get("WORKBENCH_REPLACE_WAIT", "20"))


class WorkerLostWarning(RuntimeWarning):
    """A kernel call lost a worker and is being rerun on the workers that remain."""


class WorkerMemoryError(MemoryError):
    """Partitions would not fit in a worker's memory limit (raised before anything is sent)."""


class Lineage:
    """How a container rebuilds partitions lost with their worker.

    Subclasses implement :meth:`rebuild`; :func:`repair` decides which
    partitions are lost and where they go.
    """

    def rebuild(self, client: Any, indices: list[int], workers: list[str], old: list) -> list:
        """Futures of partitions ``indices``, each placed on the matching worker of ``workers``."""
        raise NotImplementedError


class TaskLineage(Lineage):
    """Partition i is ``fn(*args[i])``, a pure task (seeded generators, file readers).

    The rebuilt task may run on any worker (Dask recomputes it there if its
    worker is lost again), so ``fn`` and its arguments must be picklable.
    """

    def __init__(self, fn: Callable, args: Sequence[tuple]) -> None:
        self.fn, self.args = fn, list(args)

    def rebuild(self, client: Any, indices: list[int], workers: list[str], old: list) -> list:
        return [client.submit(self.fn, *self.args[i], workers=[w], allow_other_workers=True, pure=False)
                for i, w in zip(indices, workers, strict=True)]


class GraphLineage(Lineage):
    """Partition i is the dask (delayed) object ``blocks[i]``, recomputed from its graph."""

    def __init__(self, blocks: Sequence[Any]) -> None:
        self.blocks = list(blocks)

    def rebuild(self, client: Any, indices: list[int], workers: list[str], old: list) -> list:
        return [client.compute(self.blocks[i], workers=[w], allow_other_workers=True)
                for i, w in zip(indices, workers, strict=True)]


class HostLineage(Lineage):
    """Partition i is ``cut(prepare(source), i)`` of a host object the client still holds.

    Only a weak reference to ``source`` is kept: the container does not keep
    the client's copy alive.  With ``replicas >= 2`` each partition also has
    ``replicas - 1`` copies on other workers, each under a key of its own
    (Dask's active memory manager drops extra holders of one key within
    seconds, so ``client.replicate`` kept them for about two); a lost
    partition whose copy survived is copied from there, and :func:`repair`
    puts back the copies a lost worker took with it.
    """

    def __init__(self, source: Any, prepare: Callable[[Any], Any], cut: Callable[[Any, int], Any],
                 shape: tuple, replicas: int = 1) -> None:
        try:
            self.ref: Callable[[], Any] | None = weakref.ref(source)
        except TypeError:  # lists and other objects without weak references
            self.ref = None
        self.prepare, self.cut, self.shape, self.replicas = prepare, cut, tuple(shape), int(replicas)
        #: per partition, its copies as (future, worker)
        self.copies: dict[int, list[tuple[Any, str]]] = {}

    def __getstate__(self) -> dict:
        return {**self.__dict__, "ref": None, "copies": {}}  # a weak reference does not travel, nor do the copies

    def rebuild(self, client: Any, indices: list[int], workers: list[str], old: list) -> list:
        out: list = [None] * len(indices)
        from_host = []
        alive = set(worker_addresses(client)) if self.copies else set()
        from_copy, srcs = [], []
        for k, i in enumerate(indices):
            src = next(((f, w) for f, w in self.copies.get(i, ()) if f.status == "finished" and w in alive), None)
            if src is not None:   # a copy survived: the partition comes back from it
                from_copy.append(k)
                srcs.append(src)
            else:
                from_host.append(k)
        for k, f in zip(from_copy, _copies_of(client, srcs, [workers[k] for k in from_copy]), strict=True):
            out[k] = f
        if from_host:
            src = self.ref() if self.ref is not None else None
            if src is None or tuple(getattr(src, "shape", ())) != self.shape:
                from ..comms import WorkerLostError

                why = "is gone" if src is None else f"changed shape to {getattr(src, 'shape', None)}"
                lost = [indices[k] for k in from_host]
                if self.replicas > 1:   # every holder of these partitions was lost
                    hint = (f"every one of their {self.replicas} copies was lost too; keep the object while you "
                            f"use the container, or distribute with more replicas than workers you may lose")
                else:
                    hint = "keep the object while you use the container, or distribute with replicas=2"
                raise WorkerLostError(f"partition(s) {lost} were lost with their worker and the host object they "
                                      f"were distributed from {why}; {hint}")
            data = self.prepare(src)
            for k in from_host:
                out[k] = _scatter_to(client, self.cut(data, indices[k]), workers[k])
        return out

    def short_of_copies(self, workers: list[str], alive: set[str] | None = None) -> bool:
        """Whether a partition has fewer live copies than ``replicas - 1``."""
        return self.replicas > 1 and any(len(self._live(i, w, alive)) < self.replicas - 1
                                         for i, w in enumerate(workers))

    def _live(self, i: int, home: str, alive: set[str] | None) -> list[tuple[Any, str]]:
        return [(f, w) for f, w in self.copies.get(i, ()) if f.status == "finished" and w != home
                and (alive is None or w in alive)]

    def place_copies(self, client: Any, parts: list, workers: list[str]) -> None:
        """Give every partition ``replicas - 1`` live copies, each on a worker other than its own and
        its other copies' (the container's workers first, in order after its own)."""
        if self.replicas < 2:
            return
        alive = worker_addresses(client)
        pool = list(dict.fromkeys([w for w in workers if w in alive] + alive))
        srcs, targets, owners = [], [], []
        for i, home in enumerate(workers):
            live = self._live(i, home, set(alive))
            self.copies[i] = live
            taken = {home} | {w for _, w in live}
            start = pool.index(home) + 1 if home in pool else 0
            free = [w for w in pool[start:] + pool[:start] if w not in taken]
            for w in free[:self.replicas - 1 - len(live)]:
                srcs.append((parts[i], home))
                targets.append(w)
                owners.append(i)
        for i, f, w in zip(owners, _copies_of(client, srcs, targets), targets, strict=True):
            self.copies[i].append((f, w))


def _copies_of(client: Any, sources: list[tuple[Any, str]], targets: list[str]) -> list:
    """A copy of each ``(future, its worker)`` on the matching target worker, under a key of its own.  The
    copy task pulls the source there as its dependency; that second holder of the source's key is then
    dropped, so the source stays on its own worker alone (were both kept, the active memory manager would
    drop one of them, perhaps the source's own)."""
    from distributed import wait

    from .placement import move_keys

    if not sources:
        return []
    out = [client.submit(_same, f, workers=[w], allow_other_workers=False, pure=False)
           for (f, _), w in zip(sources, targets, strict=True)]
    wait(out, timeout=_COPY_TIMEOUT)
    homes: dict[str, list] = {}
    for f, home in sources:
        homes.setdefault(home, []).append(f.key)
    move_keys(client, homes)
    return out


#: Times :func:`distribute` places the data again after a worker was lost while it did.
_DISTRIBUTE_RETRIES = 2

#: Seconds a partition's copy may take to reach its worker.
_COPY_TIMEOUT = 300.0


def _same(x: Any) -> Any:
    return x


def _host_lineage(container: RowBlocks | BlockGrid, obj: Any, replicas: int) -> HostLineage:
    """The way back to ``obj`` for the partitions :func:`distribute` cut from it."""
    sparse = container.kind == "csr"

    def prepare(src: Any) -> Any:
        if sparse:
            A = src.tocsr()
            return A if A.has_sorted_indices else A.sorted_indices()
        return src if hasattr(src, "__cuda_array_interface__") else np.asarray(src)

    if isinstance(container, BlockGrid):
        roffs, coffs, C = container.row_offsets, container.col_offsets, container.grid[1]

        def cut(a: Any, r: int) -> Any:
            i, j = divmod(r, C)
            if sparse:  # as distribute cuts them: a row band, then its columns
                return a[roffs[i]:roffs[i + 1]].tocsc()[:, coffs[j]:coffs[j + 1]].tocsr()
            return a[roffs[i]:roffs[i + 1], coffs[j]:coffs[j + 1]]   # a view: _scatter_all copies if it must
    else:
        offs = container.offsets

        def cut(a: Any, r: int) -> Any:
            return a[offs[r]:offs[r + 1]]

    return HostLineage(obj, prepare, cut, container.shape, replicas)


def _keeps_source(fn: Callable) -> Callable:
    """:func:`distribute`'s lineage: check the blocks fit the workers' memory first, and let the
    container rebuild any partition from the caller's object (or from its replicas) afterwards."""

    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(obj: Any, client: Any = None, **kwargs: Any) -> Any:
        try:
            sig.bind(obj, client, **kwargs)
        except TypeError as e:
            raise TypeError(f"{fn.__name__}() {e}") from None
        replicas = kwargs.get("replicas", 1)
        if not isinstance(replicas, int | np.integer) or isinstance(replicas, bool) or replicas < 1:
            raise ValueError(f"replicas must be a positive int, got {replicas!r}")
        if kwargs.get("partition", "1d") not in ("1d", "2d"):   # whatever obj is (a placed one too)
            raise ValueError(f"partition must be '1d' or '2d', got {kwargs['partition']!r}")
        refuse_dask_collection("obj", obj)
        if isinstance(obj, RowBlocks | BlockGrid) or _is_dask(obj):
            ignored = sorted(k for k in ("grid", "n_parts", "workers") if kwargs.get(k) is not None)
            if ignored:   # a distributed input is used where it lies
                warnings.warn(f"{fn.__name__}(): {type(obj).__name__} input is used as it is placed; "
                              f"{', '.join(ignored)} ignored", UserWarning, stacklevel=2)
            return fn(obj, client, **kwargs)
        client = _check_distribute(obj, client, **kwargs)
        _check_fits(client, _host_nbytes(obj) * replicas, kwargs.get("workers"), kwargs.get("n_parts"), "the data")
        start = set(worker_addresses(client))
        for attempt in range(_DISTRIBUTE_RETRIES + 1):
            try:
                out = fn(obj, client, **kwargs)
                claim = kwargs.get("symmetric")
                if claim is not None and getattr(out, "kind", None) == "csr":
                    out.symmetric = None   # the caller's word, checked once: a few integers per block travel
                    if check_symmetric(out, client) != bool(claim):
                        raise ValueError(f"symmetric={claim!r}, but the matrix's pattern is "
                                         f"{'not ' if claim else ''}symmetric")
                if isinstance(out, RowBlocks | BlockGrid) and out.lineage is None:
                    out.lineage = _host_lineage(out, obj, replicas)
                    out.lineage.place_copies(client, out.parts, out.workers)
                return out
            except Exception as e:
                # a worker lost while the blocks travel shows as Dask's own errors (a cancelled future, "No
                # valid workers found"): place them again on the workers there are, from the caller's object
                try:
                    lost = sorted(start - set(worker_addresses(client)))
                except Exception:
                    lost = []
                if not lost:
                    raise
                from ..comms import WorkerLostError

                if kwargs.get("workers") is not None or attempt == _DISTRIBUTE_RETRIES:
                    raise WorkerLostError(f"worker(s) {lost} left the cluster while {fn.__name__}() placed the "
                                          f"data on them ({e.__class__.__name__}: {e})") from e
                warnings.warn(WorkerLostWarning(f"worker(s) {lost} left the cluster while {fn.__name__}() "
                                                f"placed the data; placing it again"), stacklevel=2)
                start = set(await_workers(client, len(start)))
        raise AssertionError("unreachable")

    return wrapper


def _check_distribute(obj: Any, client: Any, *, partition: str = "1d", grid: Any = None, workers: Any = None,
                      n_parts: Any = None, symmetric: Any = None, replicas: int = 1) -> Any:
    """:func:`distribute`'s arguments, checked on the client before anything is scattered (those that need
    no cluster first; ``partition`` the wrapper checked); returns the client."""
    if not (_is_sparse(obj) or isinstance(obj, list | tuple) or hasattr(obj, "__array__")
            or hasattr(obj, "__cuda_array_interface__")):
        raise TypeError(f"obj must be a scipy.sparse matrix, an array (numpy, cupy, dask) or a container, "
                        f"got {type(obj).__name__}")
    try:
        shape = tuple(getattr(obj, "shape", None) or np.shape(obj))
    except ValueError as e:   # numpy's "inhomogeneous shape"
        raise ValueError(f"obj is a ragged list (rows of different lengths): {e}") from None
    if not shape:
        raise ValueError("obj must have at least one dimension, got a scalar")
    dt = np.dtype(getattr(obj, "dtype", None) or np.asarray(obj).dtype)
    if dt.kind not in "biufc":
        raise TypeError(f"obj must hold numbers, got dtype {dt}")
    if min(shape) == 0:
        raise ValueError(f"obj is empty (shape {shape})")
    if n_parts is not None and (not isinstance(n_parts, int | np.integer) or isinstance(n_parts, bool)
                                or n_parts < 1):
        raise ValueError(f"n_parts must be a positive int or None, got {n_parts!r}")
    if symmetric is not None and not isinstance(symmetric, bool | np.bool_):
        raise TypeError(f"symmetric must be a bool or None, got {type(symmetric).__name__}")
    if symmetric is not None and not _is_sparse(obj):   # sparse claims are checked where the blocks are
        from ..backend import namespace

        a = obj if hasattr(obj, "__array__") or hasattr(obj, "__cuda_array_interface__") else np.asarray(obj)
        nz = namespace(a).asarray(a) != 0     # a device array is checked on its device, not copied here
        if nz.ndim != 2 or nz.shape[0] != nz.shape[1]:
            raise ValueError(f"symmetric= applies to a square matrix, got shape {nz.shape}")
        if bool((nz == nz.T).all()) != bool(symmetric):
            raise ValueError(f"symmetric={symmetric!r}, but the array's pattern is {'not ' * bool(symmetric)}symmetric")
    if workers is not None and (isinstance(workers, str) or not all(isinstance(w, str) for w in workers)
                                or not workers):
        raise TypeError(f"workers must be a non-empty list of worker addresses, got {workers!r}")
    if partition == "2d":
        if len(shape) != 2:
            raise ValueError(f"partition='2d' needs a 2-D obj, got shape {shape}")
        if grid is not None and (not isinstance(grid, tuple | list) or len(grid) != 2 or not all(
                isinstance(g, int | np.integer) and not isinstance(g, bool) and g >= 1 for g in grid)):
            raise ValueError(f"grid must be a pair of positive ints (R, C), got {grid!r}")
        if n_parts is not None:
            raise ValueError(f"n_parts applies to partition='1d'; a 2-D partition takes grid=, got n_parts={n_parts}")
    elif grid is not None:
        raise ValueError(f"grid applies to partition='2d' only, got grid={grid!r} with partition={partition!r}")
    client = default_client(client)
    alive = worker_addresses(client)
    addrs = chosen_workers(client, workers)
    if replicas > len(set(alive)):
        raise ValueError(f"replicas={replicas} needs as many workers; the cluster has {len(set(alive))}")
    if partition == "2d" and grid is not None and grid[0] * grid[1] > len(addrs):
        raise ValueError(f"grid {grid[0]}x{grid[1]} needs {grid[0] * grid[1]} workers, "
                         + (f"workers= names {len(addrs)}" if workers is not None else f"the cluster has {len(addrs)}"))
    return client


def check_entries(name: str, obj: Any) -> None:
    """Check, on the client, that ``obj`` holds real numbers and, when it is host or device data (not
    a container or dask array: those are checked where they live), that none is NaN or infinite.

    Raises
    ------
    TypeError
        The dtype is not real (strings, objects, complex).
    ValueError
        A NaN or infinite entry.

    Examples
    --------
    >>> check_entries("graph", sp.csr_matrix(np.eye(3)))          # doctest: +SKIP
    """
    known_chunks(name, obj)
    dt = np.dtype(obj.dtype)
    if dt.kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers, got dtype {dt}")
    if dt.kind != "f" or isinstance(obj, RowBlocks | BlockGrid) or _is_dask(obj):
        return
    if not all_finite(obj.data if hasattr(obj, "indptr") else obj):
        raise ValueError(f"{name} has NaN or infinite entries")


#: Entries per block of a check that must look entry by entry: its temporaries stay small and warm
#: (a whole-array mask of a 16384 x 4096 system's four arrays took 0.13 s a call, fresh pages faulting in at
#: ~0.3 ms per MiB here; the solve takes 0.15 s).
CHECK_BLOCK = 1 << 20


def all_finite(x: Any) -> bool:
    """Whether every entry of the host or device array ``x`` is finite, without a whole-array temporary.

    A sum is non-finite when any entry is (inf and nan propagate); only finite entries large enough
    to overflow it send the check entry by entry, a block of rows at a time.

    Examples
    --------
    >>> all_finite(np.array([1.0, 2.0])), all_finite(np.array([1.0, np.nan]))
    (True, False)
    """
    from ..backend import namespace

    xp = namespace(x)
    with np.errstate(over="ignore", invalid="ignore"):
        if math.isfinite(float(xp.sum(x))):
            return True
    if x.ndim == 0:
        return False
    rows = max(1, CHECK_BLOCK // max(1, x.size // max(1, x.shape[0])))
    return all(bool(xp.isfinite(x[i:i + rows]).all()) for i in range(0, x.shape[0], rows))


def _is_dask(obj: Any) -> bool:
    try:
        import dask.array as da
    except ImportError:  # pragma: no cover
        return False
    return isinstance(obj, da.Array)


def _host_nbytes(obj: Any) -> int:
    if hasattr(obj, "indptr") and hasattr(obj, "data"):
        return int(obj.data.nbytes + obj.indices.nbytes + obj.indptr.nbytes)
    nb = getattr(obj, "nbytes", None)
    return int(nb) if isinstance(nb, int | np.integer) else 0


def _memory_limits(client: Any, addresses: Sequence[str] | None = None) -> dict[str, int]:
    """Each worker's memory limit in bytes (0: none), asked once per worker and remembered."""
    from ..cluster import scheduler_identity

    known = getattr(client, "_workbench_memory_limits", None)
    if known is None:
        known = client._workbench_memory_limits = {}
    if addresses is None or any(a not in known for a in addresses):
        known.clear()  # and forget workers that left
        for a, info in scheduler_identity(client)["workers"].items():
            known[a] = int(info.get("memory_limit") or 0)
    return known


def _fmt(nbytes: float) -> str:
    return f"{nbytes / 2**30:.2f} GiB" if nbytes >= 2**28 else f"{nbytes / 2**20:.1f} MiB"


def _check_fits(client: Any, total: int, workers: Sequence[str] | None, n_parts: int | None, what: str) -> None:
    """Raise :class:`WorkerMemoryError` when an even share of ``total`` bytes exceeds a worker's
    memory limit: sending it would only get the worker killed and restarted, again and again."""
    if total <= 0:
        return
    addrs = list(workers) if workers is not None else worker_addresses(client)
    limits = _memory_limits(client, addrs)
    lim = [limits.get(a, 0) for a in addrs]
    if not addrs or not all(lim):
        return
    share = total / max(1, min(len(addrs), n_parts or len(addrs)))
    if share > min(lim):
        raise WorkerMemoryError(
            f"{what} ({_fmt(total)}) split over {len(addrs)} workers puts {_fmt(share)} on each, more than a "
            f"worker's memory limit ({_fmt(min(lim))}); use more workers or a larger memory_limit")


def _part_nbytes(c: RowBlocks | BlockGrid, i: int) -> int:
    """Estimated bytes of partition ``i`` (exact for dense blocks, from nnz for CSR)."""
    item = np.dtype(c.dtype).itemsize
    if isinstance(c, BlockGrid):
        R, C = c.grid
        rows = int(c.row_offsets[i // C + 1] - c.row_offsets[i // C])
        cols = int(c.col_offsets[i % C + 1] - c.col_offsets[i % C])
        if c.kind == "csr":
            return int((c.nnz or 0) / max(1, R * C) * (item + 8) + 8 * rows)
        return rows * cols * item
    rows = int(c.offsets[i + 1] - c.offsets[i])
    if c.kind == "csr":
        return int((c.nnz or 0) * rows / max(1, c.shape[0]) * (item + 8) + 8 * rows)
    return rows * int(np.prod(c.shape[1:], dtype=np.int64)) * item


def _gather_whole(c: RowBlocks | BlockGrid, client: Any, parts: Callable[[], list]) -> list:
    """The container's partitions on the client, repairing it first (in place, from its lineage) when one
    was lost with its worker, as a kernel call would."""
    from concurrent.futures import CancelledError

    from ..comms import WorkerLostError

    for attempt in range(2):
        if lost_parts(c, set(worker_addresses(client)) if attempt else None):
            repair(c, client)
        try:
            return client.gather(parts())
        except (CancelledError, WorkerLostError):   # a block Dask reran alone (a kernel's rank) refuses
            if attempt or not lost_parts(c, set(worker_addresses(client))):
                raise
    raise AssertionError("unreachable")


def lost_parts(c: RowBlocks | BlockGrid, alive: set[str] | None = None) -> list[int]:
    """Indices of partitions that are gone: their future was lost or cancelled with their
    worker, or (given the live ``alive`` workers) their worker left the cluster."""
    return [i for i, (f, w) in enumerate(zip(c.parts, c.workers, strict=True))
            if f.status in ("lost", "cancelled", "error") or (alive is not None and w not in alive)]


def _placement(current: list[str], lost: list[int], alive: list[str]) -> list[str]:
    """Workers for the lost partitions: workers the container does not use yet (a nanny's
    replacement, a new worker) first, then the least loaded of the others."""
    keep = [w for i, w in enumerate(current) if i not in set(lost) and w in alive]
    load = {a: keep.count(a) for a in alive}
    out = []
    for _ in lost:
        a = min(alive, key=lambda a: (load[a], a))
        load[a] += 1
        out.append(a)
    return out


def await_workers(client: Any, n: int, wait: float = REPLACE_WAIT) -> list[str]:
    """The live workers once there are ``n`` of them again (a nanny replaces a dead worker
    in seconds), or after ``wait`` seconds with whatever is there."""
    deadline = time.monotonic() + wait
    while True:
        alive = worker_addresses(client)
        if len(alive) >= n or time.monotonic() >= deadline:
            return alive
        time.sleep(0.2)


def repair(container: RowBlocks | BlockGrid, client: Any = None, *, wait: float = REPLACE_WAIT) -> list[int]:
    """Rebuild, in place, the partitions of ``container`` lost with their worker.

    Lost partitions are rebuilt from the container's :class:`Lineage` on the
    workers that replaced the lost ones (waiting up to ``wait`` seconds for a
    nanny to restart them) or else on the least loaded live workers; the
    container's ``parts`` and ``workers`` are updated and the kernels' caches
    in ``meta`` (keys starting with ``_``) dropped, so later calls work as before.

    Returns
    -------
    list of int
        The partitions rebuilt (empty when nothing was lost).

    Raises
    ------
    WorkerLostError
        A lost partition cannot be rebuilt (no lineage, or the host object it
        came from is gone).

    Examples
    --------
    >>> G = wb.distribute(A, client=client)                    # doctest: +SKIP
    >>> # ... a worker dies ...
    >>> repair(G, client)                                      # doctest: +SKIP
    [1]
    """
    from ..comms import WorkerLostError

    client = default_client(client)
    alive = worker_addresses(client)
    lost = lost_parts(container, set(alive))
    if not lost:
        _top_up_copies(container, client, alive)
        return []
    gone = sorted({container.workers[i] for i in lost})
    if container.lineage is None:
        raise WorkerLostError(f"partition(s) {lost} of {container!r} were lost with worker(s) {gone} and the "
                              f"container has no lineage to rebuild them from")
    alive = await_workers(client, len(set(container.workers)), wait)
    if not alive:
        raise WorkerLostError(f"partition(s) {lost} of {container!r} were lost with worker(s) {gone} and no "
                              f"worker is left to rebuild them on")
    targets = _placement(list(container.workers), lost, alive)
    limits = _memory_limits(client, targets)
    for i, w in zip(lost, targets, strict=True):
        need = _part_nbytes(container, i) + sum(_part_nbytes(container, j) for j, v in
                                                enumerate(container.workers) if v == w and j not in lost)
        if limits.get(w) and need > limits[w]:
            raise WorkerMemoryError(f"partition {i} ({_fmt(_part_nbytes(container, i))}) lost with worker(s) "
                                    f"{gone} does not fit on {w} beside its own ({_fmt(need)} against a memory "
                                    f"limit of {_fmt(limits[w])}); add a worker")
    new = container.lineage.rebuild(client, lost, targets, [container.parts[i] for i in lost])
    for i, f, w in zip(lost, new, targets, strict=True):
        if w in container.workers:
            container.meta["doubled"] = True   # see spread()
        container._set_part(i, f, w)
    for k in [k for k in container.meta if k.startswith("_")]:
        del container.meta[k]  # kernels' caches hold futures derived from the lost partitions
    container.meta["repaired"] = container.meta.get("repaired", 0) + len(lost)
    _top_up_copies(container, client, worker_addresses(client))
    return lost


def _short_of_copies(container: RowBlocks | BlockGrid, alive: Sequence[str] | None = None) -> bool:
    lin = container.lineage
    return isinstance(lin, HostLineage) and lin.short_of_copies(container.workers,
                                                                None if alive is None else set(alive))


def _top_up_copies(container: RowBlocks | BlockGrid, client: Any, alive: Sequence[str]) -> None:
    """Put back the copies (``distribute(..., replicas=)``) that lost workers took with them."""
    if _short_of_copies(container, alive):
        container.lineage.place_copies(client, container.parts, container.workers)


def spread(container: RowBlocks | BlockGrid, client: Any = None) -> list[int]:
    """Move partitions that a :func:`repair` put on workers already holding one of the container's (no
    replacement had come yet) onto live workers the container does not use, once there are some: kernels
    that take one partition per worker can use it again.  Returns the partitions moved.

    Examples
    --------
    >>> repair(G, client, wait=0); G.workers                   # doctest: +SKIP
    ['tcp://a', 'tcp://b', 'tcp://a']
    >>> spread(G, client); G.workers                           # doctest: +SKIP
    [2]
    ['tcp://a', 'tcp://b', 'tcp://c']
    """
    if not container.meta.get("doubled"):
        return []
    client = default_client(client)
    seen: set[str] = set()
    doubled = [i for i, w in enumerate(container.workers) if w in seen or seen.add(w)]
    free = [a for a in worker_addresses(client) if a not in seen]
    moves = list(zip(doubled, free, strict=False))   # as many as there are free workers
    if moves:
        move_keys(client, {w: [container.parts[i].key] for i, w in moves})
        for i, w in moves:
            container._set_part(i, container.parts[i], w)
        for k in [k for k in container.meta if k.startswith("_")]:
            del container.meta[k]  # kernels' caches hold the old placement
    if len(moves) == len(doubled):
        del container.meta["doubled"]
    return [i for i, _ in moves]


def check_one_per_worker(container: RowBlocks | BlockGrid, name: str) -> None:
    """For kernels whose ranks each take one partition: raise unless ``container`` has one per worker.

    A container a :func:`repair` left doubled up (no replacement yet) raises
    :class:`~workbench.comms.WorkerLostError`, so :func:`resilient` waits for the replacement, spreads it
    and reruns; any other is the caller's layout (``n_parts``), a ValueError naming ``name``.
    """
    n_workers = len(set(container.workers))
    if n_workers == container.n_parts:
        return
    if container.meta.get("doubled"):
        from ..comms import WorkerLostError

        raise WorkerLostError(f"{name}: partitions lost with a worker were rebuilt beside others (no replacement "
                              f"came within {REPLACE_WAIT:g} s), and this kernel needs one per worker")
    raise ValueError(f"{name} needs one block per worker, got {container.n_parts} blocks on {n_workers} workers "
                     "(distribute without n_parts)")


# ---- the kernels' entry: rerun a call that lost a worker ---------------------

_ACTIVE = threading.local()


def _containers(obj: Any, depth: int = 0, kinds: tuple = (RowBlocks, BlockGrid)) -> list:
    if isinstance(obj, kinds):
        return [obj]
    if depth < 2 and isinstance(obj, list | tuple):
        return [c for o in obj for c in _containers(o, depth + 1, kinds)]
    if depth < 2 and isinstance(obj, dict):
        return [c for o in obj.values() for c in _containers(o, depth + 1, kinds)]
    return []


def _lost_reason(exc: BaseException, client: Any, containers: list, known: set[str]) -> str | None:
    """Why ``exc`` comes from a lost worker, or None when it is the call's own error."""
    from ..comms import CommsError, WorkerLostError

    if isinstance(exc, WorkerLostError):
        return str(exc)
    dead = [i for c in containers for i in lost_parts(c)]
    if dead:
        return f"partition(s) {dead} lost with their worker"
    if isinstance(exc, CommsError | OSError) or type(exc).__name__ in _LOSS_ERRORS:
        from ..comms import lost_workers

        gone = lost_workers(sorted(known | {w for c in containers for w in c.workers}), client)
        if gone:
            return f"worker(s) {gone} left the cluster"
    elif isinstance(exc, ValueError) and containers:
        # e.g. distribute(..., workers=container.workers) refusing a worker that died a moment ago,
        # before the client saw the container's partition cancelled
        from ..comms import lost_workers

        gone = lost_workers(sorted({w for c in containers for w in c.workers}), client)
        if gone:
            return f"worker(s) {gone} left the cluster"
    return None


def resilient(fn: Callable) -> Callable:
    """Make a kernel's public function survive lost workers (DESIGN rule 7).

    Before the call, containers among the arguments (:class:`RowBlocks`,
    :class:`BlockGrid`) whose partitions were lost are repaired in place.  When
    the call loses a worker (:class:`~workbench.comms.WorkerLostError` from its
    SPMD group, or a partition lost with its worker), the lost partitions are
    rebuilt on the workers that remain or on the nanny's replacement, a
    :class:`WorkerLostWarning` is issued and the call reruns, at most
    :data:`RETRIES` times; then ``WorkerLostError`` says what was lost.  The
    result's ``stats["retries"]`` counts the reruns.  A call made inside
    another resilient call is left to the outer one.  The result keeps the
    call (:func:`remember_call`) to run it again if it loses a chunk later.

    Examples
    --------
    >>> @resilient                                             # doctest: +SKIP
    ... def bfs(graph, source, *, client=None): ...
    """
    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        from ..comms import WorkerLostError

        if getattr(_ACTIVE, "depth", 0):
            return fn(*args, **kwargs)
        bound = sig.bind_partial(*args, **kwargs)
        try:
            client = default_client(bound.arguments.get("client"), *bound.arguments.values())
        except (TypeError, ValueError):   # no client (or not one): the call validates its arguments first,
            # then says so itself
            return fn(*args, **kwargs)
        containers = _containers(list(bound.arguments.values()))
        cached = set(getattr(client, "_workbench_alive", ()))  # the workers comms saw last (no round trip)
        history: list[str] = []
        _ACTIVE.depth = 1
        try:
            while True:
                repairing = True
                try:
                    # after a loss, by the workers there are too: a block copied back from its replica
                    # shares the copy's key, so it still reads "finished" once its new worker is gone
                    alive = set(worker_addresses(client)) if history else None
                    for c in containers:
                        if lost_parts(c, alive) or _short_of_copies(c, alive):
                            repair(c, client)
                        spread(c, client)
                    for r in _containers(list(bound.arguments.values()), kinds=(_result_type(),)):
                        make_again_if_lost(r)   # an earlier kernel's result read as an input
                    repairing = False
                    out = fn(*bound.args, **bound.kwargs)
                except Exception as e:
                    # a repair's own WorkerLostError (nothing to rebuild from) is final; its other errors
                    # (a worker that died a moment ago taken as a target) are a loss like the call's
                    why = None if repairing and isinstance(e, WorkerLostError) and not getattr(e, "midway", 0) \
                        else _lost_reason(e, client, containers, cached)
                    if why is None:
                        raise
                    history.append(why)
                    if len(history) > RETRIES:
                        raise WorkerLostError(f"{fn.__name__}: workers were lost in {len(history)} attempts "
                                              f"({RETRIES} retries): {'; '.join(history)}") from e
                    warnings.warn(f"{fn.__name__}: {why}; rebuilding the lost partitions and rerunning "
                                  f"(retry {len(history)} of {RETRIES})", WorkerLostWarning, stacklevel=2)
                    alive = await_workers(client, max(len(cached), max((len(set(c.workers)) for c in containers),
                                                                       default=1)))
                    _replace_workers(bound, set(alive))
                    cached = set(alive)
                    continue
                # the result's stats: ``out.stats``, or the dict of a ``(result, stats)`` pair
                stats = out[-1] if isinstance(out, tuple) and out and isinstance(out[-1], dict) else \
                    getattr(out, "stats", None)
                if isinstance(stats, dict):
                    stats["retries"] = len(history)
                remember_call(out, fn.__name__, functools.partial(_again, fn.__name__, call, held(bound.args),
                                                                  held(bound.kwargs)), RETRIES)
                return out
        finally:
            _ACTIVE.depth = 0

    return call


def _again(name: str, call: Callable, args: tuple, kwargs: dict, why: str) -> Any:
    """A kernel's call made again for a result that lost part of itself (see :func:`remember_call`)."""
    args, kwargs = unheld(name, args), unheld(name, kwargs)
    warnings.warn(f"{name}: {why}; rerunning the call that made it", WorkerLostWarning, stacklevel=4)
    depth, _ACTIVE.depth = getattr(_ACTIVE, "depth", 0), 0   # a call of its own (read inside another's):
    try:                                                     # its containers repaired, its own retries
        return call(*args, **kwargs)
    finally:
        _ACTIVE.depth = depth


def _replace_workers(bound: inspect.BoundArguments, alive: set[str]) -> None:
    """An explicit ``workers=`` list keeps its length: lost addresses give way to live workers it lacks."""
    ws = bound.arguments.get("workers")
    if not ws:
        return
    spare = sorted(alive - set(ws))
    new = [w if w in alive else (spare.pop(0) if spare else None) for w in ws]
    bound.arguments["workers"] = [w for w in new if w is not None]


# --------------------------------------------------------------------------
# distribute
# --------------------------------------------------------------------------


def _is_sparse(obj: Any) -> bool:
    import scipy.sparse as sp

    if sp.issparse(obj):
        return True
    from ..backend import is_device_array
    return is_device_array(obj) and not hasattr(obj, "__array_namespace__") and hasattr(obj, "tocsr")


@_keeps_source
def distribute(obj: Any, client: Any = None, *, partition: str = "1d", grid: tuple[int, int] | None = None,
               workers: Sequence[str] | None = None, n_parts: int | None = None,
               symmetric: bool | None = None, replicas: int = 1) -> RowBlocks | BlockGrid | Any:
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
        Whether a sparse matrix's pattern is symmetric: checked here, once
        (a ``ValueError`` when it is not so), and remembered for the graph
        kernels, which otherwise check it on their first call.
    replicas : int
        Copies of each partition on distinct workers.  With 1 (default) a
        partition lost with its worker is sent again from ``obj`` while the
        caller still holds it (the container keeps a weak reference); with 2
        or more it survives the loss of a worker without the client's copy.
        The extra copies go to other workers of the cluster, which need not
        be among ``workers`` (kernels run where the first copies are); the
        copies a lost worker held are put back by the next kernel call on the
        container (or :func:`repair`).

    Returns
    -------
    RowBlocks or BlockGrid
        Each partition can be rebuilt after its worker is lost (``lineage``).

    Examples
    --------
    >>> G = distribute(A, client=client)                         # doctest: +SKIP
    >>> G2 = distribute(A, client=client, partition="2d")        # doctest: +SKIP
    """
    if isinstance(obj, RowBlocks | BlockGrid):
        return obj
    if _is_dask(obj):
        return obj
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
            parts = _scatter_all(client, [A[offs[r]:offs[r + 1]] for r in range(P)],
                                 [addrs[r % len(addrs)] for r in range(P)])
            return RowBlocks(parts, offs, tuple(A.shape), A.dtype, [addrs[r % len(addrs)] for r in range(P)],
                             kind="csr", nnz=int(A.nnz), symmetric=symmetric)
        R, C = grid or grid_shape(len(addrs))
        if R * C > len(addrs):
            raise ValueError(f"grid {R}x{C} needs {R * C} workers, the cluster has {len(addrs)}")
        roffs, coffs = block_offsets(A.shape[0], R), block_offsets(A.shape[1], C)
        cut = []
        for i in range(R):
            rows = A[roffs[i]:roffs[i + 1]].tocsc()
            cut += [rows[:, coffs[j]:coffs[j + 1]].tocsr() for j in range(C)]
        futs = _scatter_all(client, cut, addrs[:R * C])
        blocks = [futs[i * C:(i + 1) * C] for i in range(R)]
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
        futs = _scatter_all(client, [x[roffs[i]:roffs[i + 1], coffs[j]:coffs[j + 1]]
                                     for i in range(R) for j in range(C)], addrs[:R * C])
        blocks = [futs[i * C:(i + 1) * C] for i in range(R)]
        return BlockGrid(blocks, roffs, coffs, tuple(x.shape), x.dtype, addrs[:R * C], kind="dense")
    P = n_parts or len(addrs)
    offs = block_offsets(x.shape[0], P)
    parts = _scatter_all(client, [x[offs[r]:offs[r + 1]] for r in range(P)],
                         [addrs[r % len(addrs)] for r in range(P)])
    return RowBlocks(parts, offs, tuple(x.shape), x.dtype, [addrs[r % len(addrs)] for r in range(P)], kind="dense")


def rows_of(x: Any, client: Any = None, workers: Sequence[str] | None = None) -> RowBlocks:
    """A dense dask array (or RowBlocks) as :class:`RowBlocks` pinned one block
    per worker, computed on the workers (the client never holds the data).

    The array is rechunked along axis 0 to one chunk per worker first.  A
    ``dask.array.from_array`` of a host array (1-D or 2-D) is cut on the
    client instead, from the chunks its graph holds, and each block copied out
    by its worker, as :func:`distribute` places a host array.
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
    blocks = _literal_rows(x, offs)
    futs = (_scatter_all(client, blocks, addrs, device=False) if blocks is not None
            else compute_all(client, [(d, [addrs[r]]) for r, d in enumerate(delayed_blocks)]))
    return RowBlocks(futs, offs, tuple(x.shape), x.dtype, addrs, kind="dense",
                     lineage=GraphLineage(list(delayed_blocks)))


def as_row_blocks(obj: Any, client: Any = None, *, kind: str | None = None) -> RowBlocks:
    """Host data, a dask array or RowBlocks as :class:`RowBlocks` (the kernels' entry)."""
    if isinstance(obj, RowBlocks):
        if kind is not None and obj.kind != kind:
            raise TypeError(f"expected {kind} row blocks, got {obj.kind}")
        return obj
    if isinstance(obj, BlockGrid):
        raise TypeError("this kernel needs a 1-D partition; distribute with partition='1d'")
    if _is_dask(obj):
        return rows_of(obj, client)
    out = distribute(obj, client)
    assert isinstance(out, RowBlocks)
    return out
