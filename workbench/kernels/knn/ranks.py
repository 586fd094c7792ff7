"""SPMD rank bodies of :func:`workbench.kernels.knn.knn_graph`: one long task per worker.

:func:`_exact_rank` runs the blocked brute force (ring of blocks, GEMM tiles
scanned into running candidate lists, cell-ordered block pruning, the float32
certificate and its float64 fallback); :func:`_approx_rank` runs SOLANET
(distributed k-means cells, the per-cell local build, NN-descent joins, the
merge tree and the refinement).  The hot loops are the numba kernels of
:mod:`.cpu`; on "gpu"/"gpu-sim" workers both modes launch their numba.cuda
twins of :mod:`.cuda` instead, on the blocks where they live (device memory
on a GPU: only centroids, cell starts, counts and the final lists reach the
host).  The approximate mode's NN-descent join has a device formulation of
its own (:func:`_local_join_device`).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from ...backend import device_kind, empty, launch, namespace, synchronize, to_device, to_host
from . import cpu as _cpu
from .cpu import _fill_exact_kernel, _local_join, _scan_kernel

#: Coordinates whose largest magnitude lies outside [2**-40, 2**40] are scaled by a power of two (exact) first:
#: the float32 GEMM's squared distances would overflow past ~2**64 (float64's past 2**512) or vanish when tiny,
#: and a uniform scale changes no neighbour.
_SAFE_EXPONENT = 40


def scale_exponent(amax: float) -> int:
    """``e`` such that ``X * 2**-e`` has its largest magnitude ``amax`` near 1, or 0 when ``X`` needs no scaling."""
    if not amax or not math.isfinite(amax) or 2.0 ** -_SAFE_EXPONENT <= amax <= 2.0 ** _SAFE_EXPONENT:
        return 0
    return int(np.frexp(amax)[1])


#: The most points k-means samples by default (64 a cell below that).
_KMEANS_SAMPLE = 20000

#: The exact pass's tiles (rows of queries, columns of candidates): knn_graph's defaults, and the exact fill's.
EXACT_TILES = (256, 2048)


def _kept(n: int, k: int, margin: int | None) -> int:
    """Candidates an exact list keeps: k plus a margin (default ``max(8, k // 2)``), at most ``n - 1``."""
    return min(n - 1, k + (margin if margin is not None else max(8, k // 2)))


def _prepare(comm: Any, block: Any, metric: str) -> tuple:
    """Original points for the exact recheck (float64 view for cosine) and the
    globally centred float32 copy the GEMM uses (centring shrinks its error),
    scaled by ``2**-e`` when they are huge or tiny (see :func:`scale_exponent`):
    ``(X, mean, e)``; Euclidean distances are scaled back by ``2**e``."""
    xp = namespace(block)
    X = block
    if X.dtype not in (xp.float32, xp.float64):
        X = X.astype(xp.float64)
    amax = comm.allreduce(max(float(X.max()), -float(X.min())) if X.size else 0.0, op="max")  # no |X| copy
    e = scale_exponent(amax)
    if e:
        X = xp.ldexp(X, -e).astype(X.dtype)
    if metric == "cosine":
        X = X.astype(xp.float64)
        X = X / xp.sqrt((X * X).sum(axis=1))[:, None]
    # the count rides the sums' collective (exact in float64)
    tot = comm.allreduce(np.append(to_host(X.sum(axis=0, dtype=xp.float64)), float(X.shape[0])))
    mean = xp.asarray(tot[:-1] / tot[-1])
    return xp.ascontiguousarray(X), mean, e


def _distances(d2: Any, metric: str, e: int) -> Any:
    """The reported distances from squared ones of points scaled by ``2**-e``."""
    xp = namespace(d2)
    if metric != "euclidean":
        return d2 / 2.0
    dist = xp.sqrt(d2)
    return xp.ldexp(dist, e).astype(dist.dtype) if e else dist


def _centred(X: Any, mean: Any, dtype: Any, tile: int = 8192) -> tuple[Any, Any]:
    """``X - mean`` in ``dtype`` and its rows' squared norms, a tile of rows at a time: a float64 copy of the
    whole block is fresh pages on every call, the tiles' copies come back from the allocator."""
    xp = namespace(X)
    Xc = xp.empty(X.shape, dtype=dtype)
    xn = xp.empty(X.shape[0], dtype=dtype)
    for s in range(0, X.shape[0], tile):
        t = (X[s:s + tile].astype(xp.float64) - mean).astype(dtype)
        Xc[s:s + tile] = t
        xn[s:s + tile] = (t * t).sum(axis=1)
    return Xc, xn


def _exact_rank(comm: Any, arg: tuple, n: int, k: int, metric: str, opts: dict, seed: int) -> tuple:
    block, offsets = arg
    off = int(offsets[comm.rank])
    xp = namespace(block)
    t0, c0 = time.perf_counter(), time.thread_time()
    X, mean, e = _prepare(comm, block, metric)
    nl, d = X.shape
    m = _kept(n, k, opts["margin"])
    device = device_kind()
    if opts["engine"] == "xp" or (opts["engine"] == "auto" and device == "cpu" and xp is not np):
        scan = _scan_tile_xp
    else:                                   # the local kernel: numba on CPU workers, its numba.cuda twin on devices
        scan = _scan_tile_numba if device == "cpu" else _scan_tile_cuda
    gids = xp.arange(off, off + nl, dtype=xp.int64)
    counters = {"distance_evaluations": 0, "exact_rechecks": 0}

    Xc, xn = _centred(X, mean, np.float32)
    nmax = comm.allreduce(float(xn.max()) if nl else 0.0, op="max")
    lists = _new_lists(xp, nl, m)
    tq, tb = int(opts["tile_rows"]), int(opts["tile_cols"])

    P, r = comm.size, comm.rank
    if opts["prune"]:
        lists, xn_rows, perm = _pruned_scan(comm, scan, X, Xc, xn, off, mean, m, nmax, tq, seed, counters)
    else:
        xn_rows, perm = xn, None
        # step 0: the diagonal block, upper triangle of tiles only
        for q0 in range(0, nl, tq):
            q1 = min(nl, q0 + tq)
            _tile_pass(scan, Xc, xn, X, gids, lists, q0, q1, Xc, xn, X, gids, lists, q0, nl, tb, True, counters)
        _fill_exact(lists, X, X, off)

        # ring steps: the block of rank r+s visits rank r; the last (P even) step splits the pair in halves
        for s in range(1, P // 2 + 1):
            visitor = comm.sendrecv((X, off), dst=(r - s) % P, src=(r + s) % P, tag=("ring", s))
            Y, yoff = visitor
            ny = Y.shape[0]
            Yc, yn = _centred(Y, mean, np.float32)
            ygids = xp.arange(yoff, yoff + ny, dtype=xp.int64)
            cl = _new_lists(xp, ny, m)
            rows, cols = (0, nl), (0, ny)
            if 2 * s == P:
                if r < P // 2:
                    cols = (0, ny // 2)          # the visitor's first half ...
                else:
                    rows = (nl // 2, nl)         # ... and our second half: together the whole pair, once
            for q0 in range(rows[0], rows[1], tq):
                q1 = min(rows[1], q0 + tq)
                _tile_pass(scan, Xc, xn, X, gids, lists, q0, q1, Yc, yn, Y, ygids, cl, cols[0], cols[1], tb, False,
                           counters)
            _fill_exact(lists, X, Y, yoff)
            _fill_exact(cl, Y, X, off)
            back = comm.sendrecv(cl, dst=(r + s) % P, src=(r - s) % P, tag=("cols", s))
            _merge_lists(lists, back)
    t_scan = time.perf_counter() - t0

    # certify: nothing outside the kept m can beat the k-th exact distance
    idx, d2, ok = _finalize(lists, k, m, xn_rows, nmax, d, np.float32, n)
    if perm is not None:                    # back from cell order to the input order
        idx, d2, ok = _unpermute(perm, idx), _unpermute(perm, d2), _unpermute(perm, ok)
    t1 = time.perf_counter()
    bad = xp.flatnonzero(~ok)
    n_bad = comm.allreduce(int(bad.shape[0]))
    fallback_left = 0
    if n_bad:
        idx2, d22, ok2, c2 = _float64_pass(comm, X, off, gids, bad, mean, m, k, n, tq, tb, scan, nmax)
        idx[bad], d2[bad] = idx2, d22
        fallback_left = int((~ok2).sum())
        counters["distance_evaluations"] += c2
    dist = _distances(d2, metric, e)
    synchronize(idx, dist)
    info = {"backend": device, "scan_s": t_scan, "cpu_s": time.thread_time() - c0,
            "fallback_s": time.perf_counter() - t1,
            "uncertified_float32": int(bad.shape[0]),
            "uncertified_float64": fallback_left, "bytes_moved": int(comm.stats["bytes_sent"]), **counters}
    return idx, dist, info


# --------------------------------------------------------------------------
# Exact mode with block pruning
# --------------------------------------------------------------------------


def _cell_blocks(Xc: Any, B: int, seed: int) -> tuple:
    """Local spatial order: points grouped by local k-means cells, cut into
    blocks of at most ``B`` rows that never straddle two cells.  Returns the
    permutation, block starts (host int64) and each block's centre and radius
    (float64, in the centred float32 coordinates the keys are computed from)."""
    xp = namespace(Xc)
    nl = Xc.shape[0]
    if nl == 0:
        return xp.arange(0, dtype=xp.int64), np.zeros(1, np.int64), np.zeros((0, Xc.shape[1])), np.zeros(0)
    C = max(1, min(nl // max(1, B // 4), int(round(math.sqrt(nl) / 2))))
    if C > 1:
        rng = np.random.default_rng([seed, 0xB10C])
        take = np.sort(rng.choice(nl, size=min(nl, 40 * C), replace=False))
        sample = to_host(Xc[xp.asarray(take)]).astype(np.float32)
        cent = _kmeans_pp(sample, C, seed)
        for _ in range(3):
            lab = _assign(sample, cent)
            cnt = np.bincount(lab, minlength=cent.shape[0])
            for t in range(sample.shape[1]):
                s_t = np.bincount(lab, weights=sample[:, t], minlength=cent.shape[0])
                cent[cnt > 0, t] = (s_t[cnt > 0] / cnt[cnt > 0]).astype(np.float32)
        cg = xp.asarray(cent)
        cn = (cg * cg).sum(axis=1)
        labels = xp.concatenate([xp.argmin(cn[None, :] - 2.0 * (Xc[q:q + 8192] @ cg.T), axis=1)
                                 for q in range(0, nl, 8192)])
    else:
        labels = xp.zeros(nl, dtype=xp.int64)
    perm = xp.argsort(labels, kind="stable").astype(xp.int64)
    sizes = np.bincount(to_host(labels).astype(np.int64), minlength=C)
    # balanced split of each cell into ceil(size / B) blocks
    starts = [0]
    base = 0
    for sz in sizes:
        sz = int(sz)
        if sz == 0:
            continue
        nb = -(-sz // B)
        for t in range(1, nb + 1):
            starts.append(base + (sz * t) // nb)
        base += sz
    starts = np.asarray(starts, dtype=np.int64)
    Xs = Xc[perm]
    nbk = len(starts) - 1
    centres = np.empty((nbk, Xc.shape[1]))
    radii = np.empty(nbk)
    for b in range(nbk):
        blk = Xs[int(starts[b]):int(starts[b + 1])].astype(xp.float64)
        c = blk.mean(axis=0)
        centres[b] = to_host(c)
        radii[b] = float(xp.sqrt(((blk - c) ** 2).sum(axis=1).max()))
    return perm, starts, centres, radii


def _block_lb2(ca: np.ndarray, ra: np.ndarray, cb: np.ndarray, rb: np.ndarray) -> np.ndarray:
    """Lower bound on the squared distance between any point of block a and any
    of block b (triangle inequality), shrunk slightly against rounding."""
    D = np.empty((ca.shape[0], cb.shape[0]))
    for i in range(ca.shape[0]):
        D[i] = np.sqrt(((cb - ca[i]) ** 2).sum(axis=1))
    lb = np.maximum(D - ra[:, None] - rb[None, :], 0.0) * (1.0 - 1e-9)
    return lb * lb


def _pruned_blocks(scan: Any, R: tuple, rblocks: Any, rl: tuple, Cq: tuple, cblocks: Any, cl: tuple | None,
                   lb2: np.ndarray, pad: float, diag: bool, counters: dict) -> None:
    """Row blocks ``rblocks`` of R against column blocks ``cblocks`` of Cq,
    nearest block pairs first; a pair is skipped when its lower bound exceeds
    every threshold it could update (row lists, and column lists when
    ``cl`` is given), which is exactly when the scan would reject all its keys.
    ``diag``: R is Cq and only pairs with column block > row block are visited
    (the diagonal tiles were done before)."""
    Qc, qn, Qo, qg, qs = R
    Yc, yn, Yo, yg, ys = Cq
    m = rl[0].shape[1]
    ynb = len(ys) - 1
    for a in rblocks:
        a0, a1 = int(qs[a]), int(qs[a + 1])
        cand = cblocks[cblocks > a] if diag else cblocks
        if a1 == a0 or len(cand) == 0:
            continue
        rows = tuple(x[a0:a1] for x in rl)
        rth = rl[0][a0:a1, m - 1]
        lb = lb2[a, cand] - pad
        # thresholds only fall, so a pair prunable now stays prunable
        keep = lb <= float(rth.max())
        if cl is not None:
            cth = to_host(cl[0][:, m - 1])
            cmax = np.full(ynb, np.inf)
            ne = ys[1:] > ys[:-1]
            cmax[ne] = np.maximum.reduceat(cth, ys[:-1][ne])
            keep |= lb <= cmax[cand]
        counters["pruned_pairs"] += int(((qs[a + 1] - qs[a]) * (ys[cand[~keep] + 1] - ys[cand[~keep]])).sum())
        cand, lb = cand[keep], lb[keep]
        order = np.argsort(lb, kind="stable")
        for b, lbb in zip(cand[order].tolist(), lb[order].tolist(), strict=True):
            b0, b1 = int(ys[b]), int(ys[b + 1])
            if lbb > float(rth.max()) and (cl is None or lbb > float(cl[0][b0:b1, m - 1].max())):
                counters["pruned_pairs"] += (a1 - a0) * (b1 - b0)
                continue
            G = Qc[a0:a1] @ Yc[b0:b1].T
            cols = None if cl is None else tuple(x[b0:b1] for x in cl)
            scan(G, qn[a0:a1], yn[b0:b1], qg[a0:a1], yg[b0:b1], Qo[a0:a1], Yo[b0:b1], rows, cols)
            counters["distance_evaluations"] += int(G.size)


def _pruned_scan(comm: Any, scan: Any, X: Any, Xc: Any, xn: Any, off: int, mean: Any, m: int, nmax: float,
                 B: int, seed: int, counters: dict) -> tuple:
    """The ring of :func:`_exact_rank` on cell-ordered blocks with block-pair
    pruning.  Rows come back in cell order (``perm``)."""
    xp = namespace(X)
    nl, d = X.shape
    P, r = comm.size, comm.rank
    counters["pruned_pairs"] = 0
    perm, qs, cent, rad = _cell_blocks(Xc, B, seed)
    Xs, Xcs, xns = xp.ascontiguousarray(X[perm]), xp.ascontiguousarray(Xc[perm]), xn[perm]
    gs = perm + off
    nb = len(qs) - 1
    # a pair is skipped only if every key in it is provably >= the threshold:
    # key >= |x-y|^2 - err with err the certificate's float32 GEMM bound
    pad = (d + 8) * float(np.finfo(np.float32).eps) * 4.0 * nmax
    lists = _new_lists(xp, nl, m)
    R = (Xcs, xns, Xs, gs, qs)
    # diagonal tiles first: every row starts with a threshold from its own block
    for a in range(nb):
        a0, a1 = int(qs[a]), int(qs[a + 1])
        rows = tuple(x[a0:a1] for x in lists)
        G = Xcs[a0:a1] @ Xcs[a0:a1].T
        scan(G, xns[a0:a1], xns[a0:a1], gs[a0:a1], gs[a0:a1], Xs[a0:a1], Xs[a0:a1], rows, None)
        counters["distance_evaluations"] += int(G.size)
    lb2 = _block_lb2(cent, rad, cent, rad)
    allb = np.arange(nb)
    _pruned_blocks(scan, R, allb, lists, R, allb, lists, lb2, pad, True, counters)
    _fill_exact(lists, Xs, X, off)

    for s in range(1, P // 2 + 1):
        thr = xp.ascontiguousarray(lists[0][:, m - 1])
        mine = (X, off, gs, qs, cent, rad, thr)
        Y, yoff, ygs, ys, ycent, yrad, ythr = comm.sendrecv(mine, dst=(r - s) % P, src=(r + s) % P,
                                                           tag=("ring", s))
        Y = Y.copy()                             # writable: the numba kernels were compiled for those
        ny = Y.shape[0]
        yinv = ygs - yoff
        Ys = xp.ascontiguousarray(Y[yinv])
        Ycs, yns = _centred(Ys, mean, np.float32)
        # the visitor's lists start at its owner's thresholds (placeholders, id -1):
        # a candidate no better than what the owner already has is not sent back
        cl = _new_lists(xp, ny, m)
        cl[0][...] = ythr[:, None]
        ynb = len(ys) - 1
        rb, cb = np.arange(nb), np.arange(ynb)
        if 2 * s == P:
            if r < P // 2:
                cb = cb[:ynb // 2]               # the visitor's first half of blocks ...
            else:
                rb = rb[nb // 2:]                # ... and our second half: together the whole pair, once
        lb2 = _block_lb2(cent, rad, ycent, yrad)
        _pruned_blocks(scan, R, rb, lists, (Ycs, yns, Ys, ygs, ys), cb, cl, lb2, pad, False, counters)
        _fill_exact(lists, Xs, Y, yoff)
        _fill_exact(cl, Ys, X, off)
        back = comm.sendrecv(cl, dst=(r + s) % P, src=(r - s) % P, tag=("cols", s))
        # the returned lists are in our cell order already (we sent them in it)
        _merge_lists(lists, back)
    return lists, xns, perm


def _unpermute(perm: Any, a: Any) -> Any:
    xp = namespace(a)
    out = xp.empty_like(a)
    out[perm] = a
    return out


def _float64_pass(comm: Any, X: Any, off: int, gids: Any, rows: Any, mean: Any, m: int, k: int, n: int,
                  tq: int, tb: int, scan: Any, nmax: float) -> tuple:
    """Plain ring pass in float64 for the few points float32 could not certify."""
    xp = namespace(X)
    P, r = comm.size, comm.rank
    Q = xp.ascontiguousarray(X[rows])
    Qc, qn = _centred(Q, mean, np.float64)
    qg = gids[rows]
    lists = _new_lists(xp, Q.shape[0], m)
    counters = {"distance_evaluations": 0, "exact_rechecks": 0}
    Y, yoff = X, off
    for s in range(P):
        if s:
            Y, yoff = comm.sendrecv((Y, yoff), dst=(r + 1) % P, src=(r - 1) % P, tag=("f64", s))
        if Q.shape[0]:
            Yc, yn = _centred(Y, mean, np.float64)
            yg = xp.arange(yoff, yoff + Y.shape[0], dtype=xp.int64)
            for q0 in range(0, Q.shape[0], tq):
                q1 = min(Q.shape[0], q0 + tq)
                _tile_pass(scan, Qc, qn, Q, qg, lists, q0, q1, Yc, yn, Y, yg, None, 0, Y.shape[0], tb, False,
                           counters)
            _fill_exact(lists, Q, Y, yoff)
    nmax64 = comm.allreduce(float(((Qc * Qc).sum(axis=1)).max()) if Q.shape[0] else 0.0, op="max")
    idx, d2, ok = _finalize(lists, k, m, qn, max(nmax, nmax64), X.shape[1], np.float64, n)
    return idx, d2, ok, counters["distance_evaluations"]


def _approx_rank(comm: Any, arg: tuple, n: int, k: int, metric: str, opts: dict, seed: int) -> tuple:
    block, offsets = arg
    off = int(offsets[comm.rank])
    device = device_kind()
    # the graph phases run where the block lives: numba on CPU workers (host
    # arrays), numba.cuda twins on device workers (device memory on a GPU)
    block = to_host(block) if device == "cpu" else to_device(block)
    xp = namespace(block)
    t0, c0 = time.perf_counter(), time.thread_time()
    X, mean, e = _prepare(comm, block, metric)
    Xc, xn = _centred(X, mean, np.float32)
    nl, d = X.shape
    P, r = comm.size, comm.rank
    gids = xp.arange(off, off + nl, dtype=xp.int64)
    counters = {"distance_evaluations": 0, "float64_spans": 0}

    # global cells: distributed Lloyd k-means, every rank ends with the same centroids
    C = int(opts["n_cells"] or max(1, round(math.sqrt(n) / 2)))
    C = min(C, n)
    # 64 points a cell place the centroids as well as 20000 do (the same distance evaluations after), and at
    # 20000 points k-means took half the call
    sample = int(opts["kmeans_sample"] or min(_KMEANS_SAMPLE, 64 * C))
    cent = _kmeans(comm, Xc, C, int(opts["kmeans_iter"]), sample, seed, counters)
    probes, bounds = _cell_probes(Xc, cent, int(opts["n_probe"]))
    labels = probes[:, 0]
    t_kmeans = time.perf_counter() - t0

    # local build: brute force inside each cell, then in the probed cells its bound cannot rule out
    t1 = time.perf_counter()
    ind = xp.full((nl, k), -1, dtype=xp.int64)
    d2 = xp.full((nl, k), np.inf, dtype=xp.float64)
    lorder = xp.argsort(labels, kind="stable").astype(xp.int64)
    own = _by_cell(X, gids, labels, lorder, C)
    qpos = xp.empty(nl, dtype=xp.int64)
    qpos[lorder] = xp.arange(nl, dtype=xp.int64)   # a point's row among the cell-ordered ones: self-pairs skip
    centres = mean + xp.asarray(cent.astype(np.float64)).astype(mean.dtype)   # in X's coordinates
    q = (X, qpos, probes, bounds, centres)
    width = xp.zeros(nl, dtype=xp.float32)
    _cell_pass(q, 0, 1, own, ind, d2, counters, width)
    if bool(((width * _key_noise(d) > d2[:, k - 1]) & (d2[:, k - 1] > 0)).any()):
        _cell_pass(q, 0, 1, own, ind, d2, counters, redo=True)      # cells too wide for float32 keys, in float64
    _cell_pass(q, 1, probes.shape[1], own, ind, d2, counters)
    # only points whose list the n_probe cap may have cut short (an unprobed
    # cell's bound below the k-th distance) need the NN-descent joins
    join = _local_join if device == "cpu" else _local_join_device
    for _ in range(int(opts["local_join"])):
        short = lorder[(probes.shape[1] < cent.shape[0]) & (bounds[lorder, -1] < xp.sqrt(d2[lorder, k - 1]))]
        counters["distance_evaluations"] += int(join(X, Xc, ind, d2, off, short))
    t_local = time.perf_counter() - t1

    # merge tree: groups of 2**l ranks pair up with their partner group
    t2 = time.perf_counter()
    G = max(1, min(int(opts["groups"]), P))
    level = 0
    q = (X, -1 - xp.arange(nl, dtype=xp.int64), probes, bounds, centres)   # no self-pairs across ranks
    while ((P + (1 << level) - 1) >> level) > G:
        partner = [t for t in range(P) if (t >> level) == ((r >> level) ^ 1)]
        _query_groups(comm, partner, q, gids, offsets, labels, ind, d2, C, opts, counters)
        level += 1
    t_merge = time.perf_counter() - t2

    # refinement: every group that the tree did not merge is queried directly
    t3 = time.perf_counter()
    others = [t for t in range(P) if (t >> level) != (r >> level)]
    if comm.allreduce(len(others), op="max"):
        _query_groups(comm, others, q, gids, offsets, labels, ind, d2, C, opts, counters)
    t_refine = time.perf_counter() - t3

    # a point the probed cells and joins left with fewer than k neighbours (few points a cell: a small n, or
    # n_cells near n with a low n_probe) gets its exact list, so every row holds k real neighbours
    missing = xp.flatnonzero(ind[:, k - 1] < 0)
    counters["exact_fill"] = int(missing.shape[0])      # summed over the ranks in stats
    if comm.allreduce(counters["exact_fill"]):
        scan = _scan_tile_numba if device == "cpu" else _scan_tile_cuda
        nmax = comm.allreduce(float(xn.max()) if nl else 0.0, op="max")
        idx2, d22, _, c2 = _float64_pass(comm, X, off, gids, missing, mean, _kept(n, k, None), k, n, *EXACT_TILES,
                                         scan, nmax)
        ind[missing], d2[missing] = idx2, d22
        counters["distance_evaluations"] += c2

    # rows an unprobed cell could still hold a nearer point for (its bisector bound below the final k-th
    # distance): every other row's list is certified exact (summed over the ranks in stats)
    counters["capped"] = int(((probes.shape[1] < C) & (bounds[:, -1] < xp.sqrt(d2[:, k - 1]))).sum()) if nl else 0
    dist = _distances(d2, metric, e)
    synchronize(ind, dist)
    info = {"backend": device, "kmeans_s": t_kmeans, "cpu_s": time.thread_time() - c0, "local_build_s": t_local,
            "merge_tree_s": t_merge, "refinement_s": t_refine,
            "merge_levels": level, "bytes_moved": int(comm.stats["bytes_sent"]), **counters}
    return ind, dist, info


# --------------------------------------------------------------------------
# Exact mode: tiles, lists, certification
# --------------------------------------------------------------------------


def _new_lists(xp: Any, n: int, m: int) -> tuple:
    """Running candidate lists: approximate keys (ascending), ids, exact squared distances."""
    return (xp.full((n, m), np.inf, dtype=xp.float64), xp.full((n, m), -1, dtype=xp.int64),
            xp.full((n, m), np.inf, dtype=xp.float64))


def _tile_pass(scan: Any, Qc: Any, qn: Any, Qo: Any, qg: Any, rl: tuple, q0: int, q1: int, Yc: Any, yn: Any,
               Yo: Any, yg: Any, cl: tuple | None, c0: int, c1: int, tb: int, diag: bool, counters: dict) -> None:
    """Rows ``q0:q1`` against columns ``c0:c1`` in tiles of ``tb`` columns.

    ``diag``: Y is Q itself and only columns >= q0 are visited; the square tile
    on the diagonal updates rows only (it holds both orders of each pair), the
    tiles right of it update rows and columns.
    """
    Qt = Qc[q0:q1]
    rows = tuple(a[q0:q1] for a in rl)
    spans = [(j0, min(c1, j0 + tb)) for j0 in range(q1 if diag else c0, c1, tb)]
    if diag:
        spans.insert(0, (q0, q1))
    for j0, j1 in spans:
        G = Qt @ Yc[j0:j1].T
        on_diag = diag and j0 == q0
        cols = None if (cl is None or on_diag) else tuple(a[j0:j1] for a in cl)
        scan(G, qn[q0:q1], yn[j0:j1], qg[q0:q1], yg[j0:j1], Qo[q0:q1], Yo[j0:j1], rows, cols)
        counters["distance_evaluations"] += int(G.size)


def _scan_tile_numba(G, qn, yn, qg, yg, Qo, Yo, rows, cols) -> None:
    if cols is None:
        _scan_kernel(G, qn, yn, qg, yg, Qo, Yo, rows[0], rows[1], rows[2], rows[0], rows[1], rows[2], False)
    else:
        _scan_kernel(G, qn, yn, qg, yg, Qo, Yo, rows[0], rows[1], rows[2], cols[0], cols[1], cols[2], True)


def _scan_tile_cuda(G, qn, yn, qg, yg, Qo, Yo, rows, cols) -> None:
    """The tile scan's numba.cuda twin: one thread per row of the tile, and per column when ``cols``."""
    from . import cuda as dev

    do_cols = cols is not None
    if not do_cols:     # empty stand-ins: the row lists passed twice would be two copies under the simulator
        xp = namespace(rows[0])
        m = rows[0].shape[1]
        cols = (xp.empty((0, m)), xp.empty((0, m), dtype=xp.int64), xp.empty((0, m)))
    n = G.shape[0] + (G.shape[1] if do_cols else 0)
    launch(dev._scan_kernel, n, G, qn, yn, qg, yg, Qo, Yo, *rows, *cols, do_cols)


def _fill_exact(lists: tuple, Qo: Any, Yo: Any, ylo: int) -> None:
    """Exact float64 squared distances for the kept candidates that still lack
    one (NaN) and whose ids are rows ``ylo, ylo+1, ...`` of ``Yo``: computed
    once per survivor instead of once per insertion."""
    xp = namespace(lists[0])
    _, ri, rd = lists
    if device_kind() != "cpu":
        from . import cuda as dev

        launch(dev._fill_exact_kernel, ri.size, ri, rd, Qo, Yo, ylo)
        return
    if xp is np:
        _fill_exact_kernel(ri, rd, Qo, Yo, ylo)
        return
    sel = xp.isnan(rd) & (ri >= ylo) & (ri < ylo + Yo.shape[0])
    qi, t = xp.nonzero(sel)
    if qi.shape[0] == 0:
        return
    yi = ri[qi, t] - ylo
    for s in range(0, int(qi.shape[0]), 65536):
        a, b = qi[s:s + 65536], yi[s:s + 65536]
        diff = Qo[a].astype(xp.float64) - Yo[b].astype(xp.float64)
        rd[a, t[s:s + 65536]] = (diff * diff).sum(axis=1)


def _scan_tile_xp(G, qn, yn, qg, yg, Qo, Yo, rows, cols) -> None:
    """Array-namespace form of the tile scan (cupy on GPUs; numpy for testing)."""
    xp = namespace(G)
    key = (qn[:, None] + yn[None, :] - 2.0 * G).astype(xp.float64)
    key[qg[:, None] == yg[None, :]] = np.inf
    _merge_tile_xp(key, yg, Qo, Yo, rows)
    if cols is not None:
        _merge_tile_xp(xp.ascontiguousarray(key.T), qg, Yo, Qo, cols)


def _merge_tile_xp(key, cand_g, Qo, Yo, lists) -> None:
    xp = namespace(key)
    rk, ri, rd = lists
    m = rk.shape[1]
    take = min(m, key.shape[1])
    sel = xp.argpartition(key, take - 1, axis=1)[:, :take] if take < key.shape[1] else \
        xp.broadcast_to(xp.arange(key.shape[1]), key.shape)
    k_new = xp.take_along_axis(key, sel, axis=1)
    diff = Qo[:, None, :].astype(xp.float64) - Yo[sel].astype(xp.float64)
    d_new = (diff * diff).sum(axis=2)
    d_new[~xp.isfinite(k_new)] = np.inf
    allk = xp.concatenate([rk, k_new], axis=1)
    order = xp.argsort(allk, axis=1, kind="stable")[:, :m]
    rk[...] = xp.take_along_axis(allk, order, axis=1)
    ri[...] = xp.take_along_axis(xp.concatenate([ri, cand_g[sel]], axis=1), order, axis=1)
    rd[...] = xp.take_along_axis(xp.concatenate([rd, d_new], axis=1), order, axis=1)
    ri[~xp.isfinite(rk)] = -1


def _merge_lists(lists: tuple, other: tuple) -> None:
    """Merge another set of candidate lists (same rows, disjoint candidates) into ``lists``."""
    xp = namespace(lists[0])
    m = lists[0].shape[1]
    allk = xp.concatenate([lists[0], other[0]], axis=1)
    order = xp.argsort(allk, axis=1, kind="stable")[:, :m]
    for a, b in zip(lists, other, strict=True):
        a[...] = xp.take_along_axis(xp.concatenate([a, b], axis=1), order, axis=1)


def _finalize(lists: tuple, k: int, m: int, qn: Any, nmax: float, d: int, gemm_dtype: Any, n: int) -> tuple:
    """Top-k by exact distance (ties by id) and the certificate that the kept
    m candidates contain them."""
    xp = namespace(lists[0])
    rk, ri, rd = lists
    o1 = xp.argsort(ri, axis=1, kind="stable")
    o2 = xp.argsort(xp.take_along_axis(rd, o1, axis=1), axis=1, kind="stable")
    order = xp.take_along_axis(o1, o2, axis=1)[:, :k]
    idx = xp.take_along_axis(ri, order, axis=1)
    d2 = xp.take_along_axis(rd, order, axis=1)
    eps = float(np.finfo(gemm_dtype).eps)
    err = (d + 8) * eps * 2.0 * (qn.astype(xp.float64) + nmax)
    full = xp.isfinite(rk[:, m - 1])
    # strictly below: a discarded point's true distance is >= its key - err >= T - err
    ok = (~full) | (d2[:, k - 1] < rk[:, m - 1] - err) | (m >= n - 1)
    return idx, d2, ok


# --------------------------------------------------------------------------
# Approximate mode: k-means cells, local build, graph search
# --------------------------------------------------------------------------
# The arrays live where the block does (numpy on CPU and gpu-sim workers,
# cupy on a GPU); the hot loops are :func:`_kernel`'s.  Centroids, cell
# starts and the per-cell spans are small and kept on the host.


def _kernel(name: str, n: int, *args: Any) -> None:
    """Run the approximate mode's kernel ``name`` on ``args``: its numba twin
    (:mod:`.cpu`) on CPU workers, its numba.cuda twin (:mod:`.cuda`, a grid
    over ``n`` items, launched on the arrays' device) on "gpu"/"gpu-sim" workers."""
    if device_kind() == "cpu":
        getattr(_cpu, name)(*args)
        return
    from . import cuda as dev

    launch(getattr(dev, name), n, *args)


def _local_join_device(X: Any, Xc: Any, ind: Any, d2: Any, off: int, order: Any) -> int:
    """The NN-descent join of :func:`.cpu._local_join` on a device (same
    arguments, same return: the distances screened).  The CPU twin mends the
    lists one row at a time, each row seeing the rows mended before it; here
    every row of a chunk of ``order`` gathers its candidates (neighbours of
    neighbours closer than its k-th) from the lists as they were before the
    chunk, one thread per row into its own slots of a candidate buffer, and
    the candidate merge inserts them (rows grouped, in the order found)."""
    from . import cuda as dev

    xp = namespace(ind)
    k = ind.shape[1]
    S = k * k                             # a row has at most k * k neighbours of neighbours
    step = max(1, (1 << 22) // S)         # candidate buffer of at most 4M slots (64 MiB)
    evals = 0
    for s in range(0, int(order.shape[0]), step):
        rows = order[s:s + step]
        cand = xp.empty((rows.shape[0], S), dtype=xp.int64)
        dist = xp.empty((rows.shape[0], S), dtype=xp.float64)
        cnt = xp.empty(rows.shape[0], dtype=xp.int64)
        launch(dev._local_join, rows.shape[0], X, Xc, ind, d2, off, rows, cand, dist, cnt)
        qi, t = xp.nonzero(cand >= 0)     # row-major: each row's candidates adjacent, in the order found
        if qi.shape[0]:
            launch(dev._merge_candidates, qi.shape[0], ind, d2, rows[qi], cand[qi, t], dist[qi, t])
        evals += int(cnt.sum())
    return evals


def _kmeans(comm: Any, Xc: Any, C: int, iters: int, sample: int, seed: int, counters: dict) -> np.ndarray:
    """Distributed Lloyd iterations on a sample of the points; returns the
    float32 centroids (host, the same on every rank)."""
    xp = namespace(Xc)
    nl = Xc.shape[0]
    rng = np.random.default_rng([seed, comm.rank, 0xCE11])
    per_rank = max(1, -(-sample // comm.size))
    take = rng.choice(nl, size=min(nl, per_rank), replace=False) if nl else np.zeros(0, np.int64)
    # seeding needs ~16 candidates per centroid, not the whole sample (D^2 sampling is O(pool) per centroid)
    seeds = np.sort(take[:max(1, -(-16 * C // comm.size))])
    pool = comm.allgather(to_host(Xc[xp.asarray(seeds)]))
    cent = _kmeans_pp(np.concatenate(pool, axis=0), C, seed).astype(np.float64)
    take = xp.asarray(np.sort(take))
    sub = Xc[take]
    C = cent.shape[0]
    lab = None
    for _ in range(iters):
        lab = _assign(sub, cent.astype(np.float32), lab)   # centred on last round's cells after the first
        counters["distance_evaluations"] += int(sub.shape[0]) * C
        cnt = xp.bincount(lab, minlength=C)
        # one collective a round: the counts travel as a last column of the sums (exact in float64)
        both = comm.allreduce(np.concatenate([to_host(_cell_sums(sub, lab, cnt)), to_host(cnt)[:, None]], axis=1))
        sums, cnt = both[:, :-1], both[:, -1]
        nz = cnt > 0
        cent[nz] = sums[nz] / cnt[nz, None]
    return cent.astype(np.float32)


def _kmeans_pp(pool: np.ndarray, C: int, seed: int) -> np.ndarray:
    """k-means++ seeding (D^2 sampling) on the gathered sample; every rank
    computes the same centroids from the same pool and seed."""
    rng = np.random.default_rng([seed, 0xCE12])
    P = pool.astype(np.float32)
    pn = (P * P).sum(axis=1)
    C = min(C, P.shape[0])
    chosen = [int(rng.integers(P.shape[0]))]
    best = np.maximum(pn + pn[chosen[0]] - 2.0 * (P @ P[chosen[0]]), 0).astype(np.float64)
    for _ in range(1, C):
        tot = best.sum()
        j = int(rng.choice(P.shape[0], p=best / tot)) if tot > 0 else int(rng.integers(P.shape[0]))
        chosen.append(j)
        np.minimum(best, np.maximum(pn + pn[j] - 2.0 * (P @ P[j]), 0), out=best)
    return P[chosen]


def _cell_sums(X: Any, lab: Any, cnt: Any) -> Any:
    """Each cell's sum of its rows in float64, added in row order: the sums of a weighted bincount over (cell,
    dimension) bins, which the device keeps; on the host a stable sort and one ``add.reduceat`` give the same
    sums without the bincount's index and weight arrays."""
    xp = namespace(X)
    C, d = int(cnt.shape[0]), X.shape[1]
    if xp is not np:
        bins = (lab[:, None] * d + xp.arange(d, dtype=xp.int64)[None, :]).ravel()
        return xp.bincount(bins, weights=X.astype(xp.float64).ravel(), minlength=C * d).reshape(C, d)
    sums = np.zeros((C, d))
    nz = cnt > 0
    if nz.any():
        rows = X[np.argsort(lab, kind="stable")].astype(np.float64)
        sums[nz] = np.add.reduceat(rows, (np.cumsum(cnt) - cnt)[nz], axis=0)
    return sums


def _assign(Xc: Any, cent: np.ndarray, near: Any = None, tile: int = 8192) -> Any:
    """Nearest centroid of each row for the Lloyd rounds (``cent`` on the host, moved to the rows' device).

    One product for all rows, ranked about a centroid ``a`` near each row: ``|x - c_j|^2`` less the row's
    constants is ``|c_j - c_a|^2 - 2 (x - c_a).c_j`` (the first term from float64), whose float32 error grows
    with ``|x - c_a| |c_j|`` rather than ``|x|^2`` (see :func:`_scores_about_cells`).  ``near``: last round's
    labels, else each row's nearest centroid about the global mean."""
    xp = namespace(Xc)
    nl = Xc.shape[0]
    cg = xp.asarray(cent.astype(np.float32))
    apart = xp.asarray(_centroid_gaps2(cent).astype(np.float32))
    out = xp.empty(nl, dtype=xp.int64)
    for s in range(0, nl, tile):
        x = Xc[s:s + tile]
        a = _nearest_about_mean(x, cg) if near is None else near[s:s + tile]
        out[s:s + tile] = xp.argmin(apart[a] - 2.0 * ((x - cg[a]) @ cg.T), axis=1)
    return out


def _centroid_gaps2(cent: np.ndarray) -> np.ndarray:
    """Squared distances between the centroids (host, float64)."""
    c64 = cent.astype(np.float64)
    cn = (c64 * c64).sum(axis=1)
    return np.maximum(cn[:, None] + cn[None, :] - 2.0 * (c64 @ c64.T), 0.0)


def _nearest_about_mean(x: Any, cg: Any) -> Any:
    """Each row's nearest float32 centroid by ``|c_j|^2 - 2 x.c_j``: a first guess, coarse far from the mean."""
    xp = namespace(x)
    return xp.argmin((cg * cg).sum(axis=1)[None, :] - 2.0 * (x @ cg.T), axis=1)


def _cell_probes(Xc: Any, cent: np.ndarray, n_probe: int) -> tuple[Any, Any]:
    """Each point's cell (column 0) and the other cells that may hold its
    neighbours, nearest first by the bisector bound: a point of cell ``c`` is
    nearer to centroid ``c`` than to the query's own centroid ``a``, so it lies
    at least ``(|q - c|^2 - |q - a|^2) / (2 |c - a|)`` from the query.  Only
    the ``n_probe`` cells of smallest bound are kept (memory ``n_probe`` per point)."""
    xp = namespace(Xc)
    nl, C = Xc.shape[0], cent.shape[0]
    p = max(1, min(n_probe, C))
    cd = np.sqrt(_centroid_gaps2(cent))
    with np.errstate(divide="ignore"):
        inv = xp.asarray(np.where(cd > 0, 0.5 / cd, 0.0).astype(np.float32))    # a duplicate centroid: no bound
    probes = xp.empty((nl, p), dtype=xp.int64)
    bounds = xp.empty((nl, p), dtype=xp.float32)
    for rows, D in _scores_about_cells(Xc, cent):
        pr, bd = xp.empty((D.shape[0], p), dtype=xp.int64), xp.empty((D.shape[0], p), dtype=xp.float32)
        _kernel("_top_bounds", D.shape[0], D, inv, pr, bd)
        probes[rows], bounds[rows] = pr, bd
    return probes, bounds


def _scores_about_cells(Xc: Any, cent: np.ndarray, tile: int = 8192) -> Any:
    """``(rows, D)`` pieces over all rows of ``Xc``: ``D[i, j] = |x_i - c_j|^2 - |x_i - c_a|^2`` (float32), ``a``
    the centroid that a first float32 pass finds nearest to ``x_i``, computed about ``c_a`` as
    ``|c_j - c_a|^2 - 2 (x_i - c_a).(c_j - c_a)``: its error grows with ``|x_i - c_a| |c_j - c_a|``, which the
    bisector bounds need small.  Computed about the global mean (``|c_j|^2 - 2 x_i.c_j``) its error grew with
    ``|x_i|^2`` instead: tight clusters far from the mean (1e4 apart, unit spread) were cut into random cells,
    and the approximate lists found 8% of the true neighbours."""
    xp = namespace(Xc)
    nl, C = Xc.shape[0], cent.shape[0]
    cg = xp.asarray(cent.astype(np.float32))
    near = xp.empty(nl, dtype=xp.int64)
    for s in range(0, nl, tile):
        near[s:s + tile] = _nearest_about_mean(Xc[s:s + tile], cg)
    order = xp.argsort(near, kind="stable")
    edges = to_host(xp.searchsorted(near[order], xp.arange(C + 1)))
    c64 = cent.astype(np.float64)
    for a in range(C):
        if edges[a + 1] == edges[a]:
            continue
        delta = c64 - c64[a]
        dg = xp.asarray(delta.astype(np.float32))
        dn = xp.asarray((delta * delta).sum(axis=1).astype(np.float32))
        for s in range(int(edges[a]), int(edges[a + 1]), tile):
            rows = order[s:min(s + tile, int(edges[a + 1]))]
            yield rows, xp.ascontiguousarray(dn[None, :] - 2.0 * ((Xc[rows] - cg[a]) @ dg.T))


def _by_cell(Y: Any, ygids: Any, ylab: Any, order: Any, C: int) -> tuple:
    """Points ordered by cell, with each cell's start: (Yo, gids, starts)."""
    xp = namespace(Y)
    starts = xp.searchsorted(ylab[order], xp.arange(C + 1)).astype(xp.int64)
    return xp.ascontiguousarray(Y[order]), ygids[order], starts


#: Entries of a cell pass's float32 product tile (512 KB: it stays in L2 for the row scan that reads it).
_PRODUCT_TILE = 1 << 17


def _key_noise(d: int) -> float:
    """64 times the float32 keys' error per unit of ``|q - c|^2 + |y - c|^2`` in ``d`` dimensions (~2**-24 (2 + 2
    sqrt(d))): a cell block whose rows' k-th distances are below it is taken in float64."""
    return 64 * 2.0 ** -24 * (2 + 2 * math.sqrt(d))


def _cell_pass(q: tuple, p0: int, p1: int, Y: tuple, ind: Any, d2: Any, counters: dict, width: Any = None,
               redo: bool = False) -> tuple:
    """Brute force of our points against the cells of ``Y`` in their probe
    columns ``p0:p1`` whose bound is below the point's current k-th distance.

    Pairs are grouped by cell: one GEMM (the rows that need the cell) x (the
    cell's points) each, scanned into per-point candidate lists that start at
    the current k-th distance, so only improving candidates are kept; their
    exact float64 distances are then merged into ``ind``/``d2`` in place.
    ``q`` = (X, qpos, probes, bounds, centres): qpos is each point's row in
    ``Y`` when Y holds our own points (self is skipped), negative otherwise;
    ``centres`` the cells' centroids in ``X``'s coordinates.  Each GEMM runs
    about its cell's centroid (float32 differences from ``X`` and ``Y`` in
    float64): its keys' error then scales with the distances inside the cell,
    not with the points' distance from the global mean.  A cell that spans
    far-apart clusters (few cells) is still too wide for float32: a span whose
    keys' error reaches a 64th of one of its rows' k-th distance is taken in
    float64.  The first pass has no k-th distances yet: it records each row's
    ``|q - c|^2 + max |y - c|^2`` in ``width``, and ``redo`` runs again only the
    spans that its lists show to be such.
    Returns the merged (row, Y row, d^2) triples."""
    X, qpos, probes, bounds, centres = q
    Yo, ygids, ys = Y
    xp = namespace(ind)
    nl, k = ind.shape
    nothing = (xp.zeros(0, dtype=xp.int64), xp.zeros(0, dtype=xp.int64), xp.zeros(0, dtype=xp.float64))
    if nl == 0 or p1 <= p0 or Yo.shape[0] == 0:
        return nothing
    cells = probes[:, p0:p1]
    need = (bounds[:, p0:p1] < xp.sqrt(d2[:, k - 1:k])) & (ys[cells + 1] > ys[cells])
    qi, t = xp.nonzero(need)
    if qi.shape[0] == 0:
        return nothing
    c = cells[qi, t]
    o = xp.argsort(c, kind="stable")
    qi, c = qi[o], c[o]
    # the spans of equal cells, and per span (host, one transfer): its cell, start and end in Y, and whether
    # its query rows are that very cell of Y (a cell against itself: no gather)
    cut = np.concatenate([[0], to_host(xp.flatnonzero(xp.diff(c)) + 1), [qi.shape[0]]]).astype(np.int64)
    g0s, g1s = xp.asarray(cut[:-1]), xp.asarray(cut[1:])
    pos = qpos[qi]
    steps = xp.concatenate([xp.zeros(1, dtype=xp.int64), xp.cumsum(xp.diff(pos) != 1)])
    cg = c[g0s]
    info = to_host(xp.stack([ys[cg], ys[cg + 1], pos[g0s], pos[g1s - 1], steps[g1s - 1] - steps[g0s], cg]))
    keys = xp.repeat(d2[:, k - 1:k].astype(xp.float32), k, axis=1)
    ids = xp.full((nl, k), -1, dtype=xp.int64)
    spans = [(int(g0), int(g1), int(b0), int(b1), bool(g1 - g0 == b1 - b0 and f == b0 and la == b1 - 1 and br == 0),
              int(cell)) for g0, g1, (b0, b1, f, la, br, cell) in zip(cut[:-1], cut[1:], info.T.tolist(), strict=True)]
    # one product buffer for every cell: BLAS zeroes its output first, and fresh
    # pages for each product fault (at the hypervisor here) on that first touch
    buf = empty(max(min(g1 - g0, max(1, _PRODUCT_TILE // (b1 - b0))) * (b1 - b0) for g0, g1, b0, b1, _, _ in spans),
                np.float32, like=X)
    qn = xp.empty(nl, dtype=xp.float32)    # |q - centre|^2 of the span's rows, at their rows
    qn64 = None
    noise = _key_noise(X.shape[1])
    kth = xp.where(d2[:, k - 1] > 0, d2[:, k - 1], xp.inf)   # k duplicates already: nothing to resolve
    for g0, g1, b0, b1, own_cell, cell in spans:
        rows = qi[g0:g1]
        Yd = Yo[b0:b1] - centres[cell]
        Qd = Yd if own_cell else X[rows] - centres[cell]
        Yr = Yd.astype(xp.float32)
        Qr = Yr if own_cell else Qd.astype(xp.float32)
        yn, qs = (Yr * Yr).sum(axis=1), (Qr * Qr).sum(axis=1)
        if width is not None:
            width[rows] = qs + yn.max()
        wide = bool(((qs + yn.max()) * noise - kth[rows]).max() > 0)
        if redo and not wide:
            continue
        if wide:
            if qn64 is None:
                qn64, buf64 = xp.empty(nl, dtype=xp.float64), empty(buf.size, np.float64, like=X)
            qn64[rows] = (Qd * Qd).sum(axis=1)
            Q, Yt, qa, ya, gbuf = Qd, Yd, qn64, (Yd * Yd).sum(axis=1), buf64
            counters["float64_spans"] += 1
        else:
            qn[rows] = qs
            Q, Yt, qa, ya, gbuf = Qr, Yr, qn, yn, buf
        # a product tile of this many rows stays in L2 until the scan reads it (few dimensions: the product's
        # writes and reads would cost more than the product; one cell: the whole product would not fit memory)
        step = max(1, _PRODUCT_TILE // (b1 - b0))
        for s in range(0, g1 - g0, step):
            G = gbuf[:min(step, g1 - g0 - s) * (b1 - b0)].reshape(-1, b1 - b0)
            xp.matmul(Q[s:s + step], Yt.T, out=G)
            _kernel("_scan_rows", G.shape[0], G, qa, ya, rows[s:s + step], qpos, b0, keys, ids)
        counters["distance_evaluations"] += (g1 - g0) * (b1 - b0)
    qr, t = xp.nonzero(ids >= 0)          # row-major: rows grouped, as the merge's device twin needs them
    qr = xp.ascontiguousarray(qr)         # numpy's nonzero of a 2-D array gives strided views
    yr = ids[qr, t]
    dd = xp.empty(qr.shape[0], dtype=xp.float64)
    if qr.shape[0]:
        _kernel("_pair_sqdist", qr.shape[0], X, Yo, qr, yr, dd)
        _kernel("_merge_candidates", qr.shape[0], ind, d2, qr, ygids[yr], dd)
    return qr, yr, dd


def _cell_points(X: Any, gids: Any, labels: Any, cells: np.ndarray) -> tuple:
    """Our points in the requested cells, for a peer: (points, ids, cells)."""
    xp = namespace(X)
    sel = xp.flatnonzero(xp.isin(labels, xp.asarray(cells)))
    return X[sel], gids[sel], labels[sel]


def _merge_sorted(ind: Any, d2: Any, rows: Any, cand: Any, dist: Any) -> None:
    """Merge (row, candidate, d^2) triples in any row order: stably grouped by
    row first (the device twin gives a thread each run of equal rows), so every
    row sees its candidates in the given order, as in the CPU twin's one pass."""
    xp = namespace(ind)
    if rows.shape[0] == 0:
        return
    if device_kind() != "cpu":
        o = xp.argsort(rows, kind="stable")
        rows, cand, dist = rows[o], cand[o], dist[o]
    _kernel("_merge_candidates", rows.shape[0], ind, d2, rows, cand, dist)


def _query_groups(comm: Any, targets: list[int], q: tuple, gids: Any, offsets: np.ndarray,
                  labels: Any, ind: Any, d2: Any, C: int, opts: dict, counters: dict) -> None:
    """Pull, from the ranks in ``targets``, their points in the cells ours may
    reach (bound below the current k-th distance), brute-force ours against
    them cell by cell, merge, and send the found pairs back as reverse candidates."""
    P, r = comm.size, comm.rank
    X, _, probes, bounds, _ = q
    xp = namespace(ind)
    k = ind.shape[1]
    reach = bounds < xp.sqrt(d2[:, k - 1]).astype(xp.float32)[:, None]
    cells = to_host(xp.unique(probes[reach]))
    wants = comm.allgather((targets, cells))
    sends = {t: _cell_points(X, gids, labels, wants[t][1]) for t in range(P) if r in wants[t][0]}
    got = comm.neighbor_exchange(sends, recv_from=targets)
    Y = xp.concatenate([X[:0]] + [xp.asarray(got[t][0]) for t in targets], axis=0)
    ygids = xp.concatenate([gids[:0]] + [xp.asarray(got[t][1]) for t in targets])
    ylab = xp.concatenate([labels[:0]] + [xp.asarray(got[t][2]) for t in targets])
    Yb = _by_cell(Y, ygids, ylab, xp.argsort(ylab, kind="stable"), C)
    qr, yr, dd = _cell_pass(q, 0, probes.shape[1], Yb, ind, d2, counters)
    if opts.get("reverse", True):
        # the pairs found, seen from the other side: candidates for the peers' lists
        yg = Yb[1][yr]
        owner = xp.searchsorted(xp.asarray(offsets), yg, side="right") - 1
        qg = gids[qr]
        parts = [(yg[owner == t], qg[owner == t], dd[owner == t]) for t in range(P)]
        lo = int(offsets[r])
        for tgt, src, dist in comm.alltoallv(parts):
            if len(tgt):
                _merge_sorted(ind, d2, xp.asarray(tgt) - lo, xp.asarray(src), xp.asarray(dist))
