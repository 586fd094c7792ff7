"""Start a local Dask cluster (CPU or GPU) or connect to an existing one.

Examples
--------
>>> import workbench as wb
>>> with wb.cluster(backend="cpu", n_workers=2) as client:   # doctest: +SKIP
...     print(client.dashboard_link)
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from . import backend as _backend

__all__ = ["cluster", "backend_of", "default_client", "worker_addresses"]

_BACKENDS = ("cpu", "gpu", "auto")


def _validate(backend: str, n_workers: int | None, threads_per_worker: int, address, scheduler_file):
    if backend not in _BACKENDS:
        raise ValueError(f"backend must be one of {_BACKENDS}, got {backend!r}")
    if n_workers is not None and (not isinstance(n_workers, int) or n_workers < 1):
        raise ValueError(f"n_workers must be a positive int or None, got {n_workers!r}")
    if not isinstance(threads_per_worker, int) or threads_per_worker < 1:
        raise ValueError(f"threads_per_worker must be a positive int, got {threads_per_worker!r}")
    if address is not None and scheduler_file is not None:
        raise ValueError("pass at most one of address= and scheduler_file=")


@contextlib.contextmanager
def cluster(
    backend: str = "cpu",
    n_workers: int | None = None,
    threads_per_worker: int = 1,
    address: str | None = None,
    scheduler_file: str | None = None,
    *,
    quiet: bool = False,
    **kwargs: Any,
) -> Iterator[Any]:
    """Context manager yielding a ``distributed.Client``.

    Parameters
    ----------
    backend : {"cpu", "gpu", "auto"}
        ``"cpu"`` starts a ``distributed.LocalCluster``; ``"gpu"`` a
        ``dask_cuda.LocalCUDACluster`` (one worker per GPU); ``"auto"`` picks
        the GPU when cupy sees a device, else the CPU.
    n_workers : int, optional
        Number of workers. Default: CPU cores / threads_per_worker (CPU), every
        visible GPU (GPU).
    threads_per_worker : int
        Threads per CPU worker. One thread per worker is the SPMD default.
    address, scheduler_file : str, optional
        Connect to an existing scheduler (dask-mpi, dask-jobqueue,
        ``dask-cuda-worker`` ...) instead of starting one.  Nothing is shut
        down on exit but the client.
    quiet : bool
        Do not print the dashboard link.
    **kwargs
        Passed to the cluster class (e.g. ``protocol="ucx"``,
        ``rmm_pool_size="20GB"``, ``memory_limit``).

    Yields
    ------
    distributed.Client
        Also the current default client inside the block.

    Examples
    --------
    >>> with cluster("cpu", n_workers=2, quiet=True) as client:   # doctest: +SKIP
    ...     len(worker_addresses(client))
    2
    """
    _validate(backend, n_workers, threads_per_worker, address, scheduler_file)
    from distributed import Client

    if address is not None or scheduler_file is not None:
        client = Client(address=address, scheduler_file=scheduler_file, **kwargs)
        try:
            if not quiet:
                print(f"workbench: connected to {client.scheduler.address}; dashboard {client.dashboard_link}",
                      file=sys.stderr)
            with _hooked(client):
                yield client
        finally:
            client.close()
        return

    if backend == "auto":
        backend = "gpu" if _backend.gpu_available()[0] else "cpu"

    if backend == "gpu":
        _backend.require_gpu(need_dask_cuda=True)
        from dask_cuda import LocalCUDACluster

        if n_workers is not None:
            kwargs.setdefault("n_workers", n_workers)
        lc = LocalCUDACluster(threads_per_worker=threads_per_worker, **kwargs)
    else:
        from distributed import LocalCluster

        if n_workers is None:
            n_workers = max(1, (os.cpu_count() or 1) // threads_per_worker)
        kwargs.setdefault("processes", True)
        kwargs.setdefault("dashboard_address", ":0")
        kwargs.setdefault("silence_logs", logging.ERROR)
        lc = LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker, **kwargs)

    client = Client(lc)
    try:
        client.wait_for_workers(len(lc.workers) if hasattr(lc, "workers") else 1, timeout=120)
        if not quiet:
            print(f"workbench: {backend} cluster with {len(worker_addresses(client))} workers; "
                  f"dashboard {client.dashboard_link}", file=sys.stderr)
        with _hooked(client):
            yield client
    finally:
        client.close()
        lc.close()


#: Context-manager factories entered around every client :func:`cluster` yields
#: (``hook(client)``); the experiment runner registers one that records the
#: cluster in the run's provenance, so this module knows nothing of experiments.
client_hooks: list[Callable[[Any], contextlib.AbstractContextManager]] = []


@contextlib.contextmanager
def _hooked(client: Any) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for hook in list(client_hooks):
            stack.enter_context(hook(client))
        yield


def default_client(client: Any = None) -> Any:
    """``client`` or the current default ``distributed.Client`` (``client=None``)."""
    if client is not None:
        return client
    from distributed import get_client

    try:
        return get_client()
    except ValueError as e:
        raise ValueError(
            "no Dask client: pass client= or start one, e.g. `with wb.cluster() as client:`"
        ) from e


def scheduler_identity(client: Any) -> dict:
    """A fresh ``identity`` of the scheduler, with every worker.

    ``Client.scheduler_info()`` returns a cache that the client's periodic
    refresh (which asks for no workers) can overwrite between the fetch and the
    return, so under load it may list no workers at all; ask directly instead.
    """
    return client.sync(client.scheduler.identity, n_workers=-1)


def worker_addresses(client: Any) -> list[str]:
    """Addresses of the client's workers in a stable (sorted) order."""
    return sorted(scheduler_identity(client)["workers"])


def backend_of(client: Any) -> str:
    """``"gpu"`` when the cluster's workers hold GPUs (dask-cuda), else ``"cpu"``.

    Asked once per client (a scheduler round trip, ~5 ms here, on every kernel
    call otherwise): a cluster's kind does not change while it has workers.
    """
    known = getattr(client, "_workbench_backend", None)
    if known is not None:
        return known
    info = scheduler_identity(client)["workers"]
    kind = "gpu" if any(w.get("gpu") or "gpu" in w.get("resources", {}) for w in info.values()) else "cpu"
    if info:
        client._workbench_backend = kind
    return kind
