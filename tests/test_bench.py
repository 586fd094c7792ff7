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


def test_measure_rejects_bad_repeat():
    with pytest.raises(ValueError):
        bench.measure(lambda: None, repeat=0)


def test_probes_on_a_cluster(client):
    s = bench.stream_triad(client, n=1 << 20, repeat=2)
    assert len(s["per_worker_gbps"]) == 2 and s["aggregate_gbps"] > 0
    # STREAM's aggregate (bytes over the slowest worker's time) never exceeds the sum of the workers' bests
    assert s["aggregate_gbps"] <= sum(s["per_worker_gbps"]) * (1 + 1e-12)
    rt = bench.scheduler_roundtrip(client, repeat=3)
    assert rt["median_s"] > 0
    pp = bench.comms_pingpong(client, sizes=[8, 1 << 16], repeat=2)
    assert [r["bytes"] for r in pp] == [8, 1 << 16] and all(r["one_way_s"] > 0 for r in pp)


def test_script_main_runs_a_benchmark_on_its_own_cluster(capsys):
    from workbench.cluster import worker_addresses

    def run(client, profile="laptop"):
        return [{"name": f"{profile} on {len(worker_addresses(client))}", "median_s": 0.5, "speedup": 2.0}]

    rows = bench.script_main(run, ["ci", "--workers", "1"])
    assert rows[0]["name"] == "ci on 1"
    out = capsys.readouterr().out
    assert "ci on 1" in out and "speedup" in out
