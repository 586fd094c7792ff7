"""The SPMD rank bodies of the tridiagonal solver (one long task per worker, see the package docstring)
and their worker-local dispatch: the numba kernels (``cpu``) on CPU workers, their numba.cuda twins
(``cuda``) on GPU and simulated-GPU workers, or array-namespace code (``engine="array"``).
"""

from __future__ import annotations

import math
import time
from typing import Any, NamedTuple

import numpy as np

from ...backend import device_kind, empty, launch, namespace, synchronize, to_device, to_host
from . import cpu
from .cpu import (
    compact_rhs_kernel,
    expand1_kernel,
    expand1p_kernel,
    expand_b1_kernel,
    reduce1_kernel,
    reduce1p_kernel,
    reduce_b1_kernel,
)
from .params import (
    _BATCH_PANEL,
    _BATCH_PANEL_BYTES,
    _CHK_SCALE,
    _FUSED_HALOS,
    _FUSED_TILE,
    _FUSED_WINDOW,
    _PROBE,
    _PROBE_MARGIN,
    _PROBE_ROWS,
    _TILE_SYSTEMS,
    _TRUNC_TOL,
    COMPACT6,
)

# --------------------------------------------------------------------------
# The SPMD rank
# --------------------------------------------------------------------------


def _tridiag_rank(comm: Any, arg: tuple, cfg: dict) -> tuple:
    parts, lo, hi, starts, lens, fused = arg
    t0 = time.perf_counter()
    phases = {}
    kind = device_kind()
    if cfg["form"] == "rows":
        parts = tuple(to_device(p) for p in parts)  # on a GPU worker, blocks scattered from the host move there once
        xp_of = namespace(*parts)
    else:
        # lists of (first local row, block) in the caller's layout
        raw = [[(q[0], _rows_of(to_device(q[1]), q[2:], cfg)) for q in pieces]
               for pieces in _borrowed(comm, parts, cfg)]
        if cfg["split"] == "batch":
            raw = _common_rows(raw, 1 - cfg["nax"])
        xp_of = namespace(*[p for pieces in raw for _, p in pieces])
    cfg = {**cfg, "local": _engine(kind, cfg["engine"], xp_of)}
    x = None
    info = {}
    groups = room = None
    if cfg["form"] != "rows":
        m = hi - lo
        if not cfg["batched"]:
            cfg["V"] = 1
        elif cfg["split"] == "batch":
            cfg["V"] = sum(int(row[0][1].shape[1 - cfg["nax"]]) for row in _batch_rows(raw[-1]))
        else:
            cfg["V"] = int(raw[-1][0][1].shape[1 - cfg["nax"]])
        groups = _gtsv_groups(raw, cfg, fused) if (cfg["mode"] == "solve" and cfg["local"] == "numba"
                                                   and cfg["batched"] and cfg["nax"] == 1 and cfg["R"] == 1
                                                   and cfg["b_ndim"] == 2 and fused is not None) else None
        if groups is not None:
            # the gtsv layout's own fused pass on the blocks as they lie: panels of systems transposed in
            # cache, x written in the caller's layout
            phases["layout"] = time.perf_counter() - t0
            room = _room(comm, lo, hi, cfg)
            x, info = _solve_fused(comm, groups, fused, cfg, phases, m, gtsv=room)
            if x is None:
                info["fallback"] = True   # the coupling does not decay: the two-pass path (all ranks alike)
        if x is None:
            t = time.perf_counter()
            # one (block, first row, fill) per input
            ins = [_assemble(pieces, m, cfg) for pieces in raw]
            if cfg["mode"] == "compact":
                dl, d, du, b = _compact_local(comm, _to_line_major(*ins[0], m, cfg, rhs=False), lo, hi, cfg)
            else:
                dl, d, du = (_to_line_major(*ins[k], m, cfg, rhs=False) for k in range(3))
                b = _to_line_major(*ins[3], m, cfg, rhs=True)
            phases["layout"] = phases.get("layout", 0.0) + time.perf_counter() - t
    else:
        if cfg["mode"] == "compact":
            f = _line_major_local(parts[0], cfg, rhs=False)
            dl, d, du, b = _compact_local(comm, f, lo, hi, cfg)
        else:
            dl, d, du = (_line_major_local(p, cfg, rhs=False) for p in parts[:3])
            b = _line_major_local(parts[3], cfg, rhs=True)
        phases["layout"] = time.perf_counter() - t0
    if x is None:
        # the fused pass has no array-namespace version; every rank decides alike (same engine everywhere)
        run_fused = fused is not None and cfg["local"] != "array" and not info.get("fallback")
        x, info = _solve_fused(comm, (dl, d, du, b), fused, cfg, phases, d.shape[0]) if run_fused else (None, info)
        if x is None:
            x, more = _solve_local(comm, dl, d, du, b, lo, starts, lens, cfg, phases)
            info.update(more)
        if cfg["form"] != "rows":
            t = time.perf_counter()
            x = _to_user(x, cfg)
            phases["layout"] += time.perf_counter() - t
    if cfg.get("out_edges") is not None:
        t = time.perf_counter()
        x = _realign(comm, x, lo, hi, cfg, room if info.get("path") == "fused" and groups is not None else None)
        phases["realign"] = time.perf_counter() - t
    synchronize(x)
    t1 = time.perf_counter()
    info.update(seconds=t1 - t0, phases=phases, bytes_sent=comm.stats["bytes_sent"], span=(t0, t1), backend=kind,
                gtsv_in_place=(groups is not None and info.get("path") == "fused")
                if cfg["form"] != "rows" and cfg["nax"] == 1 and cfg["batched"] else None)
    info.pop("fallback", None)
    return x, info


class Borrow(NamedTuple):
    """A rank's piece that rank ``rank`` lends inside the group: columns ``c0:c1`` (along the line) of
    its piece ``index`` of the same input (instead of a task that cuts them before the group starts)."""

    rank: int
    index: int
    c0: int
    c1: int


def _borrowed(comm: Any, parts: tuple, cfg: dict) -> list:
    """The rank's pieces with the columns its neighbours lend it in place of their ``Borrow`` markers (one
    exchange, on every rank when any rank borrows; the client lists who lends what in ``cfg["lends"]``)."""
    lends = cfg.get("lends")
    if not lends:
        return list(parts)
    ax = cfg["nax"]
    sends: dict[int, list] = {}
    for dest, k, j, c0, c1 in lends[comm.rank]:
        p = parts[k][j][1]
        sends.setdefault(dest, []).append(namespace(p).ascontiguousarray(p[_along(ax, p.ndim, c0, c1)]))
    lenders = sorted({p.rank for pieces in parts for _, p in pieces if isinstance(p, Borrow)})
    got = {r: iter(v) for r, v in comm.neighbor_exchange(sends, recv_from=lenders).items()}
    return [[(r0, next(got[p.rank]) if isinstance(p, Borrow) else p) for r0, p in pieces] for pieces in parts]


def _engine(kind: str, engine: str, xp: Any) -> str:
    """The worker-local kernels: "numba" (cpu.py), "cuda" (their cuda.py twins, on GPU and simulated-GPU
    workers) or "array" (row-vectorized namespace code: ``engine="array"``, or device arrays on a CPU worker)."""
    if engine == "array":
        return "array"
    if kind != "cpu":
        return "cuda"
    if xp is not np:
        if engine == "numba":
            raise TypeError("engine='numba' needs host (numpy) arrays on a CPU worker")
        return "array"
    return "numba"


def _assemble(pieces: list, m: int, cfg: dict) -> tuple[Any, int, Any]:
    """One input's blocks as ``(a, r0, fill)``: ``a`` in the caller's layout whose first entry along the line
    is local row ``r0`` (rows before it take ``fill``, a vector over the systems, or 0 when None; rows after
    it 0).  Chunks come as they are: a gtsv sub-diagonal split like ``d`` is its neighbour's last entry plus
    the rank's own chunk, read in place; only other splits are copied into one block."""
    lax = cfg["nax"]
    if len(pieces) == 1:
        r0, a = pieces[0]
        return a, r0, None
    xp = namespace(*[p for _, p in pieces])
    if cfg["split"] == "batch":   # whole lines, several chunks of systems: one block of them
        rows = _batch_rows(pieces)
        if all(len(row) == 1 for row in rows):
            return xp.concatenate([row[0][1] for row in rows], axis=1 - lax), pieces[0][0], None
        return xp.concatenate([_block(row, m, lax) for row in rows], axis=1 - lax), 0, None
    pieces = sorted(pieces, key=lambda q: q[0])
    (r_a, a), (r_b, b) = pieces[0], pieces[-1]
    if len(pieces) == 2 and r_a == 0 and a.shape[lax] == 1 and r_b == 1:
        return b, 1, xp.take(a, 0, axis=lax)
    return _block(pieces, m, lax), 0, None


def _rows_of(a: Any, rows: tuple, cfg: dict) -> Any:
    """A chunk of systems, or the rows ``rows = (v0, v1)`` of it that the rank reads (a view)."""
    return a[_along(1 - cfg["nax"], a.ndim, *rows)] if rows else a


def _common_rows(raw: list, bax: int) -> list:
    """A batch split's pieces of every input cut at every input's edges between chunks of systems (views),
    so that row ``i`` of each input names the same systems (dask's ``chunks="auto"`` cuts gtsv's ``n - 1``
    off-diagonals into other rows of systems than ``d``)."""
    rows = [_batch_rows(pieces) for pieces in raw]
    sizes = [[int(row[0][1].shape[bax]) for row in rk] for rk in rows]
    if all(sz == sizes[-1] for sz in sizes):
        return raw
    cuts = sorted(set().union(*(np.cumsum(sz).tolist() for sz in sizes)))
    out = []
    for rk, sz in zip(rows, sizes, strict=True):
        ends = np.cumsum(sz)
        pieces, lo = [], 0
        for hi in cuts:
            c = int(np.searchsorted(ends, lo, side="right"))
            base = int(ends[c] - sz[c])
            pieces += [(r0, p[_along(bax, p.ndim, lo - base, hi - base)]) for r0, p in rk[c]]
            lo = hi
        out.append(pieces)
    return out


def _batch_rows(pieces: list) -> list[list]:
    """A batch split's pieces of one input by chunk of systems: they come row by row of the caller's chunk
    grid, each row's chunks in order along the line, so a row starts where the first row does not grow."""
    rows: list[list] = []
    for q in pieces:
        if not rows or q[0] <= rows[-1][-1][0]:
            rows.append([])
        rows[-1].append(q)
    return rows


def _block(pieces: list, m: int, lax: int) -> Any:
    """The rows ``0..m`` of the line that ``(first row, block)`` pieces cover, copied into one block
    (rows no piece covers are 0)."""
    shape = list(pieces[0][1].shape)
    shape[lax] = m
    # pooled, not zeros: a fresh block faults in every page (about 1 ms per MiB here), more than the copy
    out = empty(tuple(shape), like=pieces[0][1])
    covered = np.zeros(m + 1, np.int64)
    for r0, p in pieces:
        i0, i1 = max(r0, 0), min(r0 + p.shape[lax], m)
        if i1 > i0:
            out[_along(lax, out.ndim, i0, i1)] = p[_along(lax, p.ndim, i0 - r0, i1 - r0)]
            covered[i0] += 1
            covered[i1] -= 1
    gaps = np.flatnonzero(np.cumsum(covered[:m]) == 0)
    for g0, g1 in _runs(gaps):
        out[_along(lax, out.ndim, g0, g1)] = 0.0
    return out


def _runs(idx: np.ndarray) -> list[tuple[int, int]]:
    """Sorted indices as half-open runs ``[(start, stop)]``."""
    if idx.size == 0:
        return []
    cut = np.flatnonzero(np.diff(idx) != 1) + 1
    return [(int(r[0]), int(r[-1]) + 1) for r in np.split(idx, cut)]


def _room(comm: Any, lo: int, hi: int, cfg: dict) -> tuple[Any, int]:
    """The gtsv pass's answer buffer ``(buf, pre)``: the rank's rows ``lo..hi`` in columns ``pre..`` of a
    (V, w) block with room for the rows its neighbours pass it (``cfg["out_edges"]``), so its block of the
    answer is there without a copy."""
    oe = cfg.get("out_edges")
    o_lo, o_hi = (lo, hi) if oe is None else (oe[comm.rank], oe[comm.rank + 1])
    pre, post = max(lo - o_lo, 0), max(o_hi - hi, 0)
    return empty((cfg["V"], pre + hi - lo + post)), pre


def _realign(comm: Any, x: Any, lo: int, hi: int, cfg: dict, room: tuple | None) -> Any:
    """The rank's answer for rows ``lo..hi`` (the caller's layout) -> its block for rows ``out_edges[rank]..
    out_edges[rank + 1]``: rows past a chunk edge of the caller's go to the neighbour, the neighbour's come in
    (one exchange of those few rows; every rank of a line split calls this).  ``room``: the buffer that ``x``
    is a view of, with room for the incoming rows (else the block is copied)."""
    oe, ax, r = cfg["out_edges"], cfg["nax"], comm.rank
    o_lo, o_hi = oe[r], oe[r + 1]
    xp = namespace(x)
    sends = {}
    if o_lo > lo:
        sends[r - 1] = xp.ascontiguousarray(x[_along(ax, x.ndim, 0, o_lo - lo)])
    if o_hi < hi:
        sends[r + 1] = xp.ascontiguousarray(x[_along(ax, x.ndim, o_hi - lo, hi - lo)])
    recv = ([r - 1] if o_lo < lo else []) + ([r + 1] if o_hi > hi else [])
    got = comm.neighbor_exchange(sends, recv_from=recv)
    if room is not None:   # the (V, w) gtsv buffer: x is its columns pre..pre + m, rows lo - pre..
        buf, pre = room
        if o_lo < lo:
            buf[:, :pre] = got[r - 1]
        if o_hi > hi:
            buf[:, pre + hi - lo:] = got[r + 1]
        return buf[:, o_lo - lo + pre:o_hi - lo + pre]
    own = x[_along(ax, x.ndim, max(o_lo - lo, 0), min(o_hi, hi) - lo)]
    if not recv:
        return own
    return xp.concatenate(([got[r - 1]] if o_lo < lo else []) + [own] + ([got[r + 1]] if o_hi > hi else []),
                          axis=ax)


def _gtsv_groups(raw: list, cfg: dict, blocks: tuple) -> list | None:
    """The gtsv fused pass's kernel calls on the blocks as they lie: ``[(v0, runs)]``, each run
    ``(s0, s1, inputs)`` the rank's fused blocks ``s0..s1-1`` with each input as at most two ``(first row,
    block)`` pieces of the same systems ``v0..``; None when the blocks do not fit that (then they are
    copied into one block per input).  Along the line a rank's input is a chunk plus at most the few
    columns of its neighbour that the rank reaches into, or, where a rank's rows span three or more chunks,
    runs of blocks that each reach into two at most (joined as ranks are); along the batch, a group per
    chunk of systems when all four inputs are chunked alike (its line in runs as above)."""
    if cfg["split"] == "batch":
        rows = [_batch_rows(pieces) for pieces in raw]
        sizes = [[int(row[0][1].shape[0]) for row in rk] for rk in rows]
        if any(sz != sizes[-1] for sz in sizes):
            return None
        v0s = np.concatenate([[0], np.cumsum(sizes[-1])[:-1]]).astype(np.int64)
        groups = [(int(v0), _block_runs([rk[c] for rk in rows], *blocks)) for c, v0 in enumerate(v0s)]
        return None if any(runs is None for _, runs in groups) else groups
    runs = _block_runs(raw, *blocks)
    return None if runs is None else [(0, runs)]


def _block_runs(raw: list, starts: np.ndarray, lens: np.ndarray) -> list | None:
    """The fewest runs of consecutive blocks over whose rows every input is at most two pieces (the
    kernel's limit), each input's pieces sorted by first row; None when a single block reaches into more
    (chunks narrower than a block) or into none."""
    def over(pieces: list, a: int, z: int) -> list:
        return sorted((q for q in pieces if q[0] < z and q[0] + q[1].shape[1] > a), key=lambda q: q[0])

    def fits(s0: int, s1: int) -> list | None:
        a, z = int(starts[s0]), int(starts[s1 - 1] + lens[s1 - 1])
        ins = [over(pieces, a, z) for pieces in raw]
        return ins if all(1 <= len(q) <= 2 for q in ins) else None

    runs, s0, S = [], 0, len(starts)
    while s0 < S:
        ins = fits(s0, s0 + 1)
        if ins is None:
            return None
        s1 = s0 + 1
        while s1 < S and (more := fits(s0, s1 + 1)) is not None:
            s1, ins = s1 + 1, more
        runs.append((s0, s1, ins))
        s0 = s1
    return runs


def _along(ax: int, ndim: int, i0: int, i1: int) -> tuple:
    return tuple(slice(i0, i1) if i == ax else slice(None) for i in range(ndim))


def _to_line_major(a: Any, r0: int, fill: Any, m: int, cfg: dict, rhs: bool) -> Any:
    """An input in the solver's layout: coefficients ``(m, V)``, right-hand sides ``(m, R, V)``; a copy (a
    transpose for the gtsv layout) unless the block is line-major and aligned already."""
    t = a if cfg["nax"] == 0 else a.swapaxes(0, 1)          # line axis first: (w,), (w, R), (w, V), (w, V, R)
    w = t.shape[0]
    if not cfg["batched"]:
        t = t[:, None] if t.ndim == 1 else t[:, None, :]     # (w, 1) or (w, 1, R): one system
    if r0 <= 0 and r0 + w >= m and cfg["nax"] == 0:
        out = t[-r0:m - r0]  # the rank's rows inside one line-major block (a chunk that starts a few rows early)
    else:
        out = empty((m,) + t.shape[1:], like=a)
        i0, i1 = max(r0, 0), min(r0 + w, m)
        # fill: the row before the block, over the systems (and the right-hand sides: a b chunked by single rows)
        out[:max(i0, 0)] = 0.0 if fill is None else fill.reshape((1,) + out.shape[1:])
        out[i0:i1] = t[i0 - r0:i1 - r0]
        out[i1:] = 0.0
    if not rhs:
        return out
    if out.ndim == 2:
        return out[:, None, :]
    moved = empty((m, out.shape[2], out.shape[1]), like=a)  # (m, V, R) -> (m, R, V)
    moved[...] = out.transpose(0, 2, 1)
    return moved


def _to_user(x: Any, cfg: dict) -> Any:
    """The answer ``(m, R, V)`` back in the caller's layout (the shape of ``b``, or of ``f``)."""
    nd = cfg["b_ndim"] if cfg["mode"] == "solve" else (2 if cfg["batched"] else 1)
    if not cfg["batched"]:
        return x[:, :, 0] if nd == 2 else x[:, 0, 0]
    if cfg["nax"] == 0:
        if nd == 2:
            return x[:, 0, :]
        out = empty((x.shape[0], x.shape[2], x.shape[1]), like=x)
        out[...] = x.transpose(0, 2, 1)
        return out
    if nd == 2:
        out = empty((x.shape[2], x.shape[0]), like=x)
        out[...] = x[:, 0, :].T
        return out
    out = empty((x.shape[2], x.shape[0], x.shape[1]), like=x)
    out[...] = x.transpose(2, 0, 1)
    return out


def _line_major_local(a: Any, cfg: dict, rhs: bool) -> Any:
    """A line-major RowBlocks block in the solver layout: coefficients (m, V), rhs (m, R, V)."""
    if a.ndim == 1:
        return a[:, None, None] if rhs else a[:, None]
    if rhs and a.ndim == 2:
        return a[:, None, :] if cfg["batched"] else a[:, :, None]
    return a


def _solve_local(comm: Any, dl: Any, d: Any, du: Any, b: Any, lo: int, starts: np.ndarray, lens: np.ndarray,
                 cfg: dict, phases: dict) -> tuple[Any, dict]:
    xp = namespace(d, b)
    local = cfg["local"]
    m = d.shape[0]
    V, R = cfg["V"], cfg["R"]
    t = time.perf_counter()
    rows0 = np.concatenate([[0], np.cumsum(np.minimum(lens, 2))]).astype(np.int64)
    M = int(rows0[-1])
    RA, RC, RD = xp.zeros((M, V)), xp.zeros((M, V)), xp.zeros((M, R, V))
    if m:
        chk = _reduce(dl, d, du, b, starts, lens, rows0, RA, RC, RD, local)
        _raise_if_bad(chk, (dl, d, du, b), lo, starts, lens, cfg)
    phases["reduce"] = time.perf_counter() - t
    t = time.perf_counter()
    tau = _far_coupling(RA, RC, rows0, lens)
    tau = float(comm.allreduce(tau, op="max"))
    mode = cfg["reduced"]
    if mode == "auto":
        mode = "truncated" if tau <= _TRUNC_TOL else "exact"
    if mode == "exact":
        Y = _couple_exact(comm, RA, RC, RD, cfg, local)
    else:
        Y = _couple_truncated(comm, RA, RC, RD, cfg)
    phases["couple"] = time.perf_counter() - t
    t = time.perf_counter()
    x = empty((m, R, V), like=b)
    if m:
        Y0 = Y[rows0[:-1]]
        Y1 = Y[rows0[1:] - 1]
        _expand(dl, d, du, b, starts, lens, Y0, Y1, x, local)
    phases["expand"] = time.perf_counter() - t
    return x, {"reduced": mode, "tau": tau, "engine": _ENGINE_NAMES.get(local, xp.__name__), "path": "two-pass"}


def _solve_fused(comm: Any, arrays: Any, blocks: tuple, cfg: dict, phases: dict, m: int,
                 gtsv: tuple | None = None) -> tuple[Any, dict]:
    """One pass over the inputs, then one exchange with each neighbour: ``(x, info)``, or ``(None, info)``
    on every rank when the neighbours' influence does not decay within the halo or something is
    non-finite: the two-pass path then solves (and reports bad input).  ``info["halo_probed"]`` is the
    probe's verdict when this solve ran it (the client caches it per matrix).  ``arrays``: line-major
    ``(dl, d, du, b)``, or with ``gtsv`` the (batch, m) blocks as :func:`_gtsv_groups` lists them, solved
    in cached panels of systems (``x`` then comes back as ``(V, m)``: columns ``pre..pre + m`` of the
    ``gtsv = (buf, pre)`` buffer)."""
    t = time.perf_counter()
    starts, lens = blocks
    V = cfg["V"]
    H = cfg["halo"]
    if H == _PROBE:
        # the halo from the line's first rows, so every worker count picks the same one: rank 0's rows
        # when the line is split, every rank's systems (the worst of them) when each holds whole lines
        def probe() -> int | None:
            upto = min(_PROBE_ROWS[1], int(lens[0]))
            if gtsv:  # the first rows of every group's systems, line-major (a small copy)
                heads = [[(r0, p[:, :upto - r0]) for _, runs in arrays for r0, p in runs[0][2][k] if r0 < upto]
                         for k in range(3)]
                co = [_to_line_major(*_assemble(h, upto, cfg), upto, cfg, rhs=False) for h in heads]
            else:
                co = [a[:upto] for a in arrays[:3]]
            return _fused_halo(*co, int(lens[0]), cfg["local"])

        if cfg["split"] == "batch":
            got = comm.allgather(probe())
            H = None if any(h is None for h in got) else max(got)
        else:
            H = probe() if comm.rank == cfg["nonempty"][0] else None
            H = comm.bcast(H, root=cfg["nonempty"][0])
        probed = {"halo_probed": H}
    else:
        probed = {}
    phases["probe"] = time.perf_counter() - t
    if H is None or 2 * H + 2 > cfg["fused_min_rows"]:
        return None, probed
    t = time.perf_counter()
    local = cfg["local"]
    xp = np if gtsv else namespace(arrays[1])
    # with gtsv, each panel writes H short rows of VS and WS: rows a power of two apart in bytes (V = 2^17 at
    # n = 256) share cache sets and evict the panel, so the rows are 64 bytes longer than V (n = 256 on two
    # workers: a rank's pass 0.10 -> 0.07 s; at n = 4096 5%)
    pad = 8 if gtsv else 0
    VS, WS, edge = (xp.zeros((rows, V + pad))[:, :V] for rows in (H, H, 4))
    chk, tau = xp.zeros(1), xp.zeros(3)
    if gtsv:
        buf, pre = gtsv
        x = buf[:, pre:pre + m]
        for v0, runs in arrays:
            vn = int(runs[0][2][-1][0][1].shape[0])
            xv = x[v0:v0 + vn]
            prev, mine = None, vn == V and len(runs) == 1    # mine: the kernel fills VS, WS, edge itself
            for s0, s1, ins in runs:
                blocks, r0 = [], []
                for pieces in ins:
                    (ra, a), (rb, b2) = pieces[0], pieces[1] if len(pieces) > 1 else (0, np.empty((1, 0)))
                    blocks += _c(a, b2)
                    r0 += [ra, rb]
                vs_, ws_, ed_ = (VS, WS, edge) if mine else (np.zeros((H, vn)), np.zeros((H, vn)), np.zeros((4, vn)))
                cpu.fused_batch_kernel(*blocks, np.array(r0, np.int64), *_i(starts[s0:s1], lens[s0:s1]), xv, vs_,
                                       ws_, ed_, chk, tau, min(vn, _panel_width(lens[s0:s1])), _FUSED_WINDOW, H)
                if prev is None:
                    if not mine:
                        VS[:, v0:v0 + vn], edge[:2, v0:v0 + vn] = vs_, ed_[:2]
                else:
                    # (previous run's last block | this run's first): the interface the kernel solves between
                    # its own blocks, with the same helpers (the same bits); singular sends the solve to the
                    # two-pass path, as inside the kernel
                    i0, (pws, ped), bad = int(starts[s0]), prev, np.zeros(1)
                    cpu.fused_fix_batch_kernel(xv, i0 - H, pws, ped[2], ped[3], ed_[0], ed_[1], 1, bad)
                    cpu.fused_fix_batch_kernel(xv, i0, vs_, ped[2], ped[3], ed_[0], ed_[1], 0, bad)
                    if bad[0]:
                        tau[0] = np.inf
                prev = (ws_, ed_)
            if not mine:
                WS[:, v0:v0 + vn], edge[2:, v0:v0 + vn] = prev[0], prev[1][2:]
        xcol = x
    else:
        dl, d, du, b = arrays
        x = empty((m, 1, V), like=d)
        xcol = x[:, 0]
        _launch(local, "fused_kernel", V, *_c(dl, d, du, b[:, 0]), *_i(starts, lens, like=d), xcol, VS, WS, edge,
                chk, tau, min(V, _FUSED_TILE), _FUSED_WINDOW, H)
    chk, tau = to_host(chk), to_host(tau)
    phases["sweep"] = time.perf_counter() - t
    t = time.perf_counter()
    # one round: every rank's check goes to all (so all decide alike), the edge rows ride along to the
    # neighbours (wasted only when the check fails); an allreduce and then an exchange cost two latencies
    prev, nxt = _neighbours(comm, cfg, m)
    mine = float(tau.max())
    mine = mine if np.isfinite(chk[0]) and not math.isnan(mine) else math.inf  # max() would drop a nan
    parts = [{"worst": mine} for _ in range(comm.size)]
    if prev is not None and prev != comm.rank:
        parts[prev]["to_prev"] = edge[:2]
    if nxt is not None and nxt != comm.rank:
        parts[nxt]["to_next"] = edge[2:]
    got = comm.alltoall(parts)
    worst = max(g["worst"] for g in got)
    phases["couple"] = time.perf_counter() - t
    if not worst <= _TRUNC_TOL:
        return None, probed
    t = time.perf_counter()
    bad = xp.zeros(1)
    fix = (lambda *a: cpu.fused_fix_batch_kernel(*a)) if gtsv else \
        (lambda *a: _launch(local, "fused_fix_kernel", V, *a))
    if prev is not None:  # (prev's last | my first): my first H rows take v * x_last(prev)
        yl, wl = got[prev]["to_next"] if prev != comm.rank else edge[2:]
        fix(xcol, 0, VS, *_c(yl, wl, edge[0], edge[1]), 0, bad)
    if nxt is not None:   # (my last | next's first): my last H rows take w * x_first(next)
        yr, vr = got[nxt]["to_prev"] if nxt != comm.rank else edge[:2]
        fix(xcol, m - H, WS, *_c(edge[2], edge[3], yr, vr), 1, bad)
    if to_host(bad)[0]:
        raise np.linalg.LinAlgError("singular 2x2 interface system between workers' blocks")
    phases["fix"] = time.perf_counter() - t
    return x, {"reduced": "truncated", "tau": worst, "engine": _ENGINE_NAMES[local], "path": "fused", "halo": H,
               **probed}


def _panel_width(lens: np.ndarray) -> int:
    """Systems per panel of the gtsv fused pass: the most (up to ``_BATCH_PANEL``, a multiple of 8) whose longest
    block's four inputs fit ``_BATCH_PANEL_BYTES``, and never fewer than 8 (one vector)."""
    fit = _BATCH_PANEL_BYTES // (4 * 8 * max(int(np.max(lens)), 1))
    return int(min(_BATCH_PANEL, max(8, fit // 8 * 8)))


def _fused_halo(dl: Any, d: Any, du: Any, rows: int, local: str) -> int | None:
    """The shortest halo over which the measured decay (the worst system's geometric-mean |c'| and
    |a / pivot| on the first rows) drops below rounding with margin; None when none of them does."""
    skip, upto = _PROBE_ROWS
    upto = min(upto, rows)
    if upto - skip < 16:
        return None
    worst = namespace(d).zeros(1)
    _launch(local, "decay_kernel", d.shape[1], *_c(dl[:upto], d[:upto], du[:upto]), skip, upto, worst)
    worst = float(to_host(worst)[0])
    if not worst > 0.0:
        return _FUSED_HALOS[0] if worst == 0.0 else None
    rate = math.log(worst) / (upto - skip)
    if not rate < 0.0:
        return None
    need = math.log(_TRUNC_TOL * _PROBE_MARGIN) / rate - 1
    return next((h for h in _FUSED_HALOS if h >= need), None)


def _raise_if_bad(chk: Any, arrays: tuple, lo: int, starts: np.ndarray, lens: np.ndarray, cfg: dict) -> None:
    chk = to_host(chk)
    if np.isfinite(chk).all():
        return
    s = int(np.flatnonzero(~np.isfinite(chk))[0])
    a, z = int(starts[s]), int(starts[s] + lens[s])
    # the compact scheme's right-hand side is built from the caller's f (its matrix is finite by construction):
    # name what the caller passed, a stencil's reach (two rows) around the rows where it shows
    where = {"b": ("f", "near rows", 2)} if cfg["mode"] == "compact" else {}
    for nm, arr in zip(("dl", "d", "du", "b"), arrays, strict=True):
        if not bool(namespace(arr).isfinite(arr[a:z]).all()):
            name, rows, reach = where.get(nm, (nm, "in rows", 0))
            # in the caller's indices: row i's sub-diagonal entry is dl[i - 1], and dl, du hold n - 1 entries
            off = int(nm == "dl" and not cfg["periodic"])
            last = cfg["n"] - 1 - int(nm in ("dl", "du") and not cfg["periodic"])
            raise ValueError(f"{name} has non-finite entries (NaN or inf) {rows} {max(lo + a - reach - off, 0)}.."
                             f"{min(lo + z - 1 + reach - off, last)}")
    raise np.linalg.LinAlgError(
        f"zero pivot in the elimination of rows {lo + a}..{lo + z - 1}: the system is singular or needs "
        "pivoting (tridiag_solve does not pivot; diagonally dominant or SPD systems never need it)")


def _far_coupling(RA: Any, RC: Any, rows0: np.ndarray, lens: np.ndarray) -> float:
    """Largest coupling the truncated reduced system drops (inf when a block has one row)."""
    if lens.size == 0:
        return 0.0
    if (lens < 2).any():
        return math.inf
    xp = namespace(RA)
    first = rows0[:-1]
    far = xp.maximum(xp.abs(RA[first + 1]).max(), xp.abs(RC[first]).max())
    return float(far)


def _couple_exact(comm: Any, RA: Any, RC: Any, RD: Any, cfg: dict, local: str) -> Any:
    """Every rank solves the whole reduced system (same data, same order: same answer)."""
    xp = namespace(RA)
    # whole lines per rank: the reduced system is the rank's own
    got = [(RA, RC, RD)] if cfg.get("split") == "batch" else comm.allgather((RA, RC, RD))
    A = xp.concatenate([xp.asarray(g[0]) for g in got], axis=0)
    C = xp.concatenate([xp.asarray(g[1]) for g in got], axis=0)
    D = xp.concatenate([xp.asarray(g[2]) for g in got], axis=0)
    # the reduced system of a non-dominant problem is not dominant either: pivot there (LAPACK gtsv)
    Y = _solve_chain(A, C, D, True, local) if cfg["periodic"] else _gtsv_pivoted(A, C, D)
    r0 = 0 if cfg.get("split") == "batch" else sum(cfg["nrows"][:comm.rank])
    return Y[r0:r0 + RA.shape[0]]


def _couple_truncated(comm: Any, RA: Any, RC: Any, RD: Any, cfg: dict) -> Any:
    """Each interface (last row of a block, first row of the next) as a 2x2 system, neighbours only."""
    xp = namespace(RA)
    M = RA.shape[0]
    sends, recv_from = {}, []
    prev, nxt = _neighbours(comm, cfg, M)
    # both neighbours may be the same rank (two ranks, periodic): tag the payloads by side
    if prev is not None:
        sends.setdefault(prev, {})["to_next"] = (RA[0], RD[0])
        recv_from.append(prev)
    if nxt is not None:
        sends.setdefault(nxt, {})["to_prev"] = (RC[M - 1], RD[M - 1])
        recv_from.append(nxt)
    got = comm.neighbor_exchange(sends, recv_from=sorted(set(recv_from)))
    if not M:
        return xp.zeros((0,) + RD.shape[1:])
    zero_c, zero_d = xp.zeros_like(RC[0]), xp.zeros_like(RD[0])
    # rows are [first_0, last_0, first_1, last_1, ...]; pair (last_s, first_{s+1})
    pc = xp.concatenate([(got[prev]["to_prev"][0] if prev is not None else zero_c)[None], RC[1::2]], axis=0)
    pd = xp.concatenate([(got[prev]["to_prev"][1] if prev is not None else zero_d)[None], RD[1::2]], axis=0)
    na = xp.concatenate([RA[0::2], (got[nxt]["to_next"][0] if nxt is not None else zero_c)[None]], axis=0)
    nd = xp.concatenate([RD[0::2], (got[nxt]["to_next"][1] if nxt is not None else zero_d)[None]], axis=0)
    det = 1.0 - pc * na
    if not bool(xp.all(det != 0)):
        raise np.linalg.LinAlgError("singular 2x2 interface system in the truncated reduced solve")
    yp = (pd - pc[:, None] * nd) / det[:, None]
    yn = nd - na[:, None] * yp
    Y = xp.empty_like(RD)
    Y[0::2] = yn[:-1]
    Y[1::2] = yp[1:]
    return Y


def _neighbours(comm: Any, cfg: dict, m: int) -> tuple[int | None, int | None]:
    """The previous and next non-empty ranks along the line (wrapping when periodic); None at an end."""
    if not m:
        return None, None
    ne = [comm.rank] if cfg.get("split") == "batch" else cfg["nonempty"]
    i = ne.index(comm.rank)
    prev = ne[i - 1] if i > 0 or cfg["periodic"] else None
    nxt = ne[(i + 1) % len(ne)] if i < len(ne) - 1 or cfg["periodic"] else None
    return prev, nxt


def _gtsv_pivoted(A: Any, C: Any, D: Any) -> Any:
    """Unit-diagonal tridiagonal solve with partial pivoting (LAPACK dgtsv), vectorized over the batch.

    Row i reads ``A[i] y[i-1] + y[i] + C[i] y[i+1] = D[i]`` (A[0], C[-1] ignored)."""
    xp = namespace(A)
    M = A.shape[0]
    dg = xp.ones(A.shape)
    du = C.copy()
    dl = A[1:].copy()                      # dl[i] = A[i+1, i]
    du2 = xp.zeros(A.shape)
    b = D.copy()
    for i in range(M - 1):
        swap = xp.abs(dg[i]) < xp.abs(dl[i])
        f_n = dl[i] / xp.where(swap, 1.0, dg[i])
        f_s = dg[i] / xp.where(swap, dl[i], 1.0)
        nxt_du = du[i + 1] if i < M - 2 else xp.zeros_like(dg[i])
        d_i, d_i1, du_i = dg[i].copy(), dg[i + 1].copy(), du[i].copy()
        b_i, b_i1 = b[i].copy(), b[i + 1].copy()
        dg[i] = xp.where(swap, dl[i], d_i)
        du[i] = xp.where(swap, d_i1, du_i)
        dg[i + 1] = xp.where(swap, du_i - f_s * d_i1, d_i1 - f_n * du_i)
        du2[i] = xp.where(swap, nxt_du, 0.0)
        if i < M - 2:
            du[i + 1] = xp.where(swap, -f_s * nxt_du, nxt_du)
        b[i] = xp.where(swap[None], b_i1, b_i)
        b[i + 1] = xp.where(swap[None], b_i - f_s[None] * b_i1, b_i1 - f_n[None] * b_i)
    if not bool(xp.all(dg != 0)):
        raise np.linalg.LinAlgError("singular reduced (coupling) system: the tridiagonal system is singular")
    y = xp.empty_like(b)
    y[M - 1] = b[M - 1] / dg[M - 1]
    if M > 1:
        y[M - 2] = (b[M - 2] - du[M - 2] * y[M - 1]) / dg[M - 2]
    for i in range(M - 3, -1, -1):
        y[i] = (b[i] - du[i] * y[i + 1] - du2[i] * y[i + 2]) / dg[i]
    return y


def _solve_chain(A: Any, C: Any, D: Any, periodic: bool, local: str) -> Any:
    """Solve one unit-diagonal tridiagonal (cyclic when periodic) system of M rows with the same kernels."""
    xp = namespace(A)
    M, V = A.shape
    one = xp.broadcast_to(xp.ones((1, 1)), (M, V))
    starts, lens = np.zeros(1, np.int64), np.array([M], np.int64)
    rows0 = np.array([0, min(M, 2)], np.int64)
    k = int(rows0[1])
    RA, RC, RD = xp.zeros((k, V)), xp.zeros((k, V)), xp.zeros((k,) + D.shape[1:])
    chk = _reduce(A, one, C, D, starts, lens, rows0, RA, RC, RD, local)
    if not bool(np.isfinite(to_host(chk)).all()):
        raise np.linalg.LinAlgError("zero pivot in the reduced (coupling) system: the system is singular "
                                    "or needs pivoting")
    if M == 1:
        s = 1.0 + (RA[0] + RC[0] if periodic else 0.0)
        if not bool(xp.all(s != 0)):
            raise np.linalg.LinAlgError("singular system (zero 1x1 reduced system)")
        y = RD[0] / s if periodic else RD[0]
        return y[None]
    c0 = RC[0] + (RA[0] if periodic else 0.0)
    a1 = RA[1] + (RC[1] if periodic else 0.0)
    det = 1.0 - c0 * a1
    if not bool(xp.all(det != 0)):
        raise np.linalg.LinAlgError("singular system: the closing 2x2 of the reduced system has zero determinant")
    y0 = (RD[0] - c0 * RD[1]) / det
    y1 = RD[1] - a1 * y0
    Y = xp.empty_like(D)
    _expand(A, one, C, D, starts, lens, y0[None], y1[None], Y, local)
    return Y


def _compact_local(comm: Any, f: Any, lo: int, hi: int, cfg: dict) -> tuple:
    """Halo exchange and the compact scheme's coefficients and right-hand side for rows [lo, hi)."""
    xp = namespace(f)
    n, periodic, h = cfg["n"], cfg["periodic"], cfg["h"]
    alpha, a, bb = COMPACT6
    m = f.shape[0]
    sends, recv_from = {}, []
    prev, nxt = _neighbours(comm, cfg, m)
    if prev is not None:
        sends.setdefault(prev, {})["to_next"] = f[:2]
        recv_from.append(prev)
    if nxt is not None:
        sends.setdefault(nxt, {})["to_prev"] = f[m - 2:]
        recv_from.append(nxt)
    got = comm.neighbor_exchange(sends, recv_from=sorted(set(recv_from)))
    V = f.shape[1]
    if not m:
        e = xp.zeros((0, V))
        return e, e, e, xp.zeros((0, 1, V))
    left = got[prev]["to_prev"] if prev is not None else xp.zeros((2, V))
    right = got[nxt]["to_next"] if nxt is not None else xp.zeros((2, V))

    def sample(k: int) -> Any:  # row k of the block, -2 <= k < m + 2 (the halo outside it)
        return left[k + 2] if k < 0 else (right[k - m] if k >= m else f[k])

    local = cfg["local"]
    if local == "numba":
        # one pass into a pooled buffer: numpy's temporaries are fresh pages on every call, and on this kind
        # of VM a page fault per page costs more than the arithmetic
        rhs = empty((m, V))
        compact_rhs_kernel(*_c(f, left, right), a / (2 * h), bb / (4 * h), rhs)
    else:
        fe = xp.concatenate([left, f, right], axis=0)  # row i of the block is fe[i + 2]
        rhs = (a / (2 * h)) * (fe[3:m + 3] - fe[1:m + 1]) + (bb / (4 * h)) * (fe[4:m + 4] - fe[0:m])
    dlv = np.full(m, alpha)
    duv = np.full(m, alpha)
    dv = np.ones(m)
    if not periodic:
        for row, (l_, u_) in ((0, (0.0, 2.0)), (1, (0.25, 0.25)), (n - 2, (0.25, 0.25)), (n - 1, (2.0, 0.0))):
            if lo <= row < hi:
                dlv[row - lo], duv[row - lo] = l_, u_
        rows = {0: (-2.5 * sample(0) + 2 * sample(1) + 0.5 * sample(2)) / h if lo == 0 else None,
                1: 0.75 / h * (sample(2 - lo) - sample(-lo)) if lo <= 1 < hi else None,
                n - 2: 0.75 / h * (sample(n - 1 - lo) - sample(n - 3 - lo)) if lo <= n - 2 < hi else None,
                n - 1: (2.5 * sample(m - 1) - 2 * sample(m - 2) - 0.5 * sample(m - 3)) / h if hi == n else None}
        for row, val in rows.items():
            if val is not None:
                rhs[row - lo] = val
    def col(v: np.ndarray) -> Any:
        # constant coefficients: a stride-0 view for the array engine (no memory pass); the numba kernels
        # and their cuda twins take C-contiguous (m, V) arrays, filled once here into pooled buffers
        view = xp.broadcast_to(xp.asarray(v)[:, None], (m, V))
        if local == "array":
            return view
        out = empty((m, V), like=f)
        out[...] = view
        return out

    return col(dlv), col(dv), col(duv), rhs[:, None, :]


# --------------------------------------------------------------------------
# The generator's rank (random_system)
# --------------------------------------------------------------------------


def random_part(k: int, lohi: tuple[int, int], batch: int | None, nrhs: int | None, dominance: float,
                seed: int) -> Any:
    """Component ``k`` (dl, d, du, b) of ranks ``lohi``'s rows, alone: the lineage that rebuilds a
    :func:`random_system` partition lost with its worker (the numbers depend only on the rows)."""
    return _random_rank(None, lohi, batch, nrhs, dominance, seed)[k]


def _random_rank(comm: Any, lohi: tuple[int, int], batch: int | None, nrhs: int | None, dominance: float,
                 seed: int) -> tuple:
    lo, hi = lohi
    V = 1 if batch is None else batch
    R = 1 if nrhs is None else nrhs
    # chunks of rows seeded by their global start: the same numbers for any partition
    chunk = 64
    outs = [np.empty((hi - lo, V)) for _ in range(3)] + [np.empty((hi - lo, R, V))]
    for c0 in range((lo // chunk) * chunk, hi, chunk):
        rng = np.random.default_rng([seed, c0])
        vals = rng.random((4 + R, chunk, V))
        a, z = max(lo, c0), min(hi, c0 + chunk)
        sl = slice(a - c0, z - c0)
        dl, du = 2 * vals[0, sl] - 1, 2 * vals[1, sl] - 1
        outs[0][a - lo:z - lo] = dl
        outs[2][a - lo:z - lo] = du
        outs[1][a - lo:z - lo] = dominance * (np.abs(dl) + np.abs(du)) + vals[2, sl]
        outs[3][a - lo:z - lo] = vals[4:, sl].transpose(1, 0, 2)
    if batch is None:
        outs = [o[:, 0] for o in outs[:3]] + [outs[3][:, :, 0] if nrhs is not None else outs[3][:, 0, 0]]
    elif nrhs is None:
        outs[3] = outs[3][:, 0, :]
    return tuple(outs)


# --------------------------------------------------------------------------
# Worker-local kernels: dispatch to the numba kernels (cpu.py), array namespace (cupy / reference)
# --------------------------------------------------------------------------


def _tiles(V: int, L: int) -> tuple[int, int]:
    """(sub-blocks interleaved, batch tile): ILP across sub-blocks for one system,
    SIMD across systems for batches; the tile's four inputs fit in L2."""
    if V >= 8:
        return 1, min(V, _TILE_SYSTEMS)
    return 16, V


#: stats["engine"] per local engine ("array": the arrays' namespace, numpy or cupy).
_ENGINE_NAMES = {"numba": "numba", "cuda": "numba.cuda"}


def _launch(local: str, name: str, n: int, *args: Any) -> None:
    """Run the local kernel ``name`` over ``n`` lines: cpu.py's, or its twin in cuda.py on a device worker
    (asynchronous on a GPU, on cupy's current stream: the rank synchronizes before it returns)."""
    if local == "cuda":
        from . import cuda as dev  # only here, so that importing workbench never imports numba.cuda

        launch(getattr(dev, name), n, *args)
    else:
        getattr(cpu, name)(*args)


def _reduce(dl, d, du, b, starts, lens, rows0, RA, RC, RD, local: str):
    if local == "cuda":  # one thread per (sub-block, system) covers every shape the CPU variants specialise
        chk = namespace(d).zeros(lens.size)
        _launch(local, "reduce_kernel", lens.size * d.shape[1], *_c(dl, d, du, b), *_i(starts, lens, rows0, like=d),
                RA, RC, RD, chk, 1, 1)
        return chk
    use_numba = local == "numba"
    if use_numba and d.shape[1] == 1 and b.shape[1] == 1:
        chk = np.zeros(lens.size)
        reduce1p_kernel(*_c(dl[:, 0], d[:, 0], du[:, 0], b[:, 0, 0]), *_i(starts, lens, rows0),
                                     RA[:, 0], RC[:, 0], RD[:, 0, 0], chk)
        return chk
    if use_numba and d.shape[1] == 1:
        chk = np.zeros(lens.size)
        reduce1_kernel(*_c(dl[:, 0], d[:, 0], du[:, 0], b[:, :, 0]), *_i(starts, lens, rows0),
                                    RA[:, 0], RC[:, 0], RD[:, :, 0], chk)
        return chk
    if use_numba and b.shape[1] == 1 and d.shape[1] >= 8:
        chk = np.zeros(lens.size)
        reduce_b1_kernel(*_c(dl, d, du, b[:, 0]), *_i(starts, lens, rows0), RA, RC, RD[:, 0], chk,
                                      _TILE_SYSTEMS)
        return chk
    if use_numba:
        G, Vt = _tiles(d.shape[1], int(lens.max()))
        chk = np.zeros(lens.size)
        cpu.reduce_kernel(*_c(dl, d, du, b), *_i(starts, lens, rows0), RA, RC, RD, chk, G, Vt)
        return chk
    return _xp_reduce(dl, d, du, b, starts, lens, rows0, RA, RC, RD)


def _expand(dl, d, du, b, starts, lens, Y0, Y1, x, local: str) -> None:
    if local == "cuda":
        cs = namespace(d).empty(d.shape)  # c' of every row and system
        _launch(local, "expand_kernel", lens.size * d.shape[1], *_c(dl, d, du, b), *_i(starts, lens, like=d),
                *_c(Y0, Y1), x, cs, 1, 1)
        return
    use_numba = local == "numba"
    if use_numba and d.shape[1] == 1 and b.shape[1] == 1:
        expand1p_kernel(*_c(dl[:, 0], d[:, 0], du[:, 0], b[:, 0, 0]), *_i(starts, lens),
                                     *_c(Y0[:, 0, 0], Y1[:, 0, 0]), x[:, 0, 0])
    elif use_numba and d.shape[1] == 1:
        expand1_kernel(*_c(dl[:, 0], d[:, 0], du[:, 0], b[:, :, 0]), *_i(starts, lens),
                                    *_c(Y0[:, :, 0], Y1[:, :, 0]), x[:, :, 0])
    elif use_numba and b.shape[1] == 1 and d.shape[1] >= 8:
        expand_b1_kernel(*_c(dl, d, du, b[:, 0]), *_i(starts, lens), *_c(Y0[:, 0], Y1[:, 0]), x[:, 0],
                                      _TILE_SYSTEMS)
    elif use_numba:
        G, Vt = _tiles(d.shape[1], int(lens.max()))
        cs = np.empty((max(int(lens.max()), 1), G, Vt))
        cpu.expand_kernel(*_c(dl, d, du, b), *_i(starts, lens), *_c(Y0, Y1), x, cs, G, Vt)
    else:
        _xp_expand(dl, d, du, b, starts, lens, Y0, Y1, x)


def _c(*arrays: Any) -> list[Any]:
    # C-contiguous float64 only keeps numba's specializations (compiles, cache entries) few;
    # stride-0 broadcast coefficients (compact scheme, unit diagonals) are materialized here
    return [namespace(a).ascontiguousarray(a, dtype=np.float64) for a in arrays]


def _i(*arrays: np.ndarray, like: Any = None) -> list[Any]:
    # host index arrays (a few per sub-block), moved to the device of ``like`` for its kernels
    xp = np if like is None else namespace(like)
    return [xp.asarray(np.ascontiguousarray(a, dtype=np.int64)) for a in arrays]


def _xp_reduce(dl, d, du, b, starts, lens, rows0, RA, RC, RD):
    """Both sweeps over all sub-blocks at once, one row step per iteration (vectorized over blocks x batch)."""
    xp = namespace(d, b)
    S = lens.size
    Lmax = int(lens.max())
    V, R = d.shape[1], b.shape[1]
    chk = xp.zeros((S, V))
    out = {}
    for direction in ("down", "up"):
        sa, sc, sd = xp.zeros((S, V)), xp.zeros((S, V)), xp.zeros((S, R, V))
        for j in range(Lmax):
            act = xp.asarray(j < lens)[:, None]
            jj = np.minimum(j, lens - 1)
            idx = xp.asarray(starts + (jj if direction == "down" else lens - 1 - jj))
            A, Dg, C, B = dl[idx], d[idx], du[idx], b[idx]
            first, nxt = (A, C) if direction == "down" else (C, A)
            if j < 2:
                inv = 1.0 / Dg
                na, nc = A * inv, C * inv
                nd = B * inv[:, None]
            else:
                prev_far = sc if direction == "down" else sa
                inv = 1.0 / (Dg - first * prev_far)
                if direction == "down":
                    na, nc = -A * sa * inv, C * inv
                else:
                    na, nc = A * inv, -C * sc * inv
                nd = (B - first[:, None] * sd) * inv[:, None]
            if direction == "down":
                chk = chk + (xp.abs(A) + xp.abs(Dg) + xp.abs(C) + xp.abs(inv) + xp.abs(B).sum(axis=1)) * _CHK_SCALE
            else:
                chk = chk + xp.abs(inv) * _CHK_SCALE
            sa, sc = xp.where(act, na, sa), xp.where(act, nc, sc)
            sd = xp.where(act[:, :, None], nd, sd)
            del nxt
        out[direction] = (sa, sc, sd)
    two = xp.asarray(lens >= 2)
    r0 = xp.asarray(rows0[:-1])
    # one-row blocks: the single (normalized) row; others: first row from the up sweep, last from the down sweep
    RA[r0] = xp.where(two[:, None], out["up"][0], out["down"][0])
    RC[r0] = xp.where(two[:, None], out["up"][1], out["down"][1])
    RD[r0] = xp.where(two[:, None, None], out["up"][2], out["down"][2])
    if bool((lens >= 2).any()):
        sel = np.flatnonzero(lens >= 2)
        RA[rows0[sel] + 1] = out["down"][0][sel]
        RC[rows0[sel] + 1] = out["down"][1][sel]
        RD[rows0[sel] + 1] = out["down"][2][sel]
    return chk.sum(axis=1)


def _xp_expand(dl, d, du, b, starts, lens, Y0, Y1, x):
    """Interior Thomas solve of every sub-block given its first/last unknowns (vectorized over blocks x batch)."""
    xp = namespace(d, b)
    S = lens.size
    Lmax = int(lens.max())
    x[xp.asarray(starts)] = Y0
    x[xp.asarray(starts + lens - 1)] = Y1
    cs = xp.zeros((max(Lmax, 1), S, d.shape[1]))
    for j in range(1, Lmax - 1):
        act_h = j <= lens - 2
        if not act_h.any():
            break
        sel = np.flatnonzero(act_h)
        i = xp.asarray(starts[sel] + j)
        A, Dg, C, B = dl[i], d[i], du[i], b[i]
        piv = Dg if j == 1 else Dg - A * cs[j - 1][xp.asarray(sel)]
        inv = 1.0 / piv
        last = xp.asarray((lens[sel] - 2) == j)
        cs[j][xp.asarray(sel)] = xp.where(last[:, None], 0.0, C * inv)
        # x[i + 1] is known only on a block's last interior row (elsewhere it is not yet written: select it
        # before multiplying, so no garbage NaN or inf meets the arithmetic)
        rhs = B - A[:, None] * x[i - 1] - C[:, None] * xp.where(last[:, None, None], x[i + 1], 0.0)
        x[i] = rhs * inv[:, None]
    for j in range(Lmax - 3, 0, -1):
        sel = np.flatnonzero(j <= lens - 3)
        if not sel.size:
            continue
        i = xp.asarray(starts[sel] + j)
        x[i] = x[i] - cs[j][xp.asarray(sel)][:, None] * x[i + 1]
