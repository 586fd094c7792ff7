"""What the device peers share: whether a CUDA device and a library are there,
the device's name and free memory, timing on the device, and the row of a peer
that could not run (``skipped`` says why, the times are NaN).

A device peer runs in the client process on the device the notebook's
``LocalCUDACluster`` also uses (one GPU: the same device).  Its input is copied
to the device untimed, as a CPU peer's input is built untimed; every timed call
ends with a device synchronisation, and the device memory the peer used goes
back to the driver afterwards so that the workers' next call finds it free.

Examples
--------
>>> row = unavailable_row("cupy.fft.fftn (1 GPU)", "no CUDA device", n=64)
>>> row["skipped"], row["n"]
('unavailable: no CUDA device', 64)
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable
from typing import Any

from ..backend import gpu_available

__all__ = ["missing", "unavailable_row", "device_name", "free_device_bytes", "memory_short", "sync",
           "release", "timed_row"]

#: pip names of the device libraries the peers use, for the messages.
_PACKAGES = {"cupy": "cupy-cuda12x", "cugraph": "cugraph-cu12", "cudf": "cudf-cu12", "cuvs": "cuvs-cu12"}


def missing(*modules: str) -> str | None:
    """``None`` when a CUDA device and every module in ``modules`` are there,
    else what is missing (the reason a peer row gives).

    cupy and a device are always required; the modules are looked up without
    importing them (cudf and cugraph initialise CUDA when imported).

    Examples
    --------
    >>> missing("no_such_library_xyz") is not None
    True
    """
    absent = [m for m in modules if importlib.util.find_spec(m) is None]
    if absent:
        names = ", ".join(f"{m} (pip install {_PACKAGES.get(m, m)})" for m in absent)
        return f"not installed: {names}"
    ok, why = gpu_available()
    return None if ok else why


def unavailable_row(name: str, reason: str, **labels: Any) -> dict:
    """The tidy row of a device peer that did not run: NaN times, ``skipped`` = why.

    Same columns as :meth:`workbench.bench.Timing.row` rows with ``role="peer"``,
    so it sits in the same table as the peers that ran.
    """
    if not reason.startswith(("unavailable", "skipped")):
        reason = f"unavailable: {reason}"
    return {"name": name, "repeats": 0, "min_s": math.nan, "median_s": math.nan, "max_s": math.nan,
            "role": "peer", "speedup": math.nan, "skipped": reason, **labels}


def device_name() -> str:
    """The current CUDA device's name, e.g. ``"NVIDIA H200"`` (needs a device)."""
    import cupy as cp

    dev = cp.cuda.Device()
    name = cp.cuda.runtime.getDeviceProperties(dev.id)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def free_device_bytes() -> int:
    """Bytes free on the current device, counting what cupy's pool holds unused."""
    import cupy as cp

    free, _total = cp.cuda.runtime.memGetInfo()
    pool = cp.get_default_memory_pool()
    return int(free + pool.total_bytes() - pool.used_bytes())


def memory_short(need_bytes: float, *, fraction: float = 0.8) -> str | None:
    """``None`` when ``need_bytes`` fits in ``fraction`` of the device's free memory,
    else the reason the peer is skipped (the workers share the device)."""
    free = free_device_bytes() * fraction
    if need_bytes <= free:
        return None
    return f"skipped: would need {need_bytes / 2**30:.1f} GiB of device memory ({free / 2**30:.1f} GiB usable)"


def sync() -> None:
    """Wait for all work on the current device (libraries may use streams of their own)."""
    import cupy as cp

    cp.cuda.Device().synchronize()


def release() -> None:
    """Hand the memory cupy's pools hold unused back to the driver (the workers share the device)."""
    import cupy as cp

    sync()
    cp.get_default_memory_pool().free_all_blocks()
    cp.get_default_pinned_memory_pool().free_all_blocks()


def timed_row(name: str, fn: Callable[[], Any], *, warmup: int = 1, repeat: int = 3, ours_s: float | None = None,
              scale: float = 1.0, keep_value: bool = False, **labels: Any) -> tuple[dict, Any]:
    """Time ``fn`` (which ends with :func:`sync`) like :func:`workbench.bench.measure`.

    Returns the tidy row (``role="peer"``, ``device``, ``speedup`` = this
    peer's median / ``ours_s`` when given, times multiplied by ``scale`` for a
    peer timed on a part of the input) and the last call's value when
    ``keep_value``.
    """
    from ..bench import measure

    def call():
        out = fn()
        sync()  # the clock stops after the device is done, whatever stream the library used
        return out

    t = measure(call, name=name, warmup=warmup, repeat=repeat, keep_value=keep_value)
    med = t.median * scale
    row = t.row(role="peer", device=device_name(), speedup=(med / ours_s) if ours_s else math.nan, **labels)
    row.update(min_s=t.min * scale, median_s=med, max_s=t.max * scale)
    return row, t.value
