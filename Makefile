# Two commands on a fresh machine with python3 and make: `make demo`, `make test`.
# `make docs` builds the manual in docs/_build/html; `make test` lints (`make lint`: ruff, mypy) and builds it too (a broken page fails CI)
# and runs a smoke subset against the oldest supported versions (`make test-oldest`).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-oldest lint docs bench clean redis-server

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Reinstall when the project's metadata changes.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test,integrations,docs,lint]"
	touch $@

demo: $(STAMP)
	$(BIN)/python example_project/run_demo.py

# The Redis tests start their own redis-server (7.0+, for Functions) on free loopback ports.
# As root with apt-get (CI, a fresh container) it is installed here; elsewhere the message says how.
REDIS_MIN_MAJOR := 7
redis-server:
	@if ! command -v redis-server >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "redis-server not found: installing Debian's redis-server package"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null; \
	  else \
	    echo "redis-server (Redis $(REDIS_MIN_MAJOR).0 or newer) is needed by the tests and was not found on PATH."; \
	    echo "Install it as root with:  apt-get install redis-server   (or: brew install redis), then run make test again."; \
	    exit 1; \
	  fi; \
	fi
	@major=$$(redis-server --version | sed -n 's/.* v=\([0-9]*\)\..*/\1/p'); \
	if [ -z "$$major" ] || [ "$$major" -lt $(REDIS_MIN_MAJOR) ]; then \
	  echo "redis-server $$(redis-server --version | sed -n 's/.* v=\([^ ]*\).*/\1/p') is too old: the tests need $(REDIS_MIN_MAJOR).0 or newer (Functions)."; \
	  exit 1; \
	fi

# Warnings are errors, nitpicky: a broken link, reference ({setting} too) or directive fails the build.
docs: $(STAMP)
	$(BIN)/python -m sphinx -n -W --keep-going -q -b html docs docs/_build/html

# ruff and mypy, configured in pyproject.toml; both must pass
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

test: $(STAMP) redis-server lint docs test-oldest
	$(BIN)/python -m pytest

# The oldest supported versions (tests/oldest.txt: Scrapy 2.13 and the lower bounds of the other
# dependencies) in a second venv, for the tests marked smoke: real crawls, the commands, the store.
OLDEST := .venv-oldest
OLDEST_STAMP := $(OLDEST)/.installed

$(OLDEST_STAMP): pyproject.toml tests/oldest.txt
	$(PYTHON) -m venv $(OLDEST)
	$(OLDEST)/bin/python -m pip install --quiet --upgrade pip
	$(OLDEST)/bin/python -m pip install --quiet -c tests/oldest.txt -e ".[test]"
	touch $@

test-oldest: $(OLDEST_STAMP) redis-server
	$(OLDEST)/bin/python -m pytest -m smoke -q -p no:cacheprovider tests

BENCH_STAMP := $(VENV)/.installed-bench

$(BENCH_STAMP): pyproject.toml $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[test,bench]"
	touch $@

bench: $(BENCH_STAMP)
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) $(OLDEST) .venv-wheel example_project/.scrapy .pytest_cache docs/_build dist
