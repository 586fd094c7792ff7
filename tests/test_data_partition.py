"""Graph500 generator, loaders, and the distributed containers."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import workbench as wb
from workbench import data, partition


@pytest.fixture(scope="module")
def A13():
    return data.rmat(13, seed=5)


def test_rmat_deterministic_symmetric_loop_free(A13):
    B = data.rmat(13, seed=5)
    assert (A13 != B).nnz == 0
    assert A13.shape == (8192, 8192)
    assert (A13 != A13.T).nnz == 0
    assert A13.diagonal().sum() == 0
    assert A13.data.min() == 1 and A13.data.max() == 1  # duplicates removed, not summed
    assert (data.rmat(13, seed=6) != A13).nnz > 0


def test_rmat_degree_distribution_is_kronecker_skewed(A13):
    deg = np.diff(A13.indptr)
    # power-law-like: hubs far above the mean, many isolated vertices (Graph500 R-MAT is very skewed)
    assert deg.max() > 20 * deg.mean()
    assert (deg == 0).mean() > 0.1
    assert np.median(deg) < deg.mean()


def test_edge_count_matches_spec():
    ij = data.kronecker_edges(10, edgefactor=16, seed=1)
    assert ij.shape == (2, 16 * 1024)
    assert ij.min() >= 0 and ij.max() < 1024


def test_relabel_is_a_bijection():
    v = np.arange(1 << 12)
    assert np.array_equal(np.sort(data._relabel(v, 12, seed=3)), v)


@pytest.mark.parametrize("n_workers", [1, 2, 3])
def test_generating_on_workers_gives_the_same_graph(clients, n_workers, A13):
    client = clients(n_workers)
    G = data.rmat_distributed(13, seed=5, client=client)
    assert isinstance(G, wb.RowBlocks) and G.n_parts == n_workers and G.nnz == A13.nnz
    # each block lives on its own worker
    who = client.who_has(G.parts)
    assert [tuple(who[f.key]) for f in G.parts] == [(w,) for w in G.workers]
    assert (G.gather(client) != A13).nnz == 0


def test_search_keys():
    A = data.rmat(10, seed=2)
    keys = data.search_keys(A, 64, seed=1)
    deg = np.diff(A.indptr)
    assert len(keys) == 64 == len(np.unique(keys))
    assert (deg[keys] >= 1).all()
    assert np.array_equal(keys, data.search_keys(A, 64, seed=1))


def test_loaders_roundtrip(tmp_path):
    import scipy.io

    A = data.rmat(8, seed=1)
    coo = sp.triu(A).tocoo()
    p = tmp_path / "g.txt"
    np.savetxt(p, np.stack([coo.row, coo.col], 1), fmt="%d", header="u v")
    assert (data.load_edgelist(str(p), n=256) != A).nnz == 0
    m = tmp_path / "g.mtx"
    scipy.io.mmwrite(str(m), A)
    assert (data.load_mtx(str(m)) != A).nnz == 0


def test_grid_graph():
    G = data.grid_graph((4, 5))
    assert G.shape == (20, 20) and G.nnz == 2 * (3 * 5 + 4 * 4)
    assert (G != G.T).nnz == 0


@pytest.mark.parametrize("bad", [0, 41, 2.5])
def test_rmat_bad_scale(bad):
    with pytest.raises(ValueError, match="scale"):
        data.rmat(bad)


@pytest.mark.parametrize("n, P", [(10, 3), (2, 3), (0, 2), (100, 7)])
def test_block_offsets_cover_range(n, P):
    offs = partition.block_offsets(n, P)
    assert offs[0] == 0 and offs[-1] == n and len(offs) == P + 1
    assert np.all(np.diff(offs) >= 0) and np.ptp(np.diff(offs)) <= 1
    if n:
        v = np.arange(n)
        own = partition.owner_of(v, offs)
        assert np.all((offs[own] <= v) & (v < offs[own + 1]))


@pytest.mark.parametrize("n_workers", [1, 2, 3])
def test_distribute_1d_2d_dense(clients, n_workers):
    client = clients(n_workers)
    A = sp.random(37, 23, density=0.2, format="csr", random_state=1)
    G = wb.distribute(A, client=client)
    assert G.n_parts == n_workers and (G.gather(client) != A).nnz == 0
    H = wb.distribute(A, client=client, partition="2d")
    assert H.grid == partition.grid_shape(n_workers) and (H.gather(client) != A).nnz == 0
    X = np.arange(30.0).reshape(10, 3)
    D = wb.distribute(X, client=client)
    np.testing.assert_array_equal(D.gather(client), X)
    np.testing.assert_array_equal(D.to_dask_array().compute(), X)
    assert wb.distribute(G, client=client) is G
    R = partition.rows_of(D.to_dask_array(), client)
    np.testing.assert_array_equal(R.gather(client), X)


def _held(key, dask_worker=None):
    x = dask_worker.data[key]
    return type(x).__name__, bool(getattr(x, "flags", None) is None or x.flags.writeable)


def test_large_host_blocks_are_copied_out_of_the_client_by_their_worker(clients, monkeypatch):
    from workbench import comms

    client = clients(2)
    ws = sorted(client.scheduler_info()["workers"])
    big = np.random.default_rng(3).standard_normal((600, 500))        # 2.4 MB: over the pull threshold
    A = sp.random(3000, 3000, density=0.02, format="csr", random_state=2)
    if comms._READV is not None:   # same host, cross-memory attach allowed: no socket scatter
        monkeypatch.setattr(client, "scatter", None)
    futs = [partition._scatter_to(client, big, ws[0]), partition._scatter_to(client, A, ws[1])]
    held = client.who_has(futs)
    assert [set(held[f.key]) for f in futs] == [{ws[0]}, {ws[1]}]
    assert client.run(_held, futs[0].key, workers=[ws[0]])[ws[0]] == ("ndarray", True)
    got = client.gather(futs)
    np.testing.assert_array_equal(got[0], big)
    assert (got[1] != A).nnz == 0
    monkeypatch.undo()
    small = partition._scatter_to(client, np.arange(5.0), ws[1])      # by socket
    np.testing.assert_array_equal(small.result(), np.arange(5.0))


@pytest.mark.parametrize("cols", [(100, 900), (0, 4095), (1, 4096)])
def test_column_blocks_are_copied_row_by_row_without_a_client_copy(clients, monkeypatch, cols):
    # a column block of a C array (a from_array chunk along the last axis, a rank's share of a gtsv input):
    # its worker reads it row by row (rows of any length: 4095 doubles is not a multiple of a cache line)
    from workbench import _samehost, comms

    client = clients(2)
    ws = sorted(client.scheduler_info()["workers"])
    X = np.random.default_rng(5).standard_normal((300, 4096))
    block = X[:, cols[0]:cols[1]]
    assert not block.flags.c_contiguous and partition.as_block(block) is block
    parcel = _samehost._Parcel.pack(block, "", "", 1)
    assert parcel is not None and parcel[0].rows and len(parcel[0].spans) == 300
    np.testing.assert_array_equal(parcel[0].pull(), block)          # this process reading itself
    if comms._READV is not None:   # same host, cross-memory attach allowed: no socket scatter
        monkeypatch.setattr(client, "scatter", None)
    fut = partition._scatter_all(client, [block], [ws[1]])[0]
    assert set(client.who_has(fut)[fut.key]) == {ws[1]}
    got = fut.result()
    assert got.flags.c_contiguous
    np.testing.assert_array_equal(got, block)
    assert _samehost._Parcel.pack(X[:4, :8], "", "", 1) is None     # small: by socket
    assert partition.as_block(X[::2, ::2]).flags.c_contiguous       # not rows of unit stride: copied


def test_blocks_copied_on_the_client_reuse_warm_buffers():
    # a Fortran-ordered row block (B.T of a C array, np.asfortranarray) has no contiguous rows: the client
    # copies it, into the host pool, so the next call's copy lands in the same (already faulted-in) pages
    BF = np.asfortranarray(np.random.default_rng(6).standard_normal((70_000, 64)))   # 34 MiB
    first = partition.as_block(BF[:60_000])
    assert first.flags.c_contiguous
    np.testing.assert_array_equal(first, BF[:60_000])
    where = first.ctypes.data
    del first                                                        # scattered: the buffer goes back
    again = partition.as_block(BF[:60_000])
    assert again.ctypes.data == where
    np.testing.assert_array_equal(again, BF[:60_000])


def test_chunk_sources_pass_a_persisted_arrays_futures_and_compute_the_rest(clients):
    import dask
    import dask.array as da
    from distributed import Future, futures_of, get_task_stream

    client = clients(2)
    X = np.arange(60.0).reshape(12, 5)
    lazy = da.from_array(X, chunks=(4, 5)) + 1
    kept = client.persist(lazy)
    src = partition.chunk_sources(kept)
    # the persisted chunks themselves: nothing new is submitted for them
    assert src.shape == (3, 1) and all(isinstance(f, Future) for f in src.flat)
    assert {f.key for f in src.flat} == {f.key for f in futures_of(kept)}
    src_lazy = partition.chunk_sources(lazy * 2)     # keys not in memory
    assert src_lazy.shape == (3, 1) and not any(isinstance(f, Future) for f in src_lazy.flat)
    w = sorted(client.scheduler_info()["workers"])
    cut = dask.delayed(lambda a: a[:1])(src[1, 0])
    futs = partition.compute_all(client, [(src[0, 0], None), (src_lazy[2, 0], [w[1]]), (cut, None)])
    assert futs[0] is src[0, 0]
    np.testing.assert_array_equal(futs[1].result(), 2 * (X[8:] + 1))
    np.testing.assert_array_equal(futs[2].result(), X[4:5] + 1)
    assert set(client.who_has(futs[1])[futs[1].key]) == {w[1]}
    # chunks of from_array on a host array are data in the caller's graph: scattered straight to their worker
    # (nothing submitted through the scheduler), the same values, a cut of one still computed beside it
    raw = partition.chunk_sources(da.from_array(X, chunks=(4, 3)))
    assert partition._literal(raw[1, 1]) is not None and partition._literal(src_lazy[0, 0]) is None
    with get_task_stream(client) as ts:
        got = partition.compute_all(client, [(raw[1, 1], [w[0]]), (raw[2, 0], [w[1]]), (raw[0, 0], None)])
    assert not ts.data, ts.data
    np.testing.assert_array_equal(got[0].result(), X[4:8, 3:])
    np.testing.assert_array_equal(got[1].result(), X[8:, :3])
    np.testing.assert_array_equal(got[2].result(), X[:4, :3])
    assert set(client.who_has(got[0])[got[0].key]) == {w[0]} and set(client.who_has(got[1])[got[1].key]) == {w[1]}


def test_persist_sends_from_array_chunks_by_their_workers_keyed_as_client_persist(clients, monkeypatch):
    import dask.array as da
    from distributed import futures_of, get_task_stream

    from workbench import comms

    client = clients(2)
    ws = sorted(client.scheduler_info()["workers"])
    X = np.random.default_rng(6).standard_normal((1000, 1200))       # 4 chunks of 2.4 MB, column blocks
    x = da.from_array(X, chunks=(500, 600))
    if comms._READV is not None:   # same host, cross-memory attach allowed: no scheduler, no socket scatter
        monkeypatch.setattr(client, "scatter", None)
        monkeypatch.setattr(client, "persist", None)
    with get_task_stream(client) as ts:
        xp = partition.persist(x, client)
    monkeypatch.undo()
    assert not ts.data
    keys = {f.key for f in futures_of(xp)}
    assert keys == {(x.name, i, j) for i in range(2) for j in range(2)} and xp.name == x.name
    held = client.who_has(futures_of(xp))
    if comms._READV is not None:   # a run of chunks per worker, in chunk order
        assert [set(held[(x.name, *idx)]) for idx in np.ndindex(2, 2)] == [{ws[0]}, {ws[0]}, {ws[1]}, {ws[1]}]
    np.testing.assert_array_equal(xp.compute(), X)
    # the rest as client.persist does it: small chunks, and arrays that are not plain from_array
    small = partition.persist(da.from_array(X[:10, :10], chunks=5), client)
    np.testing.assert_array_equal(small.compute(), X[:10, :10])
    y = partition.persist(x + 1, client)
    np.testing.assert_array_equal(y.compute(), X + 1)
    assert partition.persist(xp, client).name == xp.name


def test_move_keys_leaves_one_copy_on_the_home_worker(clients):
    # each key ends alone on its home worker, whether it lay elsewhere (moved), on several workers (the other
    # copies dropped) or there already (untouched); a key the scheduler does not know is skipped; no task runs
    from distributed import get_task_stream

    client = clients(3)
    w = sorted(client.scheduler_info()["workers"])
    X = np.arange(12.0)
    a, b, c = (client.scatter(X + i, workers=[w[i % 2]]) for i in range(3))   # on w0, w1, w0
    client.replicate([c], n=3)
    with get_task_stream(client) as ts:
        partition.move_keys(client, {w[1]: [a.key, "no-such-key"], w[2]: [c.key], w[0]: []})
        partition.move_keys(client, {w[1]: [b.key]})
    assert not ts.data
    held = {k: set(v) for k, v in client.who_has([a, b, c]).items()}
    assert held == {a.key: {w[1]}, b.key: {w[1]}, c.key: {w[2]}}, held
    client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.extensions["amm"].run_once())
    assert {k: set(v) for k, v in client.who_has([a, b, c]).items()} == held
    for f, i in ((a, 0), (b, 1), (c, 2)):
        np.testing.assert_array_equal(f.result(), X + i)


@pytest.mark.parametrize("chunks", [(14, 5), (3, 2), (7, 5), (5, 3)])
@pytest.mark.parametrize("n_workers", [1, 2, 3])
def test_rows_of_a_from_array_cuts_its_host_chunks_without_tasks(clients, chunks, n_workers):
    import dask.array as da
    from distributed import get_task_stream

    client = clients(n_workers)
    X = np.arange(70.0).reshape(14, 5)
    with get_task_stream(client) as ts:
        rb = partition.rows_of(da.from_array(X, chunks=chunks), client)
    assert not ts.data
    for r, f in enumerate(rb.parts):
        np.testing.assert_array_equal(f.result(), X[rb.offsets[r]:rb.offsets[r + 1]])
    assert [set(client.who_has(f)[f.key]) for f in rb.parts] == [{w} for w in rb.workers]
    lazy = partition.rows_of(da.from_array(X, chunks=chunks) * 2, client)    # any other array: computed
    np.testing.assert_array_equal(np.concatenate([f.result() for f in lazy.parts]), 2 * X)


def test_distribute_bad_input(client):
    with pytest.raises(ValueError, match="partition"):
        wb.distribute(np.ones((3, 3)), client=client, partition="3d")
    with pytest.raises(ValueError, match="grid"):
        wb.distribute(sp.eye(4, format="csr"), client=client, partition="2d", grid=(3, 3))


@pytest.mark.parametrize("n_workers", [1, 3])
def test_check_symmetric_once_per_container(clients, n_workers, monkeypatch):
    from workbench.partition import check_symmetric, distribute, pattern_hashes

    client = clients(n_workers)
    checks = []
    submit = client.submit
    monkeypatch.setattr(client, "submit", lambda fn, *a, **k: (checks.append(fn), submit(fn, *a, **k))[1])
    A = wb.data.rmat(8, seed=3)
    G = distribute(A, client=client)
    assert G.symmetric is None
    assert check_symmetric(G, client) is True and G.symmetric is True
    assert checks.count(pattern_hashes) == n_workers     # one tiny task per block
    assert check_symmetric(G, client) is True
    assert checks.count(pattern_hashes) == n_workers     # remembered: no second check
    # one missing reverse edge, one extra one-way edge, or a transposed pair: all caught
    coo = A.tocoo()
    drop = sp.csr_matrix((coo.data[1:], (coo.row[1:], coo.col[1:])), shape=A.shape)
    one_way = (A + sp.csr_matrix(([1.0], ([0], [A.shape[0] - 1])), shape=A.shape)).tocsr()
    if A[0, A.shape[0] - 1]:
        one_way = drop
    for bad in (drop, one_way):
        Gb = distribute(bad, client=client)
        assert check_symmetric(Gb, client) is False and Gb.symmetric is False
    G2 = distribute(A, client=client, partition="2d") if n_workers > 1 else None
    if G2 is not None:
        assert check_symmetric(G2, client) is True
    # a non-square matrix is never symmetric, and nothing is sent
    R = distribute(sp.random(6, 4, density=0.5, format="csr", random_state=0), client=client)
    assert check_symmetric(R, client) is False
    fwd, bwd, nnz = pattern_hashes(A, 0)
    assert fwd == bwd and nnz == A.nnz
    # host blocks take one compiled pass, unsorted ones numpy's: the same sums
    rev = A.copy()
    for i in range(A.shape[0]):
        lo, hi = A.indptr[i], A.indptr[i + 1]
        rev.indices[lo:hi], rev.data[lo:hi] = A.indices[lo:hi][::-1], A.data[lo:hi][::-1]
    rev.has_sorted_indices = False
    assert pattern_hashes(rev, 0) == (fwd, bwd, nnz)
    assert pattern_hashes(A[5:], 5) == pattern_hashes(rev[5:], 5)


@pytest.mark.parametrize("n_workers", [1, 3])
def test_check_symmetric_reads_pairs_as_the_kernels_do(clients, n_workers):
    """A pair stored twice is one edge, a stored zero none, unsorted column ids are fine and values play no
    part: the workers' verdict is the host's (pattern_symmetric)."""
    from workbench.partition import check_symmetric, distribute, pattern_symmetric

    client = clients(n_workers)
    path = sp.csr_matrix(([0.5, 0.5, 1.0, 1.0, 1.0], [1, 1, 0, 2, 1], [0, 2, 4, 5]), shape=(3, 3))  # (0, 1) twice
    unsorted = sp.csr_matrix(([1.0, 1.0, 1.0, 1.0], [2, 1, 0, 0], [0, 2, 3, 4]), shape=(3, 3))
    weighted = sp.csr_matrix(np.array([[0, 1, 0], [2, 0, 1], [0, 1, 0]], dtype=np.int8))
    zero_one_way = sp.csr_matrix(([1.0, 1.0, 0.0], [1, 0, 2], [0, 1, 3, 3]), shape=(3, 3))
    wrapping = sp.csr_matrix((np.array([-128, 1, 1], np.int8), ([0, 1, 2], [1, 2, 1])), shape=(4, 4))
    twice_one_way = sp.csr_matrix(([1.0, 1.0, 1.0], [1, 1, 0], [0, 2, 2, 3]), shape=(3, 3))
    assert pattern_symmetric(sp.csr_matrix(np.ones((2, 3)))) is False
    for A, want in ((path, True), (unsorted, True), (weighted, True), (zero_one_way, True), (wrapping, False),
                    (twice_one_way, False)):
        assert pattern_symmetric(A) is want
        assert pattern_symmetric(A.tocsc()) is want and pattern_symmetric(A.tocoo()) is want   # A.T's arrays
        assert pattern_symmetric(sp.csc_array(A)) is want
        assert check_symmetric(distribute(A, client=client), client) is want
        if n_workers > 1:
            assert check_symmetric(distribute(A, client=client, partition="2d"), client) is want


def test_blocks_doubled_up_by_a_repair_spread_again(clients, monkeypatch):
    """A repair that found no replacement puts a lost block beside another (``meta["doubled"]``): a kernel
    that takes one block per worker treats it as a lost worker (retries, then says so), not as the caller's
    ValueError, and once a free worker is there the next call moves the block to it (nothing recomputed)
    and runs.  The same layout chosen by the caller (``n_parts``) stays the caller's ValueError."""
    import workbench.partition as partition
    from workbench.comms import WorkerLostError
    from workbench.partition import WorkerLostWarning, distribute, spread

    client = clients(3)
    w = sorted(client.scheduler_info()["workers"])
    A = wb.data.rmat(8, seed=3)
    chosen = distribute(A, client=client, workers=w[:2], n_parts=3)
    for call in (lambda: wb.bfs(chosen, 0, client=client), lambda: wb.color(chosen, client=client),
                 lambda: wb.spmm(chosen, np.ones((A.shape[0], 2)), client=client)):
        with pytest.raises(ValueError, match="one block per worker"):
            call()
    G = distribute(A, client=client, workers=w[:2], n_parts=3)      # the placement a repair leaves
    G.meta["doubled"] = True
    with monkeypatch.context() as m:
        m.setattr(partition, "spread", lambda c, client=None: [])    # no free worker yet
        with pytest.warns(WorkerLostWarning), pytest.raises(WorkerLostError, match="one per worker"):
            wb.bfs(G, 0, client=client)
    key = G.parts[2].key
    r = wb.bfs(G, 0, client=client)
    assert sorted(G.workers) == w and "doubled" not in G.meta and G.parts[2].key == key
    assert client.who_has([G.parts[2]])[key] == (G.workers[2],)
    assert wb.validate_bfs(A, r).ok
    assert spread(G, client) == []


@pytest.mark.parametrize("replicas, hint", [(1, "replicas=2"), (2, "every one of their 2 copies was lost too")])
def test_a_partition_with_no_holder_left_says_why(replicas, hint):
    # with replicas=2 the message told the caller to use replicas=2
    from workbench.comms import WorkerLostError
    from workbench.partition import HostLineage

    lineage = HostLineage([1.0], lambda s: s, lambda s, i: s, (1,), replicas=replicas)  # a list: no weak reference
    with pytest.raises(WorkerLostError, match=hint):
        lineage.rebuild(None, [0], ["tcp://w"], [None])


def test_a_kernel_result_that_lost_a_chunk_runs_its_call_again(clients):
    """A result's chunks are its ranks' futures, which cannot rerun alone: one gone (cancelled here, as a lost
    worker's are) makes the call run again when the result is read, under new keys; an array derived from
    the lost chunks is no result and fails.  An earlier result given as the input is held weakly: once it is
    gone the rerun says so."""
    import warnings
    from concurrent.futures import CancelledError

    from workbench.comms import WorkerLostError
    from workbench.partition import WorkerLostWarning

    client = clients(2)
    A = wb.data.rmat(7, seed=5)
    B = np.random.default_rng(1).standard_normal((A.shape[0], 3))
    Ad = wb.distribute(A, client=client)
    C = wb.spmm(Ad, B, client=client)
    name, D = C.name, C * 2
    client.cancel([next(iter(C.dask.layers[C.name].values()))])
    with pytest.warns(WorkerLostWarning, match="spmm: part of its result was lost"):
        np.testing.assert_allclose(np.asarray(C), A @ B, rtol=1e-12)
    assert C.name != name and C.stats["retries"] == 1
    with pytest.raises(CancelledError):
        D.compute()
    np.testing.assert_allclose((C * 2).compute(), 2 * (A @ B), rtol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("error", WorkerLostWarning)   # whole again: nothing reruns
        np.testing.assert_allclose(C.compute(), A @ B, rtol=1e-12)
    C2 = wb.spmm(Ad, C, client=client)
    del C
    client.cancel([next(iter(C2.dask.layers[C2.name].values()))])
    with pytest.raises(WorkerLostError, match="an input it was made from .* is gone"):
        np.asarray(C2)


def test_kernels_and_results_use_the_cluster_that_holds_their_data(clients):
    """Two clusters in one session (a notebook cell run twice, a CPU and a gpu-sim cluster side by side).
    Dask reads through the default client: a result made on the other one failed with "lost dependencies"
    (its chunks are that cluster's futures), after rerunning its call for nothing.  A kernel given that
    cluster's containers with client=None failed too (fft: "a rank was cancelled"; knn: "lost with their
    worker") or moved them."""
    import warnings

    from workbench.partition import WorkerLostWarning

    first = clients(2)
    x = np.random.default_rng(3).standard_normal((12, 10))
    A = wb.data.rmat(7, seed=2)
    B = np.random.default_rng(4).standard_normal((A.shape[0], 3))
    F, C = wb.fftn(x, client=first), wb.spmm(A, B, client=first)
    d = np.full((4, 64), 4.0)
    dl, du = np.ones((4, 63)), np.ones((4, 63))
    b = np.random.default_rng(5).standard_normal((4, 64))
    X = wb.tridiag_solve(dl, d, du, b, client=first)
    try:
        other = clients(3)                                # the other cluster is now the default client
        with warnings.catch_warnings():
            warnings.simplefilter("error", WorkerLostWarning)   # nothing is lost: nothing reruns
            np.testing.assert_allclose(np.asarray(F), np.fft.fftn(x), rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(C.compute(), A @ B, rtol=1e-12)
            T = (np.diag(d[0]) + np.diag(dl[0], -1) + np.diag(du[0], 1))
            np.testing.assert_allclose(np.asarray(X.persist()), np.linalg.solve(T, b.T).T, rtol=1e-12)
        assert all(r.stats.get("retries", 0) == 0 for r in (F, C, X))
        # and with client=None a kernel runs where its distributed inputs are, not on the default cluster
        Ad = wb.distribute(A, client=first)
        P = np.random.default_rng(6).standard_normal((300, 3))
        pts = wb.distribute(P, client=first)
        with warnings.catch_warnings():
            warnings.simplefilter("error", WorkerLostWarning)
            np.testing.assert_allclose(np.asarray(wb.ifftn(F)), x, rtol=1e-12, atol=1e-12)
            C2 = wb.spmm(Ad, B)
            g = wb.knn_graph(pts, 4, exact=True)
            r = wb.bfs(Ad, 0)
        assert {f.client for f in C2.dask.layers[C2.name].values()} == {first}
        assert {f.client for f in Ad.parts} == {first} and r.stats["retries"] == 0   # not moved to the other
        # the other cluster's client passed with them is a mistake said up front (it was a "lost" partition
        # rebuilt there from the host copy, or "Futures cancelled")
        for call in (lambda: wb.bfs(Ad, 0, client=other), lambda: wb.spmm(Ad, B, client=other),
                     lambda: wb.ifftn(F, client=other), lambda: wb.knn_graph(pts, 4, client=other)):
            with pytest.raises(ValueError, match="held by another cluster"):
                call()
        np.testing.assert_allclose(np.asarray(C2), A @ B, rtol=1e-12)
        np.testing.assert_array_equal(g.indices, wb.kernels.knn.brute_force_knn(P, 4)[0])
    finally:
        clients(2)


def test_options_a_placed_input_ignores_are_said(clients):
    # distribute(RowBlocks or dask, n_parts=...) returned the input as it is placed, and said nothing
    client = clients(2)
    X = wb.distribute(np.arange(12.0).reshape(6, 2), client=client)
    with pytest.warns(UserWarning, match="n_parts ignored"):
        assert wb.distribute(X, client=client, n_parts=7) is X
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert wb.distribute(X, client=client) is X


def test_every_result_carries_the_common_stats(client):
    # DESIGN's one result convention: every kernel's .stats names the path that ran, the wall seconds, the
    # bytes moved and the retries (graph500 had no "seconds")
    A = wb.data.rmat(8, seed=1)
    G = wb.distribute(A, client=client)
    P = np.random.default_rng(0).random((300, 2))
    d, o, b = np.full((3, 40), 4.0), np.ones((3, 39)), np.ones((3, 40))
    results = {"bfs": wb.bfs(G, 0, client=client), "color": wb.color(G, client=client),
               "knn_graph": wb.knn_graph(P, 3, client=client),
               "ripley_k": wb.ripley_k(P, [0.01, 0.1], window=(0, 1, 0, 1), client=client),
               "spmm": wb.spmm(G, np.ones((A.shape[0], 2)), client=client), "spgemm": wb.spgemm(A, A, client=client),
               "tridiag_solve": wb.tridiag_solve(o, d, o, b, client=client),
               "compact_derivative": wb.compact_derivative(np.sin(np.linspace(0, 6, 64)), 0.1, client=client),
               "fftn": wb.fftn(np.ones((8, 8)), client=client), "graph500": wb.graph500(7, n_roots=2, client=client)}
    for name, r in results.items():
        missing = {"backend", "seconds", "bytes_moved", "retries"} - set(r.stats)
        assert not missing, f"{name}: .stats lacks {sorted(missing)}"
        assert r.stats["backend"] == "cpu" and r.stats["seconds"] > 0 and r.stats["retries"] == 0, name
