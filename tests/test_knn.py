"""Distributed kNN graph (SOLANET): exact mode against scipy brute force,
approximate mode's recall, worker-count independence, bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
from _sim import run_check_in_simulator
from scipy.spatial.distance import cdist

import workbench as wb
from workbench.kernels.knn import KNNGraph, brute_force_knn, gaussian_mixture, recall, validate_knn

K = 6
_results: dict = {}


def _points() -> np.ndarray:
    X = gaussian_mixture(420, 8, 6, seed=3)
    rng = np.random.default_rng(5)
    X[10:14] = X[3]                                           # exact duplicates: ties at distance 0
    X[20:25] = X[7] + rng.normal(scale=1e-6, size=(5, 8)).astype(np.float32)   # near duplicates
    return X


def _oracle(X: np.ndarray, k: int, metric: str = "euclidean") -> np.ndarray:
    D = cdist(X.astype(np.float64), X.astype(np.float64), metric=metric)
    np.fill_diagonal(D, np.inf)
    return np.sort(D, axis=1)[:, :k]


def _check_exact(g: KNNGraph, X: np.ndarray, k: int, metric: str = "euclidean") -> None:
    ref = _oracle(X, k, metric)
    assert g.indices.shape == (len(X), k) and g.indices.dtype == np.int64
    np.testing.assert_allclose(g.distances, ref, rtol=1e-9, atol=1e-12 if metric == "cosine" else 0)
    assert not (g.indices == np.arange(len(X))[:, None]).any(), "self must be excluded"
    # indices up to ties: each returned neighbour really is at the returned distance
    X64 = X.astype(np.float64)
    if metric == "cosine":
        X64 = X64 / np.linalg.norm(X64, axis=1, keepdims=True)
        true = ((X64[:, None, :] - X64[g.indices]) ** 2).sum(axis=2) / 2
    else:
        true = np.sqrt(((X64[:, None, :] - X64[g.indices]) ** 2).sum(axis=2))
    np.testing.assert_allclose(true, g.distances, rtol=1e-9, atol=1e-12)
    assert all(len(set(row)) == k for row in g.indices.tolist())


@pytest.mark.parametrize("n_workers", [1, 2, 3])
def test_exact_equals_brute_force(clients, n_workers):
    client = clients(n_workers)
    X = _points()
    g = wb.knn_graph(X, K, exact=True, client=client, tile_rows=64, tile_cols=96)
    _check_exact(g, X, K)
    assert len(g.stats["rank_work"]) == n_workers and all(w > 0 for w in g.stats["rank_work"])
    assert g.stats["backend"] == "cpu"
    assert g.stats["bytes_moved"] > 0 if n_workers > 1 else g.stats["bytes_moved"] == 0
    _results[n_workers] = g


def test_exact_identical_across_worker_counts():
    if len(_results) < 3:
        pytest.skip("needs the parametrised exact runs")
    for n in (2, 3):
        np.testing.assert_array_equal(_results[n].indices, _results[1].indices)
        np.testing.assert_array_equal(_results[n].distances, _results[1].distances)


def test_exact_certificate_fallback_on_many_duplicates(clients):
    client = clients(2)
    X = gaussian_mixture(200, 5, 3, seed=1, dtype=np.float64)
    X[50:80] = X[0]              # 31 identical points, more than k + margin candidates at distance 0
    g = wb.knn_graph(X, 4, exact=True, client=client, margin=2)
    assert g.stats["uncertified_float32"] > 0
    _check_exact(g, X, 4)
    assert (g.distances[[0, *range(50, 80)]] == 0).all()


def test_exact_array_namespace_engine_and_cosine(clients):
    client = clients(2)
    X = _points()[:200]
    a = wb.knn_graph(X, K, exact=True, client=client, engine="xp", tile_cols=50)
    b = wb.knn_graph(X, K, exact=True, client=client)
    _check_exact(a, X, K)
    np.testing.assert_array_equal(a.indices, b.indices)
    c = wb.knn_graph(X + 1.0, K, exact=True, metric="cosine", client=client)
    _check_exact(c, X + 1.0, K, metric="cosine")


def test_exact_real_dataset_digits(clients):
    from sklearn.datasets import load_digits

    X = load_digits().data[:900]         # integer pixels: many exactly tied distances
    g = wb.knn_graph(X, 5, exact=True, client=clients(3))
    _check_exact(g, X, 5)


@pytest.mark.parametrize("n_workers", [1, 2, 3])
def test_approximate_recall(clients, n_workers):
    client = clients(n_workers)
    X = gaussian_mixture(1500, 16, 12, seed=7)
    ex = wb.knn_graph(X, 10, exact=True, client=client)
    ap = wb.knn_graph(X, 10, client=client, reference=ex, n_cells=12, n_probe=2)
    assert ap.stats["recall"] >= 0.9
    assert ap.stats["recall"] == recall(ap.indices, ex.indices)
    assert ap.stats["backend"] == ex.stats["backend"] == "cpu"
    assert not (ap.indices == np.arange(len(X))[:, None]).any()
    assert (np.diff(ap.distances, axis=1) >= 0).all()
    assert all(len(set(row)) == 10 for row in ap.indices.tolist())
    true = np.sqrt(((X[:, None, :].astype(np.float64) - X[ap.indices].astype(np.float64)) ** 2).sum(axis=2))
    np.testing.assert_allclose(ap.distances, true, rtol=1e-9)
    assert ap.stats["merge_levels"] == (0 if n_workers == 1 else (n_workers - 1).bit_length())
    for key in ("local_build_s", "merge_tree_s", "refinement_s", "distance_evaluations", "bytes_moved"):
        assert key in ap.stats
    _check_capped(ap, ex)


def _check_capped(ap, ex):
    """Only the points ``stats["capped"]`` counts may have inexact lists (sorted distances above the exact)."""
    wrong = int((ap.distances > ex.distances * (1 + 1e-9) + 1e-12).any(axis=1).sum())
    assert 0 <= wrong <= ap.stats["capped"] <= len(ap.indices), (wrong, ap.stats["capped"])
    return wrong


@pytest.mark.parametrize("n_workers", [2, 3])
def test_approximate_recall_uniform_and_clustered_defaults(clients, n_workers):
    # default parameters, odd sizes: uniform data (no clusters for the cells to
    # follow, the probe cap and the joins matter) and tight overlapping clusters
    client = clients(n_workers)
    for X in (np.random.default_rng(4).random((3001, 12), dtype=np.float32),
              gaussian_mixture(2503, 24, 40, seed=9, spread=3.0)):
        ex = wb.knn_graph(X, 10, exact=True, client=client)
        ap = wb.knn_graph(X, 10, client=client, reference=ex)
        assert ap.stats["recall"] >= 0.9, ap.stats["recall"]
        assert not (ap.indices == np.arange(len(X))[:, None]).any()
        assert (np.diff(ap.distances, axis=1) >= 0).all()
        _check_capped(ap, ex)
        # a probe cap of one cell leaves most uniform points uncertified, and some of them wrong
        if X.shape[1] == 12:
            one = wb.knn_graph(X, 10, client=client, reference=ex, n_probe=1, local_join=0)
            assert _check_capped(one, ex) > 0 and one.stats["capped"] > len(X) // 2


def test_merge_tree_gain_over_local_graphs(clients):
    # with 3 groups left (no merging) the refinement alone must also reach the other ranks
    client = clients(3)
    X = gaussian_mixture(1200, 16, 10, seed=2)
    ex = wb.knn_graph(X, 8, exact=True, client=client)
    ap = wb.knn_graph(X, 8, client=client, reference=ex, groups=4, n_cells=10, n_probe=2)
    assert ap.stats["merge_levels"] == 0 and ap.stats["refinement_s"] > 0
    assert ap.stats["recall"] >= 0.9


def test_distributed_inputs(clients):
    import dask.array as da

    client = clients(2)
    X = _points()
    ref = wb.knn_graph(X, K, exact=True, client=client)
    g1 = wb.knn_graph(wb.distribute(X, client=client), K, exact=True, client=client)
    g2 = wb.knn_graph(da.from_array(X, chunks=(100, 8)), K, exact=True, client=client)
    np.testing.assert_array_equal(g1.indices, ref.indices)
    np.testing.assert_array_equal(g2.indices, ref.indices)
    # what numpy takes, as numpy takes it: a list, a pandas frame (both refused as "not array-like")
    import pandas as pd

    for like in (X.tolist(), pd.DataFrame(X)):
        np.testing.assert_array_equal(wb.knn_graph(like, K, exact=True, client=client).indices, ref.indices)
    with pytest.raises(ValueError, match="X is a ragged list"):
        wb.knn_graph([[0.0, 1.0], [2.0]], 1, client=client)
    dd = pytest.importorskip("dask.dataframe")
    with pytest.raises(TypeError, match="to_dask_array"):       # was "int() argument must be ... not 'Scalar'"
        wb.knn_graph(dd.from_pandas(pd.DataFrame(X), npartitions=2), K, client=client)


@pytest.mark.parametrize("scale, dtype", [(1e200, np.float64), (1e-200, np.float64), (2.0 ** 70, np.float32),
                                          (2.0 ** -70, np.float32)])
@pytest.mark.parametrize("exact", [True, False])
def test_huge_and_tiny_coordinates_give_the_same_neighbours(clients, scale, dtype, exact):
    # squared distances of such points overflow (or vanish) in float32 and float64: the points are scaled by a
    # power of two first, which changes no neighbour, and the distances scaled back
    client = clients(2)
    X = np.random.default_rng(0).standard_normal((300, 5)).astype(dtype)
    Xs = (X * scale).astype(dtype)
    for metric in ("euclidean", "cosine"):
        ref = wb.knn_graph(X, K, exact=exact, metric=metric, client=client)
        g = wb.knn_graph(wb.distribute(Xs, client=client) if exact else Xs, K, exact=exact, metric=metric,
                         client=client)
        np.testing.assert_array_equal(g.indices, ref.indices)
        unit = scale if metric == "euclidean" else 1.0
        np.testing.assert_allclose(g.distances / unit, ref.distances, rtol=1e-6 if dtype == np.float32 else 1e-12)
        assert validate_knn(Xs, g)["valid"]


@pytest.mark.parametrize("n_workers, backend, n", [(1, "cpu", 1500), (3, "cpu", 1500), (2, "gpu-sim", 120)])
def test_tight_clusters_far_from_the_mean(clients, n_workers, backend, n):
    # unit-spread clusters 1e4 apart (points in metres over a region, say): float32 products about the global
    # mean carry errors of ~|x|^2 * 2**-24 ~ 10, beyond the neighbours' distances.  Cells, probe bounds and
    # candidate keys are computed about the cells' centroids: the approximate lists found 8-13% of the true
    # neighbours before
    client = clients(n_workers, backend=backend)
    rng = np.random.default_rng(8)
    centres = rng.uniform(-1e4, 1e4, (6, 8))
    X = centres[rng.integers(0, 6, n)] + rng.standard_normal((n, 8))
    ex = wb.knn_graph(X, K, exact=True, client=client)
    assert validate_knn(X, ex)["valid"]
    ap = wb.knn_graph(X, K, client=client, reference=ex)
    assert ap.stats["backend"] == backend and ap.stats["recall"] >= 0.95, ap.stats["recall"]
    # fewer cells than clusters: a cell spans clusters 1e4 apart, too wide for float32 keys about its
    # centroid (recall 0.08-0.13 before); those cell blocks are taken in float64
    for n_cells in (1, 4):
        ap = wb.knn_graph(X, K, client=client, reference=ex, n_cells=n_cells)
        assert ap.stats["recall"] >= 0.99 and ap.stats["float64_spans"] > 0, (n_cells, ap.stats["recall"])


@pytest.mark.parametrize("n_workers, backend", [(1, "cpu"), (3, "cpu"), (2, "gpu-sim")])
def test_approximate_lists_are_never_short(clients, n_workers, backend):
    # 30 cells for 37 points, one probed: cells hold fewer than k + 1 points, and the lists came back padded
    # with -1 and inf; those points get their exact lists (on device workers from the device scan)
    client = clients(n_workers, backend=backend)
    X = np.random.default_rng(5).standard_normal((37, 3))
    g = wb.knn_graph(X, 5, n_cells=30, n_probe=1, client=client)
    assert g.stats["backend"] == backend
    assert (g.indices >= 0).all() and np.isfinite(g.distances).all()
    assert g.stats["exact_fill"] > 0
    assert validate_knn(X, g)["valid"]


def test_recall_helper():
    assert recall(np.array([[1, 2], [0, 3]]), np.array([[2, 1], [0, 2]])) == 0.75
    assert recall(np.array([[-1, 2]]), np.array([[-1, 2]])) == 1.0 / 2
    with pytest.raises(ValueError, match="same n"):
        recall(np.zeros((3, 2)), np.zeros((2, 2)))


@pytest.mark.parametrize("bad, kwargs, match", [
    (np.zeros((10, 2)), {"k": 10}, "k must satisfy"),
    (np.zeros((10, 2)), {"k": 0}, "k must satisfy"),
    (np.zeros(10), {"k": 2}, "2-D"),
    (np.zeros((4, 3, 2)), {"k": 2}, "2-D"),
    (np.array([[0.0, 1.0], [np.nan, 0.0], [2.0, 2.0]]), {"k": 1}, "NaN or infinite"),
    (np.array([[0.0, 1.0], [np.inf, 0.0], [2.0, 2.0]]), {"k": 1}, "row 1"),
    (np.ones((5, 2)), {"k": 2, "metric": "manhattan"}, "metric"),
    (np.array([[0.0, 0.0], [1.0, 2.0], [2.0, 2.0]]), {"k": 1, "metric": "cosine"}, "non-zero rows"),
    (np.ones((5, 2)), {"k": 2, "groups": 3}, "power of two"),
    (np.ones((5, 2)), {"k": 2, "local_join": -1}, "local_join"),
    (np.ones((5, 2)), {"k": 2, "n_probe": 0}, "n_probe"),
    (np.ones((5, 2)), {"k": 2, "kmeans_sample": 0}, "kmeans_sample"),
    (np.ones((5, 2)), {"k": 2, "kmeans_sample": 2.5}, "kmeans_sample"),
])
def test_bad_input(bad, kwargs, match):
    with pytest.raises(ValueError, match=match):
        wb.knn_graph(bad, client=object(), **kwargs)


def test_bad_input_types(clients):
    import dask.array as da

    with pytest.raises(TypeError, match="unknown parameter"):
        wb.knn_graph(np.ones((5, 2)), 2, client=object(), tile_rows=3)
    with pytest.raises(TypeError, match="prune must be a bool"):
        wb.knn_graph(np.ones((5, 2)), 2, exact=True, client=object(), prune=1)
    with pytest.raises(TypeError, match="k must be an int"):
        wb.knn_graph(np.ones((5, 2)), 2.0, client=object())
    X = np.ones((40, 3))
    X[33, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        wb.knn_graph(da.from_array(X, chunks=10), 3, client=clients(2))


@pytest.mark.parametrize("n_workers", [2, 3])
def test_exact_pruning_matches_full_scan(clients, n_workers):
    # well-separated clusters, an odd size and ragged blocks: pruning must skip
    # block pairs yet give exactly the unpruned answer (and the brute force)
    client = clients(n_workers)
    X = gaussian_mixture(1001, 12, 9, seed=11, spread=30.0)
    X[500:503] = X[17]                                     # duplicates across ranks
    a = wb.knn_graph(X, 7, exact=True, client=client, tile_rows=48)
    b = wb.knn_graph(X, 7, exact=True, client=client, prune=False)
    assert a.stats["pruned_pairs"] > 0
    assert a.stats["distance_evaluations"] < b.stats["distance_evaluations"]
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.distances, b.distances)
    _check_exact(a, X, 7)


def _scan_rows_reference(G, qn, yn, rows, qpos, y0, keys, ids):
    # every column in order, as the device twin scans: a key below the row's worst enters, ties by id
    k = keys.shape[1]
    for i, r in enumerate(rows):
        for j in range(G.shape[1]):
            key = np.float64(np.float32(qn[r] + yn[j])) - 2.0 * np.float64(G[i, j])
            if key < keys[r, k - 1] and y0 + j != qpos[r]:
                p = k - 1
                while p > 0 and (keys[r, p - 1] > key or (keys[r, p - 1] == key and ids[r, p - 1] > y0 + j)):
                    keys[r, p], ids[r, p] = keys[r, p - 1], ids[r, p - 1]
                    p -= 1
                keys[r, p], ids[r, p] = key, y0 + j


@pytest.mark.parametrize("nc, k", [(64, 10), (65, 1), (150, 10), (200, 63), (200, 64), (300, 5)])
def test_row_scan_keeps_the_lists_of_a_full_scan(nc, k):
    # the CPU scan skips keys that its lane bound rules out (rows whose list is empty) and visits only the
    # set bits of each chunk's mask: the lists must come out as a scan of every column in order leaves them,
    # with duplicate points (ties), self pairs and rows that start with a threshold
    from workbench.kernels.knn import cpu

    rng = np.random.default_rng([nc, k])
    X = rng.standard_normal((nc + 20, 6)).astype(np.float32)
    X[7:12] = X[3]
    X[40:48:2] = X[41]
    xn = (X * X).sum(axis=1)
    rows = np.sort(rng.choice(nc + 20, 37, replace=False)).astype(np.int64)
    rows[:3] = [3, 7, 41]
    G = X[rows] @ X[20:].T
    qpos = np.arange(nc + 20, dtype=np.int64)
    keys = np.full((nc + 20, k), np.inf, np.float32)
    keys[rows[::5]] = np.float32(8.0)
    ka, ia = keys.copy(), np.full(keys.shape, -1, np.int64)
    kb, ib = ka.copy(), ia.copy()
    cpu._scan_rows(G, xn, xn[20:], rows, qpos, 20, ka, ia)
    _scan_rows_reference(G, xn, xn[20:], rows, qpos, 20, kb, ib)
    np.testing.assert_array_equal(ia, ib)
    np.testing.assert_array_equal(ka, kb)
    assert (ia[rows, 0] >= 0).all() and not (ia == qpos[:, None]).any()


def _top_bounds_reference(D, inv, probes, bounds):
    # the own cell (first minimum), then every other cell in order into a list kept by (bound, cell)
    for i in range(D.shape[0]):
        a = int(np.argmin(D[i]))
        cells = sorted((np.float32((D[i, c] - D[i, a]) * inv[a, c]), c) for c in range(D.shape[1]) if c != a)
        top = [(np.float32(0.0), a)] + cells[:probes.shape[1] - 1]
        bounds[i], probes[i] = [t[0] for t in top], [t[1] for t in top]


@pytest.mark.parametrize("C, p", [(158, 16), (9, 4), (32, 16), (40, 33), (70, 34), (100, 1), (64, 64), (300, 8)])
def test_probe_bounds_keep_the_nearest_bisectors(C, p):
    # the CPU kernel keeps only the cells at or below a bound from lane minima and places them by counting
    # (by insertion when many tie there): the lists must be those of sorting every cell by (bound, cell),
    # with tied scores, tied bounds and duplicate centroids (a zero inverse distance: bound 0)
    from workbench.kernels.knn import cpu

    rng = np.random.default_rng([C, p])
    D = rng.standard_normal((300, C)).astype(np.float32)
    D[::3] = np.round(D[::3], 1)
    D[::7, C // 2] = D[::7].min(axis=1)                      # two columns hold the minimum
    inv = rng.random((C, C)).astype(np.float32)
    inv = (inv + inv.T) / 2
    np.fill_diagonal(inv, 0)
    inv[:, 1::5] = 0                                         # duplicate centroids: many bounds of 0
    inv[1::5, :] = 0
    pa, ba = np.zeros((300, p), np.int64), np.zeros((300, p), np.float32)
    pb, bb = pa.copy(), ba.copy()
    cpu._top_bounds(D, inv, pa, ba)
    _top_bounds_reference(D, inv, pb, bb)
    np.testing.assert_array_equal(pa, pb)
    np.testing.assert_array_equal(ba, bb)


# --------------------------------------------------------------------------
# Device path: the numba.cuda twins under numba's CUDA simulator
# --------------------------------------------------------------------------


def _in_simulator(check: str, timeout: int = 600) -> None:
    run_check_in_simulator(__file__, check, timeout)


def _check_twins_in_simulator() -> None:
    from numba import config

    assert config.ENABLE_CUDASIM, "not in the simulator"
    from workbench.backend import launch
    from workbench.kernels.knn import cpu
    from workbench.kernels.knn import cuda as dev
    from workbench.kernels.knn.ranks import _new_lists

    rng = np.random.default_rng(3)
    same = np.testing.assert_array_equal
    for gdt, xdt in ((np.float32, np.float32), (np.float32, np.float64), (np.float64, np.float64)):
        # exact mode: a tile of 21 query rows x 17 columns whose ids overlap (self pairs), lists of 4
        Q = rng.standard_normal((21, 3)).astype(xdt)
        Y = np.concatenate([Q[5:12], rng.standard_normal((10, 3)).astype(xdt)])
        qg, yg = np.arange(100, 121, dtype=np.int64), np.arange(105, 122, dtype=np.int64)
        Qc, Yc = Q.astype(gdt), Y.astype(gdt)
        qn, yn = (Qc * Qc).sum(axis=1), (Yc * Yc).sum(axis=1)
        G = Qc @ Yc.T
        for do_cols in (False, True):
            a = _new_lists(np, 21, 4) + _new_lists(np, 17, 4)
            a[0][:3] = 0.5                                   # some rows start with a threshold
            b = tuple(x.copy() for x in a)
            cpu._scan_kernel(G, qn, yn, qg, yg, Q, Y, *a, do_cols)
            launch(dev._scan_kernel, 21 + 17 * do_cols, G, qn, yn, qg, yg, Q, Y, *b, do_cols)
            for x, y in zip(a, b, strict=True):
                same(x, y)
            assert np.isnan(b[2]).any() and (b[1][3:, 0] >= 0).all()
            assert do_cols == bool((b[4] >= 0).any())
            assert not (b[1] == qg[:, None]).any()               # self excluded
            cpu._fill_exact_kernel(a[1], a[2], Q, Y, 105)
            launch(dev._fill_exact_kernel, a[1].size, b[1], b[2], Q, Y, 105)
            same(np.isnan(a[2]), np.isnan(b[2]))
            np.testing.assert_allclose(a[2], b[2], rtol=1e-12)
            assert np.isfinite(b[2][b[1] >= 105]).all()
    # approximate mode: probe bounds, per-cell row scans, pair distances, candidate merges
    D = rng.standard_normal((40, 9)).astype(np.float32)
    inv = rng.random((9, 9)).astype(np.float32)
    for p in (1, 4):
        pa, ba = np.zeros((40, p), np.int64), np.zeros((40, p), np.float32)
        pb, bb = pa.copy(), ba.copy()
        cpu._top_bounds(D, inv, pa, ba)
        launch(dev._top_bounds, 40, D, inv, pb, bb)
        same(pa, pb)
        same(ba, bb)
    X = rng.standard_normal((30, 5)).astype(np.float32)
    xn = (X * X).sum(axis=1)
    rows = np.sort(rng.choice(30, 12, replace=False)).astype(np.int64)
    G = X[rows] @ X[10:26].T
    qpos = np.arange(30, dtype=np.int64)                      # Y holds our own points: self pairs skipped
    keys = np.full((30, 3), np.inf, np.float32)
    keys[rows[:4]] = 2.0
    ka, ia = keys.copy(), np.full((30, 3), -1, np.int64)
    kb, ib = ka.copy(), ia.copy()
    cpu._scan_rows(G, xn, xn[10:26], rows, qpos, 10, ka, ia)
    launch(dev._scan_rows, 12, G, xn, xn[10:26], rows, qpos, 10, kb, ib)
    same(ka, kb)
    same(ia, ib)
    assert (ib[rows] >= 0).any() and not (ib == np.arange(30)[:, None]).any()
    qi, yi = rng.integers(0, 30, 50), rng.integers(0, 30, 50)
    da, db = np.empty(50), np.empty(50)
    cpu._pair_sqdist(X, X, qi, yi, da)
    launch(dev._pair_sqdist, 50, X, X, qi, yi, db)
    np.testing.assert_allclose(da, db, rtol=1e-12)
    ind = np.sort(rng.integers(0, 100, (8, 4)), axis=1)
    d2 = np.sort(rng.random((8, 4)), axis=1)
    ind[6:, 2:], d2[6:, 2:] = -1, np.inf                      # short lists
    r = np.sort(rng.integers(0, 8, 60)).astype(np.int64)     # grouped rows
    cand = rng.integers(0, 100, 60).astype(np.int64)
    cand[:5] = ind[r[:5], 0]                                  # ids already there
    dist = rng.random(60)
    a, b = (ind.copy(), d2.copy()), (ind.copy(), d2.copy())
    cpu._merge_candidates(*a, r, cand, dist)
    launch(dev._merge_candidates, 60, *b, r, cand, dist)
    same(a[0], b[0])
    same(a[1], b[1])
    assert (a[0] != ind).any()
    _check_join_twin(rng)
    print("simulator checks passed")


def _check_join_twin(rng) -> None:
    """The NN-descent join's device formulation: every row of ``order`` ends with the k
    nearest (by distance, then id) of its list and its neighbours' neighbours as the
    lists were before the join; a single row gets what the CPU twin gives it."""
    from workbench.kernels.knn import cpu
    from workbench.kernels.knn.ranks import _local_join_device

    n, k, off = 30, 4, 100
    X = rng.standard_normal((n, 3)).astype(np.float32)
    Xc = (X - X.mean(axis=0)).astype(np.float32)
    X64 = X.astype(np.float64)
    D = ((X64[:, None, :] - X64[None, :, :]) ** 2).sum(axis=2)
    near = np.argsort(D, axis=1, kind="stable")[:, 3:3 + k]         # lists missing each row's 2 nearest
    ind0 = (near + off).astype(np.int64)
    d20 = np.take_along_axis(D, near, axis=1)
    ind0[:3, k - 1] = 5                                             # a neighbour on another rank: not expanded
    ind0[3:5, 2:], d20[3:5, 2:] = -1, np.inf                        # short lists
    order = rng.permutation(n)[:20].astype(np.int64)

    def reference(rows):
        ind, d2 = ind0.copy(), d20.copy()
        for i in rows:
            cands = {int(g) for g in ind0[i]}
            for j in ind0[i]:
                if off <= j < off + n:
                    cands |= {int(g) for g in ind0[j - off] if off <= g < off + n and g != i + off}
            cands.discard(-1)
            dist = {g: (d20[i][list(ind0[i]).index(g)] if g in ind0[i] else D[i, g - off]) for g in cands}
            best = sorted(dist.items(), key=lambda e: (e[1], e[0]))[:k]
            ind[i, :len(best)], d2[i, :len(best)] = [g for g, _ in best], [v for _, v in best]
        return ind, d2

    ind, d2 = ind0.copy(), d20.copy()
    evals = _local_join_device(X, Xc, ind, d2, off, order)
    ri, rd = reference(order)
    np.testing.assert_array_equal(ind, ri)
    np.testing.assert_allclose(d2, rd, rtol=1e-12)
    assert evals > 0 and (d2[order, k - 1] < d20[order, k - 1]).any()
    untouched = np.setdiff1d(np.arange(n), order)
    np.testing.assert_array_equal(ind[untouched], ind0[untouched])
    for i in (int(order[0]), 3):                                    # one row: the CPU twin's answer
        a, b = (ind0.copy(), d20.copy()), (ind0.copy(), d20.copy())
        cpu._local_join(X, Xc, *a, off, np.array([i], np.int64))
        _local_join_device(X, Xc, *b, off, np.array([i], np.int64))
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])


def test_device_twins_match_cpu_twins_in_simulator():
    _in_simulator("_check_twins_in_simulator")


@pytest.mark.parametrize("n_workers", [1, 2])
def test_knn_on_simulated_device_workers(clients, n_workers):
    # exact mode with and without pruning: the oracle's distances and the CPU path's answer
    X = gaussian_mixture(90, 4, 4, seed=5)
    X[40:43] = X[2]                                             # ties at distance 0
    client = clients(n_workers, backend="gpu-sim")
    for kw in (dict(tile_rows=24, tile_cols=40), dict(tile_rows=24, tile_cols=40, prune=False)):
        ref = wb.knn_graph(X, 4, exact=True, client=clients(1), **kw)
        g = wb.knn_graph(X, 4, exact=True, client=client, **kw)
        assert g.stats["backend"] == "gpu-sim" and ref.stats["backend"] == "cpu"
        _check_exact(g, X, 4)
        np.testing.assert_array_equal(g.indices, ref.indices)
        np.testing.assert_allclose(g.distances, ref.distances, rtol=1e-10)
    ap = wb.knn_graph(X, 4, client=client, n_cells=4, n_probe=2, reference=ref)
    assert ap.stats["backend"] == "gpu-sim" and ap.stats["recall"] >= 0.9


@pytest.mark.parametrize("n_workers", [1, 2])
def test_approximate_on_simulated_device_workers(clients, n_workers):
    # the approximate mode's device path.  Without the joins every step is deterministic and each device
    # twin keeps its CPU twin's order, so the graph is the CPU path's (distances to an ulp: the CPU sums
    # reorder); the joins are a parallel formulation of their own and must reach the CPU path's recall
    sim, cpu = clients(n_workers, backend="gpu-sim"), clients(n_workers)
    cases = [(gaussian_mixture(150, 4, 5, seed=7), "euclidean", False),
             (np.random.default_rng(4).random((160, 3), dtype=np.float32), "euclidean", True),   # uniform: joins run
             (gaussian_mixture(120, 5, 4, seed=3, dtype=np.float64) + 20.0, "cosine", False)]
    for X, metric, joins in cases:
        exact, _ = brute_force_knn(X, 5, metric)
        kw = dict(n_cells=6, n_probe=2, metric=metric, reference=exact)
        a = wb.knn_graph(X, 5, client=sim, local_join=0, **kw)
        b = wb.knn_graph(X, 5, client=cpu, local_join=0, **kw)
        assert a.stats["backend"] == "gpu-sim" and b.stats["backend"] == "cpu"
        np.testing.assert_array_equal(a.indices, b.indices)
        np.testing.assert_allclose(a.distances, b.distances, rtol=1e-10, atol=1e-15)
        assert a.stats["distance_evaluations"] == b.stats["distance_evaluations"]
        g = wb.knn_graph(X, 5, client=sim, **kw)
        c = wb.knn_graph(X, 5, client=cpu, **kw)
        assert g.stats["backend"] == "gpu-sim"
        assert g.stats["recall"] >= 0.9 and c.stats["recall"] >= 0.9, (g.stats["recall"], c.stats["recall"])
        assert g.stats["recall"] >= c.stats["recall"] - 0.02
        res = validate_knn(X, g, sample=len(X), exact=False)
        assert res["valid"], res
        if n_workers == 1:      # no merge tree: the joins only ever improve a list
            assert (g.distances <= a.distances).all()
        if joins:
            assert n_workers > 1 or (g.distances < a.distances).any()
            assert g.stats["distance_evaluations"] > a.stats["distance_evaluations"]


def test_finiteness_checked_once_per_container(clients, monkeypatch):
    """wb.distribute(X) then repeated calls: the NaN/inf check runs on the workers on the first call only;
    a container holding a NaN is rejected on every call, and checked once."""
    from workbench.kernels.knn import _finite_block

    client = clients(2)
    submitted = []
    submit = client.submit
    monkeypatch.setattr(client, "submit", lambda fn, *a, **k: (submitted.append(fn), submit(fn, *a, **k))[1])
    X = _points()
    Xd = wb.distribute(X, client=client)
    g1 = wb.knn_graph(Xd, K, exact=True, client=client)
    g2 = wb.knn_graph(Xd, K, exact=True, client=client)
    wb.knn_graph(Xd, K, client=client)
    assert submitted.count(_finite_block) == 2                 # one tiny task per block, first call only
    np.testing.assert_array_equal(g1.indices, g2.indices)
    Xb = X.copy()
    Xb[7, 3] = np.nan
    Bd = wb.distribute(Xb, client=client)
    for _ in range(2):
        with pytest.raises(ValueError, match="NaN"):
            wb.knn_graph(Bd, K, client=client)
    assert submitted.count(_finite_block) == 4
