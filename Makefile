# workbench: two commands on a fresh machine
#   make figures   # set up the environment if needed, regenerate every figure (PROFILE=ci|laptop|large|gpu)
#   make test      # lint + the test suite (executes the notebooks with the ci profile)
#   make test-fast # the same without the tests marked slow; make test-gpu on a machine with a GPU

PYTHON  ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
PROFILE ?= laptop
EXTRAS  ?= test,bench
comma   := ,
STAMP   := .stamps/setup-$(subst $(comma),-,$(EXTRAS))
PYTEST_ARGS ?=
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_INSTALL := $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends

LAB_PORT ?= 8888

.PHONY: setup figures test test-fast test-gpu lint bench lab report setup-browser setup-r list clean distclean

setup: $(STAMP)

# Stamp-based: reinstalls only when pyproject.toml changes (or the venv is gone).
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[$(EXTRAS)]'
	$(BIN)/python -m ipykernel install --sys-prefix --name workbench --display-name "Python (workbench)" >/dev/null
	@mkdir -p .stamps && touch $@
	@echo "workbench: environment ready in $(VENV)"

figures: setup
	$(BIN)/python -m workbench run all --profile $(PROFILE)

list: setup
	$(BIN)/python -m workbench list

test: setup lint
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

# The quick loop while editing: everything but the tests marked slow (still part of make test).
test-fast: setup lint
	$(BIN)/python -m pytest -q -m "not slow" $(PYTEST_ARGS)

# On a machine with a CUDA GPU: the @pytest.mark.gpu tests and all seven kernels validated on a
# device cluster (tools/gpu_check.sh adds the device benchmarks and writes a CSV).
test-gpu: setup
	$(BIN)/python -m pytest -q -m gpu $(PYTEST_ARGS)
	$(BIN)/python tools/gpu_validate.py --backend gpu --size small --csv results/gpu-check/test-gpu.csv

lint: setup
	$(BIN)/ruff check workbench tests benchmarks tools

bench: setup
	@case "$(PROFILE)" in ci|laptop|gpu) ;; *) echo "make bench: PROFILE must be ci, laptop or gpu (the benchmarks have no '$(PROFILE)' sizes)"; exit 2;; esac
	$(BIN)/python -m workbench bench --profile $(PROFILE)

# JupyterLab on 127.0.0.1:$(LAB_PORT) with a token (LAB_TOKEN= to choose it), the workbench kernel,
# --allow-root when run as root; prints the URL with its token (tools/lab.py; the browser test starts it alike).
lab: setup
	LAB_PORT=$(LAB_PORT) $(BIN)/python tools/lab.py

# results/index.html from the runs already in results/ (make figures writes it at its end too).
report: setup
	$(BIN)/python -m workbench.report

# Headless Chromium and its WebDriver for the browser tests (Debian/Ubuntu; apt as root, when missing).
setup-browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then \
		echo "workbench: chromium and chromedriver present"; \
	else \
		$(APT_INSTALL) chromium chromium-driver; \
	fi

# R with spatstat (and its datasets) for the live Ripley's K comparison and the real point patterns.
setup-r:
	@if command -v Rscript >/dev/null && Rscript -e 'quit(status = !requireNamespace("spatstat", quietly = TRUE))'; \
	then echo "workbench: R and spatstat present"; else $(APT_INSTALL) r-base-core r-cran-spatstat r-cran-spatstat.data; fi

clean:
	rm -rf results .pytest_cache .ruff_cache dask-worker-space dask-scratch-space
	find . -name __pycache__ -type d -prune -not -path './$(VENV)/*' -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) .stamps *.egg-info
