"""Distributed FFT (AccFFT slab/pencil) against numpy.fft on 1-4 workers."""

from __future__ import annotations

import math
import textwrap

import dask.array as da
import numpy as np
import pytest
from _sim import run_in_simulator
from distributed import get_task_stream, wait

import workbench as wb
from workbench.kernels.fft import distributed_random, validate_fft

WORKERS = (1, 2, 3, 4)


def _data(shape, seed=0, real=False, dtype=np.float64):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(dtype)
    if real:
        return x
    return x + 1j * rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("n_workers", WORKERS)
@pytest.mark.parametrize("decomposition", ["slab", "pencil"])
def test_3d_matches_numpy(clients, n_workers, decomposition):
    client = clients(n_workers)
    x = _data((9, 7, 11))
    xr = _data((9, 7, 11), seed=1, real=True)
    kw = {"decomposition": decomposition, "client": client}
    F = wb.fftn(x, **kw)
    assert isinstance(F, da.Array) and F.dtype == np.complex128
    assert F.stats["backend"] == "cpu"
    validate_fft(F, x, "fwd")
    validate_fft(wb.ifftn(x, **kw), x, "bwd")
    R = wb.rfftn(xr, **kw)
    validate_fft(R, xr, "r2c")
    validate_fft(wb.irfftn(R, s=xr.shape, **kw), np.asarray(R), "c2r", s=xr.shape)
    # a dask input whose chunks divide neither the shape nor the worker count
    xd = da.from_array(x, chunks=(4, 3, 5))
    validate_fft(wb.fftn(xd, **kw), x, "fwd")
    assert F.stats["grid"] == ((n_workers,) if decomposition == "slab" else wb.partition.grid_shape(n_workers))
    if n_workers == 4 and decomposition == "pencil":
        assert F.stats["grid"] == (2, 2) and F.stats["n_transposes"] == 2


@pytest.mark.parametrize("n_workers", WORKERS)
def test_2d_odd_and_prime(clients, n_workers):
    client = clients(n_workers)
    for shape in [(13, 6), (17, 5)]:
        x = _data(shape, seed=shape[0])
        xr = x.real.copy()
        validate_fft(wb.fftn(x, client=client), x, "fwd")
        validate_fft(wb.ifftn(x, client=client), x, "bwd")
        R = wb.rfftn(xr, client=client)
        validate_fft(R, xr, "r2c")
        validate_fft(wb.irfftn(R, s=shape, client=client), np.asarray(R), "c2r", s=shape)


@pytest.mark.parametrize("n_workers", WORKERS)
@pytest.mark.parametrize("decomposition", ["slab", "pencil"])
def test_round_trip_stays_distributed(clients, n_workers, decomposition):
    client = clients(n_workers)
    x = _data((8, 10, 7), seed=3)
    kw = {"decomposition": decomposition, "client": client}
    F = wb.fftn(x, **kw)
    with get_task_stream(client) as persisting:
        wait(client.persist(F))           # F's chunks are the ranks' own results: persisting it runs nothing
    assert not persisting.data, persisting.data
    assert np.prod(F.numblocks) == np.prod(F.stats["grid"])   # one chunk per rank
    back = wb.ifftn(F, **kw)
    # the transposed output layout is used in place: no redistribution, no extra transposes
    assert not back.stats["input_redistributed"]
    assert back.stats["n_transposes"] == F.stats["n_transposes"]
    np.testing.assert_allclose(np.asarray(back), x, rtol=0, atol=1e-12 * np.abs(x).max())
    xr = x.real.copy()
    back_r = wb.irfftn(wb.rfftn(xr, **kw), s=xr.shape, **kw)
    assert back_r.dtype == np.float64
    np.testing.assert_allclose(np.asarray(back_r), xr, rtol=0, atol=1e-12 * np.abs(xr).max())


@pytest.mark.parametrize("n_workers", (2, 3))
def test_pipelined_transpose_with_recycled_buffers(clients, n_workers):
    """Large enough for several pipelined chunks whose pieces take the same-host path and reuse send buffers;
    extents that split unevenly over the workers and the chunks."""
    client = clients(n_workers)
    # 17 MiB, generated in slabs on the workers (a host array would travel inside the graph): >= 4 chunks,
    # pieces of about 1-2 MiB
    xd = distributed_random((67, 129, 130), client, seed=17)
    x = xd.compute()
    F = wb.fftn(xd, overlap=True, client=client)
    assert F.stats["bytes_moved"] > 0 and not F.stats["input_redistributed"] and F.stats["overlap"]
    validate_fft(F, x, "fwd")
    back = wb.ifftn(F, client=client)
    np.testing.assert_allclose(np.asarray(back), x, rtol=0, atol=1e-12 * np.abs(x).max())
    # the same without the sender thread (sends inline, buffers recycled right after each send):
    # the default on CPU workers, where a sender thread only competes with the FFTs for the cores
    small = x[:, :40]
    F = wb.fftn(small, client=client)
    assert F.stats["overlap"] is False
    validate_fft(F, small, "fwd")
    with pytest.raises(TypeError, match="overlap"):
        wb.fftn(small, overlap="yes", client=client)


def _set_engine(name):
    import workbench.kernels.fft.cpu as f

    f._ENGINE = name


@pytest.mark.parametrize("n_workers", (1, 3))
def test_scipy_engine_without_pyfftw(clients, n_workers):
    """The scipy.fft path the workers take when pyFFTW is not installed (in place, no temporaries)."""
    client = clients(n_workers)
    client.run(_set_engine, "scipy")
    try:
        x = _data((9, 10, 7), seed=21)
        xr = x.real.copy()
        for dec in ("slab", "pencil"):
            kw = {"decomposition": dec, "client": client}
            F = wb.fftn(x, **kw)
            validate_fft(F, x, "fwd")
            np.testing.assert_allclose(np.asarray(wb.ifftn(F, **kw)), x, rtol=0, atol=1e-12 * np.abs(x).max())
            validate_fft(wb.ifftn(x, norm="ortho", **kw), x, "bwd", norm="ortho")
            R = wb.rfftn(xr, **kw)
            validate_fft(R, xr, "r2c")
            validate_fft(wb.irfftn(R, s=xr.shape, **kw), np.asarray(R), "c2r", s=xr.shape)
        validate_fft(wb.fftn(da.from_array(x, chunks=(4, 3, 5)), client=client), x, "fwd")
    finally:
        client.run(_set_engine, "auto")


def test_every_worker_works_and_results_agree(clients):
    x = _data((12, 9, 10), seed=5)
    results = {}
    for n in (1, 2, 3):
        F = wb.fftn(x, client=clients(n))
        per = F.stats["per_rank"]
        assert sorted(r["worker"] for r in per) == sorted(clients(n).nthreads())
        assert all(np.prod(r["shape"]) > 0 and r["fft_s"] > 0 for r in per)
        if n > 1:
            assert F.stats["bytes_moved"] > 0
        assert len(F.chunks[1]) == n  # the slab output is split over every worker
        results[n] = np.asarray(F)
    ref = np.fft.fftn(x)
    for n, r in results.items():
        assert np.abs(r - results[1]).max() <= 1e-13 * np.abs(ref).max(), n


def test_s_axes_norm_and_dtypes(clients):
    client = clients(3)
    x = _data((6, 9, 8), seed=7)
    for s, axes, norm in [((5, 12), (0, 2), "ortho"), (None, (1, 2), "forward"), ((4, 4, 4), None, None),
                          (None, (-1, 0), "backward")]:
        validate_fft(wb.fftn(x, s=s, axes=axes, norm=norm, client=client), x, "fwd", s=s, axes=axes, norm=norm)
        validate_fft(wb.ifftn(x, s=s, axes=axes, norm=norm, client=client), x, "bwd", s=s, axes=axes, norm=norm)
    xr = x.real.copy()
    validate_fft(wb.rfftn(xr, axes=(0, 1), norm="ortho", client=client), xr, "r2c", axes=(0, 1), norm="ortho")
    R = np.fft.rfftn(xr)
    validate_fft(wb.irfftn(R, s=(6, 9, 7), client=client), R, "c2r", s=(6, 9, 7))
    # axes that skip the distributed one need no communication
    local = wb.fftn(x, axes=(1, 2), client=client)
    assert local.stats["n_transposes"] == 0 and local.stats["bytes_moved"] == 0
    # single precision stays single, as in numpy >= 2
    x32 = x.astype(np.complex64)
    F32 = wb.fftn(x32, client=client)
    assert F32.dtype == np.complex64
    validate_fft(F32, x32, "fwd", rtol=1e-5)
    R32 = wb.rfftn(xr.astype(np.float32), client=client)
    assert R32.dtype == np.complex64
    validate_fft(R32, xr.astype(np.float32), "r2c", rtol=1e-5)
    # integer input is promoted like numpy
    xi = np.arange(60).reshape(3, 4, 5)
    validate_fft(wb.fftn(xi, client=client), xi, "fwd")
    # 1-D transforms have no slab schedule and run on one rank
    z = _data((31,), seed=9)
    validate_fft(wb.fftn(z, client=client), z, "fwd")


@pytest.mark.parametrize("n_workers", [1, 3])
@pytest.mark.parametrize("n", [2, 9])
def test_1d_real_transforms(clients, n_workers, n):
    """1-D inputs run on one rank whose only stage transforms every axis: the r2c/c2r axis changes length
    between input and output (a c2r stage used to be handed an output cut to the input's length)."""
    client = clients(n_workers)
    xr = _data((n,), seed=n, real=True)
    R = np.fft.rfft(xr)
    validate_fft(wb.rfftn(xr, client=client), xr, "r2c")
    validate_fft(wb.rfftn(xr, s=(n + 3,), client=client), xr, "r2c", s=(n + 3,))
    validate_fft(wb.irfftn(R, client=client), R, "c2r")
    validate_fft(wb.irfftn(da.from_array(R, chunks=2), client=client), R, "c2r")
    for m in (n - 1, n, n + 1):
        validate_fft(wb.irfftn(R, s=(m,), client=client), R, "c2r", s=(m,))


@pytest.mark.parametrize("n_workers", [3, 4])
@pytest.mark.parametrize("shape, axes", [((3, 1, 4), None), ((3, 1, 5), None), ((1, 2, 3), None),
                                          ((2, 3, 4), (0, 1, 2)), ((2, 1, 3, 4), (1, 2, 0, 3)), ((2, 4), (1, 0))])
def test_real_transforms_with_empty_ranks(clients, n_workers, shape, axes):
    """Fewer planes than workers and no pencil grid that fits: ranks with empty blocks still take part in
    the transposes, and an r2c stage must send pieces of its output shape and dtype, not its input's, also
    from a rank with no planes (2-D inputs split the r2c axis itself and never hit that; 3-D and 4-D do)."""
    client = clients(n_workers)
    xr = _data(shape, seed=sum(shape), real=True)
    for x in (xr, da.from_array(xr, chunks=1)):
        R = wb.rfftn(x, axes=axes, client=client)
        validate_fft(R, xr, "r2c", axes=axes)
        Rh = np.asarray(R)
        validate_fft(wb.irfftn(R, axes=axes, client=client), Rh, "c2r", axes=axes)
        s = tuple(shape[a] for a in (axes or range(len(shape))))
        back = wb.irfftn(R, s=s, axes=axes, client=client)
        np.testing.assert_allclose(np.asarray(back), xr, rtol=0, atol=1e-12 * np.abs(xr).max())
    if n_workers == 4 and shape == (3, 1, 4):
        assert any(math.prod(r["shape"]) == 0 for r in R.stats["per_rank"])   # the path this test is for


def test_pencil_grid_argument(clients):
    client = clients(4)
    x = _data((8, 6, 5), seed=11)
    F = wb.fftn(x, decomposition="pencil", grid=(1, 4), client=client)
    assert F.stats["grid"] == (1, 4)
    validate_fft(F, x, "fwd")


@pytest.mark.parametrize("kind", ["fftn", "rfftn"])
def test_an_asked_for_grid_longer_than_an_axis_runs_as_auto_would(clients, kind):
    # 3 planes for 4 workers: "auto" ran it with a rank holding no planes, the same slab asked for by name
    # was refused; both run now, and so does a pencil grid longer than the array's axes
    client = clients(4)
    fn, ref = getattr(wb, kind), getattr(np.fft, kind)
    for shape, kw in (((3, 8, 8), {}), ((3, 8, 8), {"decomposition": "slab"}), ((7, 7), {"grid": (4,)}),
                      ((2, 3, 9), {"decomposition": "pencil", "grid": (4, 1)})):
        x = _data(shape).real
        np.testing.assert_allclose(np.asarray(fn(x, client=client, **kw)), ref(x), rtol=1e-10, atol=1e-10)


def test_bad_inputs(clients):
    client = clients(4)
    x = _data((4, 6, 5))
    with pytest.raises(ValueError, match="axes"):
        wb.fftn(x, axes=(0, 3), client=client)
    with pytest.raises(ValueError, match="axes"):
        wb.fftn(x, axes=(1, 1), client=client)
    with pytest.raises(ValueError, match="axes"):
        wb.ifftn(x, axes=(), client=client)
    with pytest.raises(ValueError, match="s has 4 entries for an array with 3 dimensions"):
        wb.fftn(x, s=(4, 6, 5, 2), client=client)
    with pytest.raises(ValueError, match="grid"):
        wb.fftn(x, decomposition="pencil", grid=(3, 1), client=client)
    with pytest.raises(ValueError, match="pencil"):
        wb.fftn(_data((8, 8)), decomposition="pencil", client=client)
    with pytest.raises(ValueError, match="dtype"):
        wb.fftn(np.array([["a", "b"], ["c", "d"]]), client=client)
    with pytest.raises(ValueError, match="dtype"):
        wb.fftn(np.empty((4, 4), dtype=object), client=client)
    with pytest.raises(ValueError, match="real"):
        wb.rfftn(x, client=client)
    with pytest.raises(ValueError, match="norm"):
        wb.fftn(x, norm="unitary", client=client)
    with pytest.raises(ValueError, match="decomposition"):
        wb.fftn(x, decomposition="cube", client=client)
    with pytest.raises(ValueError, match="s has"):
        wb.fftn(x, s=(4, 4), axes=(0,), client=client)


@pytest.mark.parametrize("n_workers", [1, 2])
def test_gpu_sim_matches_numpy_and_the_cpu_path(clients, n_workers):
    """The device path (transposes packed and placed by the numba.cuda box copy in the simulator) on tiny
    inputs: slab and pencil layouts, all four transforms, a scaled norm, host and dask inputs."""
    x = _data((6, 5, 7), seed=31)
    xr = _data((6, 5, 7), seed=32, real=True)

    def run(client):
        out = {}
        for dec in ("slab", "pencil"):
            kw = {"decomposition": dec, "client": client}
            F = wb.fftn(x, **kw)
            out[dec, "fwd"] = (np.asarray(F), F.stats["backend"], F.stats["n_transposes"])
            B = wb.ifftn(F, norm="ortho", **kw)  # in place on F's layout, scaled while packing
            out[dec, "bwd"] = (np.asarray(B), B.stats["backend"], B.stats["n_transposes"])
            R = wb.rfftn(xr, **kw)
            out[dec, "r2c"] = (np.asarray(R), R.stats["backend"], R.stats["n_transposes"])
            C = wb.irfftn(R, s=xr.shape, **kw)
            out[dec, "c2r"] = (np.asarray(C), C.stats["backend"], C.stats["n_transposes"])
        D = wb.fftn(da.from_array(x, chunks=(4, 3, 5)), client=client)  # redistributed on the workers
        out["dask", "fwd"] = (np.asarray(D), D.stats["backend"], D.stats["n_transposes"])
        return out

    cpu = run(clients(n_workers))
    sim = run(clients(n_workers, backend="gpu-sim"))
    Fx = np.fft.fftn(x)
    refs = {"fwd": Fx, "bwd": np.fft.ifftn(Fx, norm="ortho"), "r2c": np.fft.rfftn(xr), "c2r": xr}
    for key, (got, backend, n_tr) in sim.items():
        assert backend == "gpu-sim" and cpu[key][1] == "cpu", key
        if n_workers > 1:
            assert n_tr > 0, key  # the device transposes ran
        ref = refs[key[1]]
        scale = np.abs(ref).max()
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12 * scale, err_msg=str(key))
        np.testing.assert_allclose(got, cpu[key][0], rtol=0, atol=1e-10 * scale, err_msg=str(key))


_BOX_CHECK = """
import numpy as np
from numba import config
assert config.ENABLE_CUDASIM
from workbench.kernels.fft import cuda as dev
rng = np.random.default_rng(0)
for shape, xax, yax in (((5, 6, 4), 0, 2), ((3, 4, 5, 2), 2, 1), ((6, 7), 1, 0)):
    for dt in (np.complex128, np.float32):
        src = rng.standard_normal(shape).astype(dt)
        if dt == np.complex128:
            src = src + 1j * rng.standard_normal(shape)
        dshape = list(shape)
        dshape[xax] += 2
        dshape[yax] += 1
        dst = np.zeros(dshape, dt)
        ref = dst.copy()
        sx, sy, dx, dy, nx, ny = 1, 1, 2, 0, shape[xax] - 1, shape[yax] - 2
        p, q = min(xax, yax), max(xax, yax)
        pq = (lambda x, y: (x, y)) if xax < yax else (lambda x, y: (y, x))
        for scale in (1.0, 0.25):
            sl_s = [slice(None)] * len(shape)
            sl_s[xax], sl_s[yax] = slice(sx, sx + nx), slice(sy, sy + ny)
            sl_d = [slice(None)] * len(shape)
            sl_d[xax], sl_d[yax] = slice(dx, dx + nx), slice(dy, dy + ny)
            ref[tuple(sl_d)] = src[tuple(sl_s)] * scale
            dev._copy_box[2, 32](dev.box5(src, p, q), dev.box5(dst, p, q), *pq(sx, sy), *pq(dx, dy), *pq(nx, ny),
                                 scale)
            np.testing.assert_array_equal(dst, ref)
print("boxes agree")
"""


def test_cuda_pack_unpack_kernel_matches_numpy_under_simulator():
    run_in_simulator(textwrap.dedent(_BOX_CHECK), "boxes agree")


@pytest.mark.gpu
def test_gpu_matches_numpy():
    import cupy as cp

    with wb.cluster(backend="gpu", quiet=True) as client:
        x = _data((16, 12, 10), seed=13)
        F = wb.fftn(cp.asarray(x), client=client)
        validate_fft(F.map_blocks(cp.asnumpy, dtype=F.dtype), x, "fwd")


@pytest.mark.gpu
@pytest.mark.parametrize("source", ["host", "resident"])
def test_gpu_transposing_plans_match_numpy(source):
    """128^3 takes plans with chunked, pipelined transposes (16x12x10 does not).  On the first device run the
    resident input failed in cuFFT (CUFFT_EXEC_FAILED) and the host input ran FFTW on the worker's cores."""
    import cupy as cp

    from workbench.backend import to_device

    x = _data((128, 128, 128), seed=21)
    with wb.cluster(backend="gpu", quiet=True) as client:
        xin = x
        if source == "resident":
            xin = client.persist(wb.partition.persist(da.from_array(x, chunks=(64, 128, 128)), client)
                                 .map_blocks(to_device, dtype=x.dtype))
        F = wb.fftn(xin, client=client)
        assert F.stats["backend"] == "gpu"
        assert isinstance(F.blocks[0].compute(), cp.ndarray)      # the transform ran on the device
        validate_fft(np.asarray(F), x, "fwd")
        np.testing.assert_allclose(np.asarray(wb.ifftn(F, client=client)), x, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("n_workers", (1, 2, 3))
def test_distributed_input_is_used_in_place(clients, n_workers):
    """The README's path: wb.distribute(x) once (dense row blocks), then fftn/ifftn/rfftn on it; the slabs are the
    input layout, so nothing is redistributed before the first transpose.  Blocks that are not dense are refused."""
    client = clients(n_workers)
    x = _data((10, 6, 7))
    xd = wb.distribute(x, client=client)
    F = wb.fftn(xd, client=client)
    validate_fft(F, x, "fwd")
    assert F.stats["input_redistributed"] is False
    validate_fft(wb.ifftn(xd, client=client), x, "bwd")
    xr = _data((10, 6, 7), seed=2, real=True)
    validate_fft(wb.rfftn(wb.distribute(xr, client=client), client=client), xr, "r2c")
    validate_fft(wb.fftn(xd, decomposition="pencil", client=client), x, "fwd")
    np.testing.assert_array_equal(xd.gather(client), x)          # the input is left as it was
    import scipy.sparse as sp

    with pytest.raises(TypeError, match="x"):
        wb.fftn(wb.distribute(sp.random(8, 8, 0.5, format="csr", random_state=0), client=client), client=client)


def test_slabs_held_on_another_worker_move_before_the_ranks(clients):
    # a dask input in slab chunks, all persisted on the first worker: the second slab moves to its rank's worker
    # before the group (no rank waits for a transfer) and stays there alone, so later calls move nothing
    from dask.core import flatten

    client = clients(2)
    w = sorted(client.scheduler_info()["workers"])
    x = _data((16, 12, 10), seed=4)
    xd = client.persist(da.from_array(x, chunks=(8, 12, 10)), workers=[w[0]])
    wait(xd)
    keys = list(flatten(xd.__dask_keys__()))
    for _ in range(2):
        with get_task_stream(client) as ts:
            F = wb.fftn(xd, client=client)
            validate_fft(F, x, "fwd")
        ranks = [t for t in ts.data if "spmd" in str(t["key"])]
        assert ranks and not any(s["action"] == "transfer" for t in ranks for s in t["startstops"]), ranks
        held = client.sync(client.scheduler.who_has, keys=keys)
        assert sorted(w_ for k in keys for w_ in held[k]) == w, held            # one slab on each worker
        client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.extensions["amm"].run_once())
