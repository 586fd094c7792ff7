"""Timing harness and machine probes."""

from __future__ import annotations

import time

import pytest

from workbench import bench


def test_measure_counts_repeats_and_orders_stats():
    calls = []
    t = bench.measure(lambda: calls.append(time.sleep(0.01)), warmup=2, repeat=3, name="sleep")
    assert len(calls) == 5 and len(t.times) == 3
    assert t.min <= t.median <= t.max and t.min >= 0.009
    row = t.row(kernel="x")
    assert row["name"] == "sleep" and row["kernel"] == "x" and row["repeats"] == 3


def test_compare_reports_speedup_of_peers():
    rows = bench.compare(("fast", lambda: time.sleep(0.005)), [("slow", lambda: time.sleep(0.03))],
                         warmup=0, repeat=2, kernel="demo")
    assert [r["role"] for r in rows] == ["ours", "peer"]
    assert rows[1]["speedup"] > 2
    assert bench.ratio_table(rows).shape[0] == 2


def test_measure_and_compare_name_what_is_wrong():
    # each was a bare "'int' object is not callable" or "too many values to unpack", or ran (warmup=-1)
    f = lambda: 1  # noqa: E731
    with pytest.raises(TypeError, match=r"^fn must be a callable"):
        bench.measure(3)
    with pytest.raises(ValueError, match=r"^warmup must"):
        bench.measure(f, warmup=-1)
    with pytest.raises(TypeError, match=r"^peers must"):
        bench.compare(("ours", f), ("peer", f))
    with pytest.raises(TypeError, match=r"^ours must"):
        bench.compare(f, [])
    assert [r["name"] for r in bench.compare(("ours", f), [("peer", f)], repeat=1)] == ["ours", "peer"]


def test_measure_rejects_bad_repeat():
    with pytest.raises(ValueError):
        bench.measure(lambda: None, repeat=0)


def test_probes_on_a_cluster(client):
    s = bench.stream_triad(client, n=1 << 20, repeat=3)
    assert len(s["per_worker_gbps"]) == 2 and s["aggregate_gbps"] > 0
    # DESIGN rule 8: the aggregate is the median iteration's, not the best one's
    assert len(s["iteration_gbps"]) == 3
    assert s["aggregate_gbps"] == pytest.approx(sorted(s["iteration_gbps"])[1])
    # an iteration lasts until its slowest worker is done: never more than the sum of the workers' own rates
    assert s["aggregate_gbps"] <= sum(s["per_worker_gbps"]) * (1 + 1e-12)
    bad = [(bench.stream_triad, {"repeat": 0}, "repeat"), (bench.stream_triad, {"n": 0}, "n"),
           (bench.stream_triad, {"n": 10.5}, "n"), (bench.scheduler_roundtrip, {"repeat": 0}, "repeat"),
           (bench.comms_pingpong, {"repeat": 0}, "repeat"), (bench.comms_pingpong, {"sizes": (0, 8)}, "sizes")]
    for probe, kw, name in bad:
        with pytest.raises(ValueError, match=rf"^{name} must"):   # on the client, before anything runs
            probe(client, **kw)
    rt = bench.scheduler_roundtrip(client, repeat=3)
    assert rt["median_s"] > 0
    pp = bench.comms_pingpong(client, sizes=[8, 1 << 16], repeat=2)
    assert [r["bytes"] for r in pp] == [8, 1 << 16] and all(r["one_way_s"] > 0 for r in pp)


def test_measure_vs_stream_pairs_each_timed_call(client, monkeypatch):
    # a STREAM run before each timed call, none before the warm-ups; each fraction divides by its own pair
    events, figures = [], iter([10.0, 20.0, 40.0])
    real = bench.stream_triad

    def fake_triad(c, *, n, repeat):
        assert c is client and n == 1 << 16 and repeat == 2
        events.append("stream")
        return {"aggregate_gbps": next(figures)}

    monkeypatch.setattr(bench, "stream_triad", fake_triad)
    t = bench.measure_vs_stream(lambda: events.append("call") or time.sleep(0.002), 1e6, client, warmup=2, repeat=3,
                                stream_n=1 << 16, stream_repeat=2)
    assert events == ["call", "call"] + ["stream", "call"] * 3
    assert t.stream_gbps == [10.0, 20.0, 40.0]
    want = [1e6 / ti / 1e9 / s for ti, s in zip(t.times, (10.0, 20.0, 40.0), strict=True)]
    assert t.stream_fractions == pytest.approx(want)
    row = t.row(kernel="k")
    assert row["stream_fraction"] == pytest.approx(sorted(want)[1]) and row["stream_gbps"] == 20.0
    assert row["stream_fraction_min"] == pytest.approx(min(want))
    assert row["stream_fraction_max"] == pytest.approx(max(want))
    assert row["bandwidth_gbps"] == pytest.approx(1e6 / t.median / 1e9) and row["kernel"] == "k"
    assert "stream_fraction" not in bench.measure(lambda: None, repeat=1).row()
    for kw, name in (({"repeat": 0}, "repeat"), ({"stream_n": 0}, "stream_n"), ({"stream_repeat": 0}, "stream_repeat")):
        with pytest.raises(ValueError, match=rf"^{name} must"):
            bench.measure_vs_stream(lambda: None, 1e6, client, **kw)
    for nbytes in (0, -1.0, "8", True):
        with pytest.raises(ValueError, match="^nbytes must"):
            bench.measure_vs_stream(lambda: None, nbytes, client)
    # the real probe, end to end on the cluster
    monkeypatch.setattr(bench, "stream_triad", real)
    t = bench.measure_vs_stream(lambda: None, 8e6, client, warmup=0, repeat=2, stream_n=1 << 18)
    assert len(t.stream_gbps) == 2 and all(s > 0 for s in t.stream_gbps) and t.row()["stream_fraction"] > 0


def test_compare_pairs_ours_with_stream_when_given_its_bytes(client, monkeypatch):
    # ours alone gets a STREAM run before each timed call; the peers run unpaired
    events, figures = [], iter([10.0, 30.0, 20.0])
    monkeypatch.setattr(bench, "stream_triad", lambda c, *, n, repeat: events.append(("stream", n)) or
                        {"aggregate_gbps": next(figures)})
    rows = bench.compare(("ours", lambda: events.append("ours") or time.sleep(0.002)),
                         [("peer", lambda: events.append("peer"))], warmup=1, repeat=3, stream_bytes=4e6,
                         client=client, stream_n=1 << 16, kernel="k")
    s = ("stream", 1 << 16)
    assert events == ["ours", s, "ours", s, "ours", s, "ours"] + ["peer"] * 4
    ours, peer = rows
    assert ours["stream_gbps"] == 20.0 and ours["kernel"] == "k" and peer["kernel"] == "k"
    # each fraction is 4 MB over its own call's time over its own STREAM figure (10, 30 or 20 GB/s)
    assert 4e6 / ours["max_s"] / 1e9 / 30.0 * (1 - 1e-9) <= ours["stream_fraction_min"]
    assert ours["stream_fraction_min"] <= ours["stream_fraction"] <= ours["stream_fraction_max"]
    assert ours["stream_fraction_max"] <= 4e6 / ours["min_s"] / 1e9 / 10.0 * (1 + 1e-9)
    assert "stream_fraction" not in peer and "stream_fraction" not in bench.compare(
        ("ours", lambda: None), [], warmup=0, repeat=1)[0]


def test_script_main_runs_a_benchmark_on_its_own_cluster(capsys):
    from workbench.cluster import worker_addresses

    def run(client, profile="laptop"):
        return [{"name": f"{profile} on {len(worker_addresses(client))}", "median_s": 0.5, "speedup": 2.0}]

    rows = bench.script_main(run, ["ci", "--workers", "1"])
    assert rows[0]["name"] == "ci on 1"
    out = capsys.readouterr().out
    assert "ci on 1" in out and "speedup" in out


def test_peer_too_big_for_memory_is_skipped_with_its_estimate():
    calls = []
    rows = bench.compare(("ours", lambda: None),
                         [("fits", lambda: calls.append("fits"), 1 << 20),
                          ("O(n^2)", lambda: calls.append("big"), 80 * 2**30)],
                         warmup=0, repeat=1, memory_limit_bytes=2**30, n=100_000)
    assert calls == ["fits"]                      # the big peer was never called
    big = rows[2]
    assert big["name"] == "O(n^2)" and big["repeats"] == 0 and big["n"] == 100_000
    assert big["skipped"] == "skipped: would need 80.0 GiB (limit 1.0 GiB)" and big["need_gib"] == 80.0
    assert big["median_s"] != big["median_s"]     # NaN: no time for a peer that did not run
    assert "skipped" not in rows[1]


def test_peer_memory_limit_follows_the_environment(monkeypatch):
    monkeypatch.setenv(bench.ENV_PEER_MEMORY, "0.5")
    assert bench.peer_memory_limit() <= 2**29
    assert bench.memory_guard("p", 2**30).startswith("skipped: would need 1.0 GiB")
    assert bench.memory_guard("p", 2**20) is None


@pytest.mark.parametrize("value", ["lots", "0", "-1", "nan"])
def test_a_bad_peer_memory_setting_is_named(monkeypatch, value):
    monkeypatch.setenv(bench.ENV_PEER_MEMORY, value)
    with pytest.raises(ValueError, match=bench.ENV_PEER_MEMORY):
        bench.peer_memory_limit()


def test_a_label_that_is_a_row_field_is_refused():
    # it would have collided with compare's own role/speedup keywords (a TypeError from inside compare)
    calls = []
    with pytest.raises(ValueError, match="role"):
        bench.compare(("ours", lambda: calls.append(1)), [], repeat=1, role="baseline")
    assert calls == []


def test_timed_dask_call_that_runs_no_task_is_refused(client):
    import dask.array as da
    from dask.graph_manipulation import clone

    x = client.persist(da.ones(1000, chunks=250))
    same = lambda: client.persist(x + 1)                          # noqa: E731 - same graph, same keys
    with pytest.raises(bench.StaleDaskResult, match="ran no task"):
        bench.measure(same, warmup=1, repeat=2)
    with pytest.warns(RuntimeWarning, match="fresh keys"):
        bench.measure(same, warmup=1, repeat=1, on_stale="warn")
    fresh = lambda: client.persist(clone(x + 1, omit=x))          # noqa: E731
    t = bench.measure(fresh, warmup=1, repeat=2, keep_value=True)
    assert float(t.value.sum().compute()) == 2000.0


def test_ratio_spread_takes_each_headline_metric_and_the_median_round():
    """`workbench bench --rounds N`: per headline, the median/min/max of its own metric; met when the
    median round meets its target, whichever way the target points."""
    import pandas as pd

    from workbench.__main__ import _ratio_spread

    rows = ([{"kernel": "spmm", "name": "ours", "speedup": 1.0, "stream_fraction": f, "target": 0.3,
              "target_metric": "stream_fraction", "meets_target": f >= 0.3} for f in (0.2, 0.35, 0.25)]
            + [{"kernel": "coloring", "name": "colors", "speedup": float("nan"), "color_ratio": c, "target": 1.2,
                "meets_target": c <= 1.2} for c in (1.1, 1.3, 1.15)]
            + [{"kernel": "bfs", "name": "scipy", "speedup": s, "target": 3.0, "meets_target": s >= 3}
               for s in (2.9, 3.1, 3.2)])
    got = _ratio_spread(pd.DataFrame(rows)).set_index("kernel")
    assert got.loc["spmm", "metric"] == "stream_fraction" and not got.loc["spmm", "meets_target"]
    assert (got.loc["spmm", "min"], got.loc["spmm", "median"], got.loc["spmm", "max"]) == (0.2, 0.25, 0.35)
    assert got.loc["coloring", "metric"] == "color_ratio" and got.loc["coloring", "meets_target"]
    assert got.loc["bfs", "meets_target"] and got.loc["bfs", "rounds_met"] == 2 and got.loc["bfs", "rounds"] == 3
