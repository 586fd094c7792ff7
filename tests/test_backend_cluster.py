"""Backend selection and the cluster context manager."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import dask
import numpy as np
import pytest

import workbench as wb
from workbench import backend
from workbench.cluster import _core_sets, worker_addresses, worker_cores


def _environ(name: str) -> str | None:
    # a worker's variable (``os.environ.get`` itself would pickle the caller's environment along)
    return os.environ.get(name)


def _thread_cores(dask_worker=None) -> tuple:
    """(worker name, the distinct core sets of all its process's threads)."""
    cores = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            cores.add(tuple(sorted(os.sched_getaffinity(int(tid)))))
        except OSError:
            pass
    return dask_worker.name, sorted(cores)


def test_import_does_not_pull_gpu_stack():
    code = ("import sys, workbench, workbench.kernels; "
            "bad = [m for m in ('cupy', 'cudf', 'cugraph', 'dask_cuda') if m in sys.modules]; "
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


def test_namespace_and_to_host_on_numpy():
    x = np.arange(4)
    assert backend.namespace(x) is np
    assert backend.to_host(x) is x
    assert not backend.is_device_array(x)
    assert backend.sparse_namespace(x).__name__ == "scipy.sparse"


def test_gpu_backend_error_names_what_is_missing():
    ok, why = backend.gpu_available()
    if ok:
        pytest.skip("a GPU is present")
    with pytest.raises(RuntimeError, match="backend='gpu' is unavailable: .*(cupy|CUDA|device)"):
        with wb.cluster(backend="gpu"):
            pass


_NUMPY_WITHOUT_ROW_STACK = """
import sys
import numpy
import workbench
if sys.argv[1] == "drop":
    del numpy.row_stack          # as numpy 2.5 did: numba-cuda 0.30 overloads it while typing any kernel
print("problem:", workbench.backend.numba_cuda_problem())
"""


@pytest.mark.parametrize("drop", [False, True])
def test_a_numpy_numba_cuda_cannot_type_with_is_named_before_the_cluster_starts(drop):
    pytest.importorskip("numba.cuda")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    out = subprocess.run([sys.executable, "-c", _NUMPY_WITHOUT_ROW_STACK, "drop" if drop else "keep"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("problem:")][0]
    if drop:
        assert "numba-cuda" in line and "row_stack" in line and "numpy < 2.5" in line
    else:
        assert line == "problem: None"


def test_gpu_backend_refuses_a_numba_cuda_that_cannot_type(monkeypatch):
    monkeypatch.setattr(backend, "gpu_available", lambda: (True, "ok"))
    monkeypatch.setattr(backend, "numba_cuda_problem", lambda: "numba-cuda 0.30.4 cannot type kernels (...)")
    with pytest.raises(RuntimeError, match="backend='gpu' is unavailable: numba-cuda 0.30.4 cannot type"):
        backend.require_gpu(need_dask_cuda=True)


@pytest.mark.parametrize("kw, match", [
    ({"backend": "tpu"}, "backend must be one of"),
    ({"n_workers": 0}, "n_workers"),
    ({"threads_per_worker": 0}, "threads_per_worker"),
    ({"address": "tcp://x:1", "scheduler_file": "f"}, "at most one"),
])
def test_cluster_bad_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        with wb.cluster(**kw):
            pass


@pytest.mark.parametrize("cores, n, threads, pin, want", [
    ({0, 1}, 2, 1, None, [[0], [1]]),
    ({0, 1}, 1, 1, None, None),              # one worker: nothing to keep apart
    ({0, 1}, 1, 1, True, [[0, 1]]),
    ({0, 1}, 3, 1, None, None),              # more workers than cores: left unbound, the OS shares them out
    ({0, 1}, 2, 2, None, None),
    ({0, 1}, 2, 1, False, None),
    ({2, 3, 5, 7}, 3, 1, None, [[2, 3], [5], [7]]),  # the cores this process may use, in contiguous shares
    ({0, 1, 2, 3}, 2, 2, None, [[0, 1], [2, 3]]),
])
def test_core_shares(monkeypatch, cores, n, threads, pin, want):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(cores), raising=False)
    assert _core_sets(n, threads, pin) == want


def test_core_binding_bad_arguments(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    with pytest.raises(ValueError, match="pin=True needs n_workers"):
        _core_sets(3, 1, True)
    with pytest.raises(ValueError, match="pin=True needs n_workers"):  # before any worker starts
        with wb.cluster("cpu", n_workers=3, pin=True, quiet=True):
            pass
    with pytest.raises(TypeError, match="pin must be"):
        wb.cluster(pin="yes")


def _stream_intervals(dask_scheduler):
    return {w: s.interval for w, s in dask_scheduler.stream_comms.items()}


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="core binding is Linux-only")
def test_workers_bound_to_their_cores_and_a_restarted_worker_too():
    sets = _core_sets(2, 1, None)
    if sets is None:
        pytest.skip("fewer than two cores: the workers stay unbound")
    from workbench import faults

    def check(client):
        by_name = dict(client.run(_thread_cores).values())
        # every thread of worker i, those its first SPMD group started included, on share i only
        assert by_name == {i: [tuple(sets[i])] for i in range(2)}
        assert sorted(worker_cores(client).values()) == sets
        # and messages to every worker, the replacement's too, wait at most 2 ms to be batched
        streams = client.run_on_scheduler(_stream_intervals)
        assert sorted(streams) == worker_addresses(client) and max(streams.values()) <= 0.002
        assert client.scheduler_comm.interval <= 0.002
        assert client.direct_to_workers   # results come from the workers, not through the scheduler

    with wb.cluster("cpu", n_workers=2, quiet=True) as client:
        assert wb.comms.spmd(lambda comm, _: comm.allgather(comm.rank), [None, None], client=client)[0] == [0, 1]
        check(client)
        lost = worker_addresses(client)[1]
        faults.kill_worker(client, lost)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            alive = worker_addresses(client)
            if len(alive) == 2 and lost not in alive:
                break
            time.sleep(0.2)
        check(client)  # the nanny's replacement took its name, and with it the same cores
    with wb.cluster("cpu", n_workers=2, quiet=True, pin=False) as client:
        assert set(map(tuple, worker_cores(client).values())) == {tuple(sorted(os.sched_getaffinity(0)))}


def test_cluster_start_connect_and_clean_shutdown():
    from distributed import LocalCluster

    with wb.cluster("cpu", n_workers=2, quiet=True) as client:
        assert len(worker_addresses(client)) == 2
        assert client.dashboard_link.startswith("http")
        assert client.submit(lambda x: x + 1, 1).result() == 2
        # workers sample their stacks every 100 ms, not dask's 10 ms (which slowed the SPMD kernels)
        assert set(client.run(dask.config.get, "distributed.worker.profile.interval").values()) == {"100ms"}
        # and allocate with glibc's defaults: dask's MALLOC_TRIM_THRESHOLD_ turned off its adaptive mmap
        # threshold (every temporary a fresh mmap; kNN, BFS and coloring ran ~1.3x slower in workers)
        assert set(client.run(_environ, "MALLOC_TRIM_THRESHOLD_").values()) == {None}
        lc = client.cluster
    assert client.status == "closed"
    assert lc.status.name == "closed"

    with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=":0", processes=False) as lc:
        with wb.cluster(address=lc.scheduler_address, quiet=True) as client:
            assert client.submit(sum, [1, 2]).result() == 3
        assert client.status == "closed"
        # connecting does not own the cluster: it is still up
        assert len(lc.scheduler.workers) == 1


def _faults_reallocating(nbytes: int = 1 << 20) -> int:
    """This thread's page faults for writing a buffer of ``nbytes`` that it just wrote and freed."""
    import resource

    np.ones(nbytes // 8)
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    np.ones(nbytes // 8)
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before


def test_workers_started_elsewhere_get_glibcs_adaptive_allocator_back():
    # a plain LocalCluster's nanny starts its workers with dask's MALLOC_TRIM_THRESHOLD_: every freed buffer
    # of 128 KiB or more was unmapped, and the next one faulted in page by page (BFS 40 against 33 ms a call)
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=":0") as lc, Client(lc) as client:
        assert list(client.run(_faults_reallocating).values())[0] > 100
        assert np.asarray(wb.fftn(np.ones((4, 4)), client=client))[0, 0] == 16   # registers the comms plugin
        assert list(client.run(_faults_reallocating).values())[0] < 16


def test_script_without_main_guard_fails_fast_and_says_why(tmp_path):
    # spawned workers import the script: unguarded, each would start a cluster of its own and wait forever
    script = tmp_path / "unguarded.py"
    script.write_text("import workbench as wb\nwith wb.cluster(n_workers=1, quiet=True) as c:\n    print('ran')\n")
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode != 0 and "ran" not in run.stdout
    assert '__name__ == "__main__"' in run.stderr


def test_config_section_lost_to_a_dask_config_block_is_put_back(monkeypatch):
    # `with dask.config.set(...)` around distributed's first import drops its section on exit; a cluster then
    # failed with KeyError: 'distributed'.  The defaults come back, values set since stay.
    from workbench.cluster import _restore_distributed_defaults

    monkeypatch.delitem(dask.config.config, "distributed")
    monkeypatch.setitem(dask.config.config, "array", {**dask.config.config.get("array", {}), "chunk-size": "7MiB"})
    _restore_distributed_defaults()
    assert dask.config.get("distributed.scheduler.allowed-failures") == 3
    assert dask.config.get("distributed.worker.profile.interval") == "10ms"
    assert dask.config.get("array.chunk-size") == "7MiB"


def test_auto_backend_falls_back_to_cpu():
    if backend.gpu_available()[0]:
        pytest.skip("a GPU is present")
    from workbench.cluster import backend_of

    with wb.cluster("auto", n_workers=1, quiet=True) as client:
        assert backend_of(client) == "cpu"


@pytest.mark.gpu
def test_gpu_cluster_one_worker_per_device():
    import cupy

    with wb.cluster("gpu", quiet=True) as client:
        n = cupy.cuda.runtime.getDeviceCount()
        assert len(worker_addresses(client)) == n


def test_empty_pools_large_host_buffers():
    from workbench.backend import _HOST_POOL, empty

    _HOST_POOL.clear()
    a = empty((1 << 21, 2), np.float32)           # 16 MiB: pooled
    assert a.shape == (1 << 21, 2) and a.dtype == np.float32 and a.flags.writeable
    addr = a.ctypes.data
    view = a[::3]
    del a
    assert _HOST_POOL._held == 0                  # a live view keeps the buffer leased
    view[:] = 1.0
    del view
    assert _HOST_POOL._held == 16 << 20
    b = empty((1 << 21,), np.float64)             # same rounded size: the same memory again
    assert b.ctypes.data == addr and _HOST_POOL._held == 0
    small = empty((10, 3))
    assert isinstance(small, np.ndarray) and small.ctypes.data % 64 == 0 and b.ctypes.data % 64 == 0
    del b
    _HOST_POOL.clear()


def _axpy_on_worker(n: int) -> tuple:
    import _cuda_axpy
    import numba

    from workbench.backend import device_kind, launch, synchronize

    x, y, out = np.arange(n, dtype=np.float64), np.ones(n), np.zeros(n)
    if device_kind() == "cpu":
        with pytest.raises(RuntimeError, match="device path"):
            launch(_cuda_axpy.axpy, n, 2.0, x, y, out)
    else:
        launch(_cuda_axpy.axpy, n, 2.0, x, y, out)
        synchronize(out)
    return device_kind(), bool(numba.config.ENABLE_CUDASIM), out


def test_gpu_sim_cluster_runs_device_kernels_in_the_simulator(clients):
    import os

    from workbench.cluster import backend_of

    before = {k: os.environ.get(k) for k in ("NUMBA_ENABLE_CUDASIM", "WORKBENCH_BACKEND")}
    client = clients(2, backend="gpu-sim")
    assert backend_of(client) == "gpu-sim"
    got = client.run(_axpy_on_worker, 300)     # grid-stride: 64 simulated threads cover 300 items
    assert len(got) == 2
    for kind, sim, out in got.values():
        assert (kind, sim) == ("gpu-sim", True)
        np.testing.assert_array_equal(out, 2.0 * np.arange(300) + 1.0)
    # the simulator is the workers' business: the client's environment is as it was
    assert {k: os.environ.get(k) for k in before} == before
    # and a CPU cluster's workers take the host path
    kind, sim, _ = next(iter(clients(1).run(_axpy_on_worker, 4).values()))
    assert kind == "cpu" and not sim


def test_gpu_workers_spawn_without_numbas_low_occupancy_warning_unless_the_user_chose(monkeypatch):
    from workbench.cluster import _worker_environ

    key = "distributed.nanny.pre-spawn-environ.NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS"
    monkeypatch.delenv("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", raising=False)
    with _worker_environ("gpu"):
        assert dask.config.get(key) == "0"
    for kind in ("cpu", "gpu-sim"):
        with _worker_environ(kind):
            assert dask.config.get(key, None) is None
    monkeypatch.setenv("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "1")
    with _worker_environ("gpu"):
        assert dask.config.get(key, None) is None
    assert os.environ["NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS"] == "1"


def test_gpu_sim_cluster_ignores_another_clusters_values_in_the_environment(monkeypatch):
    # what a CPU cluster's nanny leaves in the client's os.environ when it restarts a lost worker
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "0")
    monkeypatch.setenv(backend.ENV_DEVICE, "cpu")
    with wb.cluster("gpu-sim", n_workers=1, quiet=True) as client:
        kind, sim, _ = next(iter(client.run(_axpy_on_worker, 4).values()))
    assert (kind, sim) == ("gpu-sim", True)


def test_gpu_sim_needs_one_thread_per_worker():
    with pytest.raises(ValueError, match="threads_per_worker=1"):
        wb.cluster("gpu-sim", n_workers=1, threads_per_worker=2)


def test_cluster_start_lives_until_close():
    cm = wb.cluster("cpu", n_workers=1, quiet=True)
    assert "not started" in repr(cm)
    with pytest.raises(ValueError, match="was not started"):          # the cluster object passed as client=
        wb.fftn(np.ones((4, 4)), client=cm)
    with dask.config.set({"distributed.worker.profile.interval": "20ms",
                          "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": 131072}):
        client = cm.start()
    assert cm.start() is client                    # idempotent
    assert np.asarray(wb.fftn(np.ones((4, 4)), client=cm))[0, 0] == 16   # started: its client runs it
    assert client.submit(lambda: 41 + 1).result() == 42
    # a profile interval the user chose reaches the workers unchanged
    assert list(client.run(dask.config.get, "distributed.worker.profile.interval").values()) == ["20ms"]
    assert list(client.run(_environ, "MALLOC_TRIM_THRESHOLD_").values()) == ["131072"]
    assert list(client.run(_faults_reallocating).values())[0] > 100   # and stays in force
    cm.close()
    assert client.status == "closed"
    cm.close()                                      # idempotent
    # a kernel handed the closed client says so, not "IOLoop is closed" from inside distributed
    with pytest.raises(ValueError, match="client is closed"):
        wb.distribute(np.ones(4), client=client)
    with pytest.raises(ValueError, match="client is closed"):
        wb.fftn(np.ones((4, 4)), client=client)


def test_a_second_local_cluster_says_the_first_still_runs(client, capsys):
    # a notebook cell that starts a cluster, run twice, left the first one's workers running unseen
    with wb.cluster("cpu", n_workers=1):
        err = capsys.readouterr().err
    assert "note: " in err and client.dashboard_link in err
    cm = wb.cluster("cpu", n_workers=1, quiet=True)
    closed = cm.start().dashboard_link
    cm.close()
    with wb.cluster("cpu", n_workers=1):
        err = capsys.readouterr().err
    assert client.dashboard_link in err and closed not in err   # a closed one is not listed


def test_a_close_that_does_not_end_is_bounded_and_kills_the_workers_left():
    # a nanny closed while it restarts a killed worker waits for it with no timeout: the close is bounded
    # and the worker processes left are killed
    from types import SimpleNamespace

    from workbench.cluster import _close_local

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    asked = []

    def close(timeout=None):
        asked.append(timeout)
        raise TimeoutError("nanny waits for its worker")

    t0 = time.monotonic()
    _close_local(SimpleNamespace(close=close, workers={0: SimpleNamespace(pid=child.pid)}), timeout=0.5)
    assert child.wait(timeout=10) == -9 and time.monotonic() - t0 < 10
    assert asked == [0.5]


def test_a_scatter_to_a_worker_that_is_gone_is_a_lost_worker_soon(clients):
    from workbench.comms import WorkerLostError
    from workbench.partition.placement import _scatter_by_socket

    client = clients(2)
    t0 = time.monotonic()
    with pytest.raises(WorkerLostError, match="left the cluster") as e:
        _scatter_by_socket(client, np.ones(4), "tcp://127.0.0.1:9")   # no worker there: distributed waited 30 s
    assert e.value.midway and time.monotonic() - t0 < 15
