"""Run device-twin checks in a fresh simulated-device interpreter: numba picks the CUDA
simulator once per process, when numba.cuda is first imported, so the pytest process
itself (a client, not a worker) cannot switch to it."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run_in_simulator(code: str, expect: str, timeout: int = 600) -> None:
    """Run ``code`` with NUMBA_ENABLE_CUDASIM=1 as a gpu-sim worker would; it must exit 0 and print ``expect``."""
    path = [str(ROOT), str(ROOT / "tests"), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "WORKBENCH_BACKEND": "gpu-sim",
           "PYTHONPATH": os.pathsep.join(path)}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0 and expect in r.stdout, (r.stdout[-4000:], r.stderr[-4000:])


def run_check_in_simulator(test_file: str, check: str, timeout: int = 600) -> None:
    """Run function ``check`` of ``test_file`` in the simulator; it prints 'simulator checks passed'."""
    path = str(pathlib.Path(test_file).resolve())
    run_in_simulator(f"import runpy; runpy.run_path({path!r})[{check!r}]()", "simulator checks passed", timeout)
