# The two commands: `make run` installs and starts the app; `make test` installs and runs the tests.
# Both create .venv on first use and re-install only when a requirements file changed.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch first, from its CPU build, so nothing pulls a multi-GB CUDA build. llama.cpp is built with
# its runtime CPU variants (one backend per instruction-set level, from plain x86-64 to AVX-512;
# core/local_model/cpu_backend.py loads the best one this CPU runs), never for the build machine
# alone (-DGGML_NATIVE=OFF), and without pip's wheel cache, which ignores CMAKE_ARGS: a wheel built
# earlier with other flags would be reused. CMAKE_ARGS=-DGGML_NATIVE=OFF builds one portable AVX2
# backend instead: about a sixth of the build time, a slower model on AVX-512 CPUs.
TORCH := torch==2.13.0
LLAMA := $(shell grep -E '^llama_cpp_python==' requirements.txt)
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: run test test-standalone lint format install install-dev clean

run: $(VENV)/.installed
	$(BIN)/python server.py

test: $(VENV)/.installed-dev
	$(BIN)/python -m pytest

# The database-facing tests again, on a Postgres the tests do not own: TEST_DATABASE_URL (.ci/run
# sets it up with .ci/standalone-postgres). The browser tests and the real model add nothing here.
test-standalone: $(VENV)/.installed-dev
	test -n "$(TEST_DATABASE_URL)" || (echo "set TEST_DATABASE_URL" && exit 2)
	$(BIN)/python -m pytest -m "not slow and not embedded" --ignore-glob="tests/test_ui*"

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/hadolint Dockerfile

format: $(VENV)/.installed-dev
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

$(VENV)/.installed: requirements.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "ResolveAI needs Python 3.11 (set PYTHON=...)")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install $(TORCH)
	$(BIN)/pip install --no-cache-dir --no-deps $(LLAMA)
	$(BIN)/pip install -r requirements.txt
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed requirements-dev.txt
	$(BIN)/pip install -r requirements-dev.txt
	touch $@

clean:
	rm -rf $(VENV)
