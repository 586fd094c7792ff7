"""Benchmark: distributed isotropic Ripley's K vs scipy cKDTree.count_neighbors
(uncorrected pair counts only), astropy RipleysKEstimator and pointpats.k.

Headline (issue #5): 1 M uniform points in the unit square, 20 radii up to
0.02, isotropic correction, on the README's path: the host points distributed
once with ``wb.distribute(pts)`` (default arguments), then ``wb.ripley_k`` on
them: ours must be >= 1.5x faster than ``cKDTree.count_neighbors`` on the host
points in the same run.

Run alone: ``python benchmarks/bench_ripley.py [ci|laptop]``.
"""

from __future__ import annotations

import numpy as np

import workbench as wb
from workbench.bench import measure
from workbench.cluster import worker_addresses

TARGET = 1.5

PROFILES = {
    "ci": {"n": 20_000, "r_max": 0.02, "n_peer": 500, "repeat": 1},
    "laptop": {"n": 1_000_000, "r_max": 0.02, "n_peer": 10_000, "repeat": 3},
    "gpu": {"n": 4_000_000, "r_max": 0.01, "n_peer": 10_000, "repeat": 3},
}


def _ckdtree_counts(pts: np.ndarray, radii: np.ndarray) -> np.ndarray:
    from scipy.spatial import cKDTree

    tree = cKDTree(pts)
    return tree.count_neighbors(tree, radii)


def run(client, profile: str = "laptop") -> list[dict]:
    """Time ours and the peers on the same points; tidy rows with ``speedup`` = peer / ours."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {sorted(PROFILES)}, got {profile!r}")
    p = PROFILES[profile]
    radii = np.linspace(p["r_max"] / 20, p["r_max"], 20)
    window = (0.0, 1.0, 0.0, 1.0)
    n_workers = len(worker_addresses(client))
    rows = []

    # headline: 1 M points, distributed once, vs cKDTree on the same host array
    pts = np.random.default_rng(0).random((p["n"], 2))
    P = wb.distribute(pts, client=client)
    ours = measure(lambda: wb.ripley_k(P, radii, window=window, client=client), name="workbench ripley_k isotropic",
                   warmup=1, repeat=p["repeat"], keep_value=True)
    res = ours.value
    peer = measure(lambda: _ckdtree_counts(pts, radii), name="scipy cKDTree.count_neighbors (uncorrected)",
                   warmup=0, repeat=max(1, p["repeat"] - 1), keep_value=True)
    # the same pairs: cKDTree counts ordered pairs including i == j
    pairs_match = int(peer.value[-1]) - p["n"] == res.stats["pairs_counted"]
    labels = {"kernel": "ripley", "n": p["n"], "r_max": p["r_max"], "n_workers": n_workers, "profile": profile}
    rows.append(ours.row(role="ours", speedup=1.0, pairs=res.stats["pairs_counted"], path="README: wb.distribute(pts)",
                         bytes_moved=res.stats["bytes_moved"], **labels))
    speedup = peer.median / ours.median
    rows.append(peer.row(role="peer", speedup=speedup, target=TARGET, meets_target=bool(speedup >= TARGET),
                         pairs_match=pairs_match, **labels))

    # single-node estimators at a size they finish quickly, same points for all
    from astropy.stats import RipleysKEstimator
    from pointpats import distance_statistics as ppd

    small = np.random.default_rng(1).random((p["n_peer"], 2))
    Ps = wb.distribute(small, client=client)
    labels = {**labels, "n": p["n_peer"]}
    t_ours = measure(lambda: wb.ripley_k(Ps, radii, window=window, client=client), name="workbench ripley_k isotropic",
                     warmup=1, repeat=3)
    rows.append(t_ours.row(role="ours", speedup=1.0, **labels))
    est = RipleysKEstimator(area=1.0, x_max=1.0, y_max=1.0, x_min=0.0, y_min=0.0)
    for name, fn in (("astropy RipleysKEstimator ripley", lambda: est(small, radii, mode="ripley")),
                     ("pointpats k (uncorrected)", lambda: ppd.k(small, support=radii)),
                     ("scipy cKDTree.count_neighbors (uncorrected)", lambda: _ckdtree_counts(small, radii))):
        t = measure(fn, name=name, warmup=0, repeat=1)
        rows.append(t.row(role="peer", speedup=t.median / t_ours.median, **labels))
    return rows


if __name__ == "__main__":
    wb.bench.script_main(run)
