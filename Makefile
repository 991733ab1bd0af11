# Newcomer's path: `make demo` shows the engine working, `make test` proves it.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export NUMBA_CACHE_DIR ?= $(CURDIR)/.numba_cache
# small matrices: one BLAS thread per process is faster (see stream/commands/cli.py single_threaded_blas)
export OPENBLAS_NUM_THREADS ?= 1
export OMP_NUM_THREADS ?= 1

.PHONY: test demo install bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,plot]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

demo: $(STAMP)
	$(BIN)/ratiowatch demo

bench: $(STAMP)
	$(BIN)/ratiowatch bench estimators --json

clean:
	rm -rf $(VENV) .numba_cache .pytest_cache build *.egg-info
