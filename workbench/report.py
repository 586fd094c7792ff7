"""The results gallery: one static page, ``results/index.html``, of every experiment's latest run.

For each experiment (``experiments/<name>.yaml``): its latest complete run's
figures (PNG) captioned from the notebook's markdown (the section a figure
is saved under), the run id, commit and dirty flag, duration, profile and
parameters, and links to the executed notebook, its HTML export (made here
with nbconvert, so it opens without Jupyter), its CSV tables and its Dask
performance reports.  A failed run newer than the latest good one is listed
in red with the cell that failed; an experiment never run says so.  Links are
relative, so the page works from ``file://``, a static file server or
JupyterLab's ``/files/``.

``make figures`` writes it at its end; ``make report`` (``python -m
workbench.report``) rebuilds it from what is in ``results/`` without running
anything.

Examples
--------
>>> from workbench import report
>>> report.write_gallery()                                    # doctest: +SKIP
PosixPath('.../results/index.html')
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import re
import sys
from pathlib import Path
from typing import Any

from .experiment import list_experiments, load_config, repo_root

__all__ = ["write_gallery", "collect", "main"]

_SAVE_FIG = re.compile(r"""save_figure\(\s*[^,]+,\s*(f?)(["'])(.+?)\2""")


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _markdown(text: str) -> str:
    """Markdown to HTML with the renderer nbconvert uses (mistune); escaped text without it."""
    try:
        import mistune

        return mistune.html(text)
    except Exception:
        return f"<p>{html.escape(text)}</p>"


def _captions(nb_path: Path) -> tuple[str, dict[str, str], str]:
    """The notebook's title, {figure name or pattern: the markdown section it is saved under}, and its intro."""
    import nbformat

    try:
        nb = nbformat.read(nb_path, as_version=4)
    except Exception:
        return nb_path.stem, {}, ""
    title, intro, section = nb_path.stem, "", ""
    caps: dict[str, str] = {}
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            if not intro:
                lines = cell.source.strip().splitlines()
                if lines and lines[0].startswith("#"):
                    title = lines[0].lstrip("#").strip()
                    intro = "\n".join(lines[1:]).strip()
                    continue
            section = cell.source.strip()
        elif cell.cell_type == "code":
            for f, _, name in _SAVE_FIG.findall(cell.source):
                # an f-string name becomes a pattern: {anything} matches any text
                key = "re:" + re.sub(r"\\\{.*?\\\}", ".*", re.escape(name)) if f else name
                caps.setdefault(key, section)
    return title, caps, intro


def _caption_for(name: str, caps: dict[str, str]) -> str:
    if name in caps:
        return caps[name]
    for key, text in caps.items():
        if key.startswith("re:") and re.fullmatch(key[3:], name):
            return text
    return ""


def _html_export(nb_path: Path) -> Path | None:
    """``<notebook>.html`` next to the executed notebook (made once, redone when the notebook is newer)."""
    out = nb_path.with_suffix(".html")
    if out.exists() and out.stat().st_mtime >= nb_path.stat().st_mtime:
        return out
    try:
        import nbformat
        from nbconvert import HTMLExporter

        body, _ = HTMLExporter().from_notebook_node(nbformat.read(nb_path, as_version=4))
        out.write_text(body, encoding="utf-8")
        return out
    except Exception as e:  # a gallery without one export is still a gallery
        print(f"workbench: could not export {nb_path} to HTML ({e})", file=sys.stderr)
        return None


def _runs(exp_dir: Path) -> tuple[Path | None, Path | None]:
    """(latest complete run, newest failed run if it is newer than that run)."""
    latest = exp_dir / "latest"
    good = latest.resolve() if latest.exists() else None
    if good is None:
        done = sorted(p for p in exp_dir.iterdir() if p.is_dir() and (p / "provenance.json").exists()
                      and not p.name.startswith(("failed-", ".")))
        good = done[-1] if done else None
    failed = sorted((p for p in exp_dir.glob("failed-*") if p.is_dir()), key=lambda p: p.stat().st_mtime)
    bad = failed[-1] if failed else None
    if bad is not None and good is not None and bad.stat().st_mtime < good.stat().st_mtime:
        bad = None
    return good, bad


def collect(results_dir: str | Path | None = None, root: Path | None = None) -> list[dict]:
    """What the gallery shows: one dict per experiment (config, latest run, failed run, figures, files).

    Examples
    --------
    >>> [e["name"] for e in collect()]                          # doctest: +SKIP
    ['bfs', 'coloring', 'environment', ...]
    """
    root = Path(root or repo_root())
    results = Path(results_dir or root / "results").resolve()
    names = list_experiments(root)
    if results.is_dir():   # runs of experiments whose config is gone still show
        names += sorted(p.name for p in results.iterdir() if p.is_dir() and p.name not in names
                        and not p.name.startswith(".") and ((p / "latest").exists() or any(p.glob("failed-*"))))
    out = []
    for name in names:
        entry: dict[str, Any] = {"name": name, "description": "", "run": None, "failed": None}
        try:
            cfg = load_config(name, root)
            entry["description"] = cfg.get("description", "")
            entry["notebook"] = str(cfg["notebook"])
        except Exception:
            pass
        exp_dir = results / name
        if not exp_dir.is_dir():
            out.append(entry)
            continue
        good, bad = _runs(exp_dir)
        for key, run_dir in (("run", good), ("failed", bad)):
            if run_dir is None:
                continue
            prov = _read_json(run_dir / "provenance.json")
            nbs = sorted(run_dir.glob("*.ipynb"))
            title, caps, intro = _captions(nbs[0]) if nbs else (name, {}, "")
            figures = [{"path": p, "caption": _caption_for(p.stem, caps)} for p in sorted(run_dir.glob("*.png"))]
            entry.setdefault("title", title)
            entry.setdefault("intro", intro)
            entry[key] = {"dir": run_dir, "provenance": prov, "notebooks": nbs, "figures": figures,
                          "tables": sorted(run_dir.glob("*.csv")),
                          "reports": sorted(run_dir.glob("dask-performance-report*.html"))}
        out.append(entry)
    return out


def _rel(path: Path, base: Path) -> str:
    from urllib.parse import quote

    return quote(path.resolve().relative_to(base).as_posix()) if path.resolve().is_relative_to(base) \
        else path.resolve().as_uri()


def _params_table(params: dict) -> str:
    skip = {"output_dir"}
    rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td><code>{html.escape(json.dumps(v, default=str))}"
                   f"</code></td></tr>" for k, v in params.items() if k not in skip)
    return f'<table class="params">{rows}</table>' if rows else ""


def _run_meta(prov: dict, run_dir: Path) -> str:
    commit = prov.get("git_commit") or "?"
    dirty = prov.get("git_dirty")
    dirty_txt = {True: '<span class="dirty">dirty</span>', False: "clean", None: "unknown"}[dirty]
    secs = prov.get("seconds")
    dur = f"{secs:.1f} s" if isinstance(secs, int | float) else "?"
    clusters = prov.get("clusters") or []
    cl = ", ".join(f"{c.get('n_workers')} workers" for c in clusters) or "none recorded"
    items = [("run", html.escape(prov.get("run_id") or run_dir.name)),
             ("commit", f"<code>{html.escape(commit[:12])}</code> ({dirty_txt})"),
             ("profile", html.escape(str(prov.get("profile", "?")))),
             ("duration", dur),
             ("finished", html.escape(str(prov.get("finished", "?"))[:19].replace("T", " ")) + " UTC"),
             ("clusters", html.escape(cl)),
             ("host", html.escape(f"{prov.get('host', '?')}: {prov.get('cpu_model', '?')}, "
                                  f"{prov.get('cpu_count', '?')} CPUs"
                                  + (f", {', '.join(prov['gpu_models'])}" if prov.get("gpu_models") else "")))]
    return '<dl class="meta">' + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in items) + "</dl>"


def _links(run: dict, base: Path) -> str:
    links = []
    for nb in run["notebooks"]:
        links.append(f'<a href="{_rel(nb, base)}">notebook (.ipynb)</a>')
        exported = _html_export(nb)
        if exported is not None:
            links.append(f'<a href="{_rel(exported, base)}">notebook (HTML)</a>')
    links += [f'<a href="{_rel(t, base)}">{html.escape(t.name)}</a>' for t in run["tables"]]
    links += [f'<a href="{_rel(r, base)}">Dask performance report'
              f'{"" if r.stem.endswith("report") else " " + r.stem.rsplit("-", 1)[-1]}</a>' for r in run["reports"]]
    links.append(f'<a href="{_rel(run["dir"] / "provenance.json", base)}">provenance.json</a>')
    return '<p class="links">' + " · ".join(links) + "</p>"


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1200px;padding:1rem 2rem;
color:#1d1d1f;line-height:1.45}
h1{margin-bottom:.2rem} .sub{color:#555;margin-top:0}
nav a{margin-right:.8rem} section{border-top:1px solid #ddd;padding-top:1rem;margin-top:1.5rem}
.meta{display:grid;grid-template-columns:max-content 1fr;gap:.1rem 1rem;font-size:.9rem;margin:.5rem 0}
.meta dt{color:#666} .meta dd{margin:0} .dirty{color:#b26b00;font-weight:600}
.params{font-size:.8rem;border-collapse:collapse} .params th{text-align:left;padding-right:1rem;color:#444;
font-weight:500} .params td,.params th{border-bottom:1px solid #eee;padding:.1rem .4rem}
details{margin:.4rem 0} .links{font-size:.9rem}
.figs{display:grid;grid-template-columns:repeat(auto-fill,minmax(480px,1fr));gap:1.2rem}
figure{margin:0;border:1px solid #e4e4e4;border-radius:6px;padding:.6rem;background:#fafafa}
figure img{width:100%;height:auto;background:#fff} figcaption{font-size:.85rem;color:#333}
figcaption h1,figcaption h2,figcaption h3,figcaption h4{font-size:.95rem;margin:.35rem 0 .2rem}
figcaption .file{font-family:monospace;color:#777}
.failed{border:2px solid #c62828;background:#fdecea;color:#8e0000;border-radius:6px;padding:.6rem 1rem}
.failed h3{margin-top:0;color:#c62828} .missing{color:#777;font-style:italic}
"""


def render(entries: list[dict], base: Path, root: Path | None = None) -> str:
    """The gallery page for ``entries`` (from :func:`collect`), links relative to ``base``."""
    from .experiment import _git

    root = Path(root or repo_root())
    commit = _git(root, "rev-parse", "--short", "HEAD") or "?"
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    n_ok = sum(1 for e in entries if e["run"])
    n_fail = sum(1 for e in entries if e["failed"])
    n_figs = sum(len(e["run"]["figures"]) for e in entries if e["run"])
    parts = [f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>workbench results</title>"
             f"<meta name='viewport' content='width=device-width,initial-scale=1'><style>{_CSS}</style></head><body>",
             "<h1>workbench results</h1>",
             f"<p class='sub'>{n_ok} of {len(entries)} experiments with a complete run, {n_figs} figures"
             f"{f', <b style=color:#c62828>{n_fail} failed</b>' if n_fail else ''}; page written {now} at commit "
             f"<code>{html.escape(commit)}</code>. Rerun: <code>make figures PROFILE=ci|laptop|gpu</code>; "
             f"rebuild this page: <code>make report</code>.</p>",
             "<nav>" + "".join(f'<a href="#{html.escape(e["name"])}">{html.escape(e["name"])}</a>' for e in entries)
             + "</nav>"]
    for e in entries:
        name = html.escape(e["name"])
        parts.append(f'<section id="{name}" class="experiment"><h2>{html.escape(e.get("title", e["name"]))}</h2>')
        if e["description"]:
            parts.append(f"<p><b>{name}</b>: {html.escape(e['description'])}</p>")
        if e.get("intro"):
            parts.append(f"<details><summary>What it reproduces</summary>{_markdown(e['intro'])}</details>")
        bad = e["failed"]
        if bad:
            prov = bad["provenance"]
            parts.append(f'<div class="failed"><h3>Failed run {html.escape(bad["dir"].name)}</h3>'
                         f"<p>{html.escape(prov.get('error', 'no error recorded'))}</p>"
                         f"{_run_meta(prov, bad['dir'])}{_links(bad, base)}</div>")
        run = e["run"]
        if not run:
            cmd = f"python -m workbench run {e['name']} --profile ci"
            parts.append(f'<p class="missing">No complete run yet ({html.escape(cmd)}).</p></section>')
            continue
        prov = run["provenance"]
        parts.append(_run_meta(prov, run["dir"]))
        parts.append(f"<details><summary>parameters</summary>{_params_table(prov.get('parameters') or {})}</details>")
        parts.append(_links(run, base))
        parts.append('<div class="figs">')
        for fig in run["figures"]:
            p = fig["path"]
            svg = p.with_suffix(".svg")
            alt = html.escape(f"{e['name']}: {p.stem}")
            parts.append(f'<figure><a href="{_rel(svg if svg.exists() else p, base)}"><img src="{_rel(p, base)}" '
                         f'alt="{alt}" loading="lazy"></a><figcaption><span class="file">{html.escape(p.name)}'
                         f"</span>{_markdown(fig['caption']) if fig['caption'] else ''}</figcaption></figure>")
        parts.append("</div></section>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_gallery(results_dir: str | Path | None = None, root: Path | None = None) -> Path:
    """Write ``<results>/index.html`` from the runs in ``results_dir`` (default ``<repo>/results``); return its path.

    Examples
    --------
    >>> write_gallery("results")                                  # doctest: +SKIP
    PosixPath('results/index.html')
    """
    root = Path(root or repo_root())
    results = Path(results_dir or root / "results").resolve()
    results.mkdir(parents=True, exist_ok=True)
    page = render(collect(results, root), results, root)
    out = results / "index.html"
    tmp = results / ".index.html.tmp"
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(out)   # a reader never sees half a page
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m workbench.report", description="write results/index.html")
    p.add_argument("--results", default=None, help="results directory (default <repo>/results)")
    args = p.parse_args(argv)
    out = write_gallery(args.results)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
