# The course's commands. `make help` lists them. Works with a plain venv (.venv, made on
# first use from the lock that fits this machine's NVIDIA driver: locks/cu13.txt or
# locks/cu12.txt) or inside a conda environment made from environment.yml (CUDA 13) or
# environment-cu12.yml (`conda env create -f environment.yml && conda activate gpucourse`).
SHELL := /bin/bash
.DEFAULT_GOAL := help
PORT ?= 8888
# The Python that makes .venv (3.11, 3.12 or 3.13); CUDA=12, 13 or sim picks the stack by hand; CUDA=system
# keeps the CUDA stack already installed for PYTHON and adds the course's own wheels from WHEELHOUSE, offline.
PYTHON ?= python3
# make loadtest: how many learners at once (several: LEARNERS="2 4 8") and where the results go
LEARNERS ?= 4
LOADTEST_OUT ?= build/loadtest
CUDA ?=
WHEELHOUSE ?=
# make wheelhouse: the Python version and platform of the machine that will use it (default: this one's)
PYVER ?=
PLATFORM ?=

ifneq ($(filter gpucourse gpucourse-cu12,$(CONDA_DEFAULT_ENV)),)
PY := python
STAMP := .setup-conda.stamp
else
PY := .venv/bin/python
STAMP := .venv/.setup-stamp
endif

LABS := $(notdir $(wildcard solutions/lab*))

.PHONY: help setup wheelhouse lab test test-times test-extra test-fast test-gpu test-platforms lint notebooks labs check-generated grade feedback doctor record gpu-report mutate book loadtest clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

setup: ## make .venv for this machine: CUDA 13 or 12 stack from the driver (CUDA=12|13|sim|system to choose)
ifeq ($(STAMP),.setup-conda.stamp)
	@$(MAKE) -s $(STAMP)
else
	@$(PYTHON) gpucourse/tooling/install.py $(if $(CUDA),--cuda $(CUDA)) $(if $(WHEELHOUSE),--wheelhouse $(WHEELHOUSE))
endif

wheelhouse: ## on a connected machine: the wheels CUDA=system adds (PYVER=3.12 PLATFORM=manylinux_2_28_x86_64)
	$(PYTHON) tools/wheelhouse.py $(if $(PYVER),--python-version $(PYVER)) $(if $(PLATFORM),--platform $(PLATFORM)) --dest $(or $(WHEELHOUSE),wheelhouse)

.setup-conda.stamp: pyproject.toml
	python -m pip install -q --no-deps -e .
	@touch $@

notebooks: setup ## generate notebooks/*.ipynb and solutions/*/*.ipynb from their text sources
	$(PY) -m gpucourse notebooks

lab: setup notebooks ## start JupyterLab on 127.0.0.1:$(PORT) with lesson 00 open
	$(PY) -m gpucourse lab --port $(PORT)

labs: setup ## regenerate labs/ (student versions) from solutions/ with nbgrader
	$(PY) -m gpucourse labs

check-generated: setup ## fail if labs/ differs from what solutions/ generates
	$(PY) -m gpucourse labs --check

lint: setup ## ruff
	$(PY) -m ruff check .

# Workers take tests one by one (--dist loadgroup): the slow tests (nbgrader round trips, lessons run
# headless and in the browser) spread over the workers; a module whose tests share an expensive fixture
# (the website build, the hostile-grading batch, the hub, a rehearsal) is one group and stays on one
# worker (tests/conftest.py). --no-loadscope-reorder: work is handed out in conftest's order, the
# slow tests first, so that no worker is left alone with a long one at the end.
PYTEST_2 := -n 2 --dist loadgroup --no-loadscope-reorder
# `make test` on three workers for two cores (issue 50): with two, about a quarter of the CPU sat idle while a
# worker waited on a kernel, a browser or a rank process (user + sys 1,080 s of CPU in 694 s of pytest on 2 cores);
# a third fills that wait: 694 → 634 s on the same fresh clone (a90eb25), the same tests, nothing else running.
PYTEST_3 := -n 3 --dist loadgroup --no-loadscope-reorder
test: setup ## the whole suite: lint, unit tests, notebooks, labs, nbgrader, browser, website, hub
	$(PY) -m ruff check .
	$(PY) -m pytest $(PYTEST_3) -m "not extra" --durations=25

test-times: setup ## the last pytest run's wall time and slowest tests (build/test-times.json; TIME_BUDGET=s: fail if over)
	$(PY) tools/suite_times.py $(if $(TIME_BUDGET),--budget-s $(TIME_BUDGET))

# Two workers: the mutation pass (two mutations at a time, each in its own copy) beside the hub's fault tests,
# the lessons and labs run as plain Python and the offline install (issue 50: moved here from `make test`).
test-extra: setup ## slower assurance CI runs after `make test` (tests marked extra): mutation pass, hub faults, plain runs, offline install
	$(PY) -m pytest $(PYTEST_2) -m extra

test-fast: setup ## unit tests only (no notebooks, nbgrader or browser)
	$(PY) -m pytest -m "not slow and not gpu and not extra"

test-gpu: setup ## the GPU tier (needs an NVIDIA GPU): pytest -m gpu, then every lesson and lab in GPU mode
	GPUCOURSE_MODE=gpu $(PY) -m pytest -m gpu
	GPUCOURSE_MODE=gpu $(PY) -m pytest tests/test_notebooks.py tests/test_lab*.py

mutate: setup ## the mutation pass: break each rule on tools/mutate.py's list, expect a test to fail
	$(PY) tools/mutate.py

test-platforms: setup ## other environments: no CUDA package (macOS/Windows), CUDA 12, Colab-like, Python 3.13
	$(PY) tests/platforms.py

doctor: setup ## the pre-flight check: versions, mode, GPU, a 10-second sanity benchmark (HEADLESS=1: no JupyterLab)
	$(PY) -m gpucourse doctor $(if $(HEADLESS),--headless)

record: setup ## run every registered sweep on this GPU and write data/reference/<gpu>/
	$(PY) -m gpucourse record

gpu-report: setup ## GPU tier + every sweep recorded + spread + widget time in build/gpu-report/ (TARGETS=1 QUICK=1 BUDGET=s RESUME=1 RETRY=1 REHEARSAL=1)
	$(PY) -m gpucourse gpu-report $(if $(REHEARSAL),--rehearsal) $(if $(TARGETS),--targets) $(if $(QUICK),--quick) $(if $(BUDGET),--budget $(BUDGET)) $(if $(RESUME),--resume) $(if $(RETRY),--retry-failed)

loadtest: setup ## LEARNERS="2 4 8" at once on the course's JupyterHub on 127.0.0.1 (root); table in build/loadtest (LOADTEST_OUT=)
	$(PY) -m gpucourse.tooling.loadtest --learners "$(LEARNERS)" --out $(LOADTEST_OUT)

grade: setup ## autograde submitted/ (sandboxed, in parallel; JOBS=n; GPU=1 on the GPU): grades.csv, grades_by_cell.csv
	$(PY) -m gpucourse grade $(if $(JOBS),--jobs $(JOBS)) $(if $(GPU),--gpu)

feedback: setup ## feedback for every graded submission in feedback/ (never shows hidden tests)
	$(PY) -m gpucourse feedback

book: setup ## build the static website (simulator mode, works offline) into build/book/_build/html
	$(PY) -m gpucourse book

clean: ## remove generated notebooks and caches (keeps .venv)
	rm -f notebooks/*.ipynb solutions/*/*.ipynb
	rm -rf .pytest_cache autograded feedback gradebook.db
