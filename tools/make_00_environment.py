"""Writes notebooks/00_environment.ipynb (run from the repo root)."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from nbgen import write_notebook  # noqa: E402

cells = [
("md", """# 00 · Environment: the machine every figure is measured on

Measures the cluster this run uses — per-worker memory bandwidth (STREAM triad, all workers at once),
the scheduler's task round trip, and `workbench.comms` worker-to-worker latency and bandwidth by message size —
so every kernel's numbers can be read against the hardware and the communication floor.
The gap between the scheduler round trip and a comms round is why the iterative kernels run SPMD (DESIGN rule 2).

**Reproduces:** no paper; the bandwidth and latency floor every kernel's figures are read against.

**Rerun:** `python -m workbench run environment --profile ci` (seconds; `--profile laptop` for the full sizes), """
"""every notebook with `make figures`; here: `make lab`, then *Run ▸ Run All Cells*."""),
("params", """# Parameters (papermill injects the profile's values below this cell)
backend = "cpu"
n_workers = 2
address = None               # connect to an existing scheduler instead of starting one
stream_n = 1 << 25          # float64 elements per STREAM array (256 MiB each)
stream_repeat = 5
roundtrip_repeat = 50
pingpong_max_log2 = 24
pingpong_repeat = 10
output_dir = "."
profile = "laptop\""""),
("code", """import numpy as np
import pandas as pd
import matplotlib
import matplotlib.pyplot as plt
import workbench as wb
from workbench.cluster import worker_cores
from IPython.display import Markdown, display

cluster = wb.cluster(backend=backend, n_workers=n_workers, address=address)
client = cluster.start()   # lives as long as the kernel; the last cell closes it
display(Markdown(f"**Dask dashboard:** [{client.dashboard_link}]({client.dashboard_link})"))
# each local CPU worker of a cluster with two or more runs on its own share of the cores (wb.cluster's pin=)
display(Markdown("**Worker cores:** " + ", ".join(f"`{w}` {c}" for w, c in sorted(worker_cores(client).items()))))
client"""),
("md", "## Memory bandwidth: STREAM triad on every worker at once"),
("code", """stream = wb.bench.stream_triad(client, n=stream_n, repeat=stream_repeat)
per_worker = pd.DataFrame({"worker": range(len(stream["per_worker_gbps"])), "gbps": stream["per_worker_gbps"]})
its = stream["iteration_gbps"]   # the host's bandwidth drifts: the spread says how far to trust one figure
print(f"aggregate STREAM triad: {stream['aggregate_gbps']:.1f} GB/s over {len(per_worker)} workers "
      f"(median of {len(its)} iterations, {min(its):.1f}-{max(its):.1f})")
assert stream["aggregate_gbps"] > 0
per_worker"""),
("md", "## Scheduler round trip vs. a comms round"),
("code", """rt = wb.bench.scheduler_roundtrip(client, repeat=roundtrip_repeat)
sizes = [8] + [1 << p for p in range(10, pingpong_max_log2 + 1, 2)]
pp = pd.DataFrame(wb.bench.comms_pingpong(client, sizes=sizes, repeat=pingpong_repeat))
print(f"scheduler task round trip: {rt['median_s'] * 1e3:.2f} ms (median of {roundtrip_repeat})")
if len(pp):
    print(f"comms one-way latency (8 B): {pp.one_way_s.iloc[0] * 1e3:.3f} ms; "
          f"peak bandwidth {pp.gbps.max():.2f} GB/s at {pp.bytes[pp.gbps.idxmax()]:,} B")
pp"""),
("code", """rows = [{"metric": "stream_triad_aggregate_gbps", "value": stream["aggregate_gbps"]},
        {"metric": "scheduler_roundtrip_s", "value": rt["median_s"]}]
rows += [{"metric": "stream_triad_aggregate_min_gbps", "value": min(its)},
         {"metric": "stream_triad_aggregate_max_gbps", "value": max(its)}]
rows += [{"metric": f"stream_triad_worker{i}_gbps", "value": g} for i, g in enumerate(stream["per_worker_gbps"])]
rows += [{"metric": "comms_one_way_s", "bytes": int(r.bytes), "value": r.one_way_s} for r in pp.itertuples()]
rows += [{"metric": "comms_gbps", "bytes": int(r.bytes), "value": r.gbps} for r in pp.itertuples()]
metrics = pd.DataFrame(rows).assign(n_workers=n_workers, backend=backend, profile=profile)
wb.experiment.save_metrics(metrics, "environment", output_dir)
metrics.head()"""),
("code", """fig, axes = plt.subplots(1, 3, figsize=(14, 4))
ax = axes[0]
ax.bar(per_worker.worker.astype(str), per_worker.gbps, color="C0")
ax.set(xlabel="worker", ylabel="GB/s", title=f"STREAM triad (aggregate {stream['aggregate_gbps']:.1f} GB/s)")
ax = axes[1]
if len(pp):
    ax.loglog(pp.bytes, pp.one_way_s * 1e3, "o-", label="comms one-way (worker↔worker)")
ax.axhline(rt["median_s"] * 1e3, color="C3", ls="--", label="scheduler task round trip")
ax.set(xlabel="message bytes", ylabel="ms", title="Latency")
ax.legend()
ax = axes[2]
if len(pp):
    ax.semilogx(pp.bytes, pp.gbps, "o-")
ax.set(xlabel="message bytes", ylabel="GB/s", title="comms bandwidth (ping-pong)")
fig.suptitle(f"{n_workers} {backend} workers · profile {profile}")
fig.tight_layout()
wb.experiment.save_figure(fig, "environment", output_dir)"""),
("code", """cluster.close()   # frees the workers now and writes the run's Dask performance report"""),
]
write_notebook("notebooks/00_environment.ipynb", cells)
