"""Every device kernel compiles for a real GPU.

numba's CUDA simulator runs kernels as Python and type-checks nothing, so a
kernel can pass every gpu-sim test and still not compile.  Here each
``workbench/kernels/*/cuda.py`` kernel is compiled to PTX with numba-cuda's
compiler (NVVM, no GPU needed) for every signature it is launched with
(``PTX_SIGNATURES``), for compute capabilities 8.0 and 9.0, in a process
without the simulator.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# slow: a subprocess compiles every device kernel with NVVM; make test runs it, make test-fast skips it
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
MODULES = sorted(ROOT.glob("workbench/kernels/*/cuda.py"))

_SCRIPT = r"""
import importlib, json, sys
from numba import cuda

out = {}
for name in sys.argv[1:]:
    mod = importlib.import_module(name)
    sigs = getattr(mod, "PTX_SIGNATURES", None)
    kernels = sorted(k for k, v in vars(mod).items()
                     if hasattr(v, "py_func") and getattr(v, "__module__", name) == name
                     and not getattr(getattr(v, "targetoptions", {}), "get", lambda *_: False)("device"))
    res = {"kernels": kernels, "missing": [], "errors": []}
    if sigs is None:
        res["errors"].append("no PTX_SIGNATURES dict")
    else:
        res["missing"] = [k for k in kernels if k not in sigs]
        for k, ss in sigs.items():
            fn = getattr(mod, k, None)
            if fn is None:
                res["errors"].append(f"{k}: listed in PTX_SIGNATURES but not defined")
                continue
            for s in ss:
                for cc in ((8, 0), (9, 0)):
                    try:
                        cuda.compile_ptx(fn.py_func, s, cc=cc)
                    except Exception as e:
                        res["errors"].append(f"{k}{s} cc={cc}: {type(e).__name__}: {str(e)[:400]}")
    out[name] = res
print("@@" + json.dumps(out))
"""


def _compiler_or_skip() -> None:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    probe = subprocess.run([sys.executable, "-c", "from numba import cuda; assert cuda.implementation == 'NVIDIA'; "
                            "import cuda.bindings.nvvm"], capture_output=True, text=True, env=env, timeout=120)
    if probe.returncode:
        pytest.skip("numba-cuda's compiler is not installed (pip install 'numba-cuda[cu12]'): "
                    + probe.stderr.strip().splitlines()[-1][:200])


def test_every_kernel_package_with_a_device_path_has_cuda_module():
    # each kernel's device twins sit beside its cpu twins
    for cpu in ROOT.glob("workbench/kernels/*/cpu.py"):
        assert (cpu.parent / "cuda.py").exists(), f"{cpu.parent.name} has cpu.py but no cuda.py twin"


@pytest.mark.skipif(not MODULES, reason="no device kernels yet")
def test_device_kernels_compile_to_ptx():
    _compiler_or_skip()
    names = [".".join(p.relative_to(ROOT).with_suffix("").parts) for p in MODULES]
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    # two processes, half the modules each: NVVM compiles on one core, and the suite leaves the other idle here
    procs = [subprocess.Popen([sys.executable, "-c", _SCRIPT, *part], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
             for part in (names[::2], names[1::2]) if part]
    res = {}
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=600)
            assert proc.returncode == 0, err[-3000:]
            res.update(json.loads(out.split("@@", 1)[1]))
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert sorted(res) == sorted(names)
    problems = []
    for name, r in res.items():
        problems += [f"{name}: kernel {k} has no PTX_SIGNATURES entry" for k in r["missing"]]
        problems += [f"{name}: {e}" for e in r["errors"]]
        assert r["kernels"], f"{name} defines no @cuda.jit kernel"
    assert not problems, "\n".join(problems)
