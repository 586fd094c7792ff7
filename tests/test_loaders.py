"""Matrix Market and edge-list readers: host CSR, and RowBlocks read on 1, 2, 3 workers, give the same matrix."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

import workbench as wb
from workbench.partition import RowBlocks


def _random_graph(n: int, density: float, seed: int) -> sp.csr_matrix:
    A = sp.random(n, n, density, format="csr", random_state=seed)
    A = ((A + A.T) > 0).astype(np.float64)
    A.setdiag(0)
    A.eliminate_zeros()
    return A.tocsr()


def _same(got: sp.spmatrix, want: sp.spmatrix) -> None:
    assert got.shape == want.shape
    assert got.dtype == want.dtype
    diff = abs(sp.csr_matrix(got) - sp.csr_matrix(want))
    assert diff.nnz == 0 or diff.max() == 0


def _check_blocks(G: RowBlocks, want: sp.spmatrix, n_workers: int, client) -> None:
    assert isinstance(G, RowBlocks) and G.kind == "csr" and G.n_parts == n_workers
    assert G.shape == want.shape and G.nnz == want.nnz
    # every rank holds exactly its own rows
    for r, blk in enumerate(client.gather(list(G.parts))):
        assert blk.shape == (G.offsets[r + 1] - G.offsets[r], want.shape[1])
        assert blk.has_sorted_indices
    _same(G.gather(client), want)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("loaders")
    rng = np.random.default_rng(7)
    out = {}
    M = sp.random(53, 41, 0.1, format="coo", random_state=3)
    M.data = rng.standard_normal(M.nnz)
    scipy.io.mmwrite(d / "general.mtx", M, comment="a real general matrix\nwith two comment lines")
    out["general"] = (d / "general.mtx", M.tocsr())
    S = sp.random(60, 60, 0.08, format="csr", random_state=4)
    S = (S + S.T).tocoo()
    scipy.io.mmwrite(d / "symmetric.mtx", S, symmetry="symmetric")
    out["symmetric"] = (d / "symmetric.mtx", S.tocsr())
    Z = sp.random(30, 30, 0.1, format="csr", random_state=5)
    Z = (Z - Z.T).tocoo()
    scipy.io.mmwrite(d / "skew.mtx", Z, symmetry="skew-symmetric")
    out["skew"] = (d / "skew.mtx", Z.tocsr())
    I = sp.random(40, 25, 0.15, format="coo", random_state=6, dtype=np.float64)
    I.data = rng.integers(-50, 50, I.nnz).astype(np.int64)
    I = sp.coo_matrix((I.data.astype(np.int64), (I.row, I.col)), shape=I.shape)
    scipy.io.mmwrite(d / "integer.mtx", I, field="integer")
    out["integer"] = (d / "integer.mtx", I.tocsr())
    C = sp.random(20, 20, 0.2, format="coo", random_state=8)
    C = sp.coo_matrix((C.data + 1j * rng.standard_normal(C.nnz), (C.row, C.col)), shape=C.shape)
    scipy.io.mmwrite(d / "complex.mtx", C)
    out["complex"] = (d / "complex.mtx", C.tocsr())
    G = _random_graph(200, 0.03, 9)
    scipy.io.mmwrite(d / "pattern.mtx", sp.tril(G).tocoo(), field="pattern", symmetry="symmetric")
    out["pattern"] = (d / "pattern.mtx", G)
    with open(d / "pattern.mtx", "rb") as f, gzip.open(d / "pattern.mtx.gz", "wb") as g:
        g.write(f.read())
    out["pattern_gz"] = (d / "pattern.mtx.gz", G)
    return d, out


def _write_edgelist(path, A: sp.spmatrix, *, one_based: bool = False, header: bool = True) -> None:
    coo = sp.triu(A).tocoo()
    shift = 1 if one_based else 0
    with open(path, "w") as f:
        if header:
            f.write("# Directed graph (each unordered pair saved once)\n# FromNodeId\tToNodeId\n")
        for k, (u, v) in enumerate(zip(coo.row, coo.col, strict=True)):
            # alternate spacing, a third column (a weight) on some lines, a repeated edge and a loop
            f.write(f"{u + shift}\t{v + shift}\n" if k % 3 else f"{v + shift} {u + shift} 0.5\n")
        if coo.nnz:
            f.write(f"{coo.row[0] + shift}\t{coo.col[0] + shift}\n{coo.row[0] + shift} {coo.row[0] + shift}\n")


@pytest.mark.parametrize("kind", ["general", "symmetric", "skew", "integer", "complex", "pattern", "pattern_gz"])
def test_mtx_host_matches_scipy(files, kind):
    _, out = files
    path, want = out[kind]
    A = wb.data.load_mtx(path)
    assert sp.issparse(A) and A.format == "csr"
    _same(A, sp.csr_matrix(scipy.io.mmread(path)))
    np.testing.assert_allclose(A.toarray(), want.toarray(), rtol=1e-12)


@pytest.mark.parametrize("n_workers", [1, 2, 3])
@pytest.mark.parametrize("kind", ["general", "symmetric", "skew", "integer", "complex", "pattern", "pattern_gz"])
def test_mtx_distributed_equals_host(files, clients, kind, n_workers):
    client = clients(n_workers)
    path, _ = files[1][kind]
    G = wb.data.load_mtx(path, client=client)
    _check_blocks(G, wb.data.load_mtx(path), n_workers, client)
    assert G.meta["entries_read"] == wb.data.mtx_header(path)["nnz"]   # each entry read by exactly one rank


@pytest.mark.parametrize("n_workers", [1, 2, 3])
def test_mtx_symmetrize_as_graph(files, clients, n_workers):
    client = clients(n_workers)
    path, M = files[1]["general"]
    sq = files[0] / "square.mtx"
    scipy.io.mmwrite(sq, sp.random(45, 45, 0.1, format="coo", random_state=11))
    want = wb.data.load_mtx(sq, symmetrize=True)
    P = sp.csr_matrix(scipy.io.mmread(sq))
    P = ((P != 0) + (P != 0).T).astype(np.float64)
    P.setdiag(0)
    P.eliminate_zeros()
    _same(want, P)
    G = wb.data.load_mtx(sq, symmetrize=True, client=client)
    assert G.symmetric
    _check_blocks(G, want, n_workers, client)
    with pytest.raises(ValueError, match="square"):
        wb.data.load_mtx(path, symmetrize=True, client=client)
    # a stored zero is no edge (it was one), host and workers alike; an entry either way is
    zero = files[0] / "stored_zero.mtx"
    zero.write_text("%%MatrixMarket matrix coordinate real general\n4 4 3\n1 2 1.0\n2 1 -1.0\n2 3 0.0\n")
    edges = sp.csr_matrix(([1.0, 1.0], ([0, 1], [1, 0])), shape=(4, 4))
    _same(wb.data.load_mtx(zero, symmetrize=True), edges)
    _check_blocks(wb.data.load_mtx(zero, symmetrize=True, client=client), edges, n_workers, client)


@pytest.mark.parametrize("n_workers", [1, 2, 3])
@pytest.mark.parametrize("one_based", [False, True])
def test_edgelist_round_trip(tmp_path, clients, n_workers, one_based):
    client = clients(n_workers)
    A = _random_graph(300, 0.02, 12)
    path = tmp_path / "graph.txt"
    _write_edgelist(path, A, one_based=one_based)
    host = wb.data.load_edgelist(path, zero_based=not one_based)
    _same(host, A)
    G = wb.data.load_edgelist(path, zero_based=not one_based, client=client)
    _check_blocks(G, A, n_workers, client)
    gz = tmp_path / "graph.txt.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    _check_blocks(wb.data.load_edgelist(gz, zero_based=not one_based, client=client), A, n_workers, client)


@pytest.mark.parametrize("n_workers", [2, 3])
def test_edgelist_directed_and_declared_n(tmp_path, clients, n_workers):
    client = clients(n_workers)
    path = tmp_path / "directed.txt"
    path.write_text("0 1\n1 2\n2 0\n2 0\n3 3\n")
    want = sp.csr_matrix((np.ones(3), ([0, 1, 2], [1, 2, 0])), shape=(6, 6))
    _same(wb.data.load_edgelist(path, symmetrize=False, n=6), want)
    _check_blocks(wb.data.load_edgelist(path, symmetrize=False, n=6, client=client), want, n_workers, client)
    with pytest.raises(ValueError, match="does not fit"):
        wb.data.load_edgelist(path, n=3, client=client)


def test_more_ranks_than_lines(tmp_path, clients):
    client = clients(3)
    path = tmp_path / "tiny.txt"
    path.write_text("# one edge\n0 1\n")
    A = wb.data.load_edgelist(path)
    G = wb.data.load_edgelist(path, client=client)
    _check_blocks(G, A, 3, client)
    assert G.meta["entries_read"] == 1


def test_loaded_graph_runs_in_the_kernels(files, clients):
    client = clients(2)
    path, A = files[1]["pattern"]
    G = wb.data.load_mtx(path, client=client)
    r = wb.bfs(G, source=0, client=client)
    assert wb.validate_bfs(A, r).ok
    B = np.random.default_rng(1).standard_normal((A.shape[1], 4))
    np.testing.assert_allclose(np.asarray(wb.spmm(G, B, client=client)), A @ B, rtol=1e-12, atol=1e-12)
    c = wb.color(G, client=client)
    assert wb.validate_coloring(A, c.colors)


def test_bad_input(tmp_path, clients):
    client = clients(2)
    with pytest.raises(FileNotFoundError):
        wb.data.load_mtx(tmp_path / "missing.mtx", client=client)
    with pytest.raises(TypeError, match="path"):
        wb.data.load_edgelist(3)
    bad = tmp_path / "bad.mtx"
    bad.write_text("not a matrix\n1 2\n")
    with pytest.raises(ValueError, match="Matrix Market"):
        wb.data.load_mtx(bad, client=client)
    out = tmp_path / "outside.mtx"
    out.write_text("%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n4 1 2.0\n")
    with pytest.raises(ValueError, match="outside"):
        wb.data.load_mtx(out, client=client)
    for declared, lines in ((4, "1 1 1.0\n2 2 2.0\n"), (1, "1 1 1.0\n2 2 2.0\n3 3 3.0\n")):
        odd = tmp_path / f"count{declared}.mtx"
        odd.write_text(f"%%MatrixMarket matrix coordinate real general\n3 3 {declared}\n{lines}")
        with pytest.raises(ValueError, match=f"declares {declared} entries"):
            wb.data.load_mtx(odd, client=client)
    neg = tmp_path / "neg.txt"
    neg.write_text("0 1\n-1 2\n")
    with pytest.raises(ValueError, match="negative"):
        wb.data.load_edgelist(neg, client=client)
    with pytest.raises(ValueError, match="n must be"):
        wb.data.load_edgelist(neg, n=-2)
    dense = tmp_path / "dense.mtx"
    scipy.io.mmwrite(dense, np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(wb.data.load_mtx(dense).toarray(), np.arange(6.0).reshape(2, 3))
    with pytest.raises(ValueError, match="coordinate"):
        wb.data.load_mtx(dense, client=client)


_HEAD = "%%MatrixMarket matrix coordinate real general\n3 3 2\n"


@pytest.mark.parametrize("entries", ["4 2 1.0\n3 1 2.0\n", "0 2 1.0\n3 1 2.0\n", "1 2 abc\n3 1 2.0\n",
                                     "1.5 2 1.0\n3 1 2.0\n", "1 2 1.0\n3 1\n"],
                         ids=["row-outside", "zero-based", "not-a-number", "float-index", "missing-value"])
def test_malformed_entries_name_the_file_either_way(tmp_path, clients, entries):
    path = tmp_path / "broken.mtx"
    path.write_text(_HEAD + entries)
    for client in (None, clients(2)):
        with pytest.raises(ValueError, match="broken.mtx"):
            wb.data.load_mtx(path, client=client)


def test_nan_values_read_alike_on_host_and_workers(tmp_path, clients):
    # a value written "nan" is a value (scipy reads it so); the distributed reader took it for a missing column
    path = tmp_path / "nan.mtx"
    path.write_text(_HEAD + "1 2 nan\n3 1 2.0\n")
    host = wb.data.load_mtx(path).toarray()
    dist = wb.data.load_mtx(path, client=clients(2)).gather().toarray()
    assert np.isnan(host[0, 1]) and host[2, 0] == 2.0
    np.testing.assert_array_equal(dist, host)


def _with_comment_first_in_rank(head: str, lines: list[str], comment: str, base: int, ranks: int) -> str:
    """``head + lines`` with ``comment`` inserted where it is the first line of the last rank's byte range."""
    for k in range(1, len(lines)):
        text = head + "".join(lines[:k]) + comment + "".join(lines[k:])
        cut = base + (len(text) - base) * (ranks - 1) // ranks
        start = len(head) + len("".join(lines[:k]))
        if start - len(lines[k - 1]) < cut <= start:
            return text
    raise AssertionError("no placement")


@pytest.mark.parametrize("n_workers", [1, 2, 3])
def test_indented_comment_lines_are_skipped(tmp_path, clients, n_workers):
    # pandas skips a comment line only when the mark starts it: an indented one first in a worker's byte range
    # dropped that worker's entries without a word (edge list) or miscounted them (mtx); elsewhere it raised
    client = clients(n_workers)
    edges = [f"{k} {k + 1}\n" for k in range(100)]
    path = tmp_path / "indented.txt"
    path.write_text(_with_comment_first_in_rank("# SNAP header\n", edges, "   # indented\n", 0, max(n_workers, 2)))
    for c in (None, client):
        A = wb.data.load_edgelist(path, client=c)
        A = A if c is None else A.gather()
        assert A.shape == (101, 101) and A.nnz == 200
    head = "%%MatrixMarket matrix coordinate real general\n101 101 100\n"
    path = tmp_path / "indented.mtx"
    entries = [f"{k + 1} {k + 2} 1.0\n" for k in range(100)]
    path.write_text(_with_comment_first_in_rank(head, entries, " \t% note\n", len(head), max(n_workers, 2)))
    want = sp.csr_matrix((np.ones(100), (np.arange(100), np.arange(1, 101))), shape=(101, 101))
    _same(wb.data.load_mtx(path), want)
    _same(wb.data.load_mtx(path, client=client).gather(), want)


@pytest.mark.parametrize("text", [
    "%%MATRIXMARKET MATRIX COORDINATE REAL GENERAL\n2 2 1\n1 2 3.0\n",
    "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 2 +3.0\n",
    "%%MatrixMarket matrix coordinate real general\n2 2 2\n1 2 3.0\n% a note among the entries\n2 1 4.0\n",
    "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 2 3.0 ",
], ids=["upper-case-banner", "plus-sign", "comment-among-entries", "last-line-blank-no-newline"])
def test_host_and_workers_read_a_file_alike(tmp_path, clients, text):
    # the host path was scipy.io.mmread: it refused the first three (and crashed the process on the last)
    path = tmp_path / "alike.mtx"
    path.write_bytes(text.encode())
    host = wb.data.load_mtx(path)
    _same(host, wb.data.load_mtx(path, client=clients(2)).gather())
    assert host[0, 1] == 3.0


def test_host_reads_xz_and_refuses_what_the_workers_refuse(tmp_path, clients):
    import lzma

    path = tmp_path / "m.mtx.xz"
    path.write_bytes(lzma.compress(b"%%MatrixMarket matrix coordinate integer general\n2 2 1\n1 2 3\n"))
    A = wb.data.load_mtx(path)
    assert A.dtype == np.int64 and A[0, 1] == 3
    floats = tmp_path / "float_in_integer.mtx"
    floats.write_text("%%MatrixMarket matrix coordinate integer general\n2 2 1\n1 2 1.5\n")
    for client in (None, clients(2)):
        with pytest.raises(ValueError, match="float_in_integer.mtx"):
            wb.data.load_mtx(floats, client=client)
    words = tmp_path / "words.mtx"
    words.write_text("%%MatrixMarket matrix coordinate real general\nfive 5 1\n1 1 1.0\n")
    with pytest.raises(ValueError, match="words.mtx: bad size line"):
        wb.data.mtx_header(words)
