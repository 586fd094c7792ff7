"""SPMD rank bodies of :func:`workbench.kernels.coloring.color`: one long task per worker.

Each rank sets up its vertex space (owned vertices, then one or two ghost
layers fetched from their owners), subscribes to the ghosts' colors, then
runs the speculative rounds: first-fit on the degree class that enters plus
the previous round's losers, one all-to-all of the changed colors, and the
conflict check on the boundary vertices that changed.  The local loops are
the numba kernels of :mod:`.cpu` on CPU workers and their numba.cuda twins of
:mod:`.cuda` on "gpu"/"gpu-sim" workers, where the first fit is speculative
(:func:`_speculative_first_fit`).  The setup (sparse gathers, ghost layers,
degree order: :func:`_setup_rank`) depends on the graph alone, so it runs on
the host once per distributed graph and kind, in its own group, and its
result stays on the workers (on the device for device workers) for every
later call's rounds (:func:`_color_rank`).
"""

from __future__ import annotations

import time
from typing import Any

import numba
import numpy as np
import scipy.sparse as sp

from ...backend import device_kind, launch, namespace, to_device, to_host
from ...partition import block_offsets, edge_pattern, owner_of, splitmix64
from .cpu import _find_losers, _first_fit, _has_remote


def priority_hash(gid: Any) -> Any:
    """Consistent 63-bit hash of global ids (splitmix64), the tie-breaker every rank agrees on."""
    return (splitmix64(np.asarray(gid).astype(np.uint64)) >> np.uint64(1)).astype(np.int64)


def _setup_rank(comm: Any, block: Any, row_offsets: np.ndarray, col_offsets: np.ndarray, n_rows: int,
                n_cols: int, kind: int | str) -> tuple[dict, dict]:
    """Everything a coloring needs that depends on the graph alone: ghost layers,
    local ids, subscriptions, degrees, priorities, degree batches, boundary.

    :func:`~workbench.kernels.coloring.color` runs it once per (container,
    kind) and keeps the result on the workers, so later calls go straight to
    the rounds.  On device workers the arrays are moved to the device here.
    """
    t0 = time.perf_counter()
    # The setup is sparse host work (scipy); a device block is brought over once.
    A = edge_pattern(block)
    A.indices = A.indices.astype(np.int64, copy=False)
    A.indptr = A.indptr.astype(np.int64, copy=False)
    rlo = int(row_offsets[comm.rank])

    if kind == "partial2":
        lo, hi = int(col_offsets[comm.rank]), int(col_offsets[comm.rank + 1])
        s = _setup_partial2(comm, A, rlo, row_offsets, lo, hi, n_rows, n_cols)
    else:
        lo, hi = rlo, int(row_offsets[comm.rank + 1])
        s = _setup_graph(comm, A, lo, hi, row_offsets, n_cols, kind)
    n_loc = hi - lo
    H = s["H"]
    send_idx, recv_rng, deg_h = _subscribe(comm, H, col_offsets, lo, s["deg"])
    n_v = n_loc + len(H)
    gid = np.concatenate([np.arange(lo, hi, dtype=np.int64), H])
    deg = np.concatenate([s["deg"], deg_h]).astype(np.int64)
    hsh = priority_hash(gid)
    depth = 1 if kind == 1 else 2
    mids_are_vertices = kind == 2
    ip1, ix1, ip2, ix2 = s["ip1"], s["ix1"], s["ip2"], s["ix2"]

    # largest degree first for few colors; ties in id order keep meshes near their natural 2-coloring
    order = np.lexsort((gid[:n_loc], -deg[:n_loc])).astype(np.int64)
    # Local ids follow that order (ghosts: by degree too).  First fit and the conflict check read their
    # neighbours' colors at random; on a power-law graph most reads then land on the hubs' few cache lines at
    # the front (R-MAT SCALE 20 on one worker: 0.35 -> 0.09 s a call).  The colors do not change.
    old = np.concatenate([order, n_loc + np.lexsort((gid[n_loc:], -deg[n_loc:]))]).astype(np.int64)
    new = np.empty(n_v, dtype=np.int64)
    new[old] = np.arange(n_v)
    pos = new[:n_loc]
    if kind == 2:           # one vertex space: every vertex's row (ghosts' too) and every entry move
        ip1, ix1 = _relabelled(ip1, ix1, new, new, n_v)
        ip2, ix2 = ip1, ix1
    elif kind == 1:
        ip1, ix1 = _relabelled(ip1, ix1, pos, new, n_v)
        ip2, ix2 = ip1, ix1
    else:                   # partial2: columns' rows move, the mids (matrix rows) keep their ids
        n_mids = len(ip2) - 1
        ip1, ix1 = _relabelled(ip1, ix1, pos, None, n_mids)
        ip2, ix2 = _relabelled(ip2, ix2, np.arange(n_mids), new, n_v)
    deg, hsh, gid = deg[old], hsh[old], gid[old]
    # each subscriber's list, inverted: where an owned vertex sits in it (-1: not there), so a round finds the
    # changed vertices' places in time of their number, not of the list's (27 passes over most of a rank a call)
    send_slot = {}
    for q, i in send_idx.items():
        send_slot[q] = np.full(n_loc, -1, dtype=np.int32 if n_loc < 2**31 else np.int64)
        send_slot[q][new[i]] = np.arange(len(i))
    recv_idx = {q: new[n_loc + np.arange(a, b)] for q, (a, b) in recv_rng.items()}
    # Degree classes, largest first: one class enters per round, so hubs are
    # colored (and their conflicts settled) before the many low-degree vertices
    # -- close to sequential largest-first quality.  A vertex colored in round k
    # saw every color fixed before round k, so conflicts only pair vertices that
    # both changed in round k: each rank checks just its own changed vertices.
    cls = _degree_class(deg[:n_loc])
    n_cls = int(comm.allreduce(int(cls.max()) + 1 if n_loc else 0, op="max"))
    present = comm.allreduce(np.bincount(cls, minlength=n_cls)[:n_cls] > 0, op="or")
    # local ids are in coloring order, so each class (largest first) is one run of them
    ends = np.searchsorted(-cls, -np.arange(n_cls - 1, -1, -1), side="right")
    starts = np.concatenate([[0], ends[:-1]])
    batches = [np.arange(starts[i], ends[i], dtype=np.int64) for i, b in enumerate(range(n_cls - 1, -1, -1))
               if present[b]]
    # host boundary (u's constraint set reaches a ghost): the supersteps below, and the rounds on CPU workers
    remote = np.zeros(n_loc, dtype=bool)
    _has_remote(n_loc, ip1, ix1, ip2, ix2, depth, mids_are_vertices, remote)
    # ... and a class with many boundary vertices in supersteps (Bozdag et al.'s): vertices colored in one round
    # conflict only with the other ranks' boundary vertices of that round, so smaller rounds leave fewer
    # conflicts to redo (interior vertices never conflict: they all go in the first step; one rank has none).
    # Every rank cuts a class into as many steps as the rank with most of its boundary needs: all take the
    # same rounds.
    if comm.size > 1:
        most = comm.allreduce(np.array([int(remote[b].sum()) for b in batches] + [n_loc], dtype=np.int64),
                              op=np.maximum)
        step = max(_SUPERSTEP, -(-int(most[-1]) // _MAX_SUPERSTEPS))
        split = []
        for b, c in zip(batches, most[:-1], strict=True):
            steps = np.array_split(b[remote[b]], max(1, -(-int(c) // step)))
            split += [b[~remote[b] | np.isin(b, steps[0])], *steps[1:]]     # each in the class's order
        batches = split

    device = device_kind()
    if device != "cpu":
        # device workers: the setup's arrays move over once; rounds run numba.cuda twins of the cpu kernels
        from . import cuda as dev

        ip1, ix1, ip2, ix2, deg, hsh, gid, pos = (to_device(a) for a in (ip1, ix1, ip2, ix2, deg, hsh, gid, pos))
        batches = [to_device(b) for b in batches]
        send_slot = {q: to_device(i) for q, i in send_slot.items()}
        recv_idx = {q: to_device(i) for q, i in recv_idx.items()}
    xp = namespace(ip1)
    if device != "cpu":
        remote = xp.zeros(n_loc, dtype=bool)
        launch(dev._has_remote, n_loc, n_loc, ip1, ix1, ip2, ix2, depth, mids_are_vertices, remote)
    boundary = xp.flatnonzero(remote).astype(xp.int64)
    setup = {"device": device, "n_loc": n_loc, "n_v": n_v, "depth": depth, "mids_are_vertices": mids_are_vertices,
             "ip1": ip1, "ix1": ix1, "ip2": ip2, "ix2": ix2, "deg": deg, "hsh": hsh, "gid": gid, "pos": pos,
             "batches": batches, "send_slot": send_slot, "recv_idx": recv_idx, "boundary": boundary,
             "nnz": int(A.nnz)}
    return setup, {"seconds": time.perf_counter() - t0, "bytes_sent": int(comm.stats["bytes_sent"])}


#: Boundary vertices a rank colors per round within a degree class (a superstep), and the most supersteps a rank's
#: vertices take (larger graphs take larger steps: each round costs an exchange).  On 2 workers here, against whole
#: classes: a Jacobian-like 200000 x 80000 partial distance-2 coloring 0.160 -> 0.110 s (recolored 69291 -> 17131,
#: 29 -> 25 colors), R-MAT SCALE 18 distance-1 within noise (13567 -> 8444 recolored, 16 -> 31 rounds); a mesh, whose
#: boundary is one plane, keeps its rounds.  Steps of 1024 made R-MAT's 139 rounds cost more than they saved.
_SUPERSTEP = 4096
_MAX_SUPERSTEPS = 32


def _color_rank(comm: Any, setup: dict, use_degree: bool, max_rounds: int) -> tuple:
    """The speculative rounds on a rank's prepared :func:`_setup_rank` (read only: every call starts afresh)."""
    t0 = time.perf_counter()
    device = setup["device"]
    dev = None
    if device != "cpu":
        from . import cuda as dev
    n_loc, n_v, depth, mids_are_vertices = setup["n_loc"], setup["n_v"], setup["depth"], setup["mids_are_vertices"]
    ip1, ix1, ip2, ix2 = setup["ip1"], setup["ix1"], setup["ip2"], setup["ix2"]
    deg, hsh, gid, pos, batches = setup["deg"], setup["hsh"], setup["gid"], setup["pos"], setup["batches"]
    send_slot, recv_idx, boundary = setup["send_slot"], setup["recv_idx"], setup["boundary"]
    xp = namespace(ip1)

    colors = xp.full(n_v, -1, dtype=xp.int64)
    on_boundary = xp.zeros(n_loc, dtype=bool)
    on_boundary[boundary] = True
    loser = xp.zeros(n_loc, dtype=bool)
    redo = xp.zeros(0, dtype=xp.int64)
    conflicts: list[int] = []
    k = passes = 0
    while True:
        todo = xp.concatenate([redo, batches[k]]) if k < len(batches) else redo
        if dev is None:
            _first_fit(todo, ip1, ix1, ip2, ix2, depth, mids_are_vertices, colors)
        else:
            passes += _speculative_first_fit(dev, todo, ip1, ix1, ip2, ix2, depth, mids_are_vertices, colors,
                                             deg, hsh, gid, use_degree, loser)
        n_changed = _exchange_colors(comm, colors, todo, send_slot, recv_idx, len(redo))
        if k > 0:
            conflicts.append(n_changed[1])
        k += 1
        if n_changed[0] == 0 and k >= len(batches):
            break
        if k - len(batches) >= max_rounds:   # the rounds after the degree classes' passes resolve conflicts
            raise RuntimeError(f"coloring did not converge in max_rounds={max_rounds} rounds "
                               f"(conflicts per round: {conflicts[-5:]})")
        cand = todo[on_boundary[todo]]
        if dev is None:
            _find_losers(cand, n_loc, ip1, ix1, ip2, ix2, depth, mids_are_vertices, colors, deg, hsh, gid,
                         use_degree, loser)
        else:
            launch(dev._find_losers, cand.shape[0], cand, n_loc, ip1, ix1, ip2, ix2, depth, mids_are_vertices,
                   colors, deg, hsh, gid, use_degree, loser)
        lost = cand[loser[cand]]
        loser[cand] = False
        colors[lost] = -1
        redo = xp.sort(lost).astype(xp.int64)          # local ids are the coloring order
    out = to_host(colors[pos])      # owned vertices in id order; the answer comes home once (a device sync)
    from distributed import get_worker

    info = {"worker": get_worker().address, "rounds": k, "conflicts": conflicts,
            "bytes_sent": int(comm.stats["bytes_sent"]), "backend": device, "speculative_passes": passes,
            "nnz": setup["nnz"], "color_seconds": time.perf_counter() - t0}
    return out, info


def _speculative_first_fit(dev: Any, todo: Any, ip1: Any, ix1: Any, ip2: Any, ix2: Any, depth: int,
                           mids_are_vertices: bool, colors: Any, deg: Any, hsh: Any, gid: Any, use_degree: bool,
                           lost: Any, wide_max: int | None = None) -> int:
    """Device first fit of ``todo``: every vertex picks its color at once
    (tentative), those that share it with a higher-priority vertex of the
    batch in their constraint set give it back and try again; the others
    keep it.  Ends with ``todo`` colored without conflicts among this rank's
    vertices, as the CPU's sequential first fit does.  Returns the passes made.

    Passes over at most ``wide_max`` vertices take the block-per-vertex
    kernels (default ``_WIDE_MAX`` on a GPU, none under the simulator, which
    pays ~0.2 ms a thread per barrier: gpu-sim coloring ran 3-4x longer).
    Both give the same colors.
    """
    if wide_max is None:
        wide_max = 0 if numba.config.ENABLE_CUDASIM else _WIDE_MAX
    xp = namespace(colors)
    left, passes = todo, 0
    while left.shape[0]:
        # few vertices (the hubs' degree classes, the conflicts' losers): a block per vertex shares its scan;
        # many (the low-degree classes): a thread each
        n = left.shape[0]
        wide = n <= wide_max
        first_fit, losers = (dev._first_fit_wide, dev._tentative_losers_wide) if wide else \
            (dev._first_fit, dev._tentative_losers)
        threads, block = (n * dev.WIDE, dev.WIDE) if wide else (n, 256)
        launch(first_fit, threads, left, ip1, ix1, ip2, ix2, depth, mids_are_vertices, colors, block=block)
        launch(losers, threads, left, ip1, ix1, ip2, ix2, depth, mids_are_vertices, colors,
               deg, hsh, gid, use_degree, lost, block=block)
        again = lost[left]
        colors[left] = xp.where(again, -1, -2 - colors[left])     # tentative -2 - c becomes c
        lost[left] = False
        left = left[again]
        passes += 1
    return passes


#: Passes over at most this many vertices take the block-per-vertex kernels (``cuda.WIDE`` threads each).
_WIDE_MAX = 1 << 15


def _relabelled(indptr: np.ndarray, indices: np.ndarray, row_new: np.ndarray, col_new: np.ndarray | None,
                n_cols: int) -> tuple[np.ndarray, np.ndarray]:
    """A CSR pattern with row ``i`` moved to ``row_new[i]`` and entries relabelled through ``col_new`` (None:
    kept, ids < ``n_cols``), each row's entries increasing: a row's reads of its neighbours' colors then run
    forwards, the hubs' first (3x faster first fit than unsorted rows).  One sort of (row, column) keys: numpy's
    vectorized sort took 0.22 s for R-MAT SCALE 20's 31M entries, a counting sort 1.4 s, sorting each row 1.6 s."""
    lens = np.diff(indptr)
    key = np.repeat(row_new.astype(np.int64, copy=False), lens)
    key *= n_cols
    key += indices if col_new is None else col_new[indices]
    key.sort()
    out_ptr = np.zeros(len(lens) + 1, dtype=np.int64)
    out_ptr[1 + row_new] = lens
    np.cumsum(out_ptr, out=out_ptr)
    np.remainder(key, max(n_cols, 1), out=key)
    return out_ptr, key


def _degree_class(deg: np.ndarray) -> np.ndarray:
    """Octave of each degree: 0 for degree 0-1, then floor(log2(deg))."""
    return np.floor(np.log2(np.maximum(deg, 1))).astype(np.int64)


def _exchange_colors(comm: Any, colors: np.ndarray, changed: np.ndarray, send_slot: dict, recv_idx: dict,
                     n_lost: int) -> tuple[int, int]:
    """Send the changed colors (``changed``: distinct owned vertices) each subscriber needs, as places in its
    list, and apply what arrived, in one all-to-all that also carries every rank's counts, so the round needs
    no separate allreduce.  Returns the global (changed, lost) counts."""
    xp = namespace(colors)
    parts = []
    for q in range(comm.size):
        slot = send_slot.get(q)
        if slot is None:
            parts.append((len(changed), n_lost))
            continue
        at = slot[changed]
        sent = at >= 0
        parts.append((len(changed), n_lost, at[sent], colors[changed[sent]].astype(xp.int32)))
    got = comm.alltoall(parts)
    for q, msg in enumerate(got):
        if q in recv_idx and len(msg) > 2:
            colors[recv_idx[q][msg[2].astype(xp.int64)]] = msg[3]
    return sum(int(m[0]) for m in got), sum(int(m[1]) for m in got)


def _subscribe(comm: Any, H: np.ndarray, offsets: np.ndarray, lo: int, deg_own: np.ndarray) -> tuple:
    """Tell each owner which of its vertices this rank holds as ghosts; get their degrees back.

    ``H`` is sorted, so each owner's share is one contiguous range of it.
    Returns (send lists by rank as owned-local indices, recv ranges into H by rank, degrees of H).
    """
    P = comm.size
    cuts = np.searchsorted(owner_of(H, offsets), np.arange(P + 1)) if len(H) else np.zeros(P + 1, dtype=np.int64)
    got = comm.alltoallv([H[cuts[q]:cuts[q + 1]] for q in range(P)])
    send_idx = {q: (g - lo).astype(np.int64) for q, g in enumerate(got) if len(g) and q != comm.rank}
    degs = comm.alltoallv([deg_own[g - lo].astype(np.int64) for g in got])
    recv_rng = {q: (int(cuts[q]), int(cuts[q + 1])) for q in range(P) if cuts[q + 1] > cuts[q]}
    deg_h = np.concatenate(degs) if degs else np.zeros(0, dtype=np.int64)
    return send_idx, recv_rng, deg_h


def _fetch_rows(comm: Any, need: np.ndarray, offsets: np.ndarray, A: sp.csr_matrix, lo: int) -> tuple:
    """Full rows ``need`` (sorted global ids) from their owners: (indptr, global column ids)."""
    P = comm.size
    cuts = np.searchsorted(owner_of(need, offsets), np.arange(P + 1)) if len(need) else np.zeros(P + 1, np.int64)
    got = comm.alltoallv([need[cuts[q]:cuts[q + 1]] for q in range(P)])
    replies = []
    for ids in got:
        sub = A[ids - lo] if len(ids) else A[:0]
        replies.append((np.diff(sub.indptr).astype(np.int64), sub.indices.astype(np.int64)))
    back = comm.alltoallv(replies)
    lens = np.concatenate([b[0] for b in back])
    indptr = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=indptr[1:])
    return indptr, np.concatenate([b[1] for b in back])


def _unique_outside(ids: np.ndarray, n: int, lo: int, hi: int, extra: np.ndarray | None = None) -> np.ndarray:
    """Sorted unique ids (plus ``extra``) not in the owned range [lo, hi)."""
    mark = np.zeros(n, dtype=bool)
    mark[ids] = True
    if extra is not None:
        mark[extra] = True
    mark[lo:hi] = False
    return np.flatnonzero(mark).astype(np.int64)


def _local_ids(n: int, lo: int, hi: int, H: np.ndarray) -> np.ndarray:
    """Global id -> local vertex index (owned first, then ghosts in H order); -1 elsewhere."""
    lut = np.full(n, -1, dtype=np.int64)
    lut[lo:hi] = np.arange(hi - lo)
    lut[H] = np.arange(hi - lo, hi - lo + len(H))
    return lut


def _setup_graph(comm: Any, A: sp.csr_matrix, lo: int, hi: int, offsets: np.ndarray, n: int,
                 kind: int) -> dict:
    n_loc = hi - lo
    deg = np.diff(A.indptr)
    G1 = _unique_outside(A.indices, n, lo, hi)
    if kind == 1:
        lut = _local_ids(n, lo, hi, G1)
        ix = lut[A.indices]
        return {"H": G1, "deg": deg, "ip1": A.indptr, "ix1": ix, "ip2": A.indptr, "ix2": ix}
    # distance 2: the second ghost layer is the first layer's full adjacency
    g_ptr, g_idx = _fetch_rows(comm, G1, offsets, A, lo)
    H = _unique_outside(g_idx, n, lo, hi, extra=G1)
    lut = _local_ids(n, lo, hi, H)
    row_len = np.zeros(n_loc + len(H), dtype=np.int64)
    row_len[:n_loc] = deg
    row_len[n_loc + np.searchsorted(H, G1)] = np.diff(g_ptr)
    ip = np.zeros(len(row_len) + 1, dtype=np.int64)
    np.cumsum(row_len, out=ip[1:])
    # G1 rows sit at increasing positions of H, so their concatenation is already in row order
    ix = lut[np.concatenate([A.indices, g_idx])]
    return {"H": H, "deg": deg, "ip1": ip, "ix1": ix, "ip2": ip, "ix2": ix}


def _setup_partial2(comm: Any, A: sp.csr_matrix, rlo: int, row_offsets: np.ndarray, lo: int, hi: int,
                    m: int, n: int) -> dict:
    # transpose on the workers: each nonzero (row, col) goes to the owner of its column
    rows = np.repeat(np.arange(rlo, rlo + A.shape[0], dtype=np.int64), np.diff(A.indptr))
    cols = A.indices
    col_offsets = block_offsets(n, comm.size)  # the same split color() passes for the result
    own = owner_of(cols, col_offsets)
    order = np.argsort(own, kind="stable")
    rows, cols, own = rows[order], cols[order], own[order]
    cuts = np.searchsorted(own, np.arange(comm.size + 1))
    got = comm.alltoallv([np.stack([cols[cuts[q]:cuts[q + 1]], rows[cuts[q]:cuts[q + 1]]])
                          for q in range(comm.size)])
    e = np.concatenate(got, axis=1)
    n_loc = hi - lo
    T = sp.csr_matrix((np.ones(e.shape[1], dtype=np.int8), (e[0] - lo, e[1])), shape=(n_loc, m))
    T.sum_duplicates()
    deg = np.diff(T.indptr).astype(np.int64)
    mark = np.zeros(m, dtype=bool)
    mark[T.indices] = True
    mids = np.flatnonzero(mark).astype(np.int64)       # rows touching my columns
    r_ptr, r_idx = _fetch_rows(comm, mids, row_offsets, A, rlo)
    H = _unique_outside(r_idx, n, lo, hi)
    lut = _local_ids(n, lo, hi, H)
    ix1 = np.searchsorted(mids, T.indices.astype(np.int64)).astype(np.int64)
    return {"H": H, "deg": deg, "ip1": T.indptr.astype(np.int64), "ix1": ix1, "ip2": r_ptr, "ix2": lut[r_idx]}
