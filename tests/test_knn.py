"""Distributed kNN graph (SOLANET): exact mode against scipy brute force,
approximate mode's recall, worker-count independence, bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import cdist

import workbench as wb
from workbench.kernels.knn import KNNGraph, gaussian_mixture, recall

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
    assert not (ap.indices == np.arange(len(X))[:, None]).any()
    assert (np.diff(ap.distances, axis=1) >= 0).all()
    assert all(len(set(row)) == 10 for row in ap.indices.tolist())
    true = np.sqrt(((X[:, None, :].astype(np.float64) - X[ap.indices].astype(np.float64)) ** 2).sum(axis=2))
    np.testing.assert_allclose(ap.distances, true, rtol=1e-9)
    assert ap.stats["merge_levels"] == (0 if n_workers == 1 else (n_workers - 1).bit_length())
    for key in ("local_build_s", "merge_tree_s", "refinement_s", "distance_evaluations", "bytes_moved"):
        assert key in ap.stats


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
