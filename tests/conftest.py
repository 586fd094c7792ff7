"""Shared fixtures: module-scoped local clusters (always closed), GPU skipping, and a warm numba cache."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")


def _gpu_reason() -> str | None:
    from workbench.backend import gpu_available

    ok, why = gpu_available()
    return None if ok else why


def pytest_collection_modifyitems(config, items):
    reason = None
    for item in items:
        if "gpu" in item.keywords:
            if reason is None:
                reason = _gpu_reason() or ""
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"GPU test: {reason}"))


#: Sessions with at least this many tests (the whole suite, not one module) warm the numba cache first.
WARM_MIN_TESTS = 200


@pytest.fixture(scope="session", autouse=True)
def _warm_numba_cache(request, tmp_path_factory):
    """On a fresh clone every test cluster's workers compile each kernel they run, several at once; a
    background process (``_warm_kernels.py``) compiles them into numba's on-disk cache first, on the core
    the suite leaves idle.  Only for sessions that run most of the suite; ``WORKBENCH_WARM_CACHE=0``
    turns it off.  It speeds tests up and checks nothing: its log is in the session's temporary folder."""
    if len(request.session.items) < WARM_MIN_TESTS or os.environ.get("WORKBENCH_WARM_CACHE") == "0":
        yield
        return
    log = tmp_path_factory.mktemp("warm-cache") / "log.txt"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("_warm_kernels.py"))], stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    yield
    if proc.poll() is None:   # a session that ended first: stop it and its cluster's processes
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    elif proc.returncode:     # the tests compiled what it did not; say so rather than slow down unseen
        reporter = request.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"conftest: the numba cache warm-up failed (exit {proc.returncode}), see {log}")


@pytest.fixture(scope="session")
def clients():
    """``clients(n, backend="cpu")``: a Client on an n-worker local cluster of that
    backend ("cpu" or "gpu-sim"), started once per test session, shared by every
    module, and closed when the session ends.  The one asked for becomes the
    default client, so ``client=None`` and dask's ``.compute()`` reach it.

    Tests that kill workers start clusters of their own.

    Example::

        @pytest.mark.parametrize("n_workers", [1, 2, 3])
        def test_x(clients, n_workers):
            client = clients(n_workers)
    """
    from workbench.cluster import cluster

    open_: dict[tuple[int, str], tuple] = {}

    def get(n: int, backend: str = "cpu"):
        key = (n, backend)
        if key not in open_:
            cm = cluster(backend, n_workers=n, threads_per_worker=1, quiet=True, memory_limit="4GiB")
            open_[key] = (cm, cm.start())
        client = open_[key][1]
        from distributed.client import _set_global_client

        _set_global_client(client)
        return client

    yield get
    for cm, _ in open_.values():
        cm.close()


@pytest.fixture
def client(clients):
    """The shared 2-worker CPU cluster's client."""
    return clients(2)
