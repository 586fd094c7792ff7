"""Sample the memory of a process tree (the notebook's kernel and its Dask workers) and enforce budgets.

The experiment runner starts one :class:`TreeMonitor` around each notebook.  A
thread samples, every ``interval`` seconds, the resident memory of every
process below the runner that was not there when the monitor started: the
Jupyter kernel (which holds the Dask client and scheduler: the *client*) and
the worker processes the notebook's clusters spawn (the *workers*).  It keeps
each process's peak and the peak of their sum, and when the run passes its
wall-time or memory budget it kills those processes (workers first), so the
runner can report the budget instead of letting the machine swap.

This module imports nothing from workbench (it sits below every layer).

Examples
--------
>>> import time
>>> with TreeMonitor(interval=0.05) as mon:
...     time.sleep(0.2)
>>> mon.summary()["samples"] >= 1
True
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

__all__ = ["TreeMonitor", "role_of"]


def role_of(cmdline: list[str]) -> str:
    """``"client"`` (a Jupyter kernel), ``"worker"`` (a spawned Dask worker) or ``"other"``."""
    text = " ".join(cmdline)
    if "ipykernel" in text or "ipykernel_launcher" in text:
        return "client"
    if "resource_tracker" in text or "forkserver" in text:
        return "other"
    if "spawn_main" in text or "distributed" in text or "dask" in text:
        return "worker"
    return "other"


class TreeMonitor:
    """Peak memory of the processes a run starts below ``root_pid``, with optional budgets.

    Parameters
    ----------
    root_pid : int, optional
        The process whose descendants are watched (default: this process).
        Descendants that exist already when the monitor starts are ignored.
    interval : float
        Seconds between samples.
    max_seconds : float, optional
        Wall-time budget; past it the watched processes are killed.
    max_bytes : float, optional
        Budget for the summed resident memory of client and workers.
    """

    def __init__(self, root_pid: int | None = None, *, interval: float = 0.5, max_seconds: float | None = None,
                 max_bytes: float | None = None):
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval!r}")
        self.root_pid = os.getpid() if root_pid is None else int(root_pid)
        self.interval = float(interval)
        self.max_seconds = max_seconds
        self.max_bytes = max_bytes
        self.exceeded: str | None = None
        self._procs: dict[int, dict] = {}
        self._ignore: set[int] = set()
        self._peak_total = self._peak_client = self._peak_workers = 0
        self._samples = 0
        self._t0 = 0.0
        self._wall = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------
    def start(self) -> TreeMonitor:
        import psutil

        try:
            self._ignore = {p.pid for p in psutil.Process(self.root_pid).children(recursive=True)}
        except psutil.Error:
            self._ignore = set()
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._loop, name="workbench-monitor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10 * self.interval + 5)
        self._wall = time.perf_counter() - self._t0
        return self.summary()

    def __enter__(self) -> TreeMonitor:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- sampling --------------------------------------------------------
    def _children(self) -> list:
        import psutil

        try:
            kids = psutil.Process(self.root_pid).children(recursive=True)
        except psutil.Error:
            return []
        return [p for p in kids if p.pid not in self._ignore]

    def sample(self) -> dict:
        """Take one sample now; returns ``{"client": bytes, "workers": bytes, "total": bytes}``."""
        import psutil

        by_role = {"client": 0, "worker": 0, "other": 0}
        for p in self._children():
            try:
                info = self._procs.get(p.pid)
                if info is None:
                    info = {"pid": p.pid, "role": role_of(p.cmdline()), "peak_rss_bytes": 0,
                            "started_s": round(time.perf_counter() - self._t0, 3)}
                    self._procs[p.pid] = info
                rss = p.memory_info().rss
            except psutil.Error:  # exited between listing and reading
                continue
            info["peak_rss_bytes"] = max(info["peak_rss_bytes"], rss)
            by_role[info["role"]] += rss
        total = by_role["client"] + by_role["worker"]
        self._peak_client = max(self._peak_client, by_role["client"])
        self._peak_workers = max(self._peak_workers, by_role["worker"])
        self._peak_total = max(self._peak_total, total)
        self._samples += 1
        return {"client": by_role["client"], "workers": by_role["worker"], "total": total}

    def _loop(self) -> None:
        while not self._stop.is_set():
            now = self.sample()
            elapsed = time.perf_counter() - self._t0
            if self.exceeded is None:
                if self.max_seconds is not None and elapsed > self.max_seconds:
                    self.exceeded = (f"ran past max_minutes={self.max_seconds / 60:g} "
                                     f"({elapsed / 60:.1f} min)")
                elif self.max_bytes is not None and now["total"] > self.max_bytes:
                    self.exceeded = (f"client and workers used {now['total'] / 2**30:.1f} GiB, past "
                                     f"max_memory_gb={self.max_bytes / 2**30:g}")
            if self.exceeded is not None:   # again each round: a kernel still starting spawns after the first
                self.kill()
            self._stop.wait(self.interval)

    def kill(self) -> None:
        """Kill the watched processes, workers before the kernel that would restart them."""
        import psutil

        procs = self._children()
        procs.sort(key=lambda p: self._procs.get(p.pid, {}).get("role") == "client")
        for p in procs:
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass

    # -- results ---------------------------------------------------------
    def summary(self) -> dict:
        """Peaks in bytes: the kernel (client), the workers' sum, both together, and each process."""
        wall = self._wall or (time.perf_counter() - self._t0)
        return {"interval_s": self.interval, "samples": self._samples, "wall_s": wall,
                "peak_total_bytes": self._peak_total, "peak_client_bytes": self._peak_client,
                "peak_workers_bytes": self._peak_workers,
                "processes": [dict(p) for p in self._procs.values() if p["role"] != "other"],
                "stopped": self.exceeded}
