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


@pytest.fixture(scope="module")
def clients():
    """``clients(n)``: a Client on an n-worker local CPU cluster, started once per
    test module and closed when the module finishes.

    Example::

        @pytest.mark.parametrize("n_workers", [1, 2, 3])
        def test_x(clients, n_workers):
            client = clients(n_workers)
    """
    from workbench.cluster import cluster

    open_: dict[int, tuple] = {}

    def get(n: int):
        if n not in open_:
            cm = cluster("cpu", n_workers=n, threads_per_worker=1, quiet=True, memory_limit="4GiB")
            open_[n] = (cm, cm.__enter__())
        client = open_[n][1]
        # Several clusters live in one module: make the one asked for the default, so
        # client=None and dask's .compute() reach the cluster that holds the futures.
        from distributed.client import _set_global_client

        _set_global_client(client)
        return client

    yield get
    for cm, _ in open_.values():
        cm.__exit__(None, None, None)


@pytest.fixture(scope="module")
def client(clients):
    """A 2-worker cluster's client (module-scoped)."""
    return clients(2)
