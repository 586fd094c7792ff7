"""The device peers of the GPU profile (cuGraph, cuVS / cupy, cupyx, cuSPARSE, cuFFT).

No GPU runs here: the peers must import, their host-side helpers (query
tiles, dropping a point's own id, the brute force itself on numpy, cuSPARSE's
gtsv2 layout and arguments) must be right on numpy against independent
oracles, and without a device every peer must return one row saying what is
missing instead of raising.  The tests marked ``gpu`` run the peers on a device.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg as sl
import scipy.sparse as sp
import yaml
from scipy.spatial import cKDTree

from workbench.backend import gpu_available

PEERS = ("bfs", "knn", "spmm", "tridiag", "fft")
ROOT = Path(__file__).resolve().parent.parent
no_device = pytest.mark.skipif(gpu_available()[0], reason="checks the behaviour without a CUDA device")


@pytest.mark.parametrize("name", PEERS)
def test_peer_modules_import_and_export_what_they_list(name):
    mod = importlib.import_module(f"workbench.peers.{name}")
    for attr in getattr(mod, "__all__", ()):
        assert callable(getattr(mod, attr)), (name, attr)


# ---------------------------------------------------------------------------
# kNN: tiles, self removal, the namespace brute force on numpy
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("n_queries,n_points,budget", [(10, 100, 4 * 1200), (7, 3, 1), (1000, 50, 10**9), (0, 5, 64)])
def test_query_tiles_cover_the_queries_within_the_budget(n_queries, n_points, budget):
    from workbench.peers.knn import query_tiles

    tiles = query_tiles(n_queries, n_points, itemsize=4, budget_bytes=budget)
    covered = [i for s, e in tiles for i in range(s, e)]
    assert covered == list(range(n_queries))
    for s, e in tiles:
        assert e > s
        assert (e - s) == 1 or (e - s) * n_points * 12 <= budget


def test_query_tiles_rejects_no_points():
    from workbench.peers.knn import query_tiles

    with pytest.raises(ValueError, match="n_points"):
        query_tiles(5, 0)


def test_drop_self_matches_a_row_by_row_removal():
    from workbench.peers.knn import drop_self

    rng = np.random.default_rng(3)
    q, k = 200, 6
    rows = np.arange(100, 100 + q)
    idx = np.stack([rng.permutation(np.r_[rows[i], rng.choice(np.r_[0:100, 400:500], k + 1, replace=False)])[:k + 1]
                    for i in range(q)])   # the row's own id at any position, or absent (permuted out)
    dist = rng.random(idx.shape)
    got_i, got_d = drop_self(idx, dist, rows)
    for i in range(q):
        keep = [j for j in range(k + 1) if idx[i, j] != rows[i]][:k]
        assert got_i[i].tolist() == idx[i, keep].tolist()
        assert got_d[i].tolist() == dist[i, keep].tolist()


@pytest.mark.parametrize("budget", [1, 4000, 1 << 20])   # one query per tile, a few per tile, one tile
def test_brute_force_knn_on_numpy_matches_a_kd_tree(budget):
    from workbench.peers.knn import brute_force_knn

    rng = np.random.default_rng(0)
    X = rng.standard_normal((150, 5))
    k = 7
    dist, idx = cKDTree(X).query(X, k + 1)
    ref_i, ref_d = idx[:, 1:], dist[:, 1:]   # continuous points: the nearest is the point itself
    got_i, got_d = brute_force_knn(X, k, budget_bytes=budget)
    assert got_i.dtype == np.int64 and got_i.shape == (150, k)
    np.testing.assert_array_equal(got_i, ref_i)
    np.testing.assert_allclose(got_d, ref_d, rtol=1e-10, atol=1e-12)
    part_i, _ = brute_force_knn(X, k, n_queries=40, budget_bytes=budget)
    np.testing.assert_array_equal(part_i, ref_i[:40])


def test_brute_force_knn_excludes_self_among_duplicates():
    from workbench.peers.knn import brute_force_knn

    X = np.array([[0.0], [0.0], [0.0], [5.0], [9.0]])
    idx, dist = brute_force_knn(X, 2)
    for i in range(3):   # three copies of 0: each gets the other two, never itself
        assert set(idx[i].tolist()) == {0, 1, 2} - {i}
        assert dist[i].tolist() == [0.0, 0.0]
    assert idx[3][0] == 4 and idx[3][1] in (0, 1, 2)   # 9 is nearer to 5 than the three tied zeros


@pytest.mark.parametrize("k", [0, 5, 9])
def test_brute_force_knn_rejects_bad_k(k):
    from workbench.peers.knn import brute_force_knn, device_knn

    X = np.random.default_rng(1).random((5, 2))
    with pytest.raises(ValueError, match="k"):
        brute_force_knn(X, k)
    with pytest.raises(ValueError, match="k"):
        device_knn(X, k)


# ---------------------------------------------------------------------------
# tridiag: LAPACK gtsv layout -> cuSPARSE gtsv2 layout and call
# ---------------------------------------------------------------------------

def _dense_from_gtsv2(dlp, d, dup):
    """The matrix cuSPARSE reads from its layout: row i holds dl[i], d[i], du[i] at columns i-1, i, i+1."""
    n = d.shape[-1]
    A = np.diag(d)
    for i in range(n):
        if i > 0:
            A[i, i - 1] = dlp[i]
        if i < n - 1:
            A[i, i + 1] = dup[i]
    return A


@pytest.mark.parametrize("batch", [None, 4])
def test_gtsv2_layout_reads_as_the_lapack_system(batch):
    from workbench.peers.tridiag import gtsv2_layout

    rng = np.random.default_rng(2)
    n = 9
    lead = () if batch is None else (batch,)
    dl, du = rng.standard_normal(lead + (n - 1,)), rng.standard_normal(lead + (n - 1,))
    d, b = 4 + rng.random(lead + (n,)), rng.standard_normal(lead + (n,))
    dlp, d2, dup = gtsv2_layout(dl, d, du)
    assert dlp.shape == d2.shape == dup.shape == lead + (n,)
    assert (dlp[..., 0] == 0).all() and (dup[..., -1] == 0).all()
    assert all(a.flags.c_contiguous for a in (dlp, d2, dup))
    for j in range(1 if batch is None else batch):
        sel = () if batch is None else (j,)
        lapack = sp.diags([dl[sel], d[sel], du[sel]], [-1, 0, 1]).toarray()
        np.testing.assert_array_equal(_dense_from_gtsv2(dlp[sel], d2[sel], dup[sel]), lapack)
        x = sl.lapack.dgtsv(dl[sel], d[sel], du[sel], b[sel])[3]
        np.testing.assert_allclose(_dense_from_gtsv2(dlp[sel], d2[sel], dup[sel]) @ x, b[sel], atol=1e-12)


@pytest.mark.parametrize("dl_shape,du_shape,bad", [((9,), (8,), "dl"), ((8,), (9,), "du"), ((2, 8), (8,), "dl")])
def test_gtsv2_layout_names_the_wrong_diagonal(dl_shape, du_shape, bad):
    from workbench.peers.tridiag import gtsv2_layout

    with pytest.raises(ValueError, match=bad):
        gtsv2_layout(np.ones(dl_shape), np.ones(9), np.ones(du_shape))


def test_gtsv2_call_picks_the_routine_and_its_integers():
    from workbench.peers.tridiag import gtsv2_call

    one = gtsv2_call((100,), np.float64)
    assert one["function"] == "dgtsv2" and one["buffer_function"] == "dgtsv2_bufferSizeExt"
    assert one["int_args"] == (100, 1, 100)          # m, one right-hand side, ldb = m
    many = gtsv2_call((32, 100), np.complex128)
    assert many["function"] == "zgtsv2StridedBatch"
    assert many["int_args"] == (100, 32, 100)        # m, batchCount, batchStride = m (back to back)
    assert gtsv2_call((4,), np.float32)["function"] == "sgtsv2"
    assert gtsv2_call((4,), np.complex64)["function"] == "cgtsv2"
    with pytest.raises(ValueError, match="n >= 3"):
        gtsv2_call((2,), np.float64)
    with pytest.raises(TypeError, match="dtype"):
        gtsv2_call((5,), np.int64)


def test_gtsv2_routines_exist_in_cupys_cusparse_bindings():
    """The names gtsv2_call hands out are functions of the installed cupy's cuSPARSE module
    (read from the extension's symbol names: loading it needs libcusparse)."""
    from workbench.peers.tridiag import gtsv2_call

    spec = importlib.util.find_spec("cupy_backends.cuda.libs.cusparse")
    if spec is None or spec.origin is None:
        pytest.skip("cupy is not installed")
    binary = Path(spec.origin).read_bytes()
    for shape in ((10,), (3, 10)):
        for dt in (np.float32, np.float64, np.complex64, np.complex128):
            c = gtsv2_call(shape, dt)
            for fn in (c["function"], c["buffer_function"]):
                assert f"{fn}(intptr_t handle".encode() in binary, fn


def test_device_peers_check_their_inputs_before_the_device():
    from workbench.peers.spmm import device_spmm
    from workbench.peers.tridiag import device_gtsv2

    with pytest.raises(ValueError, match="b must"):
        device_gtsv2(np.ones(4), np.full(5, 3.0), np.ones(4), np.ones(4))
    with pytest.raises(ValueError, match="B must"):
        device_spmm(sp.identity(4, format="csr"), np.ones((5, 2)))


# ---------------------------------------------------------------------------
# Without a device: one row each, saying what is missing
# ---------------------------------------------------------------------------

def _unavailable_cases():
    from workbench.peers.fft import device_fftn
    from workbench.peers.knn import device_knn
    from workbench.peers.spmm import device_spmm
    from workbench.peers.tridiag import device_gtsv2

    rng = np.random.default_rng(0)
    return [
        ("knn", lambda: device_knn(rng.random((30, 3)), 4, reference=np.zeros((30, 4), int), n=30)),
        ("spmm", lambda: device_spmm(sp.random(20, 10, 0.2, format="csr", random_state=1), rng.random((10, 3)),
                                     matrix="r")),
        ("tridiag", lambda: device_gtsv2(np.ones(7), np.full(8, 4.0), np.ones(7), np.ones(8), case="single")),
        ("tridiag-batch", lambda: device_gtsv2(np.ones((3, 7)), np.full((3, 8), 4.0), np.ones((3, 7)),
                                               np.ones((3, 8)), case="batch")),
        ("fft", lambda: device_fftn(rng.random((4, 4, 4)), n=4)),
    ]


@no_device
@pytest.mark.parametrize("case", range(5))
def test_without_a_device_each_peer_returns_one_row_saying_why(case):
    name, run = _unavailable_cases()[case]
    rows = run()
    assert len(rows) == 1, name
    row = rows[0]
    assert row["skipped"].startswith("unavailable: "), row
    assert "device" in row["skipped"] or "not installed" in row["skipped"], row
    assert math.isnan(row["median_s"]) and row["repeats"] == 0 and row["role"] == "peer"
    assert "GPU" in row["name"]


@no_device
def test_without_a_device_knn_row_fits_the_recall_table():
    from workbench.peers.knn import device_knn

    row = device_knn(np.random.default_rng(0).random((30, 3)), 4)[0]
    assert row["method"] == row["name"] and row["setting"] == "exact"
    assert math.isnan(row["seconds"]) and math.isnan(row["recall"])


@no_device
def test_without_a_device_cugraph_gets_a_row_and_the_cpu_peers_still_run():
    from workbench.peers.bfs import run_peers

    A = sp.csr_matrix(np.array([[0, 1, 0, 0], [1, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 0]]))
    rows = run_peers(A, [0, 2], ["scipy", "cugraph"])
    scipy_rows = [r for r in rows if r["name"] == "scipy"]
    assert [r["root"] for r in scipy_rows] == [0, 2] and all(r["edges"] == 2 for r in scipy_rows)
    (cg,) = [r for r in rows if r["name"] == "cugraph"]
    assert cg["skipped"].startswith("unavailable: ") and math.isnan(cg["teps"])
    assert all("skipped" not in r for r in scipy_rows)   # CPU rows keep their columns


def test_missing_names_the_absent_library():
    from workbench.peers._device import missing, unavailable_row

    why = missing("no_such_library_xyz")
    assert why.startswith("not installed") and "no_such_library_xyz" in why
    row = unavailable_row("peer", why, k=3)
    assert row["skipped"] == f"unavailable: {why}" and row["k"] == 3 and math.isnan(row["speedup"])


# ---------------------------------------------------------------------------
# Profiles: every experiment has a device-sized gpu profile
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("path", sorted((ROOT / "experiments").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_experiment_has_a_gpu_profile_of_notebook_parameters(path):
    cfg = yaml.safe_load(path.read_text())
    gpu = cfg["profiles"].get("gpu")
    assert gpu is not None, f"{path.name} has no gpu profile"
    assert gpu["backend"] == "gpu"
    nb = json.loads((ROOT / cfg["notebook"]).read_text())
    cell = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    names = {t.id for node in ast.parse("".join(cell["source"])).body if isinstance(node, ast.Assign)
             for t in node.targets if isinstance(t, ast.Name)}
    unknown = set(gpu) - names - {"max_minutes", "max_memory_gb"}
    assert not unknown, f"{path.name}: gpu profile sets {sorted(unknown)}, which the notebook does not read"


# ---------------------------------------------------------------------------
# On a device
# ---------------------------------------------------------------------------

@pytest.mark.gpu
def test_device_peers_run_and_agree_with_the_host():
    from workbench.peers.bfs import run_peers
    from workbench.peers.fft import device_fftn
    from workbench.peers.knn import brute_force_knn, device_knn
    from workbench.peers.spmm import device_spmm
    from workbench.peers.tridiag import device_gtsv2

    rng = np.random.default_rng(0)
    X = rng.standard_normal((2000, 16))
    ref = brute_force_knn(X, 10)[0]
    for method in ("cupy",) + (("cuvs",) if importlib.util.find_spec("cuvs") else ()):
        row = device_knn(X, 10, reference=ref, method=method, max_queries=500)[0]
        assert row["skipped"] is None and row["median_s"] > 0 and row["recall"] > 0.99, row
    A = sp.random(300, 200, 0.05, format="csr", random_state=2)
    row = device_spmm(A, rng.standard_normal((200, 8)), repeat=1)[0]
    assert row["skipped"] is None and row["max_rel_err"] < 1e-12, row
    n = 500
    for lead in ((), (16,)):
        d = 4 + rng.random(lead + (n,))
        row = device_gtsv2(rng.random(lead + (n - 1,)), d, rng.random(lead + (n - 1,)),
                           rng.standard_normal(lead + (n,)), repeat=1)[0]
        assert row["skipped"] is None and row["max_rel_err"] < 1e-12, row
    row = device_fftn(rng.standard_normal((32, 32, 32)) + 0j, repeat=1)[0]
    assert row["skipped"] is None and row["max_rel_err"] < 1e-12, row
    if importlib.util.find_spec("cugraph"):
        import workbench as wb
        rows = run_peers(wb.data.rmat(10, 16, 0), [1], ["cugraph"])
        assert rows[0]["teps"] > 0 and "skipped" not in rows[0], rows
