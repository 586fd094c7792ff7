"""Compile the kernels' numba code into the on-disk cache ahead of the tests that call them.

``conftest.py`` starts this in a background process when a session runs most of the suite.  On a fresh
clone nothing is cached yet, and each worker process of each test cluster compiles every kernel it runs
(the fused tridiagonal pass alone takes ~12 s, and a 3-worker test compiles it three times at once).
This process does the compiling first, in the order the test modules come, on the core the suite leaves
idle; the tests' workers then load each kernel from the cache in well under a second.  It only warms a
cache: whatever it does not reach, the tests compile as before, and a failure here fails nothing.

    python tests/_warm_kernels.py
"""

from __future__ import annotations

import sys
import time
import traceback

import numpy as np

import workbench as wb


def graphs(client) -> None:
    A = wb.data.rmat(10, seed=1)
    G = wb.distribute(A, client=client)
    wb.bfs(G, source=0, client=client)
    wb.color(G, distance=1, client=client)
    wb.color(G, distance=2, client=client)


def fft(client) -> None:
    x = np.random.default_rng(0).random((16, 16, 16))
    wb.fftn(x, client=client)


def knn(client) -> None:
    from workbench.kernels.knn import gaussian_mixture
    wb.knn_graph(gaussian_mixture(2000, 8, 10, seed=0), k=8, client=client)


def ripley(client) -> None:
    pts = np.random.default_rng(3).random((2000, 2))
    wb.ripley_k(pts, np.linspace(0.01, 0.1, 8), window=(0, 1, 0, 1), client=client)


def spmm(client) -> None:
    import dask.array as da
    A = wb.data.rmat(10, seed=4).astype(np.float64)
    Ad = wb.distribute(A, client=client)
    B = np.random.default_rng(4).random((A.shape[1], 16))
    wb.spmm(Ad, B, client=client).compute()
    wb.spmm(Ad, da.from_array(B, chunks=(A.shape[1] // 2, 16)), client=client).compute()


def tridiag(client) -> None:
    from workbench.kernels.tridiag import gtsv_system, thomas_reference
    # the fused pass needs ~800 rows a rank; gtsv layout chunked along n and along the batch, line-major
    for kw in ({}, {"along": "batch"}, {"axis": 0}):
        system = gtsv_system(2048, 64, seed=1, client=client, **kw)
        wb.tridiag_solve(*system, client=client, **({"axis": 0} if "axis" in kw else {})).compute()
    both = [a.rechunk((32, 1024)) for a in gtsv_system(2048, 64, seed=1, client=client)]
    wb.tridiag_solve(*both, client=client).compute()
    # chunk edges off the ranks' edges: the answer's blocks have room for rows the neighbours pass
    skew = [a.rechunk((64, (700, a.shape[1] - 700))) for a in gtsv_system(2047, 64, seed=1, client=client)]
    wb.tridiag_solve(*skew, client=client).compute()
    # host data, long and short lines (a 256-row line in halves: still the fused pass), and reduced="exact"
    # (two passes); the serial reference
    for n, batch in ((2048, 16), (4096, None), (256, 16), (512, None)):
        host = [np.asarray(a) for a in gtsv_system(n, batch, seed=2, client=client)]
        wb.tridiag_solve(*host, client=client).compute()
        wb.tridiag_solve(*host, reduced="exact", client=client).compute()
        thomas_reference(*host)
    # several right-hand sides, a batch narrower than a vector tile, a periodic line
    dl, d, du, b = (np.asarray(a) for a in gtsv_system(512, None, seed=4, client=client))
    wb.tridiag_solve(dl, d, du, np.stack([b, 2 * b], axis=-1), client=client).compute()
    wb.tridiag_solve(*(np.asarray(a) for a in gtsv_system(512, 4, seed=5, client=client)), client=client).compute()
    wb.tridiag_solve(np.r_[dl[:1], dl], d, np.r_[du, du[:1]], b, periodic=True, client=client).compute()
    f = np.sin(np.linspace(0, 6, 16 * 4096)).reshape(16, 4096)
    wb.compact_derivative(f, 6 / 4095, client=client).compute()


def main() -> int:
    failed = 0
    with wb.cluster(n_workers=2, quiet=True) as client:
        for warm in (graphs, fft, knn, ripley, spmm, tridiag):   # the test modules' order
            t = time.perf_counter()
            try:
                warm(client)
            except Exception:
                failed += 1
                traceback.print_exc()
            print(f"{warm.__name__}: {time.perf_counter() - t:.1f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
