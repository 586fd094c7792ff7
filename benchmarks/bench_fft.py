"""FFT benchmark: wb.fftn (AccFFT slab) vs dask.array.fft, scipy.fft and pyFFTW.

Headline (issues #9, #17): a 512^3 complex128 host array (2 GiB) distributed
once with ``wb.distribute(x)`` (default arguments: slabs along axis 0, one per
worker) on 2 workers, then ``wb.fftn`` on it, result left distributed, must run
at least 3x faster than ``dask.array.fft.fftn`` on the same distributed data
including the rechunk it needs, and at least 0.5x as fast as
``scipy.fft.fftn(workers=2)`` on the host array.  An extra row, labelled as
such, times the array generated on the workers by ``distributed_random``.  Planned pyFFTW on 2
threads is shown beside it (the single-node number to chase), and the
FFT/transpose split of our run shows the gap to the communication floor.

The FFT/transpose split is the slowest rank's time in local FFTs and outside
them (``transpose_seconds`` = packing + placing + waiting on peers), beside
``comms_floor_seconds``: the bytes the busiest rank sends at the bandwidth
``workbench.comms`` measures between the two workers (ping-pong, one message of
one transpose piece) -- what the transposes would cost if nothing overlapped.

Run alone::

    python benchmarks/bench_fft.py [ci|medium|laptop]
"""

from __future__ import annotations

import gc
from typing import Any

import numpy as np

import workbench as wb
from workbench.kernels.fft import distributed_random

PROFILES = {
    "ci": {"n": 32, "repeat": 2, "dask_repeat": 1, "pyfftw_timelimit": 2.0},
    "medium": {"n": 256, "repeat": 2, "dask_repeat": 1, "pyfftw_timelimit": 10.0},
    "laptop": {"n": 512, "repeat": 3, "dask_repeat": 1, "pyfftw_timelimit": 30.0},
}
DASK_TARGET = 3.0
SCIPY_TARGET = 0.5


def run(client: Any, profile: str = "laptop") -> list[dict]:
    """Measure ours and the peers on the same array; tidy rows with ``speedup`` = peer / ours."""
    import dask.array as da
    import scipy.fft as sf
    from distributed import wait

    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {sorted(PROFILES)}, got {profile!r}")
    p = PROFILES[profile]
    n = p["n"]
    n_workers = len(client.nthreads())
    labels = {"kernel": "fft", "shape": f"{n}^3", "dtype": "complex128", "n_workers": n_workers,
              "profile": profile}
    rng = np.random.default_rng(0)
    host = np.empty((n, n, n), dtype=np.complex128)     # the user's host array, filled a slab at a time
    for i in range(0, n, max(1, n // 8)):
        sl = host[i:i + max(1, n // 8)]
        sl.real, sl.imag = rng.standard_normal(sl.shape), rng.standard_normal(sl.shape)
    xd = wb.distribute(host, client=client)            # the README's path: distributed once, reused by every call
    x = xd.to_dask_array()                             # the same blocks as a dask array, for the dask peers

    def persisted(arr: Any) -> Any:
        arr = client.persist(arr)
        wait(arr)
        return arr

    stats: dict = {}

    def ours() -> Any:
        F = wb.fftn(xd, client=client)
        stats.update(F.stats)
        return F

    def ours_other_overlap() -> Any:  # the non-default schedule, for comparison
        return wb.fftn(xd, overlap=not ours_stats["overlap"], client=client)

    t_ours = wb.bench.measure(ours, name="wb.fftn slab", warmup=1, repeat=p["repeat"])
    ours_stats = dict(stats)
    t_noov = wb.bench.measure(ours_other_overlap, name=f"wb.fftn slab (overlap={not ours_stats['overlap']})",
                              warmup=1, repeat=p["repeat"])
    rows = [t_ours.row(role="ours", speedup=1.0, path="README: wb.distribute(x)", **labels),
            t_noov.row(role="ours-variant", speedup=t_noov.median / t_ours.median, **labels)]
    # the communication floor: the most any rank sends, at the bandwidth workbench.comms reaches between these
    # two workers for a message of one transpose piece (ping-pong: one direction at a time)
    per_rank = ours_stats["per_rank"]
    most_sent = max(r["bytes_sent"] for r in per_rank)
    piece = int(min(max(most_sent // 16, 1 << 20), 64 << 20))
    pp = wb.bench.comms_pingpong(client, sizes=(piece,), repeat=3) if n_workers > 1 else []
    gbps = pp[0]["gbps"] if pp else float("nan")
    rows[0].update(fft_seconds=ours_stats["fft_seconds"], transpose_seconds=ours_stats["transpose_seconds"],
                   pack_seconds=ours_stats["pack_seconds"], place_seconds=ours_stats["place_seconds"],
                   wait_seconds=ours_stats["wait_seconds"], bytes_moved=ours_stats["bytes_moved"],
                   bytes_pulled=ours_stats["bytes_pulled"], comms_gbps=gbps,
                   comms_floor_seconds=most_sent / (gbps * 1e9) if pp else 0.0,
                   input_redistributed=ours_stats["input_redistributed"],
                   gflops=5 * n ** 3 * np.log2(n ** 3) / t_ours.median / 1e9)

    # dask.array.fft needs one chunk along every transformed axis: the whole cube in one chunk (same distributed data)
    t_dask = wb.bench.measure(lambda: persisted(da.fft.fftn(x.rechunk((n, n, n)))),
                              name="dask.array.fft.fftn (+rechunk)", warmup=0, repeat=p["dask_repeat"])
    rows.append(t_dask.row(role="peer", speedup=t_dask.median / t_ours.median, target=DASK_TARGET,
                           target_metric="speedup vs dask.array.fft.fftn",
                           meets_target=bool(t_dask.median / t_ours.median >= DASK_TARGET), **labels))
    gc.collect()
    # what a careful dask user writes: 2-D FFTs on slabs, rechunk to the other axis, 1-D FFTs
    t_dask2 = wb.bench.measure(
        lambda: persisted(da.fft.fft(da.fft.fft2(x, axes=(1, 2)).rechunk({0: n, 1: x.chunks[0]}), axis=0)),
        name="dask.array.fft axis-by-axis (+rechunk)", warmup=0, repeat=p["dask_repeat"])
    rows.append(t_dask2.row(role="peer", speedup=t_dask2.median / t_ours.median, **labels))
    gc.collect()

    # extra row, not the headline: the array generated on the workers (an internal constructor)
    x = xd = None
    gc.collect()
    xw = distributed_random((n, n, n), client, seed=0)
    t_w = wb.bench.measure(lambda: wb.fftn(xw, client=client), name="wb.fftn slab (distributed_random, extra)",
                           warmup=1, repeat=p["repeat"])
    rows.append(t_w.row(role="ours-variant", speedup=t_ours.median / t_w.median, path="internal constructor",
                        **labels))
    xw = None
    gc.collect()
    t_scipy = wb.bench.measure(lambda: sf.fftn(host, workers=2), name="scipy.fft.fftn (workers=2)",
                               warmup=1, repeat=p["repeat"])
    rows.append(t_scipy.row(role="peer", speedup=t_scipy.median / t_ours.median, target=SCIPY_TARGET,
                            target_metric="speedup vs scipy.fft.fftn(workers=2)",
                            meets_target=bool(t_scipy.median / t_ours.median >= SCIPY_TARGET), **labels))
    gc.collect()
    try:
        import pyfftw

        buf = pyfftw.empty_aligned(host.shape, dtype=np.complex128)
        plan = pyfftw.FFTW(buf, buf, axes=(0, 1, 2), flags=("FFTW_MEASURE",), threads=2,
                           planning_timelimit=p["pyfftw_timelimit"])
        buf[...] = host
        host = None
        t_fftw = wb.bench.measure(plan.execute, name="pyFFTW planned in-place (2 threads)", warmup=1,
                                  repeat=p["repeat"])
        rows.append(t_fftw.row(role="peer", speedup=t_fftw.median / t_ours.median, **labels))
        del plan, buf
    except ImportError:  # pragma: no cover - optional peer
        pass
    x = host = None
    gc.collect()
    return rows


if __name__ == "__main__":
    wb.bench.script_main(run)
