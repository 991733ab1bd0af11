# Newcomer's path: `make demo` shows the engine working, `make test` proves it.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export NUMBA_CACHE_DIR ?= $(CURDIR)/.numba_cache
# small matrices: one BLAS thread per process is faster (see stream/commands/cli.py single_threaded_blas)
export OPENBLAS_NUM_THREADS ?= 1
export OMP_NUM_THREADS ?= 1

.PHONY: test demo install bench clean peers

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,plot]'
	touch $(STAMP)

install: $(STAMP)

# two workers, one per core of the CI machine; a file's tests stay on one worker (they share
# module fixtures such as a broker). TEST_JOBS=0 runs them in this process.
TEST_JOBS ?= 2
test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_JOBS) --dist loadfile $(PYTEST_ARGS)

demo: $(STAMP)
	$(BIN)/ratiowatch demo

bench: $(STAMP)
	$(BIN)/ratiowatch bench estimators --json

clean:
	rm -rf $(VENV) $(PEERS_VENV) .peers_cache .numba_cache .pytest_cache build *.egg-info

# claspy (a peer of `ratiowatch eval ... --peers`) pins numpy/scipy/scikit-learn below ours:
# it gets its own environment and runs as a subprocess (stream/evaluate/peers_claspy.py)
PEERS_VENV ?= .venv-peers
peers: $(PEERS_VENV)/.installed

$(PEERS_VENV)/.installed:
	$(PY) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/pip install -q --upgrade pip
	$(PEERS_VENV)/bin/pip install -q claspy==0.2.8
	touch $@
