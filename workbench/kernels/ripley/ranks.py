"""SPMD rank bodies of Ripley's K: placement into tiles with halos, the
per-tile column sweep's layout, the all-reduce of the per-radius sums and
the Monte Carlo envelopes.

One body for every worker kind: array work goes through the namespace of
the rank's arrays (numpy, or cupy on a GPU worker, where the points stay in
device memory and only histograms, counts and the tiles' samples come to
the host), and the hot loops run as the numba kernels of :mod:`.cpu` on CPU
workers or as their numba.cuda twins of :mod:`.cuda` on GPU and simulated
GPU workers (see :func:`_run`)."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...backend import device_kind, device_namespace, launch, namespace, synchronize, to_device, to_host
from ...partition import grid_shape
from . import cpu

_MODE = {"none": 0, "translation": 1, "isotropic": 2, "border": 3}
#: Bins of the squared-distance lookup table that maps a pair to its radius bin.
_LUT_SIZE = 4096


# --------------------------------------------------------------------------
# The SPMD rank
# --------------------------------------------------------------------------


def _ripley_rank(comm: Any, mine: list, cfg: dict) -> dict:
    win, r = cfg["window"], cfg["radii"]
    rmax = float(r[-1])
    has_t = cfg["time_radii"] is not None
    kind = device_kind()
    # the rank's arrays live on the worker's device: host on CPU workers, device memory on GPU workers
    xp = device_namespace()

    def here(blk: Any) -> Any:
        return xp.asarray(to_host(blk) if kind == "cpu" else to_device(blk), dtype=xp.float64)

    # local rows: x, y, t, global id (float64 is exact for ids < 2**53)
    cols = []
    for off, blk, tblk in mine:
        p = here(blk)
        t = here(tblk) if has_t else xp.zeros(len(p))
        cols.append(xp.column_stack([p[:, 0], p[:, 1], t, off + xp.arange(len(p), dtype=xp.float64)]))
    local = xp.concatenate(cols) if cols else xp.zeros((0, 4))

    if cfg["partitioning"]:
        tiles = tile_bounds(comm.allgather(to_host(_sample(local, 4096))), win, comm.size)
        owner = _tile_of(local[:, 0], local[:, 1], tiles, grid_shape(comm.size))
        order = xp.argsort(owner, kind="stable")
        cuts = to_host(xp.searchsorted(owner[order], xp.arange(comm.size + 1)))
        owned = xp.concatenate([xp.asarray(a) for a in comm.alltoallv(
            [local[order[int(cuts[q]):int(cuts[q + 1])]] for q in range(comm.size)])])
        me = tiles[comm.rank]
        nbrs = [q for q in range(comm.size) if q != comm.rank and _rect_gap(me, tiles[q]) <= rmax]
        sends = {q: owned[_near_rect(owned[:, 0], owned[:, 1], tiles[q], rmax)] for q in nbrs}
        got = comm.neighbor_exchange(sends)
        halo = xp.concatenate([xp.zeros((0, 4))] + [xp.asarray(got[q]) for q in nbrs])
        region = me
    else:
        owned = local
        everyone = comm.allgather(local)
        halo = xp.concatenate([xp.zeros((0, 4))] + [xp.asarray(everyone[q]) for q in range(comm.size)
                                                     if q != comm.rank])
        region = win

    t0 = time.perf_counter()
    sweep = _Sweep(owned, halo, region, cfg, kind)
    hist, pairs, nb = _local_hist(owned, halo, region, cfg, owned[:, 2] if has_t else None,
                                  halo[:, 2] if has_t else None, sweep)
    hist, pairs, nb = comm.allreduce((hist, pairs, nb), op=_sum_tuples)
    k = _finish(hist, nb, cfg)

    out = {"k": k, "pairs": pairs}
    if cfg["n_simulations"]:
        sims = _simulate_st(comm, owned, halo, sweep, cfg) if has_t else _simulate_csr(comm, cfg, kind)
        out["lower"], out["upper"] = sims.min(axis=0), sims.max(axis=0)
    synchronize(owned)
    out.update(n_owned=len(owned), n_halo=len(halo), rank_seconds=time.perf_counter() - t0,
               bytes_sent=comm.stats["bytes_sent"], backend=kind)
    return out


def _sum_tuples(a: tuple, b: tuple) -> tuple:
    return tuple(x + y for x, y in zip(a, b, strict=True))


def _simulate_csr(comm: Any, cfg: dict, kind: str) -> np.ndarray:
    """CSR envelopes: whole simulations dealt round-robin to ranks, each in one tile.
    Patterns are drawn on the host (numpy's streams, so every back end sees the same ones)."""
    win, n = cfg["window"], cfg["n"]
    mine = {}
    for s in range(comm.rank, cfg["n_simulations"], comm.size):
        rng = np.random.default_rng([cfg["seed"], s])
        pts = np.zeros((n, 4))
        pts[:, 0] = win[0] + (win[1] - win[0]) * rng.random(n)
        pts[:, 1] = win[2] + (win[3] - win[2]) * rng.random(n)
        pts = to_device(pts)
        hist, _, nb = _local_hist(pts, namespace(pts).zeros((0, 4)), win, cfg, None, None, kind=kind)
        mine[s] = _finish(hist, nb, cfg)
    allk = {}
    for part in comm.allgather(mine):
        allk.update(part)
    return np.stack([allk[s] for s in range(cfg["n_simulations"])])


def _simulate_st(comm: Any, owned: np.ndarray, halo: np.ndarray, sweep: _Sweep, cfg: dict) -> np.ndarray:
    """Space-time envelopes: random permutations of the time labels (same permutation on every rank,
    drawn on the host from numpy's streams so that every back end sees the same ones)."""
    n = cfg["n"]
    xp = namespace(owned)
    t_all = xp.zeros(n)
    for part in comm.allgather(owned[:, [3, 2]]):
        part = xp.asarray(part)
        t_all[part[:, 0].astype(xp.int64)] = part[:, 1]
    gid_o, gid_h = owned[:, 3].astype(xp.int64), halo[:, 3].astype(xp.int64)
    nr, nt = len(cfg["radii"]), len(cfg["time_radii"])
    hists = xp.zeros((cfg["n_simulations"], nr + 1, nt + 1))
    cache = _pair_cache(sweep, len(owned)) if cfg["cache_weights"] else None
    for s in range(cfg["n_simulations"]):
        perm = xp.asarray(np.random.default_rng([cfg["seed"], s]).permutation(n))
        to_, th = t_all[perm[gid_o]], t_all[perm[gid_h]]
        if cache is not None:
            _run(sweep.kind, "_hist_from_cache", len(cache[0]), *cache, xp.concatenate([to_, th]), sweep.tr,
                 sweep.twin, hists[s])
        else:
            sweep.run(to_, th, hists[s])
    synchronize(hists)
    hists = comm.allreduce(to_host(hists))
    return np.stack([_finish(h, None, cfg) for h in hists])


def _finish(hist: np.ndarray, nb: np.ndarray | None, cfg: dict) -> np.ndarray:
    """Per-bin sums -> K (cumulative over radius, and over time lag in space-time)."""
    win, n = cfg["window"], cfg["n"]
    area = (win[1] - win[0]) * (win[3] - win[2])
    nr = len(cfg["radii"])
    c = np.cumsum(hist, axis=0)[:nr]
    if cfg["time_radii"] is not None:
        nt = len(cfg["time_radii"])
        tlen = cfg["time_window"][1] - cfg["time_window"][0]
        return area * tlen / (n * (n - 1.0)) * np.cumsum(c, axis=1)[:, :nt]
    c = c[:, 0]
    if cfg["correction"] == "border":
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(nb > 0, area * c / (n * nb), np.nan)
    return area / (n * (n - 1.0)) * c


# --------------------------------------------------------------------------
# Tiles and halos (worker-local, vectorised)
# --------------------------------------------------------------------------


def _sample(local: np.ndarray, m: int) -> np.ndarray:
    if len(local) <= m:
        return local[:, :2].copy()
    xp = namespace(local)
    return local[xp.linspace(0, len(local) - 1, m).astype(xp.int64), :2]


def tile_bounds(samples: Sequence[np.ndarray], window: Sequence[float], n_tiles: int) -> list[tuple]:
    """Equal-count tiles of ``window``: R x C = ``grid_shape(n_tiles)`` cuts at
    sample quantiles (x strips, then y cuts within each strip).  Returns
    ``(xlo, xhi, ylo, yhi)`` per tile, in rank order ``strip * C + cell``."""
    xmin, xmax, ymin, ymax = window
    R, C = grid_shape(n_tiles)
    s = np.concatenate([np.asarray(a).reshape(-1, 2) for a in samples])
    qs = np.arange(1, R) / R
    xc = np.concatenate([[xmin], np.quantile(s[:, 0], qs) if len(s) else xmin + (xmax - xmin) * qs, [xmax]])
    tiles = []
    for i in range(R):
        sx = s[(s[:, 0] >= xc[i]) & (s[:, 0] < xc[i + 1])] if len(s) else s
        qc = np.arange(1, C) / C
        yc = np.concatenate([[ymin], np.quantile(sx[:, 1], qc) if len(sx) else ymin + (ymax - ymin) * qc, [ymax]])
        tiles.extend((float(xc[i]), float(xc[i + 1]), float(yc[j]), float(yc[j + 1])) for j in range(C))
    return tiles


def _tile_of(x: np.ndarray, y: np.ndarray, tiles: list[tuple], grid: tuple[int, int]) -> np.ndarray:
    R, C = grid
    xp = namespace(x)
    xc = xp.asarray(np.array([tiles[i * C][1] for i in range(R - 1)]))
    strip = xp.searchsorted(xc, x, side="right")
    out = xp.empty(len(x), dtype=xp.int64)
    for i in range(R):
        sel = strip == i
        yc = xp.asarray(np.array([tiles[i * C + j][3] for j in range(C - 1)]))
        out[sel] = i * C + xp.searchsorted(yc, y[sel], side="right")
    return out


def _rect_gap(a: tuple, b: tuple) -> float:
    dx = max(a[0] - b[1], b[0] - a[1], 0.0)
    dy = max(a[2] - b[3], b[2] - a[3], 0.0)
    return math.hypot(dx, dy)


def _near_rect(x: np.ndarray, y: np.ndarray, rect: tuple, r: float) -> np.ndarray:
    xp = namespace(x)
    dx = xp.maximum(xp.maximum(rect[0] - x, x - rect[1]), 0.0)
    dy = xp.maximum(xp.maximum(rect[2] - y, y - rect[3]), 0.0)
    return dx * dx + dy * dy <= r * r


# --------------------------------------------------------------------------
# Worker-local counting
# --------------------------------------------------------------------------


def _columns(x: np.ndarray, y: np.ndarray, x0: float, width: float, ncol: int) -> tuple[np.ndarray, np.ndarray]:
    """Order that sorts points by (column, y) and the CSR start of each column."""
    xp = namespace(x)
    col = xp.clip(((x - x0) * (ncol / width)).astype(xp.int64), 0, ncol - 1) if width > 0 else \
        xp.zeros(len(x), xp.int64)
    order = xp.lexsort(xp.stack([y, col.astype(xp.float64)]))  # column ids are exact in float64
    start = xp.zeros(ncol + 1, dtype=xp.int64)
    xp.cumsum(xp.bincount(col, minlength=ncol), out=start[1:])
    return order, start


def _layout(region: tuple, cfg: dict, n_pts: int) -> tuple[float, float, int, int, float]:
    """Column sweep over ``region`` grown by r_max (clipped to the window):
    columns r_max/2 wide (at most ~n_pts of them), each sorted by y, so the
    candidates of a point are a y-window in the next ``reach`` columns.
    Returns (x0, width, n_columns, reach, y_window)."""
    win, rmax = cfg["window"], float(cfg["radii"][-1])
    x0, x1 = max(region[0] - rmax, win[0]), min(region[1] + rmax, win[1])
    width = x1 - x0
    if not cfg["spatial_index"]:
        return x0, width, 1, 0, math.inf  # ablation: every pair is a candidate
    ncol = int(2 * width / rmax) if rmax > 0 else n_pts
    ncol = max(1, min(ncol, n_pts))
    reach = min(ncol - 1, math.ceil(rmax / (width / ncol))) if rmax > 0 else 0
    return x0, width, ncol, reach, rmax


def _radius_lut(r: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Squared radii and a table mapping a squared distance to the first
    candidate radius bin (a short forward scan finishes the search)."""
    r2 = r * r
    r2max = float(r2[-1])
    scale = _LUT_SIZE / r2max if r2max > 0 else 0.0
    edges = np.arange(_LUT_SIZE) / scale if scale > 0 else np.zeros(_LUT_SIZE)
    lut = np.searchsorted(r2, edges, side="left").astype(np.int64)
    return r2, np.minimum(lut, len(r) - 1), scale


def _limits(x: np.ndarray, y: np.ndarray, cfg: dict) -> np.ndarray:
    """Border correction: radius bins [0, lim_i) where point i counts (b_i >= r)."""
    r = cfg["radii"]
    xp = namespace(x)
    if cfg["correction"] != "border":
        return xp.full(len(x), len(r), dtype=xp.int64)
    win = cfg["window"]
    b = xp.minimum(xp.minimum(x - win[0], win[1] - x), xp.minimum(y - win[2], win[3] - y))
    return xp.searchsorted(xp.asarray(r), b, side="right").astype(xp.int64)


def _edge_angles(x: np.ndarray, y: np.ndarray, win: Sequence[float], rmax: float) -> tuple[np.ndarray, np.ndarray]:
    """Per point within r_max of the boundary, the angles between each edge's
    normal and the lines to that edge's corners (spatstat's bLU, bLD, bRU,
    bRD, bUL, bUR, bDL, bDR), computed once instead of per pair.  Returns
    (row of each point in the table or -1, table)."""
    xp = namespace(x)
    dL, dR, dD, dU = x - win[0], win[1] - x, y - win[2], win[3] - y
    near = xp.minimum(xp.minimum(dL, dR), xp.minimum(dD, dU)) < rmax
    pos = xp.full(len(x), -1, dtype=xp.int64)
    pos[near] = xp.arange(int(near.sum()))
    dL, dR, dD, dU = dL[near], dR[near], dD[near], dU[near]
    table = xp.stack([xp.arctan2(dU, dL), xp.arctan2(dD, dL), xp.arctan2(dU, dR), xp.arctan2(dD, dR),
                      xp.arctan2(dL, dU), xp.arctan2(dR, dU), xp.arctan2(dL, dD), xp.arctan2(dR, dD)], axis=1)
    return pos, xp.ascontiguousarray(table.reshape(-1, 8))


class _Sweep:
    """Column-sorted owned and halo points of one rank, ready for the sweep
    kernel of the worker's kind (arrays on the points' device)."""

    def __init__(self, owned: np.ndarray, halo: np.ndarray, region: tuple, cfg: dict, kind: str = "cpu"):
        x0, width, ncol, self.reach, self.ywin = _layout(region, cfg, len(owned) + len(halo))
        self.oo, self.ostart = _columns(owned[:, 0], owned[:, 1], x0, width, ncol)
        self.ho, self.hstart = _columns(halo[:, 0], halo[:, 1], x0, width, ncol)
        self.ox, self.oy = owned[self.oo, 0].copy(), owned[self.oo, 1].copy()
        self.hx, self.hy = halo[self.ho, 0].copy(), halo[self.ho, 1].copy()
        self.lim = _limits(self.ox, self.oy, cfg)
        rmax = float(cfg["radii"][-1])
        self.opos, self.oang = _edge_angles(self.ox, self.oy, cfg["window"], rmax)
        self.hpos, self.hang = _edge_angles(self.hx, self.hy, cfg["window"], rmax)
        r2, lut, self.scale = _radius_lut(cfg["radii"])
        self.mode = _MODE[cfg["correction"]]
        # small host tables, moved once to where the points are
        self.xp, self.kind = namespace(owned), kind
        self.r2, self.lut = self.xp.asarray(r2), self.xp.asarray(lut)
        self.win = self.xp.asarray(np.asarray(cfg["window"], dtype=np.float64))
        has_t = cfg["time_radii"] is not None
        self.tr = self.xp.asarray(np.ascontiguousarray(cfg["time_radii"] if has_t else [np.inf], dtype=np.float64))
        self.twin = self.xp.asarray(np.asarray(cfg["time_window"] if has_t else (0.0, 1.0), dtype=np.float64))
        self.cfg = cfg

    def run(self, t_owned: np.ndarray | None, t_halo: np.ndarray | None, hist: np.ndarray,
            action: int = 0, cache: tuple | None = None) -> int:
        """Add this rank's weighted pairs to ``hist`` (action 0), or count (1)
        or record into ``cache`` (2) its spatial pairs.  Returns the ordered
        pair count (0) or the spatial pair count (1, 2)."""
        xp = namespace(self.ox)
        has_t = t_owned is not None
        ot = t_owned[self.oo].copy() if has_t else xp.zeros(1)
        ht = t_halo[self.ho].copy() if has_t else xp.zeros(1)
        tr = self.tr if has_t else xp.asarray(np.array([np.inf]))
        twin = self.twin if has_t else xp.asarray(np.array([0.0, 1.0]))
        if cache is None:
            cache = (xp.zeros(0, xp.int64), xp.zeros(0, xp.int64), xp.zeros(0, xp.int64), xp.zeros(0), xp.zeros(0))
        counts = xp.zeros(2, xp.int64)
        _run(self.kind, "_sweep", len(self.ox), self.ox, self.oy, ot, self.lim, self.ostart, self.opos, self.oang,
             self.hx, self.hy, ht, self.hstart, self.hpos, self.hang,
             self.reach, self.ywin, self.r2, self.lut, self.scale, tr, self.mode, has_t, self.win,
             twin, hist, action, *cache, counts)
        counts = to_host(counts)
        return int(counts[0] if action == 0 else counts[1])


def _run(kind: str, name: str, n: int, *args: Any) -> None:
    """Run the local kernel ``name``: the numba twin (:mod:`.cpu`) on CPU
    workers, else the numba.cuda twin (:mod:`.cuda`) over ``n`` items, on
    the current stream, synchronized before the outputs are read."""
    if kind == "cpu":
        getattr(cpu, name)(*args)
        return
    if n == 0:
        return
    from . import cuda as dev  # imports numba.cuda: only on the device path

    # unused empty inputs (no halo, no pair cache) travel as one-element arrays: no zero-size device buffers
    args = tuple(a if not hasattr(a, "shape") or a.size else namespace(a).zeros((1,) + a.shape[1:], a.dtype)
                 for a in args)
    launch(getattr(dev, name), n, *args)
    synchronize(*args)


def _local_hist(owned: np.ndarray, halo: np.ndarray, region: tuple, cfg: dict, t_owned: np.ndarray | None,
                t_halo: np.ndarray | None, sweep: _Sweep | None = None,
                kind: str = "cpu") -> tuple[np.ndarray, int, np.ndarray]:
    """This rank's weighted pair histogram (nr + 1, nt + 1), ordered pair
    count and (border) the per-radius count of owned points with b_i >= r,
    as host arrays."""
    nr = len(cfg["radii"])
    sweep = sweep or _Sweep(owned, halo, region, cfg, kind)
    xp = namespace(sweep.ox)
    nt = len(cfg["time_radii"]) if t_owned is not None else 1
    hist = xp.zeros((nr + 1, nt + 1))
    pairs = sweep.run(t_owned, t_halo, hist)
    nb = np.zeros(nr)
    if cfg["correction"] == "border":
        nb = to_host(xp.cumsum(xp.bincount(sweep.lim, minlength=nr + 1)[::-1])[::-1][1:].astype(xp.float64))
    return to_host(hist), pairs, nb


def _pair_cache(sweep: _Sweep, n_owned: int) -> tuple:
    """Spatial pairs within r_max with radius bin and both directions' edge
    weights, kept for reuse across time permutations.  Indices address
    ``concatenate([owned, halo])`` in the rank's row order."""
    xp = namespace(sweep.ox)
    scratch = xp.zeros((len(sweep.r2) + 1, 2))
    m = sweep.run(None, None, scratch, action=1)
    buf = (xp.empty(m, xp.int64), xp.empty(m, xp.int64), xp.empty(m, xp.int64), xp.empty(m), xp.empty(m))
    sweep.run(None, None, scratch, action=2, cache=buf)
    pi, pj, kr, wij, wji = buf
    # back from column order to row order (halo rows follow the owned ones)
    idx = xp.concatenate([sweep.oo, n_owned + sweep.ho])
    return sweep.oo[pi], idx[pj], kr, wij, wji
