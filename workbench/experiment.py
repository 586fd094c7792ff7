"""Experiments: a YAML config names a notebook and its parameters per profile;
papermill executes it into ``results/<experiment>/<run-id>/`` with provenance.

A run directory holds the executed notebook, the figures it saved (PNG and
SVG), tidy metrics tables (CSV), the Dask performance report of every cluster
the notebook started, and ``provenance.json``.  A run executes in a staging
directory and is moved into place only when every cell succeeded, so a failed
run never touches earlier results; the error names the failing cell.

Examples
--------
>>> from workbench import experiment
>>> experiment.list_experiments()                             # doctest: +SKIP
['bfs', 'coloring', 'environment', ...]
>>> run_dir = experiment.run("environment", profile="ci")     # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import cluster as _cluster

__all__ = [
    "PROFILES",
    "ExperimentError",
    "ExperimentFailed",
    "ExperimentStopped",
    "repo_root",
    "list_experiments",
    "load_config",
    "run",
    "run_many",
    "save_figure",
    "save_metrics",
    "provenance",
]

PROFILES = ("ci", "laptop", "large", "gpu")

#: Environment variables the runner sets for the notebook process.
ENV_RUN_DIR = "WORKBENCH_RUN_DIR"
ENV_PROFILE = "WORKBENCH_PROFILE"

#: Profile keys the runner reads itself (budgets), not passed to the notebook.
BUDGET_KEYS = ("max_minutes", "max_memory_gb")

#: Cell tags a ``build_only`` run executes: the parameters, the cluster start, the input builders, the teardown.
BUILD_TAGS = ("parameters", "setup", "inputs", "teardown")


class ExperimentError(ValueError):
    """A config or argument is wrong (raised before anything runs)."""


class ExperimentFailed(RuntimeError):
    """A notebook cell raised; ``cell_index`` and ``run_dir`` say where."""

    def __init__(self, message: str, *, cell_index: int | None = None, run_dir: Path | None = None):
        super().__init__(message)
        self.cell_index = cell_index
        self.run_dir = run_dir


class ExperimentStopped(ExperimentFailed):
    """The runner stopped a notebook that passed its ``max_minutes`` or ``max_memory_gb``."""


def repo_root() -> Path:
    """The checkout this package lives in (where ``experiments/`` is)."""
    env = os.environ.get("WORKBENCH_ROOT")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve().parent.parent
    if (here / "experiments").is_dir():
        return here
    return Path.cwd().resolve()


def _experiments_dir(root: Path | None = None) -> Path:
    return (root or repo_root()) / "experiments"


def list_experiments(root: Path | None = None) -> list[str]:
    """Names of the experiment configs (``experiments/<name>.yaml``)."""
    d = _experiments_dir(root)
    return sorted(p.stem for p in d.glob("*.yaml")) if d.is_dir() else []


def load_config(name: str, root: Path | None = None) -> dict:
    """Read and check ``experiments/<name>.yaml`` (or a path to a YAML file)."""
    import yaml

    root = root or repo_root()
    if isinstance(name, os.PathLike):
        name = os.fspath(name)
    if not isinstance(name, str):
        raise TypeError(f"name must be an experiment name or a YAML path, got {type(name).__name__}")
    path = Path(name) if name.endswith((".yaml", ".yml")) else _experiments_dir(root) / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(list_experiments(root)) or "none"
        raise ExperimentError(f"no experiment {name!r} (looked for {path}); known: {known}")
    try:
        with open(path) as f:
            cfg = yaml.safe_load(f) or {}
    except yaml.YAMLError as e:
        raise ExperimentError(f"{path}: not valid YAML ({' '.join(str(e).split())})") from e
    if not isinstance(cfg, dict) or "notebook" not in cfg:
        raise ExperimentError(f"{path}: needs a 'notebook:' key")
    if not isinstance(cfg["notebook"], str) or not cfg["notebook"].endswith(".ipynb"):
        raise ExperimentError(f"{path}: 'notebook:' must be the path of a .ipynb file, got {cfg['notebook']!r}")
    nb = Path(cfg["notebook"])
    nb = nb if nb.is_absolute() else path.parent.parent / nb
    if not nb.is_file():
        raise ExperimentError(f"{path}: notebook {cfg['notebook']!r} does not exist (looked for {nb})")
    profiles = cfg.get("profiles") or {}
    if not isinstance(profiles, dict) or not all(isinstance(v, dict | None) for v in profiles.values()):
        raise ExperimentError(f"{path}: 'profiles' must map profile names to parameter dicts")
    known = _notebook_parameters(nb)
    for k, v in profiles.items():   # the budgets too, so a run of several stops before the first starts
        _budgets(dict(v or {}), None, None, f"{path} ({k})")
        # papermill would inject a misspelt name as a variable nothing reads, and the default would run
        unknown = sorted(set(v or {}) - known - {"max_minutes", "max_memory_gb"})
        if unknown:
            raise ExperimentError(f"{path} ({k}): {unknown} are not parameters of {nb.name} "
                                  f"(its parameters: {', '.join(sorted(known))})")
    cfg["notebook_path"] = nb
    cfg["name"] = path.stem
    cfg["config_path"] = path
    cfg["profiles"] = {k: dict(v or {}) for k, v in profiles.items()}
    return cfg


#: Set when the runner (or the CLI) saw SIGINT or SIGTERM: a library may swallow the KeyboardInterrupt the
#: signal raised (a kernel being started does), and the run must still stop.
INTERRUPTED = threading.Event()


@contextmanager
def _signals_to(handler: Any) -> Iterator[None]:
    """SIGINT and SIGTERM go to ``handler`` inside the block (main thread only: elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, h in before.items():
            signal.signal(sig, h)


def _notebook_parameters(nb: Path) -> set[str]:
    """The names the notebook's ``parameters`` cell sets (what a profile may override)."""
    import papermill as pm

    try:
        return set(pm.inspect_notebook(str(nb)))
    except Exception as e:  # noqa: BLE001 - not a notebook papermill can read
        raise ExperimentError(f"{nb}: not a notebook papermill can read ({e.__class__.__name__}: {e})") from e


# --------------------------------------------------------------------------
# Helpers notebooks call
# --------------------------------------------------------------------------


def _out_dir(output_dir: str | os.PathLike | None) -> Path:
    d = Path(output_dir or os.environ.get(ENV_RUN_DIR) or ".")
    d.mkdir(parents=True, exist_ok=True)
    return d


def _current_workers() -> str | None:
    """"2 cpu workers" for the current default Dask client, or None without one."""
    try:
        from distributed import default_client

        client = default_client()
        n = len(client.nthreads())
        return f"{n} {_cluster.backend_of(client)} worker{'s' if n != 1 else ''}" if n else None
    except Exception:  # no client (or it is closing): the footer just says less
        return None


def figure_footer() -> str:
    """What a figure was measured on: host, cores, the current cluster's workers, the run's profile and id."""
    parts = [socket.gethostname(), f"{os.cpu_count()} cores"]
    workers = _current_workers()
    if workers:
        parts.append(workers)
    profile = os.environ.get(ENV_PROFILE)
    if profile:
        parts.append(f"profile {profile}")
    run_dir = os.environ.get(ENV_RUN_DIR)
    if run_dir:
        parts.append("run " + Path(run_dir).name.removeprefix(".staging-"))
    return "workbench · " + " · ".join(parts)


def save_figure(fig: Any, name: str, output_dir: str | os.PathLike | None = None, *, dpi: int = 120,
                footer: bool | str = True) -> list[Path]:
    """Save a matplotlib figure as ``<name>.png`` and ``<name>.svg`` in the run directory.

    ``footer`` (default on) stamps a small line under the figure naming the
    machine (host, cores), the cluster's workers and the run's profile
    (:func:`figure_footer`), so a PNG read on its own says what it measured;
    pass a string to write your own, or False for none.

    Examples
    --------
    >>> fig, ax = plt.subplots()                                   # doctest: +SKIP
    >>> save_figure(fig, "line")                                   # doctest: +SKIP
    [PosixPath('line.png'), PosixPath('line.svg')]
    """
    d = _out_dir(output_dir)
    if footer:
        text = footer if isinstance(footer, str) else figure_footer()
        stamp = getattr(fig, "_workbench_footer", None)
        if stamp is None:
            fig._workbench_footer = fig.text(0.5, -0.01, text, ha="center", va="top", fontsize=7, color="0.35")
        else:
            stamp.set_text(text)
    paths = [d / f"{name}.png", d / f"{name}.svg"]
    fig.savefig(paths[0], dpi=dpi, bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight")
    return paths


def save_metrics(table: Any, name: str, output_dir: str | os.PathLike | None = None) -> Path:
    """Save a tidy table (DataFrame, list of row dicts, or dict of columns) as ``<name>.csv`` in the run
    directory."""
    import pandas as pd

    if isinstance(table, pd.DataFrame):
        df = table
    elif isinstance(table, dict):
        df = pd.DataFrame(table)                 # columns (list(dict) would make a column of its keys)
    else:
        df = pd.DataFrame(list(table))
    path = _out_dir(output_dir) / f"{name}.csv"
    df.to_csv(path, index=False)
    return path


def record_cluster(client: Any) -> None:
    """Called for every cluster started inside a run: append the cluster's
    spec and package versions (from the workers) to ``clusters.json``."""
    run_dir = os.environ.get(ENV_RUN_DIR)
    if not run_dir:
        return
    try:
        info = _cluster.scheduler_identity(client)
        workers = info.get("workers", {})
        versions = client.get_versions(check=False)
        pkgs = {}
        for section in ("client", "scheduler"):
            pkgs[section] = (versions.get(section) or {}).get("packages", {})
        wv = versions.get("workers") or {}
        pkgs["workers"] = next(iter(wv.values()), {}).get("packages", {}) if wv else {}
        entry = {
            "scheduler": info.get("address"),
            "dashboard": getattr(client, "dashboard_link", None),
            "n_workers": len(workers),
            "threads_per_worker": sorted({w.get("nthreads") for w in workers.values()}),
            "memory_limit_bytes": sorted({w.get("memory_limit") for w in workers.values()}),
            "worker_cores": _cluster.worker_cores(client),
            "packages": pkgs,
            "time": _dt.datetime.now(_dt.UTC).isoformat(),
        }
        path = Path(run_dir) / "clusters.json"
        existing = json.loads(path.read_text()) if path.exists() else []
        existing.append(entry)
        path.write_text(json.dumps(existing, indent=2, default=str))
    except Exception as e:  # provenance must never break a run
        print(f"workbench: could not record the cluster spec ({e})", file=sys.stderr)


@contextmanager
def _record_run(client: Any) -> Iterator[None]:
    """Inside an experiment run (the runner sets ``WORKBENCH_RUN_DIR`` for the
    notebook): record each cluster the notebook starts in the run's provenance
    and keep its dashboard as a Dask performance report."""
    run_dir = os.environ.get(ENV_RUN_DIR)
    if not run_dir:
        yield
        return
    record_cluster(client)
    from distributed import performance_report

    n = len(list(Path(run_dir).glob("dask-performance-report*.html")))
    name = "dask-performance-report.html" if n == 0 else f"dask-performance-report-{n}.html"
    with client.as_current(), performance_report(filename=str(Path(run_dir) / name)):
        yield


if _record_run not in _cluster.client_hooks:
    _cluster.client_hooks.append(_record_run)


# --------------------------------------------------------------------------
# Provenance
# --------------------------------------------------------------------------


def _git(root: Path, *args: str) -> str | None:
    try:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True,
                              timeout=20).stdout.strip()
    except Exception:
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpu_models() -> list[str]:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run([exe, "--query-gpu=name,memory.total", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20).stdout
        return [line.strip() for line in out.splitlines() if line.strip()]
    except Exception:
        return []


def _versions() -> dict:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for pkg in ("workbench", "numpy", "scipy", "dask", "distributed", "pandas", "numba", "papermill", "matplotlib",
                "pyarrow", "cupy-cuda12x", "cupy", "cudf-cu12", "cugraph-cu12", "dask-cuda", "pyfftw", "faiss-cpu",
                "python-igraph", "networkit", "pynndescent", "networkx", "scikit-learn"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def provenance(root: Path | None = None, **extra: Any) -> dict:
    """Where numbers come from: commit, dirty flag, versions, hardware, and ``extra``."""
    root = root or repo_root()
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    return {
        "git_commit": _git(root, "rev-parse", "HEAD"),
        "git_dirty": bool(status) if status is not None else None,
        "versions": _versions(),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpu_models": _gpu_models(),
        **extra,
    }


# --------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------


def _run_id(root: Path) -> str:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    commit = (_git(root, "rev-parse", "--short", "HEAD") or "nogit")
    return f"{stamp}-{commit}-{os.getpid() % 100000}"


def _describe_failure(err: Exception, nb_path: Path) -> tuple[str, int | None]:
    """Name the failing cell: its index, first source line, the line that raised, and the error."""
    idx = getattr(err, "cell_index", None)
    ename, evalue = getattr(err, "ename", type(err).__name__), getattr(err, "evalue", str(err))
    first, raising = "", ""
    try:
        import nbformat

        nb = nbformat.read(nb_path, as_version=4)
        # The executed notebook marks the failing cell with an error output; trust it over the index
        # papermill reports (which counts its own injected cells differently).
        for i, cell in enumerate(nb.cells):
            if any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
                idx = i
                break
        else:  # a killed kernel leaves no error output: the last cell papermill started
            started = [i for i, c in enumerate(nb.cells) if c.metadata.get("papermill", {}).get("start_time")]
            idx = started[-1] if started else idx
        if idx is not None and idx < len(nb.cells):
            lines = nb.cells[idx].source.splitlines()
            first = next((ln.strip() for ln in lines if ln.strip()), "")
            at = _raising_line(nb.cells[idx])
            # the first line alone often names only a comment or a loop header of a long cell
            if at is not None and 1 <= at <= len(lines) and lines[at - 1].strip() != first:
                raising = f", line {at} ({lines[at - 1].strip()[:80]!r})"
    except Exception:
        pass
    where = f"cell {idx}" if idx is not None else "an unknown cell"
    return f"{where} ({first[:80]!r}){raising} raised {ename}: {evalue}", idx


def _raising_line(cell: dict) -> int | None:
    """The line of ``cell`` that raised, from its error output's traceback (IPython names the cell's own
    frame ``Cell In[n], line k`` first, ahead of frames in functions that earlier cells defined)."""
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            tb = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(out.get("traceback", [])))
            m = re.search(r"Cell In\s*\[[^\]]*\],\s*line (\d+)", tb)
            return int(m.group(1)) if m else None
    return None


@contextmanager
def _env(**values: str | None) -> Iterator[None]:
    """Set (or, for None, leave alone) environment variables for the notebook process; restore after."""
    old = {k: os.environ.get(k) for k in values}
    for k, v in values.items():
        if v is not None:
            os.environ[k] = v
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _budgets(params: dict, max_minutes: float | None, max_memory_gb: float | None,
             where: str) -> tuple[float | None, float | None]:
    """The run's budgets: explicit arguments over the profile's ``max_minutes`` / ``max_memory_gb``."""
    out = []
    for key, given in (("max_minutes", max_minutes), ("max_memory_gb", max_memory_gb)):
        v = params.pop(key, None) if given is None else (params.pop(key, None), given)[1]
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or v <= 0):
            raise ExperimentError(f"{where}: {key} must be a positive number, got {v!r}")
        out.append(None if v is None else float(v))
    return out[0], out[1]


def _build_cells(src: Path) -> list:
    """The notebook's cells tagged in :data:`BUILD_TAGS`; an ExperimentError when none builds inputs."""
    import nbformat

    nb = nbformat.read(src, as_version=4)
    keep = [c for c in nb.cells if set(c.metadata.get("tags", [])) & set(BUILD_TAGS)]
    if not any("inputs" in c.metadata.get("tags", []) for c in keep):
        raise ExperimentError(f"{src.name}: no cell is tagged 'inputs', so build_only has nothing to build")
    return keep


def _build_only_notebook(src: Path, dst: Path) -> Path:
    """A copy of the notebook with only the cells tagged in :data:`BUILD_TAGS`."""
    import nbformat

    nb = nbformat.read(src, as_version=4)
    nb.cells = _build_cells(src)
    nbformat.write(nb, dst)
    return dst


def _final_paths(prov: dict, staging: Path, final: Path) -> None:
    """The run executes in ``staging`` and is renamed to ``final``: record where it ends up."""
    prov["run_dir"] = str(final)
    params = prov.get("parameters") or {}
    if params.get("output_dir") == str(staging):
        prov["parameters"] = {**params, "output_dir": str(final)}


def _default_kernel() -> str:
    """``workbench`` (the kernelspec ``make setup`` installs, which the notebooks name) when installed."""
    try:
        from jupyter_client.kernelspec import KernelSpecManager

        return "workbench" if "workbench" in KernelSpecManager().find_kernel_specs() else "python3"
    except Exception:
        return "python3"


def run(name: str, profile: str = "laptop", *, results_dir: str | os.PathLike | None = None,
        parameters: dict | None = None, kernel_name: str | None = None, progress: bool = True,
        timeout: int | None = None, root: Path | None = None, max_minutes: float | None = None,
        max_memory_gb: float | None = None, build_only: bool = False, monitor_interval: float = 0.5) -> Path:
    """Execute one experiment with papermill; return its run directory.

    Parameters
    ----------
    name : str
        Experiment name (``experiments/<name>.yaml``) or a YAML path.
    profile : {"ci", "laptop", "gpu"}
        Parameter set from the config's ``profiles``.
    results_dir : path, optional
        Default ``<repo>/results``.
    parameters : dict, optional
        Overrides on top of the profile's parameters.
    kernel_name : str, optional
        Jupyter kernel (default: ``workbench`` when that kernelspec is
        installed, as ``make setup`` does, else this interpreter's ``python3``).
    progress : bool
        Show papermill's per-cell progress bar.
    timeout : int, optional
        Per-cell timeout in seconds.
    max_minutes, max_memory_gb : float, optional
        Budgets (default: the profile's ``max_minutes`` / ``max_memory_gb``,
        if it declares them).  A monitor samples the memory of the notebook's
        kernel (the client) and of every worker process it starts; a run past
        either budget is stopped (its processes killed) and reported.  The
        peaks and the wall time are recorded in ``provenance.json`` either way.
    build_only : bool
        Execute only the cells tagged ``parameters``, ``setup``, ``inputs``
        and ``teardown``: the notebook's inputs at the profile's sizes,
        without the timed sections (a check that input construction fits).
        The run goes to ``results/<name>/build-<run-id>/`` and does not
        become ``latest``.

    Raises
    ------
    ExperimentError
        Unknown experiment or profile, or a bad budget (nothing runs).
    ExperimentFailed
        A cell raised; the message names the cell.  The partial run is kept
        in ``results/<name>/failed-<run-id>/``; earlier results are untouched.
    ExperimentStopped
        (an ExperimentFailed) The run passed ``max_minutes`` or
        ``max_memory_gb`` and was stopped; the message says which.
    KeyboardInterrupt
        Ctrl-C or SIGTERM (taken in the main thread while the notebook
        runs): the kernel and its workers are killed and the partial run is
        kept in ``results/<name>/failed-<run-id>/`` (status ``interrupted``).
    """
    import papermill as pm

    from ._monitor import TreeMonitor
    from .bench import ENV_PEER_MEMORY

    root = Path(root or repo_root())
    if profile not in PROFILES:
        raise ExperimentError(f"profile must be one of {PROFILES}, got {profile!r}")
    cfg = load_config(name, root)
    if profile not in cfg["profiles"]:
        raise ExperimentError(f"experiment {cfg['name']!r} has no profile {profile!r} "
                              f"(has: {', '.join(cfg['profiles'])})")
    params = {**cfg["profiles"][profile], **(parameters or {})}
    budget_min, budget_gb = _budgets(params, max_minutes, max_memory_gb, f"{cfg['name']} ({profile})")
    if build_only:
        _build_cells(cfg["notebook_path"])
    results = Path(results_dir or root / "results").resolve()
    exp_dir = results / cfg["name"]
    run_id = _run_id(root)
    staging = exp_dir / f".staging-{run_id}"
    try:
        staging.mkdir(parents=True, exist_ok=False)
    except OSError as e:
        raise ExperimentError(f"cannot write the run under {results} ({e.strerror or e})") from e
    out_nb = staging / cfg["notebook_path"].name
    src_nb = cfg["notebook_path"]
    if build_only:
        src_nb = _build_only_notebook(src_nb, staging / f".build-only-{src_nb.name}")
    params.update(output_dir=str(staging), profile=profile)

    started = _dt.datetime.now(_dt.UTC)
    t0 = time.perf_counter()
    error: Exception | None = None
    monitor = TreeMonitor(interval=monitor_interval, max_seconds=None if budget_min is None else budget_min * 60,
                          max_bytes=None if budget_gb is None else budget_gb * 2**30)
    # peers size themselves against half the run's memory budget (workbench.bench.peer_memory_limit)
    peer_gb = None if budget_gb is None or os.environ.get(ENV_PEER_MEMORY) else f"{budget_gb / 2:g}"
    interrupts: list[int] = []

    def interrupt(signum: int, frame: Any) -> None:
        # Ctrl-C or SIGTERM: kill the kernel and its workers (again as they appear: a kernel still starting
        # swallows the KeyboardInterrupt), so papermill returns whatever it was doing
        interrupts.append(signum)
        INTERRUPTED.set()
        monitor.exceeded = monitor.exceeded or "interrupted"
        monitor.kill()
        raise KeyboardInterrupt

    with _env(**{ENV_RUN_DIR: str(staging), ENV_PROFILE: profile, ENV_PEER_MEMORY: peer_gb}), monitor, \
            _signals_to(interrupt):
        try:
            if INTERRUPTED.is_set():   # a signal before this run began, whose KeyboardInterrupt was swallowed
                raise KeyboardInterrupt
            pm.execute_notebook(str(src_nb), str(out_nb), parameters=params,
                                kernel_name=kernel_name or _default_kernel(), progress_bar=progress, cwd=str(root),
                                execution_timeout=timeout, log_output=False,
                                # saved as each cell starts, so a run the monitor kills still names its cell
                                request_save_on_cell_execute=True)
        except Exception as e:  # papermill's PapermillExecutionError, or kernel death
            error = e
        except BaseException:
            interrupts.append(signal.SIGINT)
    if interrupts or INTERRUPTED.is_set():   # the partial run becomes failed-<run-id> (not a stray staging dir)
        kept = exp_dir / f"failed-{run_id}"
        with contextlib.suppress(OSError):
            prov = provenance(root, experiment=cfg["name"], profile=profile, parameters=params, run_id=run_id,
                              status="interrupted", error="interrupted", build_only=build_only)
            _final_paths(prov, staging, kept)
            (staging / "provenance.json").write_text(json.dumps(prov, indent=2, default=str))
            staging.rename(kept)
        INTERRUPTED.clear()
        raise KeyboardInterrupt
    usage = monitor.summary()
    if build_only:
        src_nb.unlink(missing_ok=True)

    clusters_path = staging / "clusters.json"
    clusters = json.loads(clusters_path.read_text()) if clusters_path.exists() else []
    prov = provenance(root, experiment=cfg["name"], profile=profile, parameters=params,
                      notebook=str(cfg["notebook_path"].relative_to(root)) if cfg["notebook_path"].is_relative_to(root)
                      else str(cfg["notebook_path"]),
                      started=started.isoformat(), finished=_dt.datetime.now(_dt.UTC).isoformat(),
                      seconds=time.perf_counter() - t0, clusters=clusters, run_id=run_id,
                      status="stopped" if usage["stopped"] else "failed" if error else "ok",
                      build_only=build_only, budgets={"max_minutes": budget_min, "max_memory_gb": budget_gb},
                      peak_memory_gib={k: round(usage[f"peak_{k}_bytes"] / 2**30, 3)
                                       for k in ("client", "workers", "total")},
                      monitor=usage)
    if error is not None or usage["stopped"]:
        msg, idx = _describe_failure(error or RuntimeError("stopped"), out_nb)
        if usage["stopped"]:
            msg = f"stopped by the runner: {usage['stopped']} (it was running {msg.split(' raised ')[0]})"
        prov["error"] = msg
        failed = exp_dir / f"failed-{run_id}"
        _final_paths(prov, staging, failed)
        (staging / "provenance.json").write_text(json.dumps(prov, indent=2, default=str))
        staging.rename(failed)
        cls, verb = (ExperimentStopped, "was") if usage["stopped"] else (ExperimentFailed, "failed:")
        raise cls(f"experiment {cfg['name']!r} (profile {profile}) {verb} {msg}; partial run kept in {failed}",
                  cell_index=idx, run_dir=failed) from error

    if build_only:
        final = exp_dir / f"build-{run_id}"
        _final_paths(prov, staging, final)
        (staging / "provenance.json").write_text(json.dumps(prov, indent=2, default=str))
        staging.rename(final)
        return final
    final = exp_dir / run_id
    _final_paths(prov, staging, final)
    (staging / "provenance.json").write_text(json.dumps(prov, indent=2, default=str))
    staging.rename(final)
    latest = exp_dir / "latest"
    tmp_link = exp_dir / f".latest-{run_id}"
    tmp_link.symlink_to(final.name)
    tmp_link.replace(latest)  # atomic: 'latest' always points at a complete run
    return final


def check_configs(names: list[str] | str, profile: str, root: Path | None = None, *,
                  build_only: bool = False) -> list[str]:
    """The experiments ``names`` (``"all"``: every config) name, each config loaded and checked for ``profile``.

    Raises
    ------
    ExperimentError
        A name without a config, a config that does not load, or one without ``profile`` (or, with
        ``build_only``, a notebook with no cell tagged ``inputs``).
    """
    if names == "all" or names == ["all"]:
        names = list_experiments(root)
    names = [names] if isinstance(names, str) else list(names)
    for n in names:  # validate everything before running anything
        cfg = load_config(n, root)
        if profile not in cfg["profiles"]:
            raise ExperimentError(f"experiment {n!r} has no profile {profile!r} (has: {', '.join(cfg['profiles'])})")
        if build_only:
            _build_cells(cfg["notebook_path"])
    return names


def run_many(names: list[str] | str, profile: str = "laptop", *, keep_going: bool = True,
             **kwargs: Any) -> dict[str, Path | Exception]:
    """Run several experiments (``"all"`` for every config) with a progress bar across them."""
    from ._progress import progress as _progress

    names = check_configs(names, profile, kwargs.get("root"), build_only=bool(kwargs.get("build_only")))
    out: dict[str, Path | Exception] = {}
    bar = _progress(names, desc=f"experiments ({profile})", unit="notebook")
    for n in bar:
        if INTERRUPTED.is_set():
            INTERRUPTED.clear()
            raise KeyboardInterrupt
        if hasattr(bar, "set_postfix_str"):
            bar.set_postfix_str(n)
        try:
            out[n] = run(n, profile, **kwargs)
        except ExperimentFailed as e:
            out[n] = e
            if not keep_going:
                break
    return out
