"""Fault injection (DESIGN rule 7): workers killed with SIGKILL, by pid, in the middle of kernel
calls and between them; every call still returns the oracle's answer and the containers handed
in keep working.  One 3-worker cluster (each worker with its nanny) serves the whole module.

A worker is armed to die inside the next group of a kernel (``workbench.faults.kill_in_group``), so
each kill costs exactly the call that loses it and one call after: every kill costs a nanny restart
(seconds on a loaded machine), so cases share kills where they can.
"""

from __future__ import annotations

import logging
import time
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import shortest_path

import workbench as wb
from workbench import comms, faults
from workbench.cluster import worker_addresses
from workbench.partition import WorkerLostWarning, lost_parts, repair

# slow: runs notebooks/kills workers; make test runs it, make test-fast skips it
pytestmark = pytest.mark.slow

N_WORKERS = 3


@pytest.fixture(scope="module")
def client():
    import dask
    import distributed  # noqa: F401  (its defaults must be in dask's config before the set below records
    # the keys it adds: leaving the block would otherwise drop the whole "distributed" section)

    # LocalCluster closes a nanny whose worker is not back within this time (15 s by default);
    # a loaded CI machine can take longer to restart one, and the cluster would then shrink
    with dask.config.set({"distributed.deploy.lost-worker-timeout": "180s"}), \
            wb.cluster("cpu", n_workers=N_WORKERS, threads_per_worker=1, quiet=True, memory_limit="2GiB") as c:
        yield c


@pytest.mark.parametrize("name", ["bfs", "graph500", "color", "knn_graph", "ripley_k", "spmm", "spgemm",
                                  "tridiag_solve", "compact_derivative", "fftn", "ifftn", "rfftn", "irfftn"])
def test_every_public_kernel_reruns_after_a_lost_worker(name):
    # on the public function itself, so its warnings and errors carry the name the caller used
    assert hasattr(getattr(wb, name), "__wrapped__"), f"wb.{name} is not @resilient: a lost worker would end the call"


_KILLED: set[str] = set()


def _kill(client, address: str) -> None:
    _KILLED.add(address)
    faults.kill_worker(client, address)


@pytest.fixture(autouse=True)
def _settled(client):
    """Each test starts on a whole cluster: every worker killed before is gone from the scheduler
    (it notices a SIGKILLed worker only when its connection drops) and its replacement has joined."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        alive = set(worker_addresses(client))
        if len(alive) >= N_WORKERS and not alive & _KILLED:
            return
        time.sleep(0.2)
    pytest.fail(f"the cluster did not recover its {N_WORKERS} workers within 120 s: {sorted(alive)}")


def _through_kill(client, group: str, container_or_address, call, check) -> list[int]:
    """Arm a worker to die inside the next group named ``group``, make the call that loses it, then one
    more call; ``check`` both results.  Returns their retry counts (the first must have rerun)."""
    where = container_or_address if isinstance(container_or_address, str) else container_or_address.workers[-1]
    _KILLED.add(where)
    switch = faults.kill_in_group(client, group, where)
    retries = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WorkerLostWarning)
        for _ in range(2):
            out = call()
            check(out)
            retries.append(out.stats["retries"])
    assert switch.fired(), f"no group {group!r} ran on {where}"
    assert retries[0] >= 1 and retries[1] == 0, retries
    client.wait_for_workers(N_WORKERS, timeout=60)
    return retries


def _bfs_check(A, s):
    want = shortest_path(A, unweighted=True, indices=s)
    want = np.where(np.isinf(want), -1, want).astype(np.int64)

    def check(r):
        np.testing.assert_array_equal(r.level, want)
        assert wb.validate_bfs(A, r, s).ok
    return check


def test_bfs_generated_graph_survives_a_kill_mid_call_and_one_between_calls(client):
    A = wb.data.rmat(11, seed=2)
    G = wb.data.rmat_distributed(11, seed=2, client=client)
    s = int(wb.data.search_keys(A, 1, seed=1)[0])
    check = _bfs_check(A, s)
    _through_kill(client, "bfs", G, lambda: wb.bfs(G, s, client=client), check)
    assert lost_parts(G, set(worker_addresses(client))) == []
    _kill(client, G.workers[0])  # between calls: the next call repairs the container first
    time.sleep(0.5)
    r = wb.bfs(G, s, client=client)
    check(r)
    assert G.meta["repaired"] >= 2
    assert (G.gather(client) != A).nnz == 0  # repaired in place, from its generator
    client.wait_for_workers(N_WORKERS, timeout=60)


def test_coloring_host_data_survives_two_kills_in_turn(client):
    A = wb.data.rmat(10, seed=5)
    G = wb.distribute(A, client=client)
    for _ in range(2):  # the second kill hits the first one's replacement
        _through_kill(client, "color", G, lambda: wb.color(G, client=client), lambda c: assert_valid_coloring(A, c))
    assert (G.gather(client) != A).nnz == 0


def test_coloring_setup_lost_between_calls(client):
    """The setup a first call leaves on the workers is lost with a worker between calls: the next call builds it
    again (and repairs the container) instead of waiting for it."""
    A = wb.data.rmat(10, seed=6)
    G = wb.distribute(A, client=client)
    assert_valid_coloring(A, wb.color(G, client=client))
    _kill(client, G.workers[0])
    time.sleep(0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WorkerLostWarning)
        assert_valid_coloring(A, wb.color(G, client=client))
    client.wait_for_workers(N_WORKERS, timeout=60)
    assert (G.gather(client) != A).nnz == 0


def _same_blocks(got, want):
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.indptr, want.indptr)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_array_equal(got.data, want.data)   # bit for bit: duplicates summed in the same order


def test_read_and_sampled_containers_rebuild_a_lost_partition(client, tmp_path):
    # the loaders' and random_sparse's containers had no lineage: one lost worker made every later call on
    # them fail; and a worker lost mid-read ended the read
    rng = np.random.default_rng(3)
    n, nnz = 300, 2000
    i, j = rng.integers(1, n + 1, nnz), rng.integers(1, n + 1, nnz)
    lo, hi = np.minimum(i, j), np.maximum(i, j)   # symmetric storage: the lower triangle, with duplicates
    mtx = tmp_path / "sym.mtx"
    mtx.write_text("%%MatrixMarket matrix coordinate real symmetric\n% from a test\n"
                   f"{n} {n} {nnz}\n" + "".join(f"{a} {b} {float(v)!r}\n"
                                                  for a, b, v in zip(hi, lo, rng.random(nnz), strict=True)))
    edges = tmp_path / "edges.txt"
    edges.write_text("# u v\n" + "".join(f"{a} {b}\n" for a, b in zip(i, j, strict=True)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WorkerLostWarning)
        where = worker_addresses(client)[1]
        _KILLED.add(where)
        switch = faults.kill_in_group(client, "mtx", where)
        M = wb.data.load_mtx(mtx, client=client)     # read again on the workers there are
        assert switch.fired()
        client.wait_for_workers(N_WORKERS, timeout=60)
        made = {"mtx": M, "edgelist": wb.data.load_edgelist(edges, client=client),
                "random_sparse": wb.data.random_sparse((n, 2 * n), 0.02, seed=4, client=client)}
        host = {"mtx": wb.data.load_mtx(mtx), "edgelist": wb.data.load_edgelist(edges),
                "random_sparse": wb.data.random_sparse((n, 2 * n), 0.02, seed=4)}
        for name, C in made.items():
            _same_blocks(C.gather(client), host[name])
        _kill(client, made["mtx"].workers[1])
        time.sleep(0.5)
        for name, C in made.items():
            repair(C, client)
            _same_blocks(C.gather(client), host[name])
        B = np.ones((n, 2))
        np.testing.assert_allclose(np.asarray(wb.spmm(made["mtx"], B, client=client)), host["mtx"] @ B)
    client.wait_for_workers(N_WORKERS, timeout=60)


def test_distribute_places_the_data_again_when_a_worker_is_lost_meanwhile(client):
    # a worker lost while distribute placed the blocks ended it with Dask's own errors (a cancelled future,
    # "No valid workers found" after 30-60 s); and gather() of a container that had lost a partition raised
    from concurrent.futures import CancelledError

    from workbench.partition import _keeps_source

    X = np.arange(3000.0).reshape(1000, 3)
    calls = []

    def distribute(obj, client=None, **kwargs):   # the real one, after a first try that loses a worker
        calls.append(len(worker_addresses(client)))
        if len(calls) == 1:
            gone = worker_addresses(client)[1]
            _kill(client, gone)
            deadline = time.monotonic() + 60
            while gone in worker_addresses(client) and time.monotonic() < deadline:
                time.sleep(0.05)
            raise CancelledError("a block's worker left")
        return wb.distribute.__wrapped__(obj, client, **kwargs)

    with pytest.warns(WorkerLostWarning, match="placing it again"):
        D = _keeps_source(distribute)(X, client)
    assert len(calls) == 2 and D.n_parts == N_WORKERS
    np.testing.assert_array_equal(D.gather(client), X)
    client.wait_for_workers(N_WORKERS, timeout=60)
    _kill(client, D.workers[2])
    time.sleep(0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WorkerLostWarning)
        np.testing.assert_array_equal(D.gather(client), X)   # repaired first, from the caller's array
    assert D.meta["repaired"] >= 1
    client.wait_for_workers(N_WORKERS, timeout=60)


def assert_valid_coloring(A, c):
    coo = sp.triu(A, 1).tocoo()
    assert (c.colors >= 0).all() and not (c.colors[coo.row] == c.colors[coo.col]).any()


def test_fft_dask_array_survives_a_kill(client):
    import dask.array as da

    x = client.persist(da.random.default_rng(3).standard_normal((24, 16, 8), chunks=(8, 16, 8)))
    host = x.compute()
    want = np.fft.fftn(host)
    _through_kill(client, "fft", worker_addresses(client)[-1], lambda: wb.fftn(x, client=client),
                  lambda F: np.testing.assert_allclose(np.asarray(F), want, rtol=1e-10, atol=1e-9))


def test_spmm_generated_and_host_inputs_survive_a_kill(client):
    A = wb.data.rmat(10, seed=6)
    G = wb.data.rmat_distributed(10, seed=6, client=client)
    B = np.random.default_rng(0).standard_normal((A.shape[1], 4))
    want = A @ B
    _through_kill(client, "spmm", G, lambda: wb.spmm(G, B, client=client),
                  lambda Y: np.testing.assert_allclose(np.asarray(Y), want, rtol=1e-12, atol=1e-12))
    assert (G.gather(client) != A).nnz == 0


def test_tridiag_host_system_survives_a_kill(client):
    rng = np.random.default_rng(7)
    n = 3000
    dl, du = rng.uniform(-1, 1, n - 1), rng.uniform(-1, 1, n - 1)
    d = 4 + rng.uniform(0, 1, n)
    b = rng.standard_normal(n)
    A = sp.diags([dl, d, du], [-1, 0, 1], format="csr")

    def check(x):
        np.testing.assert_allclose(A @ np.asarray(x), b, atol=1e-10)
    _through_kill(client, "tridiag", worker_addresses(client)[-1],
                  lambda: wb.tridiag_solve(dl, d, du, b, client=client), check)


def test_tridiag_dask_grid_survives_a_kill(client):
    # (batch, n) persisted in a grid of chunks (rows of chunks per worker): the lost worker's chunks are
    # recomputed from their graph and the group reruns
    import dask.array as da

    rng = np.random.default_rng(8)
    V, n = 24, 1200
    dl, du = rng.uniform(-1, 1, (V, n - 1)), rng.uniform(-1, 1, (V, n - 1))
    d, b = 4 + rng.uniform(0, 1, (V, n)), rng.standard_normal((V, n))
    arrs = client.persist([da.from_array(a, chunks=(8, 500)) for a in (dl, d, du, b)])
    want = np.asarray(wb.tridiag_solve(dl, d, du, b, client=client))
    _through_kill(client, "tridiag", worker_addresses(client)[-1], lambda: wb.tridiag_solve(*arrs, client=client),
                  lambda x: np.testing.assert_array_equal(np.asarray(x), want))


def _holders(client, futures):
    who = client.who_has(futures)
    return [sorted(who[f.key]) for f in futures]


def test_replicas_survive_without_the_host_copy_and_a_lost_source_is_named(client):
    X = np.arange(600, dtype=np.float64).reshape(200, 3)
    D = wb.distribute(X.copy(), client=client, replicas=2)  # the client keeps no copy
    G = wb.distribute(wb.data.rmat(9, seed=1), client=client)  # the host matrix is gone at once
    assert D.workers[1] == G.workers[1]
    # Dask's active memory manager drops a key's extra holders; each copy is a key of its own, on another worker
    client.amm.run_once()
    time.sleep(0.5)
    copies = D.lineage.copies
    assert _holders(client, D.parts) == [[w] for w in D.workers]
    assert all(len(copies[i]) == 1 and copies[i][0][1] != D.workers[i] for i in range(D.n_parts))
    assert _holders(client, [copies[i][0][0] for i in range(D.n_parts)]) == [[copies[i][0][1]] for i in range(3)]
    _kill(client, D.workers[1])
    time.sleep(0.5)
    assert repair(D, client) == [1]
    np.testing.assert_array_equal(D.gather(client), X)
    with pytest.raises(comms.WorkerLostError, match=r"partition\(s\) \[1\].*replicas=2"):
        repair(G, client)
    # the copies the lost worker held were put back: a second loss costs nothing either
    assert all(c[0][0].status == "finished" and c[0][1] != D.workers[i] for i, c in copies.items())
    client.wait_for_workers(N_WORKERS, timeout=60)
    client.amm.run_once()
    _kill(client, D.workers[0])
    time.sleep(0.5)
    assert repair(D, client) == [0]
    np.testing.assert_array_equal(D.gather(client), X)
    client.wait_for_workers(N_WORKERS, timeout=60)


def _sleepy(comm, _):
    comm.barrier()
    time.sleep(0.3)
    return comm.allreduce(comm.rank)


def test_a_lost_rank_frees_its_peers_at_once(client):
    addrs = worker_addresses(client)
    futs = comms.run_spmd(_hang_on_rank0, [None] * len(addrs), client=client, workers=addrs, timeout=300)
    _KILLED.add(addrs[1])
    switch = faults.kill_in_group(client, "_hang_on_rank0", addrs[1])
    t0 = time.monotonic()
    with pytest.raises(comms.WorkerLostError):
        comms.wait_group(futs)
    assert switch.fired() and time.monotonic() - t0 < 30  # the peers wait 300 s otherwise
    client.wait_for_workers(N_WORKERS, timeout=60)
    assert comms.spmd(_sleepy, [None] * N_WORKERS, client=client) == [3] * N_WORKERS


def _hang_on_rank0(comm, _):
    return comm.recv((comm.rank + 1) % comm.size)  # nobody sends: only an abort ends this


def test_persisted_results_are_made_again(client):
    # client.persist(result) and dask.persist(result) hand back a copy of the result, not a plain dask array
    # that fails when read after its worker went (the read reruns the call, as reading the result does)
    import dask
    import dask.array as da

    rng = np.random.default_rng(4)
    A = sp.random(240, 240, density=0.05, format="csr", random_state=5) + sp.eye(240, format="csr")
    B = rng.standard_normal((240, 5))
    x = rng.standard_normal((24, 12))
    Ad = wb.distribute(A, client=client)
    C = client.persist(wb.spmm(Ad, B, client=client))
    (F,) = dask.persist(wb.fftn(da.from_array(x, chunks=(8, 12)), client=client))
    assert C.stats["retries"] == F.stats["retries"] == 0
    victim = worker_addresses(client)[-1]
    assert all(victim in {w for ws in client.who_has(r).values() for w in ws} for r in (C, F))
    assert victim in Ad.workers
    # the scheduler's "lose scattered data, which can't be recovered" is not said of Ad's partitions, which
    # workbench places again (it runs in this process: LocalCluster's scheduler)
    said = []
    handler = logging.Handler(logging.ERROR)
    handler.emit = lambda record: said.append(record.getMessage())
    logging.getLogger("distributed.scheduler").addHandler(handler)
    try:
        _kill(client, victim)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", WorkerLostWarning)
            np.testing.assert_allclose(np.asarray(C), A @ B, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(F.compute(), np.fft.fftn(x), rtol=1e-10, atol=1e-9)
            np.testing.assert_allclose(np.asarray(wb.spmm(Ad, B, client=client)), A @ B, rtol=1e-12, atol=1e-12)
    finally:
        logging.getLogger("distributed.scheduler").removeHandler(handler)
    assert C.stats["retries"] >= 1 and F.stats["retries"] >= 1
    assert not [m for m in said if "scattered" in m], said


def test_results_lost_after_the_call_are_made_again(client):
    # a kernel's result lives where its ranks ran, and a rank cannot rerun alone: results that lost a
    # part with one kill between the call and the read rerun the call that made them (one kill for all),
    # read themselves or as another kernel's input
    import dask.array as da

    rng = np.random.default_rng(9)
    A = sp.random(240, 240, density=0.05, format="csr", random_state=2) + sp.eye(240, format="csr")
    B = rng.standard_normal((240, 5))
    V, n = 6, 900
    system = [rng.uniform(-1, 1, (V, n - 1)), 4 + rng.uniform(0, 1, (V, n)), rng.uniform(-1, 1, (V, n - 1)),
              rng.standard_normal((V, n))]
    x = rng.standard_normal((24, 12))
    Ad = wb.distribute(A, client=client)
    C = wb.spmm(Ad, B, client=client)
    X = wb.tridiag_solve(*(da.from_array(a, chunks=(V, 300)) for a in system), client=client)
    F = wb.fftn(da.from_array(x, chunks=(8, 12)), client=client)
    S = wb.spgemm(Ad, Ad, client=client)
    want_X = np.asarray(wb.tridiag_solve(*system, client=client))
    victim = worker_addresses(client)[-1]
    assert all(victim in {w for ws in client.who_has(r).values() for w in ws} for r in (C, X, F))
    assert victim in S.workers
    _kill(client, victim)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", WorkerLostWarning)
        np.testing.assert_allclose(np.asarray(C), A @ B, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(wb.tridiag_solve(*system[:3], X, client=client).compute(),
                                      np.asarray(wb.tridiag_solve(*system[:3], want_X, client=client)))
        np.testing.assert_array_equal((X + 0).compute(), want_X)   # once X has been read (as an input)
        np.testing.assert_allclose(np.asarray(F), np.fft.fftn(x), rtol=1e-10, atol=1e-9)
        np.testing.assert_allclose(S.to_scipy(client).toarray(), (A @ A).toarray(), rtol=1e-12, atol=1e-12)
    # one rerun each, and the rerun's own retries when it started before the scheduler saw the loss
    assert min(C.stats["retries"], X.stats["retries"], F.stats["retries"]) >= 1
    names = {str(w.message).split(":")[0] for w in seen if issubclass(w.category, WorkerLostWarning)}
    assert {"spmm", "tridiag_solve", "fftn", "spgemm"} <= names, names
    # the made-again results are whole again: read once more, nothing reruns
    with warnings.catch_warnings():
        warnings.simplefilter("error", WorkerLostWarning)
        np.testing.assert_allclose(np.asarray(C), A @ B, rtol=1e-12, atol=1e-12)
