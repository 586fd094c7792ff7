"""FFT's schedule: the stages (local FFTs, then a transpose in one grid
dimension) every rank follows, the slab/pencil grid chosen for them, and
which block of each layout a rank holds."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...partition import block_offsets, grid_shape

# --------------------------------------------------------------------------
# Planning (client side)
# --------------------------------------------------------------------------


@dataclass
class _Stage:
    """One local FFT over ``axes`` then, optionally, a transpose in grid dim ``g``."""

    axes: tuple[int, ...]
    kind: str                     # "fwd" | "bwd" | "r2c" | "c2r" | "" (no FFT)
    n_out: int | None             # c2r output length along the last axis
    in_shape: tuple[int, ...]     # global shapes
    out_shape: tuple[int, ...]
    transpose: tuple[int, int, int] | None = None   # (g, x, y): x becomes whole, y split over grid dim g


@dataclass
class FFTPlan:
    """The client-side schedule every rank follows (small; shipped to the workers).

    ``layouts[k]`` is the distribution before stage k (and ``layouts[-1]`` the
    output): per grid dimension, ``(axis, offsets)``.
    """

    kind: str
    grid: tuple[int, ...]
    stages: list[_Stage]
    layouts: list[list[tuple[int, np.ndarray]]]
    in_dtype: np.dtype
    work_dtype: np.dtype
    out_dtype: np.dtype
    out_shape: tuple[int, ...]
    scale: float
    overlap: bool
    decomposition: str
    flops: float
    meta: dict = field(default_factory=dict)

    @property
    def n_transposes(self) -> int:
        return sum(st.transpose is not None for st in self.stages)


def _plan(kind: str, shape: tuple[int, ...], axes: tuple[int, ...], s: Any, dist0: tuple[int, ...],
          offsets0: list[np.ndarray] | None, grid: tuple[int, ...]) -> tuple[list[_Stage], list] | None:
    """Stages and layouts from layout ``dist0``; None when no schedule exists from it."""
    ndim = len(shape)
    d = len(grid)
    special = axes[-1] if kind in ("r2c", "c2r") else None
    if kind == "r2c" and special in dist0:
        return None
    dist = list(dist0)
    cur = list(shape)
    offs = list(offsets0) if offsets0 is not None else [block_offsets(cur[a], p) for a, p in zip(dist, grid,
                                                                                                  strict=True)]
    layouts = [list(zip(dist, offs, strict=True))]
    pending = list(axes)
    stages: list[_Stage] = []

    def local() -> None:
        doable = [a for a in pending if a not in dist]
        if kind == "c2r" and special in doable and any(a not in doable for a in pending):
            doable.remove(special)  # the c2r axis goes last, after every c2c axis
        in_shape = tuple(cur)
        if kind == "r2c" and special in doable:
            doable = [a for a in doable if a != special] + [special]
            cur[special] = cur[special] // 2 + 1
            sk = "r2c"
        elif kind == "c2r" and special in doable:
            doable = [a for a in doable if a != special] + [special]
            cur[special] = s[-1] if s is not None else 2 * (cur[special] - 1)
            sk = "c2r"
        else:
            sk = "bwd" if kind in ("bwd", "c2r") else "fwd"
        for a in doable:
            pending.remove(a)
        n_out = cur[special] if sk == "c2r" else None
        stages.append(_Stage(tuple(doable), sk if doable else "", n_out, in_shape, tuple(cur)))

    local()
    guard = 0
    while pending:
        guard += 1
        if guard > 4 * ndim + 4:
            return None
        g = next(g for g in reversed(range(d)) if dist[g] in pending)
        x = dist[g]
        ys = [a for a in range(ndim) if a not in dist]
        if not ys:
            return None
        good = [a for a in ys if not (kind == "c2r" and a == special)] or ys
        fit = [a for a in good if cur[a] >= grid[g]] or good
        y = fit[0]
        stages[-1].transpose = (g, x, y)
        dist[g] = y
        offs[g] = block_offsets(cur[y], grid[g])
        layouts.append(list(zip(dist, offs, strict=True)))
        local()
    return stages, layouts


def _fits(stages: list[_Stage], layouts: list, grid: tuple[int, ...]) -> bool:
    return all(len(offs) - 1 == p and np.all(np.diff(offs) > 0)
               for lay in layouts for (_, offs), p in zip(lay, grid, strict=True))


def _default_dist(ndim: int, axes: tuple[int, ...], kind: str, d: int) -> tuple[int, ...]:
    special = axes[-1] if kind in ("r2c", "c2r") else None
    order = [a for a in range(ndim) if a not in axes] + [a for a in axes if a != special]
    if special is not None and kind == "c2r":
        order.append(special)
    return tuple(order[:d])


def _make_plan(kind: str, x: Any, axes: tuple[int, ...], s: Any, norm: Any, decomposition: str,
               grid: Any, n_workers: int, out_dtype: np.dtype, overlap: bool) -> tuple[FFTPlan, bool]:
    """Choose the grid and schedule; returns (plan, input chunks usable as rank blocks)."""
    import dask.array as da

    shape = tuple(int(n) for n in x.shape)
    ndim = len(shape)
    P = n_workers
    if grid is not None:
        grids = [grid if decomposition != "slab" else (grid[0],)]
    elif decomposition == "slab":
        grids = [(P,)]
    elif decomposition == "pencil":
        grids = [grid_shape(P)]
    else:
        grids = [(P,), grid_shape(P)] if ndim >= 3 else [(P,)]
    if decomposition == "pencil" or (grid is not None and len(grids[0]) == 2):
        if ndim < 3:
            raise ValueError(f"decomposition='pencil' needs an array with at least 3 dimensions, got {ndim}")

    chosen = fallback = None
    for gr in grids:
        d = len(gr)
        if ndim <= d and len(axes) == ndim:
            continue
        candidates: list[tuple[tuple[int, ...], list | None, bool]] = []
        if isinstance(x, da.Array):
            import itertools
            nb = x.numblocks
            for dist in itertools.permutations(range(ndim), d):
                if all(nb[a] == (gr[dist.index(a)] if a in dist else 1) for a in range(ndim)):
                    offs = [np.concatenate([[0], np.cumsum(x.chunks[a])]).astype(np.int64) for a in dist]
                    candidates.append((dist, offs, True))
        candidates.append((_default_dist(ndim, axes, kind, d), None, False))
        for dist, offs, native in candidates:
            res = _plan(kind, shape, axes, s, dist, offs, gr)
            if res is None:
                continue
            if _fits(*res, gr):
                chosen = (gr, dist, res, native)
                break
            if fallback is None and not native:
                fallback = (gr, dist, res, native)
        if chosen is not None:
            break
    if chosen is None and fallback is not None:
        # an axis shorter than the grid: some ranks hold empty blocks, whether the grid was asked for or chosen
        chosen = fallback
    if chosen is None:
        # a 1-D transform has no slab/pencil schedule: it runs on a single rank (no four-step FFT here)
        res = _plan(kind, shape, axes, s, (), [], ())
        chosen = ((), (), res, False)
    gr, dist, (stages, layouts), native = chosen

    in_dtype = np.dtype(x.dtype)
    if kind == "r2c":
        work = np.dtype(np.float32 if out_dtype == np.complex64 else np.float64)
    else:
        work = np.dtype(out_dtype if kind != "c2r" else (np.complex64 if out_dtype == np.float32 else np.complex128))
    logical = [shape[a] for a in axes]
    if kind == "c2r":
        logical[-1] = stages[-1].out_shape[axes[-1]]
    n_log = math.prod(logical)
    inverse = kind in ("bwd", "c2r")
    norm = norm or "backward"
    scale = 1.0
    if norm == "ortho":
        scale = 1.0 / math.sqrt(n_log)
    elif (norm == "backward") == inverse:
        scale = 1.0 / n_log
    batch = math.prod(stages[-1].out_shape) / max(1, math.prod(stages[-1].out_shape[a] for a in axes))
    flops = 5.0 * n_log * math.log2(max(n_log, 2)) * batch * (0.5 if kind in ("r2c", "c2r") else 1.0)
    decomp = "slab" if len(gr) <= 1 or gr[1] == 1 and decomposition != "pencil" else "pencil"
    plan = FFTPlan(kind, tuple(gr), stages, layouts, in_dtype, work, np.dtype(out_dtype),
                   tuple(stages[-1].out_shape), scale, bool(overlap), decomp, flops)
    return plan, native


def _rank_coords(r: int, grid: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(c) for c in np.unravel_index(r, grid)) if grid else ()


def _rank_box(r: int, plan: FFTPlan, k: int, shape: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    box = [(0, n) for n in shape]
    for (a, offs), c in zip(plan.layouts[k], _rank_coords(r, plan.grid), strict=True):
        box[a] = (int(offs[c]), int(offs[c + 1]))
    return tuple(box)
