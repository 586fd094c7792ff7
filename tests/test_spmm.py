"""Distributed SpMM / SpGEMM against scipy, on 1-4 workers and 1-D / 2-D layouts."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
import scipy.sparse as sp
from _sim import run_in_simulator
from distributed import get_task_stream, wait

import workbench as wb
from workbench.kernels.spmm import ALGORITHMS, _split_tiles_nb, _split_tiles_xp, validate_spmm
from workbench.partition import grid_shape


def _matrix(m: int = 41, n: int = 29, density: float = 0.15, seed: int = 1, dtype=np.float64,
            integer: bool = False) -> sp.csr_matrix:
    """Rectangular, with empty rows and columns (and an empty leading row block)."""
    A = sp.random(m, n, density, format="lil", random_state=seed, dtype=np.float64)
    A[:4, :] = 0       # rows owned by rank 0 partly empty
    A[17, :] = 0
    A[:, 3] = 0
    A[:, n - 1] = 0
    A = A.tocsr()
    if integer:
        A.data = np.ceil(A.data * 4)
    A.eliminate_zeros()
    return A.astype(dtype)


def _dense(n: int, k: int, seed: int = 2, dtype=np.float64, integer: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    B = rng.integers(-3, 4, (n, k)).astype(dtype) if integer else rng.standard_normal((n, k)).astype(dtype)
    return B


@pytest.mark.parametrize("n_workers", [1, 2, 3, 4])
def test_spmm_every_algorithm_matches_scipy(clients, n_workers):
    client = clients(n_workers)
    A = _matrix()
    layouts = [None, grid_shape(n_workers)] + ([(1, 2)] if n_workers == 2 else [])
    for algorithm in ALGORITHMS:
        for grid, k in zip(layouts, [3, 1, 2], strict=False):
            B = _dense(A.shape[1], k)
            C = wb.spmm(A, B, algorithm=algorithm, grid=grid, client=client)
            stats = C.stats
            assert C.shape == (A.shape[0], k)
            with get_task_stream(client) as persisting:
                wait(client.persist(C))   # C's tiles are the ranks' own results: persisting it runs nothing
            assert not persisting.data, (algorithm, grid, persisting.data)
            res = validate_spmm(A, B, C, rtol=1e-12)
            assert res["ok"], (algorithm, grid, k, res)
            assert stats["algorithm"] == algorithm and stats["n_workers"] == n_workers
            assert stats["backend"] == "cpu"
            assert stats["nnz"] == A.nnz
            if n_workers > 1 and algorithm != "summa":
                assert stats["bytes_moved"] > 0


@pytest.mark.parametrize("n_workers", [2, 3])
@pytest.mark.parametrize("dtypes", [(np.float32, np.float32), (np.float64, np.float32)])
def test_spmm_dtypes(clients, n_workers, dtypes):
    client = clients(n_workers)
    A = _matrix(dtype=dtypes[0])
    B = _dense(A.shape[1], 4, dtype=dtypes[1])
    for algorithm in ("stationary-c", "work-stealing"):
        C = wb.spmm(A, B, algorithm=algorithm, client=client)
        assert C.dtype == np.result_type(*dtypes)
        out = np.asarray(C)
        assert out.dtype == np.result_type(*dtypes)
        res = validate_spmm(A, B, out)
        assert res["ok"], (algorithm, dtypes, res)


def test_spmm_identical_across_worker_counts_and_every_worker_works(clients):
    # integer-valued data: every summation order is exact, so results must agree bit for bit
    A = _matrix(m=53, n=47, integer=True)
    B = _dense(47, 5, integer=True)
    ref = (A @ B)
    for n_workers in (1, 2, 3, 4):
        client = clients(n_workers)
        for algorithm in ALGORITHMS:
            C = wb.spmm(A, B, algorithm=algorithm, client=client)
            stats = C.stats
            np.testing.assert_array_equal(np.asarray(C), ref)
            assert all(u > 0 for u in stats["units"]), (algorithm, stats["units"])
            assert len(stats["phases"]) == n_workers
            assert all(p["compute"] > 0 for p in stats["phases"]), algorithm
            assert [set(p) for p in stats["phases_cpu"]] == [set(p) for p in stats["phases"]]


def test_spmm_distributed_inputs(clients):
    client = clients(3)
    A = _matrix(m=60, n=45)
    B = _dense(45, 6)
    ref = A @ B
    G = wb.distribute(A, client=client)
    Bd = wb.distribute(B, client=client)
    import dask.array as da

    G2 = wb.distribute(A, client=client, partition="2d", grid=(1, 3))
    cases = [(G, Bd, "stationary-c"), (G, da.from_array(B, chunks=(10, 6)), "work-stealing"), (G, B, "summa"),
             (G2, Bd, "stationary-a"), (G2, da.from_array(B, chunks=(7, 3)), "stationary-c")]
    for Ain, Bin, algorithm in cases:
        C = wb.spmm(Ain, Bin, algorithm=algorithm, client=client)
        np.testing.assert_allclose(np.asarray(C), ref, rtol=1e-12, atol=1e-12)
    # B as numpy takes it (A @ B takes a list)
    np.testing.assert_allclose(np.asarray(wb.spmm(G, B.tolist(), client=client)), ref, rtol=1e-12, atol=1e-12)


def test_spmm_rmat_distributed_generator(clients):
    client = clients(2)
    G = wb.data.rmat_distributed(8, seed=3, client=client)
    A = wb.data.rmat(8, seed=3)
    B = _dense(A.shape[0], 8)
    C = wb.spmm(G, B, client=client)
    stats = C.stats
    np.testing.assert_allclose(np.asarray(C), A @ B, rtol=1e-12, atol=1e-12)
    assert stats["effective_gbps"] > 0 and stats["gflops"] > 0
    # only the B rows a block touches travel: strictly less than the remote half of B
    assert 0 < stats["bytes_moved"] < B.nbytes


def test_spmm_repeat_calls_reuse_prepared_tiles(clients):
    # a distributed A is cut into tiles once and reused; k = 64 and 32 (a 2-D grid's halves) take the
    # fixed-width CPU kernels, k = 7 the generic one; float32 too
    client = clients(3)
    A = _matrix(m=70, n=61)
    G = wb.distribute(A, client=client)
    G2 = wb.distribute(A, client=client, partition="2d", grid=(1, 3))
    cases = [(np.float64, 64, G, "stationary-c"), (np.float64, 64, G2, "stationary-c"),
             (np.float32, 64, G, "work-stealing"), (np.float64, 7, G, "summa")]
    for dtype, k, Ain, algorithm in cases:
        B = _dense(61, k, seed=k, dtype=dtype)
        Bd = wb.distribute(B, client=client)
        for _ in range(2):
            C = wb.spmm(Ain, Bd, algorithm=algorithm, client=client)
            res = validate_spmm(A, B, C)
            assert res["ok"], (dtype, k, algorithm, res)
    cache = G.meta["_spmm_prepared"]
    assert len(cache) == 1
    futs = next(iter(cache.values()))
    wb.spmm(G, Bd, client=client)
    assert next(iter(G.meta["_spmm_prepared"].values())) is futs  # reused, not rebuilt


@pytest.mark.parametrize("n_workers", [1, 2, 3, 4])
def test_spgemm_matches_scipy(clients, n_workers):
    client = clients(n_workers)
    A = _matrix(m=40, n=33)
    B = _matrix(m=33, n=27, seed=5).tocsr()
    C = wb.spgemm(A, B, client=client)
    stats = C.stats
    got = C.to_scipy(client)
    ref = (A @ B).tocsr()
    assert got.shape == ref.shape
    assert abs(got - ref).max() <= 1e-12 * abs(ref).max()
    assert C.nnz == got.nnz
    assert stats["units"] == n_workers * n_workers
    assert stats["backend"] == "cpu" and stats["nnz"] == ref.nnz


@pytest.mark.parametrize("dtype", [np.uint8, bool, np.int32])
def test_integer_and_bool_products_are_float64_counts(clients, dtype):
    """As the result's dtype says: float64 sums, not uint8 wrapping around or bool ORs."""
    client = clients(2)
    A = sp.csr_matrix(np.where(_matrix(m=20, n=20, seed=2).toarray() != 0, 200, 0).astype(dtype))
    ref = A.astype(np.float64) @ A.astype(np.float64)
    C = wb.spgemm(A, A, client=client)
    got = C.to_scipy(client)
    assert C.dtype == np.float64 and got.dtype == np.float64
    np.testing.assert_array_equal(got.toarray(), ref.toarray())
    B = np.full((20, 3), 200, dtype=dtype)
    np.testing.assert_array_equal(np.asarray(wb.spmm(A, B, client=client)), A.astype(np.float64) @ B.astype(np.float64))


def test_return_stats_is_a_deprecated_alias(clients):
    client = clients(2)
    A = _matrix()
    B = _dense(A.shape[1], 3)
    with pytest.warns(DeprecationWarning, match="return_stats"):
        C, stats = wb.spmm(A, B, client=client, return_stats=True)
    assert stats is C.stats and stats["backend"] == "cpu"
    np.testing.assert_allclose(np.asarray(C), A @ B, rtol=1e-12, atol=1e-12)
    with pytest.warns(DeprecationWarning, match="return_stats"):
        C = wb.spmm(A, B, client=client, return_stats=False)
    assert C.stats["nnz"] == A.nnz
    with pytest.warns(DeprecationWarning, match="return_stats"):
        S, stats = wb.spgemm(A, A.T.tocsr(), client=client, return_stats=True)
    assert stats is S.stats and S.nnz == (A @ A.T).nnz


def test_split_tiles_array_namespace_form_matches_numba():
    # the GPU path's vectorised splitter, run on numpy, must agree with the numba one
    A = _matrix(m=30, n=50)
    koffs = np.array([0, 7, 7, 31, 50])
    out_idx = np.empty(A.nnz, np.int32)
    out_val = np.empty(A.nnz)
    ip, st, nr, rows = _split_tiles_nb(A.indptr, A.indices, A.data, koffs, out_idx, out_val)
    ip2, st2, nr2, rows2, idx2, val2 = _split_tiles_xp(A.indptr, A.indices, A.data, koffs)
    for a, b in ((ip, ip2), (st, st2), (nr, nr2), (rows, rows2), (out_idx, idx2), (out_val, val2)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("offset", [0, 16, 3])
def test_a_local_b_off_a_cache_line_is_gathered_not_read_in_place(offset):
    """numpy's large arrays start 16 bytes past a cache line, and a chunk dask deserialized out of a task graph
    (da.from_array) anywhere: a unit reads such a local B tile through its gathered rows, which start on one,
    and only an aligned tile in place through the direct index.  Both give scipy's product."""
    from workbench.kernels.spmm import ranks

    A = _matrix(m=60, n=40)
    B = _dense(20, 8)
    raw = np.empty(B.nbytes + 128, np.uint8)
    Bt = np.ndarray(B.shape, B.dtype, buffer=raw.data, offset=-raw.ctypes.data % 64 + offset)
    Bt[...] = B
    lay = ranks._Layout("1d", ["w0", "w1"], np.array([0, 30, 60]), np.array([0, 20, 40]), np.array([0, 8]))
    store = ranks._TileStore(lay, 0, {(0, 0): A[:30]}, {(0, 0): Bt}, ranks._Clock())
    assert store.reads_in_place(0, 0) == (offset == 0)
    assert not store.reads_in_place(1, 0)                  # B(1) is the peer's
    tile = store.a[(0, 0)]
    assert (tile[2] is not None) == (offset == 0)          # the direct index is made for an in-place read only
    rows = tile[1]
    gathered = ranks._take_rows(Bt, rows)
    assert gathered.ctypes.data % 64 == 0
    np.testing.assert_array_equal(gathered, B[rows])
    want = A[:30, :20] @ B
    for b, whole in ((gathered, False), (Bt, True)):
        C = np.full((30, 8), np.nan)
        ranks._multiply(tile, b, whole, C, accumulate=False)
        np.testing.assert_allclose(C, want, rtol=1e-13, atol=1e-13)


def test_bad_inputs(clients):
    client = clients(2)
    A = _matrix()
    B = _dense(A.shape[1], 3)
    with pytest.raises(ValueError, match="inner dimensions"):
        wb.spmm(A, B[:-1], client=client)
    with pytest.raises(ValueError, match="B must be 2-D"):
        wb.spmm(A, B[:, 0], client=client)
    with pytest.raises(ValueError, match="B must be 2-D"):
        wb.spmm(A, B[:, :, None], client=client)
    bad = B.copy()
    bad[3, 1] = np.inf
    with pytest.raises(ValueError, match="B contains NaN or infinite"):
        wb.spmm(A, bad, client=client)
    An = A.copy()
    An.data[0] = np.nan
    with pytest.raises(ValueError, match="A contains NaN"):
        wb.spmm(An, B, client=client)
    with pytest.raises(ValueError, match="algorithm"):
        wb.spmm(A, B, algorithm="cannon", client=client)
    with pytest.raises(TypeError, match="A must be"):
        wb.spmm(A.toarray(), B, client=client)
    with pytest.raises(ValueError, match="grid"):
        wb.spmm(A, B, grid=(3, 3), client=client)
    with pytest.raises(ValueError, match="inner dimensions"):
        wb.spgemm(A, A, client=client)
    with pytest.raises(TypeError, match="B must be"):
        wb.spgemm(A, B, client=client)
    # distributed B is checked on the workers, inside the group
    Bd = wb.distribute(bad, client=client)
    with pytest.raises(ValueError, match="B contains NaN or infinite"):
        wb.spmm(A, Bd, client=client)


def test_distributed_b_is_scanned_once(clients, monkeypatch):
    """A dask B (or distributed B) found finite is not scanned again on the next call; a
    different array holding a NaN is still rejected."""
    import dask.array as da

    from workbench.kernels import spmm as spmm_mod

    client = clients(2)
    A = _matrix()
    B = _dense(A.shape[1], 3)
    scans = []
    real = spmm_mod._needs_finite_check
    monkeypatch.setattr(spmm_mod, "_needs_finite_check", lambda x: scans.append(real(x)) or scans[-1])
    Bk = da.from_array(B, chunks=(7, 3))
    Bd = wb.distribute(B, client=client)
    for Bx in (Bk, Bd):
        scans.clear()
        C1 = wb.spmm(A, Bx, client=client).compute()
        C2 = wb.spmm(A, Bx, client=client).compute()
        np.testing.assert_allclose(C1, A @ B, rtol=1e-12)
        np.testing.assert_array_equal(C1, C2)
        assert scans == [True, False]  # scanned on the first call only
    bad = B.copy()
    bad[5, 2] = np.nan
    with pytest.raises(ValueError, match="B contains NaN or infinite"):
        wb.spmm(A, da.from_array(bad, chunks=(7, 3)), client=client)
    with pytest.raises(ValueError, match="B contains NaN or infinite"):
        wb.spmm(A, wb.distribute(bad, client=client), client=client)


@pytest.mark.parametrize("n_workers", [1, 2])
def test_spmm_under_gpu_sim_matches_scipy_and_the_cpu_path(clients, n_workers):
    """The device path (numba.cuda row kernel in the simulator, namespace tile splitter) on tiny inputs:
    every schedule, both layouts, host and distributed inputs, float64, float32 and integer-valued data."""
    A, B = _matrix(m=21, n=17), _dense(17, 3)
    Ai, Bi = _matrix(m=21, n=17, integer=True), _dense(17, 3, integer=True)
    A32, B32 = A.astype(np.float32), B.astype(np.float32)
    cases = [(algorithm, grid) for algorithm in ALGORITHMS
             for grid in [None] + ([(1, 2)] if n_workers == 2 else [])]

    def run(client):
        out = {}
        for algorithm, grid in cases:
            C = wb.spmm(A, B, algorithm=algorithm, grid=grid, client=client)
            out[algorithm, grid] = (np.asarray(C), C.stats["backend"])
        Ci = wb.spmm(Ai, Bi, client=client)
        G = wb.distribute(A32, client=client)
        C32 = wb.spmm(G, wb.distribute(B32, client=client), algorithm="work-stealing", client=client)
        S = wb.spgemm(A, A.T.tocsr(), client=client)
        return out, np.asarray(Ci), np.asarray(C32), S.to_scipy(client), {Ci.stats["backend"], S.stats["backend"]}

    cpu = run(clients(n_workers))
    sim = run(clients(n_workers, backend="gpu-sim"))
    ref = A @ B
    for key, (C, backend) in sim[0].items():
        assert backend == "gpu-sim", key
        np.testing.assert_allclose(C, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max(), err_msg=str(key))
        np.testing.assert_allclose(C, cpu[0][key][0], rtol=1e-10, atol=1e-10 * np.abs(ref).max(), err_msg=str(key))
        assert cpu[0][key][1] == "cpu"
    np.testing.assert_array_equal(sim[1], Ai @ Bi)  # integer-valued: exact in any order, bitwise equal
    np.testing.assert_array_equal(sim[1], cpu[1])
    assert validate_spmm(A32, B32, sim[2])["ok"]
    np.testing.assert_allclose(sim[2], cpu[2], rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    assert abs(sim[3] - A @ A.T).max() <= 1e-12 * abs(A @ A.T).max()
    assert sim[4] == {"gpu-sim"} and cpu[4] == {"cpu"}


_TWIN_CHECK = """
import numpy as np, scipy.sparse as sp
from numba import config
assert config.ENABLE_CUDASIM
from workbench.kernels.spmm import cpu, cuda as dev
rng = np.random.default_rng(0)
A0 = sp.random(23, 17, 0.2, format="lil", random_state=1, dtype=np.float64)
A0[3, :] = 0  # an empty row
A0 = A0.tocsr()
for dt in (np.float64, np.float32):
    A = A0.astype(dt)
    B = rng.standard_normal((17, 5)).astype(dt)
    for idx_dt in (np.int32, np.int64):
        args = (A.indptr.astype(np.int64), A.indices.astype(idx_dt), A.data)
        for acc in (False, True):
            C0 = rng.standard_normal((23, 5)).astype(dt)
            C_cpu, C_dev = C0.copy(), C0.copy()
            cpu._spmm_nb(*args, B, C_cpu, acc, 16)
            dev._spmm_nb[2, 32](*args, B, C_dev, acc, 16)
            ref = (C0 if acc else 0) + A.toarray().astype(np.float64) @ B.astype(np.float64)
            tol = 1e-12 if dt == np.float64 else 1e-5
            np.testing.assert_allclose(C_dev, ref, rtol=tol, atol=tol)
            np.testing.assert_allclose(C_dev, C_cpu, rtol=tol, atol=tol)
print("twins agree")
"""


def test_cuda_row_kernel_matches_cpu_twin_under_simulator():
    run_in_simulator(textwrap.dedent(_TWIN_CHECK), "twins agree")


@pytest.mark.gpu
def test_spmm_gpu_matches_scipy():
    import cupy as cp
    import cupyx.scipy.sparse as csp

    A = _matrix()
    B = _dense(A.shape[1], 4)
    with wb.cluster(backend="gpu", n_workers=1, quiet=True) as client:
        for algorithm in ALGORITHMS:
            C = wb.spmm(csp.csr_matrix(A), cp.asarray(B), algorithm=algorithm, client=client)
            out = C.compute()
            np.testing.assert_allclose(cp.asnumpy(out), A @ B, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(np.asarray(C), A @ B, rtol=1e-12, atol=1e-12)   # device chunks come home


@pytest.mark.parametrize("n_workers", [1, 2, 3])
def test_dask_b_row_chunks_used_where_they_live(clients, n_workers, monkeypatch):
    """The README's path: A from wb.distribute, B a dask array chunked by rows (chunks that match neither the
    worker count nor A's blocks).  Every algorithm multiplies B's chunks where they live (no rechunk into row
    blocks), and A's tiles are cut once for every placement of B's chunks (a new B that dask placed elsewhere
    cut them again, costing as much as a multiply)."""
    import dask.array as da

    from workbench.cluster import worker_addresses
    from workbench.kernels import spmm as ks

    client = clients(n_workers)
    addrs = worker_addresses(client)
    A = _matrix(m=70, n=53)
    B = _dense(53, 5)
    G = wb.distribute(A, client=client)
    Bd = client.persist(da.from_array(B, chunks=(11, 5)))
    wait(Bd)
    monkeypatch.setattr(ks, "rows_of", lambda *a, **k: pytest.fail("B was rechunked into row blocks"))
    for algorithm in ks.ALGORITHMS:
        C = wb.spmm(G, Bd, algorithm=algorithm, client=client)
        np.testing.assert_allclose(np.asarray(C), A @ B, rtol=1e-12, atol=1e-12)
    Bo = client.persist(da.from_array(2 * B, chunks=(11, 5)), workers=[addrs[-1]])   # same chunks, one worker
    wait(Bo)
    reused = []
    for _ in range(2):
        C = wb.spmm(G, Bo, client=client)
        np.testing.assert_allclose(np.asarray(C), A @ (2 * B), rtol=1e-12, atol=1e-12)
        reused.append(C.stats["tiles_reused"])
    assert reused == [True, True]      # another placement of the same chunks: A's tiles are not cut again
    np.testing.assert_allclose(np.asarray(wb.spmm(G, Bd, client=client)), A @ B, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend, n_workers", [("cpu", 2), ("cpu", 3), ("gpu-sim", 2)])
def test_dask_b_in_fewer_chunks_than_workers_is_multiplied_in_pieces(clients, backend, n_workers):
    # B in one chunk (dask's 128 MiB default holds R-MAT SCALE 18 x 64 whole): each chunk is cut in
    # _B_PIECES inner tiles, read in place as views, so a rank without B multiplies one piece while the next
    # arrives; every schedule gets the product, and B in as many chunks as workers stays whole
    import dask.array as da

    from workbench.kernels import spmm as ks

    client = clients(n_workers, backend=backend)
    A, B = _matrix(m=40, n=33), _dense(33, 4)
    G = wb.distribute(A, client=client)
    one = client.persist(da.from_array(B, chunks=(33, 4)))
    many = client.persist(da.from_array(B, chunks=(-(-33 // n_workers), 4)))
    wait([one, many])
    for algorithm in ks.ALGORITHMS:
        C = wb.spmm(G, one, algorithm=algorithm, client=client)
        np.testing.assert_allclose(np.asarray(C), A @ B, rtol=1e-12, atol=1e-12)
    assert wb.spmm(G, one, client=client).stats["units"] == [ks._B_PIECES] * n_workers
    C = wb.spmm(G, many, client=client)
    assert C.stats["units"] == [n_workers] * n_workers
    np.testing.assert_allclose(np.asarray(C), A @ B, rtol=1e-12, atol=1e-12)


def test_dask_b_chunks_off_the_group_move_to_their_ranks_once(clients):
    # A on two of three workers, B's chunks all on the third: they move to their ranks' workers before the
    # first group and stay there alone, so no call's ranks wait for a transfer, even with the active memory
    # manager run between calls (pulled by the ranks, B's copies were left on both workers, and the manager
    # dropped the ranks' copies: every other call pulled them again), and A's tiles are cut once
    import dask.array as da
    from dask.core import flatten
    from distributed import get_task_stream

    client = clients(3)
    w = sorted(client.scheduler_info()["workers"])
    A = _matrix(m=400, n=300)
    B = _dense(300, 6)
    G = wb.distribute(A, client=client, workers=w[:2])
    Bd = client.persist(da.from_array(B, chunks=(70, 6)), workers=[w[2]])
    wait(Bd)
    keys = list(flatten(Bd.__dask_keys__()))
    for i in range(3):
        with get_task_stream(client) as ts:
            C = wb.spmm(G, Bd, client=client)
            np.testing.assert_allclose(C.compute(), A @ B, rtol=1e-12, atol=1e-12)
        ranks = [t for t in ts.data if "spmd-spmm" in str(t["key"])]
        assert len(ranks) == 2 and not any(s["action"] == "transfer" for t in ranks for s in t["startstops"]), ranks
        held = client.sync(client.scheduler.who_has, keys=keys)
        assert all(len(held[k]) == 1 and held[k][0] in w[:2] for k in keys), held
        assert C.stats["tiles_reused"] == (i > 0)
        client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.extensions["amm"].run_once())


@pytest.mark.parametrize("k", [1, 2, 3, 4, 8, 16, 32, 64, 128])
@pytest.mark.parametrize("accumulate", [False, True])
def test_local_kernels_of_every_width_match_scipy(k, accumulate):
    """The fixed-width CPU kernels (k a compile-time constant) and the runtime-k one give scipy's product."""
    from workbench.kernels.spmm import cpu

    A = _matrix(m=57, n=43, density=0.2, seed=k)
    B = _dense(A.shape[1], k, seed=k)
    C0 = _dense(A.shape[0], k, seed=k + 1)
    want = A @ B + (C0 if accumulate else 0)
    args = (A.indptr.astype(np.int64), A.indices.astype(np.int32), A.data)
    kernels = [cpu._spmm_nb] + ([cpu._FIXED_K[k]] if k in cpu._FIXED_K else [])
    for kern in kernels:
        C = C0.copy()
        kern(*args, B, C, accumulate, 16)
        np.testing.assert_allclose(C, want, rtol=1e-12, atol=1e-12, err_msg=kern.__name__)
