"""Distributed Ripley's K: spatial and space-time, with edge corrections and envelopes.

Reproduces "Optimizing and accelerating space-time Ripley's K function based
on Apache Spark for distributed spatiotemporal point pattern analysis": the
window is cut into tiles (one per worker, equal-count quantile cuts), every
tile receives a halo of the points within ``r_max`` of its boundary (the
paper's replicated boundary "cylinders"), a per-tile index counts weighted
pairs for all radii in one pass, and the per-radius partial sums are reduced
across workers.  Everything after placement runs in one SPMD group over
:mod:`workbench.comms`: a redistribution all-to-all, one halo neighbour
exchange and one all-reduce (plus one all-gather for envelopes).

The per-tile index is a column sweep: x-columns r_max/2 wide, each sorted by
y, so a point's candidates are y-windows in the next few columns whose
bounds only move forward (about 1.6 candidates per pair within r_max, against
2.9 for a 3 x 3 cell list).  Edge-corner angles are precomputed per point
near the boundary, so most pairs cost a distance, a table lookup of the
radius bin and one or two histogram adds.  The sweep has two twins of one
signature: a numba kernel on CPU workers and a numba.cuda kernel (one
thread per owned point, atomic histogram adds) on GPU workers, where the
points stay in device memory, and on simulated GPU workers
(``backend="gpu-sim"``).

Modules: this one holds the public function, its validation, the result
type, the brute-force validator and seeded patterns; ``ranks`` the SPMD rank
bodies; ``cpu`` and ``cuda`` the two twins of the local kernels.

Estimators (the contract, spatstat's ``Kest`` definitions), for a rectangle
``W = (xmin, xmax, ymin, ymax)`` of area ``|W|``, width ``w`` and height ``h``:

* ``K(r) = |W| / (n (n-1)) * sum_{i != j} e_ij 1{d_ij <= r}`` with
  ``e_ij = 1`` (``"none"``), ``|W| / ((w - |dx|)(h - |dy|))``
  (``"translation"``) or Ripley's isotropic weight, one over the fraction of
  the circle centred at ``x_i`` through ``x_j`` that lies in ``W``
  (``"isotropic"``; spatstat ``edge.Ripley``'s closed form for rectangles).
  Weights are capped at 100, like spatstat's ``maxedgewt``.
* ``"border"`` (reduced sample, spatstat's normalisation):
  ``K(r) = |W| * sum_{i: b_i >= r} #{j != i: d_ij <= r} / (n * n_r)`` where
  ``b_i`` is the distance from ``x_i`` to the boundary of ``W`` and
  ``n_r = #{i: b_i >= r}`` (NaN where ``n_r = 0``).
* Space-time, times in ``[t0, t1]`` of length ``T``:
  ``K(r, t) = |W| T / (n (n-1)) * sum_{i != j} e_ij v_ij 1{d_ij <= r} 1{|t_i - t_j| <= t}``
  with ``v_ij = 1`` when both ``t_i +- |dt|`` lie in ``[t0, t1]``, else 2
  (Diggle et al. 1995, stpp's ``STIKhat``).

``L(r) = sqrt(K(r) / pi)``; in space-time ``L(r, t) = sqrt(K(r, t) / (2 pi t))``
(both equal ``r`` under complete spatial randomness).

Each unordered pair inside a tile is visited once and both directions'
weights are added (the isotropic weight is not symmetric); a pair across two
tiles is visited once on each side, each side adding its own direction.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ... import comms
from ...backend import to_host
from ...cluster import default_client
from ...partition import RowBlocks, _scatter_all, as_array, as_row_blocks, check_entries, resilient
from .cpu import MAX_WEIGHT
from .ranks import _ripley_rank, tile_bounds

__all__ = ["RipleyResult", "ripley_k", "ripley_brute_force", "csr_k", "tile_bounds", "thomas_process",
           "hardcore_process", "space_time_cluster", "load_burkitt"]

_CORRECTIONS = ("none", "translation", "isotropic", "border")


@dataclass
class RipleyResult:
    """Ripley's K estimate (host numpy arrays).

    Attributes
    ----------
    r : ndarray (nr,)
        Radii.
    k, l : ndarray (nr,) or (nr, nt)
        K and L; space-time results are indexed ``[radius, time radius]``.
    t : ndarray (nt,) or None
        Time radii (space-time only).
    lower, upper : ndarray or None
        Pointwise min / max of K over the simulations (``n_simulations > 0``).
    edge_correction : str
    stats : dict
        ``backend`` (the workers' kind: "cpu", "gpu" or "gpu-sim"),
        ``seconds``, ``pairs_counted`` (ordered pairs within ``r_max`` (and
        ``t_max``) in the observed pattern), ``pairs_per_second``,
        ``bytes_moved``, ``halo_points``, ``n_workers`` and the options used.
    """

    r: np.ndarray
    k: np.ndarray
    l: np.ndarray  # noqa: E741
    t: np.ndarray | None = None
    lower: np.ndarray | None = None
    upper: np.ndarray | None = None
    edge_correction: str = "isotropic"
    stats: dict = field(default_factory=dict)

    @property
    def l_lower(self) -> np.ndarray | None:
        """L of the lower envelope."""
        return None if self.lower is None else _l_of(self.lower, self.r, self.t)

    @property
    def l_upper(self) -> np.ndarray | None:
        """L of the upper envelope."""
        return None if self.upper is None else _l_of(self.upper, self.r, self.t)


def csr_k(r: Any, t: Any = None) -> np.ndarray:
    """K under complete spatial randomness: ``pi r^2`` or ``2 pi r^2 t`` (grid over r x t)."""
    r = np.asarray(r, dtype=np.float64)
    if t is None:
        return np.pi * r**2
    return 2 * np.pi * r[:, None] ** 2 * np.asarray(t, dtype=np.float64)[None, :]


@resilient
def ripley_k(points: Any, radii: Sequence[float] | np.ndarray, *, window: Sequence[float],
             edge_correction: str = "isotropic", times: Any = None, time_radii: Any = None,
             time_window: Sequence[float] | None = None, n_simulations: int = 0, seed: int | None = None,
             partitioning: bool = True, spatial_index: bool = True, cache_weights: bool = True,
             client: Any = None) -> RipleyResult:
    """Ripley's K (and L) of a point pattern in a rectangle, computed on the workers.

    Parameters
    ----------
    points : ndarray (n, 2), RowBlocks or dask array
        Coordinates.  Host arrays are distributed once; a dense
        :class:`~workbench.partition.RowBlocks` (from ``wb.distribute``) or a
        dask array is used where it lies.
    radii : array_like (nr,)
        Non-negative, ascending distances ``r``.
    window : (xmin, xmax, ymin, ymax)
        The observation rectangle; every point must lie inside it.
    edge_correction : {"isotropic", "translation", "none", "border"}
        See the module docstring for each estimator's exact formula.
    times : array_like (n,), RowBlocks or dask array, optional
        Event times: computes the space-time K(r, t).  Needs ``time_radii``
        and ``time_window``.
    time_radii : array_like (nt,), optional
        Non-negative, ascending time lags ``t``.
    time_window : (t0, t1), optional
        The observation period; every time must lie inside it.
    n_simulations : int
        Monte Carlo simulations for the pointwise envelopes: CSR patterns of
        the same size (spatial), or random permutations of the time labels
        (space-time).  Simulations are spread over the workers.
    seed : int, optional
        Seed of the simulations (simulation ``s`` uses stream ``(seed, s)``,
        so envelopes do not depend on the worker count).  Default: fresh
        entropy, recorded in ``stats["seed"]``.
    partitioning : bool
        Spatial tiles with halos (default).  ``False`` keeps the input's row
        blocks and replicates every point to every worker (ablation).
    spatial_index : bool
        Per-tile index (a y-sorted column sweep, default).  ``False``
        compares all pairs (ablation).
    cache_weights : bool
        Space-time envelopes: keep each rank's spatial pairs and edge weights
        and reuse them for every time permutation (default).  ``False``
        searches the pairs again per simulation (ablation).
    client : distributed.Client, optional
        Default: the cluster that holds the distributed inputs, else the current client.

    Returns
    -------
    RipleyResult

    Examples
    --------
    >>> import numpy as np, workbench as wb
    >>> pts = np.random.default_rng(0).random((2000, 2))
    >>> with wb.cluster(n_workers=2, quiet=True) as client:              # doctest: +SKIP
    ...     res = wb.ripley_k(pts, np.linspace(0, 0.1, 11), window=(0, 1, 0, 1), client=client)
    >>> float(res.l[-1])                                                  # doctest: +SKIP
    0.1000...
    """
    points = as_array("points", points)
    times = None if times is None else as_array("times", times)
    cfg = _validate(points, radii, window, edge_correction, times, time_radii, time_window, n_simulations,
                    seed, partitioning, spatial_index, cache_weights)
    client = default_client(client, points)
    t_start = time.perf_counter()

    pts = as_row_blocks(_host_if_array(points), client)
    _check_block_shape(pts, "points", 2)
    tms = None
    if times is not None:
        tms = _times_like(_host_if_array(times), pts, client)
    if any(isinstance(x, RowBlocks) or hasattr(x, "dask") for x in (points, times)):   # host ones: _validate
        _check_distributed_values(client, pts, tms, cfg)
    cfg["n"] = int(pts.shape[0])

    addrs = sorted(set(pts.workers))
    rank_args = [[(int(pts.offsets[p]), pts.parts[p], None if tms is None else tms.parts[p])
                  for p in range(pts.n_parts) if pts.workers[p] == a] for a in addrs]
    futs = comms.run_spmd(_ripley_rank, rank_args, cfg, client=client, workers=addrs, name="ripley", fetch=True)
    infos = comms.fetch_group(futs)
    seconds = time.perf_counter() - t_start

    head = infos[0]
    r, t = cfg["radii"], cfg["time_radii"]
    k = head["k"]
    pairs = int(head["pairs"])
    stats = {
        "seconds": seconds,
        "pairs_counted": pairs,
        "pairs_per_second": pairs / seconds if seconds > 0 else float("nan"),
        "backend": head["backend"],
        "bytes_moved": int(sum(i["bytes_sent"] for i in infos)),
        "halo_points": int(sum(i["n_halo"] for i in infos)),
        "points_per_worker": [int(i["n_owned"]) for i in infos],
        "rank_seconds": [float(i["rank_seconds"]) for i in infos],
        "n_workers": len(addrs),
        "n_points": cfg["n"],
        "n_simulations": cfg["n_simulations"],
        "seed": cfg["seed"],
        "partitioning": partitioning,
        "spatial_index": spatial_index,
        "cache_weights": cache_weights,
    }
    return RipleyResult(r=r.copy(), k=k, l=_l_of(k, r, t), t=None if t is None else t.copy(),
                        lower=head.get("lower"), upper=head.get("upper"), edge_correction=edge_correction,
                        stats=stats)


# --------------------------------------------------------------------------
# Validation (client side, before any work reaches the cluster)
# --------------------------------------------------------------------------


def _sorted_radii(values: Any, name: str) -> np.ndarray:
    try:
        a = np.asarray(values)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name} must be an array of numbers, got {type(values).__name__}") from e
    if a.dtype.kind not in "iuf":  # strings of digits, complex or bools would cast silently
        raise TypeError(f"{name} must be an array of real numbers, got dtype {a.dtype}")
    a = a.astype(np.float64, copy=False)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite")
    if a[0] < 0:
        raise ValueError(f"{name} must be non-negative, got min {a.min()}")
    if np.any(np.diff(a) < 0):
        raise ValueError(f"{name} must be sorted ascending")
    return a


def _interval(values: Any, name: str, n: int) -> tuple[float, ...]:
    try:
        if isinstance(values, str) or any(isinstance(x, str | bytes | bool | np.bool_) for x in values):
            raise TypeError(values)   # float("0") would read a string as a bound
        v = tuple(float(x) for x in values)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name} must be a sequence of {n} numbers, got {values!r}") from e
    if len(v) != n or not all(math.isfinite(x) for x in v):
        raise ValueError(f"{name} must be {n} finite numbers, got {values!r}")
    for lo, hi in zip(v[::2], v[1::2], strict=True):
        if not lo < hi:
            raise ValueError(f"{name} must have lower < upper bounds, got {values!r}")
    return v


def _validate(points: Any, radii: Any, window: Any, edge_correction: Any, times: Any, time_radii: Any,
              time_window: Any, n_simulations: Any, seed: Any, partitioning: Any, spatial_index: Any,
              cache_weights: Any) -> dict:
    if not isinstance(edge_correction, str):
        raise TypeError(f"edge_correction must be a str, got {type(edge_correction).__name__}")
    if edge_correction not in _CORRECTIONS:
        raise ValueError(f"edge_correction must be one of {_CORRECTIONS}, got {edge_correction!r}")
    win = _interval(window, "window (xmin, xmax, ymin, ymax)", 4)
    r = _sorted_radii(radii, "radii")
    if not isinstance(n_simulations, int | np.integer) or isinstance(n_simulations, bool) or n_simulations < 0:
        raise ValueError(f"n_simulations must be a non-negative int, got {n_simulations!r}")
    if seed is not None and (not isinstance(seed, int | np.integer) or isinstance(seed, bool) or seed < 0):
        raise ValueError(f"seed must be a non-negative int or None, got {seed!r}")
    for name, flag in (("partitioning", partitioning), ("spatial_index", spatial_index),
                       ("cache_weights", cache_weights)):
        if not isinstance(flag, bool | np.bool_):
            raise TypeError(f"{name} must be a bool, got {type(flag).__name__}")

    n = _check_points(points, win)
    tr, twin = None, None
    if times is None:
        if time_radii is not None or time_window is not None:
            raise ValueError("time_radii/time_window given without times")
    else:
        if time_window is None:
            raise ValueError("times need their time_window=(t0, t1)")
        if time_radii is None:
            raise ValueError("times need time_radii")
        if edge_correction == "border":
            raise ValueError("edge_correction='border' is spatial only; use 'isotropic', 'translation' "
                             "or 'none' with times")
        twin = _interval(time_window, "time_window (t0, t1)", 2)
        tr = _sorted_radii(time_radii, "time_radii")
        _check_times(times, twin, n)
    if seed is None and n_simulations:
        seed = int(np.random.SeedSequence().entropy % (1 << 63))
    return {"window": win, "radii": r, "correction": edge_correction, "time_radii": tr, "time_window": twin,
            "n_simulations": int(n_simulations), "seed": None if seed is None else int(seed),
            "partitioning": bool(partitioning), "spatial_index": bool(spatial_index),
            "cache_weights": bool(cache_weights)}


def _check_points(points: Any, win: tuple) -> int:
    if isinstance(points, RowBlocks):
        if points.kind != "dense" or len(points.shape) != 2 or points.shape[1] != 2:
            raise ValueError(f"points must be dense (n, 2) row blocks, got {points!r}")
        check_entries("points", points)  # the dtype; the values are checked on the workers
        n = int(points.shape[0])
    elif hasattr(points, "dask") and hasattr(points, "shape"):
        if len(points.shape) != 2 or points.shape[1] != 2:
            raise ValueError(f"points must have shape (n, 2), got {points.shape}")
        check_entries("points", points)
        n = int(points.shape[0])
    else:
        try:
            p = np.asarray(to_host(points))
        except (TypeError, ValueError) as e:
            raise TypeError(f"points must be an (n, 2) array of numbers, got {type(points).__name__}") from e
        if p.dtype.kind not in "biuf":  # strings of digits or complex would cast silently
            raise TypeError(f"points must be an (n, 2) array of real numbers, got dtype {p.dtype}")
        p = p.astype(np.float64, copy=False)
        if p.ndim != 2 or p.shape[1] != 2:
            raise ValueError(f"points must have shape (n, 2), got {p.shape}")
        n = p.shape[0]
        if not np.all(np.isfinite(p)):
            raise ValueError("points contain NaN or infinite coordinates")
        bad = _outside_window(p[:, 0], p[:, 1], win)
        if bad:
            raise ValueError(f"{bad} points lie outside the window {win}")
    if n < 2:
        raise ValueError(f"points needs at least 2 points, got {n}")
    return n


def _check_times(times: Any, twin: tuple, n: int) -> None:
    if isinstance(times, RowBlocks) or hasattr(times, "dask"):
        if tuple(times.shape) != (n,):
            raise ValueError(f"times must have shape ({n},), got {tuple(times.shape)}")
        check_entries("times", times)
        return
    t = np.asarray(to_host(times))
    if t.dtype.kind not in "biuf":
        raise TypeError(f"times must hold real numbers, got dtype {t.dtype}")
    t = t.astype(np.float64, copy=False)
    if t.shape != (n,):
        raise ValueError(f"times must have shape ({n},), got {t.shape}")
    if not np.all(np.isfinite(t)):
        raise ValueError("times contain NaN or infinite values")
    bad = int(np.count_nonzero((t < twin[0]) | (t > twin[1])))
    if bad:
        raise ValueError(f"{bad} times lie outside the time_window {twin}")


def _outside_window(x: np.ndarray, y: np.ndarray, win: tuple) -> int:
    return int(np.count_nonzero((x < win[0]) | (x > win[1]) | (y < win[2]) | (y > win[3])))


def _block_problems(block: Any, tblock: Any, win: tuple, twin: tuple | None) -> tuple[int, int, int]:
    p = np.asarray(to_host(block), dtype=np.float64)
    nonfinite = int(np.count_nonzero(~np.isfinite(p).all(axis=1)))
    outside = _outside_window(p[:, 0], p[:, 1], win)
    tbad = 0
    if tblock is not None:
        t = np.asarray(to_host(tblock), dtype=np.float64)
        tbad = int(np.count_nonzero(~np.isfinite(t) | (t < twin[0]) | (t > twin[1])))
    return nonfinite, outside, tbad


def _block_bounds(block: Any, tblock: Any) -> tuple:
    """(non-finite rows, xmin, xmax, ymin, ymax, non-finite times, tmin, tmax) of one block."""
    p = np.asarray(to_host(block), dtype=np.float64)
    ok = np.isfinite(p).all(axis=1)
    q = p[ok]
    box = (q[:, 0].min(), q[:, 0].max(), q[:, 1].min(), q[:, 1].max()) if len(q) else (np.inf, -np.inf) * 2
    tb = (0, np.inf, -np.inf)
    if tblock is not None:
        t = np.asarray(to_host(tblock), dtype=np.float64)
        tf = t[np.isfinite(t)]
        tb = (int(len(t) - len(tf)), tf.min() if len(tf) else np.inf, tf.max() if len(tf) else -np.inf)
    return (int(len(p) - len(q)), *(float(v) for v in box), tb[0], float(tb[1]), float(tb[2]))


def _check_distributed_values(client: Any, pts: RowBlocks, tms: RowBlocks | None, cfg: dict) -> None:
    """Distributed points (and times): finite and inside the windows.  Each block's bounds are
    computed on its worker once per container (remembered in ``pts.meta``, keyed by the blocks'
    futures), so later calls check any window against them without a task; only a call that
    fails counts the offending points, for the message."""
    key = (tuple(f.key for f in pts.parts), None if tms is None else tuple(f.key for f in tms.parts))
    known = pts.meta.get("_ripley_bounds")
    if known is None or known[0] != key:
        futs = [client.submit(_block_bounds, pts.parts[p], None if tms is None else tms.parts[p],
                              workers=[pts.workers[p]], pure=False) for p in range(pts.n_parts)]
        known = (key, client.gather(futs))
        pts.meta["_ripley_bounds"] = known
    b = np.asarray(known[1], dtype=np.float64).reshape(-1, 8)
    win, twin = cfg["window"], cfg["time_window"]
    ok = (b[:, 0].sum() == 0 and b[:, 1].min() >= win[0] and b[:, 2].max() <= win[1]
          and b[:, 3].min() >= win[2] and b[:, 4].max() <= win[3])
    if tms is not None:
        ok = ok and b[:, 5].sum() == 0 and b[:, 6].min() >= twin[0] and b[:, 7].max() <= twin[1]
    if not ok:
        _count_problems(client, pts, tms, cfg)


def _count_problems(client: Any, pts: RowBlocks, tms: RowBlocks | None, cfg: dict) -> None:
    # One small task per block where it lives, before the SPMD group starts.
    futs = [client.submit(_block_problems, pts.parts[p], None if tms is None else tms.parts[p], cfg["window"],
                          cfg["time_window"], workers=[pts.workers[p]], pure=False) for p in range(pts.n_parts)]
    nonfinite, outside, tbad = np.sum(client.gather(futs), axis=0)
    if nonfinite:
        raise ValueError(f"points contain {nonfinite} rows with NaN or infinite coordinates")
    if outside:
        raise ValueError(f"{outside} points lie outside the window {cfg['window']}")
    if tbad:
        raise ValueError(f"{tbad} times are non-finite or lie outside the time_window {cfg['time_window']}")


def _host_if_array(x: Any) -> Any:
    if isinstance(x, RowBlocks) or hasattr(x, "dask"):
        return x
    return np.ascontiguousarray(np.asarray(to_host(x), dtype=np.float64))


def _check_block_shape(blocks: RowBlocks, name: str, ncols: int) -> None:
    if blocks.kind != "dense" or len(blocks.shape) != 2 or blocks.shape[1] != ncols:
        raise ValueError(f"{name} must be dense (n, {ncols}) row blocks, got {blocks!r}")


def _times_like(times: Any, pts: RowBlocks, client: Any) -> RowBlocks:
    """Times as row blocks aligned with the points' blocks (same offsets and workers)."""
    if isinstance(times, np.ndarray):
        parts = _scatter_all(client, [times[pts.offsets[p]:pts.offsets[p + 1]] for p in range(pts.n_parts)],
                             list(pts.workers), device=False)
        return RowBlocks(parts, pts.offsets.copy(), (pts.shape[0],), np.dtype(np.float64), list(pts.workers),
                         kind="dense")
    if isinstance(times, RowBlocks):
        if not np.array_equal(times.offsets, pts.offsets) or list(times.workers) != list(pts.workers):
            raise ValueError("times row blocks must have the same offsets and workers as the points")
        return times
    # a dask array: rechunked to the points' blocks and computed where they live
    chunks = (tuple(int(s) for s in np.diff(pts.offsets)),)
    blocks = times.rechunk(chunks).to_delayed().ravel()
    parts = [client.compute(b, workers=[pts.workers[p]], allow_other_workers=False) for p, b in enumerate(blocks)]
    return RowBlocks(parts, pts.offsets.copy(), (pts.shape[0],), np.dtype(np.float64), list(pts.workers),
                     kind="dense")


def _l_of(k: np.ndarray, r: np.ndarray, t: np.ndarray | None) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        if t is None:
            return np.sqrt(k / np.pi)
        return np.sqrt(k / (2 * np.pi * t[None, :]))


# --------------------------------------------------------------------------
# Independent single-node reference (validator)
# --------------------------------------------------------------------------


def ripley_brute_force(points: np.ndarray, radii: Any, window: Sequence[float], edge_correction: str = "isotropic",
                       times: Any = None, time_radii: Any = None, time_window: Any = None) -> np.ndarray:
    """O(n^2) vectorised numpy evaluation of the same estimators (validator for small n).

    Shares no code with the distributed kernels (weights are recomputed from
    the formulas with numpy), so the notebook and tests can check one against
    the other.
    """
    p = np.asarray(points, dtype=np.float64)
    r = np.asarray(radii, dtype=np.float64)
    x0, x1, y0, y1 = (float(v) for v in window)
    area, n = (x1 - x0) * (y1 - y0), len(p)
    dx = p[None, :, 0] - p[:, None, 0]
    dy = p[None, :, 1] - p[:, None, 1]
    d = np.hypot(dx, dy)
    off = ~np.eye(n, dtype=bool)
    if edge_correction == "none" or edge_correction == "border":
        e = np.ones_like(d)
    elif edge_correction == "translation":
        e = np.minimum(area / ((x1 - x0 - np.abs(dx)) * (y1 - y0 - np.abs(dy))), MAX_WEIGHT)
    else:
        e = _iso_weight_numpy(p[:, 0], p[:, 1], d, (x0, x1, y0, y1))
    if times is not None:
        t = np.asarray(times, dtype=np.float64)
        tr = np.asarray(time_radii, dtype=np.float64)
        t0, t1 = time_window
        dt = np.abs(t[None, :] - t[:, None])
        v = np.where((t[:, None] - dt >= t0) & (t[:, None] + dt <= t1), 1.0, 2.0)
        w = np.where(off, e * v, 0.0)
        out = np.empty((len(r), len(tr)))
        for a, ra in enumerate(r):
            for b, tb in enumerate(tr):
                out[a, b] = w[(d <= ra) & (dt <= tb)].sum()
        return area * (t1 - t0) / (n * (n - 1.0)) * out
    if edge_correction == "border":
        b = np.minimum(np.minimum(p[:, 0] - x0, x1 - p[:, 0]), np.minimum(p[:, 1] - y0, y1 - p[:, 1]))
        out = np.empty(len(r))
        for a, ra in enumerate(r):
            rows = b >= ra
            cnt = ((d[rows] <= ra) & off[rows]).sum()
            out[a] = area * cnt / (n * rows.sum()) if rows.any() else np.nan
        return out
    w = np.where(off, e, 0.0)
    return area / (n * (n - 1.0)) * np.array([w[d <= ra].sum() for ra in r])


def _iso_weight_numpy(x: np.ndarray, y: np.ndarray, d: np.ndarray, win: tuple) -> np.ndarray:
    """Isotropic weights e[i, j] for circles at x_i of radius d[i, j] (numpy form)."""
    x0, x1, y0, y1 = win
    dL, dR, dD, dU = ((x - x0)[:, None], (x1 - x)[:, None], (y - y0)[:, None], (y1 - y)[:, None])
    with np.errstate(invalid="ignore", divide="ignore"):
        def ang(dist):
            return np.where(dist < d, np.arccos(np.clip(dist / np.where(d > 0, d, 1), -1, 1)), 0.0)
        aL, aR, aD, aU = ang(dL), ang(dR), ang(dD), ang(dU)
    ext = (np.minimum(aL, np.arctan2(dU, dL)) + np.minimum(aL, np.arctan2(dD, dL))
           + np.minimum(aR, np.arctan2(dU, dR)) + np.minimum(aR, np.arctan2(dD, dR))
           + np.minimum(aU, np.arctan2(dL, dU)) + np.minimum(aU, np.arctan2(dR, dU))
           + np.minimum(aD, np.arctan2(dL, dD)) + np.minimum(aD, np.arctan2(dR, dD))) / (2 * np.pi)
    eps = 1e-12 * max(x1 - x0, y1 - y0)
    ncor = sum((np.abs(v) < eps).astype(int) for v in (dL, dR, dD, dU))
    ext = ext + np.where(ncor >= 2, 0.25, 0.0)
    with np.errstate(divide="ignore"):
        e = np.where(ext >= 1 - 1 / MAX_WEIGHT, MAX_WEIGHT, 1.0 / (1.0 - ext))
    return np.where(d > 0, e, 1.0)



# --------------------------------------------------------------------------
# Patterns for the notebook and tests (seeded)
# --------------------------------------------------------------------------


def thomas_process(kappa: float, mu: float, sigma: float, window: Sequence[float] = (0, 1, 0, 1),
                   seed: int = 0) -> np.ndarray:
    """Thomas cluster process: Poisson(kappa) parents (in the window grown by
    4 sigma), Poisson(mu) children each, Gaussian(sigma) offsets; children
    inside the window are returned, shape (n, 2)."""
    x0, x1, y0, y1 = (float(v) for v in window)
    g = 4 * sigma
    rng = np.random.default_rng([seed, 0x7409])
    area = (x1 - x0 + 2 * g) * (y1 - y0 + 2 * g)
    npar = rng.poisson(kappa * area)
    par = np.column_stack([rng.uniform(x0 - g, x1 + g, npar), rng.uniform(y0 - g, y1 + g, npar)])
    kids = np.repeat(par, rng.poisson(mu, npar), axis=0)
    kids += rng.normal(0.0, sigma, kids.shape)
    inside = (kids[:, 0] >= x0) & (kids[:, 0] <= x1) & (kids[:, 1] >= y0) & (kids[:, 1] <= y1)
    return kids[inside]


def hardcore_process(intensity: float, hard_core: float, window: Sequence[float] = (0, 1, 0, 1),
                     seed: int = 0) -> np.ndarray:
    """Matern type II hard-core process: Poisson(intensity) points with random
    marks; a point is deleted when a point with a smaller mark lies within
    ``hard_core``.  A regular pattern, shape (n, 2)."""
    from scipy.spatial import cKDTree

    x0, x1, y0, y1 = (float(v) for v in window)
    rng = np.random.default_rng([seed, 0x4C02])
    n = rng.poisson(intensity * (x1 - x0) * (y1 - y0))
    pts = np.column_stack([rng.uniform(x0, x1, n), rng.uniform(y0, y1, n)])
    mark = rng.random(n)
    pairs = cKDTree(pts).query_pairs(hard_core, output_type="ndarray")
    loser = np.where(mark[pairs[:, 0]] > mark[pairs[:, 1]], pairs[:, 0], pairs[:, 1])
    keep = np.ones(n, dtype=bool)
    keep[loser] = False
    return pts[keep]


def space_time_cluster(n_parents: int, mu: float, sigma: float, tau: float, window: Sequence[float] = (0, 1, 0, 1),
                       time_window: Sequence[float] = (0, 1), seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Space-time clustered process: uniform parents in W x T, Poisson(mu)
    children with Gaussian offsets (sigma in space, tau in time); children
    inside W x T are returned as (points (n, 2), times (n,))."""
    x0, x1, y0, y1 = (float(v) for v in window)
    t0, t1 = (float(v) for v in time_window)
    rng = np.random.default_rng([seed, 0x57C1])
    par = np.column_stack([rng.uniform(x0, x1, n_parents), rng.uniform(y0, y1, n_parents),
                           rng.uniform(t0, t1, n_parents)])
    kids = np.repeat(par, rng.poisson(mu, n_parents), axis=0)
    kids += rng.normal(0.0, 1.0, kids.shape) * np.array([sigma, sigma, tau])
    ok = ((kids[:, 0] >= x0) & (kids[:, 0] <= x1) & (kids[:, 1] >= y0) & (kids[:, 1] <= y1)
          & (kids[:, 2] >= t0) & (kids[:, 2] <= t1))
    return kids[ok, :2].copy(), kids[ok, 2].copy()


def load_burkitt() -> dict:
    """Burkitt's lymphoma cases, West Nile district of Uganda, 1961-1975
    (188 cases; x, y in km, t in days), as shipped in the libpysal wheel.

    Returns ``{"points", "times", "window", "time_window"}``; the window is
    the points' bounding box and the time window their time range.
    """
    import libpysal

    f = libpysal.io.open(libpysal.examples.get_path("burkitt.dbf"))
    x, y, t = (np.asarray(f.by_col(c), dtype=np.float64) for c in ("X", "Y", "T"))
    f.close()
    pts = np.column_stack([x, y])
    return {"points": pts, "times": t, "window": (x.min(), x.max(), y.min(), y.max()),
            "time_window": (t.min(), t.max())}
