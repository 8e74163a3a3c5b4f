# wfkit: `make demo` sets everything up and runs the demo; `make test` runs every check.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
LINT   := wfkit tests scripts $(wildcard benchmarks)

# one pytest-xdist worker per core; tests sharing a server or a cluster run on one worker
# (their xdist groups are set in tests/conftest.py)
PYTEST := $(BIN)/python -m pytest -n auto --dist loadgroup

.PHONY: demo test check lint format graphviz browser postgres clean

demo: $(STAMP) graphviz
	$(BIN)/wfkit demo

# the whole suite, as CI runs it: notebooks and real browsers included
test: $(STAMP) graphviz browser postgres lint
	$(PYTEST)

# before each commit: lint and every test but the browser and notebook ones
check: $(STAMP) graphviz postgres lint
	$(PYTEST) -m "not browser and not notebook"

lint: $(STAMP)
	$(BIN)/ruff check $(LINT)
	$(BIN)/ruff format --check $(LINT)
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format $(LINT)
	$(BIN)/ruff check --fix $(LINT)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "wfkit needs Python 3.11 or newer; set PYTHON=python3.11")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || { echo "could not create $(VENV): on Debian/Ubuntu run 'sudo apt-get install python3-venv'"; exit 1; }
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,browser,postgres]'
	@touch $(STAMP)

graphviz:
	@bash scripts/ensure-graphviz.sh

browser:
	@bash scripts/ensure-browser.sh

postgres:
	@bash scripts/ensure-postgres.sh

clean:
	rm -rf $(VENV) wfkit-demo .pytest_cache .mypy_cache .ruff_cache
