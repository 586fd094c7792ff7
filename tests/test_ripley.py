"""Distributed Ripley's K against an independent O(n^2) brute force.

The oracle here shares no code with workbench.kernels.ripley: the isotropic
weight is computed geometrically (the circle's crossings with the four edge
lines, then which arcs lie inside), not from spatstat's closed form.
"""

from __future__ import annotations

import numpy as np
import pytest

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
