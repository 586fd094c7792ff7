"""Distributed BFS: levels against scipy's hop counts, parents against the Graph500 rules."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.csgraph as csgraph
from _sim import run_in_simulator

import workbench as wb
from workbench.kernels import bfs as kb

A_RMAT = wb.data.rmat(9, edgefactor=8, seed=2)


SRC_RMAT = int(wb.data.search_keys(A_RMAT, 1, seed=5)[0])
_LEVELS: dict = {}


def hops(A, source):
    d = csgraph.shortest_path(A, unweighted=True, indices=source)
    return np.where(np.isinf(d), -1, d).astype(np.int64)


def layouts(n):
    """(partition, grid) pairs to try on n workers: 1-D, and a 2-D grid with C > 1 where possible."""
    return [("1d", None), ("2d", (1, n))] if n > 1 else [("1d", None), ("2d", (1, 1))]


@pytest.mark.parametrize("n_workers", [1, 2, 3])
def test_rmat_levels_all_layouts_and_directions(clients, n_workers):
    client = clients(n_workers)
    want = hops(A_RMAT, SRC_RMAT)
    G = wb.distribute(A_RMAT, client=client, symmetric=True)  # 2-D runs re-layout this on the workers
    for partition, grid in layouts(n_workers):
        for direction in ("auto", "top-down", "bottom-up"):
            r = wb.bfs(G, SRC_RMAT, client=client, partition=partition, grid=grid, direction=direction)
            np.testing.assert_array_equal(r.level, want, err_msg=f"{partition} {grid} {direction}")
            rep = wb.validate_bfs(A_RMAT, r)
            assert rep.ok, rep.messages
            assert r.parent.dtype == np.int64 and r.parent[SRC_RMAT] == SRC_RMAT
            assert r.stats["backend"] == "cpu"
            assert r.stats["levels"] == want.max() + 1
            assert r.stats["teps"] > 0 and r.stats["bytes_moved"] >= 0
            assert {d["direction"] for d in r.stats["per_level"]} <= {"top-down", "bottom-up"}
            if direction != "auto":
                assert {d["direction"] for d in r.stats["per_level"]} == {direction}
            _LEVELS[(n_workers, partition, direction)] = r.level
            if n_workers > 1:  # every rank examined edges: the work is really split
                assert all(e > 0 for e in r.stats["edges_examined_per_rank"]), r.stats["edges_examined_per_rank"]


def test_identical_across_worker_counts():
    if len(_LEVELS) < 18:
        pytest.skip("needs the parametrised layout test to have run for 1, 2 and 3 workers")
    first = next(iter(_LEVELS.values()))
    for key, lv in _LEVELS.items():
        np.testing.assert_array_equal(lv, first, err_msg=str(key))


@pytest.mark.slow
def test_true_2d_grid_on_four_workers(clients):
    """A 2x2 grid: the expand (processor columns) and the fold (processor rows) both exchange data."""
    client = clients(4)
    G = wb.distribute(A_RMAT, client=client, partition="2d", symmetric=True)
    assert G.grid == (2, 2)
    want = hops(A_RMAT, SRC_RMAT)
    for direction in ("auto", "top-down", "bottom-up"):
        r = wb.bfs(G, SRC_RMAT, client=client, direction=direction)
        assert r.stats["grid"] == (2, 2)
        np.testing.assert_array_equal(r.level, want)
        assert wb.validate_bfs(A_RMAT, r).ok
        assert all(e > 0 for e in r.stats["edges_examined_per_rank"])


@pytest.mark.parametrize("n_workers", [1, 2])
def test_level_breakdown_into_compute_exchange_wait(clients, n_workers):
    """Every level reports its compute, exchange and wait seconds (rank means, with the slowest rank's
    compute), and the search totals are their sums; one worker exchanges nothing and never waits."""
    client = clients(n_workers)
    for partition, grid in layouts(n_workers):
        r = wb.bfs(A_RMAT, SRC_RMAT, client=client, partition=partition, grid=grid)
        st = r.stats
        assert len(st["per_level"]) == st["levels"]
        for d in st["per_level"]:
            assert d["compute_s"] > 0 and d["exchange_s"] >= 0 and d["wait_s"] >= 0, d
            assert d["compute_max_s"] >= d["compute_s"] * (1 - 1e-9), d
            if n_workers == 1:
                assert d["wait_s"] == 0 and d["bytes"] == 0, d
            else:  # every level ends in a collective that moves bytes and takes time
                assert d["bytes"] > 0 and d["exchange_s"] + d["wait_s"] > 0, d
        for key in ("compute", "exchange", "wait"):
            assert st[f"{key}_seconds"] == pytest.approx(sum(d[f"{key}_s"] for d in st["per_level"]))
    g = wb.graph500(8, edgefactor=8, n_roots=2, seed=1, client=client, validate=False)
    assert all({"compute_s", "exchange_s", "wait_s"} <= set(d) for s in g.stats["per_search"] for d in s["per_level"])


def test_auto_switches_direction(clients):
    r = wb.bfs(A_RMAT, SRC_RMAT, client=clients(2))
    dirs = [d["direction"] for d in r.stats["per_level"]]
    assert dirs[0] == "top-down" and "bottom-up" in dirs


@pytest.mark.parametrize("partition,grid,length", [("1d", None, 159), ("2d", (1, 2), 99)])
def test_grid_graph_hundreds_of_levels(clients, partition, grid, length):
    A = wb.data.grid_graph((length, 2))
    client = clients(2)
    G = wb.distribute(A, client=client, partition="1d" if grid is None else "2d", grid=grid)
    r = wb.bfs(G, 0, client=client)
    np.testing.assert_array_equal(r.level, hops(A, 0))
    assert r.stats["levels"] == length + 1 and r.stats["grid"] == ((2, 1) if grid is None else (1, 2))
    assert wb.validate_bfs(A, r).ok


def test_disconnected_isolated_and_hub(clients):
    client = clients(3)
    B = wb.data.rmat(7, edgefactor=4, seed=3)
    A = sp.block_diag([B, sp.csr_matrix((5, 5)), wb.data.grid_graph((6, 6))], format="csr")
    G = wb.distribute(A, client=client, symmetric=True)
    hub = int(np.argmax(np.diff(A.indptr)))
    isolated = B.shape[0] + 2
    far = A.shape[0] - 1  # a corner of the lattice component
    for src in (hub, isolated, far):
        r = wb.bfs(G, src, client=client)
        np.testing.assert_array_equal(r.level, hops(A, src))
        assert wb.validate_bfs(A, r).ok
    assert (r.level >= 0).sum() == 36
    iso = wb.bfs(G, isolated, client=client)
    assert (iso.parent >= 0).sum() == 1 and iso.stats["edges_traversed"] == 0


def _spare_sets(dask_worker, keys):
    """How many spare search-buffer sets each prepared block held on this worker keeps."""
    return [len(dask_worker.data[k]["spare"]) for k in keys if k in dask_worker.data]


def test_searches_reuse_their_buffers_and_concurrent_searches_get_their_own(clients):
    from concurrent.futures import ThreadPoolExecutor

    client = clients(2)
    A = wb.data.rmat(11, edgefactor=8, seed=4)
    G = wb.distribute(A, client=client, symmetric=True)
    roots = [int(r) for r in wb.data.search_keys(A, 8, seed=1)]
    for r in roots[:3]:
        np.testing.assert_array_equal(wb.bfs(G, r, client=client).level, hops(A, r))
    keys = [f.key for f in G.meta["_bfs_prep"][(2, 1)].futures]
    # one set per rank, made once (for the preparation's own search) and handed from search to search
    assert sorted(sum(client.run(_spare_sets, keys=keys).values(), [])) == [1, 1]
    with ThreadPoolExecutor(4) as pool:   # groups at once on the same blocks: each takes a set of its own
        got = list(pool.map(lambda r: wb.bfs(G, r, client=client).level, roots))
    for r, level in zip(roots, got, strict=True):
        np.testing.assert_array_equal(level, hops(A, r), err_msg=f"root {r}")
    assert all(1 <= k <= 4 for k in sum(client.run(_spare_sets, keys=keys).values(), []))


_REST: dict = {}


@pytest.mark.parametrize("backend,n_workers", [("cpu", 1), ("cpu", 2), ("cpu", 3), ("gpu-sim", 2)])
def test_searches_outside_the_giant_component_run_on_each_rank_alone(clients, backend, n_workers):
    """A source outside the highest-degree vertex's component searches every rank's copy of the small rest
    of the graph (no exchange); the answers are scipy's hop counts, valid trees and the same parents on any
    number of workers.  Sources in the giant component take the distributed search."""
    client = clients(n_workers, backend=backend)
    B = wb.data.rmat(7 if backend == "gpu-sim" else 9, edgefactor=8, seed=2)
    path = sp.diags([np.ones(3), np.ones(3)], [-1, 1], shape=(4, 4), format="csr")
    star = sp.csr_matrix((np.ones(6), ([0, 0, 0, 1, 2, 3], [1, 2, 3, 0, 0, 0])), shape=(4, 4))
    A = sp.block_diag([path, B, sp.csr_matrix((3, 3)), star], format="csr")
    assert (np.diff(A.indptr) == 0).any()   # isolated vertices too (some inside B)
    G = wb.distribute(A, client=client)
    hub = int(np.argmax(np.diff(A.indptr)))
    lone = 4 + B.shape[0] + 1
    for src in (0, 2, lone, A.shape[0] - 1, A.shape[0] - 3, hub):
        r = wb.bfs(G, src, client=client)
        want = hops(A, src)
        np.testing.assert_array_equal(r.level, want, err_msg=str(src))
        assert wb.validate_bfs(A, r).ok, src
        assert r.stats["edges_traversed"] == np.diff(A.indptr)[want >= 0].sum() // 2
        assert r.stats["levels"] == want.max() + 1 and len(r.stats["per_level"]) == r.stats["levels"]
        assert r.stats["backend"] == backend
        if src == hub:
            assert r.stats["path"] == "distributed"
        else:
            assert r.stats["path"] == "replicated" and r.stats["bytes_moved"] == 0, src
            first = _REST.setdefault((A.shape[0], src), r.parent)
            np.testing.assert_array_equal(r.parent, first)
    # no giant component: four equal lattices, each a quarter of the edges, so nothing is replicated
    Q = sp.block_diag([wb.data.grid_graph((4, 4))] * 4, format="csr")
    r = wb.bfs(Q, Q.shape[0] - 1, client=client)
    assert r.stats["path"] == "distributed"
    np.testing.assert_array_equal(r.level, hops(Q, Q.shape[0] - 1))


def _path_with_stored_zeros(n: int) -> sp.csr_matrix:
    """The path 0-1-...-(n-1) with zeros stored at (0, n-1) and (n-1, 0): a stored zero is no edge."""
    r = np.arange(n - 1)
    rows, cols = np.r_[r, r + 1, 0, n - 1], np.r_[r + 1, r, n - 1, 0]
    vals = np.r_[np.ones(2 * (n - 1)), 0.0, 0.0]
    return sp.csr_matrix((vals, (rows, cols)), shape=(n, n))


def _path_with_cancelling_pairs(n: int) -> sp.csr_matrix:
    """The path 0-1-...-(n-1) with (0, n-1) and (n-1, 0) each stored twice, +1 and -1: the matrix's entry
    there is their sum, 0, so no edge (as scipy reads it: ``A[0, n-1] == 0``)."""
    P = sp.csr_matrix(_path_with_stored_zeros(n))
    P.eliminate_zeros()
    rows = [list(zip(P.indices[P.indptr[i]:P.indptr[i + 1]], P.data[P.indptr[i]:P.indptr[i + 1]], strict=True))
            for i in range(n)]
    rows[0] += [(n - 1, 1.0), (n - 1, -1.0)]
    rows[n - 1] = [(0, -1.0)] + rows[n - 1] + [(0, 1.0)]
    indptr = np.cumsum([0] + [len(r) for r in rows])
    return sp.csr_matrix((np.array([v for r in rows for _, v in r]), np.array([j for r in rows for j, _ in r]),
                          indptr), shape=(n, n))


@pytest.mark.parametrize("n_workers", [1, 2, 3])
@pytest.mark.parametrize("n", [6, 64])
@pytest.mark.parametrize("make", [_path_with_stored_zeros, _path_with_cancelling_pairs])
def test_stored_zeros_are_no_edges(clients, n_workers, n, make):
    # 1 worker, or every row block starting on a byte (2 workers, n = 64), read the blocks in place and
    # followed the stored zeros: level[n-1] came out 1; pairs stored twice whose values cancel were
    # followed on every layout
    client = clients(n_workers)
    A = make(n)
    assert A[0, n - 1] == 0 and A[n - 1, 0] == 0
    stored = A.nnz
    for G in (A, wb.distribute(A, client=client)):
        for direction in ("auto", "top-down", "bottom-up"):
            r = wb.bfs(G, 0, client=client, direction=direction)
            np.testing.assert_array_equal(r.level, np.arange(n), err_msg=direction)
            np.testing.assert_array_equal(r.parent, np.r_[0, np.arange(n - 1)], err_msg=direction)
    assert A.nnz == stored   # the caller's matrix keeps what it stores
    # the validator and the search keys read the same edges: with 0-1 an edge and zeros stored at (0, 2),
    # (2, 0), vertex 2 is no child of 0, and a vertex with stored zeros only has no edge to start from
    B = sp.csr_matrix(([1.0, 1, 0, 0], ([0, 1, 0, 2], [1, 0, 2, 0])), shape=(3, 3))
    assert not wb.validate_bfs(B, np.array([0, 0, 0]), source=0).ok
    assert wb.validate_bfs(B, np.array([0, 0, -1]), source=0).ok
    np.testing.assert_array_equal(wb.data.search_keys(B, 3, seed=1), [0, 1])


def test_blockgrid_input_and_no_graph_movement(clients, monkeypatch):
    client = clients(2)
    G = wb.distribute(A_RMAT, client=client, partition="2d", grid=(1, 2), symmetric=True)
    r1 = wb.bfs(G, SRC_RMAT, client=client)
    assert r1.stats["grid"] == (1, 2)
    launched = []
    real = wb.comms.run_spmd

    def spy(fn, *a, **k):
        launched.append(k.get("name"))
        return real(fn, *a, **k)

    monkeypatch.setattr(kb.comms, "run_spmd", spy)
    r2 = wb.bfs(G, SRC_RMAT, client=client, direction="top-down")
    assert launched == ["bfs"]  # the prepared layout is reused: nothing rebuilt or re-sent
    np.testing.assert_array_equal(r1.level, r2.level)


def test_client_never_holds_the_graph(clients, monkeypatch):
    client = clients(2)
    G = wb.data.rmat_distributed(10, edgefactor=8, seed=4, client=client)
    A = wb.data.rmat(10, edgefactor=8, seed=4)  # oracle only
    src = int(wb.data.search_keys(A, 1)[0])
    gathered = []
    real_gather = type(client).gather

    def gather(self, futures, *a, **k):
        out = real_gather(self, futures, *a, **k)
        gathered.extend(out if isinstance(out, list) else [out])
        return out

    monkeypatch.setattr(type(client), "gather", gather)
    monkeypatch.setattr(type(client), "scatter", lambda *a, **k: pytest.fail("bfs scattered data"))
    r = wb.bfs(G, src, client=client)
    np.testing.assert_array_equal(r.level, hops(A, src))
    assert not any(sp.issparse(x) for x in gathered)
    total = sum(wb.comms.nbytes(x) for x in gathered)
    assert total < 40 * A.shape[0] < A.nnz * 12  # parents + levels + stats, not the edges


def test_graph500_validates_every_search(clients):
    g = wb.graph500(8, edgefactor=8, n_roots=5, seed=1, client=clients(2))
    assert len(g.roots) == 5 and g.valid.all()
    A = wb.data.rmat(8, edgefactor=8, seed=1)
    deg = np.diff(A.indptr)
    for k, root in enumerate(g.roots):
        want = deg[hops(A, root) >= 0].sum() // 2
        assert g.edges[k] == want
    st = g.stats
    assert st["min_TEPS"] <= st["median_TEPS"] <= st["max_TEPS"]
    assert st["harmonic_mean_TEPS"] == pytest.approx(len(g.teps) / np.sum(1 / g.teps))
    assert st["construction_seconds"] > 0 and st["generation_seconds"] > 0


def test_graph500_2d_catches_nothing_wrong(clients):
    g = wb.graph500(8, edgefactor=8, n_roots=3, seed=2, client=clients(2), partition="2d", grid=(1, 2))
    assert g.valid.all() and g.stats["grid"] == (1, 2)


def test_validator_rejects_broken_trees():
    A = wb.data.grid_graph((5, 5))
    _, pred = csgraph.breadth_first_order(A, 0, directed=True, return_predecessors=True)
    parent = np.where(pred < 0, -1, pred).astype(np.int64)
    parent[0] = 0
    assert wb.validate_bfs(A, parent, 0).ok  # scipy's tree is a valid result too
    cyc = parent.copy()
    cyc[1], cyc[2] = 2, 1
    assert not wb.validate_bfs(A, cyc, 0).rules[kb._RULES[0]]
    non_edge = parent.copy()
    non_edge[24] = 0  # not a neighbour of 24
    rep = wb.validate_bfs(A, non_edge, 0)
    assert not rep.rules[kb._RULES[4]] and not rep.ok
    short = parent.copy()
    short[24] = -1  # tree misses a vertex of the component
    assert not wb.validate_bfs(A, short, 0).rules[kb._RULES[3]]
    lv = hops(A, 0)
    lv[7] += 1
    assert not wb.validate_bfs(A, parent, 0, level=lv).ok


# Run in a fresh process: the simulator is chosen when numba.cuda is first imported.
_TWINS_UNDER_SIMULATOR = """
import numba
import numpy as np
assert numba.config.ENABLE_CUDASIM
import workbench as wb
from workbench.kernels.bfs import cpu, cuda as dev

A = wb.data.rmat(6, edgefactor=4, seed=3)
n, ptr = A.shape[0], A.indptr.astype(np.int64)
deg = np.diff(ptr)
rng = np.random.default_rng(1)
checked = 0
for idx_t, grids in ((np.int32, [(2, 32), (1, 1), (3, 7)]), (np.int64, [(2, 32)])):
    idx = A.indices.astype(idx_t)
    hub = np.zeros(n, idx_t)
    cpu.row_hubs(ptr, idx, deg, hub)
    visited = rng.random(n) < 0.3
    front = np.flatnonzero(rng.random(n) < 0.2).astype(np.int64)
    fbits = np.zeros(n, bool)
    fbits[front] = True
    packed = np.packbits(fbits)
    cand = np.flatnonzero(deg > 0).astype(idx_t)
    cases = (("top_down", (front,), ()), ("bottom_up", (hub, packed, cand), (np.full(n, -1, idx_t),)))
    for name, ins, extra in cases:
        want_v = visited.copy()
        def queue():  # out_rows, out_par, (keep,) counts
            return [np.full(n, -1, idx_t), np.full(n, -1, idx_t), *[e.copy() for e in extra], np.array([3, 5, 0])]
        want = queue()
        getattr(cpu, name)(ptr, idx, *ins, want_v, *want)
        assert want[-1][0] > 3, "the case discovers nothing"
        for grid in grids:
            got_v = visited.astype(np.int32)
            got = queue()
            getattr(dev, name)[grid](ptr, idx, *ins, got_v, *got)
            ctx = (name, idx_t.__name__, grid)
            np.testing.assert_array_equal(got[-1], want[-1], err_msg=str(ctx))  # queue tail, edges examined, kept
            np.testing.assert_array_equal(got_v.astype(bool), want_v, err_msg=str(ctx))
            rows, par = got[0][3:got[-1][0]], got[1][3:got[-1][0]]
            np.testing.assert_array_equal(np.sort(rows), np.sort(want[0][3:want[-1][0]]), err_msg=str(ctx))
            assert (got[0][:3] == -1).all() and (got[0][got[-1][0]:] == -1).all(), ctx   # nothing outside the queue
            assert all(A[r, p] for r, p in zip(rows, par)) and fbits[par].all(), ctx   # parents: frontier neighbours
            assert not visited[rows].any(), ctx
            if name == "bottom_up":  # the candidates kept: exactly the unvisited rows without a frontier neighbour
                kept = np.sort(got[2][:got[-1][2]])
                np.testing.assert_array_equal(kept, np.sort(want[2][:want[-1][2]]), err_msg=str(ctx))
                assert not want_v[kept].any() and not (A[kept] @ fbits).any() and want[-1][2] > 0, ctx
            checked += 1
print("checked", checked)
"""


def test_cuda_twins_match_cpu_twins_under_simulator():
    """Each numba.cuda twin, launched under numba's CUDA simulator on several grids, discovers the same
    vertices with the same counts as its CPU twin, and every parent it records is a frontier neighbour."""
    run_in_simulator(_TWINS_UNDER_SIMULATOR, "checked 8", timeout=300)


# The device path under numba's CUDA simulator: a few hundred edges, so no launch covers more than ~1e3 items.
A_SIM = sp.block_diag([wb.data.rmat(6, edgefactor=4, seed=3), wb.data.grid_graph((5, 3))], format="csr")
SRC_SIM = int(wb.data.search_keys(A_SIM, 1, seed=1)[0])


def _same_search(r, ref):
    """Equal levels and the same level trace (frontiers, directions, examined edges) as the CPU path's."""
    np.testing.assert_array_equal(r.level, ref.level)
    trace = [(d["frontier"], d["direction"], d["edges_examined"]) for d in r.stats["per_level"]]
    assert trace == [(d["frontier"], d["direction"], d["edges_examined"]) for d in ref.stats["per_level"]]
    for key in ("levels", "edges_traversed", "edges_examined", "grid"):
        assert r.stats[key] == ref.stats[key], key


@pytest.mark.parametrize("n_workers", [1, 2])
def test_gpu_sim_matches_oracle_and_cpu_path(clients, n_workers):
    want = hops(A_SIM, SRC_SIM)
    assert (want >= 0).sum() < A_SIM.shape[0]  # the lattice component stays unreached
    # each twin alone on the 1-D layout; the 2-D layout (fold along processor rows) with the switching rule
    cases = [("1d", None, "top-down"), ("1d", None, "bottom-up"), (*layouts(n_workers)[1], "auto")]
    cpu = clients(n_workers)
    ref = {c: wb.bfs(A_SIM, SRC_SIM, client=cpu, partition=c[0], grid=c[1], direction=c[2]) for c in cases}
    client = clients(n_workers, backend="gpu-sim")
    G = wb.distribute(A_SIM, client=client, symmetric=True)
    for case in cases:
        r = wb.bfs(G, SRC_SIM, client=client, partition=case[0], grid=case[1], direction=case[2])
        assert r.stats["backend"] == "gpu-sim", case
        np.testing.assert_array_equal(r.level, want, err_msg=str(case))
        rep = wb.validate_bfs(A_SIM, r)
        assert rep.ok, (case, rep.messages)
        _same_search(r, ref[case])


def test_gpu_sim_isolated_source_and_graph500(clients):
    client = clients(2, backend="gpu-sim")
    A = sp.block_diag([A_SIM, sp.csr_matrix((1, 1))], format="csr")
    isolated = A.shape[0] - 1
    r = wb.bfs(A, isolated, client=client)
    assert r.stats["backend"] == "gpu-sim" and (r.parent >= 0).sum() == 1 and r.parent[isolated] == isolated
    g = wb.graph500(6, edgefactor=4, n_roots=2, seed=1, client=client)
    assert g.valid.all() and g.stats["backend"] == "gpu-sim"
    A6 = wb.data.rmat(6, edgefactor=4, seed=1)
    deg = np.diff(A6.indptr)
    for k, root in enumerate(g.roots):
        assert g.edges[k] == deg[hops(A6, root) >= 0].sum() // 2


def test_bad_inputs(clients):
    client = clients(2)
    with pytest.raises(ValueError, match="square"):
        wb.bfs(sp.random(4, 5, 0.5, format="csr"), 0, client=client)
    with pytest.raises(ValueError, match="symmetric"):
        wb.bfs(sp.csr_matrix(np.triu(np.ones((4, 4)), 1)), 0, client=client)
    with pytest.raises(ValueError, match="source"):
        wb.bfs(A_RMAT, A_RMAT.shape[0], client=client)
    with pytest.raises(ValueError, match="source"):
        wb.bfs(A_RMAT, -1, client=client)
    with pytest.raises(TypeError, match="source"):
        wb.bfs(A_RMAT, 1.5, client=client)
    with pytest.raises(ValueError, match="direction"):
        wb.bfs(A_RMAT, 0, client=client, direction="sideways")
    with pytest.raises(ValueError, match="partition"):
        wb.bfs(A_RMAT, 0, client=client, partition="3d")
    with pytest.raises(ValueError, match="grid"):
        wb.bfs(A_RMAT, 0, client=client, partition="2d", grid=(2, 2))
    with pytest.raises(ValueError, match="alpha"):
        wb.bfs(A_RMAT, 0, client=client, alpha=0)
    with pytest.raises(TypeError, match="graph"):
        wb.bfs(np.ones((3, 3)), 0, client=client)
    with pytest.raises(ValueError, match="n_roots"):
        wb.graph500(8, n_roots=0, client=client)
    # a distributed graph without a symmetry flag is checked on the workers
    D = wb.distribute(sp.csr_matrix(np.triu(np.ones((6, 6)), 1)), client=client)
    with pytest.raises(ValueError, match="symmetric"):
        wb.bfs(D, 0, client=client)
    S = wb.distribute(wb.data.grid_graph((3, 3)), client=client)
    assert wb.bfs(S, 0, client=client).level.max() == 4 and S.symmetric is True
    # one rule on the host and the workers: the pattern must be symmetric (no integer wrap-around hides a
    # one-way edge), values need not be, a pair stored twice is one edge
    one_way = sp.csr_matrix((np.array([-128, 1, 1], np.int8), ([0, 1, 2], [1, 2, 1])), shape=(4, 4))
    for g in (one_way, wb.distribute(one_way, client=client)):
        with pytest.raises(ValueError, match="symmetric"):
            wb.bfs(g, 1, client=client)
    weighted = sp.csr_matrix(np.array([[0, 1, 0], [2, 0, 1], [0, 1, 0]], dtype=float))
    twice = sp.csr_matrix(([0.5, 0.5, 1.0, 1.0, 1.0], [1, 1, 0, 2, 1], [0, 2, 4, 5]), shape=(3, 3))
    for g in (weighted, twice):
        for graph in (g, wb.distribute(g, client=client)):
            np.testing.assert_array_equal(wb.bfs(graph, 0, client=client).level, [0, 1, 2])


@pytest.mark.parametrize("n", [1, 2, 3])
def test_fewer_vertices_than_workers(clients, n):
    """Ranks without a vertex take part and hold nothing."""
    client = clients(4)
    A = sp.csr_matrix(np.ones((n, n)) - np.eye(n))
    for graph, partition in ((A, "auto"), (wb.distribute(A, client=client), "auto"), (A, "2d")):
        r = wb.bfs(graph, n - 1, client=client, partition=partition)
        np.testing.assert_array_equal(r.level, [1] * (n - 1) + [0])
        assert wb.validate_bfs(A, r).ok
