"""SpMM's and SpGEMM's SPMD rank bodies: who owns which tile, the one-sided
get/claim service, the four schedules (stationary-C, stationary-A, SUMMA,
work stealing), and the worker-local helpers they call around the compiled
kernels of :mod:`.cpu`."""

from __future__ import annotations

import collections
import operator
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import comms
from ...backend import device_kind, empty, launch, misalignment, namespace, sparse_namespace, synchronize
from .cpu import _FIXED_K, _finite_nb, _prefetch_distance, _split_tiles_nb, _spmm_nb, _take_rows_nb

_PHASES = ("prepare", "issue", "fetch_wait", "compute", "accumulate", "sync")


# --------------------------------------------------------------------------
# Tile layout
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
    b_owner: tuple | None = None  # 1-D: rank holding B row tile l (None: tile l is rank l's)

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
        if self.kind == "1d":
            return l if self.b_owner is None else self.b_owner[l]
        return (l % self.grid[0]) * self.nJ + j

    def owner_c(self, i: int, j: int) -> int:
        return i * self.nJ + j

    def c_tile(self, r: int) -> tuple[int, int]:
        return divmod(r, self.nJ)



class _PreparedA:
    """One rank's A tiles, cut and index-compressed for multiplication (see
    :class:`_TileStore`), plus what the group needs to know about them."""

    def __init__(self, tiles: dict, finite: bool, dtypes: list) -> None:
        self.tiles, self.finite, self.dtypes = tiles, finite, dtypes


def _prepare_rank_tiles(a_in: dict, lay: _Layout) -> _PreparedA:
    """Worker side: cut a rank's A blocks into tiles once (see :func:`_prepared_tiles`)."""
    tiles: dict = {}
    for key, blk in a_in.items():
        if lay.kind == "1d":
            # the row block holds global column ids: cut it into the L inner tiles at once (the tiles whose B
            # is local get their direct index from _TileStore, wherever B's chunks are at the time)
            for l, tile in enumerate(_split_tiles(blk, lay.koffs)):
                tiles[(key[0], l)] = (*tile, None)
        else:
            tiles[key] = (*_split_tiles(blk, np.array([0, blk.shape[1]]))[0], None)
    finite = all(_all_finite(blk) for blk in a_in.values())
    return _PreparedA(tiles, finite, [blk.dtype for blk in a_in.values()])


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
    the column index into the whole B tile, kept for the tile whose B is read
    in place (:meth:`reads_in_place`).
    """

    def __init__(self, lay: _Layout, rank: int, a_in: Any, b_in: dict, clock: _Clock) -> None:
        self.lay, self.rank = lay, rank
        self.b = dict(b_in)
        with clock("prepare"):
            prep = a_in if isinstance(a_in, _PreparedA) else _prepare_rank_tiles(a_in, lay)
            if lay.kind == "1d":
                # the row kernels' index into a local B tile, made the first time that tile's B is read in place
                # here (a new B may sit elsewhere than the last), kept with the prepared tiles for later calls
                for key, tile in list(prep.tiles.items()):
                    if tile[2] is None and self.reads_in_place(key[1], 0):
                        prep.tiles[key] = (*tile[:2], _direct_index(tile))
        self.a: dict = prep.tiles
        self.finite, self.dtypes = prep.finite, prep.dtypes

    def reads_in_place(self, l: int, j: int) -> bool:
        """Whether a unit reads B(l, j) where it lies, through its A tile's direct index, rather than the rows
        it needs gathered into a compact buffer, as a peer's are: when the tile is this rank's and starts on a
        64-byte boundary.  Otherwise the row kernel's vector loads straddle cache lines: numpy's arrays start
        16 bytes past one, and a chunk dask deserialized out of a task graph (``da.from_array`` of host data)
        anywhere.  R-MAT SCALE 20, k = 64, 2 workers, B from ``da.from_array`` in two row chunks: the local
        unit 0.42-0.53 s in place, 0.32-0.33 s on its gathered rows (an aligned B: 0.27-0.34 s in place).
        """
        if self.lay.owner_b(l, j) != self.rank:
            return False
        b = self.b[(l, j)]
        return hasattr(b, "indptr") or misalignment(b) == 0  # SpGEMM's sparse B: read in place


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
                reply = self._answer(msg)
                synchronize(reply)  # rows gathered on a GPU are ready before they are serialized
                self.comm.send(peer, reply, tag=self.REP)
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
    # a piece of a chunk of B (first row, end row), as _dask_rows_in_place cuts one: a view
    b_in = {key: t[0][t[1]:t[2]] if isinstance(t, tuple) else t for key, t in b_in.items()}
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
    dtype = result_dtype(*[dt for _, dts in got for dt in dts])
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
    synchronize(C)  # device kernels run asynchronously: done before the task returns
    nnz = sum(int(t[0].nnz) for key, t in store.a.items() if lay.owner_a(*key) == comm.rank)
    info = {"rank": comm.rank, "seconds": time.perf_counter() - t_start, "phases": clock.t, "phases_cpu": clock.cpu,
            "bytes_sent": comm.stats["bytes_sent"] - sent0, "nnz": nnz, "backend": device_kind(), **counters}
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
        whole = store.reads_in_place(l, j)
        return svc.get(lay.owner_b(l, j), ("B", l, j, None if whole else a[1]), clock), whole

    # two-deep pipeline: A of unit t+1 and B of unit t are in flight while unit t-1 multiplies
    pend_a = issue(order[0]) if L else None
    cur = None
    if pend_a is not None:
        a0 = svc.wait(pend_a[1], clock)
        cur = (order[0], a0, fetch_b(order[0], a0))
        pend_a = issue(order[1]) if L > 1 else None
    for t in range(L):
        l, a, (hb, whole) = cur
        b = svc.wait(hb, clock)
        if pend_a is not None:
            a_next = svc.wait(pend_a[1], clock)
            cur = (pend_a[0], a_next, fetch_b(pend_a[0], a_next))
            pend_a = issue(order[t + 2]) if t + 2 < L else None
        with clock("compute"):
            _multiply(a, b, whole, C, accumulate=t > 0)
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
            whole = store.reads_in_place(l, j)
            b = svc.wait(svc.get(lay.owner_b(l, j), ("B", l, j, None if whole else a[1]), clock), clock)
            oc = lay.owner_c(i, j)
            if oc == comm.rank:
                with clock("compute"):
                    _multiply(a, b, whole, C, accumulate=True)
            else:
                part = xp.empty((a[0].shape[0], int(b.shape[1])), dtype=dtype)
                with clock("compute"):
                    _multiply(a, b, whole, part, accumulate=False)
                with clock("accumulate"):
                    synchronize(part)  # the row kernel runs asynchronously on a GPU
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
            whole = store.reads_in_place(l, j)
            b = svc.wait(svc.get(lay.owner_b(l, j), ("B", l, j, None if whole else a[1]), clock), clock)
            if (i, j) == (ci, cj):
                target = C
            else:
                counters["steals"] += 1
                if (i, j) not in partials:
                    partials[(i, j)] = xp.zeros((int(lay.roffs[i + 1] - lay.roffs[i]),
                                                 int(lay.joffs[j + 1] - lay.joffs[j])), dtype=dtype)
                target = partials[(i, j)]
            with clock("compute"):
                _multiply(a, b, whole, target, accumulate=True)
            counters["units"] += 1
    with clock("accumulate"):
        out = [None] * comm.size
        for (i, j), part in partials.items():
            out[lay.owner_c(i, j)] = part
        synchronize(*partials.values())
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
    dtype = result_dtype(a_blk.dtype, b_blk.dtype)
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
    return C, {"nnz": int(C.nnz), "bytes_sent": comm.stats["bytes_sent"] - sent0, "phases": clock.t, "units": L,
               "backend": device_kind()}


# --------------------------------------------------------------------------
# Worker-local kernels
# --------------------------------------------------------------------------


def result_dtype(*dtypes: Any) -> np.dtype:
    """The product's dtype: the inputs' floating type, float64 for integer and bool inputs (counts, not
    wrapped-around integers or ORs)."""
    dtype = np.result_type(*dtypes)
    return dtype if dtype.kind == "f" else np.dtype(np.float64)


def _take_rows(tile: Any, rows: Any) -> Any:
    if hasattr(tile, "indptr"):
        return tile[rows]
    xp = namespace(tile)
    if xp is np:  # the rows a unit needs (B is 2-D): a pooled buffer, not fresh pages
        out = empty((len(rows), tile.shape[1]), tile.dtype)
        # compiled: np.take copies a tile that is not 8-byte aligned (a chunk dask deserialized out of a task
        # graph) element by element, 4x slower (273k rows of 512 B: 0.10 s against 0.025 s)
        _take_rows_nb(tile, np.asarray(rows), out)
        return out
    return xp.take(tile, xp.asarray(rows), axis=0)


def _all_finite(x: Any) -> bool:
    vals = x.data if hasattr(x, "indptr") else x
    if vals.dtype.kind != "f":
        return True
    if namespace(vals) is np and device_kind() == "cpu":
        return bool(_finite_nb(np.ascontiguousarray(vals).reshape(-1)))
    return bool(namespace(vals).isfinite(vals).all())


def _split_tiles(blk: Any, koffs: np.ndarray) -> list[tuple]:
    """Cut a CSR block by column ranges ``koffs`` into compressed tiles.

    Returns ``[(csr_l, rows_l)]``: ``csr_l`` (m x len(rows_l)) with column c
    renumbered to its position in ``rows_l``, the sorted distinct columns of
    range l (relative to ``koffs[l]``) -- the rows of B(l) the tile needs.
    """
    sps = sparse_namespace(blk)
    blk = sps.csr_matrix(blk)
    m = blk.shape[0]
    if namespace(blk.data) is np and device_kind() == "cpu":
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


def _split_tiles_xp(indptr: Any, indices: Any, data: Any, koffs: Any) -> tuple:
    """Array-namespace form of :func:`_split_tiles_nb` (the GPU path)."""
    xp = namespace(indices)
    koffs = xp.asarray(koffs, dtype=xp.int64)
    T = int(koffs.shape[0]) - 1
    n = int(koffs[-1])
    m = int(indptr.shape[0]) - 1
    # each nonzero's row (cupy's repeat takes no array of counts)
    row_of = xp.searchsorted(indptr, xp.arange(indices.shape[0]), side="right") - 1
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

    CPU workers: one pass of the numba row kernel straight into ``C`` (no
    temporaries).  GPU workers: cuSPARSE (cupyx's CSR @ dense) where it fits,
    on the rows a peer sent in one dtype; else the numba.cuda row kernel,
    which reads the local B tile in place through the tile's direct index
    (no gather of B's rows) and takes mixed dtypes.  Simulated GPU workers
    take the row kernel (their arrays are numpy).
    """
    tile = a[0]
    kind = device_kind()
    if kind == "gpu" and not b_full and _cusparse_fits(tile, b, C):
        prod = tile @ b
        if accumulate:
            C += prod
        else:
            C[...] = prod
        return
    xp = namespace(b, C)
    if b_full:
        idx = a[2] if len(a) > 2 and a[2] is not None else _direct_index(a)
    else:
        idx = tile.indices
    if idx.dtype != xp.int32 and b.shape[0] < 2**31:
        idx = idx.astype(xp.int32)
    indptr = tile.indptr if tile.indptr.dtype == xp.int64 else tile.indptr.astype(xp.int64)
    data = tile.data if tile.data.dtype == C.dtype else tile.data.astype(C.dtype)
    if b.dtype != C.dtype or not b.flags.c_contiguous:
        b = xp.ascontiguousarray(b, dtype=C.dtype)
    dist = _prefetch_distance(int(C.shape[1]), C.dtype.itemsize)
    if kind == "cpu":
        _FIXED_K.get(int(C.shape[1]), _spmm_nb)(indptr, idx, data, b, C, accumulate, dist)
        return
    from . import cuda as dev

    launch(dev._spmm_nb, int(C.shape[0]) * int(C.shape[1]), indptr, idx, data, b, C, accumulate, dist)


def _cusparse_fits(tile: Any, b: Any, C: Any) -> bool:
    """cuSPARSE's SpMM takes one float dtype for A, B and C and int32 indices."""
    return (tile.data.dtype == b.dtype == C.dtype and C.dtype.kind == "f" and tile.indices.dtype == np.int32
            and tile.nnz > 0)


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
    todo = [(kind, dt, k) for kind, dt, k in todo if (kind, dt.str, k) not in _WARM]
    if not todo:                            # the usual call: no 6 x 5 matrix to build
        return
    A = sp.random(6, 5, 0.5, format="csr", random_state=0)
    for kind, dt, k in todo:
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
            kern(t0.indptr.astype(np.int64), idx, t0.data, B, C, False, _prefetch_distance(k, dt.itemsize))
        _WARM.add((kind, dt.str, k))
