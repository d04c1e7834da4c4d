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

.PHONY: example test lint bench-accuracy mutants
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
	$(BIN)/python -m pytest -n 2

# The README's accuracy table (bench/bench_accuracy.py), then the slow checks of its targets: the
# cross-validated calibrations (tens of minutes on 2 cores). The checks that take seconds (memory,
# OOM, the datasheet's errors) are plain asserts of `make test`.
bench-accuracy: $(BIN)/activate
	$(BIN)/python bench/bench_accuracy.py --jobs 2
	$(BIN)/python -m pytest -m slow -p no:randomly -rxX tests/accuracy_tests/test_measured_accuracy.py

# Mutation testing, a tool and not a gate: mutmut mutates the modules [tool.mutmut] in pyproject
# names and runs the tests that cover each mutant; then the score per file. All ~3,000 mutants take
# hours on 2 cores; MUTANTS_SAMPLE=N checks N per file (seeded: the same ones every time).
MUTANTS_SAMPLE ?= 0
mutants: $(BIN)/activate
	rm -rf mutants
ifeq ($(MUTANTS_SAMPLE),0)
	$(BIN)/mutmut run --max-children 2 || true
else
	# a name that matches no mutant: mutmut generates the mutants and maps the tests, then stops
	$(BIN)/mutmut run --max-children 2 no-such-mutant > /dev/null 2>&1 || true
	$(BIN)/mutmut run --max-children 2 $$($(BIN)/python bench/mutation_score.py --sample $(MUTANTS_SAMPLE)) || true
endif
	$(BIN)/python bench/mutation_score.py --of-sample $(MUTANTS_SAMPLE)
