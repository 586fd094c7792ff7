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
import sys
from pathlib import Path


def _cmd_list(args: argparse.Namespace) -> int:
    from .experiment import list_experiments, load_config

    for name in list_experiments():
        cfg = load_config(name)
        print(f"{name:14s} {cfg['notebook']:32s} profiles: {', '.join(cfg['profiles'])}  "
              f"{cfg.get('description', '')}")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from .experiment import ExperimentError, ExperimentFailed, run_many

    try:
        out = run_many(args.names, args.profile, results_dir=args.results, progress=not args.no_progress,
                       timeout=args.cell_timeout)
    except ExperimentError as e:
        print(f"workbench: {e}", file=sys.stderr)
        return 2
    failed = 0
    for name, res in out.items():
        if isinstance(res, ExperimentFailed):
            failed += 1
            print(f"FAILED {name}: {res}", file=sys.stderr)
        else:
            print(f"ok     {name}: {res}")
    from .report import write_gallery

    print(f"gallery: {write_gallery(args.results)}")
    return 1 if failed else 0


def _bench_modules(root: Path, names: list[str]) -> list:
    mods = []
    for path in sorted((root / "benchmarks").glob("bench_*.py")):
        key = path.stem.removeprefix("bench_")
        if names and key not in names:
            continue
        spec = importlib.util.spec_from_file_location(f"workbench_bench_{key}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mods.append((key, mod))
    return mods


def _cmd_bench(args: argparse.Namespace) -> int:
    import datetime as dt

    import pandas as pd

    from . import cluster
    from .experiment import provenance, repo_root

    root = repo_root()
    mods = _bench_modules(root, args.names)
    if not mods:
        print("workbench: no benchmarks/bench_*.py matched", file=sys.stderr)
        return 2
    rows, errors = [], []
    with cluster(backend=args.backend, n_workers=args.workers) as client:
        for key, mod in mods:
            print(f"== {key}", flush=True)
            try:
                got = mod.run(client, profile=args.profile)
            except Exception as e:  # one broken benchmark must not hide the others
                errors.append((key, e))
                print(f"   failed: {e.__class__.__name__}: {e}", file=sys.stderr)
                continue
            for r in got:
                r.setdefault("kernel", key)
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
        heads = df[df["target"].notna()]
        if len(heads):
            print("\nHeadline ratios (speedup = peer time / ours; meets_target when >= target):")
            cols = [c for c in ("kernel", "name", "speedup", "target", "meets_target") if c in heads]
            print(heads[cols].to_string(index=False))
    print(f"\nwrote {path}")
    return 1 if errors else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="workbench", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    sp = sub.add_parser("list", help="list experiments")
    sp.set_defaults(fn=_cmd_list)

    sp = sub.add_parser("run", help="execute experiments with papermill into results/")
    sp.add_argument("names", nargs="+", help="experiment names, or 'all'")
    sp.add_argument("--profile", default="laptop", choices=["ci", "laptop", "gpu"])
    sp.add_argument("--results", default=None, help="results directory (default <repo>/results)")
    sp.add_argument("--no-progress", action="store_true", help="no per-cell progress bar")
    sp.add_argument("--cell-timeout", type=int, default=None, help="per-cell timeout, seconds")
    sp.set_defaults(fn=_cmd_run)

    sp = sub.add_parser("bench", help="run benchmarks/bench_*.py and print ratio tables")
    sp.add_argument("names", nargs="*", help="benchmark names (default: all)")
    sp.add_argument("--profile", default="laptop", choices=["ci", "laptop", "gpu"])
    sp.add_argument("--workers", type=int, default=2)
    sp.add_argument("--backend", default="cpu", choices=["cpu", "gpu", "auto"])
    sp.add_argument("--results", default=None)
    sp.set_defaults(fn=_cmd_bench)

    args = p.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
