"""Every experiment's notebook executes with the ci profile through the users' runner."""

from __future__ import annotations

import json

import pytest

from workbench import experiment

# slow: runs notebooks/kills workers; make test runs it, make test-fast skips it
pytestmark = pytest.mark.slow

NAMES = experiment.list_experiments()


# the runs go two at a time, each in a process of its own (conftest's experiment_run): a test waits for its own
# run and, at most, the one ahead of it
@pytest.mark.timeout(480)
@pytest.mark.experiment_run("ci")
@pytest.mark.parametrize("name", NAMES)
def test_experiment_runs_with_ci_profile(name, experiment_run):
    run_dir = experiment_run
    prov = json.loads((run_dir / "provenance.json").read_text())
    assert prov["status"] == "ok" and prov["profile"] == "ci"
    assert prov["clusters"], "the notebook should start its cluster with wb.cluster (recorded in provenance)"
    assert list(run_dir.glob("*.png")) and list(run_dir.glob("*.svg"))
    assert (run_dir / "dask-performance-report.html").exists()
