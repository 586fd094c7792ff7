"""The results gallery lists every experiment, every figure it links exists, failures show in red with their cell."""

from __future__ import annotations

import html.parser
import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest

from workbench import experiment, report

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
from nbgen import write_notebook  # noqa: E402


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.imgs, self.hrefs, self.sections, self.failed = [], [], [], 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.imgs.append(a["src"])
        elif tag == "a" and not a.get("href", "#").startswith("#"):
            self.hrefs.append(a["href"])
        elif tag == "section":
            self.sections.append(a["id"])
        elif tag == "div" and a.get("class") == "failed":
            self.failed += 1


@pytest.fixture()
def repo(tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "experiments").mkdir()
    for name in ("alpha", "beta", "gamma"):
        write_notebook(str(tmp_path / "notebooks" / f"{name}.ipynb"), [
            ("md", f"# {name.title()}: a toy\n\nReproduces nothing (Fig. 1 of no paper)."),
            ("params", 'fail = False\noutput_dir = "."\nprofile = "laptop"'),
            ("code", "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
                     "import workbench as wb"),
            ("md", f"## The {name} line\n\nA straight line, **bold** caption."),
            ("code", "fig, ax = plt.subplots()\nax.plot([0, 1])\nwb.experiment.save_figure(fig, 'line', output_dir)"),
            ("md", "## Per-size panels"),
            ("code", "for n in (1, 2):\n    fig, ax = plt.subplots()\n    ax.plot([0, n])\n"
                     "    wb.experiment.save_figure(fig, f'panel_{n}', output_dir)"),
            ("code", "wb.experiment.save_metrics([{'value': 1}], 'metrics', output_dir)"),
            ("code", "if fail:\n    raise RuntimeError('deliberate failure')"),
        ])
        (tmp_path / "experiments" / f"{name}.yaml").write_text(
            f"notebook: notebooks/{name}.ipynb\ndescription: toy {name}\nprofiles:\n  ci: {{}}\n")
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([*git, "add", "-A"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "init"], cwd=tmp_path, check=True)
    return tmp_path


def test_gallery_lists_every_experiment_and_figure(repo):
    results = repo / "results"
    ok = experiment.run("alpha", "ci", root=repo, results_dir=results, progress=False)
    experiment.run("beta", "ci", root=repo, results_dir=results, progress=False)
    with pytest.raises(experiment.ExperimentFailed):
        experiment.run("beta", "ci", root=repo, results_dir=results, parameters={"fail": True}, progress=False)
    # gamma never ran
    page = report.write_gallery(results, root=repo)
    assert page == results / "index.html"
    text = page.read_text()
    p = _Links()
    p.feed(text)
    assert p.sections == ["alpha", "beta", "gamma"]
    assert "No complete run yet" in text.split('id="gamma"')[1]
    # beta: its good run still shows, and the newer failure above it, in red, naming the cell
    beta = text.split('id="beta"')[1].split("<section")[0]
    assert p.failed == 1 and 'class="failed"' in beta and "raise" in beta and "deliberate failure" in beta
    assert "line.png" in beta
    # every image and link resolves to a file in the results tree
    assert len(p.imgs) == 6   # alpha and beta: line, panel_1, panel_2
    for src in p.imgs + p.hrefs:
        assert not src.startswith(("/", "file:")), src
        assert (results / unquote(src)).is_file(), src
    # captions come from the markdown section each figure is saved under (f-string names too)
    alpha = text.split('id="alpha"')[1].split("<section")[0]
    assert "<strong>bold</strong> caption" in alpha.split("line.png")[-1].split("</figure>")[0]
    assert "Per-size panels" in alpha.split("panel_2.png")[-1].split("</figure>")[0]
    # provenance: run id, commit, profile, duration; links to the notebook, its HTML export, tables, report
    prov = json.loads((ok / "provenance.json").read_text())
    assert prov["run_id"] in alpha and prov["git_commit"][:12] in alpha and "clean" in alpha
    for name in ("alpha.ipynb", "alpha.html", "metrics.csv", "provenance.json"):
        assert any(h.endswith(name) for h in p.hrefs), name
    assert (ok / "alpha.html").stat().st_size > 10_000


def test_make_report_command_rebuilds_without_running(repo):
    results = repo / "results"
    experiment.run("alpha", "ci", root=repo, results_dir=results, progress=False)
    before = sorted(p.name for p in (results / "alpha").iterdir())
    env = {"WORKBENCH_ROOT": str(repo), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-m", "workbench.report", "--results", str(results)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert (results / "index.html").is_file()
    assert sorted(p.name for p in (results / "alpha").iterdir()) == before   # nothing reran
