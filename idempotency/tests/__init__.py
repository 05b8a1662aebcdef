"""The engine's own test suite, shipped with the engine and run against a tiny Django project
of its own (:mod:`idempotency.tests.settings`, :mod:`idempotency.tests.testapp`): no host
project is needed.

- ``contract/``: the promises every version of the engine and of its Lua scripts must keep
  (storm, replay, mismatch, scopes, crash windows, database-only, tokens, rate limit,
  breaker). ``manage.py check_lua_version`` runs exactly this package against a candidate.
- the modules beside it: settings checks, the README, the Lua gate's isolation, packaging.

Run it against a PostgreSQL server and a Redis database it may empty of ``idem:*`` keys::

    IDEMPOTENCY_TEST_REDIS_URL=redis://127.0.0.1:6379/0 \\
    IDEMPOTENCY_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/idempotency_engine \\
    python -m pytest --pyargs idempotency.tests --ds idempotency.tests.settings
"""
