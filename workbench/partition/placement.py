"""Placing data on the workers from the client: host blocks copied out of this process by the worker that
will hold them (same host; by socket otherwise), the chunks of a caller's dask array as futures where they
lie, and those of a ``dask.array.from_array`` of a host array sent as host blocks are (the scheduler never
carries them).  The containers in :mod:`workbench.partition` and the kernels place their inputs with these.

Examples
--------
>>> futs = _scatter_all(client, [block_a, block_b], workers)         # doctest: +SKIP
>>> B = persist(da.from_array(host_B, chunks=(100_000, 64)), client)   # doctest: +SKIP
"""

from __future__ import annotations

import functools
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..cluster import _client_holding, backend_of, worker_addresses

__all__ = ["as_block", "chunk_sources", "compute_all", "persist", "array_of", "known_chunks", "move_keys",
           "remember_call", "make_again_if_lost", "CallLineage"]


#: Seconds a scatter waits for its worker (distributed's default: the 30 s connect timeout), and the
#: bandwidth its transfer may not fall below before it counts as lost.
_SCATTER_WAIT = 2.0
_SCATTER_MIN_BPS = 50e6


def _scatter_by_socket(client: Any, obj: Any, worker: str) -> Any:
    """``client.scatter`` of one block to ``worker``, bounded: a worker killed a moment ago (taken as a
    repair's target while the scheduler still listed it) held the call for distributed's 30 s connect
    timeout, either waiting for it to be listed or retrying "connection refused".  A worker that is gone
    then is a ``WorkerLostError`` the callers retry."""
    import asyncio
    import uuid

    from .. import _samehost

    nbytes = sum(int(getattr(getattr(obj, a, None), "nbytes", 0)) for a in ("data", "indices", "indptr")) \
        if hasattr(obj, "indptr") else int(getattr(obj, "nbytes", 0))
    key = f"{_samehost.PLACED}{type(obj).__name__}-{uuid.uuid4().hex}"   # placed by workbench: see PLACED
    scatter = client._scatter({key: obj}, workers=[worker], direct=True, hash=False, broadcast=False,
                              timeout=_SCATTER_WAIT)
    try:
        fut = client.sync(asyncio.wait_for, scatter, 2 * _SCATTER_WAIT + nbytes / _SCATTER_MIN_BPS)[key]
    except OSError as e:   # TimeoutError too: "No valid workers found", or no connection within the bound
        if worker in worker_addresses(client):
            raise
        from ..comms import WorkerLostError

        err = WorkerLostError(f"worker {worker} left the cluster before its block reached it")
        err.midway = True   # not final, even from a repair: resilient retries on the workers there are
        raise err from e
    return fut


def _scatter_to(client: Any, obj: Any, worker: str) -> Any:
    return _scatter_all(client, [obj], [worker])[0]


def as_block(a: Any) -> Any:
    """``a`` as a block to place on a worker: itself where its worker can copy it as it lies (contiguous; a
    2-D numpy array with contiguous rows, as a column block of a C array is, read row by row; not an array),
    else a contiguous copy, in a buffer of the host pool (:func:`~workbench.backend.empty`): fresh pages
    cost ~1-2 ms per MiB here on first touch, 1.2 s for a Fortran-ordered 1M x 64 B where the copy itself
    takes 0.11 s.  :func:`_scatter_all` and :func:`persist` apply it, so callers pass views."""
    if not hasattr(a, "flags") or a.flags.c_contiguous:
        return a
    if isinstance(a, np.ndarray) and a.ndim == 2 and a.strides[1] == a.itemsize \
            and a.strides[0] >= a.shape[1] * a.itemsize:
        return a
    from ..backend import empty, namespace

    if isinstance(a, np.ndarray):
        out = empty(a.shape, a.dtype)
        np.copyto(out, a)
        return out
    return namespace(a).ascontiguousarray(a)


def _scatter_all(client: Any, objs: Sequence[Any], workers: Sequence[str], device: bool = True) -> list:
    """A future of each ``objs[i]`` held on ``workers[i]``: large host blocks are copied out of this
    process by their workers, all at once (same host); the rest go by socket.  Views are fine: a block is
    copied on the client only when its worker cannot read it as it lies (:func:`as_block`).  On GPU workers
    a block moves to the device, unless ``device=False``."""
    from .. import comms

    comms.ensure_registered(client)
    objs = [as_block(o) for o in objs]
    futs = comms._samehost.scatter_by_pull(client, objs, workers)
    for i, (obj, worker) in enumerate(zip(objs, workers, strict=True)):
        if futs[i] is None:
            futs[i] = _scatter_by_socket(client, obj, worker)
        if device and backend_of(client) == "gpu":
            # on GPU workers a partition lives in device memory: moved there once, when distributed
            from ..backend import to_device

            futs[i] = client.submit(to_device, futs[i], workers=[worker], allow_other_workers=False, pure=False)
    return futs


def chunk_sources(x: Any) -> np.ndarray:
    """Each chunk of the dask array ``x``, as an object array shaped like its chunk grid: the chunk's
    Future where ``x`` is persisted (nothing to submit, it is where it lies), else its Delayed.

    Pass them to :func:`compute_all` to get a Future per chunk.

    Examples
    --------
    >>> x = client.persist(da.ones((8, 4), chunks=(4, 4)))              # doctest: +SKIP
    >>> chunk_sources(x).shape                                          # doctest: +SKIP
    (2, 1)
    """
    from distributed import futures_of

    held = {f.key: f for f in futures_of(x)}
    keys = x.__dask_keys__()
    out = np.empty(x.numblocks, dtype=object)
    for idx in np.ndindex(*x.numblocks):
        k = keys
        for i in idx:
            k = k[i]
        out[idx] = held.get(k)
    if any(f is None for f in out.flat):
        delayed = x.to_delayed()
        for idx in np.ndindex(*x.numblocks):
            out[idx] = out[idx] if out[idx] is not None else delayed[idx]
    return out


def compute_all(client: Any, items: Sequence[tuple[Any, Sequence[str] | None]]) -> list:
    """A Future per ``(source, workers)``: a Future passes as it is; a host array, or a Delayed that stands
    for data in its graph (a chunk of ``dask.array.from_array`` of a host array), is scattered straight to
    ``workers``; the other Delayeds are submitted together, one ``compute`` per distinct ``workers``
    (``None``: anywhere; else only there), so the scheduler gets them in one message instead of one per
    piece.

    Examples
    --------
    >>> src = chunk_sources(x)                                          # doctest: +SKIP
    >>> futs = compute_all(client, [(src[0, 0], [worker]), (src[1, 0], None)])   # doctest: +SKIP
    """
    out: list = [None] * len(items)
    groups: dict = {}
    literals: dict = {}
    for i, (src, workers) in enumerate(items):
        if _is_future(src):
            out[i] = src
        elif (data := src if isinstance(src, np.ndarray) else _literal(src)) is not None:
            literals.setdefault(None if workers is None else tuple(workers), []).append((i, data))
        else:
            groups.setdefault(None if workers is None else tuple(workers), []).append(i)
    if literals:
        # chunks held as data in the caller's graph (dask.array.from_array of a host array): straight to their
        # worker, as a host array is scattered (its worker copies it out of this process, a column block row by
        # row); computed, each would travel in the graph through the scheduler (2 GB of gtsv inputs: 15-32 s a
        # call; by client.scatter after contiguous copies, 1.6-5 s; copied by the workers, 0.36 s)
        anywhere = worker_addresses(client)
        got = [(i, a, list(workers or anywhere)) for workers, pieces in literals.items() for i, a in pieces]
        futs = _scatter_all(client, [a for _, a, _ in got], [ws[n % len(ws)] for n, (_, _, ws) in enumerate(got)],
                            device=False)
        for (i, _, _), f in zip(got, futs, strict=True):
            out[i] = f
    for workers, idx in groups.items():
        futs = client.compute([items[i][0] for i in idx], workers=None if workers is None else list(workers),
                              allow_other_workers=workers is None)
        for i, f in zip(idx, futs, strict=True):
            out[i] = f
    return out


def persist(x: Any, client: Any) -> Any:
    """``client.persist(x)`` for a dask array, keyed the same (its chunks' futures carry its chunk keys),
    except that the chunks of ``dask.array.from_array`` of a host array are copied out of this process by
    the workers that will hold them, as a host array is distributed (column blocks row by row), a run of
    chunks to each worker; persisted, they would travel inside the graph through the scheduler.

    Examples
    --------
    >>> B = persist(da.from_array(host_B, chunks=(100_000, 64)), client)   # doctest: +SKIP
    """
    import dask.array as da

    grid = _host_chunks(x)
    if grid is None:
        return client.persist(x)
    from .. import comms

    comms.ensure_registered(client)
    addrs = worker_addresses(client)
    keys = [(x.name, *idx) for idx in np.ndindex(*x.numblocks)]
    where = [addrs[c * len(addrs) // len(keys)] for c in range(len(keys))]
    futs = comms._samehost.scatter_by_pull(client, [as_block(d) for d in grid.flat], where, keys=keys)
    if any(f is None for f in futs):   # small chunks, another host: the graph's own way
        return client.persist(x)
    return da.Array({f.key: f for f in futs}, x.name, x.chunks, meta=x._meta)


def known_chunks(name: str, x: Any) -> None:
    """A ``ValueError`` naming ``name`` when the dask array ``x`` has chunks of unknown size (after boolean
    indexing: dask's NaN shape failed deep inside a kernel as "cannot convert float NaN to integer")."""
    import math

    shape = getattr(x, "shape", ())
    if hasattr(x, "dask") and any(isinstance(v, float) and math.isnan(v) for v in shape):
        raise ValueError(f"{name} has unknown chunk sizes (shape {shape}, e.g. after boolean indexing): call "
                         f"{name}.compute_chunk_sizes() first")


def array_of(futures: Sequence[Any], chunks: Sequence[Sequence[int]], dtype: Any) -> Any:
    """A dask array whose chunks are the futures' results, the futures keyed ``(name, *chunk index)`` as
    :func:`workbench.comms.run_spmd` keys its ranks with ``chunk_index``: the array's graph holds only the
    futures (as a persisted array's does), so persisting or computing it runs no task.

    Examples
    --------
    >>> futs = comms.run_spmd(body, args, client=client, chunk_index=[(0,), (1,)])    # doctest: +SKIP
    >>> x = array_of(comms.split_results(futs)[0], ((4, 4),), np.float64)            # doctest: +SKIP
    """
    chunks = tuple(tuple(int(c) for c in ax) for ax in chunks)
    names = {f.key[0] if isinstance(f.key, tuple) else None for f in futures}
    grid = [len(ax) for ax in chunks]
    index = sorted(tuple(f.key[1:]) for f in futures if isinstance(f.key, tuple))
    if len(names) != 1 or None in names or index != sorted(np.ndindex(*grid)):
        raise ValueError(f"futures must be keyed (name, *index), one per chunk of a {tuple(grid)} grid")
    return _result_type()({f.key: f for f in futures}, names.pop(), chunks, dtype=dtype)


@functools.cache
def _result_type() -> type:
    """A dask array whose ``np.asarray`` brings device chunks home too: dask's own ``__array__`` hands
    the computed cupy array to numpy, which cupy refuses (implicit conversion), so on a GPU cluster
    ``np.asarray(wb.spmm(...))`` raised where the API says it brings the result home.  A kernel's result
    that lost a chunk with a worker is made again before it is read (see :func:`remember_call`)."""
    import dask.array as da

    class KernelResult(da.Array):
        __slots__ = ()

        def compute(self, **kwargs: Any) -> Any:
            return _unless_lost(self, lambda: _on_own_client(self, da.Array.compute, kwargs))

        def persist(self, **kwargs: Any) -> Any:
            return _unless_lost(self, lambda: _on_own_client(self, da.Array.persist, kwargs))

        def __dask_postpersist__(self) -> tuple:
            # client.persist(x) and dask.persist(x) give the same result back as a plain dask array: keep
            # the call that made it (and its stats), so that the copy too is made again if it loses a chunk
            rebuild, args = da.Array.__dask_postpersist__(self)
            made, stats = self.__dict__.get("_made_by"), self.__dict__.get("stats")

            def again(dsk: Any, *a: Any, **kw: Any) -> Any:
                out = rebuild(dsk, *a, **kw)
                if made is not None and out.name == self.name and type(out) is da.Array:
                    out.__class__ = KernelResult
                    out.__dict__["_made_by"] = made
                    if isinstance(stats, dict):
                        out.stats = dict(stats)   # its own: a rerun of the copy counts its retries there
                return out

            return again, args

        def __array__(self, dtype: Any = None, copy: Any = None, **kwargs: Any) -> np.ndarray:
            from .. import backend

            return np.asarray(backend.to_host(self.compute()), dtype=dtype)

    return KernelResult


# --------------------------------------------------------------------------
# Results made again (DESIGN rule 7).  A kernel's result lives where its ranks ran: a dask array whose chunks
# are the ranks' futures (spmm, tridiag, fft) or row blocks (spgemm).  A rank cannot rerun without its group,
# so a chunk lost after the call has no graph to come back from (Dask's recompute of it ends in
# WorkerLostError or "lost dependencies"): the result reruns the call that made it instead.  The rerun's
# chunks take fresh keys: the old ones, reused, raced with their release on the scheduler, and a rerun on
# fewer workers cuts the result into other chunks.
# --------------------------------------------------------------------------

#: What reading or sending to something a lost worker held raises, by name (WorkerLostError: a rank Dask reran
#: alone refused to run); resilient's _lost_reason reads the same list.
_LOSS_ERRORS = ("FutureCancelledError", "CancelledError", "KilledWorker", "CommClosedError", "FutureLostError",
                "WorkerLostError")


def remember_call(out: Any, name: str, again: Callable[[str], Any], retries: int) -> None:
    """Give the kernel results in ``out`` (one, or a tuple or list of them) the call that made them:
    ``again(why)`` makes it again (warning why).  A dask array result that lost a chunk reruns it when it
    is read (``compute``, ``np.asarray``, ``persist``: before the read, or when the loss strikes while it
    reads, ``retries`` times at most) or passed to a kernel, and stands for the new result in place (new
    keys; other chunks where the call ran on fewer workers).  Arrays derived from it are not results:
    one built on the lost chunks fails when read (read the result itself first).  Row blocks without a
    lineage get a :class:`CallLineage`.  The result holds the call's arguments: ``del`` it to free them.

    Examples
    --------
    >>> remember_call(C, "spmm", lambda why: spmm(A, B), 2)     # doctest: +SKIP
    >>> # ... the worker holding C's second chunk dies; reading C reruns spmm ...
    >>> np.asarray(C)                                           # doctest: +SKIP
    """
    kernel_result = _result_type()
    for path, item in ([((i,), v) for i, v in enumerate(out)] if isinstance(out, tuple | list) else [((), out)]):
        if hasattr(item, "lineage") and hasattr(item, "_set_part"):
            if item.lineage is None and hasattr(item, "offsets"):   # row blocks (no kernel returns a grid)
                item.lineage = CallLineage(name, again, path, item.offsets, getattr(item, "stats", None))
        elif hasattr(item, "dask") and hasattr(item, "chunks"):
            if type(item).__name__ == "Array":   # a plain dask array (a result transposed or joined)
                item.__class__ = kernel_result
            if isinstance(item, kernel_result):
                item.__dict__["_made_by"] = (again, path, item.name, _all_finished(item), retries)


def make_again_if_lost(obj: Any) -> bool:
    """Make a kernel result that lost a chunk again, in place, before a kernel reads it as an input (its
    chunks and keys may change: the kernel must not have looked at them yet).  Returns whether it did."""
    if _lost(obj):
        _make_again(obj)
        return True
    return False


def held(args: Any) -> Any:
    """A call's arguments (a tuple or dict) as a result keeps them to run the call again: weakly where an
    argument holds futures of its own (a persisted array, an earlier kernel's result), so that a chain of
    results (``x = wb.spmm(A, x)`` in a loop) does not keep every earlier one on the workers."""
    def hold(v: Any) -> Any:
        return _Held(weakref.ref(v)) if _own_futures(v) else v
    return {k: hold(v) for k, v in args.items()} if isinstance(args, dict) else tuple(hold(v) for v in args)


def unheld(name: str, args: Any) -> Any:
    """The arguments :func:`held` kept, or ``WorkerLostError`` when one of them is gone."""
    from ..comms import WorkerLostError

    def get(v: Any) -> Any:
        if not isinstance(v, _Held):
            return v
        if (obj := v.ref()) is None:
            raise WorkerLostError(f"{name}: part of its result was lost with a worker, and an input it was "
                                  f"made from (a persisted array or an earlier result) is gone: call {name} again")
        return obj
    return {k: get(v) for k, v in args.items()} if isinstance(args, dict) else tuple(get(v) for v in args)


@dataclass(frozen=True)
class _Held:
    ref: Callable[[], Any]


def _pick(out: Any, path: tuple[int, ...]) -> Any:
    for i in path:
        out = out[i]
    return out


def _own_futures(x: Any) -> list:
    """The futures that are ``x``'s chunks (its top layer, as :func:`array_of` makes it), else []."""
    try:
        values = list(x.dask.layers[x.name].values())
    except (AttributeError, KeyError, TypeError):
        return []
    return values if values and all(_is_future(v) for v in values) else []


def _on_own_client(x: Any, read: Callable, kwargs: dict) -> Any:
    """``read(x, **kwargs)`` through the client whose futures are ``x``'s chunks: dask reads through the
    default client, and a result made on another cluster (a second one started in the same notebook,
    a CPU and a gpu-sim cluster side by side) failed there with "lost dependencies"."""
    client = _client_holding((x,))
    if client is None or "scheduler" in kwargs:
        return read(x, **kwargs)
    with client.as_current():
        return read(x, **kwargs)


def _all_finished(x: Any) -> bool:
    futures = _own_futures(x)
    return bool(futures) and all(f.status == "finished" for f in futures)


def _made_by(x: Any) -> tuple | None:
    made = getattr(x, "__dict__", {}).get("_made_by")
    return made if made is not None and made[2] == x.name else None   # an array edited in place: not the call's


def _lost(x: Any) -> bool:
    """Whether a chunk of ``x`` went with a worker (the statuses the client holds: no round trip)."""
    made = _made_by(x)
    if made is None:
        return False
    gone = ("lost", "error", "cancelled") + (("pending",) if made[3] else ())
    return any(f.status in gone for f in _own_futures(x))


def _make_again(x: Any, why: str = "part of its result was lost with a worker") -> None:
    again, path, _, _, retries = _made_by(x)
    new = _pick(again(why), path)
    stats = getattr(new, "stats", None)
    if isinstance(stats, dict):
        stats["retries"] = stats.get("retries", 0) + 1
        if isinstance(getattr(x, "stats", None), dict):   # the same dict a (result, stats) pair holds
            x.stats.clear()
            x.stats.update(stats)
        else:
            x.stats = stats
    x.dask, x._name = new.dask, new.name
    if x.chunks != new.chunks:   # the call ran again on fewer workers
        x._chunks = new.chunks
    x.__dict__["_made_by"] = new.__dict__.get("_made_by") or (again, path, x.name, _all_finished(x), retries)


def _unless_lost(x: Any, read: Callable[[], Any]) -> Any:
    """``read()``, ``x`` made again first if it lost a chunk, and again if one goes while it reads."""
    make_again_if_lost(x)
    attempt = 0
    while True:
        try:
            return read()
        except Exception as e:
            made = _made_by(x)
            if made is None or attempt >= made[4] or not (
                    _lost(x) or any(t.__name__ in _LOSS_ERRORS for t in type(e).__mro__)):
                raise
            attempt += 1
            _make_again(x, f"part of its result was lost with a worker while it was read ({type(e).__name__})")


class CallLineage:
    """The :class:`~workbench.partition.Lineage` of a kernel's result blocks: the call that made them,
    rerun (its ranks made all the blocks together), and the new result's blocks at the lost indices
    taken, each left on the worker :func:`~workbench.partition.repair` chose."""

    def __init__(self, name: str, again: Callable[[str], Any], path: tuple[int, ...], offsets: Any,
                 stats: dict | None = None) -> None:
        self.name, self.again, self.path = name, again, path
        self.offsets = [int(o) for o in offsets]
        self.stats = stats   # the result's own dict: the rerun's stats go into it

    def __getstate__(self) -> dict:
        return {**self.__dict__, "again": None}   # the call's arguments stay with the client

    def rebuild(self, client: Any, indices: list[int], workers: list[str], old: list) -> list:
        from ..comms import WorkerLostError

        if self.again is None:
            raise WorkerLostError(f"{self.name}: result blocks {indices} were lost with their worker; call it again")
        new = _pick(self.again(f"result blocks {indices} were lost with their worker"), self.path)
        if [int(o) for o in new.offsets] != self.offsets:
            raise WorkerLostError(f"{self.name}: result blocks {indices} were lost with their worker, and the "
                                  f"call run again on the workers there are now splits its result otherwise; "
                                  f"call {self.name} again")
        stats = getattr(new, "stats", None)
        if isinstance(self.stats, dict) and isinstance(stats, dict):
            self.stats.clear()
            self.stats.update(stats, retries=stats.get("retries", 0) + 1)
        homes: dict[str, list] = {}
        for i, w in zip(indices, workers, strict=True):
            homes.setdefault(w, []).append(new.parts[i].key)
        move_keys(client, homes)
        return [new.parts[i] for i in indices]


def move_keys(client: Any, homes: dict[str, Sequence[Any]], timeout: float = 120.0) -> None:
    """Leave each key of ``homes[worker]`` on that worker alone: copied there where it is in memory elsewhere
    only, and its other copies dropped, in one step on the scheduler.  Keys not in memory are skipped.

    A kernel whose ranks read a caller's chunk held on another worker calls it before the group: the rank
    then reads the chunk where it runs, and the next call finds it there.  Pulled by the rank as a task
    dependency and dropped elsewhere after the group, the chunk would lie on both workers in between, and the
    active memory manager, when it ran then, dropped one of the two copies, often the rank's (the copy on the
    fuller worker); the next call pulled the chunk again.  A key not copied within ``timeout`` seconds stays
    where it is (the rank fetches it).

    Examples
    --------
    >>> move_keys(client, {worker: [chunk_key]})                             # doctest: +SKIP
    """
    if homes:
        client.run_on_scheduler(_move_keys, {a: list(ks) for a, ks in homes.items()}, timeout)


async def _move_keys(homes: dict[str, list], timeout: float, dask_scheduler: Any = None) -> None:
    import asyncio

    s = dask_scheduler

    def alone(ws: Any, keys: Any) -> None:   # drop the copies of keys that ws holds on other workers
        for key in keys:
            ts = s.tasks.get(key)
            if ts is None or not ts.who_has or ws not in ts.who_has:
                continue
            for other in [w.address for w in ts.who_has if w is not ws]:
                s.request_remove_replicas(other, [key], stimulus_id=f"workbench-move-{time.time()}")

    async def to(addr: str, keys: list) -> None:
        ws = s.workers.get(addr)
        if ws is None:
            return
        tasks = [ts for ts in map(s.tasks.get, keys) if ts is not None and ts.who_has]
        alone(ws, [ts.key for ts in tasks if ws in ts.who_has])
        who = {ts.key: [w.address for w in ts.who_has] for ts in tasks if ws not in ts.who_has}
        if who:
            failed = await s.gather_on_worker(addr, who)
            # no await from here on: the active memory manager cannot run between the copy and the drop
            alone(ws, who.keys() - failed)

    try:
        await asyncio.wait_for(asyncio.gather(*(to(a, ks) for a, ks in homes.items())), timeout)
    except (TimeoutError, OSError):
        pass   # what did not move is fetched by its rank


def _literal(src: Any) -> np.ndarray | None:
    """The host array a Delayed stands for when its graph holds it as data (a chunk of
    ``dask.array.from_array`` of a numpy array), else None."""
    try:
        node = src.__dask_graph__()[src.key]
    except (AttributeError, KeyError, TypeError):
        return None
    data = node.value if type(node).__name__ == "DataNode" else node
    return data if isinstance(data, np.ndarray) and data.dtype != object else None


def _host_chunks(x: Any) -> np.ndarray | None:
    """The host chunks of ``x``, a ``dask.array.from_array`` of a host array that is not persisted, as an
    object array shaped like its chunk grid; None for any other array, or an empty one."""
    src = chunk_sources(x)
    out = np.empty(src.shape, dtype=object)
    for idx in np.ndindex(*src.shape):
        out[idx] = None if _is_future(src[idx]) else _literal(src[idx])
        if out[idx] is None:
            return None
    return out if out.size and x.size else None


def _is_future(obj: Any) -> bool:
    from distributed import Future

    return isinstance(obj, Future)


def _literal_rows(x: Any, offs: np.ndarray) -> list | None:
    """Rows ``offs[r]:offs[r + 1]`` of ``x``, a ``dask.array.from_array`` of a host array (1-D or 2-D), cut
    from the host chunks its graph holds (copied only where a block spans several chunks); None for any
    other array.  Rechunked and computed, the chunks would travel inside the graph through the scheduler."""
    grid = _host_chunks(x) if x.ndim in (1, 2) else None
    if grid is None:
        return None
    edges = np.concatenate([[0], np.cumsum(x.chunks[0])]).astype(np.int64)
    out = []
    for r in range(len(offs) - 1):
        lo, hi = int(offs[r]), int(offs[r + 1])
        pieces = []
        for i in range(len(x.chunks[0])):
            a, b = max(lo, int(edges[i])), min(hi, int(edges[i + 1]))
            if a < b:
                row = [grid[(i, *j)][a - edges[i]:b - edges[i]] for j in np.ndindex(*grid.shape[1:])]
                pieces.append(row[0] if len(row) == 1 else np.concatenate(row, axis=1))
        out.append(np.empty((0, *x.shape[1:]), x.dtype) if not pieces else pieces[0] if len(pieces) == 1
                   else np.concatenate(pieces, axis=0))
    return out
