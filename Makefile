# The two commands a new user runs: `make demo` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# torch is pinned to the CPU build this project is tested with; GPU hosts install their own.
TORCH ?= torch==2.13.0
# Where `make demo` writes its plot and the agents' caches.
DEMO_OUT ?= tps-demo

.PHONY: demo test test-fast lint install clean browser images

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[service,local,agent,dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tps demo --out $(DEMO_OUT)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy tps client services agents models migrations cli tools
	$(BIN)/lint-imports

# The whole suite, with the coverage of every package (the service's subprocesses included).
test: lint
	$(BIN)/python -m pytest -q --cov --cov-report=term
	# the runtime again with its routing in Python alone (where no C++ compiler is)
	TPS_RUNTIME_NATIVE=0 $(BIN)/python -m pytest -q -p no:cacheprovider tests/agents/runtime

# The inner loop: no slow, browser, fuzzing or GPU tests, stop at the first failure.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -x -m "not slow and not browser and not fuzz and not gpu"

# Debian's Chromium, which the dashboard's browser tests drive (they skip, saying so, without it).
browser:
	command -v chromium >/dev/null || (apt-get update -q && apt-get install -y -q chromium)

# Build the service and agent images and prove that both start (deploy/build_images.sh).
images:
	bash -o pipefail -c "deploy/build_images.sh 2>&1 | tee deploy/proof/images.txt"

clean:
	rm -rf $(VENV) .pytest_cache .coverage .coverage.*
