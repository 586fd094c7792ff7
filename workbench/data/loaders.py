"""Graph and sparse-matrix readers: Matrix Market and SNAP-style edge lists.

Without ``client`` a reader returns a host ``scipy.sparse`` CSR matrix.  With
``client`` the file is read on the workers: each rank reads its own byte range
of the data section (a line belongs to the range holding its first byte),
parses it, and an all-to-all sends every entry to the rank owning its row,
which builds its CSR row block.  The result is a
:class:`~workbench.partition.RowBlocks` that every graph and sparse kernel
takes as is; the client reads only a Matrix Market header and never holds the
matrix.  The path must be readable by the workers (one host, or a shared
file system).

Compressed files (``.gz``, ``.bz2``, ``.xz``) cannot be split by byte
offset: there every rank decompresses the stream and parses only its own
blocks of lines (blocks of about 4 MiB dealt round-robin), so parsing is
still shared but decompression is not.  Store large inputs uncompressed.

Examples
--------
>>> import workbench as wb
>>> A = wb.data.load_mtx("graph.mtx")                          # doctest: +SKIP
>>> G = wb.data.load_mtx("graph.mtx", client=client)           # doctest: +SKIP
>>> wb.bfs(G, source=0, client=client)                         # doctest: +SKIP
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = ["load_mtx", "load_edgelist", "mtx_header"]

#: Reads started again when a worker is lost in the middle of one.
_READ_RETRIES = 2

#: Decompressed bytes per block of lines dealt round-robin to the ranks (compressed inputs only).
COMPRESSED_BLOCK = 4 << 20

_OPENERS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
_FIELDS = ("real", "double", "integer", "complex", "pattern")
_SYMMETRIES = ("general", "symmetric", "skew-symmetric", "hermitian")


def _check_path(path: Any, name: str = "path") -> str:
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"{name} must be a str or os.PathLike, got {type(path).__name__}")
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{name}: no such file {path!r}")
    return path


def _opener(path: str):
    for suffix, fn in _OPENERS.items():
        if path.endswith(suffix):
            return fn
    return open


def _compressed(path: str) -> bool:
    return _opener(path) is not open


def mtx_header(path: str | os.PathLike) -> dict:
    """Parse a Matrix Market header: format, field, symmetry, shape, nnz and
    ``data_start`` (the byte offset of the first entry in the uncompressed stream).

    Examples
    --------
    >>> mtx_header("graph.mtx")["shape"]                       # doctest: +SKIP
    (1024, 1024)
    """
    path = _check_path(path)
    with _opener(path)(path, "rb") as f:
        banner = f.readline()
        words = banner.decode("ascii", "replace").strip().lower().split()
        if len(words) != 5 or words[0] != "%%matrixmarket" or words[1] != "matrix":
            raise ValueError(f"{path}: not a Matrix Market file (banner {banner[:60]!r})")
        fmt, field, symmetry = words[2:]
        if fmt not in ("coordinate", "array") or field not in _FIELDS or symmetry not in _SYMMETRIES:
            raise ValueError(f"{path}: unsupported Matrix Market type {' '.join(words[2:])!r}")
        pos = len(banner)
        while True:
            line = f.readline()
            if not line:
                raise ValueError(f"{path}: Matrix Market file ends before its size line")
            pos += len(line)
            s = line.strip()
            if s and not s.startswith(b"%"):
                break
        try:
            sizes = [int(v) for v in s.split()]
        except ValueError:
            sizes = []   # a word that is no integer: named below with the line
    want = 3 if fmt == "coordinate" else 2
    if len(sizes) != want or min(sizes) < 0:
        raise ValueError(f"{path}: bad size line {s[:60]!r} (expected {want} non-negative integers)")
    return {"format": fmt, "field": "real" if field == "double" else field, "symmetry": symmetry,
            "shape": (sizes[0], sizes[1]), "nnz": sizes[2] if fmt == "coordinate" else sizes[0] * sizes[1],
            "data_start": pos}


# --------------------------------------------------------------------------
# Reading a rank's share of the data section
# --------------------------------------------------------------------------


def _line_start(f: Any, pos: int, base: int, end: int) -> int:
    """First line start at or after ``pos`` (``pos`` itself when a line starts there)."""
    if pos <= base:
        return base
    if pos >= end:
        return end
    f.seek(pos - 1)
    f.readline()  # through the newline that ends the line holding byte pos-1
    return min(f.tell(), end)


def _rank_text(path: str, rank: int, size: int, base: int) -> bytes:
    """The complete lines of the data section (from byte ``base``) that rank ``rank`` of ``size`` parses."""
    if not _compressed(path):
        end = os.path.getsize(path)
        span = max(0, end - base)
        with open(path, "rb") as f:
            lo = _line_start(f, base + span * rank // size, base, end)
            hi = _line_start(f, base + span * (rank + 1) // size, base, end)
            f.seek(lo)
            return f.read(hi - lo)
    out = []
    with _opener(path)(path, "rb") as f:
        f.read(base)
        block = 0
        while True:
            chunk = f.read(COMPRESSED_BLOCK)
            if not chunk:
                break
            if not chunk.endswith(b"\n"):
                chunk += f.readline()  # finish the last line: every rank cuts the stream alike
            if block % size == rank:
                out.append(chunk)
            block += 1
    return b"".join(out)


def _parse_columns(text: bytes, ncols: int, dtypes: Sequence[Any], comments: str | None,
                   path: str) -> list[np.ndarray]:
    """The first ``ncols`` whitespace-separated columns of ``text``, read from ``path`` (blank and comment lines
    skipped); a ValueError names the file."""
    import pandas as pd

    if not text.strip():
        return [np.zeros(0, dtype=d) for d in dtypes]
    if comments:
        text = _unindent_comments(text, comments.encode())
    try:
        df = pd.read_csv(io.BytesIO(text), sep=r"\s+", header=None, usecols=range(ncols), comment=comments,
                         dtype=dict(enumerate(dtypes)), engine="c")
    except pd.errors.EmptyDataError:
        return [np.zeros(0, dtype=d) for d in dtypes]
    except ValueError as e:
        raise ValueError(f"{path}: cannot parse {ncols} numeric columns: {e}") from None
    na = df.isna().to_numpy().any(axis=1)
    if na.any():
        # a missing column reads as NaN, and so does a value written "nan" (scipy's reader keeps those)
        rows = [ln for ln in text.splitlines()
                if ln.strip() and not (comments and ln.lstrip().startswith(comments.encode()))]
        if len(rows) != len(df) or any(len(rows[k].split()) < ncols for k in np.flatnonzero(na)):
            raise ValueError(f"{path}: a line has fewer than {ncols} columns")
    return [df[c].to_numpy(dtype=d) for c, d in enumerate(dtypes)]


def _unindent_comments(text: bytes, mark: bytes) -> bytes:
    """``text`` with the blanks before a comment mark that starts a line removed.  pandas skips a comment
    line only when the mark comes first: an indented one read as a row of NAs (an error), and as a worker's
    first line as an empty table, which dropped the worker's whole share without a word."""
    indented = re.compile(rb"\n[ \t]+(?=" + re.escape(mark) + rb")")   # ~0.1 s per 70 MB, a tenth of the parse
    if text[:1] in (b" ", b"\t") and text.lstrip(b" \t").startswith(mark):
        text = text.lstrip(b" \t")
    return indented.sub(b"\n", text) if indented.search(text) else text


def _mtx_dtype(field: str) -> np.dtype:
    # what scipy.io.mmread gives for each field, so host and distributed reads agree
    return np.dtype({"real": np.float64, "integer": np.int64, "complex": np.complex128,
                     "pattern": np.float64}[field])


def _mtx_entries(text: bytes, header: dict, path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """0-based rows, cols and values of a coordinate section, symmetry expanded, and the entries read."""
    field, symmetry = header["field"], header["symmetry"]
    if field == "pattern":
        i, j = _parse_columns(text, 2, (np.int64, np.int64), "%", path)
        v = np.ones(len(i), dtype=np.float64)
    elif field == "complex":
        i, j, re, im = _parse_columns(text, 4, (np.int64, np.int64, np.float64, np.float64), "%", path)
        v = re + 1j * im
    else:
        i, j, v = _parse_columns(text, 3, (np.int64, np.int64, _mtx_dtype(field)), "%", path)
    i, j, read = i - 1, j - 1, len(i)
    m, n = header["shape"]
    if len(i) and (i.min() < 0 or j.min() < 0 or i.max() >= m or j.max() >= n):
        raise ValueError(f"{path}: an entry lies outside the declared {m} x {n} matrix")
    if symmetry != "general":
        off = i != j
        mirror = {"symmetric": v[off], "skew-symmetric": -v[off], "hermitian": np.conj(v[off])}[symmetry]
        i, j, v = np.concatenate([i, j[off]]), np.concatenate([j, i[off]]), np.concatenate([v, mirror])
    return i, j, v, read


def _graph_pattern(i: np.ndarray, j: np.ndarray, symmetrize: bool,
                   v: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Edges as a graph pattern: both directions (``symmetrize``), loops and stored zeros (``v == 0``)
    dropped, values 1.0."""
    if v is not None:
        keep = v != 0
        i, j = i[keep], j[keep]
    if symmetrize:
        i, j = np.concatenate([i, j]), np.concatenate([j, i])
    keep = i != j
    i, j = i[keep], j[keep]
    return i, j, np.ones(len(i), dtype=np.float64)


def _csr_block(i: np.ndarray, j: np.ndarray, v: np.ndarray, shape: tuple, pattern: bool) -> sp.csr_matrix:
    """CSR of the entries (duplicates summed, or collapsed to 1.0 for a pattern), sorted indices."""
    A = sp.coo_matrix((v, (i, j)), shape=shape).tocsr()
    A.sum_duplicates()
    if pattern:
        A.data[:] = 1.0
    A.sort_indices()
    return A


def _route_rows(comm: Any, i: np.ndarray, j: np.ndarray, v: np.ndarray,
                offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Send every entry to the rank owning its row (one all-to-all); return what this rank owns."""
    from ..partition import owner_of

    own = owner_of(i, offsets)
    order = np.argsort(own, kind="stable")
    i, j, v, own = i[order], j[order], v[order], own[order]
    cuts = np.searchsorted(own, np.arange(comm.size + 1))
    got = comm.alltoallv([(i[cuts[r]:cuts[r + 1]], j[cuts[r]:cuts[r + 1]], v[cuts[r]:cuts[r + 1]])
                          for r in range(comm.size)])
    return tuple(np.concatenate([g[k] for g in got]) for k in range(3))


def _check_count(path: str, header: dict, read: int) -> None:
    if read != header["nnz"]:   # a truncated or overlong file (scipy's reader refuses both too)
        raise ValueError(f"{path}: the size line declares {header['nnz']} entries, the file holds {read}")


def _mtx_rank(comm: Any, _: Any, path: str, header: dict, symmetrize: bool, offsets: np.ndarray) -> tuple:
    i, j, v, read = _mtx_entries(_rank_text(path, comm.rank, comm.size, header["data_start"]), header, path)
    if symmetrize:
        i, j, v = _graph_pattern(i, j, True, v)
    i, j, v = _route_rows(comm, i, j, v, offsets)
    lo, hi = int(offsets[comm.rank]), int(offsets[comm.rank + 1])
    block = _csr_block(i - lo, j, v, (hi - lo, header["shape"][1]), pattern=symmetrize)
    return block, {"nnz": int(block.nnz), "entries_read": read, "bytes_sent": comm.stats["bytes_sent"]}


def _edge_rank(comm: Any, _: Any, path: str, n: int | None, symmetrize: bool, comments: str,
               zero_based: bool) -> tuple:
    from ..partition import block_offsets

    src, dst = _parse_columns(_rank_text(path, comm.rank, comm.size, 0), 2, (np.int64, np.int64), comments,
                              path)
    if not zero_based:
        src, dst = src - 1, dst - 1
    lo_id = comm.allreduce(int(min(src.min(), dst.min())) if len(src) else 0, "min")
    hi_id = comm.allreduce(int(max(src.max(), dst.max())) if len(src) else -1, "max")
    if lo_id < 0:
        raise ValueError(f"{path}: negative vertex ids (zero_based={zero_based})")
    n_vertices = hi_id + 1 if n is None else int(n)
    if hi_id >= n_vertices:
        raise ValueError(f"{path}: vertex id {hi_id} does not fit n={n_vertices}")
    offsets = block_offsets(n_vertices, comm.size)
    read = len(src)
    i, j, v = _route_rows(comm, *_graph_pattern(src, dst, symmetrize), offsets)
    lo, hi = int(offsets[comm.rank]), int(offsets[comm.rank + 1])
    block = _csr_block(i - lo, j, v, (hi - lo, n_vertices), pattern=True)
    return block, {"nnz": int(block.nnz), "n": n_vertices, "offsets": offsets, "entries_read": read,
                   "bytes_sent": comm.stats["bytes_sent"]}


def _addresses(client: Any, workers: Sequence[str] | None) -> tuple[Any, list[str]]:
    from ..cluster import chosen_workers, default_client

    client = default_client(client)
    return client, chosen_workers(client, workers)


def _with_retries(read: Any, client: Any, addrs: list[str], fixed: bool) -> tuple[list[str], Any]:
    """``(workers, read(workers))``, reading again on the workers there are when one was lost mid-read
    (a nanny replaces it in seconds); workers the caller named are not swapped for others."""
    from .. import comms
    from ..partition import await_workers

    for attempt in range(_READ_RETRIES + 1):
        try:
            return addrs, read(addrs)
        except comms.WorkerLostError:
            if fixed or attempt == _READ_RETRIES:
                raise
            addrs = await_workers(client, len(addrs))
            if not addrs:
                raise
    raise AssertionError("unreachable")


def _mtx_part(path: str, header: dict, symmetrize: bool, size: int, lo: int, hi: int) -> sp.csr_matrix:
    """Rows ``lo..hi`` of a Matrix Market file read on ``size`` workers, rebuilt alone on one (the lineage
    of a partition lost with its worker)."""
    def entries(q: int) -> tuple:
        i, j, v, _ = _mtx_entries(_rank_text(path, q, size, header["data_start"]), header, path)
        return _graph_pattern(i, j, True, v) if symmetrize else (i, j, v)

    i, j, v = _rows_in_rank_order(entries, size, lo, hi)
    return _csr_block(i - lo, j, v, (hi - lo, header["shape"][1]), pattern=symmetrize)


def _edge_part(path: str, n_vertices: int, symmetrize: bool, comments: str, zero_based: bool, size: int, lo: int,
               hi: int) -> sp.csr_matrix:
    """Rows ``lo..hi`` of an edge list read on ``size`` workers, rebuilt alone (see :func:`_mtx_part`)."""
    def entries(q: int) -> tuple:
        src, dst = _parse_columns(_rank_text(path, q, size, 0), 2, (np.int64, np.int64), comments, path)
        first = 0 if zero_based else 1
        return _graph_pattern(src - first, dst - first, symmetrize)

    i, j, v = _rows_in_rank_order(entries, size, lo, hi)
    return _csr_block(i - lo, j, v, (hi - lo, n_vertices), pattern=True)


def _rows_in_rank_order(entries: Any, size: int, lo: int, hi: int) -> tuple:
    """The entries of rows ``lo..hi`` from every rank's share (``entries(q)``: rank q's (i, j, v)), picked in
    rank order as the read routed them, so a rebuilt block is the same bit for bit (duplicates summed in the
    same order)."""
    picked = []
    for q in range(size):
        i, j, v = entries(q)
        keep = (i >= lo) & (i < hi)
        picked.append((i[keep], j[keep], v[keep]))
    return tuple(np.concatenate([p[k] for p in picked]) for k in range(3))


def _read_distributed(body: Any, args: tuple, client: Any, addrs: list[str], name: str) -> tuple[list, list]:
    from .. import comms

    futs = comms.run_spmd(body, [None] * len(addrs), *args, client=client, workers=addrs, name=name,
                          publish_info=True)
    comms.wait_group(futs)
    return comms.split_results(futs)


# --------------------------------------------------------------------------
# Public readers
# --------------------------------------------------------------------------


def load_mtx(path: str | os.PathLike, *, symmetrize: bool = False, client: Any = None,
             workers: Sequence[str] | None = None) -> Any:
    """Read a Matrix Market file (``.mtx``, or ``.mtx.gz``/``.bz2``/``.xz``).

    Parameters
    ----------
    path : str or os.PathLike
        The file; with ``client`` it must be readable by the workers too.
    symmetrize : bool
        Read it as an undirected graph: an edge (value 1.0) wherever
        ``A[i, j]`` or ``A[j, i]`` is a nonzero entry; self-loops and stored
        zeros are no edges.
    client : distributed.Client, optional
        Read on the workers and return :class:`~workbench.partition.RowBlocks`
        (one CSR row block per worker; coordinate files only: read a dense
        ``array`` file without ``client`` and ``wb.distribute`` it).  Without
        it: a host CSR matrix.
    workers : list of str, optional
        Workers to read on, in rank order (default: all, sorted).

    Returns
    -------
    scipy.sparse.csr_matrix or RowBlocks
        The same matrix either way (``scipy.io.mmread``'s dtype: float64,
        int64 for ``integer``, complex128 for ``complex``; symmetric,
        skew-symmetric and hermitian storage expanded; duplicates summed).

    Examples
    --------
    >>> A = load_mtx("graph.mtx")                                  # doctest: +SKIP
    >>> G = load_mtx("graph.mtx", symmetrize=True, client=client)  # doctest: +SKIP
    >>> wb.bfs(G, source=0, client=client).stats["backend"]        # doctest: +SKIP
    'cpu'
    """
    from ..partition import check_bool

    path = _check_path(path)
    check_bool("symmetrize", symmetrize)
    header = mtx_header(path)
    if symmetrize and header["shape"][0] != header["shape"][1]:
        raise ValueError(f"symmetrize=True needs a square matrix, {path} is {header['shape']}")
    if client is None and header["format"] == "coordinate":
        # the workers' parser on the whole data section, so both paths read a file alike (scipy's reader
        # refused an upper-case banner, "+3.0" and comment lines among the entries, truncated "1.5" in an
        # integer file, could not open .xz, and crashed the process on a last line ending in a blank)
        i, j, v, read = _mtx_entries(_rank_text(path, 0, 1, header["data_start"]), header, path)
        _check_count(path, header, read)
        if symmetrize:
            i, j, v = _graph_pattern(i, j, True, v)
        return _csr_block(i, j, v, tuple(header["shape"]), pattern=symmetrize)
    if client is None:   # dense 'array' format
        import scipy.io

        try:
            with _opener(path)(path, "rb") as f:
                A = sp.csr_matrix(scipy.io.mmread(f))
        except ValueError as e:   # scipy's reader says "Line 3: ..." without the file
            raise ValueError(f"{path}: {e}") from None
        if symmetrize:
            coo = A.tocoo()
            i, j, v = _graph_pattern(coo.row.astype(np.int64), coo.col.astype(np.int64), True, coo.data)
            return _csr_block(i, j, v, A.shape, pattern=True)
        return A
    if header["format"] != "coordinate":
        raise ValueError(f"{path}: distributed reading needs a coordinate Matrix Market file "
                         f"(this one is dense 'array' format); read it without client= and wb.distribute it")
    from ..partition import RowBlocks, TaskLineage, block_offsets

    client, addrs = _addresses(client, workers)

    def read_on(addrs: list[str]) -> tuple:
        offsets = block_offsets(header["shape"][0], len(addrs))
        return offsets, *_read_distributed(_mtx_rank, (path, header, symmetrize, offsets), client, addrs, "mtx")

    addrs, (offsets, parts, infos) = _with_retries(read_on, client, addrs, fixed=workers is not None)
    read = sum(i["entries_read"] for i in infos)
    _check_count(path, header, read)
    dtype = np.dtype(np.float64) if symmetrize else _mtx_dtype(header["field"])
    symmetric = True if symmetrize or header["symmetry"] == "symmetric" else None
    size = len(addrs)
    return RowBlocks(parts, offsets, tuple(header["shape"]), dtype, addrs, kind="csr",
                     nnz=sum(i["nnz"] for i in infos), symmetric=symmetric,
                     lineage=TaskLineage(_mtx_part, [(path, header, symmetrize, size, int(offsets[r]),
                                                      int(offsets[r + 1])) for r in range(size)]),
                     meta={"loader": "mtx", "path": os.path.abspath(path), "symmetrize": symmetrize,
                           "entries_read": read, "bytes_moved": sum(i["bytes_sent"] for i in infos)})


def load_edgelist(path: str | os.PathLike, *, n: int | None = None, symmetrize: bool = True, comments: str = "#",
                  zero_based: bool = True, client: Any = None, workers: Sequence[str] | None = None) -> Any:
    """Read a whitespace-separated edge list ("u v" per line, SNAP style) as a graph.

    Columns after the first two (weights, timestamps) are ignored; lines
    starting with ``comments`` are skipped.  Self-loops and duplicate edges
    are removed; values are 1.0.

    Parameters
    ----------
    path : str or os.PathLike
        The file (``.gz``/``.bz2``/``.xz`` too); with ``client`` it must be
        readable by the workers.
    n : int, optional
        Number of vertices (default: largest id + 1).
    symmetrize : bool
        Add the reverse of every edge (an undirected graph).
    comments : str
        Comment marker.
    zero_based : bool
        Ids start at 0 (``False``: at 1, as in many MTX-derived lists).
    client : distributed.Client, optional
        Read on the workers and return :class:`~workbench.partition.RowBlocks`.
    workers : list of str, optional
        Workers to read on, in rank order (default: all, sorted).

    Returns
    -------
    scipy.sparse.csr_matrix or RowBlocks

    Examples
    --------
    >>> A = load_edgelist("roadNet-PA.txt")                        # doctest: +SKIP
    >>> G = load_edgelist("roadNet-PA.txt", client=client)         # doctest: +SKIP
    """
    path = _check_path(path)
    if n is not None and (not isinstance(n, int | np.integer) or n < 0):
        raise ValueError(f"n must be a non-negative int or None, got {n!r}")
    if not isinstance(comments, str) or len(comments) != 1:
        raise ValueError(f"comments must be a single character, got {comments!r}")
    from ..partition import check_bool

    check_bool("symmetrize", symmetrize)
    check_bool("zero_based", zero_based)
    if client is None:
        with _opener(path)(path, "rb") as f:
            src, dst = _parse_columns(f.read(), 2, (np.int64, np.int64), comments, path)
        if not zero_based:
            src, dst = src - 1, dst - 1
        if len(src) and min(src.min(), dst.min()) < 0:
            raise ValueError(f"{path}: negative vertex ids (zero_based={zero_based})")
        hi_id = int(max(src.max(), dst.max())) if len(src) else -1
        n_vertices = hi_id + 1 if n is None else int(n)
        if hi_id >= n_vertices:
            raise ValueError(f"{path}: vertex id {hi_id} does not fit n={n_vertices}")
        i, j, v = _graph_pattern(src, dst, symmetrize)
        return _csr_block(i, j, v, (n_vertices, n_vertices), pattern=True)
    from ..partition import RowBlocks, TaskLineage

    client, addrs = _addresses(client, workers)
    addrs, (parts, infos) = _with_retries(
        lambda addrs: _read_distributed(_edge_rank, (path, n, symmetrize, comments, zero_based), client, addrs,
                                        "edgelist"), client, addrs, fixed=workers is not None)
    n_vertices, offsets, size = infos[0]["n"], infos[0]["offsets"], len(addrs)
    return RowBlocks(parts, offsets, (n_vertices, n_vertices), np.dtype(np.float64), addrs, kind="csr",
                     nnz=sum(i["nnz"] for i in infos), symmetric=True if symmetrize else None,
                     lineage=TaskLineage(_edge_part, [(path, n_vertices, symmetrize, comments, zero_based, size,
                                                       int(offsets[r]), int(offsets[r + 1])) for r in range(size)]),
                     meta={"loader": "edgelist", "path": os.path.abspath(path), "symmetrize": symmetrize,
                           "entries_read": sum(i["entries_read"] for i in infos),
                           "bytes_moved": sum(i["bytes_sent"] for i in infos)})
