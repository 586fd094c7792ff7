"""Timing harness: measure callables, run peers on the same input in the same
process, report ratios as tidy rows; plus the machine probes (STREAM triad,
scheduler round trip, comms latency/bandwidth) every figure is read against.

Examples
--------
>>> import numpy as np
>>> t = measure(lambda: np.ones(1000).sum(), repeat=3)
>>> t.median > 0
True
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ._progress import progress
from .backend import empty, synchronize

__all__ = [
    "Timing",
    "StaleDaskResult",
    "measure",
    "measure_vs_stream",
    "compare",
    "peer_memory_limit",
    "memory_guard",
    "skipped_row",
    "ratio_table",
    "stream_triad",
    "scheduler_roundtrip",
    "comms_pingpong",
    "progress",
]


@dataclass
class Timing:
    """Wall-clock seconds of repeated runs of one callable (what :func:`measure` returns).

    Examples
    --------
    >>> t = measure(lambda: sum(range(1000)), name="sum", repeat=5)
    >>> len(t.times), t.median > 0
    (5, True)
    """

    name: str
    times: list[float]
    value: Any = field(default=None, repr=False)
    #: :func:`measure_vs_stream` only: bytes one call moves, and the STREAM triad run just before each timed call
    nbytes: float | None = None
    stream_gbps: list[float] = field(default_factory=list)

    @property
    def stream_fractions(self) -> list[float]:
        """Each timed call's bandwidth (``nbytes / t``) over the STREAM figure measured just before it (empty
        for a timing without STREAM pairs)."""
        if not self.stream_gbps:
            return []
        return [self.nbytes / t / 1e9 / s for t, s in zip(self.times, self.stream_gbps, strict=True)]

    @property
    def min(self) -> float:
        return min(self.times)

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def max(self) -> float:
        return max(self.times)

    def row(self, **extra: Any) -> dict:
        """A tidy row: name, repeats, min/median/max seconds and ``extra``; a :func:`measure_vs_stream` timing
        adds ``bandwidth_gbps`` (at the median time), ``stream_fraction`` (the median of the paired
        fractions) with its min and max, and ``stream_gbps`` (the median paired STREAM figure)."""
        row = {"name": self.name, "repeats": len(self.times), "min_s": self.min, "median_s": self.median,
               "max_s": self.max}
        if self.stream_gbps:
            fr = self.stream_fractions
            row.update(bandwidth_gbps=self.nbytes / self.median / 1e9, stream_fraction=statistics.median(fr),
                       stream_fraction_min=min(fr), stream_fraction_max=max(fr),
                       stream_gbps=statistics.median(self.stream_gbps))
        return {**row, **extra}


def _block(value: Any) -> None:
    # Dask collections and futures: wait for them; device arrays: synchronise.  Without distributed imported
    # there are no futures to wait for: importing it here charged ~0.2 s to a first timed call (warmup=0)
    distributed = sys.modules.get("distributed")
    if distributed is not None:
        if isinstance(value, distributed.Future):
            distributed.wait(value)
            return
        if isinstance(value, list | tuple) and value and isinstance(value[0], distributed.Future):
            distributed.wait(list(value))
            return
        if hasattr(value, "dask") and hasattr(value, "persist"):
            distributed.wait(value)
            return
    synchronize(value) if value is not None else synchronize()


class StaleDaskResult(RuntimeError):
    """A timed call returned Dask keys an earlier call had already produced: it ran no task."""


def _dask_keys(value: Any) -> set | None:
    """The Dask keys a result names (futures, lists of futures, collections, containers
    of futures such as RowBlocks), or None for a result that is not Dask's."""
    try:
        from dask import is_dask_collection
        from dask.core import flatten
        from distributed import Future
    except ImportError:  # pragma: no cover
        return None
    if isinstance(value, Future):
        return {value.key}
    if isinstance(value, list | tuple) and value and all(isinstance(v, Future) for v in value):
        return {v.key for v in value}
    if is_dask_collection(value):
        return set(flatten(value.__dask_keys__()))
    parts = getattr(value, "parts", None)
    if isinstance(parts, list | tuple) and parts and all(isinstance(v, Future) for v in parts):
        return {v.key for v in parts}
    return None


def _check_positive(**values: Any) -> None:
    """Counts and sizes (repeats, elements, bytes): ints >= 1, named in the error."""
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")


def measure(fn: Callable[[], Any], *, name: str | None = None, warmup: int = 1, repeat: int = 3,
            setup: Callable[[], Any] | None = None, keep_value: bool = False, on_stale: str = "raise") -> Timing:
    """Time ``fn()`` ``repeat`` times after ``warmup`` untimed runs.

    GPU work is synchronised and Dask futures/persisted collections are
    waited for before the clock stops.  ``setup`` (untimed) runs before each call.
    Every call, warm-up or timed, runs while the previous call's result is
    still alive (as in ``x = solve(...)`` in a loop), so after two warm-ups
    the buffers that repeated calls cycle through exist already.

    A Dask call that builds the same graph every time gets the same keys,
    and while an earlier result holds them Dask hands it back without
    running a task: a timed call whose result names keys an earlier call
    produced is refused (``on_stale="raise"``: :class:`StaleDaskResult`),
    or reported (``"warn"``) or let through (``"ignore"``).  Give each call
    fresh keys, e.g. ``dask.graph_manipulation.clone(y, omit=x)``.

    Examples
    --------
    >>> t = measure(lambda: sum(range(1000)), repeat=3)
    >>> len(t.times)
    3
    """
    _check_positive(repeat=repeat)
    if not callable(fn):
        raise TypeError(f"fn must be a callable taking no arguments, got {type(fn).__name__}")
    if isinstance(warmup, bool) or not isinstance(warmup, int | np.integer) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0, got {warmup!r}")
    if on_stale not in ("raise", "warn", "ignore"):
        raise ValueError(f"on_stale must be 'raise', 'warn' or 'ignore', got {on_stale!r}")
    label = name or getattr(fn, "__name__", "fn")
    seen: set = set()
    value = None
    for _ in range(warmup):
        if setup:
            setup()
        value = fn()
        _block(value)
        seen |= _dask_keys(value) or set()
    times = []
    for _ in range(repeat):
        if setup:
            setup()
        t0 = time.perf_counter()
        value = fn()
        _block(value)
        times.append(time.perf_counter() - t0)
        keys = _dask_keys(value)
        if keys and on_stale != "ignore" and keys & seen:
            msg = (f"{label}: a timed call returned Dask keys an earlier call produced ({next(iter(keys & seen))!r} "
                   f"...), so Dask ran no task and the time measures nothing; give every call fresh keys "
                   f"(dask.graph_manipulation.clone(result, omit=inputs)) or release the previous result")
            if on_stale == "raise":
                raise StaleDaskResult(msg)
            warnings.warn(msg, RuntimeWarning, stacklevel=2)
        seen |= keys or set()
    return Timing(label, times, value if keep_value else None)


def measure_vs_stream(fn: Callable[[], Any], nbytes: float, client: Any = None, *, name: str | None = None,
                      warmup: int = 2, repeat: int = 3, stream_n: int = 1 << 25, stream_repeat: int = 3,
                      keep_value: bool = False, on_stale: str = "raise") -> Timing:
    """:func:`measure`, with every timed call paired with a :func:`stream_triad` run just before it.

    A fraction of STREAM divides a kernel's bandwidth (``nbytes`` per call over its time) by the workers'
    aggregate triad bandwidth.  On a shared host that moves by up to 1.5x within minutes, so a figure taken
    once at the start of a run can be far from the bus the kernel saw; each pair here runs within a second.
    The result's :attr:`Timing.stream_fractions` holds the paired fractions, and :meth:`Timing.row`
    reports their median, as DESIGN rule 8 asks (same run, all workers at once, median iteration).
    Warm-up calls run without a STREAM pair.

    Examples
    --------
    >>> t = wb.bench.measure_vs_stream(lambda: wb.tridiag_solve(*system), 5 * ndof * 8)  # doctest: +SKIP
    >>> t.row()["stream_fraction"]                                                     # doctest: +SKIP
    0.52
    """
    _check_positive(repeat=repeat, stream_n=stream_n, stream_repeat=stream_repeat)
    if isinstance(nbytes, bool) or not isinstance(nbytes, int | float | np.integer | np.floating) or not nbytes > 0:
        raise ValueError(f"nbytes must be a positive number of bytes, got {nbytes!r}")
    streams: list[float] = []
    calls = [0]

    def pair() -> None:
        calls[0] += 1
        if calls[0] > warmup:
            streams.append(stream_triad(client, n=stream_n, repeat=stream_repeat)["aggregate_gbps"])

    t = measure(fn, name=name, warmup=warmup, repeat=repeat, setup=pair, keep_value=keep_value, on_stale=on_stale)
    t.nbytes, t.stream_gbps = float(nbytes), streams
    return t


# --------------------------------------------------------------------------
# Peer memory guard
# --------------------------------------------------------------------------

#: Environment variable that caps the memory a single-node peer may need (GiB).
ENV_PEER_MEMORY = "WORKBENCH_PEER_MEMORY_GB"


def peer_memory_limit() -> int:
    """Bytes a single-node peer may use: ``$WORKBENCH_PEER_MEMORY_GB`` when set (the
    experiment runner sets it from an experiment's ``max_memory_gb``), and never
    more than half the memory available now."""
    import psutil

    limit = psutil.virtual_memory().available // 2
    env = os.environ.get(ENV_PEER_MEMORY)
    if env:
        try:
            gb = float(env)
        except ValueError:
            gb = math.nan
        if not math.isfinite(gb) or gb <= 0:
            raise ValueError(f"${ENV_PEER_MEMORY} must be a positive number of GiB, got {env!r}")
        limit = min(limit, int(gb * 2**30))
    return int(limit)


def memory_guard(name: str, need_bytes: float, *, limit_bytes: float | None = None) -> str | None:
    """``None`` when a peer needing ``need_bytes`` fits, else the reason it is skipped.

    Estimate a peer's memory from its input size before calling it (a timeout
    does not protect memory: an O(n²) peer can exhaust it within one call).

    Examples
    --------
    >>> memory_guard("dense", 8 * 100_000**2, limit_bytes=2**34)
    'skipped: would need 74.5 GiB (limit 16.0 GiB)'
    >>> memory_guard("small", 1e6, limit_bytes=2**34) is None
    True
    """
    limit = peer_memory_limit() if limit_bytes is None else float(limit_bytes)
    if need_bytes <= limit:
        return None
    return f"skipped: would need {need_bytes / 2**30:.1f} GiB (limit {limit / 2**30:.1f} GiB)"


def skipped_row(name: str, need_bytes: float, reason: str | None = None, **labels: Any) -> dict:
    """The tidy row of a peer that was not run (NaN times, ``skipped`` says why).

    Examples
    --------
    >>> skipped_row("astropy", 2**36, n=10)["need_gib"]
    64.0
    """
    reason = reason or f"skipped: would need {need_bytes / 2**30:.1f} GiB"
    return {"name": name, "repeats": 0, "min_s": math.nan, "median_s": math.nan, "max_s": math.nan,
            "role": "peer", "speedup": math.nan, "skipped": reason, "need_gib": need_bytes / 2**30, **labels}


#: The fields compare and skipped_row fill in themselves (a label may not reuse them).
_ROW_FIELDS = frozenset({"name", "repeats", "min_s", "median_s", "max_s", "role", "speedup", "skipped", "need_gib"})


def compare(ours: tuple[str, Callable[[], Any]], peers: Sequence[tuple], *, warmup: int = 1, repeat: int = 3,
            memory_limit_bytes: float | None = None, on_stale: str = "raise", stream_bytes: float | None = None,
            client: Any = None, stream_n: int = 1 << 25, **labels: Any) -> list[dict]:
    """Time ``ours`` and each peer on the same input in this process.

    Returns tidy rows with ``speedup`` = peer median / ours median for each peer
    (>1 means ours is faster) and any ``labels`` (kernel, size, workers ...).
    A peer given as ``(name, fn, need_bytes)`` runs only when its estimated
    memory fits :func:`peer_memory_limit` (or ``memory_limit_bytes``);
    otherwise its row says ``skipped: would need X GiB`` and has no times.
    With ``stream_bytes`` (the bytes one call of ours moves), ours is timed by
    :func:`measure_vs_stream` on ``client``'s workers: each timed call paired with
    a STREAM run of ``stream_n`` elements, and its row carries the paired
    ``stream_fraction`` (median, min, max) and ``stream_gbps``.

    Examples
    --------
    >>> rows = compare(("ours", lambda: 1), [("peer", lambda: 2), ("huge", lambda: 3, 2**50)], repeat=1)
    >>> [r["name"] for r in rows], rows[2]["skipped"].startswith("skipped: would need")
    (['ours', 'peer', 'huge'], True)
    """
    taken = sorted(_ROW_FIELDS.intersection(labels))
    if taken:
        raise ValueError(f"labels {taken} are compare's own row fields; name them otherwise")

    def entry(r: Any) -> bool:
        return isinstance(r, tuple | list) and len(r) in (2, 3) and isinstance(r[0], str) and callable(r[1])

    if not entry(ours):
        raise TypeError(f"ours must be a (name, fn) pair, got {type(ours).__name__}")
    if not isinstance(peers, list | tuple) or not all(entry(p) for p in peers):
        raise TypeError(f"peers must be a list of (name, fn) or (name, fn, bytes_needed) tuples, got {peers!r:.80}")
    if stream_bytes is None:
        t_ours = measure(ours[1], name=ours[0], warmup=warmup, repeat=repeat, on_stale=on_stale)
    else:
        t_ours = measure_vs_stream(ours[1], stream_bytes, client, name=ours[0], warmup=warmup, repeat=repeat,
                                   stream_n=stream_n, on_stale=on_stale)
    rows = [t_ours.row(role="ours", speedup=1.0, **labels)]
    for peer in peers:
        pname, pfn, need = (*peer, None) if len(peer) == 2 else peer
        if need is not None:
            why = memory_guard(pname, need, limit_bytes=memory_limit_bytes)
            if why:
                rows.append(skipped_row(pname, need, why, **labels))
                continue
        t = measure(pfn, name=pname, warmup=warmup, repeat=repeat, on_stale=on_stale)
        rows.append(t.row(role="peer", speedup=t.median / t_ours.median, **labels))
    return rows


def ratio_table(rows: Sequence[dict]) -> Any:
    """Rows as a pandas DataFrame (the tidy metrics table notebooks save).

    Examples
    --------
    >>> t = measure(lambda: sum(range(1000)), name="sum", repeat=5)
    >>> ratio_table([t.row(role="ours")]).columns.tolist()[:6]
    ['name', 'repeats', 'min_s', 'median_s', 'max_s', 'role']
    """
    import pandas as pd

    return pd.DataFrame(list(rows))


# --------------------------------------------------------------------------
# Machine probes
# --------------------------------------------------------------------------


def _triad_kernel() -> Callable | None:
    """STREAM's triad as one fused loop (numba), or None without numba."""
    try:
        import numba
    except ImportError:
        return None

    @numba.njit(nogil=True, cache=False)
    def triad(a, b, c, s):  # pragma: no cover - compiled
        for i in range(a.size):
            a[i] = b[i] + s * c[i]

    return triad


def _triad_rank(comm: Any, _: Any, n: int, repeat: int) -> dict:
    # pooled buffers (backend.empty): a run right before a kernel call must not leave it fresh pages to fault
    # in or freed memory for the host to take back (free page reporting) while the kernel runs
    a, b, c = empty(n), empty(n), empty(n)
    a[:] = 0.0
    np.random.default_rng(comm.rank).random(n, out=b)
    np.random.default_rng(comm.rank + 1).random(n, out=c)
    s = 3.0
    triad = _triad_kernel()
    fused = triad is not None
    if not fused:  # numpy's two passes move 5 arrays' worth: a lower bound on STREAM
        def triad(a, b, c, s):
            np.multiply(c, s, out=a)
            np.add(a, b, out=a)
    triad(a, b, c, s)  # compile and touch every page before timing
    own, group = [], []
    for _ in range(repeat):
        comm.barrier()  # all workers stream at once: aggregate, not one at a time
        t0 = time.perf_counter()
        triad(a, b, c, s)
        t = time.perf_counter() - t0
        own.append(t)
        # as STREAM times its parallel loop: an iteration lasts until its slowest worker is done
        group.append(comm.allreduce(t, op="max"))
    # STREAM's accounting: 24 B per element (read b, read c, write a)
    return {"rank": comm.rank, "gbps": 3 * 8 * n / statistics.median(own) / 1e9, "iteration_s": group,
            "bytes": 3 * 8 * n, "fused": fused}


def stream_triad(client: Any = None, *, n: int = 1 << 25, repeat: int = 5) -> dict:
    """STREAM triad ``a = b + s*c`` run on every worker at once (DESIGN rule 8).

    Returns ``{"per_worker_gbps": [...], "aggregate_gbps": float,
    "iteration_gbps": [...], "workers": [...]}`` in STREAM's accounting (24
    bytes per element).  Arrays of ``n`` float64 (default 2^25, 256 MiB each)
    defeat the caches.  Each of the ``repeat`` iterations runs on all workers
    at once and lasts until its slowest worker is done; ``aggregate_gbps`` is
    all workers' bytes over the median iteration, ``iteration_gbps`` the same
    for each iteration.  ``per_worker_gbps`` is each worker's bytes over its
    own median time; their sum overstates a shared memory bus (5-17% above
    the aggregate here: a worker's own time often ends while the other still
    streams, leaving it the bus), so bandwidth fractions divide by the
    aggregate, whose iterations last as long as a kernel's group does.

    The triad is one fused loop (numba), as STREAM's C kernel; without numba
    it falls back to numpy's two passes, a lower bound on STREAM.

    Examples
    --------
    >>> s = wb.bench.stream_triad(client)          # doctest: +SKIP
    >>> frac = 5 * ndof * 8 / seconds / 1e9 / s["aggregate_gbps"]  # doctest: +SKIP
    """
    from . import comms
    from .cluster import default_client, worker_addresses

    _check_positive(repeat=repeat, n=n)
    client = default_client(client)
    addrs = worker_addresses(client)
    res = comms.spmd(_triad_rank, [None] * len(addrs), n, repeat, client=client)
    res = sorted(res, key=lambda r: r["rank"])
    total = sum(r["bytes"] for r in res)
    group = res[0]["iteration_s"]  # the allreduce gave every rank the same iteration times
    return {"per_worker_gbps": [r["gbps"] for r in res], "aggregate_gbps": total / statistics.median(group) / 1e9,
            "iteration_gbps": [total / t / 1e9 for t in group], "workers": addrs}


def scheduler_roundtrip(client: Any = None, *, repeat: int = 50) -> dict:
    """Seconds for one tiny task submitted, run and gathered through the scheduler (its message streams set
    up as for the kernels: :func:`workbench.comms.ensure_registered`): ``median_s``, ``min_s`` and ``times``.

    Examples
    --------
    >>> r = scheduler_roundtrip(client, repeat=10)                 # doctest: +SKIP
    >>> sorted(r), r["median_s"] > 0                               # doctest: +SKIP
    (['median_s', 'min_s', 'times'], True)
    """
    from . import comms
    from .cluster import default_client

    _check_positive(repeat=repeat)
    client = default_client(client)
    comms.ensure_registered(client)
    client.submit(int, 0, pure=False).result()
    times = []
    for i in range(repeat):
        t0 = time.perf_counter()
        client.submit(int, i, pure=False).result()
        times.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(times), "min_s": min(times), "times": times}


def _pingpong_rank(comm: Any, _: Any, sizes: Sequence[int], repeat: int) -> list[dict]:
    rows = []
    if comm.size < 2:
        return rows
    peer = 1 - comm.rank if comm.rank < 2 else None
    for nb in sizes:
        buf = np.ones(max(1, nb // 8))
        comm.barrier()
        if peer is None:
            continue
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            if comm.rank == 0:
                comm.send(peer, buf, tag=("pp", nb))
                comm.recv(peer, tag=("pp", nb))
            else:
                comm.recv(peer, tag=("pp", nb))
                comm.send(peer, buf, tag=("pp", nb))
            times.append(time.perf_counter() - t0)
        if comm.rank == 0:
            one_way = statistics.median(times) / 2
            rows.append({"bytes": int(buf.nbytes), "one_way_s": one_way, "gbps": buf.nbytes / one_way / 1e9})
    return rows


def comms_pingpong(client: Any = None, *, sizes: Sequence[int] = (8, 1 << 10, 1 << 14, 1 << 18, 1 << 22, 1 << 24),
                   repeat: int = 10) -> list[dict]:
    """Worker-to-worker ping-pong over :mod:`workbench.comms` between the first two workers.

    Returns rows ``bytes``, ``one_way_s`` (median half round trip), ``gbps``.

    Examples
    --------
    >>> rows = comms_pingpong(client, sizes=(8, 1 << 20))          # doctest: +SKIP
    >>> [r["bytes"] for r in rows]                                 # doctest: +SKIP
    [8, 1048576]
    """
    from . import comms
    from .cluster import default_client, worker_addresses

    _check_positive(repeat=repeat)
    if isinstance(sizes, int | np.integer) or not all(isinstance(b, int | np.integer) and not isinstance(b, bool)
                                                      and b >= 8 for b in sizes):
        raise ValueError(f"sizes must be a sequence of ints >= 8 (bytes: whole float64s), got {sizes!r}")
    client = default_client(client)
    addrs = worker_addresses(client)
    if len(addrs) < 2:
        return []
    res = comms.spmd(_pingpong_rank, [None] * len(addrs), list(sizes), repeat, client=client)
    return res[0]


def as_dict(t: Timing) -> dict:
    return asdict(t)


# --------------------------------------------------------------------------
# Benchmark scripts
# --------------------------------------------------------------------------

_SHOW = ("name", "median_s", "speedup", "target", "meets_target")


def show_rows(rows: Sequence[dict], columns: Sequence[str] = _SHOW) -> str:
    """The columns of ``rows`` worth reading at a glance, as a text table."""
    df = ratio_table(rows)
    cols = [c for c in columns if c in df] or list(df.columns)
    return df[cols].to_string(index=False)


def script_main(run: Callable[..., list[dict]], argv: Sequence[str] | None = None,
                columns: Sequence[str] = _SHOW) -> list[dict]:
    """The ``__main__`` of a ``benchmarks/bench_<kernel>.py`` script.

    ``python benchmarks/bench_fft.py [PROFILE] [--workers N] [--backend B]``
    starts a local cluster, calls ``run(client, profile=PROFILE)`` and prints
    its rows.  ``python -m workbench bench`` runs the same ``run`` functions.

    Examples
    --------
    >>> if __name__ == "__main__":                      # doctest: +SKIP
    ...     wb.bench.script_main(run)
    """
    import argparse

    from .cluster import cluster

    p = argparse.ArgumentParser(description=(run.__module__ or "benchmark"))
    p.add_argument("profile", nargs="?", default="laptop", choices=["ci", "laptop", "large", "gpu"])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--backend", default="cpu", choices=["cpu", "gpu", "gpu-sim", "auto"])
    args = p.parse_args(argv)
    with cluster(args.backend, n_workers=args.workers, quiet=True) as client:
        rows = run(client, profile=args.profile)
    print(show_rows(rows, columns))
    return rows
