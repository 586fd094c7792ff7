"""Command line: ``python -m workbench run|list|bench``.

Examples
--------
``python -m workbench list``
``python -m workbench run all --profile ci``
``python -m workbench run bfs coloring --profile laptop``
``python -m workbench bench --profile laptop``
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any


def _cmd_list(args: argparse.Namespace) -> int:
    from .experiment import ExperimentError, list_experiments, load_config

    broken = 0
    for name in list_experiments():
        try:
            cfg = load_config(name)
        except ExperimentError as e:   # the others still list
            broken += 1
            print(f"workbench: {e}", file=sys.stderr)
            continue
        print(f"{name:14s} {cfg['notebook']:32s} profiles: {', '.join(cfg['profiles'])}  "
              f"{cfg.get('description', '')}")
    return 2 if broken else 0


def _last_seconds(results: Path, name: str, profile: str) -> float | None:
    """Wall seconds of the newest complete (not build-only) run of ``name`` at ``profile``, if any."""
    exp = results / name
    if not exp.is_dir():
        return None
    for d in sorted((p for p in exp.iterdir() if p.name[:1].isdigit()), reverse=True):  # run ids start with a date
        try:
            prov = json.loads((d / "provenance.json").read_text())
        except (OSError, ValueError):
            continue
        if prov.get("status") == "ok" and prov.get("profile") == profile and not prov.get("build_only"):
            return float(prov["seconds"])
    return None


def _print_estimate(names: list[str], profile: str, results: Path) -> None:
    known = {n: _last_seconds(results, n, profile) for n in names}
    have = {n: s for n, s in known.items() if s is not None}
    if not have:
        print(f"workbench: no complete {profile} run on record yet; the first run sets the estimate", flush=True)
        return
    missing = [n for n in names if n not in have]
    print(f"workbench: estimate from the last complete {profile} runs: {sum(have.values()) / 60:.1f} min "
          f"({', '.join(f'{n} {s / 60:.1f}' for n, s in have.items())})"
          + (f"; no record for {', '.join(missing)}" if missing else ""), flush=True)


def _usage_table(out: dict) -> str:
    """Per notebook: status, minutes, peak memory of the client, the workers and both (GiB)."""
    lines = [f"{'experiment':14s} {'status':8s} {'minutes':>8s} {'client GiB':>10s} {'workers GiB':>11s} "
             f"{'total GiB':>9s}"]
    tot_s, peak = 0.0, 0.0
    for name, res in out.items():
        run_dir = res if isinstance(res, Path) else getattr(res, "run_dir", None)
        try:
            prov = json.loads((Path(run_dir) / "provenance.json").read_text())
        except (OSError, TypeError, ValueError):
            lines.append(f"{name:14s} {'?':8s}")
            continue
        mem = prov.get("peak_memory_gib", {})
        tot_s += prov.get("seconds", 0.0)
        peak = max(peak, mem.get("total", 0.0))
        lines.append(f"{name:14s} {prov.get('status', '?'):8s} {prov.get('seconds', 0.0) / 60:8.1f} "
                     f"{mem.get('client', float('nan')):10.2f} {mem.get('workers', float('nan')):11.2f} "
                     f"{mem.get('total', float('nan')):9.2f}")
    lines.append(f"{'all':14s} {'':8s} {tot_s / 60:8.1f} {'':10s} {'':11s} {peak:9.2f}  (max of the peaks)")
    return "\n".join(lines)


def _cmd_run(args: argparse.Namespace) -> int:
    import signal

    from .experiment import INTERRUPTED, ExperimentError, ExperimentFailed, check_configs, repo_root, run_many

    def interrupt(signum: int, frame: Any) -> None:
        INTERRUPTED.set()           # remembered where a library swallows the KeyboardInterrupt
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)

    results = Path(args.results) if args.results else repo_root() / "results"
    if results.exists() and not results.is_dir():
        print(f"workbench: --results {results} is a file, not a directory", file=sys.stderr)
        return 2
    try:
        names = check_configs(args.names, args.profile, build_only=args.build_only)
        if not args.build_only:
            _print_estimate(names, args.profile, results)
        out = run_many(names, args.profile, results_dir=args.results, progress=not args.no_progress,
                       timeout=args.cell_timeout, build_only=args.build_only)
    except ExperimentError as e:
        print(f"workbench: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        import logging

        # the executing cell's task, never awaited now, would be logged with its whole traceback at exit
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
        print(f"\nworkbench: interrupted; a run in progress is kept as failed-<run-id> under {results}",
              file=sys.stderr)
        return 130
    failed = 0
    for name, res in out.items():
        if isinstance(res, ExperimentFailed):
            failed += 1
            print(f"FAILED {name}: {res}", file=sys.stderr)
        else:
            print(f"ok     {name}: {res}")
    print("\n" + _usage_table(out), flush=True)
    from .report import write_gallery

    print(f"gallery: {write_gallery(args.results)}")
    return 1 if failed else 0


def _bench_paths(root: Path) -> dict[str, Path]:
    return {p.stem.removeprefix("bench_"): p for p in sorted((root / "benchmarks").glob("bench_*.py"))}


def _bench_modules(root: Path, names: list[str]) -> list:
    mods = []
    for key, path in _bench_paths(root).items():
        if names and key not in names:
            continue
        spec = importlib.util.spec_from_file_location(f"workbench_bench_{key}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mods.append((key, mod))
    return mods


def _ratio_spread(heads: Any) -> Any:
    """One row per headline (kernel, name): its metric's median, min and max over the rounds, and whether
    the median round met the target (the VM is noisy; #17: a target is met when the median run meets it)."""
    import pandas as pd

    def metric(r: Any) -> str:
        tm = r.get("target_metric")
        if isinstance(tm, str) and tm in r.index and pd.notna(r[tm]):
            return tm
        return next((c for c in ("speedup", "color_ratio", "stream_fraction") if c in r.index and pd.notna(r[c])),
                    "speedup")

    out = []
    for (kernel, name), g in heads.groupby(["kernel", "name"], sort=False):
        m = metric(g.iloc[0])
        g = g.sort_values(m)
        mid = g.iloc[(len(g) - 1) // 2]
        out.append({"kernel": kernel, "name": name, "metric": m, "rounds": len(g), "median": float(g[m].median()),
                    "min": float(g[m].min()), "max": float(g[m].max()), "target": mid["target"],
                    "rounds_met": int(g["meets_target"].astype(bool).sum()) if "meets_target" in g else None,
                    "meets_target": bool(mid.get("meets_target", False))})
    return pd.DataFrame(out)


def _cmd_bench(args: argparse.Namespace) -> int:
    import datetime as dt

    import pandas as pd

    from . import cluster
    from .experiment import provenance, repo_root

    root = repo_root()
    known = _bench_paths(root)
    unknown = sorted(set(args.names) - set(known))
    if unknown or not known:
        print(f"workbench: no benchmark {', '.join(unknown) or 'found'} (known: {', '.join(known)})", file=sys.stderr)
        return 2
    mods = _bench_modules(root, args.names)
    rows, errors = [], []
    ctx = cluster(backend=args.backend, n_workers=args.workers)
    try:
        ctx.start()
    except RuntimeError as e:   # no device for backend="gpu", say (one line, not the cluster's traceback)
        print(f"workbench: {e}", file=sys.stderr)
        return 2
    with ctx as client:
        for rnd in range(args.rounds):
            for key, mod in mods:
                print(f"== {key}" + (f" (round {rnd + 1}/{args.rounds})" if args.rounds > 1 else ""), flush=True)
                try:
                    got = mod.run(client, profile=args.profile)
                except Exception as e:  # one broken benchmark must not hide the others
                    errors.append((key, e))
                    print(f"   failed: {e.__class__.__name__}: {e}", file=sys.stderr)
                    continue
                for r in got:
                    r.setdefault("kernel", key)
                    r["round"] = rnd
                rows.extend(got)
                show = pd.DataFrame(got)
                cols = [c for c in ("name", "median_s", "speedup", "target", "meets_target") if c in show]
                print(show[cols].to_string(index=False), flush=True)
    df = pd.DataFrame(rows)
    out_dir = Path(args.results) if args.results else root / "results" / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = out_dir / f"bench-{args.profile}-{stamp}.csv"
    df.to_csv(path, index=False)
    (out_dir / f"bench-{args.profile}-{stamp}.provenance.json").write_text(
        __import__("json").dumps(provenance(root, profile=args.profile, workers=args.workers), indent=2, default=str))
    if "target" in df:
        spread = _ratio_spread(df[df["target"].notna()])
        if len(spread):
            spread.to_csv(out_dir / f"bench-{args.profile}-{stamp}.spread.csv", index=False)
            print(f"\nHeadline ratios over {args.rounds} round(s) (met when the median round meets its target; "
                  "min/max: the spread):")
            print(spread.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    print(f"\nwrote {path}")
    return 1 if errors else 0


def _positive_int(text: str) -> int:
    """argparse type: a count of 1 or more (argparse prints the usage line and this message)."""
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be a positive int, got {text!r}")
    return v


def main(argv: list[str] | None = None) -> int:
    from .experiment import PROFILES

    # the module docstring without its reST markup: the first line, and the examples as an epilog
    doc = __doc__.replace("``", "").splitlines()
    p = argparse.ArgumentParser(prog="workbench", description=doc[0],
                                epilog="examples:\n" + "\n".join("  " + ln for ln in doc[4:] if ln.strip()),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)

    sp = sub.add_parser("list", help="list experiments")
    sp.set_defaults(fn=_cmd_list)

    sp = sub.add_parser("run", help="execute experiments with papermill into results/")
    sp.add_argument("names", nargs="+", help="experiment names, or 'all'")
    sp.add_argument("--profile", default="laptop", choices=list(PROFILES), help="parameter set (default laptop)")
    sp.add_argument("--results", default=None, help="results directory (default <repo>/results)")
    sp.add_argument("--no-progress", action="store_true", help="no per-cell progress bar")
    sp.add_argument("--cell-timeout", type=_positive_int, default=None, help="per-cell timeout, seconds (default none)")
    sp.add_argument("--build-only", action="store_true",
                    help="run only the cells that build each notebook's inputs (no timed sections)")
    sp.set_defaults(fn=_cmd_run)

    sp = sub.add_parser("bench", help="run benchmarks/bench_*.py and print ratio tables")
    sp.add_argument("names", nargs="*", help="benchmark names (default: all)")
    sp.add_argument("--profile", default="laptop", choices=["ci", "laptop", "gpu"])
    sp.add_argument("--workers", type=_positive_int, default=2)
    sp.add_argument("--backend", default="cpu", choices=["cpu", "gpu", "auto"])
    sp.add_argument("--results", default=None)
    sp.add_argument("--rounds", type=_positive_int, default=1,
                    help="run the suite this many times; report each ratio's spread")
    sp.set_defaults(fn=_cmd_bench)

    args = p.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
