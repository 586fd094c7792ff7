"""kNN-graph peers on the device: cuVS's brute force when ``cuvs`` imports, else
a cupy brute force in query tiles (squared norms + one GEMM per tile +
``argpartition``), each the exact k nearest neighbours of every point with
itself excluded, as :func:`workbench.knn_graph` returns them.

The brute force is written against the array namespace, so the same code runs
on numpy (the tests check it there against an independent oracle).

Examples
--------
>>> import numpy as np
>>> X = np.array([[0.0, 0.0], [1.0, 0.0], [3.0, 0.0], [7.0, 0.0]])
>>> idx, dist = brute_force_knn(X, 1)
>>> idx.ravel().tolist(), dist.ravel().tolist()
([1, 0, 1, 2], [1.0, 1.0, 2.0, 4.0])
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..backend import namespace
from ._device import memory_short, missing, release, timed_row, unavailable_row

__all__ = ["query_tiles", "drop_self", "brute_force_knn", "device_knn"]

#: Default device memory for one query tile's distances and argpartition output.
TILE_BYTES = 1 << 30
#: Rows the cupy brute force times when not told (cupy's argpartition sorts each
#: row whole, so all n rows of a large set would take minutes); scaled to n.
CUPY_MAX_QUERIES = 1 << 16


def query_tiles(n_queries: int, n_points: int, *, itemsize: int = 4,
                budget_bytes: int = TILE_BYTES) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` covering ``range(n_queries)`` in tiles whose
    distance block (``rows x n_points`` of ``itemsize`` bytes) and int64
    argpartition result fit in ``budget_bytes`` (at least one row per tile).

    Examples
    --------
    >>> query_tiles(10, 100, itemsize=4, budget_bytes=4 * 1200)
    [(0, 4), (4, 8), (8, 10)]
    """
    if n_queries < 0 or n_points < 1:
        raise ValueError(f"n_queries must be >= 0 and n_points >= 1, got {n_queries} and {n_points}")
    rows = max(1, int(budget_bytes) // (int(n_points) * (int(itemsize) + 8)))
    return [(s, min(s + rows, n_queries)) for s in range(0, n_queries, rows)]


def drop_self(indices: Any, distances: Any, rows: Any) -> tuple[Any, Any]:
    """Remove each query's own id from its ``k + 1`` ascending neighbours.

    Row ``i`` of ``indices`` (``(q, k + 1)``, ascending distance) holds the
    neighbours of point ``rows[i]``.  Where the point itself is among them it
    is dropped, wherever it sits (duplicate points tie with it at distance 0);
    where it is not (more than ``k`` duplicates), the last column is dropped.
    No sort: each row keeps columns ``j`` (``j < p``) and ``j + 1``
    (``j >= p``), ``p`` the position of the point itself (``k`` when absent).

    Examples
    --------
    >>> I = np.array([[5, 0, 2], [1, 3, 4]])
    >>> drop_self(I, I * 1.0, np.array([0, 9]))[0].tolist()
    [[5, 2], [1, 3]]
    """
    xp = namespace(indices)
    q, k1 = indices.shape
    k = k1 - 1
    is_self = indices == xp.asarray(rows).reshape(q, 1)
    pos = xp.where(is_self.any(axis=1), xp.argmax(is_self.astype(xp.int8), axis=1), k)
    j = xp.arange(k).reshape(1, k)
    cols = j + (j >= pos.reshape(q, 1))
    return xp.take_along_axis(indices, cols, axis=1), xp.take_along_axis(distances, cols, axis=1)


def brute_force_knn(X: Any, k: int, *, n_queries: int | None = None,
                    budget_bytes: int = TILE_BYTES) -> tuple[Any, Any]:
    """Exact k nearest neighbours (self excluded) of the first ``n_queries`` points of ``X``.

    Per query tile: ``|q|^2 + |x|^2 - 2 q.x`` against every point (one GEMM),
    ``argpartition`` to the ``k + 1`` smallest, a sort of those, and
    :func:`drop_self`.  Runs on numpy or cupy (the namespace of ``X``), in
    ``X``'s dtype.

    Returns
    -------
    indices : (n_queries, k) int64, distances : (n_queries, k) Euclidean, ascending.
    """
    xp = namespace(X)
    if getattr(X, "ndim", 0) != 2:
        raise ValueError(f"X must be a 2-D (n, d) array, got shape {getattr(X, 'shape', None)}")
    n = X.shape[0]
    if not 1 <= int(k) < n:
        raise ValueError(f"k must satisfy 1 <= k < n = {n}, got {k}")
    q = n if n_queries is None else int(n_queries)
    if not 0 <= q <= n:
        raise ValueError(f"n_queries must be in [0, {n}], got {n_queries}")
    k = int(k)
    sq = (X * X).sum(axis=1)
    out_i = xp.empty((q, k), dtype=xp.int64)
    out_d = xp.empty((q, k), dtype=X.dtype)
    for s, e in query_tiles(q, n, itemsize=X.dtype.itemsize, budget_bytes=budget_bytes):
        d2 = sq[s:e, None] + sq[None, :] - 2 * (X[s:e] @ X.T)
        part = xp.argpartition(d2, k, axis=1)[:, :k + 1]
        pd = xp.take_along_axis(d2, part, axis=1)
        order = xp.argsort(pd, axis=1)
        idx, dd = drop_self(xp.take_along_axis(part, order, axis=1), xp.take_along_axis(pd, order, axis=1),
                            xp.arange(s, e))
        out_i[s:e] = idx
        out_d[s:e] = xp.sqrt(xp.maximum(dd, 0))
    return out_i, out_d


def _cuvs_knn(Xd: Any, k: int, q: int) -> Any:
    import cupy as cp
    from cuvs.neighbors import brute_force

    index = brute_force.build(Xd, metric="sqeuclidean")
    dist, idx = brute_force.search(index, Xd[:q], k + 1)
    idx, _ = drop_self(cp.asarray(idx).astype(cp.int64), cp.asarray(dist), cp.arange(q))
    return idx


def device_knn(X: Any, k: int, *, reference: Any = None, method: str = "auto", max_queries: int | None = None,
               warmup: int = 1, repeat: int = 1, ours_s: float | None = None,
               budget_bytes: int = TILE_BYTES, **labels: Any) -> list[dict]:
    """Time an exact kNN graph of host points ``X`` on the device (one row).

    ``method``: ``"cuvs"`` (``cuvs.neighbors.brute_force``), ``"cupy"`` (the
    tiled :func:`brute_force_knn`) or ``"auto"`` (cuVS when it is installed).
    Both search ``k + 1`` neighbours in float32 and drop the point itself.
    ``max_queries`` times the graph's first rows only (every row costs the
    same in a brute force) and scales the times to all ``n`` rows
    (``scaled_from`` says from how many); by default cuVS does all rows and
    the cupy brute force the first :data:`CUPY_MAX_QUERIES`.  ``reference``: the exact
    ``(n, k)`` indices; the row's ``recall`` is measured against them.

    Returns
    -------
    list of dict
        One row: ``name``, ``method`` (= name), ``setting``, ``seconds`` (the
        median, scaled), ``recall``, the :meth:`Timing.row` columns, ``device``,
        ``scaled_from``, ``skipped`` (None; or the reason, with NaN times, when
        there is no device or library).

    Examples
    --------
    >>> rows = device_knn(np.random.default_rng(0).random((50, 3)), 5)   # doctest: +SKIP
    >>> rows[0]["skipped"]            # on a machine without a CUDA device   # doctest: +SKIP
    'cupy is installed but cupy.cuda.is_available() is False: no CUDA device'
    """
    if method not in ("auto", "cuvs", "cupy"):
        raise ValueError(f"method must be 'auto', 'cuvs' or 'cupy', got {method!r}")
    X = np.asarray(X)
    n = X.shape[0] if X.ndim == 2 else 0
    if X.ndim != 2 or not 1 <= int(k) < n:
        raise ValueError(f"X must be (n, d) and 1 <= k < n, got shape {X.shape} and k={k}")
    use = method
    if method == "auto":
        use = "cuvs" if missing("cuvs") is None else "cupy"
    if max_queries is None and use == "cupy":
        max_queries = CUPY_MAX_QUERIES
    q = n if max_queries is None else max(1, min(int(max_queries), n))
    name = "cuVS brute force (1 GPU)" if use == "cuvs" else "cupy brute force (1 GPU)"
    extra = {"setting": "exact", "scaled_from": q if q < n else None, **labels}
    why = missing("cuvs") if use == "cuvs" else missing()
    if why is None:  # the points, their norms and one tile (cuVS tiles its own search)
        why = memory_short(X.size * 4 + n * 4 + budget_bytes)
    if why is not None:
        return [_knn_row(unavailable_row(name, why, **extra), math.nan)]
    try:
        row, rec = _timed(X, k, q, use, name, reference, warmup, repeat, ours_s, budget_bytes, extra)
    finally:
        release()   # after _timed returned: its device arrays are gone
    row["skipped"] = None
    return [_knn_row(row, rec)]


def _timed(X: np.ndarray, k: int, q: int, use: str, name: str, reference: Any, warmup: int, repeat: int,
           ours_s: float | None, budget_bytes: int, labels: dict) -> tuple[dict, float]:
    import cupy as cp

    n = X.shape[0]
    Xd = cp.asarray(X, dtype=cp.float32)   # untimed, as the CPU peers get their input in memory
    if use == "cuvs":
        fn = lambda: _cuvs_knn(Xd, k, q)  # noqa: E731
    else:
        fn = lambda: brute_force_knn(Xd, k, n_queries=q, budget_bytes=budget_bytes)[0]  # noqa: E731
    row, idx = timed_row(name, fn, warmup=warmup, repeat=repeat, ours_s=ours_s, scale=n / q, keep_value=True,
                         **labels)
    rec = math.nan
    if reference is not None:
        from ..kernels.knn import recall
        rec = recall(cp.asnumpy(idx), np.asarray(reference)[:q])
    return row, rec


def _knn_row(row: dict, rec: float) -> dict:
    # the columns the kNN notebook's recall-vs-time table uses, beside the timing columns
    return {**row, "method": row["name"], "seconds": row["median_s"], "recall": rec}
