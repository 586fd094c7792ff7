"""The runner's budgets, monitor and build_only mode, on a tiny notebook (tests/data/budget.ipynb)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from workbench import experiment
from workbench._monitor import TreeMonitor, role_of

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture()
def repo(tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "experiments").mkdir()
    shutil.copy(DATA / "budget.ipynb", tmp_path / "notebooks" / "budget.ipynb")
    (tmp_path / "experiments" / "budget.yaml").write_text(
        "notebook: notebooks/budget.ipynb\n"
        "profiles:\n"
        "  ci: {seconds: 120, max_minutes: 0.1}\n"
        "  laptop: {seconds: 120, allocate_mb: 1024, max_memory_gb: 0.5}\n"
        "  large: {seconds: 0, allocate_mb: 8}\n")
    return tmp_path


def test_run_past_max_minutes_is_stopped_and_reported(repo):
    with pytest.raises(experiment.ExperimentStopped, match=r"stopped by the runner: ran past max_minutes=0\.1"):
        experiment.run("budget", "ci", root=repo, progress=False)
    failed = next((repo / "results" / "budget").glob("failed-*"))
    prov = json.loads((failed / "provenance.json").read_text())
    assert prov["status"] == "stopped" and "max_minutes" in prov["error"]
    assert "'time.sleep(seconds)'" in prov["error"]                                   # names the cell it stopped
    assert prov["budgets"]["max_minutes"] == 0.1
    assert (failed / "inputs.txt").exists() and not (failed / "done.txt").exists()   # killed mid-sleep
    assert not (repo / "results" / "budget" / "latest").exists()


def test_run_past_max_memory_is_stopped_and_reported(repo):
    with pytest.raises(experiment.ExperimentStopped, match=r"GiB, past max_memory_gb=0\.5"):
        experiment.run("budget", "laptop", root=repo, progress=False, monitor_interval=0.2)
    failed = next((repo / "results" / "budget").glob("failed-*"))
    prov = json.loads((failed / "provenance.json").read_text())
    assert prov["status"] == "stopped" and prov["peak_memory_gib"]["client"] > 0.5
    assert not (failed / "done.txt").exists()


def test_provenance_records_wall_time_and_peak_memory_and_budgets_are_checked(repo):
    run_dir = experiment.run("budget", "large", root=repo, progress=False, monitor_interval=0.1)
    prov = json.loads((run_dir / "provenance.json").read_text())
    assert prov["status"] == "ok" and prov["seconds"] > 0
    assert prov["peak_memory_gib"]["client"] > 0 and prov["monitor"]["samples"] >= 1
    assert [p["role"] for p in prov["monitor"]["processes"]] == ["client"]
    assert "max_minutes" not in prov["parameters"]
    with pytest.raises(experiment.ExperimentError, match="max_minutes must be a positive number"):
        experiment.run("budget", "large", root=repo, progress=False, max_minutes=-1)


def test_build_only_runs_the_input_cells_without_the_timed_ones(repo):
    run_dir = experiment.run("budget", "ci", root=repo, progress=False, build_only=True)
    assert run_dir.name.startswith("build-")
    assert (run_dir / "inputs.txt").exists() and not (run_dir / "done.txt").exists()
    assert json.loads((run_dir / "provenance.json").read_text())["build_only"] is True


def test_roles_and_monitor_budget_on_this_process_tree():
    assert role_of(["python", "-m", "ipykernel_launcher", "-f", "k.json"]) == "client"
    assert role_of(["python", "-c", "from multiprocessing.spawn import spawn_main; spawn_main()"]) == "worker"
    assert role_of(["python", "-c", "from multiprocessing.resource_tracker import main;main(5)"]) == "other"
    with pytest.raises(ValueError, match="interval"):
        TreeMonitor(interval=0)
