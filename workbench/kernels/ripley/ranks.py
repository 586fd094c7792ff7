"""SPMD rank bodies of Ripley's K: placement into tiles with halos, the
per-tile column sweep's layout, the all-reduce of the per-radius sums and
the Monte Carlo envelopes.  The hot loops are the numba kernels of
:mod:`.cpu`."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...backend import to_host
from ...partition import grid_shape
from .cpu import _hist_from_cache, _sweep

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
    # local rows: x, y, t, global id (float64 is exact for ids < 2**53)
    cols = []
    for off, blk, tblk in mine:
        p = np.asarray(to_host(blk), dtype=np.float64)
        t = np.asarray(to_host(tblk), dtype=np.float64) if has_t else np.zeros(len(p))
        cols.append(np.column_stack([p[:, 0], p[:, 1], t, off + np.arange(len(p), dtype=np.float64)]))
    local = np.concatenate(cols) if cols else np.zeros((0, 4))

    if cfg["partitioning"]:
        tiles = tile_bounds(comm.allgather(_sample(local, 4096)), win, comm.size)
        owner = _tile_of(local[:, 0], local[:, 1], tiles, grid_shape(comm.size))
        order = np.argsort(owner, kind="stable")
        cuts = np.searchsorted(owner[order], np.arange(comm.size + 1))
        owned = np.concatenate(comm.alltoallv([local[order[cuts[q]:cuts[q + 1]]] for q in range(comm.size)]))
        me = tiles[comm.rank]
        nbrs = [q for q in range(comm.size) if q != comm.rank and _rect_gap(me, tiles[q]) <= rmax]
        sends = {q: owned[_near_rect(owned[:, 0], owned[:, 1], tiles[q], rmax)] for q in nbrs}
        got = comm.neighbor_exchange(sends)
        halo = np.concatenate([np.zeros((0, 4))] + [got[q] for q in nbrs])
        region = me
    else:
        owned = local
        everyone = comm.allgather(local)
        halo = np.concatenate([np.zeros((0, 4))] + [everyone[q] for q in range(comm.size) if q != comm.rank])
        region = win

    t0 = time.perf_counter()
    sweep = _Sweep(owned, halo, region, cfg)
    hist, pairs, nb = _local_hist(owned, halo, region, cfg, owned[:, 2] if has_t else None,
                                  halo[:, 2] if has_t else None, sweep)
    hist, pairs, nb = comm.allreduce((hist, pairs, nb), op=_sum_tuples)
    k = _finish(hist, nb, cfg)

    out = {"k": k, "pairs": pairs}
    if cfg["n_simulations"]:
        sims = _simulate_st(comm, owned, halo, sweep, cfg) if has_t else _simulate_csr(comm, cfg)
        out["lower"], out["upper"] = sims.min(axis=0), sims.max(axis=0)
    out.update(n_owned=len(owned), n_halo=len(halo), rank_seconds=time.perf_counter() - t0,
               bytes_sent=comm.stats["bytes_sent"])
    return out


def _sum_tuples(a: tuple, b: tuple) -> tuple:
    return tuple(x + y for x, y in zip(a, b, strict=True))


def _simulate_csr(comm: Any, cfg: dict) -> np.ndarray:
    """CSR envelopes: whole simulations dealt round-robin to ranks, each in one tile."""
    win, n = cfg["window"], cfg["n"]
    mine = {}
    for s in range(comm.rank, cfg["n_simulations"], comm.size):
        rng = np.random.default_rng([cfg["seed"], s])
        pts = np.zeros((n, 4))
        pts[:, 0] = win[0] + (win[1] - win[0]) * rng.random(n)
        pts[:, 1] = win[2] + (win[3] - win[2]) * rng.random(n)
        hist, _, nb = _local_hist(pts, np.zeros((0, 4)), win, cfg, None, None)
        mine[s] = _finish(hist, nb, cfg)
    allk = {}
    for part in comm.allgather(mine):
        allk.update(part)
    return np.stack([allk[s] for s in range(cfg["n_simulations"])])


def _simulate_st(comm: Any, owned: np.ndarray, halo: np.ndarray, sweep: _Sweep, cfg: dict) -> np.ndarray:
    """Space-time envelopes: random permutations of the time labels (same permutation on every rank)."""
    n = cfg["n"]
    t_all = np.zeros(n)
    for part in comm.allgather(owned[:, [3, 2]]):
        t_all[part[:, 0].astype(np.int64)] = part[:, 1]
    gid_o, gid_h = owned[:, 3].astype(np.int64), halo[:, 3].astype(np.int64)
    nr, nt = len(cfg["radii"]), len(cfg["time_radii"])
    hists = np.zeros((cfg["n_simulations"], nr + 1, nt + 1))
    cache = _pair_cache(sweep, len(owned)) if cfg["cache_weights"] else None
    for s in range(cfg["n_simulations"]):
        perm = np.random.default_rng([cfg["seed"], s]).permutation(n)
        to_, th = t_all[perm[gid_o]], t_all[perm[gid_h]]
        if cache is not None:
            _hist_from_cache(*cache, np.concatenate([to_, th]), cfg["time_radii"],
                             np.asarray(cfg["time_window"], dtype=np.float64), hists[s])
        else:
            sweep.run(to_, th, hists[s])
    hists = comm.allreduce(hists)
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
    return local[np.linspace(0, len(local) - 1, m).astype(np.int64), :2]


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
    xc = np.array([tiles[i * C][1] for i in range(R - 1)])
    strip = np.searchsorted(xc, x, side="right")
    out = np.empty(len(x), dtype=np.int64)
    for i in range(R):
        sel = strip == i
        yc = np.array([tiles[i * C + j][3] for j in range(C - 1)])
        out[sel] = i * C + np.searchsorted(yc, y[sel], side="right")
    return out


def _rect_gap(a: tuple, b: tuple) -> float:
    dx = max(a[0] - b[1], b[0] - a[1], 0.0)
    dy = max(a[2] - b[3], b[2] - a[3], 0.0)
    return math.hypot(dx, dy)


def _near_rect(x: np.ndarray, y: np.ndarray, rect: tuple, r: float) -> np.ndarray:
    dx = np.maximum(np.maximum(rect[0] - x, x - rect[1]), 0.0)
    dy = np.maximum(np.maximum(rect[2] - y, y - rect[3]), 0.0)
    return dx * dx + dy * dy <= r * r


# --------------------------------------------------------------------------
# Worker-local counting
# --------------------------------------------------------------------------


def _columns(x: np.ndarray, y: np.ndarray, x0: float, width: float, ncol: int) -> tuple[np.ndarray, np.ndarray]:
    """Order that sorts points by (column, y) and the CSR start of each column."""
    col = np.clip(((x - x0) * (ncol / width)).astype(np.int64), 0, ncol - 1) if width > 0 else \
        np.zeros(len(x), np.int64)
    order = np.lexsort((y, col))
    start = np.zeros(ncol + 1, dtype=np.int64)
    np.cumsum(np.bincount(col, minlength=ncol), out=start[1:])
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
    if cfg["correction"] != "border":
        return np.full(len(x), len(r), dtype=np.int64)
    win = cfg["window"]
    b = np.minimum(np.minimum(x - win[0], win[1] - x), np.minimum(y - win[2], win[3] - y))
    return np.searchsorted(r, b, side="right").astype(np.int64)


def _edge_angles(x: np.ndarray, y: np.ndarray, win: Sequence[float], rmax: float) -> tuple[np.ndarray, np.ndarray]:
    """Per point within r_max of the boundary, the angles between each edge's
    normal and the lines to that edge's corners (spatstat's bLU, bLD, bRU,
    bRD, bUL, bUR, bDL, bDR), computed once instead of per pair.  Returns
    (row of each point in the table or -1, table)."""
    dL, dR, dD, dU = x - win[0], win[1] - x, y - win[2], win[3] - y
    near = np.minimum(np.minimum(dL, dR), np.minimum(dD, dU)) < rmax
    pos = np.full(len(x), -1, dtype=np.int64)
    pos[near] = np.arange(int(near.sum()))
    dL, dR, dD, dU = dL[near], dR[near], dD[near], dU[near]
    table = np.stack([np.arctan2(dU, dL), np.arctan2(dD, dL), np.arctan2(dU, dR), np.arctan2(dD, dR),
                      np.arctan2(dL, dU), np.arctan2(dR, dU), np.arctan2(dL, dD), np.arctan2(dR, dD)], axis=1)
    return pos, np.ascontiguousarray(table.reshape(-1, 8))


class _Sweep:
    """Column-sorted owned and halo points of one rank, ready for the sweep kernel."""

    def __init__(self, owned: np.ndarray, halo: np.ndarray, region: tuple, cfg: dict):
        x0, width, ncol, self.reach, self.ywin = _layout(region, cfg, len(owned) + len(halo))
        self.oo, self.ostart = _columns(owned[:, 0], owned[:, 1], x0, width, ncol)
        self.ho, self.hstart = _columns(halo[:, 0], halo[:, 1], x0, width, ncol)
        self.ox, self.oy = owned[self.oo, 0].copy(), owned[self.oo, 1].copy()
        self.hx, self.hy = halo[self.ho, 0].copy(), halo[self.ho, 1].copy()
        self.lim = _limits(self.ox, self.oy, cfg)
        rmax = float(cfg["radii"][-1])
        self.opos, self.oang = _edge_angles(self.ox, self.oy, cfg["window"], rmax)
        self.hpos, self.hang = _edge_angles(self.hx, self.hy, cfg["window"], rmax)
        self.r2, self.lut, self.scale = _radius_lut(cfg["radii"])
        self.mode = _MODE[cfg["correction"]]
        self.win = np.asarray(cfg["window"], dtype=np.float64)
        self.cfg = cfg

    def run(self, t_owned: np.ndarray | None, t_halo: np.ndarray | None, hist: np.ndarray,
            action: int = 0, cache: tuple | None = None) -> int:
        cfg = self.cfg
        has_t = t_owned is not None
        ot = t_owned[self.oo].copy() if has_t else np.zeros(1)
        ht = t_halo[self.ho].copy() if has_t else np.zeros(1)
        tr = cfg["time_radii"] if has_t else np.array([np.inf])
        twin = np.asarray(cfg["time_window"] if has_t else (0.0, 1.0), dtype=np.float64)
        if cache is None:
            cache = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros(0))
        counts = np.zeros(2, np.int64)
        _sweep(self.ox, self.oy, ot, self.lim, self.ostart, self.opos, self.oang,
               self.hx, self.hy, ht, self.hstart, self.hpos, self.hang,
               self.reach, self.ywin, self.r2, self.lut, self.scale, tr, self.mode, has_t, self.win,
               twin, hist, action, *cache, counts)
        return int(counts[0] if action == 0 else counts[1])


def _local_hist(owned: np.ndarray, halo: np.ndarray, region: tuple, cfg: dict, t_owned: np.ndarray | None,
                t_halo: np.ndarray | None, sweep: _Sweep | None = None) -> tuple[np.ndarray, int, np.ndarray]:
    """This rank's weighted pair histogram (nr + 1, nt + 1), ordered pair
    count and (border) the per-radius count of owned points with b_i >= r."""
    nr = len(cfg["radii"])
    sweep = sweep or _Sweep(owned, halo, region, cfg)
    nt = len(cfg["time_radii"]) if t_owned is not None else 1
    hist = np.zeros((nr + 1, nt + 1))
    pairs = sweep.run(t_owned, t_halo, hist)
    nb = np.zeros(nr)
    if cfg["correction"] == "border":
        nb = np.cumsum(np.bincount(sweep.lim, minlength=nr + 1)[::-1])[::-1][1:].astype(np.float64)
    return hist, pairs, nb


def _pair_cache(sweep: _Sweep, n_owned: int) -> tuple:
    """Spatial pairs within r_max with radius bin and both directions' edge
    weights, kept for reuse across time permutations.  Indices address
    ``concatenate([owned, halo])`` in the rank's row order."""
    scratch = np.zeros((len(sweep.r2) + 1, 2))
    m = sweep.run(None, None, scratch, action=1)
    buf = (np.empty(m, np.int64), np.empty(m, np.int64), np.empty(m, np.int64), np.empty(m), np.empty(m))
    sweep.run(None, None, scratch, action=2, cache=buf)
    pi, pj, kr, wij, wji = buf
    # back from column order to row order (halo rows follow the owned ones)
    idx = np.concatenate([sweep.oo, n_owned + sweep.ho])
    return sweep.oo[pi], idx[pj], kr, wij, wji
