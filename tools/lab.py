"""Start JupyterLab the way ``make lab`` does (the browser test starts it with this too).

127.0.0.1 only, a token (``LAB_TOKEN``, or a fresh random one), the port from
``LAB_PORT`` (default 8888; taken or not, no silent fallback to another port),
``--allow-root`` when the effective user is root (containers, cloud VMs),
new notebooks on the venv's ``workbench`` kernel (the committed notebooks name
it in their kernelspec).  Prints the URL with its token, then runs the server
in the foreground.

Usage: ``python tools/lab.py [--port N] [--root DIR] [extra jupyter lab args]``
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNEL = "workbench"


def lab_command(port: int, root: Path = ROOT, extra: list[str] | None = None) -> list[str]:
    """The jupyter lab command line (the token travels in ``JUPYTER_TOKEN``, not in argv,
    so other users of the machine cannot read it from the process list)."""
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
           "--ServerApp.port_retries=0", f"--ServerApp.root_dir={root}",
           f"--MappingKernelManager.default_kernel_name={KERNEL}", "--LabApp.default_url=/lab/tree/notebooks",
           # settings overrides: a notebook starts the kernel its kernelspec names without asking, no news pop-up
           f"--LabApp.app_settings_dir={Path(__file__).resolve().parent / 'lab-settings'}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    return cmd + list(extra or [])


def kernel_installed() -> bool:
    from jupyter_client.kernelspec import KernelSpecManager

    return KERNEL in KernelSpecManager().find_kernel_specs()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=int(os.environ.get("LAB_PORT") or 8888))
    p.add_argument("--root", type=Path, default=ROOT)
    args, extra = p.parse_known_args(argv)
    if not kernel_installed():
        print(f"workbench: the '{KERNEL}' Jupyter kernel is not installed; run `make setup` first "
              f"(or: {sys.executable} -m ipykernel install --sys-prefix --name {KERNEL})", file=sys.stderr)
        return 2
    token = os.environ.get("LAB_TOKEN") or secrets.token_hex(24)
    env = {**os.environ, "JUPYTER_TOKEN": token}
    url = f"http://127.0.0.1:{args.port}/lab/tree/notebooks?token={token}"
    print(f"workbench: JupyterLab on the '{KERNEL}' kernel; open\n\n    {url}\n\n"
          f"(results gallery: http://127.0.0.1:{args.port}/files/results/index.html?token={token})", flush=True)
    cmd = lab_command(args.port, args.root, extra)
    os.execve(cmd[0], cmd, env)
    return 0  # pragma: no cover - execve does not return


if __name__ == "__main__":
    sys.exit(main())
