"""Distributed Ripley's K against an independent O(n^2) brute force.

The oracle here shares no code with workbench.kernels.ripley: the isotropic
weight is computed geometrically (the circle's crossings with the four edge
lines, then which arcs lie inside), not from spatstat's closed form.
"""

from __future__ import annotations

import numpy as np
import pytest
from _sim import run_in_simulator

import workbench as wb
from workbench.kernels.ripley import csr_k

WIN = (-1.0, 2.0, 0.5, 1.5)  # 3 x 1: not the unit square, not at the origin
TWIN = (10.0, 30.0)


def _circle_fraction_inside(cx, cy, d, win):
    """Exact fraction of each circle (centre (cx, cy), radius d) inside the rectangle."""
    x0, x1, y0, y1 = win
    cx, cy, d = (np.asarray(a, dtype=float) for a in (cx, cy, d))
    cuts = [np.zeros_like(d), np.full_like(d, 2 * np.pi)]
    for a, horizontal in ((x0, False), (x1, False), (y0, True), (y1, True)):
        with np.errstate(divide="ignore", invalid="ignore"):
            off = (a - (cy if horizontal else cx)) / d
        ok = np.abs(off) <= 1
        base = np.arcsin(np.clip(off, -1, 1)) if horizontal else np.arccos(np.clip(off, -1, 1))
        for ang in ((base, np.pi - base) if horizontal else (base, -base)):
            cuts.append(np.where(ok, np.mod(ang, 2 * np.pi), 0.0))
    c = np.sort(np.stack(cuts, axis=1), axis=1)
    mid = (c[:, 1:] + c[:, :-1]) / 2
    mx = cx[:, None] + d[:, None] * np.cos(mid)
    my = cy[:, None] + d[:, None] * np.sin(mid)
    inside = (mx >= x0) & (mx <= x1) & (my >= y0) & (my <= y1)
    return np.where(d > 0, (np.diff(c, axis=1) * inside).sum(axis=1) / (2 * np.pi), 1.0)


def _oracle(pts, r, win, corr, times=None, tr=None, twin=None):
    n = len(pts)
    area = (win[1] - win[0]) * (win[3] - win[2])
    out = np.zeros((len(r), 1 if times is None else len(tr)))
    num = np.zeros(len(r))
    count_r = np.zeros(len(r))
    b = np.minimum(np.minimum(pts[:, 0] - win[0], win[1] - pts[:, 0]),
                   np.minimum(pts[:, 1] - win[2], win[3] - pts[:, 1]))
    for i in range(n):
        others = np.arange(n) != i
        dx = pts[others, 0] - pts[i, 0]
        dy = pts[others, 1] - pts[i, 1]
        d = np.sqrt(dx**2 + dy**2)
        if corr == "isotropic":
            e = np.minimum(1 / np.maximum(_circle_fraction_inside(np.full_like(d, pts[i, 0]),
                                                                  np.full_like(d, pts[i, 1]), d, win), 1e-300), 100)
        elif corr == "translation":
            # a pair a whole window width (or height) apart has no overlap: weight infinite, capped at 100
            den = (win[1] - win[0] - np.abs(dx)) * (win[3] - win[2] - np.abs(dy))
            e = np.minimum(np.divide(area, den, out=np.full_like(den, np.inf), where=den > 0), 100)
        else:
            e = np.ones_like(d)
        if times is None:
            for a, ra in enumerate(r):
                if corr == "border":
                    if b[i] >= ra:
                        num[a] += np.count_nonzero(d <= ra)
                        count_r[a] += 1
                else:
                    out[a, 0] += e[d <= ra].sum()
        else:
            dt = np.abs(times[others] - times[i])
            v = np.where((times[i] - dt >= twin[0]) & (times[i] + dt <= twin[1]), 1.0, 2.0)
            for a, ra in enumerate(r):
                for c, tc in enumerate(tr):
                    sel = (d <= ra) & (dt <= tc)
                    out[a, c] += (e * v)[sel].sum()
    if corr == "border":  # NaN at radii no point is that far from the boundary (n_r = 0)
        return np.divide(area * num, n * count_r, out=np.full(len(r), np.nan), where=count_r > 0)
    if times is None:
        return area / (n * (n - 1)) * out[:, 0]
    return area * (twin[1] - twin[0]) / (n * (n - 1)) * out


def _pattern(n=240, seed=7):
    rng = np.random.default_rng(seed)
    pts = np.column_stack([rng.uniform(WIN[0], WIN[1], n), rng.uniform(WIN[2], WIN[3], n)])
    pts[:12] = [[WIN[0], 1.0], [WIN[1], 0.7], [0.3, WIN[2]], [1.1, WIN[3]], [WIN[0] + 1e-3, WIN[2] + 2e-3],
                [WIN[1] - 2e-3, WIN[3] - 1e-3], [0.5, 1.0], [0.5, 1.0], [0.0, 1.0], [1.0, 1.0],
                [WIN[1] - 0.05, WIN[2] + 0.03], [WIN[0] + 0.04, WIN[3] - 0.06]]  # edges, near corners, a duplicate
    times = rng.uniform(*TWIN, n)
    return pts, times


RADII = np.array([0.0, 0.02, 0.05, 0.1, 0.2, 0.35, 0.45, 0.6])


def test_isotropic_oracle_is_right():
    # the test's own geometry: known fractions
    f = _circle_fraction_inside([0.0, 0.0, 0.5, 0.5], [0.0, 0.5, 0.5, 0.5], [0.1, 0.1, 0.1, 0.5],
                                (0, 1, 0, 1))
    np.testing.assert_allclose(f, [0.25, 0.5, 1.0, 1.0], atol=1e-12)


@pytest.mark.parametrize("n_workers", [1, 2, 3])
def test_spatial_matches_brute_force(clients, n_workers):
    client = clients(n_workers)
    pts, _ = _pattern()
    for corr in ("none", "translation", "isotropic", "border"):
        res = wb.ripley_k(pts, RADII, window=WIN, edge_correction=corr, client=client)
        ref = _oracle(pts, RADII, WIN, corr)
        np.testing.assert_allclose(res.k, ref, rtol=1e-10, atol=1e-14, err_msg=corr)
        np.testing.assert_allclose(res.l, np.sqrt(ref / np.pi), rtol=1e-10, atol=1e-14)
        assert res.r.shape == res.k.shape == (len(RADII),)
        assert res.stats["backend"] == "cpu"
    # every worker owned points and, with several tiles, exchanged halos
    assert all(c > 0 for c in res.stats["points_per_worker"])
    assert sum(res.stats["points_per_worker"]) == len(pts)
    assert res.stats["n_workers"] == n_workers
    if n_workers > 1:
        assert res.stats["halo_points"] > 0 and res.stats["bytes_moved"] > 0
    n = len(pts)
    d = np.hypot(*(pts[:, None, :] - pts[None, :, :]).transpose(2, 0, 1))
    assert res.stats["pairs_counted"] == np.count_nonzero(d <= RADII[-1]) - n


@pytest.mark.parametrize("n_workers", [1, 3])
def test_space_time_matches_brute_force(clients, n_workers):
    client = clients(n_workers)
    pts, times = _pattern(150)
    tr = np.array([0.0, 1.0, 4.0, 9.0, 15.0])
    res = wb.ripley_k(pts, RADII, window=WIN, times=times, time_radii=tr, time_window=TWIN, client=client)
    ref = _oracle(pts, RADII, WIN, "isotropic", times, tr, TWIN)
    assert res.k.shape == (len(RADII), len(tr))
    np.testing.assert_allclose(res.k, ref, rtol=1e-10, atol=1e-14)
    for corr in ("none", "translation"):
        res = wb.ripley_k(pts, RADII[:5], window=WIN, edge_correction=corr, times=times, time_radii=tr,
                          time_window=TWIN, client=client)
        np.testing.assert_allclose(res.k, _oracle(pts, RADII[:5], WIN, corr, times, tr, TWIN), rtol=1e-10,
                                   atol=1e-14)


def test_identical_across_workers_and_ablations(clients):
    pts, times = _pattern(400, seed=3)
    tr = np.array([1.0, 5.0])
    runs = {}
    for n_workers in (1, 2, 3):
        client = clients(n_workers)
        runs[n_workers] = wb.ripley_k(pts, RADII, window=WIN, client=client)
        st = wb.ripley_k(pts, RADII[:4], window=WIN, times=times, time_radii=tr, time_window=TWIN,
                         n_simulations=4, seed=11, client=client)
        runs[("st", n_workers)] = st
    for n_workers in (2, 3):
        np.testing.assert_allclose(runs[n_workers].k, runs[1].k, rtol=1e-13)
        assert runs[n_workers].stats["pairs_counted"] == runs[1].stats["pairs_counted"]
        for f in ("k", "lower", "upper"):
            np.testing.assert_allclose(getattr(runs[("st", n_workers)], f), getattr(runs[("st", 1)], f),
                                       rtol=1e-13)
    client = clients(3)
    for opts in ({"partitioning": False}, {"spatial_index": False}):
        res = wb.ripley_k(pts, RADII, window=WIN, client=client, **opts)
        np.testing.assert_allclose(res.k, runs[1].k, rtol=1e-13, err_msg=str(opts))
    nocache = wb.ripley_k(pts, RADII[:4], window=WIN, times=times, time_radii=tr, time_window=TWIN,
                          n_simulations=4, seed=11, cache_weights=False, client=client)
    np.testing.assert_allclose(nocache.lower, runs[("st", 1)].lower, rtol=1e-13)
    np.testing.assert_allclose(nocache.upper, runs[("st", 1)].upper, rtol=1e-13)


def test_distributed_input(clients):
    client = clients(2)
    pts, times = _pattern(300, seed=5)
    P = wb.distribute(pts, client=client)
    T = wb.distribute(times, client=client)
    a = wb.ripley_k(P, RADII, window=WIN, client=client)
    b = wb.ripley_k(pts, RADII, window=WIN, client=client)
    np.testing.assert_allclose(a.k, b.k, rtol=1e-13)
    tr = np.array([2.0, 6.0])
    c = wb.ripley_k(P, RADII, window=WIN, times=T, time_radii=tr, time_window=TWIN, client=client)
    d = wb.ripley_k(pts, RADII, window=WIN, times=times, time_radii=tr, time_window=TWIN, client=client)
    np.testing.assert_allclose(c.k, d.k, rtol=1e-13)


def test_csr_expectation_and_envelopes(clients):
    client = clients(2)
    rng = np.random.default_rng(2)
    n = 6000
    pts = rng.random((n, 2))
    r = np.linspace(0.01, 0.06, 6)
    res = wb.ripley_k(pts, r, window=(0, 1, 0, 1), n_simulations=19, seed=4, client=client)
    theory = csr_k(r)
    # sampling error of K at these r and n is ~1-2 %
    np.testing.assert_allclose(res.k, np.pi * r**2, rtol=0.06)
    assert np.all(res.lower <= theory) and np.all(theory <= res.upper)
    assert np.all(res.lower <= res.upper)
    np.testing.assert_allclose(res.l_upper, np.sqrt(res.upper / np.pi))
    times = rng.uniform(0, 1, n)
    tr = np.array([0.05, 0.1, 0.2])
    st = wb.ripley_k(pts, r, window=(0, 1, 0, 1), times=times, time_radii=tr, time_window=(0, 1),
                     n_simulations=9, seed=1, client=client)
    np.testing.assert_allclose(st.k, 2 * np.pi * r[:, None] ** 2 * tr[None, :], rtol=0.12)
    assert np.all(st.lower <= st.upper)
    np.testing.assert_allclose(st.l, np.sqrt(st.k / (2 * np.pi * tr[None, :])))


def test_clustered_pattern_exceeds_envelope(clients):
    client = clients(2)
    rng = np.random.default_rng(8)
    parents = rng.random((30, 2))
    kids = (parents[rng.integers(0, 30, 1500)] + rng.normal(0, 0.01, (1500, 2))) % 1.0
    r = np.array([0.01, 0.02, 0.04])
    res = wb.ripley_k(kids, r, window=(0, 1, 0, 1), n_simulations=9, seed=2, client=client)
    assert np.all(res.k > res.upper)


@pytest.mark.parametrize("kwargs, match", [
    ({"points": np.array([[0.5, np.nan], [0.2, 0.2]])}, "NaN or infinite"),
    ({"points": np.array([[0.5, np.inf], [0.2, 0.2]])}, "NaN or infinite"),
    ({"points": np.array([[0.5, 1.5], [0.2, 0.2]])}, "outside the window"),
    ({"points": np.zeros((3, 3))}, "shape"),
    ({"points": np.zeros((1, 2))}, "at least 2"),
    ({"radii": [-0.1, 0.2]}, "non-negative"),
    ({"radii": [0.2, 0.1]}, "sorted"),
    ({"radii": []}, "non-empty"),
    ({"window": (1, 0, 0, 1)}, "lower < upper"),
    ({"window": (0, 1, 0)}, "4 finite"),
    ({"edge_correction": "ohser"}, "edge_correction"),
    ({"times": [0.1, 0.2, 0.3], "time_radii": [0.1]}, "time_window"),
    ({"times": [0.1, 0.2, 0.3], "time_window": (0, 1)}, "time_radii"),
    ({"time_radii": [0.1], "time_window": (0, 1)}, "without times"),
    ({"times": [0.1, 0.2, 3.0], "time_radii": [0.1], "time_window": (0, 1)}, "outside the time_window"),
    ({"times": [0.1, 0.2], "time_radii": [0.1], "time_window": (0, 1)}, "shape"),
    ({"times": [0.1, 0.2, 0.3], "time_radii": [0.1], "time_window": (0, 1), "edge_correction": "border"},
     "spatial only"),
    ({"n_simulations": -1}, "n_simulations"),
])
def test_bad_input(kwargs, match):
    args = {"points": np.array([[0.1, 0.1], [0.5, 0.5], [0.9, 0.2]]), "radii": [0.0, 0.1], "window": (0, 1, 0, 1)}
    args.update(kwargs)
    points, radii = args.pop("points"), args.pop("radii")
    # raised before any cluster is needed (no client exists in this test)
    with pytest.raises(ValueError, match=match):
        wb.ripley_k(points, radii, **args)


def test_bad_input_types():
    with pytest.raises(TypeError, match="edge_correction"):
        wb.ripley_k(np.zeros((2, 2)), [0.1], window=(0, 1, 0, 1), edge_correction=3)
    with pytest.raises(TypeError, match="partitioning"):
        wb.ripley_k(np.zeros((2, 2)), [0.1], window=(0, 1, 0, 1), partitioning="yes")


def test_bad_distributed_input(clients):
    client = clients(2)
    P = wb.distribute(np.array([[0.1, 0.1], [0.5, 0.5], [0.9, 1.2], [0.3, 0.3]]), client=client)
    with pytest.raises(ValueError, match="outside the window"):
        wb.ripley_k(P, [0.1], window=(0, 1, 0, 1), client=client)
    # distributed times are checked where they live whatever the points are (host points too)
    import dask.array as da

    pts = np.random.default_rng(0).random((30, 2))
    t = np.linspace(0.5, 9.5, 30)
    for bad in (t + 5, np.where(np.arange(30) == 3, np.nan, t)):
        for times in (da.from_array(bad, chunks=11), wb.distribute(bad, client=client)):
            for points in (pts, da.from_array(pts, chunks=(11, 2))):
                with pytest.raises(ValueError, match="time_window"):
                    wb.ripley_k(points, [0.1], window=(0, 1, 0, 1), times=times, time_radii=[1.0],
                                time_window=(0, 10), client=client)


# Run in a fresh process: the simulator is chosen when numba.cuda is first imported.
_TWINS_UNDER_SIMULATOR = """
import numba
import numpy as np
assert numba.config.ENABLE_CUDASIM
from workbench.kernels.ripley import _validate, cpu, cuda as dev, ranks

WIN, TWIN = (-1.0, 2.0, 0.5, 1.5), (10.0, 30.0)
rng = np.random.default_rng(4)
n = 80
pts = np.column_stack([rng.uniform(WIN[0], WIN[1], n), rng.uniform(WIN[2], WIN[3], n)])
pts[:5] = [[WIN[0], 1.0], [WIN[1], 0.7], [0.3, WIN[2]], [0.5, 1.0], [0.5, 1.0]]  # on edges, a duplicate
rows = np.column_stack([pts, rng.uniform(*TWIN, n), np.arange(n, dtype=float)])
owned, halo = rows[pts[:, 0] < 0.4], rows[(pts[:, 0] >= 0.4) & (pts[:, 0] < 0.9)]  # a tile and its halo
R = np.array([0.0, 0.05, 0.1, 0.2, 0.3, 0.45])
checked = 0
for corr in ("none", "translation", "isotropic", "border"):
    for st in (False, True) if corr != "border" else (False,):
        for index in (True, False):
            cfg = _validate(pts, R, WIN, corr, rows[:, 2] if st else None, [0.0, 1.0, 4.0] if st else None,
                            TWIN if st else None, 0, None, True, index, True)
            sw = ranks._Sweep(owned, halo, (WIN[0], 0.4, WIN[2], WIN[3]), cfg)
            ot, ht = (owned[sw.oo, 2].copy(), halo[sw.ho, 2].copy()) if st else (np.zeros(1), np.zeros(1))
            tr, twin = (sw.tr, sw.twin) if st else (np.array([np.inf]), np.array([0.0, 1.0]))
            args = (sw.ox, sw.oy, ot, sw.lim, sw.ostart, sw.opos, sw.oang, sw.hx, sw.hy, ht, sw.hstart, sw.hpos,
                    sw.hang, sw.reach, sw.ywin, sw.r2, sw.lut, sw.scale, tr, sw.mode, st, sw.win, twin)
            grids = [(2, 32), (1, 1), (3, 7)] if corr == "isotropic" and index else [(2, 32)]
            for grid in [None, *grids]:
                run = cpu._sweep if grid is None else dev._sweep[grid]
                hist, c0, c1 = np.zeros((len(R) + 1, len(tr) + 1)), np.zeros(2, np.int64), np.zeros(2, np.int64)
                none = (np.zeros(1, np.int64),) * 3 + (np.zeros(1),) * 2
                run(*args, hist, 0, *none, c0)
                run(*args, hist.copy(), 1, *none, c1)
                m = int(c1[1])
                rec = (np.zeros(m, np.int64), np.zeros(m, np.int64), np.zeros(m, np.int64), np.zeros(m), np.zeros(m))
                c2 = np.zeros(2, np.int64)
                run(*args, hist.copy(), 2, *rec, c2)
                order = np.lexsort((rec[1], rec[0]))
                got = (hist, c0, c1, c2, [a[order] for a in rec])
                if grid is None:
                    want = got
                    assert c0[0] > 20 and m > 10, "the case finds no pairs"
                    continue
                ctx = str((corr, st, index, grid))
                np.testing.assert_allclose(hist, want[0], rtol=1e-10, atol=1e-12 * np.abs(want[0]).max(), err_msg=ctx)
                for q in (1, 2, 3):  # pair counts, and records at slots 0 .. m - 1
                    np.testing.assert_array_equal(got[q], want[q], err_msg=ctx)
                for q in range(3):  # the same pairs (i, j) with the same radius bins
                    np.testing.assert_array_equal(got[4][q], want[4][q], err_msg=ctx)
                for q in (3, 4):  # both directions' edge weights
                    np.testing.assert_allclose(got[4][q], want[4][q], rtol=1e-12, err_msg=ctx)
                if st:  # the cached pairs' space-time histogram under other time labels
                    t = rng.permutation(np.concatenate([owned[:, 2], halo[:, 2]]))
                    cache = ranks._pair_cache(sw, len(owned))
                    h_cpu, h_dev = np.zeros_like(hist), np.zeros_like(hist)
                    cpu._hist_from_cache(*cache, t, tr, twin, h_cpu)
                    dev._hist_from_cache[grid](*cache, t, tr, twin, h_dev)
                    np.testing.assert_allclose(h_dev, h_cpu, rtol=1e-10, atol=1e-12 * np.abs(h_cpu).max(), err_msg=ctx)
                    assert h_cpu.any(), ctx
                checked += 1
print("checked", checked)
"""


def test_cuda_twins_match_cpu_twins_under_simulator():
    """Each numba.cuda twin, launched under numba's CUDA simulator on several grids, gives its CPU twin's
    histogram (1e-10), pair counts and recorded pairs (exact), for every edge correction, spatial and
    space-time, with and without the spatial index."""
    run_in_simulator(_TWINS_UNDER_SIMULATOR, "checked 18", timeout=300)


# The device path under numba's CUDA simulator: 70 points, so no launch covers more than ~1e3 items.
PTS_SIM, TIMES_SIM = _pattern(70, seed=5)


def _same_as(res, ref, what):
    """gpu-sim result equal to the CPU path's: K to 1e-10, the pair count exactly, and the backends named."""
    assert res.stats["backend"] == "gpu-sim" and ref.stats["backend"] == "cpu", what
    np.testing.assert_allclose(res.k, ref.k, rtol=1e-10, atol=0, err_msg=what)
    assert res.stats["pairs_counted"] == ref.stats["pairs_counted"], what


@pytest.mark.parametrize("n_workers", [1, 2])
def test_gpu_sim_matches_brute_force_and_cpu_path(clients, n_workers):
    cpu, client = clients(n_workers), clients(n_workers, backend="gpu-sim")
    P = wb.distribute(PTS_SIM, client=client)
    for corr in ("none", "translation", "isotropic", "border"):
        res = wb.ripley_k(P, RADII, window=WIN, edge_correction=corr, client=client)
        np.testing.assert_allclose(res.k, _oracle(PTS_SIM, RADII, WIN, corr), rtol=1e-10, atol=1e-14, err_msg=corr)
        _same_as(res, wb.ripley_k(PTS_SIM, RADII, window=WIN, edge_correction=corr, client=cpu), corr)
    if n_workers > 1:
        assert res.stats["halo_points"] > 0
    tr = np.array([0.0, 1.0, 4.0, 9.0])
    for corr in ("none", "translation", "isotropic"):
        kw = {"window": WIN, "edge_correction": corr, "times": TIMES_SIM, "time_radii": tr, "time_window": TWIN}
        res = wb.ripley_k(PTS_SIM, RADII[:5], client=client, **kw)
        np.testing.assert_allclose(res.k, _oracle(PTS_SIM, RADII[:5], WIN, corr, TIMES_SIM, tr, TWIN), rtol=1e-10,
                                   atol=1e-14, err_msg=corr)
        _same_as(res, wb.ripley_k(PTS_SIM, RADII[:5], client=cpu, **kw), corr)


def test_gpu_sim_envelopes_and_ablations_equal_cpu_path(clients):
    cpu, client = clients(2), clients(2, backend="gpu-sim")
    tr = np.array([1.0, 5.0])
    cases = {
        "csr envelopes": {"n_simulations": 3, "seed": 2},
        "space-time envelopes": {"times": TIMES_SIM, "time_radii": tr, "time_window": TWIN, "n_simulations": 3,
                                 "seed": 11},
        "uncached space-time envelopes": {"times": TIMES_SIM, "time_radii": tr, "time_window": TWIN,
                                          "n_simulations": 2, "seed": 11, "cache_weights": False},
        "no partitioning": {"partitioning": False},
        "no spatial index": {"spatial_index": False, "edge_correction": "translation"},
    }
    for what, kw in cases.items():
        res = wb.ripley_k(PTS_SIM, RADII[:5], window=WIN, client=client, **kw)
        ref = wb.ripley_k(PTS_SIM, RADII[:5], window=WIN, client=cpu, **kw)
        _same_as(res, ref, what)
        if "n_simulations" in kw:
            np.testing.assert_allclose(res.lower, ref.lower, rtol=1e-10, atol=0, err_msg=what)
            np.testing.assert_allclose(res.upper, ref.upper, rtol=1e-10, atol=0, err_msg=what)
            assert np.any(res.upper > res.lower), what


def test_values_checked_once_per_container(clients, monkeypatch):
    """wb.distribute(pts) then repeated calls: each block's bounds are computed on its worker on the first call
    only; every later window (and time window) is checked against them, and a point outside a window is still
    rejected with its count."""
    from workbench.kernels.ripley import _block_bounds

    client = clients(2)
    submitted = []
    submit = client.submit
    monkeypatch.setattr(client, "submit", lambda fn, *a, **k: (submitted.append(fn), submit(fn, *a, **k))[1])
    pts, times = _pattern(300, seed=5)
    P, T = wb.distribute(pts, client=client), wb.distribute(times, client=client)
    a = wb.ripley_k(P, RADII, window=WIN, client=client)
    b = wb.ripley_k(P, RADII, window=WIN, client=client)
    np.testing.assert_array_equal(a.k, b.k)
    assert submitted.count(_block_bounds) == 2
    wb.ripley_k(P, RADII, window=(WIN[0] - 1, WIN[1], WIN[2], WIN[3] + 1), client=client)   # wider: still fine
    assert submitted.count(_block_bounds) == 2
    x_cut = float(np.median(pts[:, 0]))
    with pytest.raises(ValueError, match=rf"^{int(np.count_nonzero(pts[:, 0] > x_cut))} points lie outside"):
        wb.ripley_k(P, RADII, window=(WIN[0], x_cut, WIN[2], WIN[3]), client=client)
    tr = np.array([2.0, 6.0])
    for _ in range(2):                                      # with times: their bounds once per (points, times)
        wb.ripley_k(P, RADII, window=WIN, times=T, time_radii=tr, time_window=TWIN, client=client)
    assert submitted.count(_block_bounds) == 4
    with pytest.raises(ValueError, match="time_window"):
        wb.ripley_k(P, RADII, window=WIN, times=T, time_radii=tr, time_window=(TWIN[0], TWIN[0] + 1), client=client)
    Pn = wb.distribute(np.vstack([pts, [[np.nan, 1.0]]]), client=client)
    with pytest.raises(ValueError, match="NaN"):
        wb.ripley_k(Pn, RADII, window=WIN, client=client)
