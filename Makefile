# Two commands on a fresh machine with python3 and make: `make demo`, `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Reinstall when the project's metadata changes.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test,integrations]"
	touch $@

demo: $(STAMP)
	$(BIN)/python example_project/run_demo.py

test: $(STAMP)
	$(BIN)/python -m pytest

BENCH_STAMP := $(VENV)/.installed-bench

$(BENCH_STAMP): pyproject.toml $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[test,bench]"
	touch $@

bench: $(BENCH_STAMP)
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) example_project/.scrapy .pytest_cache
