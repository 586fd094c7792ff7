"""kNN graph benchmark: wb.knn_graph (exact and SOLANET) vs faiss IndexFlatL2 and pynndescent.

Headline (issue #8): 100k x 64 float32 Gaussian-mixture points (50 clusters),
k = 10, on the README's path: the host points distributed once with
``wb.distribute(X)`` (default arguments) on 2 workers, then ``wb.knn_graph``
called on them:

* exact mode at least 2x faster than faiss ``IndexFlatL2`` exact search with
  2 threads (``speedup`` on the faiss row, target 2.0);
* approximate mode reaches recall@10 >= 0.95 in no more time than
  pynndescent's ``NNDescent`` (2 jobs) takes for its own recall (``speedup`` on
  the pynndescent row >= 1.0 and our recall >= 0.95).

Recall is measured against our exact graph (validated on sampled rows).

Run alone::

    python benchmarks/bench_knn.py [ci|laptop]
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

import workbench as wb
from workbench.cluster import worker_addresses
from workbench.kernels.knn import gaussian_mixture, recall, validate_knn

PROFILES = {
    "ci": {"n": 4000, "d": 32, "n_clusters": 20, "k": 10, "repeat": 1, "faiss_repeat": 1, "pynn_repeat": 1},
    # issue #17 asks for the median of at least 3 after a warm-up: ours and pynndescent (the approximate target's
    # peer, ~1 s a run); faiss runs once (30-40 s a run here, 25x behind the exact mode's 2x target)
    "laptop": {"n": 100_000, "d": 64, "n_clusters": 50, "k": 10, "repeat": 3, "faiss_repeat": 1, "pynn_repeat": 3},
}
EXACT_TARGET = 2.0
RECALL_TARGET = 0.95
APPROX_TARGET = 1.0


def _faiss_flat(X: np.ndarray, k: int) -> np.ndarray:
    import faiss

    faiss.omp_set_num_threads(2)
    index = faiss.IndexFlatL2(X.shape[1])
    index.add(X)
    _, I = index.search(X, k + 1)
    return I


def _pynndescent(X: np.ndarray, k: int) -> np.ndarray:
    import pynndescent

    nd = pynndescent.NNDescent(X, n_neighbors=k + 1, n_jobs=2, random_state=0, compressed=False)
    return nd.neighbor_graph[0]


def _drop_self(I: np.ndarray, k: int) -> np.ndarray:
    # self is usually column 0, but exact duplicates may precede it
    n = I.shape[0]
    keep = I != np.arange(n)[:, None]
    out = np.empty((n, k), dtype=np.int64)
    for i in range(n):
        out[i] = I[i][keep[i]][:k]
    return out


def run(client: Any, profile: str = "laptop") -> list[dict]:
    """Measure ours and the peers on the same points; tidy rows with ``speedup`` = peer / ours."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {sorted(PROFILES)}, got {profile!r}")
    p = PROFILES[profile]
    k = p["k"]
    n_workers = len(worker_addresses(client))
    X = gaussian_mixture(p["n"], p["d"], p["n_clusters"], seed=0)
    Xd = wb.distribute(X, client=client)                   # the points live on the workers from here on
    labels = {"kernel": "knn", "data": f"gmm-{p['n']}x{p['d']}-c{p['n_clusters']}", "k": k,
              "n_workers": n_workers, "profile": profile}

    ex = wb.bench.measure(lambda: wb.knn_graph(Xd, k, exact=True, client=client), name="wb.knn_graph exact",
                          warmup=1, repeat=p["repeat"], keep_value=True)
    g = ex.value
    check = validate_knn(X, g, sample=256)
    assert check["valid"], check
    ap = wb.bench.measure(lambda: wb.knn_graph(Xd, k, client=client, reference=g), name="wb.knn_graph SOLANET",
                          warmup=1, repeat=p["repeat"], keep_value=True)
    a = ap.value

    # peers: one warm-up on a small slice compiles / loads them, then the timed runs
    _faiss_flat(X[:500], k)
    _pynndescent(X[:2000], k)
    tf = wb.bench.measure(lambda: _faiss_flat(X, k), name="faiss IndexFlatL2 (2 threads)", warmup=0,
                          repeat=p["faiss_repeat"], keep_value=True)
    cpu: dict = {}

    def _pynn_cpu() -> np.ndarray:
        # CPU seconds of the in-process peer (its threads), against our stats["cpu_s"] (both workers' threads)
        c0 = time.process_time()
        out = _pynndescent(X, k)
        cpu["pynndescent"] = time.process_time() - c0
        return out

    # one untimed run at full size too, as ours get: whatever pynndescent compiles or loads on its first call at
    # this size is not timed as the peer's (session 28 timed it at 3.9 s, this machine's warm runs at 0.8-0.9 s)
    tp = wb.bench.measure(_pynn_cpu, name="pynndescent NNDescent (2 jobs)", warmup=1,
                          repeat=p["pynn_repeat"], keep_value=True)
    faiss_recall = recall(_drop_self(tf.value, k), g.indices)
    pynn_recall = recall(_drop_self(tp.value, k), g.indices)

    rows = [
        ex.row(role="ours", speedup=1.0, recall=1.0, path="README: wb.distribute(X)",
               bytes_moved=g.stats["bytes_moved"],
               uncertified_float32=g.stats["uncertified_float32"], **labels),
        tf.row(role="peer", speedup=tf.median / ex.median, recall=faiss_recall, target=EXACT_TARGET,
               target_metric="faiss flat time / our exact time",
               meets_target=bool(tf.median / ex.median >= EXACT_TARGET), **labels),
        ap.row(role="ours", speedup=1.0, recall=a.stats["recall"], path="README: wb.distribute(X)",
               bytes_moved=a.stats["bytes_moved"],
               cpu_s=a.stats["cpu_s"],
               phases={ph: round(a.stats[ph], 3) for ph in ("kmeans_s", "local_build_s", "merge_tree_s",
                                                             "refinement_s")}, **labels),
        tp.row(role="peer", speedup=tp.median / ap.median, recall=pynn_recall, target=APPROX_TARGET,
               cpu_s=cpu["pynndescent"],
               target_metric=f"pynndescent time / our approximate time, with our recall >= {RECALL_TARGET}",
               meets_target=bool(tp.median / ap.median >= APPROX_TARGET and a.stats["recall"] >= RECALL_TARGET),
               **labels),
    ]
    return rows


if __name__ == "__main__":
    wb.bench.script_main(run)
