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
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from . import backend as _backend

__all__ = ["Cluster", "cluster", "backend_of", "default_client", "worker_addresses", "worker_cores", "client_hooks"]

_BACKENDS = ("cpu", "gpu", "gpu-sim", "auto")
#: glibc's trim threshold as the user's shell set it (None: not set), read before any nanny writes dask's value
#: into this process's environment
_USER_TRIM = os.environ.get("MALLOC_TRIM_THRESHOLD_")
_DASK_TRIM = 65536  # distributed's default for distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_


def _validate(backend: str, n_workers: int | None, threads_per_worker: int, address, scheduler_file, pin=None):
    if pin is not None and not isinstance(pin, bool):
        raise TypeError(f"pin must be True, False or None, got {pin!r}")
    if backend not in _BACKENDS:
        raise ValueError(f"backend must be one of {_BACKENDS}, got {backend!r}")
    if n_workers is not None and (isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 1):
        raise ValueError(f"n_workers must be a positive int or None, got {n_workers!r}")
    if isinstance(threads_per_worker, bool) or not isinstance(threads_per_worker, int) or threads_per_worker < 1:
        raise ValueError(f"threads_per_worker must be a positive int, got {threads_per_worker!r}")
    if backend == "gpu-sim" and threads_per_worker != 1:
        raise ValueError("backend='gpu-sim' needs threads_per_worker=1: numba's CUDA simulator runs one kernel "
                         f"per process at a time, got threads_per_worker={threads_per_worker}")
    if address is not None and scheduler_file is not None:
        raise ValueError("pass at most one of address= and scheduler_file=")
    if scheduler_file is not None and not os.path.isfile(scheduler_file):
        # distributed would wait for it to appear, without a timeout
        raise FileNotFoundError(f"scheduler_file {scheduler_file!r} does not exist (start the scheduler with "
                                "`dask scheduler --scheduler-file ...` first)")


def _check_cluster_options(backend: str, kwargs: dict) -> None:
    """An option no local cluster class or its workers take is a TypeError here: in a worker process it
    would only say "Nanny failed to start"."""
    import inspect

    from distributed import LocalCluster, Nanny, Worker
    from distributed.core import Server

    classes: list = [LocalCluster, Nanny, Worker, Server]
    if backend in ("gpu", "auto"):
        try:
            from dask_cuda import LocalCUDACluster

            classes.append(LocalCUDACluster)
        except Exception:  # noqa: BLE001 - no dask-cuda: the gpu backend says so when it starts
            pass
    known = {name for c in classes for name, p in inspect.signature(c.__init__).parameters.items()
             if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    unknown = sorted(set(kwargs) - known - {"self"})
    if unknown:
        owners = " or ".join(c.__name__ for c in classes if c not in (Nanny, Worker, Server))
        raise TypeError(f"cluster() got unknown option(s) {unknown}: not an option of {owners} or its workers")


def _require_simulator() -> None:
    """Raise naming what is missing for ``backend="gpu-sim"``."""
    try:
        import numba  # noqa: F401
    except ImportError as e:
        raise RuntimeError(f"backend='gpu-sim' needs numba (its CUDA simulator): {e}") from e
    import importlib.util

    if importlib.util.find_spec("numba.cuda") is None:
        raise RuntimeError("backend='gpu-sim' needs numba.cuda (numba's CUDA simulator); this numba has none")


@contextlib.contextmanager
def _worker_environ(kind: str) -> Iterator[None]:
    """Set the variables that fix a worker's path before its process starts, its profiler and its allocator.

    ``distributed.nanny.pre-spawn-environ`` is applied before the worker process
    is spawned (a Nanny's ``env=`` arrives after the child has re-imported
    ``__main__``, too late for numba, which reads ``NUMBA_ENABLE_CUDASIM`` once
    at import).  The nanny applies it to this process's ``os.environ`` too, so
    the client's environment is restored afterwards.  The workers' stack sampler
    runs every 100 ms rather than dask's 10 ms, and glibc's malloc keeps its
    defaults (dask sets ``MALLOC_TRIM_THRESHOLD_``), unless the user chose values.
    """
    import dask

    env = {_backend.ENV_DEVICE: kind, "NUMBA_ENABLE_CUDASIM": "1" if kind == "gpu-sim" else "0"}
    if kind == "gpu" and "NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS" not in os.environ:
        # launch() sizes each grid to its work (a frontier of 30 vertices gets one block); numba warned on
        # every such launch: 163 warnings in one run of tools/gpu_validate.py on the first device run
        env["NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS"] = "0"
    config: dict[str, Any] = {f"distributed.nanny.pre-spawn-environ.{k}": v for k, v in env.items()}
    if dask.config.get("distributed.worker.profile.interval") == "10ms":
        # dask's default samples every worker thread's stack 100 times a second, taking the GIL from a rank
        # thread mid-level: 2-worker BFS at SCALE 20 ran ~15% slower per search (strong-scaling efficiency
        # 0.56 against 0.65 at 100 ms and 0.64 off, same run); the dashboard's Profile page keeps working
        config["distributed.worker.profile.interval"] = "100ms"
    trim = "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_"
    # Setting any of glibc's malloc variables turns off its adaptive mmap threshold: every buffer of 128 KiB
    # or more is then a fresh mmap, faulted in page by page and unmapped on free.  With dask's value the
    # kernels' temporaries paid that on every call (kNN, BFS and coloring ran ~1.3x slower, interleaved A/B),
    # so the workers allocate as the client does, unless the user chose a value (shell or dask config).
    cleared = list(env)
    if _USER_TRIM is None:
        cleared.append("MALLOC_TRIM_THRESHOLD_")  # an earlier nanny's value, not the user's
        if dask.config.get(trim, None) == _DASK_TRIM:
            config[trim] = None
    saved = {k: os.environ.get(k) for k in cleared}
    # a nanny prefers os.environ to its config, and another cluster's nanny restarting a lost worker leaves
    # its own values there (a gpu-sim cluster started after a CPU worker was killed came up on the CPU path)
    for k in cleared:
        os.environ.pop(k, None)
    try:
        with dask.config.set(config):
            yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _cores() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))  # no affinity API (macOS): every core


def _core_sets(n_workers: int, threads_per_worker: int, pin: bool | None) -> list[list[int]] | None:
    """Disjoint shares of this process's cores, one per worker in name order; None: leave them unbound.

    ``pin=None`` binds when there are two workers or more and their threads fit on the cores; ``True`` binds
    whenever they fit (``ValueError`` otherwise).  Shares are contiguous runs of core ids, so on Linux's usual
    numbering a worker's cores are distinct physical cores while there are at least as many as workers.
    """
    if pin is False or not hasattr(os, "sched_getaffinity"):  # nothing to bind with
        return None
    cores = _cores()
    if n_workers * threads_per_worker > len(cores):
        if pin:
            raise ValueError(f"pin=True needs n_workers * threads_per_worker <= the {len(cores)} cores this "
                             f"process may use, got {n_workers} x {threads_per_worker}")
        return None
    if pin is None and n_workers < 2:
        return None
    share, extra = divmod(len(cores), n_workers)
    sets, lo = [], 0
    for i in range(n_workers):
        hi = lo + share + (i < extra)
        sets.append(cores[lo:hi])
        lo = hi
    return sets


def _bind_process(cores: set[int]) -> None:
    """Bind every thread of this process to ``cores``; threads started later inherit it from their creator."""
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(tid), cores)


class _CoreBinding:
    """Worker plugin: each worker (and one the nanny restarts under its name) runs on its own cores."""

    name = "workbench-core-binding"
    idempotent = True

    def __init__(self, core_sets: list[list[int]]) -> None:
        self.core_sets = core_sets

    def setup(self, worker: Any) -> None:
        try:
            slot = int(worker.name) % len(self.core_sets)
        except (TypeError, ValueError):  # a worker not named by LocalCluster: leave it unbound
            return
        _bind_process(set(self.core_sets[slot]))


#: The longest a message waits to be batched with others on the way client -> scheduler -> worker (dask's
#: own: 10 ms from the client, 5 ms from the scheduler; a worker sends within 2 ms).  A kernel call is a few
#: messages each way, and a call that follows another (a benchmark's STREAM run, a time step) waits out the
#: previous call's window at each hop: on 2 workers here, ranks started 10.5-11.8 ms after the call against
#: 16.6 at dask's intervals, and a 2000 x 3001 tridiagonal batch took 36.6 ms a call against 45.0.
_MESSAGE_BATCH_S = 0.002


class _PromptStreams:
    """Scheduler plugin: the scheduler's streams to its workers (and to any that join later) batch messages
    for at most ``_MESSAGE_BATCH_S``."""

    name = "workbench-prompt-streams"
    idempotent = True

    def __init__(self, interval: float) -> None:
        self.interval = interval

    def start(self, scheduler: Any) -> None:
        for worker in list(scheduler.stream_comms):
            self.add_worker(scheduler, worker)

    def add_worker(self, scheduler: Any, worker: str) -> None:
        stream = scheduler.stream_comms.get(worker)
        if stream is not None:
            stream.interval = min(stream.interval, self.interval)


def _prompt_messages(client: Any) -> None:
    """Batch the messages of a cluster :func:`cluster` started for at most ``_MESSAGE_BATCH_S`` (see there)."""
    from distributed.diagnostics.plugin import SchedulerPlugin

    client.scheduler_comm.interval = min(client.scheduler_comm.interval, _MESSAGE_BATCH_S)
    plugin = type("WorkbenchPromptStreams", (_PromptStreams, SchedulerPlugin), {})(_MESSAGE_BATCH_S)
    client.register_plugin(plugin, name=_PromptStreams.name)


def worker_cores(client: Any) -> dict[str, list[int]]:
    """The cores each worker may run on, by address (every core where nothing bound it).

    Examples
    --------
    >>> with cluster("cpu", n_workers=2, quiet=True) as client:   # doctest: +SKIP
    ...     sorted(worker_cores(client).values())
    [[0], [1]]
    """
    return client.run(_cores)


def _worker_kind() -> tuple[str, bool]:
    import sys as _sys

    numba = _sys.modules.get("numba")
    if numba is None:
        import numba
    return _backend.device_kind(), bool(numba.config.ENABLE_CUDASIM)


def _check_not_bootstrapping() -> None:
    """Refuse to start a local cluster from a worker process that is importing the caller's script.

    Workers are spawned: each one imports the script's ``__main__``, so a script that starts a cluster at top
    level, without an ``if __name__ == "__main__":`` guard, would start a cluster in every worker, and
    each of those waits forever for workers of its own.
    """
    import multiprocessing

    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise RuntimeError(
            "workbench.cluster() was called while a worker process was importing your script's main module: "
            "start the cluster under `if __name__ == \"__main__\":` (workers are spawned and import the script)")


def _restore_distributed_defaults() -> None:
    """Put back distributed's config defaults where they are missing.

    ``with dask.config.set(...)`` restores the config it found on entry, so when
    ``distributed`` is first imported inside such a block, its whole section
    (registered on import) is gone on exit, and starting a cluster failed with
    ``KeyError: 'distributed'`` deep inside distributed.  Values set since stay.
    """
    import copy

    import dask
    import distributed  # noqa: F401  (registers its defaults)

    if "distributed" not in dask.config.config:
        for defaults in dask.config.defaults:
            dask.config.update(dask.config.config, copy.deepcopy(defaults), priority="old")


#: The local clusters this process started that are still open (for the note a second one prints).
_LOCAL_RUNNING: weakref.WeakSet = weakref.WeakSet()


class Cluster:
    """A Dask cluster (local or existing) and its client.

    Use it as a context manager (``with wb.cluster(...) as client:``), or call
    :meth:`start` for a cluster that lives as long as the Python process or
    notebook kernel (closed at exit, or by :meth:`close`).

    Examples
    --------
    >>> client = cluster("cpu", n_workers=2).start()      # doctest: +SKIP
    >>> client.dashboard_link                              # doctest: +SKIP
    """

    def __init__(self, backend: str = "cpu", n_workers: int | None = None, threads_per_worker: int = 1,
                 address: str | None = None, scheduler_file: str | None = None, *, quiet: bool = False,
                 pin: bool | None = None, **kwargs: Any) -> None:
        _validate(backend, n_workers, threads_per_worker, address, scheduler_file, pin)
        if address is None and scheduler_file is None:
            _check_cluster_options(backend, kwargs)
        if not isinstance(quiet, bool):
            raise TypeError(f"quiet must be a bool, got {type(quiet).__name__} {quiet!r}")
        self.pin = pin
        self.backend = backend
        self.n_workers = n_workers
        self.threads_per_worker = threads_per_worker
        self.address = address
        self.scheduler_file = scheduler_file
        self.quiet = quiet
        self.kwargs = kwargs
        self.client: Any = None
        self.local_cluster: Any = None
        self._stack: contextlib.ExitStack | None = None

    # -- lifecycle ---------------------------------------------------------
    def start(self) -> Any:
        """Start (or connect) and return the ``distributed.Client``; it is closed at interpreter exit."""
        if self.client is not None:
            return self.client
        _restore_distributed_defaults()
        stack = contextlib.ExitStack()
        try:
            client = self._connect(stack)
            stack.enter_context(_hooked(client))
        except BaseException:
            stack.close()
            raise
        self._stack, self.client = stack, client
        import atexit

        atexit.register(self.close)
        return client

    def close(self) -> None:
        """Close the client and, for a local cluster, the cluster (idempotent)."""
        _LOCAL_RUNNING.discard(self)
        stack, self._stack, self.client = self._stack, None, None
        if stack is not None:
            stack.close()

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "running" if self.client is not None else "not started"
        return f"<workbench.Cluster backend={self.backend!r} n_workers={self.n_workers} {state}>"

    def _connect(self, stack: contextlib.ExitStack) -> Any:
        from distributed import Client

        kwargs = dict(self.kwargs)
        if self.address is not None or self.scheduler_file is not None:
            client = Client(address=self.address, scheduler_file=self.scheduler_file, **kwargs)
            stack.callback(client.close)
            if not self.quiet:
                print(f"workbench: connected to {client.scheduler.address}; dashboard {client.dashboard_link}",
                      file=sys.stderr)
            return client

        _check_not_bootstrapping()
        import dask

        if dask.config.get("distributed.deploy.lost-worker-timeout") == "15s":
            # a nanny restarting a killed worker takes longer than dask's default on a loaded machine;
            # past it the cluster closes that nanny and shrinks for good (DESIGN rule 7: nothing lost)
            dask.config.set({"distributed.deploy.lost-worker-timeout": "180s"})
        backend = self.backend
        if backend == "auto":
            backend = "gpu" if _backend.gpu_available()[0] else "cpu"
        n_workers = self.n_workers
        sets = None
        if backend == "gpu":
            _backend.require_gpu(need_dask_cuda=True)
            from dask_cuda import LocalCUDACluster

            if n_workers is not None:
                kwargs.setdefault("n_workers", n_workers)
            with _worker_environ("gpu"):
                lc = LocalCUDACluster(threads_per_worker=self.threads_per_worker, **kwargs)
        else:
            if backend == "gpu-sim":
                _require_simulator()
                if not kwargs.get("processes", True):
                    # the simulator is chosen when numba.cuda is first imported: only a fresh worker process
                    # can take the device path (threads in this process would run the CPU kernels)
                    raise ValueError("backend='gpu-sim' needs worker processes, got processes=False")
            from distributed import LocalCluster

            if n_workers is None:
                n_workers = max(1, (os.cpu_count() or 1) // self.threads_per_worker)
            kwargs.setdefault("processes", True)
            # One worker per share of the cores, as MPI binds its ranks (dask-cuda binds GPU workers itself).
            # Toggled between paired runs on one 2-worker cluster: bound, BFS at SCALE 20 waited 2.2-2.5 ms per
            # search against 3.3-4 unbound (strong-scaling efficiency 0.74 against 0.66), coloring ran 1.16x
            # faster, the other kernels within noise.  Decided before anything starts: pin=True may not fit.
            sets = _core_sets(n_workers, self.threads_per_worker, self.pin) if kwargs["processes"] else None
            kwargs.setdefault("dashboard_address", ":0")
            kwargs.setdefault("silence_logs", logging.ERROR)
            with _worker_environ(backend):
                lc = LocalCluster(n_workers=n_workers, threads_per_worker=self.threads_per_worker, **kwargs)
        stack.callback(_close_local, lc)
        # results come straight from the workers, not relayed by the scheduler (one copy over TCP, not two):
        # computing a 64 MiB array of 2 chunks took 48 ms here against 105
        client = Client(lc, direct_to_workers=True)
        stack.callback(client.close)
        client.wait_for_workers(len(lc.workers) if hasattr(lc, "workers") else 1, timeout=120)
        if sets is not None:
            from distributed.diagnostics.plugin import WorkerPlugin

            binding = type("WorkbenchCoreBinding", (_CoreBinding, WorkerPlugin), {})(sets)
            client.register_plugin(binding, name=_CoreBinding.name)
        _prompt_messages(client)
        if kwargs.get("processes", True):
            kinds = client.run(_worker_kind)
            bad = {w: k for w, k in kinds.items() if k != (backend, backend == "gpu-sim")}
            if bad:
                raise RuntimeError(f"workers did not start on the {backend!r} path (kind, simulator): {bad}")
        client._workbench_backend = backend
        self.local_cluster = lc
        if not self.quiet:
            print(f"workbench: {backend} cluster with {len(worker_addresses(client))} workers; "
                  f"dashboard {client.dashboard_link}", file=sys.stderr)
            others = [c for c in _LOCAL_RUNNING if c.client is not None]
            if others:
                # a notebook cell that starts a cluster, run twice, leaves the first one's workers holding
                # cores and memory; its data stays usable there (kernels follow their inputs' cluster)
                print(f"workbench: note: {len(others)} other local cluster(s) started here still run "
                      f"({', '.join(c.client.dashboard_link for c in others)}), each with its own workers and memory: "
                      "close one you no longer use with .close() on the wb.cluster(...) that started it, or "
                      "restart the kernel", file=sys.stderr)
        _LOCAL_RUNNING.add(self)
        return client


def cluster(
    backend: str = "cpu",
    n_workers: int | None = None,
    threads_per_worker: int = 1,
    address: str | None = None,
    scheduler_file: str | None = None,
    *,
    quiet: bool = False,
    pin: bool | None = None,
    **kwargs: Any,
) -> Cluster:
    """Start a local Dask cluster, or connect to one; use as ``with ... as client`` or ``.start()``.

    Parameters
    ----------
    backend : {"cpu", "gpu", "gpu-sim", "auto"}
        ``"cpu"`` starts a ``distributed.LocalCluster`` whose kernels run numba
        on the host; ``"gpu"`` a ``dask_cuda.LocalCUDACluster`` (one worker per
        GPU, partitions in device memory); ``"gpu-sim"`` a local CPU cluster
        whose workers take the device path (numba.cuda kernels) under numba's
        CUDA simulator with numpy arrays, so machines without a GPU exercise
        every device kernel (tiny inputs: each CUDA thread runs in Python);
        ``"auto"`` picks the GPU when cupy sees a device, else the CPU.
    n_workers : int, optional
        Number of workers. Default: CPU cores / threads_per_worker (CPU), every
        visible GPU (GPU).
    threads_per_worker : int
        Threads per worker. One thread per worker is the SPMD default (and the
        only choice under ``"gpu-sim"``).
    address, scheduler_file : str, optional
        Connect to an existing scheduler (dask-mpi, dask-jobqueue,
        ``dask-cuda-worker`` ...) instead of starting one.  Nothing is shut
        down on exit but the client.
    quiet : bool
        Do not print the dashboard link.
    pin : bool, optional
        Bind each worker process of a local ``"cpu"`` or ``"gpu-sim"`` cluster
        to its own share of the cores (Linux), as MPI binds its ranks, so the
        OS does not move a worker's rank and message threads between cores
        mid-kernel.  Default (None): bind when there are two workers or more and
        their threads fit on the cores this process may use; ``True`` binds
        whenever they fit; ``False`` never.  :func:`worker_cores` shows the result.
    **kwargs
        Passed to the cluster class (e.g. ``protocol="ucx"``,
        ``rmm_pool_size="20GB"``, ``CUDA_VISIBLE_DEVICES="0,1"`` for
        ``"gpu"``; ``memory_limit`` for any).

    Returns
    -------
    Cluster
        ``with`` yields a ``distributed.Client`` (the default client inside
        the block); ``.start()`` returns one that lives until ``.close()`` or exit.

    Raises
    ------
    ValueError
        Unknown backend or bad sizes (before anything starts).
    RuntimeError
        ``"gpu"`` without cupy, a device or dask-cuda; ``"gpu-sim"`` without
        numba's simulator (the message names what is missing).

    Notes
    -----
    A cluster started here is tuned for a few large SPMD tasks per call: the
    client takes results straight from the workers (``direct_to_workers``),
    and messages between client, scheduler and workers wait at most 2 ms to
    be batched (dask: up to 10 ms).  A cluster connected to by ``address`` or
    ``scheduler_file`` keeps its own settings.

    Examples
    --------
    >>> from workbench.cluster import worker_addresses            # doctest: +SKIP
    >>> with cluster("cpu", n_workers=2, quiet=True) as client:   # doctest: +SKIP
    ...     len(worker_addresses(client))
    2
    >>> client = cluster("gpu-sim", n_workers=2).start()         # doctest: +SKIP
    """
    return Cluster(backend, n_workers, threads_per_worker, address, scheduler_file, quiet=quiet, pin=pin, **kwargs)


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


def default_client(client: Any = None, *inputs: Any) -> Any:
    """``client``; with ``client=None`` the client whose cluster holds the distributed ``inputs`` (row
    blocks, block grids, kernel results or persisted dask arrays: a second cluster started in the same
    session, e.g. by a notebook cell run twice, does not take the first one's data from under it), else the
    current default ``distributed.Client``.  A ``client`` of another cluster than the one holding the inputs
    is a ``ValueError``."""
    if isinstance(client, Cluster):     # wb.cluster(...) itself, not the client its start() returned
        if client.client is None:
            raise ValueError("client is a wb.cluster(...) that was not started: pass the client that "
                             "`with wb.cluster(...) as client:` or `.start()` gives")
        client = client.client
    holder = _client_holding(inputs) if inputs else None
    if client is None:
        client = holder
    elif holder is not None and _scheduler_of(holder) != _scheduler_of(client):
        # said here, not as a "lost" partition rebuilt from the host copy or "Futures cancelled" on the other
        raise ValueError(f"the distributed inputs are held by another cluster (scheduler {_scheduler_of(holder)}) "
                         f"than the client passed (scheduler {_scheduler_of(client)}): pass client=None or that "
                         "cluster's client, or wb.distribute the host data on this one")
    if client is not None:
        if not (hasattr(client, "submit") and hasattr(client, "sync")):
            raise TypeError(f"client must be a distributed.Client or None, got {type(client).__name__}")
        if getattr(client, "status", None) in ("closing", "closed"):
            # said here, not as "IOLoop is closed" or an AttributeError from deep inside distributed
            raise ValueError("client is closed (its cluster was shut down): start a new one, e.g. "
                             "`with wb.cluster() as client:`")
        return client
    from distributed import get_client

    try:
        return get_client()
    except ValueError as e:
        raise ValueError(
            "no Dask client: pass client= or start one, e.g. `with wb.cluster() as client:`"
        ) from e


def _scheduler_of(client: Any) -> str | None:
    return getattr(getattr(client, "scheduler", None), "address", None)


def _client_holding(inputs: tuple) -> Any:
    """The running client of the first future found among the inputs' blocks or chunks, else None."""
    from dask.highlevelgraph import MaterializedLayer
    from distributed import Future

    for x in inputs:
        if hasattr(x, "parts") and hasattr(x, "offsets"):           # row blocks
            found = list(x.parts[:1])
        elif hasattr(x, "blocks") and hasattr(x, "row_offsets"):    # a block grid
            found = list(x.blocks[0][:1]) if x.blocks else []
        elif hasattr(x, "dask") and hasattr(x, "name"):               # a persisted dask array: its chunks
            layer = getattr(getattr(x, "dask", None), "layers", {}).get(x.name)
            # a lazy layer (Blockwise, ...) holds no futures, and listing it would build every task
            found = [next(iter(layer.values()), None)] if isinstance(layer, MaterializedLayer) else []
        else:
            continue
        owner = found[0].client if found and isinstance(found[0], Future) else None
        if owner is not None and getattr(owner, "status", None) == "running":
            return owner
    return None


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


def _close_local(lc: Any, timeout: float = 15.0) -> None:
    """``LocalCluster.close``, bounded: a nanny closed while it restarts a killed worker waits, with no timeout,
    for the new worker to say it runs (distributed's ``Nanny.kill``), and the close hung for minutes (1 close in
    6 right after a kill here).  The worker processes still there after ``timeout`` seconds are killed."""
    import signal

    try:
        lc.close(timeout=timeout)
    except Exception:   # a TimeoutError; the loop is left to the process's exit
        for nanny in list(getattr(lc, "workers", {}).values()):
            pid = getattr(nanny, "pid", None)
            if pid:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)


def chosen_workers(client: Any, workers: Sequence[str] | None = None) -> list[str]:
    """``workers`` as the caller named them, each checked to be a worker of the cluster, or every
    worker, sorted: a ``ValueError`` naming ``workers`` otherwise (an unknown address ran elsewhere, or
    failed later as a lost worker).

    Examples
    --------
    >>> chosen_workers(client, worker_addresses(client)[:1])     # doctest: +SKIP
    ['tcp://127.0.0.1:40001']
    """
    alive = worker_addresses(client)
    if workers is None:
        if not alive:
            raise ValueError("the cluster has no workers")
        return alive
    if isinstance(workers, str) or not all(isinstance(w, str) for w in workers):
        raise TypeError(f"workers must be a list of worker addresses, got {workers!r}")
    workers = list(workers)
    if not workers:
        raise ValueError("workers must name at least one worker")
    unknown = sorted(set(workers) - set(alive))
    if unknown:
        raise ValueError(f"workers {unknown} are not workers of this cluster ({len(alive)} workers)")
    return workers


def backend_of(client: Any) -> str:
    """The path the cluster's kernels take: ``"cpu"``, ``"gpu"`` or ``"gpu-sim"``.

    Known for clusters :func:`cluster` started; for others the workers are asked
    once per client (a round trip, ~5 ms here, on every kernel call otherwise): a
    cluster's kind does not change while it has workers.
    """
    known = getattr(client, "_workbench_backend", None)
    if known is not None:
        return known
    kinds = {k for k, _ in client.run(_worker_kind).values()}
    if len(kinds) > 1:
        raise RuntimeError(f"the cluster mixes worker kinds {sorted(kinds)}: kernels need one kind")
    if not kinds:
        return "cpu"  # no workers yet: ask again next time
    client._workbench_backend = kind = kinds.pop()
    return kind


# --------------------------------------------------------------------------
# Message latency.  Dask batches the messages of each stream: one waits until the stream's interval (client to
# scheduler 10 ms, scheduler to worker 5 ms, worker to scheduler and scheduler to client 2 ms) has passed since
# the stream's last send.  A kernel call is a handful of messages, each often right after another (a result
# released, then the next call's tasks submitted), so the intervals made most of a small call's time: 25 ms
# against 10 ms for a 16 x 1024 tridiagonal batch, 10.5 ms against 5.2 ms for a BFS at SCALE 14.
# --------------------------------------------------------------------------

#: seconds between two sends of one stream (comms.ensure_registered applies it to every stream of the cluster)
STREAM_INTERVAL = 0.0005


def quicken(stream: Any) -> None:
    """Send a Dask batched stream's messages at most :data:`STREAM_INTERVAL` after its last send."""
    if stream is not None and getattr(stream, "interval", 0) > STREAM_INTERVAL:
        stream.interval = STREAM_INTERVAL


def quicken_scheduler(dask_scheduler: Any) -> None:
    """On the scheduler: :func:`quicken` its streams to every worker and client."""
    for stream in [*dask_scheduler.stream_comms.values(), *dask_scheduler.client_comms.values()]:
        quicken(stream)


# --------------------------------------------------------------------------
# The allocator of workers started elsewhere.  A nanny starts its worker with dask's MALLOC_TRIM_THRESHOLD_,
# which turns off glibc's adaptive mmap threshold: every buffer of 128 KiB or more is then a fresh mmap, faulted
# in page by page and unmapped on free.  cluster() starts its workers without it (see _worker_environ); a plain
# distributed.LocalCluster's workers get glibc's adaptive limits back when comms registers its plugin
# (2-worker BFS at SCALE 20 from wb.distribute: 40 -> 33 ms a call).
# --------------------------------------------------------------------------

#: where glibc's adaptive thresholds stop growing on 64-bit Linux (mmap above 32 MiB, trim above twice that)
_MMAP_MAX, _TRIM_MAX = 32 << 20, 64 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3   # mallopt parameters, glibc's malloc.h
_ALLOCATOR_RESTORED = False


def restore_allocator() -> bool:
    """In a worker started with dask's ``MALLOC_TRIM_THRESHOLD_`` (and not another the user chose): set glibc's
    mmap and trim thresholds to where its adaptive default settles.  True when they are (now or before)."""
    global _ALLOCATOR_RESTORED
    if _ALLOCATOR_RESTORED:
        return True
    if os.environ.get("MALLOC_TRIM_THRESHOLD_") != str(_DASK_TRIM) or not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    _ALLOCATOR_RESTORED = bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_MAX)) and bool(mallopt(_M_TRIM_THRESHOLD, _TRIM_MAX))
    return _ALLOCATOR_RESTORED
