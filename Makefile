# The README's two commands. Both create .venv on first use and reuse it after.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

$(BIN)/activate: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch pinned to the CPU build that installs from a local file here (see pyproject comments)
	$(BIN)/pip install -q -e '.[surrogate,profile,dev]' 'torch==2.13.0'
	touch $(BIN)/activate

.PHONY: example test lint
example: $(BIN)/activate
	$(BIN)/python -m vtrain_ml.simulate examples/mtnlg_530b.yaml

lint: $(BIN)/activate
	$(BIN)/ruff check simulator vtrain_ml profiler surrogate tests bench
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest
