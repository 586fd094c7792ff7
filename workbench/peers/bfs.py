"""BFS peers: single-node BFS libraries (scipy, igraph, networkit, cugraph) timed
on the same graph and roots as :func:`workbench.graph500` (notebook, benchmark)."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp


def run_peers(A: Any, roots: Any, names: Any = ("scipy", "igraph", "networkit")) -> list[dict]:
    """Time single-node BFS libraries on host graph ``A`` from each root.

    Each peer's graph is built untimed; every search is timed with
    :func:`workbench.bench.measure` after one warm-up search.  TEPS uses the
    same edge count as :func:`graph500` (undirected edges in the traversed
    component, from scipy's traversal order).  CPU peers that are not
    installed are skipped.  ``"scipy"`` is ``csgraph.breadth_first_order(directed=True)``
    on the symmetric CSR (no symmetrisation inside the timed call).
    ``"cugraph"`` (the device peer: ``cugraph.bfs`` on one GPU, each search
    ended by a device synchronisation) gives, when cuGraph, cuDF or a CUDA
    device is missing, one row with NaN times whose ``skipped`` says what.

    Returns
    -------
    list of dict
        One row per (peer, root): ``name``, ``root``, ``seconds``, ``edges``, ``teps``
        (and ``skipped`` for a device peer that could not run: root -1, NaN times).

    Examples
    --------
    >>> A = sp.csr_matrix(np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0]]))
    >>> [(r["name"], r["root"], r["edges"]) for r in run_peers(A, [0], ["scipy"])]
    [('scipy', 0, 2)]
    """
    import scipy.sparse.csgraph as csgraph

    from ..bench import measure

    A = sp.csr_matrix(A)
    deg = np.diff(A.indptr)
    roots = [int(r) for r in roots]
    edges = {r: int(deg[csgraph.breadth_first_order(A, r, directed=True, return_predecessors=False)].sum() // 2)
             for r in roots}
    rows = []
    for name in names:
        if name == "cugraph":
            from ._device import missing
            why = missing("cudf", "cugraph")
            if why is not None:
                rows.append({"name": name, "root": -1, "seconds": np.nan, "edges": 0, "teps": np.nan,
                             "skipped": f"unavailable: {why}"})
                continue
        search = _peer(name, A)
        if search is None:
            continue
        search(roots[0])  # warm-up (lazy init, caches)
        for r in roots:
            t = measure(lambda r=r, f=search: f(r), name=name, warmup=0, repeat=1)
            rows.append({"name": name, "root": r, "seconds": t.median, "edges": edges[r],
                         "teps": edges[r] / t.median})
    return rows


def _peer(name: str, A: sp.csr_matrix) -> Any:
    import importlib.util

    n = A.shape[0]
    if name == "scipy":
        import scipy.sparse.csgraph as csgraph
        return lambda r: csgraph.breadth_first_order(A, r, directed=True, return_predecessors=True)
    coo = sp.triu(A, 1).tocoo()
    if name == "igraph" and importlib.util.find_spec("igraph"):
        import igraph
        g = igraph.Graph(n=n, edges=np.stack([coo.row, coo.col], axis=1), directed=False)
        return lambda r: g.bfs(r)
    if name == "networkit" and importlib.util.find_spec("networkit"):
        import networkit as nk
        g = nk.Graph(n)
        g.addEdges((coo.row.astype(np.uint64), coo.col.astype(np.uint64)))
        return lambda r: nk.distance.BFS(g, r, storePaths=False).run()
    if name == "cugraph" and importlib.util.find_spec("cugraph"):
        import cudf
        import cugraph
        import cupy
        df = cudf.DataFrame({"src": coo.row, "dst": coo.col})
        g = cugraph.Graph(directed=False)
        g.from_cudf_edgelist(df, source="src", destination="dst")

        def search(r):
            out = cugraph.bfs(g, r)
            cupy.cuda.Device().synchronize()  # cuGraph may run on a stream of its own
            return out
        return search
    if name not in ("scipy", "igraph", "networkit", "cugraph"):
        raise ValueError(f"unknown peer {name!r}; use scipy, igraph, networkit or cugraph")
    return None
