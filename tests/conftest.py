"""Shared fixtures: module-scoped local clusters (always closed) and GPU skipping."""

from __future__ import annotations

import os

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
