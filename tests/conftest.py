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


#: Experiment runs (``@pytest.mark.experiment_run``) in flight at once.
RUNS_AT_ONCE = 2 if (os.cpu_count() or 1) > 1 else 1


@pytest.fixture(scope="session")
def _experiment_runs(request, tmp_path_factory):
    """Every run the session's ``experiment_run`` tests ask for, executed by the users' runner
    (``workbench.experiment.run``), each in a process of its own, ``RUNS_AT_ONCE`` at a time.

    A run is a process tree with its own environment, memory monitor and budgets, so two overlap
    safely; a notebook run at the ci profile is mostly one core's start-up (kernel, imports,
    cluster), so two at a time take about half the wall time of one after another.  All are
    queued in the order the tests run, when the first of them asks."""
    from concurrent.futures import ThreadPoolExecutor

    root = tmp_path_factory.mktemp("experiment-runs")
    planned = [_run_spec(item) for item in request.session.items]
    planned = list(dict.fromkeys(spec for spec in planned if spec is not None))

    def run(spec: tuple[str, str, bool]):
        name, profile, build_only = spec
        out = root / f"{name}-{profile}{'-build' if build_only else ''}"
        code = ("import sys; from workbench import experiment; "
                "print(experiment.run(sys.argv[1], sys.argv[2], results_dir=sys.argv[3], progress=False, "
                "build_only=sys.argv[4] == '1'))")
        proc = subprocess.run([sys.executable, "-c", code, name, profile, str(out), "1" if build_only else "0"],
                              capture_output=True, text=True, timeout=900, cwd=Path(__file__).parents[1])
        if proc.returncode:
            return None, f"the run exited {proc.returncode}:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        return Path(proc.stdout.strip().splitlines()[-1]), None

    pool = ThreadPoolExecutor(RUNS_AT_ONCE, thread_name_prefix="experiment-run")
    runs = {spec: pool.submit(run, spec) for spec in planned}
    yield runs
    pool.shutdown(wait=True, cancel_futures=True)   # runs no test waited for (a test failed first) are dropped


def _run_spec(item) -> tuple[str, str, bool] | None:
    mark = item.get_closest_marker("experiment_run")
    if mark is None:
        return None
    return item.callspec.params["name"], mark.args[0], bool(mark.kwargs.get("build_only", False))


@pytest.fixture
def experiment_run(request, _experiment_runs):
    """The directory of this test's run: experiment ``name`` (its parameter) at the profile its
    ``@pytest.mark.experiment_run(profile, build_only=False)`` names, run as ``_experiment_runs`` says.

    Example::

        @pytest.mark.experiment_run("ci")
        @pytest.mark.parametrize("name", ["fft"])
        def test_x(name, experiment_run):
            assert (experiment_run / "provenance.json").exists()
    """
    spec = _run_spec(request.node)
    assert spec is not None, "experiment_run needs @pytest.mark.experiment_run(profile) and a 'name' parameter"
    run_dir, error = _experiment_runs[spec].result()
    if error:
        pytest.fail(f"experiment {spec[0]!r} (profile {spec[1]}): {error}", pytrace=False)
    return run_dir
