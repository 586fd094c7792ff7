"""Bad input stays clear (issue 19, item 5): every kernel, ``wb.distribute`` and ``wb.cluster`` answer
NaN/inf, wrong shapes, wrong dtypes, empty inputs and out-of-range parameters with a ValueError or
TypeError that names the argument.  Checks that are cheap on the client run there, before anything
reaches the cluster (the scheduler sees no new task and no transition); checks that need the data
where it lies (distributed containers, singular systems) run on the workers and still end in one
clear error on the client, without the worker logging the rank as a failed task.  The cluster keeps
all its workers throughout.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp

import workbench as wb

N_WORKERS = 2


def _scheduler_state(dask_scheduler) -> tuple:
    return dask_scheduler.transition_counter, len(dask_scheduler.tasks), tuple(sorted(dask_scheduler.workers))


def _quiet_state(client) -> tuple:
    """The scheduler's (transitions, tasks, workers) once earlier work has settled (futures released by
    other tests reach the scheduler a moment later)."""
    gc.collect()
    last = client.run_on_scheduler(_scheduler_state)
    for _ in range(40):
        time.sleep(0.05)
        now = client.run_on_scheduler(_scheduler_state)
        if now == last:
            return now
        last = now
    return last


def _failed_task_logs(client) -> int:
    return sum("Compute Failed" in msg for logs in client.get_worker_logs().values() for _, msg in logs)


@dataclass
class Case:
    """One bad call: it must raise ``exc`` with a message matching ``names``."""

    id: str
    call: object  # (client, data) -> anything
    exc: type
    names: str    # a regex the message must match: the argument's name
    where: str = "client"  # "client": nothing reaches the cluster; "cluster": found on the workers


@pytest.fixture(scope="module")
def data(clients):
    client = clients(N_WORKERS)
    rng = np.random.default_rng(0)
    A = wb.data.rmat(6, seed=1)                      # 64 vertices, symmetric
    n = A.shape[0]
    directed = sp.triu(A, 1, format="csr")
    X = rng.random((40, 3))
    pts = rng.random((50, 2))
    m = 24
    d = SimpleNamespace(
        A=A, n=n, directed=directed, X=X, pts=pts,
        B=rng.random((n, 3)),
        x3=rng.random((8, 8, 4)),
        tri=(np.full(m - 1, 1.0), np.full(m, 4.0), np.full(m - 1, 1.0), rng.random(m)),
        G=wb.distribute(A, client=client),
        G_directed=wb.distribute(directed, client=client),
        X_nan=wb.distribute(_with(X, (3, 1), np.nan), client=client),
        pts_out=wb.distribute(pts + [0.0, 2.0], client=client),
    )
    d.hold = [A, directed, X, pts]  # the containers' sources stay alive for the module
    return d


def _with(a, where, value):
    a = np.array(a, dtype=np.result_type(a, type(value)))
    a[where] = value
    return a


def _sparse_with(A, value):
    B = A.astype(np.result_type(A.dtype, type(value)))
    B.data[0] = value
    return B


def _singular_tridiag(m=24):
    """Passes every client-side check (finite, no zero row) but is singular: rows 0 and 1 are
    [1, 1, 0, ...] twice, so the elimination meets a zero pivot on the worker."""
    dl, d, du = np.full(m - 1, 0.5), np.full(m, 4.0), np.full(m - 1, 0.5)
    d[:2], du[0], dl[0], du[1] = 1.0, 1.0, 1.0, 0.0
    return dl, d, du, np.ones(m)


def _tri(data, **change):
    dl, dd, du, b = (np.array(a) for a in data.tri)
    arrs = {"dl": dl, "d": dd, "du": du, "b": b}
    arrs.update(change)
    return arrs["dl"], arrs["d"], arrs["du"], arrs["b"]


def _dask(x, chunks):
    import dask.array as da

    return da.from_array(x, chunks=chunks)


def _frame(x):
    """``x`` as a dask DataFrame (a dask collection that is not an array)."""
    import dask.dataframe as dd
    import pandas as pd

    return dd.from_pandas(pd.DataFrame(np.asarray(x).reshape(len(x), -1)), npartitions=2)


def _unknown_chunks(x):
    """``x`` as a dask array whose chunk sizes dask does not know (rows picked by a mask)."""
    a = _dask(x, max(1, len(x) // 3))
    return a[a.reshape(len(x), -1)[:, 0] > -np.inf]


BFS = [
    Case("source=n", lambda c, d: wb.bfs(d.A, d.n, client=c), ValueError, r"\bsource\b"),
    Case("source<0", lambda c, d: wb.bfs(d.A, -1, client=c), ValueError, r"\bsource\b"),
    Case("source-float", lambda c, d: wb.bfs(d.A, 1.5, client=c), TypeError, r"\bsource\b"),
    Case("source-of-container", lambda c, d: wb.bfs(d.G, d.n + 5, client=c), ValueError, r"\bsource\b"),
    Case("non-square", lambda c, d: wb.bfs(d.A[:, :-3], 0, client=c), ValueError, r"\bgraph\b.*square"),
    Case("non-symmetric", lambda c, d: wb.bfs(d.directed, 0, client=c), ValueError, r"\bgraph\b.*symmetric"),
    Case("dense-array", lambda c, d: wb.bfs(d.A.toarray(), 0, client=c), TypeError, r"\bgraph\b"),
    Case("string", lambda c, d: wb.bfs("graph.mtx", 0, client=c), TypeError, r"\bgraph\b"),
    Case("empty", lambda c, d: wb.bfs(sp.csr_matrix((0, 0)), 0, client=c), ValueError, r"\bgraph\b"),
    Case("nan-entry", lambda c, d: wb.bfs(_sparse_with(d.A, np.nan), 0, client=c), ValueError, r"\bgraph\b"),
    Case("inf-entry", lambda c, d: wb.bfs(_sparse_with(d.A, np.inf), 0, client=c), ValueError, r"\bgraph\b"),
    Case("complex", lambda c, d: wb.bfs(d.A.astype(complex), 0, client=c), TypeError, r"\bgraph\b"),
    Case("partition", lambda c, d: wb.bfs(d.A, 0, partition="3d", client=c), ValueError, r"\bpartition\b"),
    Case("direction", lambda c, d: wb.bfs(d.A, 0, direction="up", client=c), ValueError, r"\bdirection\b"),
    Case("alpha<0", lambda c, d: wb.bfs(d.A, 0, alpha=-1.0, client=c), ValueError, r"\balpha\b"),
    Case("grid", lambda c, d: wb.bfs(d.A, 0, partition="2d", grid=(3, 3), client=c), ValueError, r"\bgrid\b"),
    Case("container-non-symmetric", lambda c, d: wb.bfs(d.G_directed, 0, client=c), ValueError,
         r"\bgraph\b.*symmetric", where="cluster"),
    # a bool is an int to isinstance: alpha=True and grid=(True, 2) ran as 1
    Case("alpha-bool", lambda c, d: wb.bfs(d.A, 0, alpha=True, client=c), ValueError, r"\balpha\b"),
    Case("grid-bool", lambda c, d: wb.bfs(d.A, 0, partition="2d", grid=(True, 2), client=c), ValueError,
         r"\bgrid\b"),
    Case("client-str", lambda c, d: wb.bfs(d.A, 0, client="x"), TypeError, r"\bclient\b"),
    Case("graph500-n_roots-bool", lambda c, d: wb.graph500(6, n_roots=True, client=c), TypeError, r"\bn_roots\b"),
    Case("graph500-validate-str", lambda c, d: wb.graph500(6, validate="no", client=c), TypeError,
         r"\bvalidate\b"),
    # a scale-6 graph labelled scale 7 in the result
    Case("graph500-scale", lambda c, d: wb.graph500(7, graph=d.G, client=c), ValueError, r"\bgraph\b.*\bscale\b"),
    Case("validate_bfs-none", lambda c, d: wb.validate_bfs(d.A, None, 0), TypeError, r"\bresult\b"),
    Case("validate_bfs-level", lambda c, d: wb.validate_bfs(d.A, np.zeros(d.n, int), 0, level=np.zeros(3, int)),
         ValueError, r"\blevel\b"),
]

COLOR = [
    Case("non-square", lambda c, d: wb.color(d.A[:, :-3], client=c), ValueError, r"\bgraph\b.*square"),
    Case("non-symmetric", lambda c, d: wb.color(d.directed, client=c), ValueError, r"\bgraph\b.*symmetric"),
    Case("dense-array", lambda c, d: wb.color(d.A.toarray(), client=c), TypeError, r"\bgraph\b"),
    Case("string", lambda c, d: wb.color("graph", client=c), TypeError, r"\bgraph\b"),
    Case("empty", lambda c, d: wb.color(sp.csr_matrix((0, 0)), client=c), ValueError, r"\bgraph\b"),
    Case("nan-entry", lambda c, d: wb.color(_sparse_with(d.A, np.nan), client=c), ValueError, r"\bgraph\b"),
    Case("complex", lambda c, d: wb.color(d.A.astype(complex), client=c), TypeError, r"\bgraph\b"),
    Case("distance=3", lambda c, d: wb.color(d.A, distance=3, client=c), ValueError, r"\bdistance\b"),
    Case("tie_break", lambda c, d: wb.color(d.A, tie_break="coin", client=c), ValueError, r"\btie_break\b"),
    Case("max_rounds=0", lambda c, d: wb.color(d.A, max_rounds=0, client=c), ValueError, r"\bmax_rounds\b"),
    Case("container-non-symmetric", lambda c, d: wb.color(d.G_directed, client=c), ValueError,
         r"\bgraph\b.*symmetric", where="cluster"),
]

KNN = [
    Case("k=n", lambda c, d: wb.knn_graph(d.X, len(d.X), client=c), ValueError, r"\bk\b"),
    Case("k=0", lambda c, d: wb.knn_graph(d.X, 0, client=c), ValueError, r"\bk\b"),
    Case("k-float", lambda c, d: wb.knn_graph(d.X, 3.0, client=c), TypeError, r"\bk\b"),
    Case("nan", lambda c, d: wb.knn_graph(_with(d.X, (3, 1), np.nan), 3, client=c), ValueError, r"\bX\b.*NaN"),
    Case("inf", lambda c, d: wb.knn_graph(_with(d.X, (5, 0), -np.inf), 3, client=c), ValueError, r"\bX\b"),
    Case("1-d", lambda c, d: wb.knn_graph(d.X[:, 0], 3, client=c), ValueError, r"\bX\b"),
    Case("strings", lambda c, d: wb.knn_graph(d.X.astype(str), 3, client=c), TypeError, r"\bX\b"),
    Case("complex", lambda c, d: wb.knn_graph(d.X.astype(complex), 3, client=c), TypeError, r"\bX\b"),
    Case("empty", lambda c, d: wb.knn_graph(np.zeros((0, 3)), 1, client=c), ValueError, r"\bX\b|\bn\b"),
    Case("no-columns", lambda c, d: wb.knn_graph(np.zeros((10, 0)), 1, client=c), ValueError, r"\bX\b"),
    Case("metric", lambda c, d: wb.knn_graph(d.X, 3, metric="manhattan", client=c), ValueError, r"\bmetric\b"),
    Case("dask-strings", lambda c, d: wb.knn_graph(_dask(d.X.astype(str), 20), 3, client=c), TypeError, r"\bX\b"),
    Case("container-nan", lambda c, d: wb.knn_graph(d.X_nan, 3, client=c), ValueError, r"\bX\b.*NaN",
         where="cluster"),
    Case("unknown-chunks", lambda c, d: wb.knn_graph(_unknown_chunks(d.X), 3, client=c), ValueError,
         r"\bX\b.*unknown chunk sizes"),
    Case("sparse", lambda c, d: wb.knn_graph(sp.csr_matrix(d.X), 3, client=c), TypeError, r"\bX\b"),
    # indices past n gave recall 0.0; a float reference was taken as indices
    Case("reference-range", lambda c, d: wb.knn_graph(d.X, 3, reference=np.full((40, 3), 999), client=c),
         ValueError, r"\breference\b"),
    Case("reference-float", lambda c, d: wb.knn_graph(d.X, 3, reference=np.zeros((40, 3)), client=c), TypeError,
         r"\breference\b"),
    Case("seed-float", lambda c, d: wb.knn_graph(d.X, 3, seed=1.5, client=c), TypeError, r"\bseed\b"),
    Case("seed<0", lambda c, d: wb.knn_graph(d.X, 3, seed=-1, client=c), ValueError, r"\bseed\b"),
    Case("reverse-str", lambda c, d: wb.knn_graph(d.X, 3, reverse="x", client=c), TypeError, r"\breverse\b"),
]

_W = (0, 1, 0, 1)
RIPLEY = [
    Case("dask-dataframe", lambda c, d: wb.ripley_k(_frame(d.pts), [0.1], window=_W, client=c), TypeError,
         r"\bpoints\b.*to_dask_array"),
    Case("unknown-chunks", lambda c, d: wb.ripley_k(_unknown_chunks(d.pts), [0.1], window=_W, client=c), ValueError,
         r"\bpoints\b.*unknown chunk sizes"),
    Case("negative-radii", lambda c, d: wb.ripley_k(d.pts, [-0.1, 0.1], window=_W, client=c), ValueError,
         r"\bradii\b"),
    Case("unsorted-radii", lambda c, d: wb.ripley_k(d.pts, [0.2, 0.1], window=_W, client=c), ValueError,
         r"\bradii\b"),
    Case("nan-radii", lambda c, d: wb.ripley_k(d.pts, [0.1, np.nan], window=_W, client=c), ValueError, r"\bradii\b"),
    Case("string-radii", lambda c, d: wb.ripley_k(d.pts, ["0.1", "0.2"], window=_W, client=c), TypeError,
         r"\bradii\b"),
    Case("complex-radii", lambda c, d: wb.ripley_k(d.pts, np.array([0.1, 0.2], complex), window=_W, client=c),
         TypeError, r"\bradii\b"),
    Case("bool-radii", lambda c, d: wb.ripley_k(d.pts, [False, True], window=_W, client=c), TypeError,
         r"\bradii\b"),
    Case("string-window", lambda c, d: wb.ripley_k(d.pts, [0.1], window=("0", "1", "0", "1"), client=c), TypeError,
         r"\bwindow\b"),
    Case("string-times", lambda c, d: wb.ripley_k(d.pts, [0.1], window=_W, times=np.full(len(d.pts), "1"),
                                                  time_window=(0, 2), time_radii=[0.5], client=c), TypeError,
         r"\btimes\b"),
    Case("empty-radii", lambda c, d: wb.ripley_k(d.pts, [], window=_W, client=c), ValueError, r"\bradii\b"),
    Case("outside-window", lambda c, d: wb.ripley_k(d.pts + 1.0, [0.1], window=_W, client=c), ValueError,
         r"\bwindow\b"),
    Case("nan-points", lambda c, d: wb.ripley_k(_with(d.pts, (3, 0), np.nan), [0.1], window=_W, client=c),
         ValueError, r"\bpoints\b"),
    Case("inf-points", lambda c, d: wb.ripley_k(_with(d.pts, (4, 1), np.inf), [0.1], window=_W, client=c),
         ValueError, r"\bpoints\b"),
    Case("3-columns", lambda c, d: wb.ripley_k(d.X, [0.1], window=_W, client=c), ValueError, r"\bpoints\b"),
    Case("string-points", lambda c, d: wb.ripley_k(d.pts.astype(str), [0.1], window=_W, client=c), TypeError,
         r"\bpoints\b"),
    Case("complex-points", lambda c, d: wb.ripley_k(d.pts.astype(complex), [0.1], window=_W, client=c), TypeError,
         r"\bpoints\b"),
    Case("empty-points", lambda c, d: wb.ripley_k(np.zeros((0, 2)), [0.1], window=_W, client=c), ValueError,
         r"\bpoints\b"),
    Case("window-reversed", lambda c, d: wb.ripley_k(d.pts, [0.1], window=(1, 0, 0, 1), client=c), ValueError,
         r"\bwindow\b"),
    Case("window-short", lambda c, d: wb.ripley_k(d.pts, [0.1], window=(0, 1), client=c), ValueError,
         r"\bwindow\b"),
    Case("edge_correction", lambda c, d: wb.ripley_k(d.pts, [0.1], window=_W, edge_correction="ripley", client=c),
         ValueError, r"\bedge_correction\b"),
    Case("container-outside-window", lambda c, d: wb.ripley_k(d.pts_out, [0.1], window=_W, client=c), ValueError,
         r"\bwindow\b", where="cluster"),
]

SPMM = [
    Case("dask-dataframe-B", lambda c, d: wb.spmm(d.A, _frame(d.B), client=c), TypeError, r"\bB\b.*to_dask_array"),
    Case("inner-dims", lambda c, d: wb.spmm(d.A, d.B[:-1], client=c), ValueError, r"\bA\b.*\bB\b"),
    Case("nan-B", lambda c, d: wb.spmm(d.A, _with(d.B, (2, 2), np.nan), client=c), ValueError, r"\bB\b"),
    Case("inf-A", lambda c, d: wb.spmm(_sparse_with(d.A, np.inf), d.B, client=c), ValueError, r"\bA\b"),
    Case("string-B", lambda c, d: wb.spmm(d.A, d.B.astype(str), client=c), TypeError, r"\bB\b"),
    Case("complex-B", lambda c, d: wb.spmm(d.A, d.B.astype(complex), client=c), TypeError, r"\bB\b"),
    Case("complex-A", lambda c, d: wb.spmm(d.A.astype(complex), d.B, client=c), TypeError, r"\bA\b"),
    Case("1-d-B", lambda c, d: wb.spmm(d.A, d.B[:, 0], client=c), ValueError, r"\bB\b"),
    Case("B-no-columns", lambda c, d: wb.spmm(d.A, np.zeros((d.n, 0)), client=c), ValueError, r"\bB\b"),
    Case("A-no-rows", lambda c, d: wb.spmm(sp.csr_matrix((0, d.n)), d.B, client=c), ValueError, r"\bA\b"),
    Case("dense-A", lambda c, d: wb.spmm(d.A.toarray(), d.B, client=c), TypeError, r"\bA\b"),
    Case("algorithm", lambda c, d: wb.spmm(d.A, d.B, algorithm="fastest", client=c), ValueError, r"\balgorithm\b"),
    Case("dask-B-nan", lambda c, d: wb.spmm(d.G, _dask(_with(d.B, (7, 1), np.nan), (32, 3)), client=c),
         ValueError, r"\bB\b", where="cluster"),
    Case("seed-str", lambda c, d: wb.spmm(d.A, d.B, seed="a", client=c), TypeError, r"\bseed\b"),
    Case("return_stats-str", lambda c, d: wb.spmm(d.A, d.B, return_stats="x", client=c), TypeError,
         r"\breturn_stats\b"),
    Case("spgemm-empty", lambda c, d: wb.spgemm(sp.csr_matrix((0, 20)), sp.csr_matrix((20, 4)), client=c),
         ValueError, r"\bA\b.*empty"),
]

TRIDIAG = [
    Case("dask-dataframe-b", lambda c, d: wb.tridiag_solve(*_tri(d)[:3], _frame(d.tri[3]), client=c), TypeError,
         r"\bb\b.*to_dask_array"),
    Case("nan-d", lambda c, d: wb.tridiag_solve(*_tri(d, d=_with(d.tri[1], 3, np.nan)), client=c), ValueError,
         r"\bd\b"),
    Case("inf-b", lambda c, d: wb.tridiag_solve(*_tri(d, b=_with(d.tri[3], 7, np.inf)), client=c), ValueError,
         r"\bb\b"),
    Case("inf-dl", lambda c, d: wb.tridiag_solve(*_tri(d, dl=_with(d.tri[0], 0, -np.inf)), client=c), ValueError,
         r"\bdl\b"),
    Case("short-dl", lambda c, d: wb.tridiag_solve(*_tri(d, dl=d.tri[0][:-1]), client=c), ValueError, r"\bdl\b"),
    Case("short-b", lambda c, d: wb.tridiag_solve(*_tri(d, b=d.tri[3][:-1]), client=c), ValueError, r"\bb\b"),
    Case("complex-d", lambda c, d: wb.tridiag_solve(*_tri(d, d=d.tri[1].astype(complex)), client=c), TypeError,
         r"\bd\b"),
    Case("string-du", lambda c, d: wb.tridiag_solve(*_tri(d, du=d.tri[2].astype(str)), client=c), TypeError,
         r"\bdu\b"),
    Case("empty", lambda c, d: wb.tridiag_solve(*(np.zeros(0),) * 4, client=c), ValueError, r"\bd\b"),
    Case("zero-row", lambda c, d: wb.tridiag_solve(*_tri(d, d=_with(d.tri[1], 0, 0.0), du=_with(d.tri[2], 0, 0.0)),
                                                   client=c), ValueError, r"singular"),
    Case("reduced", lambda c, d: wb.tridiag_solve(*d.tri, reduced="approx", client=c), ValueError, r"\breduced\b"),
    Case("periodic-str", lambda c, d: wb.tridiag_solve(*d.tri, periodic="yes", client=c), TypeError,
         r"\bperiodic\b"),
    Case("singular-on-workers", lambda c, d: wb.tridiag_solve(*_singular_tridiag(), client=c), ValueError,
         r"singular", where="cluster"),
    Case("dask-nan-on-workers", lambda c, d: wb.tridiag_solve(
        *(_dask(a, 12) for a in _tri(d)[:3]), _dask(_with(d.tri[3], 20, np.nan), 12), client=c), ValueError,
         r"\bb\b", where="cluster"),
    Case("unknown-chunks", lambda c, d: wb.tridiag_solve(*(_dask(a, 12) for a in _tri(d)[:3]),
                                                         _unknown_chunks(d.tri[3]), client=c),
         ValueError, r"\bb\b.*unknown chunk sizes"),
    Case("ragged", lambda c, d: wb.tridiag_solve(np.ones(1), [[1.0, 2.0], [3.0]], np.ones(1), np.ones(2),
                                                 client=c), ValueError, r"\bd\b"),
    Case("compact-order-bool", lambda c, d: wb.compact_derivative(d.tri[3], 0.1, order=True, client=c), TypeError,
         r"\border\b"),
    Case("compact-unknown-chunks", lambda c, d: wb.compact_derivative(_unknown_chunks(d.tri[3]), 0.1, client=c),
         ValueError, r"\bf\b.*unknown chunk sizes"),
]

FFT = [
    Case("dask-dataframe", lambda c, d: wb.fftn(_frame(d.x3[:, :, 0]), client=c), TypeError, r"\bx\b.*to_dask_array"),
    Case("axes", lambda c, d: wb.fftn(d.x3, axes=(0, 5), client=c), ValueError, r"\baxes\b"),
    Case("axes-repeated", lambda c, d: wb.fftn(d.x3, axes=(0, 0), client=c), ValueError, r"\baxes\b"),
    Case("norm", lambda c, d: wb.fftn(d.x3, norm="unitary", client=c), ValueError, r"\bnorm\b"),
    Case("strings", lambda c, d: wb.fftn(d.x3.astype(str), client=c), (TypeError, ValueError), r"\bx\b"),
    Case("empty", lambda c, d: wb.fftn(np.zeros((0, 4, 4)), client=c), ValueError, r"\bx\b|points"),
    Case("unknown-chunks", lambda c, d: wb.fftn(_dask(d.x3.ravel(), 64)[_dask(d.x3.ravel(), 64) > 0.5], client=c),
         ValueError, r"\bx\b.*unknown chunk sizes"),
    Case("s<0", lambda c, d: wb.fftn(d.x3, s=(-1, 8, 4), client=c), ValueError, r"\bs\b"),
    Case("s-length", lambda c, d: wb.fftn(d.x3, s=(8, 8), axes=(0, 1, 2), client=c), ValueError, r"\bs\b"),
    Case("s-float", lambda c, d: wb.fftn(d.x3, s=(8.5, 8, 4), client=c), TypeError, r"\bs\b"),   # numpy's too
    Case("grid-int", lambda c, d: wb.fftn(d.x3, grid=2, client=c), TypeError, r"\bgrid\b"),
    Case("grid-str", lambda c, d: wb.fftn(d.x3, grid=("a",), client=c), TypeError, r"\bgrid\b"),
    Case("ragged", lambda c, d: wb.fftn([[1.0, 2.0], [3.0]], client=c), ValueError, r"\bx\b"),
    Case("s-string", lambda c, d: wb.rfftn(d.x3, s="88", axes=(0, 1), client=c), TypeError, r"\bs\b"),
    Case("scalar", lambda c, d: wb.ifftn(np.float64(1.0), client=c), ValueError, r"\bx\b"),
    Case("ifftn-strings", lambda c, d: wb.ifftn(d.x3.astype(str), client=c), (TypeError, ValueError), r"\bx\b"),
    Case("decomposition", lambda c, d: wb.fftn(d.x3, decomposition="cubes", client=c), ValueError,
         r"\bdecomposition\b"),
    Case("workers", lambda c, d: wb.fftn(d.x3, workers=["tcp://10.255.255.1:1"], client=c), ValueError,
         r"\bworkers\b"),
]

DISTRIBUTE = [
    Case("dask-dataframe", lambda c, d: wb.distribute(_frame(d.X), client=c), TypeError, r"\bobj\b.*to_dask_array"),
    Case("string", lambda c, d: wb.distribute("matrix.mtx", client=c), TypeError, r"\bobj\b"),
    Case("none", lambda c, d: wb.distribute(None, client=c), TypeError, r"\bobj\b"),
    Case("scalar", lambda c, d: wb.distribute(np.float64(3.0), client=c), ValueError, r"\bobj\b"),
    Case("string-array", lambda c, d: wb.distribute(d.X.astype(str), client=c), TypeError, r"\bobj\b"),
    Case("empty", lambda c, d: wb.distribute(np.zeros((0, 3)), client=c), ValueError, r"\bobj\b"),
    Case("partition", lambda c, d: wb.distribute(d.X, partition="3d", client=c), ValueError, r"\bpartition\b"),
    Case("replicas=0", lambda c, d: wb.distribute(d.X, replicas=0, client=c), ValueError, r"\breplicas\b"),
    Case("replicas>workers", lambda c, d: wb.distribute(d.X, replicas=N_WORKERS + 1, client=c), ValueError,
         r"\breplicas\b"),
    Case("n_parts=0", lambda c, d: wb.distribute(d.X, n_parts=0, client=c), ValueError, r"\bn_parts\b"),
    Case("grid-too-large", lambda c, d: wb.distribute(d.X, partition="2d", grid=(3, 3), client=c), ValueError,
         r"\bgrid\b"),
    Case("grid-sparse", lambda c, d: wb.distribute(d.A, partition="2d", grid=(2, 0), client=c), ValueError,
         r"\bgrid\b"),
    Case("unknown-keyword", lambda c, d: wb.distribute(d.X, client=c, foo=1), TypeError, r"distribute\(\).*\bfoo\b"),
    # these were accepted and ignored, or said only numpy's words
    Case("dask-partition-3d", lambda c, d: wb.distribute(_dask(np.ones((6, 2)), 3), client=c, partition="3d"),
         ValueError, r"\bpartition\b"),
    Case("dense-symmetric-claim", lambda c, d: wb.distribute(np.triu(np.ones((4, 4))), client=c, symmetric=True),
         ValueError, r"\bsymmetric=True\b"),
    Case("dense-symmetric-not-square", lambda c, d: wb.distribute(np.ones((4, 3)), client=c, symmetric=True),
         ValueError, r"\bsymmetric\b.*square"),
    Case("2d-n_parts", lambda c, d: wb.distribute(np.ones((6, 2)), client=c, partition="2d", n_parts=5),
         ValueError, r"\bn_parts\b"),
    Case("ragged-list", lambda c, d: wb.distribute([[1.0, 2.0], [3.0]], client=c), ValueError, r"\bobj\b.*ragged"),
    Case("owner_of-out-of-range", lambda c, d: wb.distribute(np.ones((6, 2)), client=c).owner_of([6]), IndexError,
         r"outside 0\.\.5", where="cluster"),
    Case("unknown-worker", lambda c, d: wb.distribute(d.X, workers=["tcp://10.255.255.1:1"], client=c),
         ValueError, r"\bworkers\b"),
    # the caller's word on symmetry is checked once, where the blocks are (coloring trusted it: an invalid
    # coloring of a directed path)
    Case("symmetric-wrong", lambda c, d: wb.distribute(d.directed, symmetric=True, client=c), ValueError,
         r"\bsymmetric\b", where="cluster"),
    Case("symmetric-wrong-2d", lambda c, d: wb.distribute(d.A, partition="2d", symmetric=False, client=c),
         ValueError, r"\bsymmetric\b", where="cluster"),
]

DATA = [
    # a float or bool seed was truncated to another graph's seed
    Case("rmat-seed-float", lambda c, d: wb.data.rmat(6, seed=1.5), ValueError, r"\bseed\b"),
    Case("rmat-seed-bool", lambda c, d: wb.data.rmat(6, seed=True), ValueError, r"\bseed\b"),
    Case("rmat-seed<0", lambda c, d: wb.data.rmat(6, seed=-1), ValueError, r"\bseed\b"),
    Case("rmat-scale", lambda c, d: wb.data.rmat(6.0), ValueError, r"\bscale\b"),
    # refused at once: it ran for minutes before running out of memory
    Case("rmat-too-big", lambda c, d: wb.data.rmat(40), ValueError, r"\bscale=40\b.*GiB"),
    Case("rmat_distributed-seed", lambda c, d: wb.data.rmat_distributed(6, seed=0.5, client=c), ValueError,
         r"\bseed\b"),
    Case("graph500-seed", lambda c, d: wb.graph500(6, seed=0.5, client=c), ValueError, r"\bseed\b"),
    Case("grid-float", lambda c, d: wb.data.grid_graph((2.5, 2)), ValueError, r"\bshape\b"),
    Case("grid-zero", lambda c, d: wb.data.grid_graph((0, 2)), ValueError, r"\bshape\b"),
    Case("grid-4d", lambda c, d: wb.data.grid_graph((2, 2, 2, 2)), ValueError, r"\bshape\b"),
    Case("search_keys-n", lambda c, d: wb.data.search_keys(d.A, -1), ValueError, r"\bn\b"),
    Case("random_sparse-seed", lambda c, d: wb.data.random_sparse((4, 4), 0.5, seed=2.0), ValueError,
         r"\bseed\b"),
    Case("random_sparse-dtype", lambda c, d: wb.data.random_sparse((4, 4), 0.5, dtype="foo"), TypeError,
         r"\bdtype\b"),
    Case("grid-periodic-str", lambda c, d: wb.data.grid_graph((3, 3), periodic="y"), TypeError, r"\bperiodic\b"),
    Case("search_keys-none", lambda c, d: wb.data.search_keys(None, 2), TypeError, r"\bdegrees_or_graph\b"),
    # an unknown address ran the generator elsewhere
    Case("rmat_distributed-workers", lambda c, d: wb.data.rmat_distributed(4, workers=["tcp://10.255.255.1:1"],
                                                                          client=c), ValueError, r"\bworkers\b"),
    Case("rmat_distributed-no-workers", lambda c, d: wb.data.rmat_distributed(4, workers=[], client=c), ValueError,
         r"\bworkers\b"),
]

CLUSTER = [
    Case("backend", lambda c, d: wb.cluster("tpu"), ValueError, r"\bbackend\b"),
    Case("n_workers=0", lambda c, d: wb.cluster("cpu", n_workers=0), ValueError, r"\bn_workers\b"),
    Case("n_workers-str", lambda c, d: wb.cluster("cpu", n_workers="2"), (TypeError, ValueError), r"\bn_workers\b"),
    Case("threads=0", lambda c, d: wb.cluster("cpu", threads_per_worker=0), ValueError, r"\bthreads_per_worker\b"),
    Case("quiet-str", lambda c, d: wb.cluster("cpu", quiet="x"), TypeError, r"\bquiet\b"),
    # passed on, it only said "Nanny failed to start" from the worker process
    Case("unknown-option", lambda c, d: wb.cluster("cpu", n_workers=1, foo=1), TypeError, r"\bfoo\b"),
    # distributed waits for a missing scheduler file with no timeout
    Case("scheduler_file-missing", lambda c, d: wb.cluster(scheduler_file="/nonexistent/scheduler.json"),
         FileNotFoundError, r"\bscheduler_file\b"),
    # threads of this process would run the CPU kernels while the client reads "gpu-sim"
    Case("gpu-sim-threads", lambda c, d: wb.cluster("gpu-sim", n_workers=1, processes=False).start(), ValueError,
         r"\bprocesses\b"),
]

TABLE = {"bfs": BFS, "color": COLOR, "knn_graph": KNN, "ripley_k": RIPLEY, "spmm": SPMM,
         "tridiag_solve": TRIDIAG, "fftn": FFT, "distribute": DISTRIBUTE, "data": DATA,
         "cluster": CLUSTER}


#: Whether the cluster may still be busy with earlier work (other modules' releases, a case that ran there).
_settle = {"needed": True}


@pytest.mark.parametrize("case", [pytest.param(c, id=f"{k}-{c.id}") for k, cs in TABLE.items() for c in cs])
def test_bad_input_is_named(clients, data, case):
    client = clients(N_WORKERS)
    # a client-side case leaves nothing behind, so only the first case and those after cluster cases wait
    before = _quiet_state(client) if _settle["needed"] else client.run_on_scheduler(_scheduler_state)
    _settle["needed"] = True
    logged = _failed_task_logs(client) if case.where == "cluster" else 0
    with pytest.raises(case.exc, match=case.names):
        case.call(client, data)
    after = client.run_on_scheduler(_scheduler_state)
    assert after[2] == before[2], "the cluster lost or changed workers"
    if case.where == "client":
        assert after[:2] == before[:2], "the check ran after work was sent to the cluster"
        _settle["needed"] = False
    else:
        # one error on the client: the ranks' failure is not also logged as a failed task
        _quiet_state(client)  # the ranks a failed rank aborted end a moment later
        assert _failed_task_logs(client) == logged


def test_the_cluster_still_works_afterwards(clients, data):
    client = clients(N_WORKERS)
    r = wb.bfs(data.G, 0, client=client)
    assert r.level[0] == 0 and wb.validate_bfs(data.A, r, 0).ok
    assert len(client.run(lambda: 1)) == N_WORKERS


#: Client-side cases that compare an argument with the cluster's workers: they need one.
_NEED_WORKERS = {"bfs-grid", "distribute-replicas>workers", "distribute-grid-too-large", "distribute-unknown-worker",
                 "fftn-workers", "data-rmat_distributed-workers", "data-rmat_distributed-no-workers"}


@pytest.mark.parametrize("case", [pytest.param(c, id=f"{k}-{c.id}") for k, cs in TABLE.items() if k != "cluster"
                                  for c in cs if c.where == "client" and f"{k}-{c.id}" not in _NEED_WORKERS])
def test_bad_input_is_named_without_a_client(clients, data, case, monkeypatch):
    """The client-side checks come first: with no Dask client at all the error still names the argument
    (not the missing client)."""
    import distributed

    def no_client():
        raise ValueError("No clients found")

    monkeypatch.setattr(distributed, "get_client", no_client)
    with pytest.raises(case.exc, match=case.names):
        case.call(None, data)
