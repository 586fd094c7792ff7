"""SPMD collectives between worker tasks, with no scheduler in the loop.

Dask places data and launches the group; after that the ranks talk directly
over the workers' own connections.  A worker plugin adds two handlers to every
worker (``wb_comms_deliver``, ``wb_comms_abort``); a rank's ``send`` is one RPC
to the peer worker, whose handler drops the payload into a per-group mailbox
that the peer's ``recv`` waits on.  This is the shape raft-dask's comms give
cuGraph/cuML, built on distributed's connection pool instead of NCCL/UCX-p2p
(on dask-cuda clusters with ``protocol="ucx"`` the same calls ride UCX, and
cupy payloads go through distributed's CUDA serializers).

Every wait has a timeout; a peer that fails broadcasts an abort so the rest of
the group fails fast, and the client-side launcher aborts the group when one of
its workers leaves the cluster.  Groups are reruns-from-inputs safe: nothing is
kept in worker globals after a group ends.

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
import operator
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

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
    "DEFAULT_TIMEOUT",
]

#: Seconds any single wait may take (a peer may legitimately compute for a while
#: between messages).  Override with WORKBENCH_COMMS_TIMEOUT.
DEFAULT_TIMEOUT = float(os.environ.get("WORKBENCH_COMMS_TIMEOUT", "600"))

_PLUGIN_NAME = "workbench-comms"


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
    """Per-process mailboxes, one per live SPMD group."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.boxes: dict[str, _GroupBox] = {}
        self.closed: collections.OrderedDict[str, None] = collections.OrderedDict()

    def box(self, group: str) -> _GroupBox | None:
        with self.lock:
            if group in self.closed:
                return None  # late message for a finished group: drop it
            b = self.boxes.get(group)
            if b is None:
                b = self.boxes[group] = _GroupBox()
            return b

    def close(self, group: str) -> None:
        with self.lock:
            self.boxes.pop(group, None)
            self.closed[group] = None
            while len(self.closed) > 4096:
                self.closed.popitem(last=False)


_POST = _PostOffice()


def _deliver(group: str, src: int, tag: Any, payload: Any = None) -> str:
    box = _POST.box(group)
    if box is not None:
        with box.cond:
            box.queues[(src, _freeze(tag))].append(payload)
            box.cond.notify_all()
    return "OK"


def _abort(group: str, reason: str) -> str:
    box = _POST.box(group)
    if box is not None:
        with box.cond:
            if box.abort is None:
                box.abort = reason
            box.cond.notify_all()
    return "OK"


def _freeze(tag: Any) -> Any:
    # msgpack turns tuples into lists; keys must be hashable and equal on both ends
    if isinstance(tag, list | tuple):
        return tuple(_freeze(t) for t in tag)
    return tag


def _install_handlers(worker: Any) -> None:
    worker.handlers.setdefault("wb_comms_deliver", _deliver)
    worker.handlers.setdefault("wb_comms_abort", _abort)


class _CommsPlugin:
    """Worker plugin that installs the comms handlers on every (new) worker."""

    name = _PLUGIN_NAME
    idempotent = True

    def setup(self, worker: Any) -> None:
        _install_handlers(worker)

    def teardown(self, worker: Any) -> None:
        pass


def ensure_registered(client: Any) -> None:
    """Install the comms handlers on the client's workers (once per client)."""
    if getattr(client, "_workbench_comms", False):
        return
    from distributed.diagnostics.plugin import WorkerPlugin

    plugin_cls = type("WorkbenchCommsPlugin", (_CommsPlugin, WorkerPlugin), {})
    client.register_plugin(plugin_cls(), name=_PLUGIN_NAME)
    client._workbench_comms = True


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
        ``bytes_sent``, ``messages_sent``, ``seconds_waiting`` (time blocked
        in receives), accumulated over the group's life.

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
        self._box = _POST.box(group)
        self.stats = _stats if _stats is not None else {"bytes_sent": 0, "messages_sent": 0,
                                                       "seconds_waiting": 0.0}

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
        remote = []
        for dst, obj in items:
            if not 0 <= dst < self.size:
                raise ValueError(f"rank {dst} out of range for a group of {self.size}")
            if dst == self.rank:
                _deliver(self.group, self._global_rank, tag, obj)
            else:
                remote.append((self._addresses[self._ranks[dst]], obj))
                self.stats["bytes_sent"] += nbytes(obj)
                self.stats["messages_sent"] += 1
        if not remote:
            return
        self._check_abort()
        fut = asyncio.run_coroutine_threadsafe(self._asend(remote, tag), self._loop)
        try:
            fut.result(timeout=self.timeout)
        except TimeoutError as e:
            fut.cancel()
            raise CommsTimeoutError(
                f"rank {self.rank} of group {self.group}: send of {tag[2:4] if len(tag) > 3 else tag} "
                f"timed out after {self.timeout:.0f}s") from e
        except OSError as e:
            raise PeerFailedError(f"rank {self.rank} of group {self.group}: a peer is unreachable ({e})") from e

    async def _asend(self, remote: list[tuple[str, Any]], tag: tuple) -> None:
        from distributed.protocol import to_serialize

        async def one(addr: str, obj: Any) -> None:
            # No reply: tags are unique per message, so delivery order never matters
            # and the sender does not pay a second network hop per message.
            await self._worker.rpc(addr).wb_comms_deliver(
                group=self.group, src=self._global_rank, tag=tag, payload=to_serialize(obj), reply=False)

        await asyncio.gather(*(one(a, o) for a, o in remote))

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
        async def go():
            async def one(addr):
                try:
                    await asyncio.wait_for(self._worker.rpc(addr).wb_comms_abort(group=self.group, reason=reason), 5)
                except Exception:
                    pass
            await asyncio.gather(*(one(a) for i, a in enumerate(self._addresses) if i != self._global_rank))

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
                rank_arg: Any, args: tuple, kwargs: dict) -> Any:
    from distributed import get_worker, secede

    worker = get_worker()
    _install_handlers(worker)
    if worker.address != addresses[rank]:
        raise CommsError(f"rank {rank} ran on {worker.address}, expected {addresses[rank]}")
    # Leave the worker's thread pool: the rank blocks on peers for its whole life.
    secede()
    comm = Comm(group, rank, addresses, timeout)
    try:
        comm.barrier()  # all ranks alive before any real traffic
        out = fn(comm, rank_arg, *args, **kwargs)
        return out
    except PeerFailedError:
        raise
    except BaseException as e:
        comm._abort_peers(f"rank {rank} failed with {e.__class__.__name__}: {e}")
        raise
    finally:
        _POST.close(group)


def run_spmd(fn: Callable, rank_args: Sequence[Any], *args: Any, client: Any = None,
             workers: Sequence[str] | None = None, timeout: float = DEFAULT_TIMEOUT,
             name: str | None = None, **kwargs: Any) -> list:
    """Launch ``fn(comm, rank_args[r], *args, **kwargs)`` as one task per rank.

    Rank r runs on ``workers[r]`` (default: every worker, sorted).  Futures
    inside ``rank_args`` are resolved on the rank's worker, so partitions
    pinned there never move.  Returns the ranks' futures without waiting
    (results stay on the workers); see :func:`spmd` to wait and gather.
    """
    from distributed import Future  # noqa: F401

    from .cluster import default_client, worker_addresses

    client = default_client(client)
    ensure_registered(client)
    addresses = list(workers) if workers is not None else worker_addresses(client)
    if len(rank_args) != len(addresses):
        raise ValueError(f"rank_args has {len(rank_args)} entries for {len(addresses)} workers")
    group = f"{name or getattr(fn, '__name__', 'spmd')}-{uuid.uuid4().hex[:12]}"
    futures = [
        client.submit(_rank_entry, fn, group, r, addresses, timeout, rank_args[r], args, kwargs,
                      workers=[addresses[r]], allow_other_workers=False, pure=False,
                      key=f"spmd-{group}-{r}", retries=0)
        for r in range(len(addresses))
    ]
    futures_group = _SPMDFutures(futures, group, addresses, client)
    return futures_group


class _SPMDFutures(list):
    """The ranks' futures, plus the group's identity for :func:`wait_group`."""

    def __init__(self, futures, group, addresses, client):
        super().__init__(futures)
        self.group = group
        self.addresses = addresses
        self.client = client


def wait_group(futures: _SPMDFutures, poll: float = 0.5) -> None:
    """Wait for every rank; fail fast (and abort the rest) when a rank errors
    or a rank's worker leaves the cluster."""
    from distributed import wait

    from .cluster import worker_addresses

    client = futures.client
    pending = list(futures)
    last_check = time.monotonic()
    while pending:
        try:
            _, not_done = wait(pending, timeout=poll, return_when="FIRST_COMPLETED")
        except TimeoutError:
            not_done = pending
        pending = list(not_done)
        if any(f.status == "error" for f in futures):
            if pending:
                _abort_group(futures, "a peer rank raised")
            break
        if pending and time.monotonic() - last_check >= poll:
            last_check = time.monotonic()
            alive = set(worker_addresses(client))
            lost = [a for a in futures.addresses if a not in alive]
            if lost:
                _abort_group(futures, f"worker(s) {lost} left the cluster")
                for f in futures:
                    f.cancel()
                raise WorkerLostError(f"SPMD group {futures.group} lost worker(s) {lost}")
    for f in futures:
        if f.status == "error":
            f.result()  # re-raise the first real error


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

    Examples
    --------
    >>> futs = run_spmd(fn, rank_args, client=client)        # doctest: +SKIP
    >>> wait_group(futs)                                      # doctest: +SKIP
    >>> blocks, infos = split_results(futs)                   # doctest: +SKIP
    """
    client = futures.client
    pairs = list(zip(futures, futures.addresses, strict=True))
    blocks = [client.submit(operator.getitem, f, 0, workers=[a], pure=False) for f, a in pairs]
    infos = client.gather([client.submit(operator.getitem, f, 1, workers=[a], pure=False) for f, a in pairs])
    return blocks, infos


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
        futs = run_spmd(fn, rank_args, *args, client=client, workers=addrs, timeout=timeout, **kwargs)
        try:
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
        return client.gather(list(futs)) if gather else list(futs)
