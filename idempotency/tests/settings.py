"""Settings of the engine's test project: the engine, DRF and one small app, nothing else.

Where it runs comes from the environment only (never from a host's ``DATABASE_URL`` or
``REDIS_URL``):

- ``IDEMPOTENCY_TEST_DATABASE_URL``: a PostgreSQL URL; pytest-django creates ``test_<name>``
  from it, or, with ``IDEMPOTENCY_TEST_DATABASE_IS_THROWAWAY=1`` (the Lua gate's sandbox),
  uses that database as it is;
- ``IDEMPOTENCY_TEST_REDIS_URL``: a Redis database the suite may empty of ``idem:*`` keys;
- ``IDEMPOTENCY_FORCE_SCRIPTS``: JSON ``{"claim": "/path/claim.lua", ...}``, the scripts under
  test (set by ``check_lua_version``).
"""

from __future__ import annotations

import json
import os
from urllib.parse import unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured


def _database(url: str) -> dict:
    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql"):
        raise ImproperlyConfigured(f"IDEMPOTENCY_TEST_DATABASE_URL must be postgres://, not {url}")
    name = parts.path.lstrip("/")
    database = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
        "CONN_MAX_AGE": 0,
    }
    if os.environ.get("IDEMPOTENCY_TEST_DATABASE_IS_THROWAWAY") == "1":
        database["TEST"] = {"NAME": name}
    return database


DATABASE_URL = os.environ.get(
    "IDEMPOTENCY_TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/idempotency_engine"
)
REDIS_URL = os.environ.get("IDEMPOTENCY_TEST_REDIS_URL") or None

DEBUG = False
SECRET_KEY = "the-engine-test-suite-only"  # signs tokens in these tests, nothing else
ALLOWED_HOSTS = ["testserver", "127.0.0.1", "localhost"]
USE_TZ = True
DATABASES = {"default": _database(DATABASE_URL)}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"  # a host unlike the engine: no migration due
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.sessions",
    "django.contrib.messages",
    "rest_framework",
    "idempotency",
    "idempotency.tests.testapp",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "idempotency.tests.testapp.urls"
STATIC_URL = "/static/"  # the live server of the storm tests serves static files
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
LOGGING = {"version": 1, "disable_existing_loggers": False, "root": {"level": "ERROR"}}

IDEMPOTENCY = {
    "SCOPE_RESOLVER": "idempotency.tests.testapp.scope.from_headers",
    "REDIS_URL": REDIS_URL,
    "CHANNEL_PREFIX": "idem-test",
    "FORCE_SCRIPTS": json.loads(os.environ.get("IDEMPOTENCY_FORCE_SCRIPTS") or "{}"),
    # audits wait for an explicit flush: no thread writes outside a test's transaction
    "AUDIT_IN_BACKGROUND": False,
    "HASH_KEYS": [(1, "the-engine-test-suite-hash-key-only-0123456789")],
    # no heartbeat thread writing to Redis behind the tests' backs
    "INSTANCE_REGISTRY": False,
    # counts view executions in memory (the live server runs in the test's process)
    "VIEW_EXECUTED_HOOK": "idempotency.tests.testapp.executions.count",
    # a tenant's own redaction paths, looked up afresh on every write
    "REDACT_FOR_TENANT": "idempotency.tests.testapp.scope.redaction_for",
    "TENANT_POLICY_CACHE_SECONDS": 0,
}
