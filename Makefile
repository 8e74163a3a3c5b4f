# wfkit: `make demo` sets everything up and runs the demo; `make test` runs every check.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
LINT   := wfkit tests scripts $(wildcard benchmarks)

.PHONY: demo test lint format graphviz browser postgres clean

demo: $(STAMP) graphviz
	$(BIN)/wfkit demo

test: $(STAMP) graphviz browser postgres lint
	$(BIN)/python -m pytest

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
