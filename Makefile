# make setup: create .venv/ and install the project (editable) with its test dependencies.
# make demo / make test: both set up first, so each works on a fresh machine.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-workshop test-fast test-claims lint bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

demo: setup
	$(PY) -m tfdiag_magic demo --html build/demo-report.html

# The suite on pytest-xdist workers, each module whole on one worker so that its kernel,
# server or command-line run starts once (pytest 9.2 undoes the groups: pyproject.toml asks for
# an earlier one, and tests/conftest.py fails the suite where they are undone), but for the
# notebooks' and corpus' tests, handed out one by one; the longest go first (tests/conftest.py).
# make test runs three workers on a 2-CPU machine: much of a test's time is waiting (a
# subprocess's start, a server, a browser, a sleeping input pipeline), which a third worker fills
# (parallel pass 9 min 5 s against 10 min 4 s with two, quiet). The notebooks' runs keep two:
# each kernel's memory and time are bounded.
DIST := --dist loadgroup --no-loadscope-reorder
PARALLEL := -n 2 $(DIST)
WORKERS ?= 3

# Tests marked `alone` judge timings that the other test worker's load moves (beside a CPU hog
# they start themselves; tf.data's parallel py_function reads): they run afterwards, one at a time.
# The workshop tier (tests marked `workshop`: every notebook run twice, its Parts on their own, the
# Binder build) is make test-workshop; CI runs it after make test.
# The alone tier collects only the modules that hold such tests (collecting the whole suite
# costs a process 9-14 s of CPU); the parallel pass fails if a module with an `alone` test is not
# in the list (tests/conftest.py). Python writes its bytecode caches for the test run where the
# environment says not to (PYTHONDONTWRITEBYTECODE): otherwise every worker, kernel and
# subprocess compiles the project, and pytest rewrites every test module's asserts, anew.
ALONE_TESTS := $(shell grep -l 'mark\.alone' tests/test_*.py)
TEST_ENV := env -u PYTHONDONTWRITEBYTECODE TFDIAG_ALONE_TESTS="$(ALONE_TESTS)"
test: lint
	$(TEST_ENV) $(PY) -m pytest -q -n $(WORKERS) $(DIST) -m "not alone and not workshop" --durations=25
	$(TEST_ENV) $(PY) -m pytest -q -m "alone and not workshop" --durations=5 $(ALONE_TESTS)

test-workshop: setup
	$(PY) -m pytest -q $(PARALLEL) -m "workshop and not alone" --durations=25
	$(PY) -m pytest -q -m "workshop and alone" --durations=5

# A quick check while working: ruff, the record, rewrite, GPU-record and explain tests, and the
# healthy and memory diagnosis tests; no Jupyter kernel, browser, Binder, CLI or notebook runs.
FAST_TESTS := tests/test_record.py tests/test_rewrite_*.py tests/test_sweep_spec.py \
	tests/test_instrument.py tests/test_diagnose_gpu_records.py tests/test_gpu_diagnosis.py \
	tests/test_nvml.py tests/test_gpu_nvml.py tests/test_diagnose_explain.py \
	tests/test_diagnose_healthy.py tests/test_diagnose_memory.py

test-fast: setup
	$(PY) -m ruff check tfdiag_magic tests benchmarks
	$(PY) -m pytest -q $(PARALLEL) -m "not kernel and not browser and not job" $(FAST_TESTS)

# The notebooks' text against their runs, RUNS times each (exercises solved) beside a CPU hog on
# one core, one notebook at a time: about a minute per notebook and run on 2 CPUs.
RUNS ?= 5
test-claims: setup
	$(PY) -m pytest -q -p no:cacheprovider tests/test_notebook_claims.py --claims-runs $(RUNS)

# ruff (rules and formatting), and vulture for code nothing uses (pyproject's [tool.vulture]).
lint: setup
	$(PY) -m ruff check tfdiag_magic tests benchmarks
	$(PY) -m ruff format --check tfdiag_magic tests benchmarks
	$(PY) -m vulture

# What the tool adds per step: calls (a count), then time and the tool's threads' CPU through the
# magic, four workloads at ~0.1-10 ms steps (README, Overhead); then the ops window's cost (README,
# Where inside the step). About 16 min on 2 shared CPUs; ROUNDS=N for more rounds. probe_costs.py and overhead.py still run on their own.
bench: setup
	@mkdir -p build
	$(PY) benchmarks/calls_per_step.py --save build/calls_per_step.json
	$(PY) benchmarks/hot_path.py --calls build/calls_per_step.json
	$(PY) benchmarks/ops_window.py

clean:
	rm -rf $(VENV) build .pytest_cache

# Notebooks are kept without outputs in the repository (tests/test_notebooks.py checks it).
.PHONY: strip-notebooks
strip-notebooks: setup
	$(PY) notebooks/strip_outputs.py
