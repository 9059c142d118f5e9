# The course's commands. `make help` lists them. Works with a plain venv (.venv, made on
# first use from the pinned requirements) or inside the conda environment made from
# environment.yml (`conda env create -f environment.yml && conda activate gpucourse`).
SHELL := /bin/bash
.DEFAULT_GOAL := help
PORT ?= 8888

ifeq ($(CONDA_DEFAULT_ENV),gpucourse)
PY := python
STAMP := .setup-conda.stamp
else
PY := .venv/bin/python
STAMP := .venv/.setup-stamp
endif

LABS := $(notdir $(wildcard solutions/lab*))

.PHONY: help setup lab test test-fast test-gpu lint notebooks labs check-generated grade feedback doctor record gpu-report mutate book clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

setup: $(STAMP) ## create the environment if it is missing (.venv from pinned requirements)

.venv/.setup-stamp: pyproject.toml requirements.txt constraints.txt
	@python3 -c 'import sys; v = sys.version_info[:2]; sys.exit(0 if v in [(3, 11), (3, 12)] else "gpucourse needs Python 3.11 or 3.12, found %d.%d" % v)'
	@test -x .venv/bin/python || python3 -m venv .venv
	@echo "Installing the course's pinned packages into .venv (a minute or two the first time)…"
	.venv/bin/python -m pip install -q -r requirements.txt -c constraints.txt
	.venv/bin/python -m pip install -q --no-deps -e .
	@touch $@

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

# Two workers, test by test (--dist loadgroup): the slow tests (nbgrader round trips, lessons run
# headless and in the browser) spread over both; a module whose tests share an expensive fixture
# (the website build, the hostile-grading batch, the hub) is one group and stays on one worker.
test: setup ## the whole suite: lint, unit tests, notebooks, labs, nbgrader, browser
	$(PY) -m ruff check .
	$(PY) -m pytest -n 2 --dist loadgroup --durations=25

test-fast: setup ## unit tests only (no notebooks, nbgrader or browser)
	$(PY) -m pytest -m "not slow and not gpu"

test-gpu: setup ## the GPU tier (needs an NVIDIA GPU): pytest -m gpu, then every notebook in GPU mode
	GPUCOURSE_MODE=gpu $(PY) -m pytest -m gpu
	GPUCOURSE_MODE=gpu $(PY) -m pytest tests/test_notebooks.py

mutate: setup ## the mutation pass: break each rule on tools/mutate.py's list, expect a test to fail
	$(PY) tools/mutate.py

doctor: setup ## the pre-flight check: versions, mode, GPU, a 10-second sanity benchmark
	$(PY) -m gpucourse doctor

record: setup ## run every registered sweep on this GPU and write data/reference/<gpu>/
	$(PY) -m gpucourse record

gpu-report: setup ## GPU tier + every sweep recorded + spread + widget time in build/gpu-report/ (REHEARSAL=1: on the CPU)
	$(PY) -m gpucourse gpu-report $(if $(REHEARSAL),--rehearsal)

grade: setup ## autograde submitted/ (sandboxed, in parallel; JOBS=n): grades.csv, grades_by_cell.csv
	$(PY) -m gpucourse grade $(if $(JOBS),--jobs $(JOBS))

feedback: setup ## feedback for every graded submission in feedback/ (never shows hidden tests)
	$(PY) -m gpucourse feedback

book: setup ## build the static website (simulator mode, works offline) into build/book/_build/html
	$(PY) -m gpucourse book

clean: ## remove generated notebooks and caches (keeps .venv)
	rm -f notebooks/*.ipynb solutions/*/*.ipynb
	rm -rf .pytest_cache autograded feedback gradebook.db
