"""Ripley's K against spatstat's ``Kest`` on real patterns from spatstat.data, to 1e-8.

The recorded numbers (``tests/data/spatstat_kest.csv``, written by
``tests/data/spatstat_kest.R``) make the comparison run wherever the patterns
can be read (Debian's ``r-cran-spatstat.data``, no R needed); where ``Rscript``
and spatstat are installed (``make setup-r``) a second test runs spatstat live.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import workbench as wb

HERE = Path(__file__).parent / "data"
RECORDED = HERE / "spatstat_kest.csv"
SCRIPT = HERE / "spatstat_kest.R"
CORRECTIONS = ("none", "translation", "isotropic", "border")
RTOL = 1e-8

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(wb.data.spatstat_data_dir() is None,
                                 reason="the R package spatstat.data is not installed "
                                        "(apt-get install r-cran-spatstat.data, or make setup-r)")]


def _read(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, comment="#", skipinitialspace=True)


def _tie_free(p: wb.data.PointPattern, r: np.ndarray, correction: str) -> np.ndarray:
    """Radii no pair distance (and, for border, no boundary distance) equals to within 1e-9.

    spatstat bins distances in left-closed intervals, so it counts ``d < r``
    where workbench counts ``d <= r``: the two agree except on exact ties,
    which rounded coordinates make possible (and ``r = 0`` meets duplicate
    points and points on the boundary)."""
    from scipy.spatial import cKDTree

    pairs = cKDTree(p.points).query_pairs(r.max() * 1.001, output_type="ndarray")
    d = np.linalg.norm(p.points[pairs[:, 0]] - p.points[pairs[:, 1]], axis=1)
    ok = np.array([not np.any(np.abs(d - rk) <= 1e-9 * max(rk, 1e-300)) for rk in r])
    if correction == "border":
        x0, x1, y0, y1 = p.window
        b = np.min(np.column_stack([p.points[:, 0] - x0, x1 - p.points[:, 0],
                                    p.points[:, 1] - y0, y1 - p.points[:, 1]]), axis=1)
        ok &= np.array([not np.any(np.abs(b - rk) <= 1e-9 * max(rk, 1e-300)) for rk in r])
    return ok


def _compare(ref: pd.DataFrame, client) -> list[str]:
    checked = []
    for name, g in ref.groupby("dataset", sort=False):
        p = wb.data.spatstat_pattern(name)
        assert p.n == int(g.n.iloc[0]), f"{name}: {p.n} points here, spatstat had {int(g.n.iloc[0])}"
        r = g.r.to_numpy(dtype=np.float64)
        for corr in CORRECTIONS:
            k = wb.ripley_k(p.points, r, window=p.window, edge_correction=corr, client=client).k
            want = g[corr].to_numpy(dtype=np.float64)
            ok = _tie_free(p, r, corr)
            assert ok.sum() >= len(r) - 1, f"{name} {corr}: radii {r[~ok]} meet ties; choose other radii"
            np.testing.assert_allclose(k[ok], want[ok], rtol=RTOL, atol=0,
                                       err_msg=f"{name} {corr}: workbench vs spatstat Kest")
            checked.append(f"{name}/{corr}")
    return checked


def test_recorded_spatstat_kest(clients):
    ref = _read(RECORDED)
    assert set(ref.dataset) >= {"bei", "lansing", "redwood"}
    checked = _compare(ref, clients(3))   # 3 tiles: pairs across tile boundaries and halos count too
    assert len(checked) == len(set(ref.dataset)) * len(CORRECTIONS)


def _has_spatstat() -> bool:
    if not shutil.which("Rscript"):
        return False
    got = subprocess.run(["Rscript", "-e", "quit(status = !requireNamespace('spatstat', quietly = TRUE))"],
                         capture_output=True, timeout=120)
    return got.returncode == 0


@pytest.mark.timeout(600)
@pytest.mark.skipif(not _has_spatstat(), reason="Rscript with spatstat is not installed (make setup-r)")
def test_live_spatstat_kest(clients, tmp_path):
    out = tmp_path / "kest.csv"
    names = list(dict.fromkeys(_read(RECORDED).dataset))
    subprocess.run(["Rscript", str(SCRIPT), str(out), *names], check=True, timeout=540)
    live = _read(out)
    # the live run recomputes what was recorded (same radii), so a changed spatstat shows up here too
    np.testing.assert_allclose(live[list(CORRECTIONS)].to_numpy(float), _read(RECORDED)[list(CORRECTIONS)]
                               .to_numpy(float), rtol=RTOL, atol=0, equal_nan=True)
    assert _compare(live, clients(2))


def test_patterns_read_from_spatstat_data():
    bei = wb.data.spatstat_pattern("bei")
    assert bei.n == 3604 and bei.window == (0.0, 1000.0, 0.0, 500.0) and bei.units == "metres"
    lansing = wb.data.spatstat_pattern("lansing")
    assert lansing.n == 2251 and set(lansing.marks) == {"blackoak", "hickory", "maple", "misc", "redoak",
                                                          "whiteoak"}
    redwood = wb.data.spatstat_pattern("redwood")
    assert redwood.window == (0.0, 1.0, -1.0, 0.0)
    for p in (bei, lansing, redwood):
        x0, x1, y0, y1 = p.window
        assert np.all((p.points[:, 0] >= x0) & (p.points[:, 0] <= x1) & (p.points[:, 1] >= y0)
                      & (p.points[:, 1] <= y1))
    with pytest.raises(ValueError, match="no dataset"):
        wb.data.spatstat_pattern("no-such-pattern")
    with pytest.raises(ValueError, match="window"):
        wb.data.spatstat_pattern("chorley")   # a polygonal window
