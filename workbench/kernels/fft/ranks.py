"""FFT's SPMD rank body: load (or redistribute) the rank's block, then local
FFT stages and pipelined all-to-all transposes inside the grid's
sub-communicators.  The local transforms are :mod:`.cpu`'s engines."""

from __future__ import annotations

import math
import queue
import threading
import time
from typing import Any

import numpy as np

from ...backend import device_kind, empty, launch, namespace, synchronize, to_device
from ...partition import block_offsets
from .cpu import _fft_into
from .plan import FFTPlan, _rank_box, _rank_coords, _Stage

#: Target bytes of one pipelined transpose chunk (per destination piece roughly chunk/p).
_CHUNK_BYTES = 64 << 20
_MAX_CHUNKS = 16


# --------------------------------------------------------------------------
# The SPMD rank: redistribute, then local FFT stages and pipelined transposes
# --------------------------------------------------------------------------


def _fft_rank(comm: Any, arg: tuple, plan: FFTPlan) -> tuple[Any, dict]:
    t_start = time.perf_counter()
    timers = {"fft_s": 0.0, "transpose_s": 0.0, "redistribute_s": 0.0, "pack_s": 0.0, "place_s": 0.0,
              "wait_s": 0.0}
    coords = _rank_coords(comm.rank, plan.grid)
    d = len(plan.grid)
    if d <= 1:
        subs = [comm] * d
    else:
        subs = [comm.split(color=int(np.ravel_multi_index(coords[:g] + (0,) + coords[g + 1:], plan.grid)),
                           key=coords[g]) for g in range(d)]
    tr = time.perf_counter()
    a, owned = _load_input(comm, arg, plan)
    if device_kind() == "gpu" and namespace(a) is np:
        # a host input's blocks arrive on the host: on a GPU worker they move to the device, or the
        # whole transform ran FFTW on the worker's cores under stats["backend"] == "gpu" (first device run)
        a, owned = to_device(a), True
    timers["redistribute_s"] = time.perf_counter() - tr
    xp = namespace(a)
    if a.dtype != plan.work_dtype:
        a, owned = a.astype(plan.work_dtype), True
    scale_pending = plan.scale != 1.0
    for k, st in enumerate(plan.stages):
        if st.transpose is None:
            tf = time.perf_counter()
            a, owned = _local_stage(a, owned, st, plan)
            timers["fft_s"] += time.perf_counter() - tf
            continue
        g, xax, yax = st.transpose
        a = _stage_and_transpose(subs[g], a, owned, st, plan, k, coords[g], scale_pending, timers)
        owned, scale_pending = True, False
    if scale_pending:
        a *= plan.scale
    synchronize(a)
    info = {"rank": comm.rank, "backend": device_kind(), "shape": tuple(int(n) for n in a.shape),
            "bytes_sent": int(comm.stats["bytes_sent"]),
            "bytes_pulled": int(comm.stats.get("bytes_pulled", 0)), "total_s": time.perf_counter() - t_start,
            **timers}
    info["transpose_s"] = max(0.0, info["total_s"] - timers["fft_s"] - timers["redistribute_s"])
    del xp
    return a, info


def _load_input(comm: Any, arg: tuple, plan: FFTPlan) -> tuple[Any, bool]:
    """This rank's block of the first layout (redistributing arbitrary input chunks through an all-to-all)."""
    how, payload = arg
    if how == "block":
        a = payload
        if namespace(a) is np and not (a.flags.c_contiguous and a.flags.aligned):
            # deserialised frames can sit off element alignment, which FFTW refuses
            out = empty(a.shape, a.dtype, like=a)
            out[...] = a
            return out, True
        if not a.flags.c_contiguous:
            return namespace(a).ascontiguousarray(a), True
        return a, False
    shape0 = plan.stages[0].in_shape
    P = comm.size
    targets = [_rank_box(r, plan, 0, shape0) for r in range(P)]
    sends: list[list] = [[] for _ in range(P)]
    for box, arr in payload:
        for r, tb in enumerate(targets):
            inter = tuple((max(lo, tlo), min(hi, thi)) for (lo, hi), (tlo, thi) in zip(box, tb, strict=True))
            if all(lo < hi for lo, hi in inter):
                sl = tuple(slice(lo - blo, hi - blo) for (lo, hi), (blo, _) in zip(inter, box, strict=True))
                sends[r].append((inter, namespace(arr).ascontiguousarray(arr[sl])))
    got = comm.alltoallv(sends)
    mine = targets[comm.rank]
    like = payload[0][1] if payload else None
    dt = like.dtype if like is not None else plan.in_dtype
    for lst in got:
        if lst:
            dt = lst[0][1].dtype
            like = lst[0][1]
            break
    out = empty(tuple(hi - lo for lo, hi in mine), dt, like=like)
    for lst in got:
        for box, arr in lst:
            out[tuple(slice(lo - mlo, hi - mlo) for (lo, hi), (mlo, _) in zip(box, mine, strict=True))] = arr
    return out, True


def _n_chunks(extent: int, slice_bytes: int, overlap: bool, transposing: bool) -> int:
    if extent <= 1:
        return 1
    total = extent * slice_bytes
    n = -(-total // _CHUNK_BYTES)
    if overlap and transposing:
        n = max(n, 4 if total >= (8 << 20) else 1)
    return int(max(1, min(extent, _MAX_CHUNKS, n)))


def _stage_out_local(a: Any, st: _Stage) -> tuple[int, ...]:
    shp = list(a.shape)
    if st.kind in ("r2c", "c2r"):
        shp[st.axes[-1]] = st.out_shape[st.axes[-1]]
    return tuple(shp)


def _out_dtype(a: Any, st: _Stage, plan: FFTPlan) -> np.dtype:
    if st.kind == "r2c":
        return np.dtype(np.complex64 if a.dtype == np.float32 else np.complex128)
    if st.kind == "c2r":
        return np.dtype(np.float32 if a.dtype == np.complex64 else np.float64)
    return a.dtype


def _local_stage(a: Any, owned: bool, st: _Stage, plan: FFTPlan) -> tuple[Any, bool]:
    """A stage with no transpose after it: chunked along its largest batch axis (plans stay small)."""
    if not st.kind or a.size == 0:
        if st.kind and a.size == 0:
            return empty(_stage_out_local(a, st), _out_dtype(a, st, plan), like=a), True
        return a, owned
    out_shape = _stage_out_local(a, st)
    inplace = owned and st.kind in ("fwd", "bwd")
    out = a if inplace else empty(out_shape, _out_dtype(a, st, plan), like=a)
    src = a if owned or st.kind != "c2r" else a.copy()  # c2r may destroy its input
    batch = [ax for ax in range(a.ndim) if ax not in st.axes]
    if not batch:
        # every axis is transformed (a 1-D transform on one rank): nothing to chunk along, and slicing
        # ``out`` like ``a`` would cut an r2c/c2r axis whose length the stage changes
        _local_fft(src, out, st)
        return out, True
    cax = next((ax for ax in batch if a.shape[ax] > 1), batch[0])  # outermost: long contiguous runs
    slice_bytes = a.nbytes // max(1, a.shape[cax])
    n = _n_chunks(a.shape[cax], slice_bytes, False, False)
    offs = block_offsets(a.shape[cax], n)
    for c in range(n):
        sl = [slice(None)] * a.ndim
        sl[cax] = slice(int(offs[c]), int(offs[c + 1]))
        sl = tuple(sl)
        _local_fft(src[sl], out[sl], st)
    return out, True


def _stage_and_transpose(sub: Any, a: Any, owned: bool, st: _Stage, plan: FFTPlan, k: int, me: int,
                         scale_pending: bool, timers: dict) -> Any:
    """FFT this stage in chunks along x, shipping each chunk's y-pieces while the next is transformed."""
    g, xax, yax = st.transpose
    p = sub.size
    y_offs = plan.layouts[k + 1][g][1]
    x_offs = plan.layouts[k][g][1]
    out_dt = _out_dtype(a, st, plan) if st.kind else a.dtype
    mid_shape = _stage_out_local(a, st) if st.kind else tuple(a.shape)
    new_shape = list(mid_shape)
    new_shape[xax] = int(x_offs[-1])
    new_shape[yax] = int(y_offs[me + 1] - y_offs[me])
    new = empty(tuple(new_shape), out_dt, like=a)
    # from the extents across x only: receivers redo a sender's chunking with their own slice_bytes, and a
    # rank holding none of x (more ranks than planes) must still agree with the others
    slice_bytes = math.prod(n for ax, n in enumerate(mid_shape) if ax != xax) * np.dtype(out_dt).itemsize
    scale = plan.scale if scale_pending else 1.0
    xp = namespace(a)
    # device workers pack and place with the numba.cuda box copy (cuda.py); CPU workers slice with numpy
    dev = None
    if device_kind() != "cpu":
        from . import cuda as dev

    def chunking(extent: int) -> np.ndarray:
        return block_offsets(extent, _n_chunks(extent, slice_bytes, plan.overlap, True))

    my_chunks = chunking(a.shape[xax])
    # send buffers come from the host pool and go back once a send has returned and dropped them,
    # so a transpose faults in a few chunks' worth of pages instead of its whole volume
    sender = _Sender(sub) if plan.overlap and p > 1 else None
    tag0 = ("fft-t", k)
    src = a if owned or st.kind != "c2r" else a.copy()
    if dev is not None and not src.flags.c_contiguous:
        src = xp.ascontiguousarray(src)
    buf = None
    try:
        for c in range(len(my_chunks) - 1):
            lo, hi = int(my_chunks[c]), int(my_chunks[c + 1])
            sl = [slice(None)] * a.ndim
            sl[xax] = slice(lo, hi)
            part = src[tuple(sl)]
            if st.kind:
                # also when part is empty (a rank with no planes): an r2c stage changes the length and dtype
                # of the pieces, and the peers place them into blocks of the stage's output shape
                cshape = list(mid_shape)
                cshape[xax] = hi - lo
                if buf is None or buf.shape != tuple(cshape):
                    buf = empty(tuple(cshape), out_dt, like=a)
                tf = time.perf_counter()
                _local_fft(part, buf, st)
                timers["fft_s"] += time.perf_counter() - tf
                done, done_x = buf, 0
            else:
                done, done_x = part, lo
            tp = time.perf_counter()
            for dst in range(p):
                ysl = [slice(None)] * a.ndim
                ysl[yax] = slice(int(y_offs[dst]), int(y_offs[dst + 1]))
                piece = done[tuple(ysl)]
                if dev is not None:
                    # the box (this chunk along x, rank dst's part of y) of the whole contiguous array
                    base = buf if done is buf else src
                    box = (hi - lo, int(y_offs[dst + 1] - y_offs[dst]))
                    if dst == me:
                        _copy_box(dev, base, (done_x, int(y_offs[dst])), new, (int(x_offs[me]) + lo, 0), box,
                                  xax, yax, scale)
                        continue
                    packed = empty(piece.shape, out_dt, like=a)
                    _copy_box(dev, base, (done_x, int(y_offs[dst])), packed, (0, 0), box, xax, yax, scale)
                    synchronize(packed)  # the kernel is asynchronous on a GPU; the sender serializes packed
                elif dst == me:
                    tsl = [slice(None)] * a.ndim
                    tsl[xax] = slice(int(x_offs[me]) + lo, int(x_offs[me]) + hi)
                    if scale != 1.0:
                        xp.multiply(piece, scale, out=new[tuple(tsl)])
                    else:
                        new[tuple(tsl)] = piece
                    continue
                else:
                    packed = empty(piece.shape, out_dt, like=a)
                    if scale != 1.0:
                        xp.multiply(piece, scale, out=packed)
                    else:
                        packed[...] = piece
                tw = time.perf_counter()
                timers["pack_s"] += tw - tp
                if sender is not None:
                    sender.put(dst, packed, (*tag0, c))
                else:
                    sub.send(dst, packed, tag=(*tag0, c))
                tp = time.perf_counter()
                timers["wait_s"] += tp - tw
            timers["pack_s"] += time.perf_counter() - tp
        # place the pieces the other ranks of this sub-communicator send
        for src_rank in range(p):
            if src_rank == me:
                continue
            ext = int(x_offs[src_rank + 1] - x_offs[src_rank])
            their = chunking(ext)
            for c in range(len(their) - 1):
                tw = time.perf_counter()
                piece = sub.recv(src_rank, tag=(*tag0, c))
                tp = time.perf_counter()
                timers["wait_s"] += tp - tw
                x0 = int(x_offs[src_rank] + their[c])
                if dev is not None:
                    piece = xp.ascontiguousarray(piece)
                    _copy_box(dev, piece, (0, 0), new, (x0, 0), (piece.shape[xax], piece.shape[yax]), xax, yax, 1.0)
                else:
                    tsl = [slice(None)] * a.ndim
                    tsl[xax] = slice(x0, int(x_offs[src_rank] + their[c + 1]))
                    new[tuple(tsl)] = piece
                timers["place_s"] += time.perf_counter() - tp
    finally:
        if sender is not None:
            tw = time.perf_counter()
            sender.close()
            timers["wait_s"] += time.perf_counter() - tw
    return new


def _copy_box(dev: Any, src: Any, s_xy: tuple[int, int], dst: Any, d_xy: tuple[int, int], n_xy: tuple[int, int],
              xax: int, yax: int, scale: float) -> None:
    """``dst[box at d_xy] = scale * src[box at s_xy]``, the box ``n_xy`` long along (xax, yax) and whole
    along every other axis, with the device kernel (both arrays C-contiguous; asynchronous on a GPU)."""
    p, q = min(xax, yax), max(xax, yax)

    def order(xy: tuple[int, int]) -> tuple[int, int]:
        return (int(xy[0]), int(xy[1])) if xax < yax else (int(xy[1]), int(xy[0]))

    (s1, s3), (d1, d3), (n1, n3) = order(s_xy), order(d_xy), order(n_xy)
    d5 = dev.box5(dst, p, q)
    n = d5.shape[0] * n1 * d5.shape[2] * n3 * d5.shape[4]
    if n:
        launch(dev._copy_box, n, dev.box5(src, p, q), d5, s1, s3, d1, d3, n1, n3, float(scale))


class _Sender:
    """Background thread shipping transpose pieces so the FFT of the next chunk overlaps the transfer."""

    def __init__(self, comm: Any, depth: int = 4) -> None:
        self.comm = comm
        self.q: queue.Queue = queue.Queue(maxsize=depth)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True, name="wb-fft-sender")
        self.thread.start()

    def _run(self) -> None:
        while True:
            item = self.q.get()
            if item is None:
                return
            if self.error is not None:
                continue
            try:
                self.comm.send(item[0], item[1], tag=item[2])
            except BaseException as e:  # surfaced on close
                self.error = e
            del item  # the sent buffer goes back to the host pool now, not at the next get()

    def put(self, dst: int, obj: Any, tag: tuple) -> None:
        if self.error is not None:
            raise self.error
        self.q.put((dst, obj, tag))

    def close(self) -> None:
        self.q.put(None)
        self.thread.join()
        if self.error is not None:
            raise self.error


def _local_fft(a: Any, out: Any, st: _Stage) -> None:
    """Transform ``a`` along ``st.axes`` into ``out``, unnormalised: cuFFT for device arrays
    (:mod:`.cuda`, imported only then), FFTW or scipy.fft for host arrays."""
    if namespace(a) is np:
        _fft_into(a, out, st)
    elif a.size:
        from .cuda import _cupy_fft_into

        _cupy_fft_into(a, out, st)
