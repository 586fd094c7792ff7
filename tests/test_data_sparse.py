"""wb.data.random_sparse: seeded, the same matrix for any worker count, memory linear in nnz."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

import workbench as wb
from workbench.data.sparse import ROW_BLOCK, random_sparse_bytes


def test_host_matrix_is_seeded_and_has_the_density():
    A = wb.data.random_sparse((3000, 700), 0.02, seed=5)
    B = wb.data.random_sparse((3000, 700), 0.02, seed=5)
    C = wb.data.random_sparse((3000, 700), 0.02, seed=6)
    assert sp.isspmatrix_csr(A) and A.shape == (3000, 700)
    assert (A != B).nnz == 0 and (A != C).nnz > 0
    expected = 3000 * 700 * 0.02
    assert abs(A.nnz - expected) < 5 * np.sqrt(expected)                        # binomial spread
    assert A.has_canonical_format and 0 <= A.data.min() and A.data.max() < 1
    ones = wb.data.random_sparse((50, 40), 0.1, seed=1, values="ones")
    assert set(np.unique(ones.data)) <= {1.0}


@pytest.mark.parametrize("shape, density", [((5, 4), 1.0), ((400, 10), 0.5), ((300, 40), 0.3), ((200, 30), 0.8)])
def test_density_is_the_fraction_of_nonzeros(shape, density):
    # columns were drawn with replacement and repeats merged: 0.6 of a 5x4 matrix at density 1, 0.41 at 0.5
    A = wb.data.random_sparse(shape, density, seed=2)
    m, n = shape
    assert abs(A.nnz - m * n * density) <= 5 * np.sqrt(m * n * density * (1 - density)) + 1e-9
    assert A.has_canonical_format
    cols = np.bincount(A.indices, minlength=n)                 # uniform columns: no column far from the rest
    assert cols.min() > 0 or density < 0.5


@pytest.mark.parametrize("bad, match", [(dict(shape=(10,)), "shape"), (dict(shape=(0, 5)), "shape"),
                                        (dict(density=1.5), "density"), (dict(seed=-1), "seed"),
                                        (dict(values="cauchy"), "values")])
def test_bad_arguments_are_named(bad, match):
    kw = {"shape": (10, 10), "density": 0.1, "seed": 0, **bad}
    with pytest.raises(ValueError, match=match):
        wb.data.random_sparse(kw.pop("shape"), kw.pop("density"), **kw)


@pytest.mark.parametrize("n_workers", [1, 2, 3])
def test_same_matrix_for_any_worker_count(clients, n_workers):
    client = clients(n_workers)
    shape = (2 * ROW_BLOCK + 1234, 5000)        # rank boundaries fall inside row blocks
    host = wb.data.random_sparse(shape, 0.002, seed=11, values="normal")
    G = wb.data.random_sparse(shape, 0.002, seed=11, client=client, values="normal")
    assert isinstance(G, wb.partition.RowBlocks) and G.n_parts == n_workers and G.nnz == host.nnz
    got = G.gather(client)
    assert got.shape == host.shape and (got != host).nnz == 0


def _peak(shape, density):
    tracemalloc.start()
    try:
        A = wb.data.random_sparse(shape, density, seed=3)
        return tracemalloc.get_traced_memory()[1], A.nnz
    finally:
        tracemalloc.stop()


def test_memory_is_linear_in_nnz_not_in_rows_times_columns():
    shape = (40000, 10**9)                      # scipy.sparse.random would enumerate 4e13 index slots
    small, nnz_small = _peak(shape, 1e-8)       # ~10 per row
    big, nnz_big = _peak(shape, 4e-8)           # ~40 per row
    assert 3.5 < nnz_big / nnz_small < 4.5
    assert 2.5 < big / small < 5.0, (small, big)                 # grows with nnz, at most linearly
    assert big <= random_sparse_bytes(shape, 4e-8) and small <= random_sparse_bytes(shape, 1e-8)
    assert big < 120 * nnz_big                                   # bytes per nonzero, not per index slot
