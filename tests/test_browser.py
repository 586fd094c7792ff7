"""The interactive path in a real browser: JupyterLab started as ``make lab`` starts it, a notebook run from
the UI on the ``workbench`` kernel, and the results gallery with every image loaded (headless Chromium).

Needs Debian's ``chromium`` and ``chromium-driver`` (``make setup-browser``) and selenium (test extra);
skipped, with the reason, where they are missing.  Screenshots land in ``results/browser/``.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "results" / "browser"
NOTEBOOK = "00_environment.ipynb"

selenium = pytest.importorskip("selenium", reason="selenium is not installed (pip install -e '.[test]')")
if not (shutil.which("chromium") and shutil.which("chromedriver")):
    pytest.skip("headless Chromium is not installed (make setup-browser: apt-get install chromium chromium-driver)",
                allow_module_level=True)

from selenium import webdriver  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


_DRIVER = []   # the browser, for a screenshot when a wait times out


def _wait(what: str, fn, timeout: float, poll: float = 0.5):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            got = fn()
            if got:
                return got
        except Exception as e:  # the page or server is still coming up
            last = e
        time.sleep(poll)
    if _DRIVER:
        SHOTS.mkdir(parents=True, exist_ok=True)
        _DRIVER[0].save_screenshot(str(SHOTS / "timeout.png"))
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last error: {last!r})")


@pytest.fixture(scope="module")
def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1500,1100", "--hide-scrollbars"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(options=opts, service=webdriver.ChromeService(shutil.which("chromedriver")))
    driver.set_page_load_timeout(120)
    _DRIVER[:] = [driver]
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab through tools/lab.py (what ``make lab`` runs) on a copy of the notebook, so running it from
    the UI writes its figures and tables into a scratch tree, not the checkout."""
    root = tmp_path_factory.mktemp("lab")
    (root / "notebooks").mkdir()
    nb = json.loads((ROOT / "notebooks" / NOTEBOOK).read_text())
    # the ci profile's sizes, set in the parameters cell as papermill would (the cell is still run from the UI)
    ci = yaml.safe_load((ROOT / "experiments" / "environment.yaml").read_text())["profiles"]["ci"]
    params = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    params["source"] = "".join(params["source"]) + "\n" + "\n".join(f"{k} = {v!r}" for k, v in ci.items()) + "\n"
    (root / "notebooks" / NOTEBOOK).write_text(json.dumps(nb, indent=1))
    port, token = _free_port(), secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}   # the kernel must render figures inline
    env.update(LAB_TOKEN=token, LAB_PORT=str(port), PYTHONPATH=f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}",
               JUPYTER_RUNTIME_DIR=str(root / ".runtime"))
    log = open(root / "lab.log", "w+")
    proc = subprocess.Popen([sys.executable, str(ROOT / "tools" / "lab.py"), "--root", str(root)], cwd=root, env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait("JupyterLab to answer", lambda: _get_json(f"{base}/api/status?token={token}"), 120)
        log.seek(0)
        printed = log.read()
        assert f"{base}/lab/tree/notebooks?token={token}" in printed, printed[-2000:]
        yield {"base": base, "token": token, "root": root, "log": root / "lab.log"}
    finally:
        proc.terminate()   # the server shuts its kernels down, and each kernel closes its cluster at exit
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        log.close()


def _menu(driver, top: str, item: str) -> None:
    driver.find_element(By.XPATH, f"//li[contains(@class,'lm-MenuBar-item')][.//div[text()='{top}']]").click()
    _wait(f"menu item {item!r}", lambda: driver.find_element(
        By.XPATH, f"//li[contains(@class,'lm-Menu-item')][.//div[text()='{item}']]"), 20).click()


def test_notebook_runs_from_the_jupyterlab_ui(lab, browser):
    base, token = lab["base"], lab["token"]
    browser.get(f"{base}/lab/tree/notebooks/{NOTEBOOK}?token={token}")
    _wait("the notebook to open", lambda: browser.find_elements(By.CSS_SELECTOR, ".jp-NotebookPanel .jp-Cell"), 120)
    # the kernel the notebook's kernelspec names starts without a kernel-selection dialog
    _wait("the kernel to be idle", lambda: browser.find_elements(
        By.CSS_SELECTOR, ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator[data-status='idle']"),
        120)
    time.sleep(2)
    assert not browser.find_elements(By.CSS_SELECTOR, ".jp-Dialog"), "JupyterLab asked to select a kernel"
    _menu(browser, "Run", "Run All Cells")

    def finished():
        prompts = [p.text for p in browser.find_elements(By.CSS_SELECTOR, ".jp-CodeCell .jp-InputPrompt")]
        busy = browser.find_elements(By.CSS_SELECTOR, ".jp-Notebook-ExecutionIndicator[data-status='busy']")
        return prompts and not busy and all(p.strip() not in ("[ ]:", "[*]:", "") for p in prompts)

    _wait("every cell to run and the kernel to go idle", finished, 540, poll=2)
    time.sleep(1)   # let the last outputs paint
    SHOTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SHOTS / "jupyterlab-00_environment-top.png"))

    outputs = browser.find_element(By.CSS_SELECTOR, ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook")
    text = outputs.text
    assert "Traceback" not in text, text[-3000:]
    links = [a.get_attribute("href") for a in outputs.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output a")]
    dash = [h for h in links if h and h.startswith("http://127.0.0.1:") and h.endswith("/status")]
    assert dash, f"no clickable Dask dashboard link among the outputs' links {links}"
    imgs = outputs.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output img")
    assert imgs, "no figure rendered in the outputs"
    assert all(browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 100", i)
               for i in imgs), "a figure did not render"
    browser.execute_script("arguments[0].scrollIntoView()", imgs[-1])
    time.sleep(0.5)
    browser.save_screenshot(str(SHOTS / "jupyterlab-00_environment-figure.png"))
    kernel_label = browser.find_element(By.CSS_SELECTOR, ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-KernelName")
    assert kernel_label.text.strip() == "Python (workbench)", kernel_label.text

    # the server agrees: the notebook's session runs the workbench kernel, and no cell raised
    sessions = _get_json(f"{base}/api/sessions?token={token}")
    [session] = [s for s in sessions if s["path"].endswith(NOTEBOOK)]
    assert session["kernel"]["name"] == "workbench"

    def saved_with_outputs():
        # read from disk, not through the contents API: a GET that lands while the server writes the file finds
        # it half-written and "recovers" it from the save's backup, which the save then removes -- the notebook
        # was gone (renamed *.invalid, every later GET 404, the next save "No such file or directory")
        try:
            nb = json.loads((lab["root"] / "notebooks" / NOTEBOOK).read_text())
        except (OSError, ValueError):   # not there yet, or caught mid-write
            return None
        return nb if any(c.get("outputs") for c in nb["cells"]) else None

    _menu(browser, "File", "Save Notebook")
    saved = _wait("the notebook to be saved with outputs", saved_with_outputs, 60)
    cells = saved["cells"]
    assert saved["metadata"]["kernelspec"]["name"] == "workbench"
    errors = [o for c in cells for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert not errors, errors
    assert all(c.get("execution_count") for c in cells if c["cell_type"] == "code")


@pytest.fixture(scope="module")
def gallery(tmp_path_factory):
    """A gallery from a real run of the environment notebook (ci profile); the other experiments show as not run."""
    from workbench import experiment, report

    results = tmp_path_factory.mktemp("results")
    experiment.run("environment", "ci", results_dir=results, progress=False)
    return report.write_gallery(results)


def test_gallery_images_load(gallery, browser):
    browser.get(gallery.as_uri())
    _wait("the gallery", lambda: browser.find_elements(By.CSS_SELECTOR, "section.experiment"), 60)
    sections = [s.get_attribute("id") for s in browser.find_elements(By.CSS_SELECTOR, "section.experiment")]
    from workbench import experiment

    assert sections == experiment.list_experiments()
    imgs = browser.find_elements(By.CSS_SELECTOR, "figure img")
    assert imgs, "the gallery shows no figure"
    for img in imgs:   # lazy images load once scrolled into view
        browser.execute_script("arguments[0].scrollIntoView()", img)
        _wait(f"{img.get_attribute('src')} to load",
              lambda img=img: browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0",
                                                     img), 30, poll=0.2)
    browser.execute_script("window.scrollTo(0, 0)")
    SHOTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SHOTS / "gallery.png"))
