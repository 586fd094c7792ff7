"""The SPMD rank bodies of the distributed BFS: the R x C layout, the per-rank
structures built once per container, and the level-synchronous search
(expand, local expansion, fold) with the on-worker Graph500 validation."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from ... import comms
from ...backend import device_kind, device_namespace, launch, namespace, synchronize, to_host
from ...partition import BlockGrid, RowBlocks, block_offsets, check_symmetric, distribute, edge_pattern
from . import cpu
from .rules import _check_block

#: Beamer / GAPBS direction-switch parameters.
ALPHA, BETA = 15.0, 18.0

# --------------------------------------------------------------------------
# Layout: the R x C grid and who owns which vertices
# --------------------------------------------------------------------------


@dataclass
class _Layout:
    """Rank (i, j) = i*C + j holds rows ``roffs[i]:roffs[i+1]`` and the columns
    of pieces (i', j) for all i'; it owns vertex piece k = i*C + j
    ``voffs[k]:voffs[k+1]`` (piece (i, j) is the j-th of C sub-blocks of row
    block i).  So a column's frontier lives within a processor column and a
    row's owners within a processor row, as the paper's expand/fold need."""

    n: int
    R: int
    C: int
    roffs: np.ndarray
    voffs: np.ndarray
    workers: list

    @property
    def shape(self) -> tuple[int, int]:
        return (self.R, self.C)


def _make_layout(n: int, R: int, C: int, roffs: np.ndarray, workers: list) -> _Layout:
    voffs = np.concatenate([[0]] + [roffs[i] + block_offsets(int(roffs[i + 1] - roffs[i]), C)[1:]
                                    for i in range(R)]).astype(np.int64)
    return _Layout(n, R, C, np.asarray(roffs, dtype=np.int64), voffs, list(workers))


def _placed(graph: Any, client: Any, partition: str, RC: tuple[int, int]) -> tuple[Any, _Layout]:
    """The graph as a container on the workers, and the BFS layout for it."""
    R, C = RC
    if not isinstance(graph, RowBlocks | BlockGrid):
        graph = distribute(graph, client, partition="1d" if C == 1 else "2d", grid=None if C == 1 else (R, C),
                           symmetric=True)
    n = int(graph.shape[0])
    if isinstance(graph, RowBlocks) and R == graph.n_parts:
        roffs = graph.offsets
    elif isinstance(graph, BlockGrid) and graph.grid[0] == R:
        roffs = graph.row_offsets
    else:
        roffs = block_offsets(n, R)
    return graph, _make_layout(n, R, C, roffs, graph.workers)


def _ensure_symmetric(G: Any, client: Any) -> None:
    """Trust ``G.symmetric`` when set; otherwise check on the workers, once per container."""
    if not check_symmetric(G, client):
        raise ValueError("graph must be symmetric (an undirected graph): A != A.T on the workers")


def _source_layout(G: Any) -> dict:
    if isinstance(G, RowBlocks):
        return {"kind": "rows", "roffs": np.asarray(G.offsets), "coffs": np.array([0, G.shape[1]])}
    return {"kind": "grid", "roffs": np.asarray(G.row_offsets), "coffs": np.asarray(G.col_offsets)}


def _rank_sources(G: Any) -> list:
    return list(G.parts)


def _global_coo(part: Any, rank: int, src: dict) -> tuple[np.ndarray, np.ndarray]:
    A = edge_pattern(part)
    C = len(src["coffs"]) - 1
    i, j = (rank, 0) if src["kind"] == "rows" else divmod(rank, C)
    rows = np.repeat(np.arange(A.shape[0], dtype=np.int64), np.diff(A.indptr)) + int(src["roffs"][i])
    return rows, A.indices.astype(np.int64) + int(src["coffs"][j])


# --------------------------------------------------------------------------
# Prepared per-rank structures (built once per container and grid, cached)
# --------------------------------------------------------------------------


@dataclass
class _Prepared:
    futures: list
    layout: _Layout
    seconds: float
    bytes_moved: int
    _deg: np.ndarray | None = None

    def degrees(self, client: Any) -> np.ndarray:
        """Degree of every vertex (for picking search keys), gathered once."""
        if self._deg is None:
            parts = client.gather([client.submit(_degrees_of, f, workers=[a], pure=False)
                                   for f, a in zip(self.futures, self.layout.workers, strict=True)])
            self._deg = np.concatenate(parts)
        return self._deg


def _degrees_of(prep: dict) -> np.ndarray:
    return to_host(prep["deg"]).astype(np.int32)


def _prepare(G: Any, client: Any, layout: _Layout) -> list:
    """Futures of the per-rank BFS structures, built on the workers once per (container, grid)."""
    cache = G.meta.setdefault("_bfs_prep", {})
    rec = cache.get(layout.shape)
    if rec is None:
        src = _source_layout(G)
        identity = (src["kind"] == "rows" and layout.C == 1 and np.array_equal(src["roffs"], layout.roffs))
        t0 = time.perf_counter()
        futs = comms.run_spmd(_prepare_rank, _rank_sources(G), src, layout, identity, client=client,
                              workers=layout.workers, name="bfs-prepare", publish_info=True)
        comms.wait_group(futs)
        parts, infos = comms.split_results(futs)
        rec = cache[layout.shape] = _Prepared(parts, layout, time.perf_counter() - t0,
                                              sum(i["bytes_sent"] for i in infos))
    return rec.futures


def _column_space(L: _Layout, j: int) -> tuple[np.ndarray, np.ndarray]:
    """The column pieces (i', j), i' = 0..R-1, of processor column ``j`` as global ranges, and where each
    starts in the block's local column space: piece by piece, each start rounded up to a whole byte so that
    a piece's packed frontier bitmap drops into the column bitmap as it arrives, with no bit shifts."""
    pieces = np.array([[L.voffs[ip * L.C + j], L.voffs[ip * L.C + j + 1]] for ip in range(L.R)], dtype=np.int64)
    padded = (pieces[:, 1] - pieces[:, 0] + 7) // 8 * 8
    col0 = np.concatenate([[0], np.cumsum(padded)]).astype(np.int64)
    return pieces, col0


class _Spare(list):
    """A prepared block's spare search buffers (:meth:`_Searcher.release`): never pickled with the block."""

    def __reduce__(self) -> tuple:
        return _Spare, ()


def _prepare_rank(comm: Any, part: Any, src: dict, L: _Layout, identity: bool) -> tuple[dict, dict]:
    i, j = divmod(comm.rank, L.C)
    rlo, rhi = int(L.roffs[i]), int(L.roffs[i + 1])
    nr = rhi - rlo
    col_pieces, col0 = _column_space(L, j)
    nc = int(col0[-1])
    # 1-D with every row block starting on a byte: local column ids are the global ids
    global_cols = L.C == 1 and np.array_equal(col0[:-1], col_pieces[:, 0])
    if identity and global_cols:
        csr = edge_pattern(part)
        csr = sp.csr_matrix((np.ones(csr.nnz, np.int8), csr.indices, csr.indptr), shape=(nr, nc))
    else:
        rows, cols = _global_coo(part, comm.rank, src)
        k_u = np.searchsorted(L.voffs, cols, side="right") - 1
        dest = (np.searchsorted(L.roffs, rows, side="right") - 1) * L.C + k_u % L.C
        order = np.argsort(dest, kind="stable")
        cuts = np.searchsorted(dest[order], np.arange(comm.size + 1))
        rows, cols = rows[order], cols[order]
        got = comm.alltoallv([np.stack([rows[cuts[r]:cuts[r + 1]], cols[cuts[r]:cuts[r + 1]]])
                              for r in range(comm.size)])
        e = np.concatenate(got, axis=1)
        ip = (np.searchsorted(L.voffs, e[1], side="right") - 1) // L.C
        cl = col0[ip] + (e[1] - col_pieces[ip, 0])
        csr = sp.csr_matrix((np.ones(e.shape[1], np.int8), (e[0] - rlo, cl)), shape=(nr, nc))
    csr.sort_indices()
    csc = csr.tocsc()
    rowc = comm.split(i, j)
    deg_rows = rowc.allreduce(np.diff(csr.indptr).astype(np.int64))
    olo, ohi = int(L.voffs[comm.rank]), int(L.voffs[comm.rank + 1])
    idx_t = np.int32 if max(nr, nc) < 2**31 else np.int64
    csr_ptr, csr_idx = csr.indptr.astype(np.int64), csr.indices.astype(idx_t)
    hub = np.zeros(nr, dtype=idx_t)
    cpu.row_hubs(csr_ptr, csr_idx, np.diff(csc.indptr).astype(np.int64), hub)
    colmap = None
    if not global_cols:  # local column -> global vertex (-1 in the byte padding between pieces)
        colmap = np.full(nc, -1, dtype=np.int64)
        for (lo, hi), c0 in zip(col_pieces, col0[:-1], strict=True):
            colmap[c0:c0 + hi - lo] = np.arange(lo, hi)
    prep = {
        "csr_ptr": csr_ptr, "csr_idx": csr_idx,
        "csc_ptr": csc.indptr.astype(np.int64), "csc_idx": csc.indices.astype(idx_t),
        "hub": hub, "cand": np.flatnonzero(np.diff(csr_ptr) > 0).astype(idx_t),
        "colmap": colmap, "col0": col0, "col_sizes": col_pieces[:, 1] - col_pieces[:, 0],
        "deg": deg_rows[olo - rlo:ohi - rlo].copy(),
        "nnz_total": int(comm.allreduce(int(csr.nnz))), "layout": L, "rlo": rlo,
        "row_sub": (L.voffs[i * L.C:(i + 1) * L.C + 1] - rlo).astype(np.int64),
    }
    xp = namespace(part) if namespace(part) is not np else device_namespace()
    if xp is not np:  # a GPU worker: the search structures live on the device from now on
        for k in ("csr_ptr", "csr_idx", "csc_ptr", "csc_idx", "hub", "cand", "colmap", "deg"):
            if prep[k] is not None:
                prep[k] = xp.asarray(prep[k])
    prep["spare"] = _Spare()
    prep["rest"] = _rest_of_graph(comm, prep, csr)
    return prep, {"bytes_sent": comm.stats["bytes_sent"], "nnz": int(csr.nnz)}


#: The rest of the graph (outside its highest-degree vertex's component) is replicated on every rank when it
#: holds at most this share of the edges.
_REST_SHARE = 1 / 16


def _rest_of_graph(comm: Any, prep: dict, csr: sp.csr_matrix) -> dict | None:
    """The graph outside the component of its highest-degree vertex (the giant component of a power-law
    graph), replicated on every rank when small: a search from there then runs on each rank alone, with no
    exchange.  A level costs a collective (~0.1-0.2 ms here), so a search in a component of one edge took
    0.6 ms on 2 workers against scipy's 0.2 ms, and one such root among 16 sets the harmonic-mean TEPS.
    Components are closed under adjacency, so every vertex the reference search leaves unreached has all its
    edges among the unreached: their rows, gathered from the blocks, are the rest's whole adjacency.

    Returns ``{"reached": the reference component as a packed bitmap of all n vertices, "ids": the sorted
    unreached vertices with edges, "ptr", "idx": their CSR over positions in ids}``, or None when the rest
    holds more than ``_REST_SHARE`` of the edges (no giant component) or the graph has none."""
    L = prep["layout"]
    olo = int(L.voffs[comm.rank])
    deg = to_host(prep["deg"])
    k = int(np.argmax(deg)) if len(deg) else 0
    top_deg, neg_root = max(comm.allgather((int(deg[k]) if len(deg) else -1, -(olo + k))))
    if top_deg <= 0:
        return None
    search = _Searcher(comm, prep, {"direction": "auto", "alpha": ALPHA, "beta": BETA})
    _, level, _ = search.run(-neg_root)
    reached = np.concatenate(comm.allgather(to_host(level) >= 0))
    search.release()   # warm buffers for the first search the user asks for
    rlo, rhi = int(prep["rlo"]), int(prep["rlo"]) + csr.shape[0]
    rows = np.flatnonzero(~reached[rlo:rhi] & (np.diff(csr.indptr) > 0))
    sub = csr[rows]
    if comm.allreduce(int(sub.nnz)) > prep["nnz_total"] * _REST_SHARE:
        return None
    cols = sub.indices.astype(np.int64)
    colmap = prep["colmap"]
    u = np.repeat(rows + rlo, np.diff(sub.indptr))
    v = cols if colmap is None else to_host(colmap)[cols]
    e = np.concatenate(comm.allgather(np.stack([u, v])), axis=1)
    ids = np.unique(e[0])
    pu, pv = np.searchsorted(ids, e[0]), np.searchsorted(ids, e[1])
    order = np.lexsort((pv, pu))
    ptr = np.concatenate([[0], np.cumsum(np.bincount(pu, minlength=len(ids)))]).astype(np.int64)
    # compiled here, outside the timed searches: one vertex without edges
    cpu.component_bfs(np.zeros(2, np.int64), pv[:0], 0, np.zeros(1, np.int64), *np.full((2, 1), -1, np.int64))
    return {"reached": np.packbits(reached), "ids": ids, "ptr": ptr, "idx": pv[order]}


# --------------------------------------------------------------------------
# The SPMD search
# --------------------------------------------------------------------------


def _bfs_rank(comm: Any, rank_arg: tuple, sources: list, opts: dict) -> dict:
    prep, check = rank_arg  # check: (original row block, its first row) to validate against, or None
    s = _Searcher(comm, prep, opts)
    keep = opts.get("keep", True)
    out = []
    for src in sources:
        parent, level, st = s.run(src)
        if check is not None:
            st["valid"] = s.validate(*check, parent, level, src)
        # the client widens these to int64: the narrowest exact types cross the network
        out.append({"parent": _narrow(parent, s.L.n) if keep else None,
                    "level": _narrow(level, st["levels"]) if keep else None, "stats": st})
    synchronize(s.parent, s.level)  # device work done before the task returns
    s.release()
    return {"searches": out}


def _narrow(x: Any, bound: int) -> np.ndarray:
    """Host copy of an int64 array whose values lie in [-1, bound], in the smallest signed type that holds them."""
    t = next(t for t in (np.int8, np.int16, np.int32, np.int64) if bound <= np.iinfo(t).max)
    return to_host(x).astype(t)   # a copy: the searcher's buffers are reused


class _Searcher:
    """One rank's state for searches on its prepared block (buffers reused across searches)."""

    def __init__(self, comm: Any, prep: dict, opts: dict):
        self.comm, self.p, self.opts = comm, prep, opts
        L = prep["layout"]
        self.L = L
        self.i, self.j = divmod(comm.rank, L.C)
        self.rowc = comm.split(self.i, self.j) if L.C > 1 else None
        self.colc = comm.split(self.j, self.i) if L.C > 1 else comm
        self.xp = xp = namespace(prep["csr_idx"])
        # The path is the worker's (fixed when the cluster started); device arrays take it on any worker.
        self.kind = device_kind() if xp is np else "gpu"
        self.dev = None
        if self.kind != "cpu":
            from . import cuda as dev  # numba.cuda is imported on the device path only

            self.dev = dev
        self.olo, self.ohi = int(L.voffs[comm.rank]), int(L.voffs[comm.rank + 1])
        self.no = self.ohi - self.olo
        self.nr = len(prep["csr_ptr"]) - 1
        self.nc = len(prep["csc_ptr"]) - 1
        self.own0 = self.olo - prep["rlo"]  # owned piece inside the row block
        self.piece_sizes = np.diff(L.voffs)
        self.comm_s = 0.0  # seconds inside collectives (waiting included), for the per-level breakdown
        # the buffers of an earlier search on this block, else fresh ones (their pages and the kernels' warm-up
        # cost ~1 ms a call at SCALE 20); given back by release()
        try:
            self.buffers = prep["spare"].pop()   # atomic: concurrent searches take different sets
        except IndexError:
            self.buffers = self._fresh_buffers()
        self.__dict__.update(self.buffers)

    def _fresh_buffers(self) -> dict:
        xp, prep = self.xp, self.p
        itype = prep["csr_idx"].dtype
        buffers = {
            "parent": xp.full(self.no, -1, dtype=np.int64), "level": xp.full(self.no, -1, dtype=np.int64),
            # one byte per row for the numba twins; a 32-bit word on the device, where rows are claimed atomically
            "visited": xp.zeros(self.nr, dtype=bool if self.dev is None else np.int32),
            "fbits": xp.zeros(self.nc // 8, dtype=np.uint8),  # the column frontier, packed (nc is whole bytes)
            "out_rows": xp.empty(self.nr, dtype=itype), "out_par": xp.empty(self.nr, dtype=itype),
            # bottom-up candidates: the rows a bottom-up level left unvisited, compacted from one to the other
            "cands": [xp.empty(len(prep["cand"]), dtype=itype), xp.empty(len(prep["cand"]), dtype=itype)],
            "counts": xp.zeros(3, dtype=np.int64),  # a local step's queue tail, edges examined, candidates kept
            "obits": xp.zeros(self.no, dtype=bool),  # the owned frontier as a byte map, before packing
        }
        if self.kind != "gpu-sim":  # compile / load the local kernels outside the timed searches
            z, seen = xp.zeros(2, np.int64), xp.ones(1, buffers["visited"].dtype)
            i0, b0 = xp.zeros(1, itype), xp.zeros(1, np.uint8)
            c = xp.zeros(3, np.int64)
            # vertex 0 of a one-row graph without edges, already visited
            self._step("top_down", (z, i0, z[:1], seen, i0.copy(), i0.copy(), c), 1)
            self._step("bottom_up", (z, i0, i0, b0, i0, seen, i0.copy(), i0.copy(), i0.copy(), c), 1)
        return buffers

    def release(self) -> None:
        """Give the buffers back for the next search on this block (their contents are no longer needed)."""
        self.p["spare"].append(self.buffers)

    # ---- one search ------------------------------------------------------

    def run(self, source: int) -> tuple[Any, Any, dict]:
        comm, L = self.comm, self.L
        self.parent.fill(-1)
        self.level.fill(-1)
        rest = self.p.get("rest")
        if rest is not None and not rest["reached"][source >> 3] & (128 >> (source & 7)):
            return self._run_rest(source, rest)
        self.visited.fill(False)
        n_cand = len(self.p["cand"])
        self.cands[0][:] = self.p["cand"]
        self.cur = 0
        direction, alpha, beta = self.opts["direction"], self.opts["alpha"], self.opts["beta"]
        n = L.n
        comm.barrier()
        t_start = time.perf_counter()
        b0 = comm.stats["bytes_sent"]
        # The level-0 frontier is known everywhere: no exchange.  Only the owner knows the
        # source's degree; it rides on the first exchange (level 0 is top-down under "auto").
        k_src = int(np.searchsorted(L.voffs, source, side="right") - 1)
        i_s, j_s = divmod(k_src, L.C)
        src_deg = 0
        if k_src == comm.rank:
            self.parent[source - self.olo] = source
            self.level[source - self.olo] = 0
            src_deg = int(self.p["deg"][source - self.olo])
        if self.i == i_s:
            self.visited[source - self.p["rlo"]] = True
        empty = ("ids", np.zeros(0, np.int32))
        pieces = [empty] * L.R
        if self.j == j_s:
            pieces[i_s] = ("ids", np.array([source - L.voffs[k_src]], dtype=np.int32))
        n_f, m_f = 1, 0
        per_level = []
        m_u = self.p["nnz_total"]
        edges_reached, examined = 0, 0
        mode, prev_n_f, depth = "top-down", 0, 0
        while n_f > 0:
            if direction == "auto":
                if mode == "top-down" and m_f > m_u / alpha:
                    mode = "bottom-up"
                elif mode == "bottom-up" and n_f < n / beta and n_f <= prev_n_f:
                    mode = "top-down"
            else:
                mode = direction
            b_level, c_level, w_level = comm.stats["bytes_sent"], self.comm_s, comm.stats["seconds_waiting"]
            t1 = time.perf_counter()
            if mode == "top-down":
                rows, par, ex = self._top_down(pieces)
            else:
                rows, par, ex, n_cand = self._bottom_up(pieces, n_cand)
            examined += ex
            t2 = time.perf_counter()
            new = self._fold(rows, par, depth + 1)
            t3 = time.perf_counter()
            prev_n_f, n_f_level, m_f_level = n_f, n_f, m_f
            pieces, n_f, m_f, extra = self._publish(new, src_deg if depth == 0 else 0)
            t4 = time.perf_counter()
            in_comm = self.comm_s - c_level
            wait = comm.stats["seconds_waiting"] - w_level
            # expand_s: the exchange that publishes this level's discoveries as the next frontier.
            # compute_s + exchange_s + wait_s = the level's time: work here, collectives' own cost
            # (serialising, sending, copying), and time blocked on peers (their data, or a slower rank).
            per_level.append({"level": depth, "frontier": int(n_f_level), "frontier_edges": int(m_f_level) + extra,
                              "direction": mode, "local_s": t2 - t1, "fold_s": t3 - t2, "expand_s": t4 - t3,
                              "compute_s": (t4 - t1) - in_comm, "exchange_s": max(in_comm - wait, 0.0),
                              "wait_s": wait, "bytes": comm.stats["bytes_sent"] - b_level,
                              "edges_examined": int(ex)})
            m_u -= m_f + extra
            edges_reached += m_f + extra
            depth += 1
        seconds = time.perf_counter() - t_start
        stats = {"backend": self.kind, "seconds": seconds, "levels": depth, "edges_traversed": int(edges_reached // 2),
                 "edges_examined": int(examined), "bytes_moved": comm.stats["bytes_sent"] - b0,
                 "per_level": per_level, "path": "distributed"}
        return self.parent, self.level, stats

    def _run_rest(self, source: int, rest: dict) -> tuple[Any, Any, dict]:
        """A search outside the reference component, on this rank's replica of the rest of the graph
        (every rank runs it and keeps the vertices it owns: no exchange).  Its time is all in level 0's
        ``compute_s``."""
        t_start = time.perf_counter()
        ids, ptr = rest["ids"], rest["ptr"]
        pos = int(np.searchsorted(ids, source))
        if pos < len(ids) and ids[pos] == source:
            order, par, lev = np.empty(len(ids), np.int64), np.full(len(ids), -1, np.int64), np.full(len(ids), -1,
                                                                                                   np.int64)
            got = order[:cpu.component_bfs(ptr, rest["idx"], pos, order, par, lev)]
            verts, parents, levels, degs = ids[got], ids[par[got]], lev[got], ptr[got + 1] - ptr[got]
        else:  # a vertex without edges: a component of its own
            verts, parents, levels, degs = (np.array([v], np.int64) for v in (source, source, 0, 0))
        mine = (verts >= self.olo) & (verts < self.ohi)
        xp = self.xp
        at = xp.asarray(verts[mine] - self.olo)
        self.parent[at] = xp.asarray(parents[mine])
        self.level[at] = xp.asarray(levels[mine])
        synchronize(self.parent, self.level)
        seconds = time.perf_counter() - t_start
        depth = int(levels.max()) + 1
        sizes = np.bincount(levels, minlength=depth)
        edges = np.bincount(levels, weights=degs, minlength=depth).astype(np.int64)
        per_level = [{"level": d, "frontier": int(sizes[d]), "frontier_edges": int(edges[d]), "direction": "replicated",
                      "local_s": seconds if d == 0 else 0.0, "fold_s": 0.0, "expand_s": 0.0,
                      "compute_s": seconds if d == 0 else 0.0, "exchange_s": 0.0, "wait_s": 0.0, "bytes": 0,
                      "edges_examined": int(edges[d])} for d in range(depth)]
        stats = {"backend": self.kind, "seconds": seconds, "levels": depth, "edges_traversed": int(degs.sum() // 2),
                 "edges_examined": int(degs.sum()), "bytes_moved": 0, "per_level": per_level, "path": "replicated"}
        return self.parent, self.level, stats

    def _collective(self, fn: Any, *args: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.comm_s += time.perf_counter() - t

    # ---- expand: frontier of my column set (+ global counts) --------------

    def _publish(self, front: Any, extra: int = 0) -> tuple[list, int, int, int]:
        """Mark the new frontier visited across the processor row and gather
        it within the processor column; counts (and ``extra``) ride along."""
        xp = self.xp
        n_loc = int(front.shape[0])
        m_loc = int(self.p["deg"][front].sum()) if n_loc else 0
        if self.rowc is None:  # 1-D: the local step marked these rows visited itself
            row = (n_loc, m_loc, extra)
        else:
            got = self._collective(self.rowc.allgather, (front, n_loc, m_loc, extra))
            sub = self.p["row_sub"]
            for jp, g in enumerate(got):
                self.visited[xp.asarray(g[0]) + int(sub[jp])] = True
            row = tuple(sum(g[k] for g in got) for k in (1, 2, 3))
        size = int(self.piece_sizes[self.comm.rank])
        if 4 * n_loc > (size + 7) // 8:  # dense frontier: a bitmap is smaller than the ids
            bits = self.obits  # reused (all False between levels): no fresh pages to fault in per level
            bits[front] = True
            payload = ("bits", xp.packbits(bits))
            bits[front] = False
        else:
            payload = ("ids", front.astype(np.int32) if self.no < 2**31 else front)
        got = self._collective(self.colc.allgather, (payload, *row))
        return [g[0] for g in got], *(sum(g[k] for g in got) for k in (1, 2, 3))

    def _front_ids(self, pieces: list) -> Any:
        xp = self.xp
        c0, sizes = self.p["col0"], self.p["col_sizes"]
        out = []
        for ip, (kind, data) in enumerate(pieces):
            if kind == "ids":
                ids = xp.asarray(data)
            else:
                ids = xp.flatnonzero(xp.unpackbits(xp.asarray(data))[:int(sizes[ip])])
            out.append(ids.astype(np.int64) + int(c0[ip]))
        return xp.concatenate(out) if out else xp.zeros(0, np.int64)

    def _front_bits(self, pieces: list) -> Any:
        """The column frontier as one packed bitmap: each piece's bitmap drops in at its byte offset."""
        xp = self.xp
        c0, sizes = self.p["col0"], self.p["col_sizes"]
        fb = self.fbits
        fb.fill(0)
        for ip, (kind, data) in enumerate(pieces):
            lo = int(c0[ip]) // 8
            if kind == "bits":
                fb[lo:lo + len(data)] = xp.asarray(data)
            elif len(data):  # a sparse piece (a light frontier in a bottom-up level): pack it here
                bits = xp.zeros(int(sizes[ip]), dtype=bool)
                bits[xp.asarray(data)] = True
                packed = xp.packbits(bits)
                fb[lo:lo + len(packed)] = packed
        return fb

    # ---- local expansion ----------------------------------------------------

    def _top_down(self, pieces: list) -> tuple[Any, Any, int]:
        p = self.p
        front = self._front_ids(pieces)
        args = (p["csc_ptr"], p["csc_idx"], front, self.visited, self.out_rows, self.out_par, self.counts)
        cnt, ex, _ = self._step("top_down", args, int(front.shape[0]) * (self.dev.LANES if self.dev else 1))
        return self.out_rows[:cnt], self.out_par[:cnt], ex

    def _bottom_up(self, pieces: list, n_cand: int) -> tuple[Any, Any, int, int]:
        p = self.p
        fb = self._front_bits(pieces)
        cand, keep = self.cands[self.cur], self.cands[1 - self.cur]
        args = (p["csr_ptr"], p["csr_idx"], p["hub"], fb, cand[:n_cand], self.visited, self.out_rows,
                self.out_par, keep, self.counts)
        cnt, ex, kept = self._step("bottom_up", args, n_cand)
        self.cur = 1 - self.cur
        return self.out_rows[:cnt], self.out_par[:cnt], ex, kept

    def _step(self, name: str, args: tuple, n: int) -> tuple[int, int, int]:
        """One local step, the cpu or the cuda twin ``name``, into the reused output queue (``args[-1]``
        is ``counts``): (queue length, edges examined, candidates kept).  The frontier and the queue stay
        where they are; only the counts come to the host.  ``n``: the threads a device launch covers."""
        counts = args[-1]
        counts.fill(0)
        if self.dev is None:
            getattr(cpu, name)(*args)
        elif n:  # nothing to launch over an empty frontier (and no zero-size device arrays to pass)
            launch(getattr(self.dev, name), n, *args)
        cnt, ex, kept = (int(v) for v in to_host(counts))  # waits for the kernel on a GPU
        return cnt, ex, kept

    # ---- fold: discovered vertices to their owners along the processor row ---

    def _fold(self, rows: Any, par: Any, depth: int) -> Any:
        """Owners accept each discovered vertex once (first proposal wins) and
        record its parent and level; returns the new owned frontier."""
        xp = self.xp
        colmap = self.p["colmap"]
        gpar = par if colmap is None else colmap[par]  # (the int64 parent array widens on assignment)
        if self.rowc is None:  # 1-D: this rank owns its whole row block
            new, newpar = rows, gpar
        else:
            rows, gpar = rows.astype(np.int64), gpar.astype(np.int64)
            sub = self.p["row_sub"]
            dest = xp.searchsorted(xp.asarray(sub), rows, side="right") - 1
            order = xp.argsort(dest, kind="stable")
            rows, gpar, dest = rows[order], gpar[order], dest[order]
            cuts = to_host(xp.searchsorted(dest, xp.arange(self.L.C + 1)))
            got = self._collective(self.rowc.alltoallv,
                                   [(rows[cuts[k]:cuts[k + 1]] - int(sub[k]), gpar[cuts[k]:cuts[k + 1]])
                                    for k in range(self.L.C)])
            new = xp.concatenate([xp.asarray(g[0]) for g in got])
            newpar = xp.concatenate([xp.asarray(g[1]) for g in got])
            fresh = self.parent[new] < 0
            new, newpar = new[fresh], newpar[fresh]
            new, first = xp.unique(new, return_index=True)
            newpar = newpar[first]
        self.parent[new] = newpar
        self.level[new] = depth
        return new

    # ---- validation on the workers (graph500) ---------------------------------

    def validate(self, part: Any, lo: int, parent: Any, level: Any, source: int) -> bool:
        """The five Graph500 rules on this rank's original row block (first row
        ``lo``), with the tree allgathered on the workers (the client never sees it)."""
        small = np.int32 if self.L.n < 2**31 else np.int64
        full_p = np.concatenate(self.comm.allgather(to_host(parent).astype(small)))
        full_l = np.concatenate(self.comm.allgather(to_host(level).astype(small)))
        A = sp.csr_matrix(to_host(part))
        counts = _check_block(A.indptr, A.indices, lo, full_p.astype(np.int64), full_l.astype(np.int64), source)
        total = self.comm.allreduce(np.array(list(counts.values()), dtype=np.int64))
        return bool(total.sum() == 0)


def _merge_stats(per_rank: list[dict]) -> dict:
    """Rank 0's timings and level trace; bytes and examined edges summed over ranks; the per-level
    compute / exchange / wait seconds averaged over ranks (each rank's three add up to the level's time),
    with the slowest rank's compute alongside, and their sums over levels."""
    s = dict(per_rank[0])
    s["bytes_moved"] = int(sum(r["bytes_moved"] for r in per_rank))
    s["edges_examined"] = int(sum(r["edges_examined"] for r in per_rank))
    s["edges_examined_per_rank"] = [int(r["edges_examined"]) for r in per_rank]
    lv = [dict(x) for x in s["per_level"]]
    P = len(per_rank)
    for k, d in enumerate(lv):
        ranks = [r["per_level"][k] for r in per_rank]
        d["bytes"] = int(sum(x["bytes"] for x in ranks))
        d["edges_examined"] = int(sum(x["edges_examined"] for x in ranks))
        for key in ("compute_s", "exchange_s", "wait_s"):
            d[key] = sum(x[key] for x in ranks) / P
        d["compute_max_s"] = max(x["compute_s"] for x in ranks)
    s["per_level"] = lv
    for key in ("compute", "exchange", "wait"):
        s[f"{key}_seconds"] = float(sum(d[f"{key}_s"] for d in lv))
    if "valid" in s:
        s["valid"] = bool(all(r["valid"] for r in per_rank))
    s["teps"] = s["edges_traversed"] / s["seconds"] if s["seconds"] > 0 else float("nan")
    return s
