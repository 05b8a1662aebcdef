# One command runs the app (`make run`), one runs the tests (`make test`).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

export TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/ordering
export TEST_REDIS_URL ?= redis://127.0.0.1:6379/0
# The product's suite runs in this many pytest-xdist workers, each with a test database and
# Redis databases of its own (tests/support/worker_redis.py); 0 runs it in one process.
PYTEST_WORKERS ?= 2

NODE_CLIENT := clients/typescript
NODE_STAMP := $(NODE_CLIENT)/node_modules/.installed

.PHONY: install run test test-engine test-product lint

$(STAMP): pyproject.toml idempotency/pyproject.toml clients/python/pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	$(PY) -m pip install -q -e ./idempotency -e '.[dev]' -e clients/python
	touch $(STAMP)

install: $(STAMP)

# The TypeScript client's dev dependencies, exactly as locked (its tests run in `make test`).
$(NODE_STAMP): $(NODE_CLIENT)/package-lock.json
	cd $(NODE_CLIENT) && npm ci --no-audit --no-fund
	touch $(NODE_STAMP)

## Set up and serve the demo on http://127.0.0.1:8000 (SQLite unless DATABASE_URL is set), with
## a Celery worker in the background when REDIS_URL is set (else tasks run eagerly in-process).
## The demo and the tests run with DEBUG=1 (development secrets); unset or 0 is production.
run: export DEBUG = 1
run: install
	$(PY) manage.py migrate --noinput
	$(PY) manage.py seed_demo
	PY=$(PY) bash scripts/run_demo.sh

## Set up and run every test against PostgreSQL and Redis: the engine's own suite from its
## wheel, then the product's suite (the client libraries' tests included).
test: install
	bash scripts/ensure_services.sh
	PY=$(PY) bash scripts/test_engine.sh
	$(MAKE) --no-print-directory $(NODE_STAMP)
	DEBUG=1 DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) $(PY) -m pytest -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

## The engine alone: its wheel in a virtualenv of its own, no product code (ENGINE_PYTEST_ARGS).
test-engine: install
	bash scripts/ensure_services.sh
	PY=$(PY) bash scripts/test_engine.sh

## The product's suite alone (PYTEST_ARGS).
test-product: install
	bash scripts/ensure_services.sh
	$(MAKE) --no-print-directory $(NODE_STAMP)
	DEBUG=1 DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) $(PY) -m pytest -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .
