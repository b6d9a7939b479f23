# gpuplace: `make quickstart` sets up and runs the main job; `make test` runs the tests.
VENV ?= .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
PYTHON ?= python3

.PHONY: setup quickstart test check lint types contracts bench lock evaluate

setup: $(VENV)/.installed

# Library bytecode is compiled once at install: with PYTHONDONTWRITEBYTECODE set, as on CI machines,
# every process (each server a test starts) would otherwise compile its libraries from source again.
# The development environment is the runtime lock plus the test and lint tools (requirements-dev.lock,
# resolved with the runtime lock as a constraint, so both pin the same versions); the image installs the
# runtime lock alone.
$(VENV)/.installed: pyproject.toml requirements.lock requirements-dev.lock
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check uv
	$(UV) pip install --quiet --compile-bytecode --python $(PY) -r requirements-dev.lock
	$(UV) pip install --quiet --python $(PY) --no-deps -e .
	touch $@

quickstart: setup
	$(VENV)/bin/gpuplace quickstart

evaluate: setup
	$(VENV)/bin/gpuplace evaluate --source pai2020-jobs --target duration

test: setup
	$(PY) -m pytest -q

check: lint types contracts

lint: setup
	$(VENV)/bin/ruff check service models placement training tests gpuplace

types: setup
	$(VENV)/bin/mypy

contracts: setup
	$(VENV)/bin/lint-imports

bench: setup
	$(PY) tests/benchmarks/bench_ingest.py

lock:
	$(UV) pip compile --quiet pyproject.toml -o requirements.lock
	$(UV) pip compile --quiet pyproject.toml --extra dev -c requirements.lock -o requirements-dev.lock
