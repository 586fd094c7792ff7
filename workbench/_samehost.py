"""Same-host transports for ``workbench.comms``.

**Cross-memory attach** (large payloads): the message carries only the
payload's layout and the receiver copies the buffers straight out of the
sender's memory with ``process_vm_readv`` (one copy instead of two socket
buffers).  ``WORKBENCH_COMMS_CMA=0`` turns it off.

**The lane** (every host payload, and the CMA parcels and their replies):
A message through the worker's event loop (``rpc`` on distributed's connection
pool) costs about 1-2 ms on this class of machine: the rank thread hands the
send to the loop, the loop serialises and writes, the peer's loop reads,
dispatches the handler and only then wakes the receiving rank.  Iterative SPMD
kernels (a BFS level, a coloring round) pay that once per collective, which is
what kept two-worker BFS below one worker's speed per edge.

Here each process listens on one Unix socket in the abstract namespace; a rank
thread connects once per peer process and writes each message itself (pickle
protocol 5, buffers of 16 KiB and more out of band, one frame), and one reader
thread per incoming connection reads frames (in as few ``recv`` calls as the
data allows) and drops them into the mailbox.  No event loop on either side: a
message costs tens of microseconds.  Used between processes that share a host
and network namespace, for host payloads only (device payloads keep
distributed's CUDA serialisers); any failure to connect or write falls back to
the ``rpc`` path.  ``WORKBENCH_COMMS_LANE=0`` turns it
off.

Frame: ``<IIQ`` (head length, buffer count, 0) then one ``<Q`` length per
buffer, the pickle head, then the buffers (each received at a 64-byte aligned
offset of one pooled buffer).

**Between the client and its workers**, the same lanes and parcels: a rank of a
group launched for ``comms.fetch_group`` writes its result (or the parcel of it)
to the client's own lane as it ends, and the calling thread takes it from there
-- no request to the worker, no hop through either event loop; a large host
block goes to the worker that will hold it, copied out of the client
(``partition._scatter_all``).  Both fall back to a request on distributed's
connection (and to the scheduler's own path) on another host, for device
results, or when access is refused.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import ctypes
import functools
import logging
import os
import pickle
import re
import socket
import struct
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .backend import empty

_CMA_ON = os.environ.get("WORKBENCH_COMMS_CMA", "1") != "0"
_log = logging.getLogger("workbench.comms")

ENABLED = os.environ.get("WORKBENCH_COMMS_LANE", "1") != "0" and sys.platform.startswith("linux")

_HEAD = struct.Struct("<IIQ")
_ALIGN = 64
#: Remote spans per process_vm_readv call (Linux's UIO_MAXIOV).
_IOV_MAX = 1024
_SMALL = 1 << 16  # frames below this are joined into one write
_IN_BAND = 1 << 14  # buffers below this are pickled in band


# ---- cross-memory attach: the receiver copies out of the sender's memory -----


class _IOVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


def _load_readv() -> Any:
    if not _CMA_ON or not sys.platform.startswith("linux"):
        return None
    try:
        f = ctypes.CDLL(None, use_errno=True).process_vm_readv
    except (OSError, AttributeError):
        return None
    f.argtypes = [ctypes.c_int, ctypes.POINTER(_IOVec), ctypes.c_ulong,
                  ctypes.POINTER(_IOVec), ctypes.c_ulong, ctypes.c_ulong]
    f.restype = ctypes.c_ssize_t
    return f


_READV = _load_readv()
_PROBE = np.array([0x5742_434D_4150_524F], dtype=np.uint64)  # what a peer reads to test access
_PULL_OK: set[int] = set()           # pids this process has read from


@functools.cache   # a process keeps its namespaces (read twice a fetched group otherwise)
def _namespace_key(ns: str) -> str | None:
    """``host|boot|namespace inode`` for the Linux namespace ``ns`` ("pid", "net"), or None where unreadable."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        inode = os.stat(f"/proc/self/ns/{ns}").st_ino
    except OSError:
        return None
    return f"{socket.gethostname()}|{boot}|{inode}"


def _host_identity() -> tuple | None:
    """(host, pid namespace, pid, probe address), or None without CMA."""
    key = _namespace_key("pid") if _READV is not None else None
    return None if key is None else (key, os.getpid(), int(_PROBE.ctypes.data))


def _read_remote(pid: int, spans: Sequence[tuple[int, int]], dest: np.ndarray, offsets: Sequence[int]) -> None:
    """Copy the remote ``(address, nbytes)`` spans of ``pid`` into ``dest`` (uint8) at ``offsets``.

    Runs of spans that land back to back in ``dest`` (a strided array's rows) go up to ``_IOV_MAX``
    to a call: one call per row cost a 268 MB chunk of 16 KB rows ~50 ms, against ~27 ms in one span."""
    base = dest.ctypes.data
    i = 0
    while i < len(spans):
        j = i + 1
        while (j < len(spans) and j - i < _IOV_MAX and spans[j][1] < 1 << 30
               and offsets[j] == offsets[j - 1] + spans[j - 1][1]):
            j += 1
        if j - i > 1 and spans[i][1] < 1 << 30:
            total = offsets[j - 1] + spans[j - 1][1] - offsets[i]
            remote = np.array(spans[i:j], np.uint64)   # laid out as j - i iovecs
            local = _IOVec(base + offsets[i], total)
            if _READV(pid, ctypes.byref(local), 1, remote.ctypes.data_as(ctypes.POINTER(_IOVec)), j - i, 0) == total:
                i = j
                continue
        for (addr, n), off in zip(spans[i:j], offsets[i:j], strict=True):   # one span, or a short read: span by span
            done = 0
            while done < n:
                step = min(n - done, 1 << 30)
                local = _IOVec(base + off + done, step)
                remote = _IOVec(addr + done, step)
                got = _READV(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
                if got <= 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"process_vm_readv from pid {pid}: {os.strerror(err)}")
                done += got
        i = j


def _can_pull(pid: int, probe: int) -> bool:
    if pid in _PULL_OK:
        return True
    got = np.zeros(1, np.uint64)
    try:
        _read_remote(pid, [(probe, 8)], got.view(np.uint8), [0])
    except OSError:
        return False
    if got[0] != _PROBE[0]:
        return False
    _PULL_OK.add(pid)
    return True


def _host_only(obj: Any, depth: int = 0) -> bool:
    """True when ``obj`` is made of host arrays, scalars and containers only."""
    if depth > 8:
        return False
    if obj is None or isinstance(obj, bool | int | float | complex | str | bytes | np.generic):
        return True
    if isinstance(obj, np.ndarray):
        return obj.dtype != object
    if isinstance(obj, list | tuple):
        return all(_host_only(o, depth + 1) for o in obj)
    if isinstance(obj, dict):
        return all(_host_only(k, depth + 1) and _host_only(v, depth + 1) for k, v in obj.items())
    if (type(obj).__module__ or "").startswith("scipy.sparse"):
        return isinstance(getattr(obj, "data", None), np.ndarray)
    return False


def _offsets(sizes: Sequence[int]) -> tuple[list[int], int]:
    offs, end = [], 0
    for n in sizes:
        end = -(-end // _ALIGN) * _ALIGN
        offs.append(end)
        end += n
    return offs, end


#: Payloads from this size cross by cross-memory attach (smaller ones cost less on the socket).
_CMA_MIN = int(os.environ.get("WORKBENCH_COMMS_CMA_MIN", str(1 << 20)))


class _Outgoing:
    """A payload kept alive until every receiver has pulled it."""

    def __init__(self, buffers: list, receivers: int) -> None:
        self.buffers = buffers
        self.receivers = self.pending = receivers
        self.failed: list[int] = []   # global ranks that could not pull
        self.done = threading.Event()


class _Parcel:
    """What travels on the socket instead of a large same-host payload."""

    def __init__(self, key: str, sender: str, pid: int, head: bytes, spans: list[tuple[int, int]],
                 rows: bool = False) -> None:
        self.key, self.sender, self.pid, self.head, self.spans = key, sender, pid, head, spans
        self.rows = rows  # the spans are a strided array's rows: together, its one buffer
        self.lane: str | None = None  # the sender's lane, when the parcel came by it: the reply goes back that way

    @classmethod
    def pack(cls, obj: Any, key: str, sender: str, receivers: int) -> tuple[_Parcel, _Outgoing] | None:
        if isinstance(obj, np.ndarray) and not (obj.flags.c_contiguous or obj.flags.f_contiguous):
            # (pickled, its data would be copied in band)
            return cls._pack_rows(obj, key, sender, receivers)
        buffers: list[pickle.PickleBuffer] = []
        head = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
        try:
            raws = [b.raw() for b in buffers]
        except BufferError:
            return None
        if sum(r.nbytes for r in raws) < _CMA_MIN:
            return None
        spans = [(int(np.frombuffer(r, np.uint8).ctypes.data), r.nbytes) for r in raws]
        return cls(key, sender, os.getpid(), head, spans), _Outgoing(raws, receivers)

    @classmethod
    def _pack_rows(cls, obj: Any, key: str, sender: str, receivers: int) -> tuple[_Parcel, _Outgoing] | None:
        # a 2-D array whose rows are contiguous but not each other's neighbours (a column block of a C array,
        # as dask.array.from_array's chunks along the last axis are): the receiver reads it row by row, and
        # the sender makes no contiguous copy first
        if not (isinstance(obj, np.ndarray) and obj.ndim == 2 and obj.dtype != object and obj.size
                and obj.strides[1] == obj.itemsize and obj.strides[0] >= obj.shape[1] * obj.itemsize
                and obj.nbytes >= _CMA_MIN):
            return None
        bufs: list[pickle.PickleBuffer] = []
        # the head of a contiguous array of the same shape (np.empty: pages never touched), its data out of band
        head = pickle.dumps(np.empty(obj.shape, obj.dtype), protocol=5, buffer_callback=bufs.append)
        if len(bufs) != 1:
            return None
        row, base = obj.shape[1] * obj.itemsize, obj.ctypes.data
        spans = [(base + i * obj.strides[0], row) for i in range(obj.shape[0])]
        return cls(key, sender, os.getpid(), head, spans, rows=True), _Outgoing([obj], receivers)

    def pull(self) -> Any:
        if self.rows:
            n = self.spans[0][1]
            offs, total = list(range(0, n * len(self.spans), n)), n * len(self.spans)
        else:
            offs, total = _offsets([n for _, n in self.spans])
        dest = empty(total, np.uint8)  # pooled: fresh pages fault at the hypervisor here
        _read_remote(self.pid, self.spans, dest, offs)
        if self.rows:
            return pickle.loads(self.head, buffers=[dest[:total]])
        return pickle.loads(self.head, buffers=[dest[o:o + n] for o, (_, n) in zip(offs, self.spans, strict=True)])


# ---- the lane: rank threads write straight to a peer's socket -----


def host_key() -> str | None:
    """Processes with equal keys can reach each other's abstract sockets (same host, boot and network namespace)."""
    return _namespace_key("net") if ENABLED else None


class _Listener:
    """This process's lane: the listening socket, its accept thread and one reader per peer connection."""

    def __init__(self, on_message: Callable[[tuple], None]) -> None:
        self.address = f"\0workbench-lane-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.on_message = on_message
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.address)
        self.sock.listen(64)
        threading.Thread(target=self._accept, name="wb-lane-accept", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._read, args=(conn,), name="wb-lane-read", daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        with conn:
            reader = _FrameReader(conn)
            while True:
                try:
                    msg = reader.frame()
                except (OSError, EOFError):
                    return  # the peer closed (or died): nothing half-read is delivered
                except _Undecodable:  # a frame read whole that does not unpickle here: drop it, keep reading
                    _log.exception("workbench comms lane: dropped a message that could not be decoded")
                    continue
                except Exception:  # mid-frame (e.g. out of memory): the stream is lost; the sender falls back
                    _log.exception("workbench comms lane: closing a connection after a failed read")
                    return
                try:
                    self.on_message(msg)
                except Exception:  # never let one message stop the connection's reader
                    _log.exception("workbench comms lane: delivering a message failed")


def _recv_exact(conn: socket.socket, view: memoryview) -> None:
    got = 0
    n = len(view)
    while got < n:
        k = conn.recv_into(view[got:], n - got)
        if k == 0:
            raise EOFError("lane closed mid-frame")
        got += k


class _FrameReader:
    """Frames off one connection in as few ``recv`` calls as the data allows: whatever has arrived is read
    into one buffer and frames are cut from it, so a small message costs one call.  Every call releases the
    GIL, and a rank thread woken by the previous message takes it: each extra call cost ~40 us of latency
    here (a 2-worker ping-pong of one float: 330 us with four calls per frame)."""

    def __init__(self, conn: socket.socket, size: int = 1 << 18) -> None:
        self.conn = conn
        self.buf = memoryview(bytearray(size))
        self.lo = self.hi = 0

    def _have(self, n: int) -> memoryview:
        """The next ``n`` bytes (``n`` at most the buffer's size), valid until the next read."""
        if self.lo + n > len(self.buf):  # move what is left to the front
            k = self.hi - self.lo
            self.buf[:k] = self.buf[self.lo:self.hi]
            self.lo, self.hi = 0, k
        while self.hi - self.lo < n:
            k = self.conn.recv_into(self.buf[self.hi:])
            if k == 0:
                raise EOFError("lane closed mid-frame")
            self.hi += k
        out = self.buf[self.lo:self.lo + n]
        self.lo += n
        return out

    def read_into(self, dest: memoryview) -> None:
        """Fill ``dest`` (any size): what is buffered first, the rest straight from the socket."""
        k = min(len(dest), self.hi - self.lo)
        dest[:k] = self.buf[self.lo:self.lo + k]
        self.lo += k
        if k < len(dest):
            _recv_exact(self.conn, dest[k:])

    def frame(self) -> Any:
        n_head, n_bufs, _ = _HEAD.unpack(self._have(_HEAD.size))
        sizes = list(struct.unpack(f"<{n_bufs}Q", self._have(8 * n_bufs))) if n_bufs else []
        if n_head <= len(self.buf):
            body: Any = self._have(n_head)
        else:
            body = bytearray(n_head)
            self.read_into(memoryview(body))
        buffers = []
        if sizes:
            # the head may lie in the read buffer, which the buffers' reads overwrite: keep a copy
            body = bytes(body) if isinstance(body, memoryview) else body
            offs, end = _offsets(sizes)
            dest = empty(end, np.uint8)  # pooled: no fresh pages per message
            for off, n in zip(offs, sizes, strict=True):
                self.read_into(memoryview(dest[off:off + n]))
                buffers.append(dest[off:off + n])
        try:
            return pickle.loads(body, buffers=buffers)
        except Exception as e:
            raise _Undecodable(str(e)) from e


class _Undecodable(Exception):
    """A whole frame whose payload does not unpickle in this process."""


_LISTENER: _Listener | None = None
_LISTENER_LOCK = threading.Lock()
_OUT: dict[str, tuple[socket.socket, threading.Lock]] = {}
_OUT_LOCK = threading.Lock()
_DEAD: set[str] = set()  # addresses that refused or broke: their messages take the rpc path


@atexit.register
def _close_lanes() -> None:
    with _OUT_LOCK:
        for sock, _ in _OUT.values():
            sock.close()
        _OUT.clear()


_PULL_POOL: Any = None


def pull_pool() -> Any:
    """The threads that copy parcels which came by lane (a lane's reader must not wait on that)."""
    global _PULL_POOL
    if _PULL_POOL is None:
        with _LISTENER_LOCK:
            if _PULL_POOL is None:
                _PULL_POOL = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="wb-comms-pull")
    return _PULL_POOL


def listen(on_message: Callable[[tuple], None]) -> str | None:
    """Start this process's lane once; its address (None when the lane is off or cannot bind)."""
    global _LISTENER
    if not ENABLED:
        return None
    with _LISTENER_LOCK:
        if _LISTENER is None:
            try:
                _LISTENER = _Listener(on_message)
            except OSError:
                return None
        return _LISTENER.address


def _connection(address: str, timeout: float) -> tuple[socket.socket, threading.Lock]:
    with _OUT_LOCK:
        got = _OUT.get(address)
        if got is not None:
            return got
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(address)
    except OSError:
        sock.close()
        raise
    with _OUT_LOCK:
        got = _OUT.setdefault(address, (sock, threading.Lock()))
    if got[0] is not sock:
        sock.close()
    return got


def send(address: str, msg: Any, timeout: float) -> bool:
    """Write ``msg`` (a tuple for the peer's ``on_message``) to the lane at ``address``.

    Returns False, having written nothing the peer will deliver, when the lane
    is not usable (the caller then takes the rpc path); True once the whole
    frame is in the kernel's socket buffer (the caller's buffers are free again).
    """
    if address in _DEAD:
        return False
    buffers: list[pickle.PickleBuffer] = []

    def out_of_band(b: pickle.PickleBuffer) -> bool:
        # small buffers ride in the pickle (no pooled buffer and no extra read on the receiver), as do
        # non-contiguous ones; True keeps a buffer in band
        try:
            if b.raw().nbytes < _IN_BAND:
                return True
        except BufferError:
            return True
        buffers.append(b)
        return False

    head = pickle.dumps(msg, protocol=5, buffer_callback=out_of_band)
    raws = [b.raw() for b in buffers]
    frame = _HEAD.pack(len(head), len(raws), 0) + struct.pack(f"<{len(raws)}Q", *(r.nbytes for r in raws)) + head
    try:
        sock, lock = _connection(address, timeout)
    except OSError:
        _DEAD.add(address)
        return False
    try:
        with lock:
            if len(frame) + sum(r.nbytes for r in raws) <= _SMALL:
                sock.sendall(b"".join([frame, *(bytes(r) for r in raws)]))
            else:
                sock.sendall(frame)
                for r in raws:
                    sock.sendall(r)
    except OSError:
        # A broken lane mid-frame: the peer's reader drops the partial frame and the
        # connection.  A write that timed out may have delivered nothing or part: the
        # rpc fallback then carries the message (tags are unique, a duplicate never lands
        # since the partial frame is never decoded).
        _DEAD.add(address)
        with _OUT_LOCK:
            if _OUT.get(address, (None,))[0] is sock:
                del _OUT[address]
        sock.close()
        return False
    return True


# ---- results straight to the client (comms.fetch_group) -----
# A rank of a group launched with ``run_spmd(fetch=True)`` leaves its result in a slot of its process; the
# client's request, made at launch, waits there and gets it as the rank ends: without the scheduler's word
# that the rank ended and without its who_has, and on one host copied out of the worker's memory.


_FAILED = object()   # a slot's value when its rank raised: the client then waits for the group's error
_SERVED_TTL = 60.0   # seconds a served parcel's buffers wait for the client to say it took them


class _Slot:
    __slots__ = ("value", "done", "waiters", "since", "ttl", "outgoing", "by_lane")

    def __init__(self, ttl: float) -> None:
        self.value: Any = None
        self.done = False
        self.waiters: list = []          # (loop, asyncio future) of requests waiting for the value
        self.since = time.monotonic()    # made, then served
        self.ttl = ttl
        self.outgoing: _Outgoing | None = None
        self.by_lane = False             # the result went to the client's lane: requests are told so

    def stale(self, now: float) -> bool:
        # a parcel is taken within milliseconds of being served (unless its client went away)
        return now - self.since > (_SERVED_TTL if self.outgoing is not None else self.ttl)


class _ResultSlots:
    """Ranks' results kept for the client that asked for them until it has taken them; a slot
    nobody collects expires after its group's timeout."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.slots: dict[tuple[str, int], _Slot] = {}
        self.gone: dict[tuple[str, int], float] = {}   # slots dropped once taken, and when

    def _slot(self, group: str, rank: int, ttl: float) -> _Slot:
        slot = self.slots.get((group, rank))
        if slot is None:
            now = time.monotonic()
            for k in [k for k, s in self.slots.items() if s.stale(now)]:
                del self.slots[k]
            slot = self.slots[(group, rank)] = _Slot(ttl)
        return slot

    def put(self, group: str, rank: int, value: Any, ttl: float) -> None:
        """The rank's result (``_FAILED`` when it raised), from the rank's thread."""
        with self.lock:
            slot = self._slot(group, rank, ttl)
            slot.value, slot.done = value, True
            waiters, slot.waiters = slot.waiters, []
        for loop, fut in waiters:
            loop.call_soon_threadsafe(_settle, fut)

    def hold(self, group: str, rank: int, outgoing: _Outgoing | None, value: Any, ttl: float) -> _Slot:
        """A result about to go down the client's lane: its buffers kept (a parcel's) until the client has
        taken them, requests held until :meth:`release` says which way it went."""
        with self.lock:
            slot = self._slot(group, rank, ttl)
            slot.value, slot.outgoing, slot.by_lane = value, outgoing, True
            slot.since = time.monotonic()
        return slot

    def release(self, slot: _Slot, by_lane: bool) -> None:
        """The lane took the result (requests get "lane") or did not (they get the value the usual way)."""
        with self.lock:
            slot.by_lane, slot.done = by_lane, True
            if not by_lane:
                slot.outgoing = None
            elif slot.outgoing is None:
                slot.value = None   # it went whole: nothing here to serve
            waiters, slot.waiters = slot.waiters, []
        for loop, fut in waiters:
            loop.call_soon_threadsafe(_settle, fut)

    async def take(self, group: str, rank: int, timeout: float) -> _Slot | None:
        """The slot once its rank has ended, or None after ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        with self.lock:
            if (group, rank) in self.gone:
                return None
            slot = self._slot(group, rank, timeout)
            if slot.done:
                return slot
            fut = loop.create_future()
            slot.waiters.append((loop, fut))
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            return None
        return slot

    def drop(self, group: str, rank: int) -> str:
        with self.lock:
            if self.slots.pop((group, rank), None) is not None:
                # a request that comes after its result went (by lane) must not wait for another
                now = time.monotonic()
                self.gone[(group, rank)] = now
                if len(self.gone) > 1024:
                    self.gone = {k: t for k, t in self.gone.items() if now - t < 60.0}
        return "OK"


def _settle(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


RESULTS = _ResultSlots()


async def serve_result(group: str, rank: int, timeout: float, reader: str | None = None,
                       discard: bool = False) -> dict:
    """Worker handler: rank ``rank``'s result once it ends.  A reader in this host's pid namespace
    gets a parcel to copy out of this process (the slot keeps the buffers until it says it has taken
    them); others get the value itself.  ``status`` is "pending" when the rank did not end within
    ``timeout`` and "failed" when it raised: the client then waits for the group the slow way.
    "lane": the rank sent it to the client's lane.  With ``discard`` the client wants nothing (it
    gave up on the group): the slot goes once its rank has ended."""
    from distributed.protocol import to_serialize

    slot = await RESULTS.take(group, rank, timeout)
    if slot is None:
        return {"status": "pending"}
    if discard:
        RESULTS.drop(group, rank)
        return {"status": "discarded"}
    if slot.by_lane:
        if slot.outgoing is None:   # it went whole: nothing kept here for the client to say it took
            RESULTS.drop(group, rank)
        return {"status": "lane"}
    if slot.value is _FAILED:
        RESULTS.drop(group, rank)
        return {"status": "failed"}
    if reader is not None and reader == _namespace_key("pid") and _host_only(slot.value):
        packed = _Parcel.pack(slot.value, f"result-{group}-{rank}", "", 1)
        if packed is not None:
            parcel, slot.outgoing = packed
            slot.since = time.monotonic()
            return {"status": "parcel", "parcel": to_serialize(parcel)}
    RESULTS.drop(group, rank)
    return {"status": "ok", "value": to_serialize(slot.value)}


#: False once this process failed to copy a result out of a worker (no access): results then come by socket.
_CLIENT_PULLS = True


async def fetch_results(rpc: Any, group: str, addresses: Sequence[str], timeout: float,
                        ranks: dict[int, str] | None = None) -> list | dict | None:
    """Client side: every rank's result (or those of ``ranks``, {rank: address}, as a dict), or None when
    one must be waited for the slow way."""
    reader = _namespace_key("pid") if _CLIENT_PULLS and _READV is not None else None
    which = dict(enumerate(addresses)) if ranks is None else ranks
    tasks = [asyncio.ensure_future(_fetch_one(rpc(a), group, r, timeout, reader)) for r, a in which.items()]
    try:
        got = await asyncio.gather(*tasks)
    except BaseException:
        for t in tasks:
            t.cancel()
        raise
    if any(ok is False for ok, _ in got):
        return None
    values = [value for _, value in got]
    return values if ranks is None else dict(zip(which, values, strict=True))


async def _fetch_one(worker: Any, group: str, rank: int, timeout: float, reader: str | None) -> tuple[bool, Any]:
    global _CLIENT_PULLS
    reply = await worker.wb_comms_result(group=group, rank=rank, timeout=timeout, reader=reader)
    if reply["status"] == "ok":
        return True, reply["value"]
    if reply["status"] == "lane":
        return True, _BY_LANE
    if reply["status"] != "parcel":
        return False, None
    try:
        return True, reply["parcel"].pull()
    except OSError:
        _CLIENT_PULLS = False
        return False, None
    finally:   # the worker may let the buffers go (not waited for)
        asyncio.ensure_future(_tell_taken(worker, group, rank))


# ---- results by lane: the rank writes its result (or the parcel of it) to the client's lane itself, so the
# client has it without the worker's event loop and distributed's connection (~1-1.5 ms a group here)

#: (group, rank) -> the future a lane result settles, for the groups this process launched with a lane
_EXPECTED: dict[tuple[str, int], Any] = {}
#: workers whose ranks' results have come to this process by lane
_LANE_OK: set[str] = set()


def expect_results(group: str, size: int, on_message: Callable[[tuple], None]) -> dict | None:
    """Client side, at launch: where the ranks of ``group`` may send their results (this process's lane,
    its network and pid namespaces), or None without a lane.  :func:`forget_results` ends the wait."""
    address = listen(on_message)
    if address is None:
        return None
    for r in range(size):
        _EXPECTED[(group, r)] = concurrent.futures.Future()
    return {"lane": address, "net": host_key(),
            "pid": _namespace_key("pid") if _CLIENT_PULLS and _READV is not None else None}


_BY_LANE = object()   # a rank's answer to the client's request: its result went to the client's lane


def collect_results(client: Any, group: str, addresses: Sequence[str], timeout: float,
                    state: Callable[[], str | None], ask_first: bool = False) -> list | None:
    """Client side, on the calling thread: every rank's result, or None when one must be waited for the
    slow way.

    A result that comes by lane is taken here, without a request to its worker or a hop through the
    client's event loop (those cost ~1 ms a group here, and left work on both loops for the next call).
    The ranks of a worker not yet seen to reach this process by lane (another host, say) are asked for
    theirs at once (every rank with ``ask_first``: on device workers, whose results are often device
    arrays, kept for the asking), as are those that say they kept it (a failed rank).  ``state()``,
    asked after each arrival and every few tens of milliseconds, says "failed" (a rank raised, a worker
    left: the slow way says what) or "ended" (every rank's task has ended: the rest are asked for).
    """
    n = len(addresses)
    lanes = [_EXPECTED.get((group, r)) for r in range(n)]
    if any(f is None for f in lanes):
        return client.sync(fetch_results, client.rpc, group, addresses, timeout)
    loop = client.loop.asyncio_loop
    deadline = time.monotonic() + timeout
    got: dict[int, dict] = {}      # rank -> its reply by lane
    values: dict[int, Any] = {}    # rank -> the result a request brought
    kept: set[int] = set()
    asked: set[int] = set()
    asks: list = []

    def ask(ranks: Any) -> None:
        which = {r: addresses[r] for r in ranks if r not in asked}
        if which:
            asked.update(which)
            asks.append(asyncio.run_coroutine_threadsafe(
                fetch_results(client.rpc, group, addresses, timeout, which), loop))

    ask(r for r, a in enumerate(addresses) if ask_first or a not in _LANE_OK)
    while True:
        for r, f in enumerate(lanes):
            if r not in got and r not in kept and f.done():
                reply = f.result()
                if reply["status"] == "kept":
                    kept.add(r)
                    ask([r])
                else:
                    got[r] = reply
        for done in [a for a in asks if a.done()]:
            asks.remove(done)
            answer = done.result()   # a lost worker raises: the slow way says so
            if answer is None:
                return _give_up(client, group, addresses, timeout)
            values.update({r: v for r, v in answer.items() if v is not _BY_LANE})
        if len(got) + len(values) == n:
            break
        why = state()
        if why == "failed" or time.monotonic() > deadline:
            return _give_up(client, group, addresses, timeout)
        if why == "ended":
            ask(r for r in range(n) if r not in got and r not in values)
        waiting = [*(f for r, f in enumerate(lanes) if r not in got and r not in kept), *asks]
        if waiting:
            concurrent.futures.wait(waiting, timeout=_POLL, return_when=concurrent.futures.FIRST_COMPLETED)
        else:   # (never expected: every rank is in hand or asked for) no spinning meanwhile
            time.sleep(_POLL)
    for r, reply in got.items():
        values[r] = _take_lane_result(client, group, r, addresses[r], reply)
        if values[r] is _BY_LANE:
            return _give_up(client, group, addresses, timeout)
        _LANE_OK.add(addresses[r])
    return [values[r] for r in range(n)]


def _give_up(client: Any, group: str, addresses: Sequence[str], timeout: float) -> None:
    """The group goes the slow way: every worker drops what its rank kept (by lane or not) once the rank
    has ended, in the background."""
    async def discard() -> None:
        await asyncio.gather(*(client.rpc(a).wb_comms_result(group=group, rank=r, timeout=timeout, discard=True)
                               for r, a in enumerate(addresses)), return_exceptions=True)

    asyncio.run_coroutine_threadsafe(discard(), client.loop.asyncio_loop)
    return None


#: seconds between two looks at the group while its results are awaited by lane
_POLL = 0.05


def _take_lane_result(client: Any, group: str, rank: int, address: str, reply: dict) -> Any:
    """The value of a result that came by lane (copied out of the worker when it came as a parcel: on
    this thread, whose heap is warm -- a lane reader's fresh pages cost ~1 ms a MiB here); ``_BY_LANE``
    when it cannot be had so.  The worker is told that it may drop its slot and the parcel's buffers."""
    global _CLIENT_PULLS
    try:
        if reply["status"] == "ok":
            return reply["value"]
        try:
            return reply["parcel"].pull()
        except OSError:
            _CLIENT_PULLS = False
            return _BY_LANE
    finally:   # by lane, else by the worker's event loop
        if not (reply.get("lane") and send(reply["lane"], ("taken", group, rank), 10.0)):
            asyncio.run_coroutine_threadsafe(_tell_taken(client.rpc(address), group, rank), client.loop.asyncio_loop)


def forget_results(group: str, size: int) -> None:
    for r in range(size):
        _EXPECTED.pop((group, r), None)


def lane_result(group: str, rank: int, payload: Any, reply_to: str | None) -> None:
    """Client side, on the lane's reader thread: a rank's result (a parcel, or the value itself) and the
    lane of its process."""
    kind = "parcel" if isinstance(payload, _Parcel) else "ok"
    _settle_expected(group, rank, {"status": kind, kind if kind == "parcel" else "value": payload, "lane": reply_to})


def lane_kept(group: str, rank: int) -> None:
    """Client side, on the lane's reader thread: the rank kept its result for the client to ask for."""
    _settle_expected(group, rank, {"status": "kept"})


def _settle_expected(group: str, rank: int, reply: dict) -> None:
    fut = _EXPECTED.get((group, rank))
    if fut is not None and not fut.done():
        with contextlib.suppress(concurrent.futures.InvalidStateError):   # the fetch gave up meanwhile
            fut.set_result(reply)


def _reaches_client(to: Any) -> bool:
    """Rank side: whether the client that launched the group (``to``, from :func:`expect_results`) can be
    reached by lane from here."""
    return isinstance(to, dict) and to.get("net") is not None and to["net"] == host_key()


def keep_result(to: Any, group: str, rank: int, value: Any, ttl: float) -> None:
    """Rank side: keep ``value`` (``_FAILED`` when the rank raised) in :data:`RESULTS` for the client to
    ask for, and tell the client so by lane, where it can reach it."""
    RESULTS.put(group, rank, value, ttl)
    if _reaches_client(to):
        send(to["lane"], ("kept", group, rank), ttl)


_RESULT_FRAMES: dict[str, Callable] = {"result": lane_result, "kept": lane_kept, "taken": RESULTS.drop}


def result_message(msg: tuple) -> bool:
    """A lane frame about fetched results, handled (False: not one of those)."""
    handler = _RESULT_FRAMES.get(msg[0])
    if handler is not None:
        handler(*msg[1:])
    return handler is not None


def send_result(to: dict, group: str, rank: int, value: Any, ttl: float) -> bool:
    """Rank side: ``value`` straight to the lane of the client that launched the group (where it can
    reach it): a parcel it copies out of this process, or the value itself when small or when it may
    not read this process.  False: nothing was sent, the caller keeps the result the usual way."""
    if not (_reaches_client(to) and _host_only(value)):
        return False
    packed = None
    if to.get("pid") is not None and to["pid"] == _namespace_key("pid"):
        packed = _Parcel.pack(value, f"result-{group}-{rank}", "", 1)
    slot = RESULTS.hold(group, rank, packed[1] if packed else None, value, ttl)
    here = _LISTENER.address if _LISTENER is not None else None   # where the client says it has taken it
    sent = False
    try:
        sent = send(to["lane"], ("result", group, rank, packed[0] if packed else value, here), ttl)
    finally:
        RESULTS.release(slot, sent)
    return sent


async def _tell_taken(worker: Any, group: str, rank: int) -> None:
    with contextlib.suppress(OSError):
        await worker.wb_comms_result_taken(group=group, rank=rank, reply=False)


# ---- host inputs copied out of the client by their worker (partition._scatter_all) -----


async def take_parcel(worker: Any, key: str, parcel: _Parcel) -> dict:
    """Worker handler: copy ``parcel`` out of the client's memory and hold it as ``key``, as
    ``client.scatter`` would have sent it (``status`` "refused" when this process may not read the
    client's: the client then sends it by socket)."""
    loop = asyncio.get_running_loop()
    try:
        obj = await loop.run_in_executor(None, parcel.pull)
    except OSError:
        return {"status": "refused"}
    return worker.update_data(data={key: obj}, stimulus_id=f"workbench-pulled-{time.time()}")


#: Workers (by address) found unable to read this process: their inputs go by socket.
_CANNOT_READ_ME: set[str] = set()


#: Prefix of the keys of blocks that workbench places on the workers itself: partitions (made again from their
#: lineage when a worker goes) and a call's host inputs (the call reruns)
PLACED = "workbench-"


class _PlacedLossFilter:
    """Logging filter on ``distributed.scheduler``: drops its "lose scattered data, which can't be
    recovered" error when every key named is one workbench placed (:data:`PLACED`), which it places
    again; the call that needs them says so in a ``WorkerLostWarning``."""

    def filter(self, record: Any) -> bool:
        msg = record.getMessage() if isinstance(record.msg, str) else ""
        if "lose scattered data" not in msg:
            return True
        keys = re.findall(r"'([^']*)'", msg.split("recovered:", 1)[-1].split("(stimulus_id", 1)[0])
        return not keys or not all(k.startswith(PLACED) for k in keys)


def quiet_placed_losses() -> None:
    """Install :class:`_PlacedLossFilter` in this (the scheduler's) process, once."""
    log = logging.getLogger("distributed.scheduler")
    if not any(isinstance(f, _PlacedLossFilter) for f in log.filters):
        log.addFilter(_PlacedLossFilter())


def scatter_by_pull(client: Any, objs: Sequence[Any], workers: Sequence[str],
                    keys: Sequence[Any] | None = None) -> list:
    """Futures of ``objs[i]`` held on ``workers[i]`` (keyed ``keys[i]``, default fresh keys), each worker
    copying its objects out of this process's memory (one copy at memory speed, into its pool of warm
    buffers, instead of a socket's two), all at once; None for those that cannot be (another host, too
    small, not plain host buffers, refused): the caller scatters them."""
    from distributed import Future
    from distributed.protocol import to_serialize

    packed = [None if _READV is None or w in _CANNOT_READ_ME or not _host_only(o) else _Parcel.pack(o, "", "", 1)
              for o, w in zip(objs, workers, strict=True)]
    keys = list(keys) if keys is not None else [f"{PLACED}{type(o).__name__}-{uuid.uuid4().hex}" for o in objs]

    async def put(i: int) -> bool:
        try:
            got = await client.rpc(workers[i]).wb_comms_take(key=keys[i], parcel=to_serialize(packed[i][0]))
        except OSError:
            got = {}
        if got.get("status") != "OK":
            _CANNOT_READ_ME.add(workers[i])
            return False
        await client.scheduler.update_data(who_has={keys[i]: [workers[i]]}, nbytes=got["nbytes"], client=client.id)
        return True

    async def put_all() -> list[bool]:
        return await asyncio.gather(*(put(i) for i in todo))

    todo = [i for i, p in enumerate(packed) if p is not None]
    done = dict(zip(todo, client.sync(put_all), strict=True)) if todo else {}
    packed.clear()   # the workers have their copies: the buffers may go
    out: list = []
    for i, o in enumerate(objs):
        if not done.get(i):
            out.append(None)
            continue
        out.append(Future(keys[i], client))
        client.futures[keys[i]].finish(type=type(o))
    return out
