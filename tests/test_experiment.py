"""The experiment runner: configs, run directories, provenance, failures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from workbench import experiment

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
from nbgen import write_notebook  # noqa: E402


@pytest.fixture()
def tmp_repo(tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "experiments").mkdir()
    write_notebook(str(tmp_path / "notebooks" / "toy.ipynb"), [
        ("md", "# toy"),
        ("params", 'fail = False\nvalue = 1\noutput_dir = "."\nprofile = "laptop"'),
        ("code", "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nimport workbench as wb"),
        ("code", "fig, ax = plt.subplots()\nax.plot([0, value])\nwb.experiment.save_figure(fig, 'line', output_dir)"),
        ("code", "wb.experiment.save_metrics([{'value': value}], 'metrics', output_dir)"),
        ("code", "if fail:\n    raise RuntimeError('deliberate failure')"),
    ])
    (tmp_path / "experiments" / "toy.yaml").write_text(
        "notebook: notebooks/toy.ipynb\ndescription: toy\nprofiles:\n  ci: {value: 2}\n  laptop: {value: 3}\n")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "add", "-A"], cwd=tmp_path, check=True)
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init"], cwd=tmp_path,
                   check=True)
    return tmp_path


def test_config_errors(tmp_repo):
    with pytest.raises(experiment.ExperimentError, match="no experiment 'nope'"):
        experiment.run("nope", "ci", root=tmp_repo)
    with pytest.raises(experiment.ExperimentError, match="profile"):
        experiment.run("toy", "huge", root=tmp_repo)
    with pytest.raises(experiment.ExperimentError, match="no profile 'gpu'"):
        experiment.run("toy", "gpu", root=tmp_repo)
    assert experiment.list_experiments(tmp_repo) == ["toy"]
    # a broken config is one clear error before anything runs (the good experiment named first included)
    bad = {"yaml": "notebook: [notebooks/toy.ipynb\n", "profiles": "notebook: notebooks/toy.ipynb\nprofiles:\n"
           "  ci: [1, 2]\n", "budget": "notebook: notebooks/toy.ipynb\nprofiles:\n  ci: {max_minutes: -3}\n"}
    bad.update({
        "notebook": "notebook: 42\nprofiles:\n  ci: {value: 2}\n",          # was a TypeError from pathlib
        "not_ipynb": "notebook: README.md\nprofiles:\n  ci: {}\n",
        "typo": "notebook: notebooks/toy.ipynb\nprofiles:\n  ci: {valeu: 2}\n",  # was run with the default
    })
    for name, text in bad.items():
        (tmp_repo / "experiments" / f"bad_{name}.yaml").write_text(text)
        with pytest.raises(experiment.ExperimentError,
                           match=f"bad_{name}.yaml.*(YAML|profiles|max_minutes|notebook|not parameters)"):
            experiment.run_many(["toy", f"bad_{name}"], "ci", root=tmp_repo, results_dir=tmp_repo / "results")
        (tmp_repo / "experiments" / f"bad_{name}.yaml").unlink()
    assert not (tmp_repo / "results").exists()
    assert experiment.load_config(tmp_repo / "experiments" / "toy.yaml", tmp_repo)["name"] == "toy"   # a Path
    # a results directory that cannot be made is named, not a traceback from mkdir
    (tmp_repo / "afile").write_text("")
    with pytest.raises(experiment.ExperimentError, match="cannot write the run under"):
        experiment.run("toy", "ci", root=tmp_repo, results_dir=tmp_repo / "afile" / "sub", progress=False)
    # build_only on a notebook with no 'inputs' cell is refused before anything runs
    with pytest.raises(experiment.ExperimentError, match="tagged 'inputs'"):
        experiment.check_configs(["toy"], "ci", tmp_repo, build_only=True)


def test_good_run_then_failing_run_leaves_it_untouched(tmp_repo):
    good = experiment.run("toy", "ci", root=tmp_repo, progress=False)
    files = {p.name for p in good.iterdir()}
    assert {"toy.ipynb", "line.png", "line.svg", "metrics.csv", "provenance.json"} <= files
    prov = json.loads((good / "provenance.json").read_text())
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_repo, capture_output=True, text=True).stdout.strip()
    assert prov["git_commit"] == head and prov["git_dirty"] is False
    assert prov["parameters"]["value"] == 2 and prov["profile"] == "ci" and prov["status"] == "ok"
    for pkg in ("python", "numpy", "scipy", "dask", "distributed"):
        assert pkg in prov["versions"]
    assert prov["cpu_model"]
    # the run executed in a staging directory that was renamed: provenance names where it ended up
    assert prov["run_dir"] == str(good) and prov["parameters"]["output_dir"] == str(good)
    latest = good.parent / "latest"
    assert latest.resolve() == good.resolve()
    before = {p.name: p.read_bytes() for p in good.iterdir()}

    with pytest.raises(experiment.ExperimentFailed, match=r"cell \d+ \('if fail:'\), line 2 "
                       r"\(\"raise RuntimeError\('deliberate failure'\)\"\) raised RuntimeError: deliberate"):
        experiment.run("toy", "ci", root=tmp_repo, parameters={"fail": True}, progress=False)
    assert latest.resolve() == good.resolve()
    assert {p.name: p.read_bytes() for p in good.iterdir()} == before
    failed = [p for p in good.parent.iterdir() if p.name.startswith("failed-")]
    assert len(failed) == 1
    fprov = json.loads((failed[0] / "provenance.json").read_text())
    assert fprov["status"] == "failed" and fprov["run_dir"] == str(failed[0])


def test_cli_lists_and_reports_failure(tmp_repo):
    env = {"WORKBENCH_ROOT": str(tmp_repo), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-m", "workbench", "list"], env=env, capture_output=True, text=True)
    assert out.returncode == 0 and "toy" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "workbench", "run", "missing", "--profile", "ci"], env=env,
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "no experiment 'missing'" in bad.stderr
    assert "estimate" not in bad.stdout + bad.stderr   # the error comes before anything else is said
    helped = subprocess.run([sys.executable, "-m", "workbench", "--help"], env=env, capture_output=True, text=True)
    assert helped.returncode == 0 and "``" not in helped.stdout                   # no raw reST markup
    assert "python -m workbench run all --profile ci" in helped.stdout            # the examples
    from workbench.backend import gpu_available

    if not gpu_available()[0]:   # no device: one line that says why, not the cluster's traceback
        gpu = subprocess.run([sys.executable, "-m", "workbench", "bench", "--backend", "gpu", "--profile", "ci"],
                             env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True)   # this repo's
        assert gpu.returncode == 2 and "Traceback" not in gpu.stderr, gpu.stderr
        assert gpu.stderr.startswith("workbench: backend='gpu' is unavailable"), gpu.stderr


@pytest.mark.parametrize("name", experiment.list_experiments())
def test_parameters_cell_is_read_whole_by_papermill(name):
    """papermill skips (with a warning) a parameter line holding a second '=' (e.g. in its comment):
    every name the parameters cell assigns must be one papermill sees, so `-p`/profiles reach it."""
    import ast

    from papermill.translators import PythonTranslator

    nb = json.loads((experiment.repo_root() / experiment.load_config(name)["notebook"]).read_text())
    cell = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    src = "".join(cell["source"])
    assigned = [t.id for node in ast.parse(src).body if isinstance(node, ast.Assign) for t in node.targets]
    seen = [p.name for p in PythonTranslator.inspect({**cell, "source": src})]
    assert seen == assigned


def test_cli_interrupt_keeps_the_partial_run(tmp_repo):
    # Ctrl-C: one line said, exit 130, and the partial run kept as failed-<run-id> (it was left as .staging-*)
    import contextlib
    import signal
    import time

    write_notebook(str(tmp_repo / "notebooks" / "slow.ipynb"), [
        ("params", 'output_dir = "."\nprofile = "laptop"'),
        ("code", "import time\ntime.sleep(120)"),
    ])
    (tmp_repo / "experiments" / "slow.yaml").write_text("notebook: notebooks/slow.ipynb\nprofiles:\n  ci: {}\n")
    env = {"WORKBENCH_ROOT": str(tmp_repo), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "run", "slow", "--profile", "ci", "--no-progress"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    exp = tmp_repo / "results" / "slow"

    def sleeping() -> bool:   # papermill saves the notebook as each cell starts, marking it running
        for nb in exp.glob(".staging-*/slow.ipynb"):
            with contextlib.suppress(ValueError, OSError):
                cells = json.loads(nb.read_text())["cells"]
                return any("sleep" in "".join(c["source"]) and c["metadata"].get("papermill", {}).get("status")
                           == "running" for c in cells)
        return False

    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not sleeping():
            time.sleep(0.2)
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    # (the kernel, whose sockets close under it, may log its own ZMQError)
    assert "interrupted" in err and "papermill" not in err and "__main__.py" not in err, err[-3000:]
    assert not list(exp.glob(".staging-*"))
    failed = list(exp.glob("failed-*"))
    assert len(failed) == 1 and json.loads((failed[0] / "provenance.json").read_text())["status"] == "interrupted"
