# workbench: two commands on a fresh machine
#   make figures   # set up the environment if needed, regenerate every figure (PROFILE=ci|laptop|large|gpu)
#   make test      # lint + the test suite (executes the notebooks with the ci profile)

PYTHON  ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
PROFILE ?= laptop
EXTRAS  ?= test,bench
STAMP   := .stamps/setup-$(subst $(comma),-,$(EXTRAS))
comma   := ,
PYTEST_ARGS ?=

.PHONY: setup figures test lint bench lab list clean distclean

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

lint: setup
	$(BIN)/ruff check workbench tests benchmarks tools

bench: setup
	$(BIN)/python -m workbench bench --profile $(PROFILE)

lab: setup
	@echo "Starting JupyterLab on the workbench kernel; open the URL printed below."
	$(BIN)/jupyter lab --no-browser --ip=127.0.0.1 --notebook-dir=. notebooks/

clean:
	rm -rf results .pytest_cache .ruff_cache dask-worker-space dask-scratch-space
	find . -name __pycache__ -type d -prune -not -path './$(VENV)/*' -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) .stamps *.egg-info
