"""SPMD collectives between worker tasks, with no scheduler in the loop.

Dask places data and launches the group; after that the ranks talk directly
over the workers' own connections.  A worker plugin adds two handlers to every
worker (``wb_comms_deliver``, ``wb_comms_abort``); a rank's ``send`` is one RPC
to the peer worker, whose handler drops the payload into a per-group mailbox
that the peer's ``recv`` waits on.  This is the shape raft-dask's comms give
cuGraph/cuML, built on distributed's connection pool instead of NCCL/UCX-p2p
(on dask-cuda clusters with ``protocol="ucx"`` the same calls ride UCX, and
cupy payloads go through distributed's CUDA serializers).

Peers on the same host skip the socket for large payloads: the message carries
only the payload's layout (pickle protocol 5, buffers out of band) and the
receiver copies the buffers straight out of the sender's memory with Linux
cross-memory attach (``process_vm_readv``), as MPI's and UCX's CMA transports
do: one copy instead of a trip through two socket buffers.  The sender's
``send`` returns once the receiver holds its copy, so the sender may reuse its
buffer at once.  Each group tests the access at start and falls back to the
socket where it is not allowed.  Between processes on one host the rank
threads also skip the workers' event loops: each message goes straight down a
per-process Unix socket (the lane, ``workbench._samehost``), tens of
microseconds instead of a millisecond or two through ``rpc``; device payloads
and other hosts keep the ``rpc`` path.  ``WORKBENCH_COMMS_CMA=0`` turns CMA off;
``WORKBENCH_COMMS_CMA_MIN`` (bytes, default 1 MiB) sets the size from which it
is used.  Device (cupy) payloads always take the normal path.

Every wait has a timeout; a peer that fails broadcasts an abort so the rest of
the group fails fast, and the client-side launcher aborts the group when one of
its workers leaves the cluster.  Groups are reruns-from-inputs safe: nothing is
kept in worker globals after a group ends (a result kept for :func:`fetch_group`
only until the client has taken it).

:func:`fetch_group` takes the ranks' results straight from their workers as
they end (copied out of their memory on one host), without the scheduler's
word that the tasks finished; any failure falls back to :func:`wait_group`.

Examples
--------
>>> import numpy as np, workbench as wb
>>> def body(comm, x):
...     return comm.allreduce(np.full(3, comm.rank + x))
>>> with wb.cluster(n_workers=2, quiet=True) as client:     # doctest: +SKIP
...     wb.comms.spmd(body, [10, 10], client=client)
[array([21, 21, 21]), array([21, 21, 21])]
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import operator
import os
import pickle
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError
from typing import Any

import dask
import numpy as np

from . import _samehost
from ._samehost import (  # noqa: F401
    _CMA_MIN,
    _FAILED,
    _PROBE,
    _PULL_OK,
    _READV,
    RESULTS,
    _can_pull,
    _host_identity,
    _host_only,
    _offsets,
    _Outgoing,
    _Parcel,
    _read_remote,
)
from .cluster import quicken, quicken_scheduler, restore_allocator

__all__ = [
    "Comm",
    "CommsError",
    "CommsTimeoutError",
    "PeerFailedError",
    "WorkerLostError",
    "run_spmd",
    "spmd",
    "ensure_registered",
    "split_results",
    "wait_group",
    "gather_results",
    "fetch_group",
    "lost_workers",
    "DEFAULT_TIMEOUT",
]

#: Seconds any single wait may take (a peer may legitimately compute for a while
#: between messages).  Override with WORKBENCH_COMMS_TIMEOUT.
DEFAULT_TIMEOUT = float(os.environ.get("WORKBENCH_COMMS_TIMEOUT", "600"))

_PLUGIN_NAME = "workbench-comms"
#: Event topic on which a rank that returns ``(block, info)`` publishes ``info``:
#: it reaches the client ahead of the task's completion, saving a round trip.
_INFO_TOPIC = "workbench-spmd-info"


class CommsError(RuntimeError):
    """A collective could not complete."""


class CommsTimeoutError(CommsError):
    """A wait on a peer ran past its timeout."""


class PeerFailedError(CommsError):
    """Another rank of the group failed; this rank gave up early."""


class WorkerLostError(CommsError):
    """A worker holding a rank left the cluster while the group ran."""


# --------------------------------------------------------------------------
# Worker side: mailboxes and handlers
# --------------------------------------------------------------------------


class _GroupBox:
    __slots__ = ("cond", "queues", "abort")

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.queues: dict[tuple, collections.deque] = collections.defaultdict(collections.deque)
        self.abort: str | None = None


class _PostOffice:
    """Per-process mailboxes, one per rank of a live SPMD group that runs here.

    Boxes are keyed by (group, rank), so several ranks of one group may share a
    worker (partitions re-placed on fewer workers after one was lost).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.boxes: dict[tuple[str, int], _GroupBox] = {}
        self.closed: collections.OrderedDict[tuple[str, int], None] = collections.OrderedDict()
        self.aborted: collections.OrderedDict[str, str] = collections.OrderedDict()

    def box(self, group: str, rank: int) -> _GroupBox | None:
        with self.lock:
            if (group, rank) in self.closed:
                return None  # late message for a finished rank: drop it
            b = self.boxes.get((group, rank))
            if b is None:
                b = self.boxes[(group, rank)] = _GroupBox()
                b.abort = self.aborted.get(group)  # an abort may arrive before the rank starts
            return b

    def abort(self, group: str, reason: str) -> None:
        with self.lock:
            self.aborted.setdefault(group, reason)
            while len(self.aborted) > 4096:
                self.aborted.popitem(last=False)
            boxes = [b for (g, _), b in self.boxes.items() if g == group]
        for b in boxes:
            with b.cond:
                if b.abort is None:
                    b.abort = reason
                b.cond.notify_all()

    def close(self, group: str, rank: int) -> None:
        with self.lock:
            self.boxes.pop((group, rank), None)
            self.closed[(group, rank)] = None
            while len(self.closed) > 4096:
                self.closed.popitem(last=False)


_POST = _PostOffice()


def _deliver(group: str, src: int, tag: Any, payload: Any = None, dst: int = 0) -> str:
    box = _POST.box(group, dst)
    if box is not None:
        with box.cond:
            box.queues[(src, _freeze(tag))].append(payload)
            box.cond.notify_all()
    return "OK"


def _abort(group: str, reason: str) -> str:
    _POST.abort(group, reason)
    return "OK"


def _freeze(tag: Any) -> Any:
    # msgpack turns tuples into lists; keys must be hashable and equal on both ends
    if isinstance(tag, list | tuple):
        return tuple(_freeze(t) for t in tag)
    return tag


_WORKER: Any = None  # this process's worker, once a group has run here


def _install_handlers(worker: Any) -> None:
    global _WORKER
    _WORKER = worker
    async def deliver(group: str, src: int, tag: Any, payload: Any = None, dst: int = 0) -> str:
        if isinstance(payload, _Parcel):
            await _pull_and_deliver(worker, group, src, tag, payload, dst)
            return "OK"
        return _deliver(group, src, tag, payload, dst)

    async def take(key: str, parcel: _Parcel) -> dict:
        return await _samehost.take_parcel(worker, key, parcel)

    worker.handlers.setdefault("wb_comms_deliver", deliver)
    worker.handlers.setdefault("wb_comms_abort", _abort)
    worker.handlers.setdefault("wb_comms_pulled", _pulled)
    worker.handlers.setdefault("wb_comms_result", _samehost.serve_result)
    worker.handlers.setdefault("wb_comms_result_taken", RESULTS.drop)
    worker.handlers.setdefault("wb_comms_take", take)
    _quiet_input_errors()


#: Keys of ranks that failed on their input (a ValueError/TypeError, e.g. a singular system found
#: on the worker) or gave up because a peer failed: the client raises that one error, so the worker
#: does not also log the rank as a failed task with its traceback.
_QUIET_KEYS: set[str] = set()


class _QuietRankErrors:
    """Logging filter on ``distributed.worker`` that drops "Compute Failed" for :data:`_QUIET_KEYS`."""

    def filter(self, record: Any) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        if args and isinstance(record.msg, str) and record.msg.startswith("Compute Failed") \
                and str(args[0]) in _QUIET_KEYS:
            _QUIET_KEYS.discard(str(args[0]))
            return False
        return True


def _quiet_input_errors() -> None:
    import logging

    log = logging.getLogger("distributed.worker")
    if not any(isinstance(f, _QuietRankErrors) for f in log.filters):
        log.addFilter(_QuietRankErrors())


class _CommsPlugin:
    """Worker plugin for every (new) worker: the comms handlers, a quick stream, glibc's adaptive allocator."""

    name = _PLUGIN_NAME
    idempotent = True

    def setup(self, worker: Any) -> None:
        _install_handlers(worker)
        quicken(getattr(worker, "batched_stream", None))
        restore_allocator()

    def teardown(self, worker: Any) -> None:
        pass


class _LostPins:
    """Scheduler plugin: a task pinned (``allow_other_workers=False``) to workers that all left
    the cluster may run elsewhere, instead of waiting for them forever.

    A plain task is then recomputed on a live worker, as Dask recomputes any lost key; an SPMD
    rank cannot run without its group and fails at once (:func:`_rank_entry` checks its
    address), so a wait on a result lost with its worker ends with an error, never a hang.
    """

    name = "workbench-lost-pins"
    idempotent = True

    def __init__(self) -> None:
        self.scheduler: Any = None

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        _samehost.quiet_placed_losses()
        quicken_scheduler(scheduler)

    def add_worker(self, scheduler: Any, worker: str) -> None:
        quicken(scheduler.stream_comms.get(worker))

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        if finish == "no-worker" and self.scheduler is not None:
            self.scheduler.loop.add_callback(self._release, [key])

    def remove_worker(self, scheduler: Any, worker: str, **kwargs: Any) -> None:
        self.scheduler = scheduler
        scheduler.loop.add_callback(self._release, [ts.key for ts in list(scheduler.unrunnable)])

    def _release(self, keys: list) -> None:
        s, recs = self.scheduler, {}
        for key in keys:
            ts = s.tasks.get(key)
            if ts is None or ts.state != "no-worker" or ts.loose_restrictions or not ts.worker_restrictions:
                continue
            if not any(w in s.workers for w in ts.worker_restrictions):
                ts.loose_restrictions = True
                recs[key] = "processing"
        if recs:
            s.transitions(recs, stimulus_id=f"workbench-lost-pins-{time.time()}")


def ensure_registered(client: Any) -> None:
    """Install the comms handlers on the client's workers (once per client)."""
    if getattr(client, "_workbench_comms", False):
        return
    from distributed.diagnostics.plugin import SchedulerPlugin, WorkerPlugin

    plugin_cls = type("WorkbenchCommsPlugin", (_CommsPlugin, WorkerPlugin), {})
    client.register_plugin(plugin_cls(), name=_PLUGIN_NAME)
    try:
        client.register_plugin(type("WorkbenchLostPins", (_LostPins, SchedulerPlugin), {})(), name=_LostPins.name)
    except Exception:  # a scheduler without workbench: pinned results of a lost worker wait for it
        pass
    infos: dict = {}

    def on_info(event: tuple) -> None:
        msg = event[1]
        infos[(msg["group"], msg["rank"])] = msg["info"]

    client._workbench_infos = infos
    client._workbench_groups = set()  # worker-address tuples that have completed a group
    client.subscribe_topic(_INFO_TOPIC, on_info)
    quicken(client.scheduler_comm)   # and the scheduler's stream to this client (the plugin saw the others)
    with contextlib.suppress(Exception):   # a scheduler that refuses run_on_scheduler keeps dask's intervals
        client.run_on_scheduler(quicken_scheduler)
    client._workbench_comms = True


# --------------------------------------------------------------------------
# Same-host transports (workbench._samehost): the receiver pulls large payloads
# from the sender's memory (cross-memory attach); rank threads write small ones
# straight to the peer's lane
# --------------------------------------------------------------------------


_PEERS_SEEN: dict[tuple, tuple] = {}  # (group's worker addresses, rank) -> (pull peers, lanes)
_OUTBOX: dict[str, _Outgoing] = {}   # payloads waiting for their receivers to pull them
_OUTBOX_LOCK = threading.Lock()


def _pull_into_box(group: str, src: int, tag: Any, parcel: _Parcel, dst: int) -> str | None:
    """Copy a parcel's payload out of the sender and deliver it; the error, if the copy failed."""
    if _POST.box(group, dst) is None:
        return None
    try:
        obj = parcel.pull()
    except Exception as e:  # the sender falls back to the socket
        return f"{e.__class__.__name__}: {e}"
    _deliver(group, src, tag, obj, dst)
    return None


async def _pull_and_deliver(worker: Any, group: str, src: int, tag: Any, parcel: _Parcel, dst: int) -> None:
    error = await asyncio.get_running_loop().run_in_executor(_samehost.pull_pool(), _pull_into_box,
                                                             group, src, tag, parcel, dst)
    try:
        await worker.rpc(parcel.sender).wb_comms_pulled(key=parcel.key, receiver=dst,
                                                        error=error, reply=False)
    except OSError:
        pass  # the sender is gone; its group has failed anyway


def _lane_message(msg: tuple) -> None:
    """What a lane reader thread does with a frame: deliver, or pull then tell the sender."""
    if msg[0] == "pulled":
        _pulled(*msg[1:])
        return
    if _samehost.result_message(msg):   # fetch_group's results, and the client's word that it took one
        return
    _, group, src, dst, tag, payload = msg
    if not isinstance(payload, _Parcel):
        _deliver(group, src, tag, payload, dst)
        return

    def pull_and_reply() -> None:  # off the reader thread, which must never block on a write
        error = _pull_into_box(group, src, tag, payload, dst)
        if not _samehost.send(payload.lane, ("pulled", payload.key, dst, error), DEFAULT_TIMEOUT) \
                and _WORKER is not None:  # the lane broke since: tell the sender the slow way
            asyncio.run_coroutine_threadsafe(
                _WORKER.rpc(payload.sender).wb_comms_pulled(key=payload.key, receiver=dst, error=error, reply=False),
                _WORKER.loop.asyncio_loop)

    _samehost.pull_pool().submit(pull_and_reply)


def _pulled(key: str, receiver: int, error: str | None = None) -> str:
    with _OUTBOX_LOCK:
        out = _OUTBOX.get(key)
        if out is None:
            return "OK"
        if error is not None:
            out.failed.append(receiver)
        out.pending -= 1
        if out.pending <= 0:
            out.done.set()
    return "OK"


# --------------------------------------------------------------------------
# The communicator a rank sees
# --------------------------------------------------------------------------


def nbytes(obj: Any) -> int:
    """Approximate payload size of ``obj`` in bytes (arrays exact)."""
    if obj is None:
        return 0
    nb = getattr(obj, "nbytes", None)
    if isinstance(nb, int | np.integer):
        return int(nb)
    if hasattr(obj, "indptr") and hasattr(obj, "data"):  # CSR/CSC
        return int(obj.data.nbytes + obj.indices.nbytes + obj.indptr.nbytes)
    if isinstance(obj, list | tuple):
        return sum(nbytes(o) for o in obj)
    if isinstance(obj, dict):
        return sum(nbytes(k) + nbytes(v) for k, v in obj.items())
    if isinstance(obj, bytes | bytearray | memoryview | str):
        return len(obj)
    return 8


class Comm:
    """A rank's view of its SPMD group.

    Attributes
    ----------
    rank, size : int
        This rank and the number of ranks.
    stats : dict
        ``bytes_sent``, ``messages_sent``, ``messages_by_lane`` (the part that
        went down a same-host lane, not through the event loop), ``bytes_pulled``
        (the part that same-host peers copied out of this process's memory),
        ``seconds_waiting`` (time blocked in receives), accumulated over the
        group's life.

    Collectives must be called by every rank of the (sub-)communicator in the
    same order.  Payloads are numpy/cupy arrays or any picklable object.
    """

    def __init__(self, group: str, rank: int, addresses: Sequence[str], timeout: float = DEFAULT_TIMEOUT,
                 *, _ranks: Sequence[int] | None = None, _name: str = "", _stats: dict | None = None):
        from distributed import get_worker

        self.group = group
        self.timeout = float(timeout)
        self._addresses = list(addresses)          # by global rank
        self._ranks = list(_ranks) if _ranks is not None else list(range(len(addresses)))
        self._global_rank = rank
        self.rank = self._ranks.index(rank)
        self.size = len(self._ranks)
        self._name = _name
        self._seq = 0
        self._p2p_out: dict = {}
        self._p2p_in: dict = {}
        self._worker = get_worker()
        self._loop = self._worker.loop.asyncio_loop
        self._box = _POST.box(group, rank)
        self._pull_peers: set[int] = set()  # global ranks that can pull from this process
        self._lanes: dict[int, str] = {}    # global rank -> its process's lane (same host)
        self._lane = _samehost.listen(_lane_message)
        self.stats = _stats if _stats is not None else {"bytes_sent": 0, "messages_sent": 0,
                                                       "bytes_pulled": 0, "seconds_waiting": 0.0,
                                                       "messages_by_lane": 0}

    # ---- point to point -------------------------------------------------

    def send(self, dst: int, obj: Any, tag: Any = 0) -> None:
        """Send ``obj`` to rank ``dst`` (returns once the message is on the wire)."""
        n = self._p2p_out[(dst, tag)] = self._p2p_out.get((dst, tag), 0) + 1
        self._send_many([(dst, obj)], ("p", self._name, tag, n))

    def recv(self, src: int, tag: Any = 0, timeout: float | None = None) -> Any:
        """Receive the next object rank ``src`` sent with ``tag`` (in send order)."""
        n = self._p2p_in[(src, tag)] = self._p2p_in.get((src, tag), 0) + 1
        return self._recv(src, ("p", self._name, tag, n), timeout)

    def sendrecv(self, obj: Any, dst: int, src: int, tag: Any = 0) -> Any:
        """Send to ``dst`` and receive from ``src`` in one step."""
        t = self._next_tag("sr", tag)
        self._send_many([(dst, obj)], t)
        return self._recv(src, t)

    # ---- collectives ----------------------------------------------------

    def barrier(self) -> None:
        """Block until every rank has reached the barrier."""
        self.allgather(None)

    def bcast(self, obj: Any, root: int = 0) -> Any:
        """Broadcast ``obj`` from ``root`` to every rank."""
        t = self._next_tag("bcast")
        if self.rank == root:
            self._send_many([(r, obj) for r in range(self.size) if r != root], t)
            return obj
        return self._recv(root, t)

    def allgather(self, obj: Any) -> list:
        """Every rank's ``obj``, as a list indexed by rank."""
        t = self._next_tag("ag")
        self._send_many([(r, obj) for r in range(self.size) if r != self.rank], t)
        return [obj if r == self.rank else self._recv(r, t) for r in range(self.size)]

    def gather(self, obj: Any, root: int = 0) -> list | None:
        """Every rank's ``obj`` at ``root`` (a list by rank); None elsewhere."""
        t = self._next_tag("gather")
        if self.rank != root:
            self._send_many([(root, obj)], t)
            return None
        return [obj if r == root else self._recv(r, t) for r in range(self.size)]

    def allreduce(self, value: Any, op: str | Callable = "sum") -> Any:
        """Reduce ``value`` over ranks with ``op`` ("sum", "max", "min",
        "prod", "or", "and" or a binary callable); every rank gets the result.

        Ranks combine in rank order, so floating-point results are bitwise
        identical on all ranks.
        """
        f = _OPS.get(op, op) if isinstance(op, str) else op
        if isinstance(op, str) and op not in _OPS:
            raise ValueError(f"unknown reduction op {op!r}; use one of {sorted(_OPS)} or a callable")
        parts = self.allgather(value)
        out = parts[0]
        for p in parts[1:]:
            out = f(out, p)
        return out

    def alltoall(self, parts: Sequence[Any]) -> list:
        """Send ``parts[r]`` to rank r; return what each rank sent here, by rank."""
        if len(parts) != self.size:
            raise ValueError(f"alltoall needs one part per rank ({self.size}), got {len(parts)}")
        t = self._next_tag("a2a")
        self._send_many([(r, parts[r]) for r in range(self.size) if r != self.rank], t)
        return [parts[r] if r == self.rank else self._recv(r, t) for r in range(self.size)]

    alltoallv = alltoall  # parts may be arrays of any length

    def neighbor_exchange(self, sends: dict[int, Any], recv_from: Sequence[int] | None = None) -> dict[int, Any]:
        """Send ``sends[r]`` to each neighbour r and receive from ``recv_from``
        (default: the same ranks).  A halo exchange in one call."""
        recv_from = list(sends) if recv_from is None else list(recv_from)
        t = self._next_tag("nbr")
        self._send_many([(r, v) for r, v in sends.items() if r != self.rank], t)
        return {r: (sends[r] if r == self.rank else self._recv(r, t)) for r in recv_from}

    def split(self, color: int, key: int | None = None) -> Comm:
        """Sub-communicator of the ranks that pass the same ``color``
        (ordered by ``key``, default rank), like ``MPI_Comm_split``."""
        key = self.rank if key is None else key
        table = self.allgather((color, key, self._global_rank))
        members = sorted((k, g) for c, k, g in table if c == color)
        sub = Comm.__new__(Comm)
        sub.__dict__.update(self.__dict__)
        sub._ranks = [g for _, g in members]
        sub.rank = sub._ranks.index(self._global_rank)
        sub.size = len(sub._ranks)
        sub._name = f"{self._name}/{self._seq}:{color}"
        sub._seq = 0
        sub._p2p_out, sub._p2p_in = {}, {}
        return sub

    # ---- internals --------------------------------------------------------

    def _next_tag(self, kind: str, extra: Any = None) -> tuple:
        self._seq += 1
        return ("c", self._name, kind, self._seq, extra)

    def _send_many(self, items: list[tuple[int, Any]], tag: tuple) -> None:
        if not items:
            return
        remote: list[tuple[int, Any]] = []  # (global rank, payload)
        by_pull: dict[int, tuple[Any, list[int]]] = {}  # id(obj) -> (obj, receiving global ranks)
        for dst, obj in items:
            if not 0 <= dst < self.size:
                raise ValueError(f"rank {dst} out of range for a group of {self.size}")
            if dst == self.rank:
                _deliver(self.group, self._global_rank, tag, obj, self._global_rank)
                continue
            g = self._ranks[dst]
            size = nbytes(obj)
            self.stats["bytes_sent"] += size
            self.stats["messages_sent"] += 1
            if self._addresses[g] == self._worker.address:
                # a rank of this group on this same worker: a private copy, no socket
                _deliver(self.group, self._global_rank, tag, pickle.loads(pickle.dumps(obj, protocol=5)), g)
            elif g in self._pull_peers and size >= _CMA_MIN and _host_only(obj):
                by_pull.setdefault(id(obj), (obj, []))[1].append(g)
            else:
                remote.append((g, obj))
        if not remote and not by_pull:
            return
        self._check_abort()
        outgoing = []
        for obj, ranks in by_pull.values():  # the same object to several peers is packed once
            key = f"{self.group}-{uuid.uuid4().hex}"
            packed = _Parcel.pack(obj, key, self._worker.address, len(ranks))
            if packed is None:
                remote += [(g, obj) for g in ranks]
                continue
            parcel, out = packed
            with _OUTBOX_LOCK:
                _OUTBOX[key] = out
            parcel.lane = self._lane if all(g in self._lanes for g in ranks) else None
            outgoing.append((key, out, obj))
            remote += [(g, parcel) for g in ranks]
        deadline = time.monotonic() + self.timeout
        try:
            self._post(remote, tag, deadline)
            fallback = []
            for _key, out, obj in outgoing:
                # MPI semantics: the buffer is the caller's again once send returns
                if not self._wait_abortable(out.done.wait, deadline):
                    raise CommsTimeoutError(f"rank {self.rank} of group {self.group}: a peer did not pull "
                                            f"a {nbytes(obj)}-byte message within {self.timeout:.0f}s")
                fallback += [(g, obj) for g in out.failed]
                self.stats["bytes_pulled"] += nbytes(obj) * (out.receivers - len(out.failed))
            if fallback:
                self._pull_peers -= {g for g, _ in fallback}
                _PEERS_SEEN[(tuple(self._addresses), self._global_rank)] = (frozenset(self._pull_peers),
                                                                            dict(self._lanes))
                self._post(fallback, tag, deadline)
        finally:
            with _OUTBOX_LOCK:
                for key, _, _ in outgoing:
                    _OUTBOX.pop(key, None)

    def _wait_abortable(self, wait: Callable[[float], Any], deadline: float) -> Any:
        """``wait(seconds)`` in slices until it returns true or the deadline passes; an abort
        of the group (a peer failed, its worker left) ends the wait at once."""
        while True:
            left = deadline - time.monotonic()
            got = wait(max(0.0, min(left, 0.25)))
            if got or left <= 0.25:
                return got
            self._check_abort()

    def _post(self, remote: list[tuple[int, Any]], tag: tuple, deadline: float) -> None:
        if self._lanes:
            remote = [(g, obj) for g, obj in remote if not self._by_lane(g, obj, tag, deadline)]
        if not remote:
            return
        fut = asyncio.run_coroutine_threadsafe(self._asend(remote, tag), self._loop)

        def done(seconds: float) -> bool:
            try:
                fut.result(timeout=seconds)
            except TimeoutError:
                return False
            return True

        try:
            if not self._wait_abortable(done, deadline):
                raise CommsTimeoutError(
                    f"rank {self.rank} of group {self.group}: send of {tag[2:4] if len(tag) > 3 else tag} "
                    f"timed out after {self.timeout:.0f}s")
        except OSError as e:
            raise PeerFailedError(f"rank {self.rank} of group {self.group}: a peer is unreachable ({e})") from e
        finally:
            if not fut.done():
                fut.cancel()

    def _by_lane(self, g: int, obj: Any, tag: tuple, deadline: float) -> bool:
        """Send ``obj`` to global rank ``g`` over the same-host lane; False: take the rpc path."""
        address = self._lanes.get(g)
        if address is None or not (isinstance(obj, _Parcel) and obj.lane or _host_only(obj)):
            return False
        sent = _samehost.send(address, ("deliver", self.group, self._global_rank, g, tag, obj),
                              max(deadline - time.monotonic(), 1.0))
        self.stats["messages_by_lane"] += sent
        return sent

    async def _asend(self, remote: list[tuple[int, Any]], tag: tuple) -> None:
        from distributed.protocol import to_serialize

        async def one(g: int, obj: Any) -> None:
            # No reply: tags are unique per message, so delivery order never matters
            # and the sender does not pay a second network hop per message.
            await self._worker.rpc(self._addresses[g]).wb_comms_deliver(
                group=self.group, src=self._global_rank, dst=g, tag=tag, payload=to_serialize(obj), reply=False)

        await asyncio.gather(*(one(g, o) for g, o in remote))

    def _recv(self, src: int, tag: tuple, timeout: float | None = None) -> Any:
        if not 0 <= src < self.size:
            raise ValueError(f"rank {src} out of range for a group of {self.size}")
        key = (self._ranks[src], _freeze(tag))
        timeout = self.timeout if timeout is None else timeout
        box = self._box
        t0 = time.perf_counter()
        deadline = t0 + timeout
        with box.cond:
            while True:
                q = box.queues.get(key)
                if q:
                    obj = q.popleft()
                    if not q:
                        del box.queues[key]
                    break
                if box.abort is not None:
                    raise PeerFailedError(f"rank {self.rank} of group {self.group} aborted: {box.abort}")
                left = deadline - time.perf_counter()
                if left <= 0:
                    raise CommsTimeoutError(
                        f"rank {self.rank} of group {self.group} waited {timeout:.0f}s for rank {src} "
                        f"(tag {tag[2] if len(tag) > 2 else tag}); the peer is slow, stuck or dead")
                box.cond.wait(min(left, 1.0))
        self.stats["seconds_waiting"] += time.perf_counter() - t0
        return obj

    def _check_abort(self) -> None:
        if self._box.abort is not None:
            raise PeerFailedError(f"rank {self.rank} of group {self.group} aborted: {self._box.abort}")

    def _abort_peers(self, reason: str) -> None:
        _POST.abort(self.group, reason)  # ranks sharing this worker

        async def go():
            async def one(addr):
                try:
                    await asyncio.wait_for(self._worker.rpc(addr).wb_comms_abort(group=self.group, reason=reason), 5)
                except Exception:
                    pass
            await asyncio.gather(*(one(a) for a in set(self._addresses) if a != self._worker.address))

        try:
            asyncio.run_coroutine_threadsafe(go(), self._loop).result(timeout=10)
        except Exception:
            pass


_OPS: dict[str, Callable] = {
    "sum": operator.add,
    "prod": operator.mul,
    "max": lambda a, b: np.maximum(a, b) if hasattr(a, "shape") else max(a, b),
    "min": lambda a, b: np.minimum(a, b) if hasattr(a, "shape") else min(a, b),
    "or": operator.or_,
    "and": operator.and_,
}


# --------------------------------------------------------------------------
# Launching a group
# --------------------------------------------------------------------------


def _rank_entry(fn: Callable, group: str, rank: int, addresses: list[str], timeout: float,
                rank_arg: Any, args: tuple, kwargs: dict, publish_info: bool = False, known: bool = False,
                key: Any = None, fetch: bool | dict = False) -> Any:
    from distributed import get_worker, secede

    key = str(key or f"spmd-{group}-{rank}")  # the task's key as the worker's log names it
    worker = get_worker()
    _install_handlers(worker)
    if worker.address != addresses[rank]:
        _QUIET_KEYS.add(key)  # the client reports the loss (and recovers from it)
        raise WorkerLostError(f"rank {rank} of SPMD group {group} ran on {worker.address}, not on "
                              f"{addresses[rank]}: its worker was lost, and a rank cannot rerun without "
                              f"its group (rerun the call that launched it)")
    # Leave the worker's thread pool: the rank blocks on peers for its whole life.
    secede()
    comm = Comm(group, rank, addresses, timeout)
    try:
        comm._pull_peers, comm._lanes = _pull_peers(comm, known)
        comm.stats.update(bytes_sent=0, messages_sent=0, messages_by_lane=0)  # count the kernel's traffic only
        out = fn(comm, rank_arg, *args, **kwargs)
        if publish_info:
            if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict)):
                raise TypeError(f"{getattr(fn, '__name__', fn)} must return (block, info dict) "
                                f"with publish_info=True, got {type(out).__name__}")
            worker.log_event(_INFO_TOPIC, {"group": group, "rank": rank, "info": pickle.dumps(out[1], protocol=5)})
            out = out[0]
        if fetch and not _samehost.send_result(fetch, group, rank, out, timeout):
            _samehost.keep_result(fetch, group, rank, out, timeout)
        return out
    except PeerFailedError:
        if fetch:
            _samehost.keep_result(fetch, group, rank, _FAILED, timeout)
        _QUIET_KEYS.add(key)  # the peer's own error is the one that counts
        raise
    except BaseException as e:
        if fetch:
            _samehost.keep_result(fetch, group, rank, _FAILED, timeout)
        comm._abort_peers(f"rank {rank} failed with {e.__class__.__name__}: {e}")
        if isinstance(e, ValueError | TypeError):  # bad input found on the worker: the client reports it
            _QUIET_KEYS.add(key)
        raise
    finally:
        _POST.close(group, rank)


def _pull_peers(comm: Comm, known: bool = False) -> tuple[set[int], dict[int, str]]:
    """Ranks that can copy straight out of this rank's memory (same host, access allowed), and
    the lanes of the ranks' processes on this host (global rank -> address).

    Found with one ``allgather`` the first time a set of workers forms a group, then remembered
    per process: the client passes ``known`` for a set of workers that has completed a group, and no
    rank then communicates here (every rank decides alike, so none waits in a collective alone).  A
    rank without the memory (its worker restarted at the same address) takes no pull peers and no
    lanes: its sends go over the network.  A stale entry only costs a failed pull or a refused lane,
    which fall back the same way.
    """
    key = (tuple(comm._addresses), comm._global_rank)
    if known:
        pull, lanes = _PEERS_SEEN.get(key, ((), {}))
        return set(pull), dict(lanes)
    found = _find_pull_peers(comm)
    _PEERS_SEEN[key] = (frozenset(found[0]), dict(found[1]))
    return found


def _find_pull_peers(comm: Comm) -> tuple[set[int], dict[int, str]]:
    me = _host_identity()
    here = _samehost.host_key()
    table = comm.allgather((me, sorted(_PULL_OK), here, comm._lane))
    lanes = {comm._ranks[r]: lane for r, (_, _, key, lane) in enumerate(table)
             if r != comm.rank and lane is not None and here is not None and key == here
             and comm._addresses[comm._ranks[r]] != comm._worker.address}
    near = [] if me is None else [r for r, (ident, *_) in enumerate(table)
                                   if r != comm.rank and ident is not None and ident[0] == me[0]]
    # a second round only when some same-host pair has not been tried by both
    # processes yet (decided from the table alone, so every rank takes it or not)
    pairs = [(a, b) for a, (ia, *_) in enumerate(table) for b, (ib, *_) in enumerate(table)
             if a != b and ia is not None and ib is not None and ia[0] == ib[0]]
    if all(table[a][0][1] in table[b][1] for a, b in pairs):
        return set(near), lanes
    can = comm.allgather([r for r in near if _can_pull(table[r][0][1], table[r][0][2])])
    return {r for r in near if comm.rank in can[r]}, lanes


def run_spmd(fn: Callable, rank_args: Sequence[Any], *args: Any, client: Any = None,
             workers: Sequence[str] | None = None, timeout: float = DEFAULT_TIMEOUT,
             name: str | None = None, publish_info: bool = False,
             chunk_index: Sequence[tuple[int, ...] | None] | None = None, fetch: bool = False,
             **kwargs: Any) -> list:
    """Launch ``fn(comm, rank_args[r], *args, **kwargs)`` as one task per rank.

    Rank r runs on ``workers[r]`` (default: every worker, sorted).  Futures
    inside ``rank_args`` are resolved on the rank's worker, so partitions
    pinned there never move.  Returns the ranks' futures without waiting
    (results stay on the workers); see :func:`spmd` to wait and gather.

    With ``publish_info=True`` ``fn`` returns ``(block, info)``: the rank's
    future holds just ``block`` and ``info`` (a small dict) travels to the
    client as an event ahead of the task's completion, so
    :func:`split_results` needs no further round trip.

    With ``chunk_index``, rank r's block is chunk ``chunk_index[r]`` of a dask
    array (``None``: of none): its task key is ``("spmd-<group>", *index)``,
    a dask array's chunk key, so :func:`workbench.partition.array_of` makes
    the array from the futures themselves (no alias task runs when it is
    persisted or computed).

    With ``fetch=True`` each rank also keeps its result for :func:`fetch_group`,
    which takes it straight from the rank's worker.
    """
    from .cluster import default_client, worker_addresses

    client = default_client(client)
    ensure_registered(client)
    addresses = list(workers) if workers is not None else worker_addresses(client)
    if len(rank_args) != len(addresses):
        raise ValueError(f"rank_args has {len(rank_args)} entries for {len(addresses)} workers")
    group = f"{name or getattr(fn, '__name__', 'spmd')}-{uuid.uuid4().hex[:12]}"
    known = tuple(addresses) in client._workbench_groups
    if chunk_index is not None and len(chunk_index) != len(addresses):
        raise ValueError(f"chunk_index has {len(chunk_index)} entries for {len(addresses)} workers")
    keys = [f"spmd-{group}-{r}" if chunk_index is None or chunk_index[r] is None
            else (f"spmd-{group}", *(int(i) for i in chunk_index[r])) for r in range(len(addresses))]
    # one message to the scheduler for the whole group (a submit per rank reached it ~1-4 ms apart, and
    # every rank waits for the last); each rank pinned to its worker by a per-key annotation
    size = len(addresses)
    # where a rank sends its result to: this process's lane (else True: it keeps it for the client to ask)
    to = (_samehost.expect_results(group, size, _lane_message) or True) if fetch else False
    with dask.annotate(workers={k: [a] for k, a in zip(keys, addresses, strict=True)}.get):
        futures = client.map(_rank_entry, [fn] * size, [group] * size, range(size), [addresses] * size,
                             [timeout] * size, list(rank_args), [args] * size, [kwargs] * size,
                             [publish_info] * size, [known] * size, keys, [to] * size, key=keys, pure=False)
    futures_group = _SPMDFutures(futures, group, addresses, client)
    futures_group.published = publish_info
    futures_group.fetch = fetch
    futures_group.timeout = timeout
    futures_group.inputs = _futures_in((rank_args, args, kwargs))
    return futures_group


def _futures_in(obj: Any, limit: int = 10_000) -> list:
    """The distributed Futures inside ``obj`` (lists, tuples, dicts, a few levels deep)."""
    from distributed import Future

    out: list = []
    stack, seen = [(obj, 0)], 0
    while stack and seen < limit:
        o, depth = stack.pop()
        seen += 1
        if isinstance(o, Future):
            out.append(o)
        elif depth < 4 and isinstance(o, list | tuple):
            stack += [(x, depth + 1) for x in o if isinstance(x, Future | list | tuple | dict)]
        elif depth < 4 and isinstance(o, dict):
            stack += [(x, depth + 1) for x in o.values() if isinstance(x, Future | list | tuple | dict)]
    return out


class _SPMDFutures(list):
    """The ranks' futures, plus the group's identity for :func:`wait_group`."""

    def __init__(self, futures, group, addresses, client):
        super().__init__(futures)
        self.group = group
        self.addresses = addresses
        self.client = client
        self.published = False
        self.fetch = False      # the ranks keep their results for fetch_group
        self.timeout = DEFAULT_TIMEOUT
        self.inputs: list = []  # futures the ranks take as arguments


#: Futures in these states will not become results without a worker that is gone
#: (scattered data of a dead worker is cancelled; a pinned task's result is lost).
_DEAD_STATES = ("lost", "cancelled")


def lost_workers(addresses: Sequence[str], client: Any) -> list[str]:
    """The ``addresses`` that are no longer workers of the cluster (one scheduler round trip)."""
    from .cluster import worker_addresses

    alive = worker_addresses(client)
    client._workbench_alive = alive  # what recovery compares against after a failure
    return sorted({a for a in addresses if a not in set(alive)})


def _loss(futures: _SPMDFutures, ask: bool = True) -> str | None:
    """Why the group cannot finish because something is gone, or None."""
    dead = [f.key for f in futures.inputs if f.status in _DEAD_STATES]
    if dead:
        return f"input partition(s) {dead[:4]}{' ...' if len(dead) > 4 else ''} were lost with their worker"
    lost = lost_workers(futures.addresses, futures.client) if ask else []
    return f"worker(s) {lost} left the cluster" if lost else None


def _fail_group(futures: _SPMDFutures, reason: str) -> None:
    """Free every rank still running (abort), drop the group's futures and what they published."""
    _abort_group(futures, reason)
    for f in futures:
        f.cancel()
    _forget_infos(futures)


def wait_group(futures: _SPMDFutures, poll: float = 0.5) -> None:
    """Wait for every rank; fail fast (and abort the rest) when a rank errors
    or a rank's worker leaves the cluster.

    Raises
    ------
    WorkerLostError
        A worker of the group left the cluster, or a partition the ranks take
        as input was lost with its worker.  The surviving ranks are aborted.
    Exception
        The first rank's own error (not the peer failures it caused).

    A ``KeyboardInterrupt`` while waiting aborts and cancels the group, so the
    cluster stays usable.
    """
    client = futures.client
    pending = list(futures)
    last_check = time.monotonic()
    try:
        while pending:
            pending = _still_pending(pending, poll, "FIRST_COMPLETED")
            if any(f.status == "error" for f in futures):
                if pending:
                    _abort_group(futures, "a peer rank raised")
                break
            if any(f.status == "cancelled" for f in futures):  # Dask dropped a rank whose input was lost
                why = _loss(futures)
                _fail_group(futures, why or "a rank was cancelled")
                raise (WorkerLostError if why else CommsError)(f"SPMD group {futures.group}: "
                                                               f"{why or 'a rank was cancelled'}")
            if pending:
                ask = time.monotonic() - last_check >= poll
                why = _loss(futures, ask)
                last_check = time.monotonic() if ask else last_check
                if why:
                    _fail_group(futures, why)
                    raise WorkerLostError(f"SPMD group {futures.group}: {why}")
    except (CommsError, KeyboardInterrupt, SystemExit, asyncio.CancelledError) as e:
        if not isinstance(e, WorkerLostError):
            _fail_group(futures, f"the client stopped waiting ({e.__class__.__name__})")
        raise
    failed = [f for f in futures if f.status == "error"]
    if not failed:
        client._workbench_groups.add(tuple(futures.addresses))   # every rank remembers its pull peers
        return

    def cause_of(failed: list) -> Any:
        return next((f for f in failed if not isinstance(f.exception(), PeerFailedError)), failed[0])

    # Re-raise the cause, not the peers it aborted (whose errors may reach the client first).  A peer's
    # death shows first as comms failures of the ranks that talked to it, and the scheduler may learn
    # of it a moment later: look again for a while before calling it the ranks' own error.
    cause, why = cause_of(failed), _loss(futures)
    deadline = time.monotonic() + (10.0 if pending else 2.0)
    while why is None and isinstance(cause.exception(), CommsError) and time.monotonic() < deadline:
        if pending:
            pending = _still_pending(pending, 0.5, "ALL_COMPLETED")
            if not pending:  # every rank has ended: the short look a finished group gets, not the 10 s
                deadline = min(deadline, time.monotonic() + 2.0)
        else:
            time.sleep(0.25)
        cause, why = cause_of([f for f in futures if f.status == "error"]), _loss(futures)
    if why:
        exc = cause.exception()
        _fail_group(futures, why)
        raise WorkerLostError(f"SPMD group {futures.group}: {why}") from exc
    _forget_infos(futures)
    cause.result()


def _still_pending(futures: list, timeout: float, return_when: str) -> list:
    """``distributed.wait`` that returns the futures not done yet instead of raising on timeout."""
    from distributed import wait

    try:
        return list(wait(futures, timeout=timeout, return_when=return_when).not_done)
    except CancelledError:  # a future was cancelled (its input was lost with a worker): the caller looks why
        return [f for f in futures if not f.done()]
    except TimeoutError as e:
        # the timeout's traceback holds distributed's frames, which hold the futures:
        # cut it, or the results stay pinned on the workers until a gc cycle
        e.__traceback__ = e.__context__ = None
        return list(futures)


def _forget_infos(futures: _SPMDFutures) -> None:
    """Drop what the ranks of a failed group published: split_results never runs for it."""
    posted = getattr(futures.client, "_workbench_infos", None)
    if posted is not None and futures.published:
        for r in range(len(futures)):
            posted.pop((futures.group, r), None)


def _abort_group(futures: _SPMDFutures, reason: str) -> None:
    from .cluster import worker_addresses

    client = futures.client
    alive = set(worker_addresses(client))
    targets = [a for a in futures.addresses if a in alive]
    if targets:
        try:
            client.run(_abort, futures.group, reason, workers=targets)
        except Exception:
            pass


def split_results(futures: _SPMDFutures) -> tuple[list, list]:
    """For ranks that return ``(block, info)``: the blocks as futures left on
    the rank's worker (the data stays distributed) and the small infos gathered.
    Groups launched with ``publish_info=True`` cost no further round trip.

    Examples
    --------
    >>> futs = run_spmd(fn, rank_args, client=client)        # doctest: +SKIP
    >>> wait_group(futs)                                      # doctest: +SKIP
    >>> blocks, infos = split_results(futs)                   # doctest: +SKIP
    """
    client = futures.client
    if futures.published:
        posted = client._workbench_infos
        keys = [(futures.group, r) for r in range(len(futures))]
        deadline = time.monotonic() + 30.0  # published before completion: normally here already
        while any(k not in posted for k in keys):
            if time.monotonic() > deadline:
                raise CommsError(f"SPMD group {futures.group}: the ranks' infos never reached the client")
            time.sleep(0.001)
        return list(futures), [pickle.loads(posted.pop(k)) for k in keys]
    pairs = list(zip(futures, futures.addresses, strict=True))
    blocks = [client.submit(operator.getitem, f, 0, workers=[a], pure=False) for f, a in pairs]
    infos = gather_results([client.submit(operator.getitem, f, 1, workers=[a], pure=False) for f, a in pairs],
                   client, futures.addresses)
    return blocks, infos


def gather_results(futures: Sequence[Any], client: Any, addresses: Sequence[str] = (), poll: float = 0.5) -> list:
    """``client.gather`` that raises :class:`WorkerLostError` instead of waiting forever
    when a result was lost with its worker (a pinned task's result cannot be recomputed
    elsewhere: Dask would wait for a worker that never comes back)."""
    pending = list(futures)
    while pending:
        pending = _still_pending(pending, poll, "ALL_COMPLETED")
        if pending:
            dead = [f.key for f in pending if f.status in _DEAD_STATES]
            lost = dead or lost_workers(addresses, client)
            if lost:
                for f in futures:
                    f.cancel()
                raise WorkerLostError(f"results lost with their worker: {lost}")
    return client.gather(list(futures))


def fetch_group(futures: _SPMDFutures) -> list:
    """:func:`wait_group`, then the ranks' results, for a group launched with ``run_spmd(fetch=True)``.

    Each result comes straight from its rank as the rank ends: on one host the rank writes it (or the
    parcel the client copies out of the worker's memory) to the client's lane, elsewhere the client's
    request to the worker brings it; not after the scheduler has heard of the end and said where the
    result is.  Any failure to get them so (a rank raised, a worker left, no access) falls back to
    :func:`wait_group` and :func:`gather_results`, which raise what went wrong.
    """
    client = futures.client
    if futures.fetch:
        try:
            got = _samehost.collect_results(client, futures.group, futures.addresses, futures.timeout,
                                            _group_state(futures), getattr(client, "_workbench_backend", None) == "gpu")
        except (KeyboardInterrupt, SystemExit, asyncio.CancelledError) as e:
            _fail_group(futures, f"the client stopped waiting ({e.__class__.__name__})")
            raise
        except Exception:   # the slow path below says what went wrong, or gets the results anyway
            got = None
        finally:
            _samehost.forget_results(futures.group, len(futures))
        if got is not None:
            client._workbench_groups.add(tuple(futures.addresses))
            return got
    wait_group(futures)
    return gather_results(list(futures), client, futures.addresses)


def _group_state(futures: _SPMDFutures, poll: float = 0.5) -> Callable[[], str | None]:
    """For :func:`workbench._samehost.collect_results`: "failed" once a rank raised or something the group
    needs is gone (the scheduler asked at most every ``poll`` s), "ended" once every rank's task has ended."""
    last = [time.monotonic()]

    def state() -> str | None:
        if any(f.status in ("error", *_DEAD_STATES) for f in futures):
            return "failed"
        if all(f.status == "finished" for f in futures):
            return "ended"
        ask = time.monotonic() - last[0] >= poll
        last[0] = time.monotonic() if ask else last[0]
        return "failed" if _loss(futures, ask) else None
    return state


def spmd(fn: Callable, rank_args: Sequence[Any], *args: Any, client: Any = None,
         workers: Sequence[str] | None = None, timeout: float = DEFAULT_TIMEOUT,
         retries: int = 1, gather: bool = True, **kwargs: Any) -> list:
    """Run an SPMD group to completion and return the ranks' results.

    ``retries`` reruns the whole group from its input futures when a worker is
    lost (Dask recomputes lost input partitions from their lineage).  With
    ``gather=False`` the finished futures are returned instead of values.

    Examples
    --------
    >>> def body(comm, _):                                   # doctest: +SKIP
    ...     return comm.allgather(comm.rank)
    >>> spmd(body, [None, None], client=client)               # doctest: +SKIP
    [[0, 1], [0, 1]]
    """
    from .cluster import default_client, worker_addresses

    client = default_client(client)
    attempt = 0
    while True:
        addrs = list(workers) if workers is not None else worker_addresses(client)
        futs = run_spmd(fn, rank_args, *args, client=client, workers=addrs, timeout=timeout, fetch=gather,
                        **kwargs)
        try:
            if gather:
                return fetch_group(futs)
            wait_group(futs)
        except WorkerLostError:
            attempt += 1
            if attempt > retries or workers is not None:
                raise
            # A nanny restarts a dead worker; wait for the group's size to be back.
            try:
                client.wait_for_workers(len(rank_args), timeout=120)
            except TimeoutError:
                raise WorkerLostError(f"a worker was lost and the cluster did not get back to "
                                      f"{len(rank_args)} workers within 120 s") from None
            continue
        return list(futs)
