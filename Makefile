# The README's two commands. Both create .venv on first use and reuse it after.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

$(BIN)/activate: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch pinned to the CPU build that installs from a local file here (see pyproject comments)
	$(BIN)/pip install -q -e '.[surrogate,profile,huggingface,megatron,fast,dev]' 'torch==2.13.0'
	touch $(BIN)/activate

.PHONY: example test lint
# The main job first: the best layout of MT-NLG 530B on up to 3,360 A100s (case study 1, ~15 s),
# a fresh study each time; then one iteration of the hand-picked MT-NLG plan in detail.
example: $(BIN)/activate
	rm -f runs/example.journal runs/example.journal.lock
	$(BIN)/vtrain-search --config examples/case_study_1_mtnlg.yaml --study example \
		--storage journal:///runs/example.journal --csv runs/example-plans.csv
	$(BIN)/vtrain-simulate examples/mtnlg_530b.yaml

lint: $(BIN)/activate
	$(BIN)/ruff check simulator vtrain_ml profiler surrogate tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

test: lint
	$(BIN)/python -m pytest
