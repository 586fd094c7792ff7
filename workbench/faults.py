"""Fault injection for tests and notebooks: kill a worker process with SIGKILL, by pid, at a
chosen moment (DESIGN rule 7 says a lost worker loses nothing; this is how we check it).

:func:`kill_in_group` arms a worker to kill itself the moment a rank of a named SPMD group starts
running on it, so the kill lands inside that kernel call every time (a client polling the scheduler
misses groups that last a few milliseconds).  :func:`kill_worker` kills one at once.  Both need the
worker on the client's host (``os.kill``); the worker's nanny, where there is one, starts a
replacement.

Examples
--------
>>> import workbench as wb
>>> from workbench import faults
>>> with wb.cluster(n_workers=3, quiet=True) as client:                # doctest: +SKIP
...     G = wb.data.rmat_distributed(12, client=client)
...     switch = faults.kill_in_group(client, "bfs", G.workers[1])
...     r = wb.bfs(G, 0, client=client)        # the worker dies inside this call; bfs reruns
...     switch.fired(), r.stats["retries"]
(True, 1)
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["worker_pids", "kill_worker", "kill_in_group", "KillSwitch"]


def worker_pids(client: Any) -> dict[str, int]:
    """The process id of every worker, by address."""
    return client.run(os.getpid)


def kill_worker(client: Any, address: str) -> int:
    """SIGKILL the worker at ``address`` now; returns its pid.

    Examples
    --------
    >>> kill_worker(client, G.workers[0])                             # doctest: +SKIP
    12345
    """
    pid = worker_pids(client)[address]
    os.kill(pid, signal.SIGKILL)
    return pid


@dataclass
class KillSwitch:
    """A worker armed by :func:`kill_in_group`."""

    address: str
    pid: int
    group: str

    def fired(self) -> bool:
        """Whether the worker's process is gone."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # pragma: no cover - a pid reused by another user's process
            return True
        return False

    def wait(self, timeout: float = 30.0) -> bool:
        """Wait (bounded) until the worker is gone; whether it is."""
        deadline = time.monotonic() + timeout
        while not self.fired() and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.fired()


def kill_in_group(client: Any, group: str, address: str, *, delay: float = 0.0,
                  timeout: float = 120.0) -> KillSwitch:
    """Arm the worker at ``address`` to SIGKILL itself once a rank of an SPMD group named
    ``group`` (the ``name=`` a kernel gives :func:`workbench.comms.run_spmd`: ``"bfs"``,
    ``"spmm-stationary-c"``, ...) has run ``delay`` seconds on it.

    The worker watches its own running tasks (every millisecond, for at most ``timeout``
    seconds), so the kill lands inside the next such group however short it is.

    Parameters
    ----------
    client : distributed.Client
    group : str
        Group name; a prefix followed by ``-`` also matches (``"spmm"`` for every SpMM algorithm).
    address : str
        The worker to kill (on the client's host).
    delay : float
        Seconds the rank runs before the kill.
    timeout : float
        Seconds the worker stays armed.

    Returns
    -------
    KillSwitch

    Examples
    --------
    >>> switch = kill_in_group(client, "spmm", A.workers[1])         # doctest: +SKIP
    >>> Y = wb.spmm(A, B, client=client); switch.fired()              # doctest: +SKIP
    True
    """
    pattern = rf"spmd-{re.escape(group)}(-[\w.]+)*-[0-9a-f]{{12}}(-\d+)+$"
    switch = KillSwitch(address, int(worker_pids(client)[address]), group)
    try:
        client.run(_arm, pattern, float(delay), float(timeout), workers=[address])
    except Exception:
        # a group already running there is killed within a millisecond, often before the worker answers
        # the arming call: that is the kill landing, not a failure to arm
        if not switch.wait(5.0):
            raise
    return switch


def _arm(pattern: str, delay: float, timeout: float, dask_worker: Any = None) -> None:
    """Runs on the worker: a thread that kills this process inside the first matching rank."""
    match = re.compile(pattern).match

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:  # the tasks running now (a rank secedes: long-running)
                running = [ts.key for ts in list(dask_worker.state.executing) + list(dask_worker.state.long_running)]
            except RuntimeError:  # changed while copied
                continue
            # a rank's key: "spmd-<group>-<rank>", or a chunk key ("spmd-<group>", i, j) (run_spmd's chunk_index)
            if any(match(k if isinstance(k, str) else "-".join(map(str, k))) for k in running):
                time.sleep(delay)
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(0.001)

    threading.Thread(target=watch, daemon=True, name="wb-kill-switch").start()
