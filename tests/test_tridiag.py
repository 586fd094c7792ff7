"""Distributed tridiagonal solver (DistD2-TDS) and compact derivative against scipy/numpy oracles."""

from __future__ import annotations

import time

import numpy as np
import pytest
import scipy.linalg as sl
import scipy.sparse as sp

import workbench as wb
from workbench.kernels.tridiag import distribute_system, random_system, validate_tridiag

RTOL = 1e-10


def _system(kind: str, n: int, batch: int | None, nrhs: int | None, seed: int = 0, periodic: bool = False):
    rng = np.random.default_rng(seed)
    shape = (n,) if batch is None else (batch, n)
    m = n if periodic else n - 1
    off = shape[:-1] + (m,)
    if kind == "dominant":
        dl, du = rng.uniform(-1, 1, off), rng.uniform(-1, 1, off)
        d = 2.5 + rng.random(shape)
    elif kind == "nondominant":  # |dl|+|du| > |d| but well conditioned at these sizes: 1 +- 2 sqrt(dl du) > 0
        dl, du = 0.85 + 0.05 * rng.random(off), 0.25 + 0.05 * rng.random(off)
        d = 1.0 + 0.05 * rng.random(shape)
    else:  # "skew": not dominant either, and well conditioned at any n (the symbol d + dl e^it + du e^-it,
        # real part >= 0.7, never reaches 0; same-sign off-diagonals of this size would enclose 0)
        dl, du = 0.7 + 0.05 * rng.random(off), -0.5 - 0.05 * rng.random(off)
        d = 1.0 + 0.05 * rng.random(shape)
    b = rng.standard_normal(shape if nrhs is None else shape + (nrhs,))
    return dl, d, du, b


def _banded(dl, d, du, b):
    ab = np.zeros((3, d.size))
    ab[0, 1:], ab[1], ab[2, :-1] = du, d, dl
    return sl.solve_banded((1, 1), ab, b)


def _oracle(dl, d, du, b):
    if d.ndim == 1:
        return _banded(dl, d, du, b)
    return np.stack([_banded(dl[k], d[k], du[k], b[k]) for k in range(d.shape[0])])


def _dense(dl, d, du, b):
    # the periodic system with its corners, by a general sparse LU (SuperLU; a dense solve of 48 systems of
    # 1500 took ~7 s of the suite); duplicate entries (n <= 2: a corner on the band) add up
    import scipy.sparse.linalg as spl

    n = d.size
    i = np.arange(n)
    rows = np.concatenate([i, i, i])
    cols = np.concatenate([(i - 1) % n, i, (i + 1) % n])
    A = sp.csc_matrix((np.concatenate([dl, d, du]), (rows, cols)), shape=(n, n))
    return spl.spsolve(A, b) if n > 1 else b / (dl + d + du)


def _close(x, ref):
    x = np.asarray(x)
    assert x.shape == ref.shape
    assert np.abs(x - ref).max() <= RTOL * max(1.0, np.abs(ref).max())


@pytest.mark.parametrize("n_workers", [1, 2, 3])
@pytest.mark.parametrize("kind", ["dominant", "nondominant"])
def test_batch_matches_solve_banded(clients, n_workers, kind):
    client = clients(n_workers)
    dl, d, du, b = _system(kind, 103, 7, 3, seed=n_workers)          # n not divisible by 2 or 3
    x = wb.tridiag_solve(dl, d, du, b, client=client)
    _close(x, _oracle(dl, d, du, b))
    assert x.stats["reduced"] == "exact"                            # 9-row sub-blocks: coupling too strong
    assert (x.stats["backend"], x.stats["engine"]) == ("cpu", "numba")
    dl1, d1, du1, b1 = (a[0] for a in (dl, d, du, b[..., 0]))       # single system, one rhs
    _close(wb.tridiag_solve(dl1, d1, du1, b1, client=client), _banded(dl1, d1, du1, b1))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 11])
def test_small_n_on_three_workers(clients, n):
    client = clients(3)
    dl, d, du, b = _system("dominant", n, None, 2, seed=n)             # n < workers * 4
    x = wb.tridiag_solve(dl, d, du, b, client=client)
    _close(x, _banded(dl, d, du, b))
    assert validate_tridiag(dl, d, du, b, np.asarray(x)) < 1e-14


def _dask_layouts(arrays, batched, chunk):
    """``(axis, arrays, to_gtsv)``: the gtsv-form host ``arrays`` as dask arrays chunked ``chunk`` entries along
    the line and one system along the batch, in the gtsv layout and (batched) the line-major one (axis=0);
    ``to_gtsv`` takes an answer back to the gtsv layout."""
    import dask.array as da

    def chunked(a, lax):
        return da.from_array(a, chunks=tuple(chunk if i == lax else 1 if batched and i == 1 - lax else -1
                                             for i in range(a.ndim)))

    yield -1, [chunked(a, int(batched)) for a in arrays], lambda x: x
    if batched:
        yield 0, [chunked(np.ascontiguousarray(np.moveaxis(a, 0, 1)), 0) for a in arrays], \
            lambda x: np.moveaxis(x, 0, 1)


@pytest.mark.parametrize("n_workers", [1, 4])
def test_short_dask_lines_leave_ranks_without_rows(clients, n_workers):
    # lines shorter than the workers' shares: some ranks get no rows, a one-row rank no entry of dl, and
    # n = 1 no dl at all; each solved as the host arrays are (bit for bit) and as scipy solves them
    client = clients(n_workers)
    for n in (1, 2, 5):
        for batch, nrhs in ((None, None), (3, 2)):
            dl, d, du, b = _system("dominant", n, batch, nrhs, seed=n)
            host = np.asarray(wb.tridiag_solve(dl, d, du, b, client=client))
            _close(host, _oracle(dl, d, du, b))
            for chunk in (1, n):
                for axis, arrays, to_gtsv in _dask_layouts((dl, d, du, b), batch is not None, chunk):
                    x = to_gtsv(np.asarray(wb.tridiag_solve(*arrays, axis=axis, client=client)))
                    assert np.array_equal(x, host), (n, batch, nrhs, chunk, axis)


@pytest.mark.parametrize("n_workers", [1, 4])
def test_compact_derivative_of_short_dask_lines(clients, n_workers):
    client = clients(n_workers)
    rng = np.random.default_rng(n_workers)
    for n in (5, 7):
        for periodic in (True, False):
            for batch in (None, 3):
                f = rng.standard_normal((n,) if batch is None else (batch, n))
                host = np.asarray(wb.compact_derivative(f, 0.1, periodic=periodic, client=client))
                for chunk in (2,):
                    for axis, (fd,), to_gtsv in _dask_layouts((f,), batch is not None, chunk):
                        y = wb.compact_derivative(fd, 0.1, axis=axis, periodic=periodic, client=client)
                        assert np.array_equal(to_gtsv(np.asarray(y)), host), (n, periodic, batch, chunk, axis)


@pytest.mark.parametrize("axis", [-1, 0])
def test_empty_batch_gives_an_empty_answer(clients, axis):
    import dask.array as da

    client = clients(2)
    dl, d, du, b = _system("dominant", 5, 0, None)
    _, _, _, b2 = _system("dominant", 5, 0, 2)
    f = np.zeros((0, 10))
    if axis == 0:
        dl, d, du, b, b2, f = (np.moveaxis(a, 0, 1) for a in (dl, d, du, b, b2, f))
    for kind in (np.asarray, da.from_array):
        for rhs in (b, b2):
            x = wb.tridiag_solve(*(kind(a) for a in (dl, d, du, rhs)), axis=axis, client=client)
            assert np.asarray(x).shape == rhs.shape and x.dtype == np.float64 and x.stats["seconds"] == 0.0
        y = wb.compact_derivative(kind(f), 0.1, axis=axis, client=client)
        assert np.asarray(y).shape == f.shape


def test_compact_derivative_names_its_bad_arguments(clients):
    import dask.array as da

    client = clients(2)
    for h in (True, np.True_):
        with pytest.raises(ValueError, match="h must"):
            wb.compact_derivative(np.ones(16), h, client=client)
    f = np.sin(np.arange(64.0))
    f[40] = np.nan
    for kind in (np.asarray, lambda a: da.from_array(a, chunks=20)):      # the host check, then the workers'
        with pytest.raises(ValueError, match="^f has non-finite"):
            np.asarray(wb.compact_derivative(kind(f), 0.1, client=client))


@pytest.mark.parametrize("bad", [0, 16, 38])
def test_workers_name_non_finite_rows_in_the_callers_indices(clients, bad):
    # the workers find a dask input's NaN: dl's rows were named one too high (the padded row, past dl's end at
    # the last one)
    import dask.array as da

    n = 40
    for name, pos in (("dl", 0), ("du", 2), ("b", 3)):
        args = [np.ones(n - 1), np.full(n, 4.0), np.ones(n - 1), np.ones(n)]
        args[pos][bad] = np.nan
        args[pos] = da.from_array(args[pos], chunks=13)
        with pytest.raises(ValueError, match=f"^{name} has non-finite") as e:
            np.asarray(wb.tridiag_solve(*args, client=clients(2)))
        lo, hi = (int(v) for v in str(e.value).rsplit(" ", 1)[1].split(".."))
        assert lo <= bad <= hi <= len(args[pos]) - 1, str(e.value)


@pytest.mark.parametrize("n_workers", [1, 2, 3])
def test_periodic_against_dense(clients, n_workers):
    client = clients(n_workers)
    for kind, n in (("dominant", 50), ("nondominant", 37), ("dominant", 3)):
        dl, d, du, b = _system(kind, n, 4, None, seed=n, periodic=True)
        x = np.asarray(wb.tridiag_solve(dl, d, du, b, periodic=True, client=client))
        ref = np.stack([_dense(dl[k], d[k], du[k], b[k]) for k in range(4)])
        _close(x, ref)
        assert validate_tridiag(dl, d, du, b, x, periodic=True) < (1e-14 if kind == "dominant" else 1e-11)


def test_identical_for_1_2_3_workers_and_all_work(clients):
    from distributed import futures_of

    dl, d, du, b = _system("dominant", 1500, 9, None, seed=7)
    outs = {}
    for p in (1, 2, 3):
        client = clients(p)
        for reduced in ("exact", "truncated"):
            x = wb.tridiag_solve(dl, d, du, b, reduced=reduced, client=client)
            assert min(x.stats["rows_per_worker"]) > 0
            holders = {w for ws in client.who_has(futures_of(x)).values() for w in ws}
            assert len(holders) == p                                     # every worker holds a block of x
            outs[p, reduced] = np.asarray(x)
    assert wb.tridiag_solve(dl, d, du, b, client=client).stats["reduced"] == "truncated"   # auto, dominant
    for reduced in ("exact", "truncated"):
        assert np.array_equal(outs[1, reduced], outs[2, reduced])
        assert np.array_equal(outs[1, reduced], outs[3, reduced])
    _close(outs[1, "exact"], _oracle(dl, d, du, b))


def test_short_line_major_host_batch_identical_for_1_2_3_workers(clients):
    # 97 rows take the fused pass whole on one worker but are too short to split into its blocks: the line
    # split over 2 or 3 workers ran the two-pass path (other bits); a host batch is cut along the batch instead
    dl, d, du, b = _system("dominant", 97, 37, None, seed=4)
    lm = [np.ascontiguousarray(a.T) for a in (dl, d, du, b)]
    outs = {}
    for p in (1, 2, 3):
        x = wb.tridiag_solve(*lm, axis=0, client=clients(p))
        assert x.stats["path"] == "fused"
        outs[p] = np.asarray(x)
    _close(outs[1].T, _oracle(dl, d, du, b))
    assert np.array_equal(outs[1], outs[2]) and np.array_equal(outs[1], outs[3])


def test_truncated_warns_when_it_drops_large_couplings(clients):
    import warnings

    client = clients(2)
    dl, d, du, b = _system("nondominant", 40, 6, None, seed=2)
    with pytest.warns(RuntimeWarning, match="truncation_coupling"):
        x = wb.tridiag_solve(dl, d, du, b, reduced="truncated", client=client)
    assert x.stats["truncation_coupling"] > 2.0 ** -26
    dl, d, du, b = _system("dominant", 1500, 9, None, seed=7)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                       # couplings below rounding: nothing to say
        x = wb.tridiag_solve(dl, d, du, b, reduced="truncated", client=client)
    _close(x, _oracle(dl, d, du, b))


@pytest.mark.parametrize("kind", ["dominant", "skew"])
def test_long_single_system_in_long_sub_blocks(clients, kind):
    # one system's grid aims for 8192-row sub-blocks: 30001 rows -> 12 of ~2500, 4 per rank on 3 workers
    dl, d, du, b = _system(kind, 30_001, None, 2, seed=3)
    ref = _oracle(dl, d, du, b)
    outs = {}
    for p in (1, 2, 3):
        x = wb.tridiag_solve(dl, d, du, b, client=clients(p))
        assert x.stats["blocks"] == 12 and x.stats["path"] == "two-pass"
        outs[p] = np.asarray(x)
    _close(outs[1], ref)
    assert np.array_equal(outs[1], outs[2]) and np.array_equal(outs[1], outs[3])


@pytest.mark.parametrize("periodic", [False, True])
def test_fused_pass_for_dominant_batches(clients, periodic):
    # n = 1300 gives 12 blocks of ~108 rows: long enough for the fused single pass
    dl, d, du, b = _system("dominant", 1300, 9, None, seed=21, periodic=periodic)
    outs = {}
    for p in (1, 2, 3):
        t0 = time.perf_counter()
        x = wb.tridiag_solve(dl, d, du, b, periodic=periodic, client=clients(p))
        assert x.stats["path"] == "fused" and x.stats["truncation_coupling"] <= 2.0 ** -53
        spans = x.stats["rank_spans"]
        assert len(spans) == p and all(t0 < s < e < time.perf_counter() for s, e in spans)
        outs[p] = np.asarray(x)
    assert np.array_equal(outs[1], outs[2]) and np.array_equal(outs[1], outs[3])
    if periodic:
        assert max(validate_tridiag(dl[k], d[k], du[k], b[k], outs[1][k], periodic=True) for k in range(9)) < 1e-14
    else:
        _close(outs[1], _oracle(dl, d, du, b))
        rows = distribute_system(dl, d, du, b, client=clients(3))     # line-major, already on the workers
        xr = wb.tridiag_solve(*rows, client=clients(3))
        assert xr.stats["path"] == "fused" and np.array_equal(np.asarray(xr).T, outs[1])


def test_fused_pass_covers_the_compact_scheme_matrix(clients):
    # the paper's systems: sixth-order compact scheme, alpha = 1/3 off the unit diagonal
    rng = np.random.default_rng(24)
    n, V = 1300, 8
    dl, du, d = np.full((V, n - 1), 1 / 3), np.full((V, n - 1), 1 / 3), np.ones((V, n))
    b = rng.standard_normal((V, n))
    x = wb.tridiag_solve(dl, d, du, b, client=clients(2))
    assert x.stats["path"] == "fused" and x.stats["halo_rows"] == 48          # |c'| -> 0.38: 32 rows are short
    _close(x, _oracle(dl, d, du, b))
    y = wb.tridiag_solve(*_system("dominant", n, V, None, seed=25), client=clients(2))
    assert y.stats["path"] == "fused" and y.stats["halo_rows"] == 32          # random, dominant: decays faster


def test_fused_pass_falls_back_when_coupling_does_not_decay(clients):
    client = clients(2)
    rng = np.random.default_rng(22)
    n, V = 1300, 8
    dl, du = np.full((V, n - 1), 0.5), np.full((V, n - 1), 0.5)
    d = 1.0 + 1e-3 * rng.random((V, n))                                # barely dominant: decays over ~1000 rows
    b = rng.standard_normal((V, n))
    x = wb.tridiag_solve(dl, d, du, b, client=client)
    assert x.stats["path"] == "two-pass" and x.stats["reduced"] == "exact"
    _close(x, _oracle(dl, d, du, b))
    from workbench.partition import RowBlocks

    dlr, dr, dur, br = distribute_system(dl, d, du, b, client=client)

    def poison(a):
        a = a.copy()
        a[a.shape[0] // 2, 3] = np.inf                                 # inside the last worker's block
        return a

    parts = list(dr.parts)
    parts[-1] = client.submit(poison, parts[-1], workers=[dr.workers[-1]], pure=False)
    bad = RowBlocks(parts, dr.offsets, dr.shape, dr.dtype, dr.workers, kind="dense", meta=dr.meta)
    with pytest.raises(ValueError, match="non-finite"):
        wb.tridiag_solve(dlr, bad, dur, br, client=client)


def test_repeated_solves_reuse_the_matrix_halo(clients):
    # a matrix already on the workers keeps its dask keys: the second solve skips the probe and its broadcast
    client = clients(2)
    dl, d, du, b = _system("dominant", 1300, 9, None, seed=26)
    rows = distribute_system(dl, d, du, b, client=client)
    x1 = wb.tridiag_solve(*rows, client=client)
    x2 = wb.tridiag_solve(*rows, client=client)
    assert (x1.stats["halo_from"], x2.stats["halo_from"]) == ("probe", "cache")
    assert x1.stats["path"] == x2.stats["path"] == "fused" and x1.stats["halo_rows"] == x2.stats["halo_rows"]
    assert np.array_equal(np.asarray(x1), np.asarray(x2))
    other = distribute_system(dl, d, du, 2 * b, client=client)                 # new keys: probed again
    x3 = wb.tridiag_solve(*other, client=client)
    assert x3.stats["halo_from"] == "probe" and np.array_equal(np.asarray(x3), 2 * np.asarray(x1))
    # a matrix whose coupling does not decay: the cached verdict sends the next solve straight to two passes
    rng = np.random.default_rng(27)
    slow = distribute_system(np.full((8, 1299), 0.5), 1.0 + 1e-3 * rng.random((8, 1300)), np.full((8, 1299), 0.5),
                             rng.standard_normal((8, 1300)), client=client)
    y1 = wb.tridiag_solve(*slow, client=client)
    y2 = wb.tridiag_solve(*slow, client=client)
    assert (y1.stats["halo_from"], y2.stats["halo_from"]) == ("probe", "cache")
    assert y1.stats["path"] == y2.stats["path"] == "two-pass"
    assert np.array_equal(np.asarray(y1), np.asarray(y2))


def test_fused_kernel_windows_and_tiles_match_thomas():
    pytest.importorskip("numba")
    from workbench.kernels.tridiag import cpu as K
    from workbench.kernels.tridiag import thomas_reference

    rng = np.random.default_rng(23)
    lens = np.array([40, 57, 33], np.int64)                           # windows of 8: ragged last windows
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
    m, V, Vt, W, H = int(lens.sum()), 13, 5, 8, 16                    # tiles of 5 systems: a ragged last tile
    dl, du = rng.uniform(-1, 1, (m, V)), rng.uniform(-1, 1, (m, V))
    dl[0], du[-1] = 0.0, 0.0                                          # the line's ends
    d = 20.0 + rng.uniform(0, 1, (m, V))                               # |c'| < 0.06: 16 rows reach rounding
    b = rng.uniform(-1, 1, (m, V))
    x, VS, WS, edge = np.zeros((m, V)), np.zeros((H, V)), np.zeros((H, V)), np.zeros((4, V))
    chk, tau = np.zeros(1), np.zeros(3)
    K.fused_kernel(dl, d, du, b, starts, lens, x, VS, WS, edge, chk, tau, Vt, W, H)
    ref = thomas_reference(dl[1:].T, d.T, du[:-1].T, b.T).T
    assert np.isfinite(chk[0]) and tau.max() <= 2.0 ** -53
    assert np.abs(x - ref).max() <= 1e-15 * np.abs(ref).max()
    # one tile of all 13 systems: eight go through the explicit 8-wide rows, five through the scalar loop;
    # the same operations per system, so the same bits as tiles of 5 (scalar only)
    x13 = np.zeros((m, V))
    K.fused_kernel(dl, d, du, b, starts, lens, x13, VS.copy(), WS.copy(), edge.copy(), np.zeros(1), np.zeros(3),
                   13, W, H)
    assert np.array_equal(x13, x)
    assert np.array_equal(edge[0], x[0]) and np.array_equal(edge[2], x[-1])
    assert not VS.any() and not WS.any()                              # no neighbours at the line's ends
    for arr, row, val in ((d, 50, np.nan), (d, 51, np.inf), (dl, 40, -np.inf), (du, 96, np.inf), (b, 7, np.nan)):
        keep = arr[row, 2]
        arr[row, 2] = val                                             # dl[40]: a block's first row
        chk[:] = 0.0
        K.fused_kernel(dl, d, du, b, starts, lens, x, VS, WS, edge, chk, tau, Vt, W, H)
        assert not np.isfinite(chk[0])
        arr[row, 2] = keep


def test_truncation_bound(clients):
    import warnings

    client = clients(2)
    n = 240                                                          # 12 sub-blocks of 20 rows
    rng = np.random.default_rng(3)
    for rho in (0.95, 0.6):                                          # dominance ratio (|dl|+|du|)/d
        dl, du = np.full(n - 1, rho / 2), np.full(n - 1, rho / 2)
        d, b = np.ones(n), rng.standard_normal(n)
        ex = wb.tridiag_solve(dl, d, du, b, reduced="exact", client=client)
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            tr = wb.tridiag_solve(dl, d, du, b, reduced="truncated", client=client)
        tau = tr.stats["truncation_coupling"]
        assert any("dropped couplings" in str(w.message) for w in said) == (tau > 2.0 ** -26)
        err = np.abs(np.asarray(tr) - np.asarray(ex)).max()
        assert err <= 4 * tau * np.abs(np.asarray(ex)).max() + 1e-15
        assert tau <= rho ** 19 * 1.01                                 # tau <= rho**(L-1)
    assert ex.stats["reduced"] == "exact"


def test_dask_rowblocks_and_array_engine(clients):
    import dask.array as da

    client = clients(2)
    dl, d, du, b = _system("dominant", 300, 6, None, seed=11)
    ref = _oracle(dl, d, du, b)
    dask_in = [da.from_array(a, chunks=(3, 77)) for a in (dl, d, du, b)]
    _close(wb.tridiag_solve(*dask_in, client=client), ref)
    rows = distribute_system(dl, d, du, b, client=client)
    xr = wb.tridiag_solve(*rows, client=client)                     # line-major (n, batch)
    _close(np.asarray(xr).T, ref)
    xa = wb.tridiag_solve(dl, d, du, b, engine="array", client=client)
    assert np.abs(np.asarray(xa) - np.asarray(xr).T).max() < 1e-13
    g = random_system(200, 5, nrhs=2, seed=1, client=client)         # generated on the workers
    x = wb.tridiag_solve(*g, client=client)
    host = [blk.gather(client) for blk in g]
    res = validate_tridiag(host[0][1:].T, host[1].T, host[2][:-1].T, host[3].transpose(2, 0, 1),
                           np.asarray(x).transpose(2, 0, 1))
    assert res < 1e-14 and x.stats["bytes_moved"] > 0


def test_compact_derivative(clients):
    client = clients(3)
    n = 512
    t = 2 * np.pi * np.arange(n) / n
    f = np.stack([np.sin(t), np.cos(t)])
    df = np.asarray(wb.compact_derivative(f, 2 * np.pi / n, client=client))
    assert np.abs(df - np.stack([np.cos(t), -np.sin(t)])).max() < 1e-8
    errs = []
    for m in (64, 128):                                              # one-sided closures: >= third order
        t = np.linspace(0, 2 * np.pi, m)
        d = np.asarray(wb.compact_derivative(np.sin(t), t[1] - t[0], periodic=False, client=client))
        errs.append(np.sqrt(np.mean((d - np.cos(t)) ** 2)))
    assert errs[1] < 1e-4 and errs[0] / errs[1] > 2 ** 2.5
    t = 2 * np.pi * np.arange(n) / n                                 # last: np.asarray uses the newest client
    df1 = np.asarray(wb.compact_derivative(np.sin(t), 2 * np.pi / n, client=clients(1)))
    assert np.array_equal(df1, df[0])


@pytest.mark.parametrize("periodic", [True, False])
def test_compact_derivative_fused_pass(clients, periodic):
    # the paper's use case: stencil and solve in one pass per rank (blocks of ~108 rows, halo 48)
    n, V = 1300, 8
    t = 2 * np.pi * np.arange(n) / n if periodic else np.linspace(0, 2 * np.pi, n)
    k = np.arange(1, V + 1)[:, None]
    f = np.sin(k * t)
    h = t[1] - t[0]
    outs = {}
    for p in (1, 2, 3):
        y = wb.compact_derivative(f, h, periodic=periodic, client=clients(p))
        assert y.stats["path"] == "fused" and y.stats["halo_rows"] == 48
        outs[p] = np.asarray(y)
    assert np.array_equal(outs[1], outs[2]) and np.array_equal(outs[1], outs[3])
    exact = np.asarray(wb.compact_derivative(f, h, periodic=periodic, reduced="exact", client=clients(3)))
    assert np.abs(outs[3] - exact).max() <= 1e-12 * np.abs(exact).max()
    err = np.abs(outs[3] - k * np.cos(k * t))
    assert (err.max() if periodic else err[:, 2:-2].max()) < 1e-6


def test_bad_inputs(clients):
    client = clients(2)
    dl, d, du, b = _system("dominant", 10, None, None)
    with pytest.raises(ValueError, match="dl"):
        wb.tridiag_solve(dl[:-1], d, du, b, client=client)
    with pytest.raises(ValueError, match="periodic: length n"):
        wb.tridiag_solve(dl, d, du, b, periodic=True, client=client)
    with pytest.raises(ValueError, match="b must"):
        wb.tridiag_solve(dl, d, du, b[:-1], client=client)
    bad = d.copy()
    bad[4] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        wb.tridiag_solve(dl, bad, du, b, client=client)
    with pytest.raises(np.linalg.LinAlgError):
        wb.tridiag_solve(np.zeros(9), np.zeros(10), np.zeros(9), b, client=client)
    with pytest.raises(np.linalg.LinAlgError):                       # singular, no zero pivot
        wb.tridiag_solve(np.ones(1), np.ones(2), np.ones(1), np.ones(2), client=client)
    with pytest.raises(ValueError, match="reduced"):
        wb.tridiag_solve(dl, d, du, b, reduced="pdd", client=client)
    with pytest.raises(TypeError, match="complex"):
        wb.tridiag_solve(dl, d + 0j, du, b, client=client)
    with pytest.raises(ValueError, match="periodic"):
        wb.tridiag_solve(np.ones(2), np.ones(2), np.ones(2), np.ones(2), periodic=True, client=client)
    with pytest.raises(ValueError, match="order"):
        wb.compact_derivative(np.ones(16), 0.1, order=2, client=client)
    with pytest.raises(ValueError, match="h must"):
        wb.compact_derivative(np.ones(16), 0.0, client=client)
    import dask.array as da
    nan_d = da.from_array(bad, chunks=5)                             # found on the workers
    with pytest.raises(ValueError, match="non-finite"):
        np.asarray(wb.tridiag_solve(dl, nan_d, du, b, client=client))


def _zero_rows_reference(dl, d, du, periodic):
    mag = np.abs(d)
    if periodic:
        mag = mag + np.abs(dl) + np.abs(du)
    else:
        mag[..., 1:] += np.abs(dl)
        mag[..., :-1] += np.abs(du)
    return np.flatnonzero((mag == 0).reshape(-1, mag.shape[-1]).any(axis=0))


@pytest.mark.parametrize("block", [1 << 20, 5, 1])
def test_client_checks_in_blocks_match_whole_array_ones(monkeypatch, block):
    from workbench import partition
    from workbench.kernels.tridiag import validation as v

    monkeypatch.setattr(v, "CHECK_BLOCK", block)
    monkeypatch.setattr(partition, "CHECK_BLOCK", block)
    rng = np.random.default_rng(block)
    for _ in range(300):
        n, V = int(rng.integers(1, 9)), int(rng.integers(1, 5))
        periodic = bool(rng.integers(0, 2)) and n >= 3
        one = bool(rng.integers(0, 2))
        m = n if periodic else n - 1
        p = rng.uniform(0.2, 0.9)
        dl, d, du = (np.where(rng.random(s) < p, 0.0, rng.standard_normal(s))
                     for s in ((m,) if one else (V, m), (n,) if one else (V, n), (m,) if one else (V, m)))
        want = _zero_rows_reference(dl, d, du, periodic)
        if want.size:
            with pytest.raises(np.linalg.LinAlgError, match=f"row {want[0]}" + (f" \\(and {want.size - 1} more"
                                                                              if want.size > 1 else "$")):
                v._check_zero_rows(dl, d, du, periodic)
        else:
            v._check_zero_rows(dl, d, du, periodic)
    x = np.ones((5, 7))
    assert partition.all_finite(x) and partition.all_finite(np.full((3, 3), 1e308))  # the sum overflows: look
    for bad in (np.nan, np.inf, -np.inf):
        x[2, 3] = bad
        assert not partition.all_finite(x)
    assert not partition.all_finite(np.full((3, 3), 1e308) * np.array([1.0, 1.0, np.inf]))


@pytest.mark.gpu
def test_array_engine_on_cupy():
    import cupy as cp

    from workbench.kernels.tridiag.ranks import _solve_chain

    dl, d, du, b = _system("dominant", 300, 8, None, seed=5)
    # gtsv form: dl[:, i] couples row i + 1 to row i, du[:, i] row i to row i + 1
    A, C, D = dl.T / d[:, 1:].T, du.T / d[:, :-1].T, (b / d).T[:, None, :]
    A = np.vstack([np.zeros((1, 8)), A])
    C = np.vstack([C, np.zeros((1, 8))])
    y = _solve_chain(cp.asarray(A), cp.asarray(C), cp.asarray(D), False, local="array")
    yh = _solve_chain(A, C, D, False, local="numba")
    assert np.abs(cp.asnumpy(y) - yh).max() < 1e-13


def test_interleaved_single_system_kernels_match_the_plain_ones():
    pytest.importorskip("numba")
    from workbench.kernels.tridiag import cpu as K

    rng = np.random.default_rng(3)
    lens = np.array([5, 5, 7, 1, 2, 2, 3, 3, 3, 9], np.int64)         # pairs, a lone block, 1- and 2-row blocks
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
    m = int(lens.sum())
    dl, du = rng.uniform(-1, 1, m), rng.uniform(-1, 1, m)
    d = 0.3 + rng.uniform(0, 1, m)                                   # not dominant: pivots vary widely
    b = rng.uniform(-1, 1, m)
    rows0 = np.concatenate([[0], np.cumsum(np.minimum(lens, 2))]).astype(np.int64)
    out = {}
    for name, bb in (("reduce1", b[:, None]), ("reduce1p", b)):
        RA, RC, RD, chk = np.zeros(rows0[-1]), np.zeros(rows0[-1]), np.zeros((rows0[-1],) + bb.shape[1:]), \
            np.zeros(lens.size)
        getattr(K, f"{name}_kernel")(dl, d, du, bb, starts, lens, rows0, RA, RC, RD, chk)
        out[name] = (RA, RC, RD.reshape(-1), chk)
    for a, c in zip(out["reduce1"], out["reduce1p"], strict=True):
        assert np.array_equal(a, c)
    Y0, Y1 = rng.uniform(-1, 1, lens.size), rng.uniform(-1, 1, lens.size)
    x1, x2 = np.zeros((m, 1)), np.zeros(m)
    K.expand1_kernel(dl, d, du, b[:, None], starts, lens, Y0[:, None], Y1[:, None], x1)
    K.expand1p_kernel(dl, d, du, b, starts, lens, Y0, Y1, x2)
    assert np.array_equal(x1[:, 0], x2)


def test_one_rhs_batch_kernels_match_the_general_ones():
    pytest.importorskip("numba")
    from workbench.kernels.tridiag import cpu as K

    rng = np.random.default_rng(4)
    lens = np.array([6, 1, 2, 3, 4, 9], np.int64)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
    m, V, Vt = int(lens.sum()), 13, 5                                # tiles of 5 systems: a ragged last tile
    dl, du = rng.uniform(-1, 1, (m, V)), rng.uniform(-1, 1, (m, V))
    d = 0.3 + rng.uniform(0, 1, (m, V))
    b = rng.uniform(-1, 1, (m, 1, V))
    rows0 = np.concatenate([[0], np.cumsum(np.minimum(lens, 2))]).astype(np.int64)
    M = int(rows0[-1])
    ref = [np.zeros((M, V)), np.zeros((M, V)), np.zeros((M, 1, V))]
    K.reduce_kernel(dl, d, du, b, starts, lens, rows0, *ref, np.zeros(lens.size), 1, Vt)
    got = [np.zeros((M, V)), np.zeros((M, V)), np.zeros((M, V))]
    K.reduce_b1_kernel(dl, d, du, b[:, 0], starts, lens, rows0, *got, np.zeros(lens.size), Vt)
    for r, g in zip(ref, got, strict=True):
        assert np.array_equal(r.reshape(M, V), g)
    Y0, Y1 = rng.uniform(-1, 1, (lens.size, 1, V)), rng.uniform(-1, 1, (lens.size, 1, V))
    x1, x2 = np.zeros((m, 1, V)), np.zeros((m, V))
    K.expand_kernel(dl, d, du, b, starts, lens, Y0, Y1, x1, np.empty((lens.max(), 1, Vt)), 1, Vt)
    K.expand_b1_kernel(dl, d, du, b[:, 0], starts, lens, Y0[:, 0], Y1[:, 0], x2, Vt)
    assert np.array_equal(x1[:, 0], x2)


# ---- the device path (numba.cuda twins in cuda.py) on simulated-GPU workers: tiny inputs, each launch
# covers <= ~1e4 rows x systems (every simulated CUDA thread is Python)


def _sim_and_cpu(clients, n_workers, solve):
    """``solve(client)`` on a gpu-sim cluster and on a CPU cluster: both answers (host) and stats."""
    out = []
    for backend in ("gpu-sim", "cpu"):
        client = clients(n_workers, backend=backend)
        x = solve(client)
        out.append((np.asarray(client.compute(x).result()), x.stats))
    (xs, ss), (xc, sc) = out
    assert (ss["backend"], ss["engine"]) == ("gpu-sim", "numba.cuda") and sc["backend"] == "cpu"
    assert ss["path"] == sc["path"] and ss["reduced"] == sc["reduced"]
    assert np.abs(xs - xc).max() <= 1e-10 * max(1.0, np.abs(xc).max())
    return xs, ss


@pytest.mark.parametrize("n_workers", [1, 2])
@pytest.mark.parametrize("kind", ["dominant", "nondominant"])
def test_gpu_sim_two_pass_matches_solve_banded_and_cpu(clients, n_workers, kind):
    dl, d, du, b = _system(kind, 61, 3, 2, seed=n_workers)           # ragged sub-blocks, 2 rhs
    x, st = _sim_and_cpu(clients, n_workers, lambda c: wb.tridiag_solve(dl, d, du, b, client=c))
    _close(x, _oracle(dl, d, du, b))
    assert st["path"] == "two-pass"
    dl1, d1, du1, b1 = (a[0] for a in (dl, d, du, b[..., 0]))       # one system, one rhs
    x1, _ = _sim_and_cpu(clients, n_workers, lambda c: wb.tridiag_solve(dl1, d1, du1, b1, client=c))
    _close(x1, _banded(dl1, d1, du1, b1))


@pytest.mark.parametrize("n_workers", [1, 2])
def test_gpu_sim_periodic_and_truncated(clients, n_workers):
    dl, d, du, b = _system("dominant", 40, 2, None, seed=5, periodic=True)
    x, st = _sim_and_cpu(clients, n_workers, lambda c: wb.tridiag_solve(dl, d, du, b, periodic=True,
                                                                        reduced="exact", client=c))
    _close(x, np.stack([_dense(dl[k], d[k], du[k], b[k]) for k in range(2)]))
    n, rho = 240, 0.5                                                # 20-row sub-blocks: rho**19 < 2**-53
    rng = np.random.default_rng(3)
    dl, du, d, b = np.full(n - 1, rho / 2), np.full(n - 1, rho / 2), np.ones(n), rng.standard_normal(n)
    x, st = _sim_and_cpu(clients, n_workers, lambda c: wb.tridiag_solve(dl, d, du, b, reduced="truncated",
                                                                        client=c))
    _close(x, _banded(dl, d, du, b))


@pytest.mark.parametrize("n_workers", [1, 2])
def test_gpu_sim_fused_pass_matches_solve_banded_and_cpu(clients, n_workers):
    dl, d, du, b = _system("dominant", 800, 8, None, seed=7)         # 12 blocks of 66-67 rows: halo 32 fits
    x, st = _sim_and_cpu(clients, n_workers, lambda c: wb.tridiag_solve(dl, d, du, b, client=c))
    assert st["path"] == "fused"
    _close(x, _oracle(dl, d, du, b))
    import dask.array as da

    if n_workers == 2:   # a grid of chunks: each worker its row of chunks, its line assembled from them
        grid = [da.from_array(a, chunks=(4, 400)) for a in (dl, d, du, b)]
        x, st = _sim_and_cpu(clients, n_workers, lambda c: wb.tridiag_solve(*grid, client=c))
        assert st["path"] == "fused" and st["split"] == "batch"
        _close(x, _oracle(dl, d, du, b))
    # a NaN found on the workers (dask input): the fused pass's check sends it to the two-pass path,
    # which names the argument
    bad = d.copy()
    bad[3, 500] = np.nan
    with pytest.raises(ValueError, match="d has non-finite"):
        np.asarray(wb.tridiag_solve(dl, da.from_array(bad, chunks=(8, 400)), du, b,
                                    client=clients(n_workers, backend="gpu-sim")))


@pytest.mark.parametrize("n_workers", [1, 2])
def test_gpu_sim_compact_derivative(clients, n_workers):
    n, V = 1300, 8                                                    # the compact scheme's fused pass (halo 48)
    t = 2 * np.pi * np.arange(n) / n
    k = np.arange(1, V + 1)[:, None]
    x, st = _sim_and_cpu(clients, n_workers, lambda c: wb.compact_derivative(np.sin(k * t), t[1] - t[0], client=c))
    assert st["path"] == "fused" and np.abs(x - k * np.cos(k * t)).max() < 1e-6
    t = np.linspace(0, 2 * np.pi, 64)                                # one line, one-sided closures: two passes
    x, st = _sim_and_cpu(clients, n_workers, lambda c: wb.compact_derivative(np.sin(t), t[1] - t[0],
                                                                             periodic=False, client=c))
    assert st["path"] == "two-pass" and np.sqrt(np.mean((x - np.cos(t)) ** 2)) < 1e-3


@pytest.mark.parametrize("n_workers", [2, 4])
def test_readme_layout_runs_only_the_ranks(clients, n_workers):
    # persisted (batch, n) chunks of ceil(n / P) columns, one per worker: the ranks' edges are the chunks'
    # edges, each rank solves the chunk it holds, and the one sub-diagonal column a rank needs from its
    # neighbour's chunk is lent inside the group: no task runs but the ranks, no block moves, x comes back
    # in b's chunks, and the answer is the host solve's bit for bit
    import dask.array as da
    from distributed import get_task_stream, wait

    client = clients(n_workers)
    V, n = 16, 1024
    dl, d, du, b = _system("dominant", n, V, None, seed=8)
    ch = -(-n // n_workers)
    arrs = client.persist([da.from_array(a, chunks=(V, ch)) for a in (dl, d, du, b)])
    wait(arrs)   # persisted: in memory where the scheduler put them (a chunk still computing has no holder yet)
    wb.tridiag_solve(*arrs, client=client)                            # the halo probe's first call
    with get_task_stream(client) as ts:
        x = wb.tridiag_solve(*arrs, client=client)
    got = x.compute()
    ran = [t["key"] if isinstance(t["key"], str) else t["key"][0] for t in ts.data]
    assert sum(k.startswith("spmd-tridiag") for k in ran) == n_workers == len(ran), ran   # the ranks, no task else
    assert not any(s["action"] == "transfer" for t in ts.data for s in t.get("startstops", ())), \
        "a rank waited for a block to move"
    with get_task_stream(client) as persisting:
        wait(client.persist(x))           # x's chunks are the ranks' own results: persisting it runs nothing
    assert not persisting.data, persisting.data
    assert x.chunks[1] == arrs[3].chunks[1] and x.stats["path"] == "fused"
    assert np.array_equal(got, np.asarray(wb.tridiag_solve(dl, d, du, b, client=client)))
    _close(got, _oracle(dl, d, du, b))


@pytest.mark.parametrize("split", ["line", "batch"])
def test_chunks_on_another_worker_move_before_the_ranks(clients, split):
    # every chunk persisted on the first worker: the second rank's chunks move to its worker before the group
    # (no rank waits for a transfer) and are left there alone, so the active memory manager has no copy to
    # drop and the next call moves nothing (dropped after the group instead, the rank's copy was sometimes
    # the one the manager dropped first, and the next call pulled it again)
    import dask.array as da
    from dask.core import flatten
    from distributed import get_task_stream, wait

    client = clients(2)
    first = sorted(client.scheduler_info()["workers"])[0]
    V, n = 32, 1024
    dl, d, du, b = _system("dominant", n, V, None, seed=3)
    chunks = (V, n // 2) if split == "line" else (V // 2, n)
    arrs = client.persist([da.from_array(a, chunks=chunks) for a in (dl, d, du, b)], workers=[first])
    wait(arrs)
    keys = [k for a in arrs for k in flatten(a.__dask_keys__())]
    for _ in range(2):
        with get_task_stream(client) as ts:
            x = wb.tridiag_solve(*arrs, client=client)
        assert x.stats["split"] == split
        assert not any(s["action"] == "transfer" for t in ts.data for s in t.get("startstops", ())), ts.data
        held = client.sync(client.scheduler.who_has, keys=keys)
        assert all(len(held[k]) == 1 for k in keys), held                 # one copy each
        assert len({w for k in keys for w in held[k]}) == 2                # on both workers
        client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.extensions["amm"].run_once())
        assert client.sync(client.scheduler.who_has, keys=keys) == held
    _close(x.compute(), _oracle(dl, d, du, b))


def test_inputs_chunked_apart_run_only_the_ranks_and_their_cuts(clients):
    # dask's chunks="auto" cuts gtsv's dl and du (n - 1 columns) into other rows of systems than d and b:
    # each rank reads the chunks whose systems are mostly its own in place (moved to it once), the other
    # rank gets its few rows cut beside them, and nothing is rechunked (dl and du were copied, and moved
    # between the workers, on every call)
    import dask.array as da
    from distributed import get_task_stream, wait

    client = clients(2)
    V, n = 64, 1024
    dl, d, du, b = _system("dominant", n, V, None, seed=5)
    arrs = [da.from_array(a, chunks=(c, -1)) for a, c in zip((dl, d, du, b), (17, 16, 17, 16), strict=True)]
    arrs = client.persist(arrs, workers=[sorted(client.scheduler_info()["workers"])[0]])   # all on one worker
    wait(arrs)
    ref = np.asarray(wb.tridiag_solve(dl, d, du, b, client=client))
    wb.tridiag_solve(*arrs, client=client)                 # the first call moves the second rank's chunks
    for _ in range(2):
        client.run(lambda dask_worker: dask_worker.transfer_incoming_log.clear())
        with get_task_stream(client) as ts:
            x = wb.tridiag_solve(*arrs, client=client)
            wait(client.persist(x))
        ran = sorted(t["key"] if isinstance(t["key"], str) else t["key"][0] for t in ts.data)
        assert [k.split("-")[0] for k in ran] == ["_cols"] * 2 + ["spmd"] * 2, ran
        # dl's and du's chunk 17..34 lies across the ranks' systems (0..32, 32..64): two rows of each move
        moved = sum(e["total"] for log in client.run(lambda dask_worker: list(dask_worker.transfer_incoming_log))
                    .values() for e in log)
        assert moved <= 4 * n * 8, moved
        assert x.stats["split"] == "batch" and x.stats["gtsv_in_place"] is True
        assert np.array_equal(np.asarray(x), ref)


@pytest.mark.parametrize("n", [396, 1024, 3001, 4096, 4608, 4609, 8192, 9300, 16384, 65536])
def test_fused_blocks_are_the_fewest_short_enough(n):
    # the fused pass's blocks: sixths, or 12 j-ths with every twelfth an edge, the fewest whose blocks all fit
    # _FUSED_ROWS (one coarser cut of either kind would not), so 1, 2, 3, 6 workers (and 4, 12 past sixths)
    # see the same blocks
    from workbench.kernels.tridiag import _fused_grid, block_grid
    from workbench.kernels.tridiag.params import _FUSED_HALOS, _FUSED_ROWS

    grid = block_grid(n, 64)
    K = len(grid) - 1
    edges = _fused_grid(grid)
    parts = len(edges) - 1
    assert set(edges.tolist()) <= set(grid.tolist()) and edges[0] == 0 and edges[-1] == n
    assert np.diff(edges).max() <= _FUSED_ROWS
    if parts == 6:
        assert np.diff(edges).min() >= 2 * _FUSED_HALOS[0] + 2
    else:
        assert parts % 12 == 0 and set(grid[::K // 12].tolist()) <= set(edges.tolist())
        coarser = [grid[np.arange(p + 1) * K // p] for p in [6] + [12 * j for j in range(1, parts // 12)]]
        assert all(np.diff(c).max() > _FUSED_ROWS for c in coarser), n


def test_long_line_blocks_identical_for_1_2_3_4_workers(clients):
    # 9300 rows take 24 blocks of 360-415 rows: every twelfth is an edge, so 4 workers' ranks cut no block
    import dask.array as da

    dl, d, du, b = _system("dominant", 9300, 8, None, seed=13)
    outs = {}
    for p in (1, 2, 3, 4):
        x = wb.tridiag_solve(*[da.from_array(a, chunks=(8, -(-a.shape[1] // p))) for a in (dl, d, du, b)],
                             client=clients(p))
        assert x.stats["path"] == "fused" and x.stats["split"] == "line"
        outs[p] = np.asarray(x)
    _close(outs[1], _oracle(dl, d, du, b))
    assert all(np.array_equal(outs[p], outs[1]) for p in (2, 3, 4))


def test_short_lines_take_the_fused_pass_in_coarser_blocks(clients):
    # n = 200: sixths and quarters of the line are shorter than 2 * halo + 2 rows, halves are not;
    # whole systems per worker (host input) or a line split over two, the same blocks and the same answers
    import dask.array as da

    dl, d, du, b = _system("dominant", 200, 24, None, seed=5)
    xs, got = [], []
    for p in (1, 3, 2):
        args = (dl, d, du, b) if p != 2 else [da.from_array(a, chunks=(24, 100)) for a in (dl, d, du, b)]
        xs.append(wb.tridiag_solve(*args, client=clients(p)))
        got.append(np.asarray(xs[-1]))     # on its own cluster, the default client while it is the last asked
    assert [x.stats["path"] for x in xs] == ["fused"] * 3 and xs[2].stats["split"] == "line"
    _close(got[0], _oracle(dl, d, du, b))
    assert all(np.array_equal(g, got[0]) for g in got[1:])


def test_long_lines_take_narrow_panels_with_the_same_answers(clients):
    # a long line's blocks (512 rows at n = 6144, twelfths) would not fit a 64-system panel in cache: the gtsv pass
    # narrows its panels (24 systems there, a last one of 4 for 100 systems; 16 at the README's 4096, in sixths);
    # the answers stay those of the line-major layout bit for bit
    import dask.array as da

    from workbench.kernels.tridiag.params import _BATCH_PANEL
    from workbench.kernels.tridiag.ranks import _panel_width

    client = clients(2)
    V, n = 100, 6144
    assert _panel_width(np.array([n // 12])) == 24 < _BATCH_PANEL and _panel_width(np.array([683])) == 16
    assert _panel_width(np.array([85])) == _BATCH_PANEL
    assert _panel_width(np.array([10 ** 6])) == 8
    dl, d, du, b = _system("dominant", n, V, None, seed=5)
    x = wb.tridiag_solve(*[da.from_array(a, chunks=(V, -(-a.shape[1] // 2))) for a in (dl, d, du, b)], client=client)
    xt = wb.tridiag_solve(dl.T, d.T, du.T, b.T, axis=0, client=client)
    assert x.stats["path"] == "fused" and x.stats["gtsv_in_place"] and x.stats["split"] == "line"
    got = np.asarray(x)
    _close(got, _oracle(dl, d, du, b))
    assert np.array_equal(got, np.asarray(xt).T)


@pytest.mark.parametrize("n_workers", [2, 3])
@pytest.mark.parametrize("periodic", [False, True])
def test_layouts_axes_and_chunkings_give_identical_answers(clients, n_workers, periodic):
    # the gtsv layout (batch, n) and line-major (n, batch) via axis=0, host and dask, chunked along n (aligned
    # with the workers or not) or along the batch: the same blocks along the line, so the same answers bit
    # for bit, and those of solve_banded (dense solve for periodic systems)
    import dask.array as da

    client = clients(n_workers)
    V, n = 48, 1500
    dl, d, du, b = _system("dominant", n, V, None, seed=21, periodic=periodic)
    if periodic:
        ref = np.stack([_dense(dl[k], d[k], du[k], b[k]) for k in range(V)])
    else:
        ref = _oracle(dl, d, du, b)
    mo = dl.shape[1]

    def dk(arrs, chunks):
        return [da.from_array(a, chunks=c) for a, c in zip(arrs, chunks, strict=True)]

    cases = {
        "host": (wb.tridiag_solve(dl, d, du, b, periodic=periodic, client=client), False),
        "host axis=0": (wb.tridiag_solve(dl.T, d.T, du.T, b.T, axis=0, periodic=periodic, client=client), True),
        "dask along n": (wb.tridiag_solve(*dk((dl, d, du, b), [(V, -(-n // n_workers))] * 4), periodic=periodic,
                                          client=client), False),
        "dask along n, ragged": (wb.tridiag_solve(*dk((dl, d, du, b), [(V, 377)] * 4), periodic=periodic,
                                                  client=client), False),
        "dask along batch": (wb.tridiag_solve(*dk((dl, d, du, b), [(16, -1)] * 4), periodic=periodic,
                                              client=client), False),
        "dask both ways": (wb.tridiag_solve(*dk((dl, d, du, b), [(16, 700)] * 4), periodic=periodic,
                                            client=client), False),
        "dask both ways, empty chunks": (wb.tridiag_solve(*dk((dl, d, du, b), [((16, 0, 16, 16), (700, 0, mo - 700)),
                                                                       ((16, 0, 16, 16), (700, 0, n - 700))] * 2),
                                                          periodic=periodic, client=client), False),
        # each input its own chunks of systems, as dask's chunks="auto" cuts dl's n - 1 columns and d's n
        "dask along batch, chunked apart": (wb.tridiag_solve(*dk((dl, d, du, b), [(17, -1), ((20, 28), -1), (13, -1),
                                                                                  (16, -1)]),
                                                             periodic=periodic, client=client), False),
        "dask axis=0 along batch, chunked apart": (
            wb.tridiag_solve(*dk((dl.T, d.T, du.T, b.T), [(-1, 17), (-1, 16), (-1, (5, 43)), (-1, 16)]), axis=0,
                             periodic=periodic, client=client), True),
        "dask axis=0 along n": (wb.tridiag_solve(*dk((dl.T, d.T, du.T, b.T), [(mo // 2, V), (n // 2, V)] * 2),
                                                 axis=-2, periodic=periodic, client=client), True),
        "dask axis=0 along batch": (wb.tridiag_solve(*dk((dl.T, d.T, du.T, b.T), [(-1, 16)] * 4), axis=0,
                                                     periodic=periodic, client=client), True),
        "dask axis=0 both ways": (wb.tridiag_solve(*dk((dl.T, d.T, du.T, b.T), [(700, 16)] * 4), axis=0,
                                                   periodic=periodic, client=client), True),
        # C-ordered line-major chunks whose edges miss the ranks': a rank inside one chunk reads it in place
        "dask axis=0 C-ordered along n, ragged": (
            wb.tridiag_solve(*dk([np.ascontiguousarray(a.T) for a in (dl, d, du, b)], [(377, V)] * 4), axis=0,
                             periodic=periodic, client=client), True),
        "dask axis=0 C-ordered, a chunk starting before a rank": (
            wb.tridiag_solve(*dk([np.ascontiguousarray(a.T) for a in (dl, d, du, b)],
                                 [((740, mo - 740), (V,)), ((740, n - 740), (V,))] * 2), axis=0,
                             periodic=periodic, client=client), True),
    }
    first = None
    for name, (x, transposed) in cases.items():
        assert x.shape == ((n, V) if transposed else (V, n)), name
        got = np.asarray(x)
        got = got.T if transposed else got
        assert x.stats["path"] == "fused", name
        _close(got, ref)
        first = got if first is None else first
        assert np.array_equal(got, first), name
    assert cases["host"][0].stats["split"] == "batch" and cases["dask along batch"][0].stats["split"] == "batch"
    assert cases["dask along n"][0].stats["split"] == "line"
    # a grid of chunks: whole rows of chunks (whole systems) per worker, each row's chunks read in place;
    # the ranks exchange only their verdicts (not one row of values)
    for name in ("dask both ways", "dask both ways, empty chunks", "dask axis=0 both ways"):
        assert cases[name][0].stats["split"] == "batch" and cases[name][0].stats["bytes_moved"] < 8 * V, name
    assert cases["dask both ways"][0].stats["gtsv_in_place"] is True
    # inputs chunked apart are cut to the same systems on each rank, in place: no rechunk, nothing moves
    for name in ("dask along batch, chunked apart", "dask axis=0 along batch, chunked apart"):
        assert cases[name][0].stats["split"] == "batch" and cases[name][0].stats["bytes_moved"] < 8 * V, name
    assert cases["dask along batch, chunked apart"][0].stats["gtsv_in_place"] is True
    # a rank over three or more chunks solves them in place, in runs of blocks joined as ranks are
    assert cases["dask along n, ragged"][0].stats["gtsv_in_place"] is True
    assert cases["dask along n"][0].stats["gtsv_in_place"] is True
    assert cases["dask axis=0 along n"][0].stats["gtsv_in_place"] is None


def test_layouts_on_the_two_pass_path_and_several_rhs(clients):
    # non-dominant systems (two-pass), several right-hand sides and one system, in both axes
    import dask.array as da

    client = clients(2)
    V, n, R = 20, 300, 3
    dl, d, du, b = _system("nondominant", n, V, R, seed=5)
    ref = np.stack([_banded(dl[k], d[k], du[k], b[k]) for k in range(V)])
    x = wb.tridiag_solve(dl, d, du, b, client=client)
    assert x.stats["path"] == "two-pass" and x.shape == (V, n, R)
    _close(x, ref)
    xt = wb.tridiag_solve(dl.T, d.T, du.T, b.transpose(1, 0, 2), axis=0, client=client)
    assert xt.shape == (n, V, R) and np.array_equal(np.asarray(xt).transpose(1, 0, 2), np.asarray(x))
    xd = wb.tridiag_solve(*[da.from_array(a, chunks=(V, 100) + a.shape[2:]) for a in (dl, d, du, b)], client=client)
    assert np.array_equal(np.asarray(xd), np.asarray(x))
    one = wb.tridiag_solve(da.from_array(dl[0], chunks=101), d[0], du[0], b[0, :, 0], axis=0, client=client)
    _close(one, ref[0, :, 0])
    with pytest.raises(ValueError, match="axis"):
        wb.tridiag_solve(dl, d, du, b, axis=2, client=client)
    with pytest.raises(ValueError, match="du must have shape"):
        wb.tridiag_solve(dl.T, d.T, du, b.transpose(1, 0, 2), axis=0, client=client)


@pytest.mark.parametrize("n_workers", [1, 2])
def test_one_right_hand_side_with_its_own_axis(clients, n_workers):
    # b shaped (batch, n, 1) is several right-hand sides, one of them: the gtsv fused pass (2-D b blocks) is not
    # for it, and numba failed to type the 3-D block there (the fused dominant case)
    import dask.array as da

    client = clients(n_workers)
    V, n = 16, 515
    dl, d, du, b = _system("dominant", n, V, None, seed=12)
    want = np.asarray(wb.tridiag_solve(dl, d, du, b, client=client))
    b3 = b[:, :, None]
    for rows in (V, 8):
        args = [da.from_array(dl, chunks=(rows, -1)), da.from_array(d, chunks=(rows, -1)),
                da.from_array(du, chunks=(rows, -1)), da.from_array(b3, chunks=(rows, -1, 1))]
        for got in (wb.tridiag_solve(dl, d, du, b3, client=client), wb.tridiag_solve(*args, client=client)):
            assert got.shape == (V, n, 1)
            _close(np.asarray(got)[:, :, 0], want)


def test_compact_derivative_axis(clients):
    import dask.array as da

    client = clients(2)
    n, V = 1300, 16
    t = 2 * np.pi * np.arange(n) / n
    f = np.sin(np.arange(1, V + 1)[:, None] * t)
    h = 2 * np.pi / n
    y = np.asarray(wb.compact_derivative(f, h, client=client))
    assert np.abs(y - np.arange(1, V + 1)[:, None] * np.cos(np.arange(1, V + 1)[:, None] * t)).max() < 1e-6
    for x, transposed in ((wb.compact_derivative(f.T, h, axis=0, client=client), True),
                          (wb.compact_derivative(da.from_array(f, chunks=(V, 400)), h, client=client), False),
                          (wb.compact_derivative(da.from_array(f.T, chunks=(650, V)), h, axis=0, client=client), True),
                          (wb.compact_derivative(da.from_array(f, chunks=(8, n)), h, client=client), False)):
        got = np.asarray(x)
        assert np.array_equal(got.T if transposed else got, y)


def test_gtsv_batch_kernel_matches_the_line_major_pass():
    # the (batch, m) pass on blocks as they lie (each input up to two blocks of columns, one starting before
    # the rank's first row or a single fill column, a one-system broadcast block, a narrow last panel) gives
    # fused_kernel's answers on the line-major copy bit for bit, and its edge rows and columns
    pytest.importorskip("numba")
    from workbench.kernels.tridiag import cpu as K

    rng = np.random.default_rng(31)
    lens = np.array([90, 101, 77], np.int64)                          # blocks >= 2H + 2 rows, odd lengths
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
    m, V, W, H = int(lens.sum()), 70, 32, 32                          # panels of 64: a last panel of 6
    dl, du = rng.uniform(-1, 1, (V, m)), rng.uniform(-1, 1, (V, m))
    d = 2 * (np.abs(dl) + np.abs(du)) + rng.random((V, m))
    du_one = np.full((1, m), 0.25)                                    # constant super-diagonal, one system
    b = rng.uniform(-1, 1, (V, m))
    lm = [np.ascontiguousarray(a.T) for a in (dl, d, np.broadcast_to(du_one, (V, m)), b)]
    out = {}
    for name, args in (("line-major", lm), ):
        x, VS, WS, edge = np.zeros((m, V)), np.zeros((H, V)), np.zeros((H, V)), np.zeros((4, V))
        chk, tau = np.zeros(1), np.zeros(3)
        K.fused_kernel(*args, starts, lens, x, VS, WS, edge, chk, tau, 64, W, H)
        out[name] = (x.T, VS, WS, edge, tau)
    ext = np.concatenate([rng.uniform(-1, 1, (V, 4)), d], axis=1)    # 4 columns before row 0 (a neighbour's)
    cut = 123
    pieces = {"dl": ((0, dl[:, :1]), (1, dl[:, 1:])),                  # gtsv's fill column, then the rest
              "d": ((-4, np.ascontiguousarray(ext[:, :4 + cut])), (cut, np.ascontiguousarray(d[:, cut:]))),
              "du": ((0, du_one), (0, np.empty((1, 0)))),
              "b": ((0, np.ascontiguousarray(b[:, :cut + 5])), (cut + 5, np.ascontiguousarray(b[:, cut + 5:])))}
    blocks, r0 = [], []
    for (ra, a), (rb, a2) in pieces.values():
        blocks += [np.ascontiguousarray(a), np.ascontiguousarray(a2)]
        r0 += [ra, rb]
    x, VS, WS, edge = np.zeros((V, m)), np.zeros((H, V)), np.zeros((H, V)), np.zeros((4, V))
    chk, tau = np.zeros(1), np.zeros(3)
    K.fused_batch_kernel(*blocks, np.array(r0, np.int64), starts, lens, x, VS, WS, edge, chk, tau, 64, W, H)
    ref = out["line-major"]
    assert np.isfinite(chk[0]) and tau.max() <= 2.0 ** -53
    assert np.array_equal(x, ref[0])
    for got, want in zip((VS, WS, edge), ref[1:4], strict=True):
        assert np.array_equal(got, want)
    xs = np.stack([_banded(dl[k, 1:], d[k], du_one[0, :-1], b[k]) for k in range(V)])
    assert np.abs(x - xs).max() <= 1e-13 * np.abs(xs).max()


@pytest.mark.parametrize("vn, rows", [(64, 342), (21, 13), (8, 4), (3, 7), (13, 6), (16, 64), (9, 12)])
@pytest.mark.parametrize("strided", [False, True])
@pytest.mark.parametrize("aligned", [False, True])
def test_panel_transposes_move_every_entry(vn, rows, strided, aligned):
    # the gtsv pass's panel loads and stores (4 x 4 register tiles, eight systems at a time, scalar edges):
    # exactly numpy's transpose, for ragged counts of systems and rows, an offset first row, and blocks whose
    # rows are not contiguous (the scalar path); x on a cache line with rows of whole lines takes the
    # streaming stores (8 and then 4 columns at a time)
    pytest.importorskip("numba")
    from workbench.backend import empty
    from workbench.kernels.tridiag import cpu as K

    rng = np.random.default_rng(vn + rows)
    V, w, r0, v0, i0 = vn + 5, rows + 9, 3, 2, 1
    full = rng.standard_normal((V, 2 * w))
    a = full[:, ::2] if strided else np.ascontiguousarray(full[:, :w])
    s = np.full((rows + 2, 64), np.nan)
    K.load_panel_kernel(a, r0, s, v0, vn, i0, i0 + rows)              # local rows i0.. from a's column i - r0
    lo, hi = max(i0, r0), min(i0 + rows, r0 + w)                      # rows before r0: a's piece starts later
    np.testing.assert_array_equal(s[lo - i0:hi - i0, :vn], a[v0:v0 + vn, lo - r0:hi - r0].T)
    assert np.isnan(s[:lo - i0]).all() and np.isnan(s[hi - i0:]).all() and np.isnan(s[:, vn:]).all()
    x = np.full((V, rows + 2), np.nan)
    if aligned:
        x = empty((V, -(-(rows + 2) // 8) * 8))
        x[:] = np.nan
        assert x.ctypes.data % 64 == 0 and x.strides[0] % 64 == 0
    xv = x[:, ::2][:, :rows // 2] if strided else x[:, :rows]
    K.store_panel_kernel(s[:xv.shape[1]], xv, v0, vn)
    np.testing.assert_array_equal(xv[v0:v0 + vn], s[:xv.shape[1], :vn].T)
    assert np.isnan(xv[:v0]).all() and np.isnan(xv[v0 + vn:]).all()


@pytest.mark.parametrize("n_workers", [2, 3])
def test_gtsv_layout_odd_sizes_and_chunks_across_rank_edges(clients, n_workers):
    # (batch, n) dask arrays whose chunks end a few columns away from the ranks' edges (the ranks read a
    # neighbour's few columns), chunked along the batch with several chunks per worker (solved chunk by chunk)
    # or differently per input (copied into one block), odd sizes, host input: the answers of the line-major
    # RowBlocks bit for bit, and solve_banded's; chunked along n, x comes back in b's chunks
    import dask.array as da

    from workbench.kernels.tridiag import _rank_offsets

    client = clients(n_workers)
    for V, n in ((7, 13), (9, 811), (70, 1501)):
        dl, d, du, b = _system("dominant", n, V, None, seed=V + n)
        ref = _oracle(dl, d, du, b)
        rows = np.asarray(wb.tridiag_solve(*distribute_system(dl, d, du, b, client=client), client=client)).T
        _close(rows, ref)
        cut = max(1, int(_rank_offsets(n, n_workers, V)[1]) - 3)      # a chunk edge 3 columns before the rank's
        per = -(-V // (3 * n_workers))
        chunkings = {"along n, near rank edges": [(V, (cut, a.shape[1] - cut)) for a in (dl, d, du, b)],
                     "along batch, 3 per worker": [(per, -1)] * 4,
                     "along batch, unlike": [(4, -1), (5, -1), (3, -1), (4, -1)]}
        got = {"host": wb.tridiag_solve(dl, d, du, b, client=client)}
        for name, ch in chunkings.items():
            got[name] = wb.tridiag_solve(*[da.from_array(a, chunks=c) for a, c in zip((dl, d, du, b), ch, strict=True)],
                                         client=client)
        for name, x in got.items():
            assert x.shape == (V, n), name
            xa = np.asarray(x)
            assert np.array_equal(xa, rows), (name, V, n)
            if name.startswith("along n"):     # x comes back in b's chunks (3 workers: one of them cut in two)
                assert cut in np.cumsum(x.chunks[1]), (x.chunks, cut)
                assert n_workers > 2 or x.chunks[1] == (cut, n - cut), (x.chunks, cut)
            if V >= 8 and n >= 811:
                assert x.stats["path"] == "fused", name


@pytest.mark.parametrize("n, edges, P, want", [
    (4096, (0, 3000, 4096), 2, (0, 2731, 4096)),      # the block edge nearest the chunk: 269 rows borrowed, not 952
    (4096, (0, 1366, 2732, 4096), 2, (0, 1366, 4096)),  # a whole chunk more for one rank beats lending half of one
    (4096, (0, 2048, 4096), 2, (0, 2048, 4096)),      # chunks of ceil(n / P): the equal shares
    (4096, (0, 4096), 2, (0, 2048, 4096)),            # one chunk: nothing to follow
    (4096, (0, 1366, 2732, 4096), 3, (0, 1366, 2731, 4096)),
    (4096, (0, 2000, 2100, 4096), 2, (0, 2048, 4096)),  # a 48-row borrow is cheaper than the imbalance
    (16384, (0, 12000, 16384), 2, (0, 12288, 16384)),  # 24ths of a long line: 288 rows borrowed, not 3808
    (16384, (0, 9000, 16384), 2, (0, 8876, 16384)),
])
def test_rank_edges_follow_the_chunks_at_block_edges(n, edges, P, want):
    from workbench.kernels.tridiag import _fused_grid, _line_offsets, block_grid

    got = _line_offsets(n, P, 16384, np.array(edges))
    assert tuple(int(o) for o in got) == want
    assert set(got.tolist()) <= set(_fused_grid(block_grid(n, 16384)).tolist())


def test_ragged_chunks_along_n_move_few_rows(clients):
    # (batch, n) chunked (V, 0.68 n) on 2 workers: the rank edge moves to the block edge (a sixth) nearest the
    # chunk edge, so a rank borrows a few columns of its neighbour's chunk instead of a quarter of the line; same bits
    import dask.array as da

    client = clients(2)
    V, n = 16, 1200
    dl, d, du, b = _system("dominant", n, V, None, seed=12)
    x = wb.tridiag_solve(*[da.from_array(a, chunks=(V, 820)) for a in (dl, d, du, b)], client=client)
    assert x.stats["rows_per_worker"] == [800, 400] and x.stats["path"] == "fused"
    assert x.stats["bytes_moved"] < 4 * 8 * V * 40, x.stats["bytes_moved"]
    assert np.array_equal(np.asarray(x), np.asarray(wb.tridiag_solve(dl, d, du, b, client=client)))
    _close(np.asarray(x), _oracle(dl, d, du, b))


def test_fewer_chunks_than_workers_take_a_rank_each_when_large(clients, monkeypatch):
    # 3 workers, (batch, n) in 2 chunks along n or along the batch: past _SPREAD_BYTES a worker, a rank per
    # chunk (the third would borrow all its rows on every call); small inputs spread over every worker.
    # Same bits either way.
    import dask.array as da

    import workbench.kernels.tridiag as td

    client = clients(3)
    V, n = 16, 1200
    dl, d, du, b = _system("dominant", n, V, None, seed=13)
    arrs = [da.from_array(a, chunks=(V, 600)) for a in (dl, d, du, b)]
    host = np.asarray(wb.tridiag_solve(dl, d, du, b, client=client))
    small = wb.tridiag_solve(*arrs, client=client)
    assert small.stats["workers"] == 3 and np.array_equal(np.asarray(small), host)
    monkeypatch.setattr(td, "_SPREAD_BYTES", 1)
    large = wb.tridiag_solve(*arrs, client=client)
    assert large.stats["workers"] == 2 and large.stats["rows_per_worker"] == [600, 600]
    assert large.stats["bytes_moved"] < 4 * 8 * V * 40, large.stats["bytes_moved"]
    assert np.array_equal(np.asarray(large), host)
    # two rows of chunks of systems: large, a row per worker on two of them; small, every worker a share
    grid = [da.from_array(a, chunks=(V // 2, 600)) for a in (dl, d, du, b)]
    rows = wb.tridiag_solve(*grid, client=client)
    assert (rows.stats["split"], rows.stats["workers"]) == ("batch", 2) and np.array_equal(np.asarray(rows), host)
    monkeypatch.setattr(td, "_SPREAD_BYTES", 1 << 40)
    spread = wb.tridiag_solve(*grid, client=client)
    assert (spread.stats["split"], spread.stats["workers"]) == ("line", 3)
    assert np.array_equal(np.asarray(spread), host)


def test_gtsv_system_is_the_documented_layout(clients):
    # the benchmarks' and the notebook's headline input: persisted dask arrays in gtsv form, chunked along n
    # over the workers (or along the batch), line-major with axis=0; bad arguments name themselves
    from distributed import futures_of

    from workbench.kernels.tridiag import gtsv_system, random_system

    client = clients(2)
    dl, d, du, b = gtsv_system(100, 6, client=client)
    assert (dl.shape, d.shape, du.shape, b.shape) == ((6, 99), (6, 100), (6, 99), (6, 100))
    assert d.chunks == ((6,), (50, 50)) and len(futures_of(d)) == 2
    off = np.abs(np.pad(np.asarray(dl), ((0, 0), (1, 0)))) + np.abs(np.pad(np.asarray(du), ((0, 0), (0, 1))))
    assert (np.asarray(d) > off).all()                                  # strictly dominant
    assert gtsv_system(100, 6, along="batch", client=client)[1].chunks == ((3, 3), (100,))
    t = gtsv_system(100, 6, axis=0, client=client)[1]
    assert t.shape == (100, 6) and t.chunks == ((50, 50), (6,)) and np.asarray(t).flags.c_contiguous
    assert gtsv_system(64, None, client=client)[1].chunks == ((32, 32),)
    # chunk i of all four arrays on one worker (the ranks find their inputs where they run), and the matrix
    # is random_system's (the solver's line-major layout) for the same seed, whatever the chunking
    fresh = gtsv_system(100, 6, seed=3, client=client)
    held = [{f.key[-1]: client.who_has([f])[f.key] for f in futures_of(a)} for a in fresh]
    assert all(h == held[1] for h in held) and held[1][0] != held[1][1], held
    lm = [np.asarray(a.to_dask_array()) for a in random_system(100, 6, seed=1, client=client)]
    assert np.array_equal(np.asarray(dl), lm[0][1:].T) and np.array_equal(np.asarray(du), lm[2][:-1].T)
    assert np.array_equal(np.asarray(d), lm[1].T) and np.array_equal(np.asarray(b), lm[3].T)
    assert np.array_equal(np.asarray(gtsv_system(100, 6, along="batch", axis=0, client=client)[1]), lm[1])
    for kw, name in (({"n": 1}, "n"), ({"batch": 0}, "batch"), ({"along": "x"}, "along"), ({"axis": 2}, "axis"),
                     ({"axis": True}, "axis")):
        with pytest.raises(ValueError, match=name):
            gtsv_system(**{"n": 10, **kw}, client=client)


def test_array_engine_expand_reads_no_unwritten_rows():
    # _xp_expand once multiplied every row's not-yet-written x[i + 1] (np.empty garbage) and discarded it:
    # a signalling NaN there raised "invalid value" warnings on the workers.  With x full of them, the
    # interior comes out right and nothing warns.
    import warnings

    from workbench.kernels.tridiag.ranks import _xp_expand

    rng = np.random.default_rng(3)
    m, V = 23, 4
    dl, du = rng.standard_normal((m, V)), rng.standard_normal((m, V))
    d = 4.0 + rng.random((m, V))
    b = rng.standard_normal((m, 1, V))
    # row i: dl[i] x[i-1] + d[i] x[i] + du[i] x[i+1] = b[i]
    ref = np.stack([sl.solve_banded((1, 1), np.stack([np.r_[0.0, du[:-1, v]], d[:, v], np.r_[dl[1:, v], 0.0]]),
                                    b[:, 0, v]) for v in range(V)], axis=-1)[:, None, :]
    starts, lens = np.array([0, 5, 12, 20]), np.array([5, 7, 8, 3])
    x = np.full_like(b, np.uint64(0x7FF0000000000001).view(np.float64))    # a signalling NaN, as garbage can be
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _xp_expand(dl, d, du, b, starts, lens, ref[starts], ref[starts + lens - 1], x)
    np.testing.assert_allclose(x, ref, rtol=1e-12, atol=1e-12)
