# The two commands: `make run` installs and starts the app; `make test` installs and runs the tests.
# Both create .venv on first use and re-install only when a requirements file changed.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch first, from its CPU build, so nothing pulls a multi-GB CUDA build; llama.cpp built portable
# (-DGGML_NATIVE=OFF) so the wheel pip caches runs on any x86-64 CPU.
TORCH := torch==2.13.0
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: run test lint format install install-dev clean

run: $(VENV)/.installed
	$(BIN)/python server.py

test: $(VENV)/.installed-dev
	$(BIN)/python -m pytest

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(VENV)/.installed-dev
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

$(VENV)/.installed: requirements.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "ResolveAI needs Python 3.11 (set PYTHON=...)")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install $(TORCH)
	$(BIN)/pip install -r requirements.txt
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed requirements-dev.txt
	$(BIN)/pip install -r requirements-dev.txt
	touch $@

clean:
	rm -rf $(VENV)
