"""SPMD collectives agree with numpy on 1-4 ranks; failures fail fast."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from workbench import comms
from workbench.cluster import worker_addresses


def _collectives(comm, seed):
    rng = np.random.default_rng(seed + comm.rank)
    x = rng.random(5)
    out = {"rank": comm.rank, "size": comm.size, "x": x}
    out["allreduce_sum"] = comm.allreduce(x)
    out["allreduce_max"] = comm.allreduce(x, op="max")
    out["allgather"] = comm.allgather(comm.rank * 10)
    out["bcast"] = comm.bcast(x if comm.rank == comm.size - 1 else None, root=comm.size - 1)
    # alltoallv: rank r sends r+d copies of value r to rank d (variable lengths)
    got = comm.alltoallv([np.full(comm.rank + d, comm.rank) for d in range(comm.size)])
    out["alltoallv"] = got
    nbrs = {r: np.array([comm.rank, r]) for r in {(comm.rank - 1) % comm.size, (comm.rank + 1) % comm.size}}
    out["nbr"] = comm.neighbor_exchange(nbrs)
    out["gather"] = comm.gather(comm.rank, root=0)
    # point to point in a ring, twice with the same tag: order must hold
    if comm.size > 1:
        dst, src = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
        comm.send(dst, "first", tag="ring")
        comm.send(dst, "second", tag="ring")
        out["ring"] = (comm.recv(src, tag="ring"), comm.recv(src, tag="ring"))
    sub = comm.split(comm.rank % 2)
    out["sub"] = (sub.rank, sub.size, sub.allreduce(comm.rank))
    comm.barrier()
    return out


@pytest.fixture(scope="module")
def client4(clients):
    return clients(4)


def test_message_streams_send_without_dask_batching_delay(client4):
    # dask holds a stream's messages until 2-10 ms after its last send; a kernel call is a few messages in a
    # row, so every stream of a workbench cluster sends within STREAM_INTERVAL (no timing asserted here)
    from workbench.cluster import STREAM_INTERVAL

    comms.ensure_registered(client4)
    assert client4.scheduler_comm.interval <= STREAM_INTERVAL
    on_scheduler = client4.run_on_scheduler(
        lambda dask_scheduler: [s.interval for s in [*dask_scheduler.stream_comms.values(),
                                                     *dask_scheduler.client_comms.values()]])
    assert len(on_scheduler) >= 5 and max(on_scheduler) <= STREAM_INTERVAL
    on_workers = client4.run(lambda dask_worker: dask_worker.batched_stream.interval)
    assert len(on_workers) == 4 and max(on_workers.values()) <= STREAM_INTERVAL


@pytest.mark.parametrize("n_ranks", [1, 2, 3, 4])
def test_collectives_match_numpy(client4, n_ranks):
    addrs = worker_addresses(client4)[:n_ranks]
    res = comms.spmd(_collectives, [7] * n_ranks, client=client4, workers=addrs)
    xs = [r["x"] for r in res]
    for r, out in enumerate(res):
        assert out["rank"] == r and out["size"] == n_ranks
        total = xs[0].copy()
        for x in xs[1:]:
            total = total + x
        np.testing.assert_array_equal(out["allreduce_sum"], total)  # same order on every rank: bitwise equal
        np.testing.assert_array_equal(out["allreduce_max"], np.max(xs, axis=0))
        assert out["allgather"] == [10 * i for i in range(n_ranks)]
        np.testing.assert_array_equal(out["bcast"], xs[-1])
        for s, arr in enumerate(out["alltoallv"]):
            np.testing.assert_array_equal(arr, np.full(s + r, s))
        for s, arr in out["nbr"].items():
            np.testing.assert_array_equal(arr, [s, r])
        assert out["gather"] == (list(range(n_ranks)) if r == 0 else None)
        if n_ranks > 1:
            assert out["ring"] == ("first", "second")
        evens = [i for i in range(n_ranks) if i % 2 == r % 2]
        assert out["sub"] == (evens.index(r), len(evens), sum(evens))


def _bytes(comm, n):
    comm.allgather(np.zeros(n))
    return comm.stats["bytes_sent"]


def test_bytes_are_counted(client4):
    res = comms.spmd(_bytes, [1000] * 4, client=client4)
    assert res == [3 * 8000] * 4


def _block_of(comm, rows):
    return np.full((rows, 3), float(comm.rank)), {"rows": rows}


def test_ranks_blocks_are_a_dask_arrays_chunks(client4):
    # chunk_index keys each rank as a chunk of one array: array_of makes it from the futures (persisting or
    # computing it runs no task); rank 2 holds no chunk; keys that are not a whole grid are refused
    from distributed import get_task_stream, wait

    from workbench.partition import array_of

    futs = comms.run_spmd(_block_of, [2, 1, 0, 3], client=client4, publish_info=True,
                          chunk_index=[(0, 0), (1, 0), None, (2, 0)])
    comms.wait_group(futs)
    blocks, infos = comms.split_results(futs)
    assert [i["rows"] for i in infos] == [2, 1, 0, 3]
    keep = [blocks[r] for r in (0, 1, 3)]
    x = array_of(keep, ((2, 1, 3), (3,)), np.float64)
    with get_task_stream(client4) as ts:
        wait(client4.persist(x))
    assert not ts.data
    assert np.array_equal(x.compute(), np.repeat([0.0, 1.0, 3.0], [2, 1, 3])[:, None] * np.ones(3))
    with pytest.raises(ValueError, match="one per chunk"):
        array_of(keep[:2], ((2, 1, 3), (3,)), np.float64)
    with pytest.raises(ValueError, match="one per chunk"):
        array_of([blocks[2]], ((1,), (3,)), np.float64)
    with pytest.raises(ValueError, match="chunk_index"):
        comms.run_spmd(_block_of, [1] * 4, client=client4, chunk_index=[(0,)])


def test_a_kernel_result_comes_home_through_to_host(client4, monkeypatch):
    # np.asarray of a result brings it to the host on every back end: the computed array passes through
    # backend.to_host (cupy refuses numpy's implicit conversion, so dask's own __array__ raised on GPU workers)
    from workbench import backend
    from workbench.partition import array_of

    futs = comms.run_spmd(_block_of, [2, 1, 1, 1], client=client4, publish_info=True,
                          chunk_index=[(0, 0), (1, 0), (2, 0), (3, 0)])
    comms.wait_group(futs)
    x = array_of(comms.split_results(futs)[0], ((2, 1, 1, 1), (3,)), np.float64)
    seen = []
    monkeypatch.setattr(backend, "to_host", lambda a: seen.append(type(a)) or a * 10)
    assert np.array_equal(np.asarray(x), 10 * np.repeat([0.0, 1.0, 2.0, 3.0], [2, 1, 1, 1])[:, None] * np.ones(3))
    assert seen == [np.ndarray]
    assert np.asarray(x, dtype=np.float32).dtype == np.float32


def _fail_on_rank1(comm, _):
    if comm.rank == 1:
        raise ZeroDivisionError("rank 1 exploded")
    comm.recv(1, tag="never")


def test_failing_rank_fails_the_group_fast(client4):
    addrs = worker_addresses(client4)[:3]
    t0 = time.perf_counter()
    with pytest.raises(ZeroDivisionError, match="rank 1 exploded"):   # the cause, not an aborted peer's error
        comms.spmd(_fail_on_rank1, [None] * 3, client=client4, workers=addrs, timeout=120)
    assert time.perf_counter() - t0 < 30


def _slow_peer(comm, _):
    if comm.rank == 0:
        return comm.recv(1, tag="x", timeout=0.5)
    time.sleep(2)
    return None


def test_recv_timeout_raises(client4):
    addrs = worker_addresses(client4)[:2]
    with pytest.raises((comms.CommsTimeoutError, comms.PeerFailedError), match="waited|aborted"):
        comms.spmd(_slow_peer, [None] * 2, client=client4, workers=addrs)


def _die_once(comm, marker):
    # First attempt: rank 1's worker process dies mid-group; the rerun succeeds.
    if comm.rank == 1 and not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)
    return comm.allreduce(1)


def test_killed_worker_fails_fast_and_group_reruns(tmp_path):
    from workbench import cluster

    marker = str(tmp_path / "died")
    with cluster("cpu", n_workers=2, quiet=True) as client:
        t0 = time.perf_counter()
        with pytest.raises(comms.WorkerLostError):
            comms.spmd(_die_once, [marker, marker], client=client, retries=0, timeout=300)
        assert time.perf_counter() - t0 < 60  # the comms timeout is 300 s: this is fail-fast
        client.wait_for_workers(2, timeout=60)  # the nanny restarts the dead worker
        assert comms.spmd(_die_once, [marker, marker], client=client) == [2, 2]

    os.remove(marker)
    with cluster("cpu", n_workers=2, quiet=True) as client:
        assert comms.spmd(_die_once, [marker, marker], client=client, retries=2) == [2, 2]


def _large_payloads(comm, n):
    """Payloads over the same-host threshold: alltoall (distinct per peer), bcast
    (one object, several peers), a non-contiguous array and a sparse matrix."""
    import scipy.sparse as sp

    parts = [np.full(n, 100 * comm.rank + d, dtype=np.float64) for d in range(comm.size)]
    got = comm.alltoall(parts)
    for p in parts:
        p[:] = -1  # the caller owns its buffers again once the send returned
    big = comm.bcast(np.arange(n, dtype=np.int64) if comm.rank == 0 else None, root=0)
    strided = comm.allgather(np.arange(2 * n, dtype=np.float32)[::2] + comm.rank)
    A = comm.bcast(sp.random(2000, 2000, density=0.05, format="csr", random_state=1) if comm.rank == 0 else None)
    return {"a2a": [float(g[0]) for g in got] + [float(g[-1]) for g in got],
            "big_ok": bool((big == np.arange(n)).all()),
            "strided": [float(s[1]) for s in strided], "A_nnz": A.nnz, "A_sum": float(A.sum()),
            "writable": bool(got[-1].flags.writeable), "pulled": comm.stats["bytes_pulled"]}


@pytest.mark.parametrize("n_ranks", [2, 3])
def test_large_payloads_same_host(client4, n_ranks):
    import scipy.sparse as sp

    addrs = worker_addresses(client4)[:n_ranks]
    n = 1 << 18  # 2 MiB of float64: over the pull threshold
    A = sp.random(2000, 2000, density=0.05, format="csr", random_state=1)
    # the second group on the same workers finds its pull peers without a collective (remembered)
    for _ in range(2):
        res = comms.spmd(_large_payloads, [n] * n_ranks, client=client4, workers=addrs)
        assert tuple(addrs) in client4._workbench_groups
        for r, out in enumerate(res):
            # its own part is its own (overwritten) buffer; the peers' parts are copies
            assert out["a2a"] == [-1.0 if s == r else 100.0 * s + r for s in range(n_ranks)] * 2
            assert out["big_ok"] and out["writable"]
            assert out["strided"] == [2.0 + s for s in range(n_ranks)]
            assert out["A_nnz"] == A.nnz and out["A_sum"] == pytest.approx(A.sum())
        if comms._READV is not None:  # Linux with cross-memory attach allowed: the bytes did not cross a socket
            assert sum(out["pulled"] for out in res) > 0


def _result_of(comm, n):
    return {"rank": comm.rank, "ids": np.arange(n, dtype=np.int64) + comm.rank, "opaque": _Opaque(comm.rank)
            if n == 0 else None}


def _result_slots():
    return len(comms.RESULTS.slots)


@pytest.mark.parametrize("n", [0, 1 << 18])    # a socket-sized result, and one over the pull threshold
def test_fetch_group_takes_results_from_the_workers(client4, monkeypatch, n):
    addrs = worker_addresses(client4)[:3]
    want = [{"rank": r, "ids": np.arange(n) + r} for r in range(3)]
    for fetch in (True, False):
        futs = comms.run_spmd(_result_of, [n] * 3, client=client4, workers=addrs, fetch=fetch)
        if fetch:   # no word from the scheduler, no client.gather: straight from the ranks' workers
            with monkeypatch.context() as m:
                m.setattr(comms, "wait_group", None)
                m.setattr(comms, "gather_results", None)
                got = comms.fetch_group(futs)
        else:
            got = comms.fetch_group(futs)
        for g, w in zip(got, want, strict=True):
            assert g["rank"] == w["rank"] and np.array_equal(g["ids"], w["ids"]) and g["ids"].dtype == np.int64
            assert (g["opaque"].v == w["rank"]) if n == 0 else g["opaque"] is None
        del futs
    # the workers let the results go once taken
    deadline = time.monotonic() + 10
    while any(client4.run(_result_slots, workers=addrs).values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(client4.run(_result_slots, workers=addrs).values())


@pytest.mark.parametrize("n", [3, 1 << 18])    # a result sent whole, and one the client copies out of the worker
def test_fetch_group_results_come_by_lane_without_asking_the_workers(client4, monkeypatch, n):
    from workbench import _samehost

    addrs = worker_addresses(client4)[:3]
    comms.fetch_group(comms.run_spmd(_result_of, [n] * 3, client=client4, workers=addrs, fetch=True))
    assert set(addrs) <= _samehost._LANE_OK   # seen to reach the client by lane
    futs = comms.run_spmd(_result_of, [n] * 3, client=client4, workers=addrs, fetch=True)
    with monkeypatch.context() as m:   # no request to a worker, no word from the scheduler
        m.setattr(_samehost, "fetch_results", None)
        m.setattr(comms, "wait_group", None)
        got = comms.fetch_group(futs)
    assert [g["rank"] for g in got] == [0, 1, 2]
    assert all(np.array_equal(g["ids"], np.arange(n) + r) for r, g in enumerate(got))
    del futs
    deadline = time.monotonic() + 10   # the client said it took them: the workers let them go
    while any(client4.run(_result_slots, workers=addrs).values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(client4.run(_result_slots, workers=addrs).values())


def test_fetch_group_asks_for_results_the_lane_cannot_bring(client4, monkeypatch):
    from workbench import _samehost

    addrs = worker_addresses(client4)[:3]
    # the client seen as on another host: the ranks keep their results, the client asks once they end
    # (even for workers that reached it by lane before), never taking the slow way
    monkeypatch.setattr(_samehost, "host_key", lambda: "another-host")
    monkeypatch.setattr(_samehost, "_LANE_OK", set(addrs))
    futs = comms.run_spmd(_result_of, [1 << 18] * 3, client=client4, workers=addrs, fetch=True, timeout=20)
    monkeypatch.setattr(comms, "wait_group", None)
    got = comms.fetch_group(futs)
    assert all(np.array_equal(g["ids"], np.arange(1 << 18) + r) for r, g in enumerate(got))
    deadline = time.monotonic() + 10
    while any(client4.run(_result_slots, workers=addrs).values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(client4.run(_result_slots, workers=addrs).values())


def test_fetch_group_raises_the_ranks_error(client4):
    addrs = worker_addresses(client4)[:3]
    futs = comms.run_spmd(_fail_on_rank1, [None] * 3, client=client4, workers=addrs, timeout=120, fetch=True)
    with pytest.raises(ZeroDivisionError, match="rank 1 exploded"):
        comms.fetch_group(futs)
    assert not any(client4.run(_result_slots, workers=addrs).values())


class _Opaque:
    """Not a host-only payload: takes the rpc path even between same-host workers."""

    def __init__(self, v):
        self.v = v


def _lane_traffic(comm, _):
    small = comm.allgather(np.full(5, comm.rank))
    opaque = comm.allgather(_Opaque(comm.rank))
    for _ in range(20):
        comm.allreduce(1)
    return {"small": [int(x[0]) for x in small], "opaque": [o.v for o in opaque],
            "lane": comm.stats["messages_by_lane"], "sent": comm.stats["messages_sent"]}


def test_small_messages_take_the_lane(client4):
    from workbench import _samehost

    addrs = worker_addresses(client4)[:3]
    res = comms.spmd(_lane_traffic, [None] * 3, client=client4, workers=addrs)
    for out in res:
        assert out["small"] == [0, 1, 2] and out["opaque"] == [0, 1, 2]
        if _samehost.host_key() is not None:  # Linux: every host payload skipped the event loop
            assert out["lane"] == out["sent"] - 2  # the two _Opaque messages went by rpc


def _private_lane():
    """A lane listener of this test's own (comms' lane keeps its handler): (address, messages, arrival event)."""
    from workbench import _samehost

    if _samehost.host_key() is None:
        pytest.skip("no same-host lane on this platform")
    got, arrived = [], threading.Event()

    def on_message(msg):
        got.append(msg)
        arrived.set()

    return _samehost._Listener(on_message).address, got, arrived


def test_lane_roundtrip_and_refusal():
    from workbench import _samehost

    address, got, arrived = _private_lane()
    big = np.arange(50_000, dtype=np.float64).reshape(250, 200)
    msg = ("deliver", "g", 0, 1, ("c", "", "ag", 1, None), {"big": big, "strided": big[:, ::2], "s": "x"})
    assert _samehost.send(address, msg, 5.0)
    assert arrived.wait(5.0)
    back = got[0][5]
    np.testing.assert_array_equal(back["big"], big)
    np.testing.assert_array_equal(back["strided"], big[:, ::2])
    assert back["s"] == "x" and got[0][:5] == msg[:5]
    # a lane nobody listens on is refused (the caller falls back to rpc), and stays refused
    assert not _samehost.send("\0workbench-lane-nobody", msg, 1.0)
    assert "\0workbench-lane-nobody" in _samehost._DEAD


def test_parcel_roundtrip_in_process():
    if comms._READV is None or not comms._can_pull(os.getpid(), int(comms._PROBE.ctypes.data)):
        pytest.skip("cross-memory attach not available here")
    obj = {"x": np.arange(300_000, dtype=np.float64).reshape(600, 500), "y": (np.ones(3, np.int8), "tag")}
    parcel, out = comms._Parcel.pack(obj, "k", "tcp://nowhere:1", 1)
    back = parcel.pull()
    np.testing.assert_array_equal(back["x"], obj["x"])
    assert back["y"][1] == "tag" and back["x"].flags.writeable
    assert comms._Parcel.pack({"tiny": np.ones(4)}, "k2", "tcp://nowhere:1", 1) is None


def test_lane_survives_an_undecodable_message():
    """A frame that does not unpickle on the receiving side is dropped; the connection keeps delivering."""
    from workbench import _samehost

    address, got, arrived = _private_lane()
    assert _samehost.send(address, ("deliver", _Unpicklable()), 5.0)
    assert _samehost.send(address, ("deliver", "after"), 5.0)
    assert arrived.wait(5.0)
    assert got == [("deliver", "after")]


class _Unpicklable:
    """Pickles on the way out, raises on the way in."""

    def __reduce__(self):
        return (_refuse, ())


def _refuse():
    raise RuntimeError("cannot be built here")
