"""``idempotency.W003``: more than one database, while the engine's transaction is on
``default`` (``idempotency/database_checks.py``)."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.checks import run_checks


def engine_warnings() -> list[Any]:
    return [m for m in run_checks() if m.id == "idempotency.W003"]


def test_one_database_is_not_warned_about(settings: Any) -> None:
    assert list(settings.DATABASES) == ["default"]
    assert engine_warnings() == []


def test_a_second_database_is_a_warning_that_the_engine_is_on_default(settings: Any) -> None:
    """Red without the check: a router sending the view's models to ``orders`` silently
    loses the rollback and crash guarantees."""
    # given a second alias (the same PostgreSQL database will do: nothing connects to it)
    settings.DATABASES = {**settings.DATABASES, "orders": dict(settings.DATABASES["default"])}
    # when the checks run, then one warning names it and says where the engine's transaction is
    [warning] = engine_warnings()
    assert not warning.is_serious()
    assert "(orders besides default)" in warning.msg
    assert 'transaction, claim and records are on DATABASES["default"]' in warning.msg


def test_an_empty_default_database_is_an_error(settings: Any) -> None:
    """Django's ``"default": {}`` of a multi-database site (red: only W003, then every
    decorated request stopped on "settings.DATABASES is improperly configured")."""
    settings.DATABASES = {"default": {}, "main": dict(settings.DATABASES["default"])}
    [error] = [m for m in run_checks() if m.id.startswith("idempotency.E005")]
    assert error.is_serious()
    assert error.msg.startswith('DATABASES["default"] names no database')
    assert engine_warnings() == []


@pytest.mark.parametrize(
    ("engine", "refused"),
    [
        ("idempotency.tests.testapp.unclaimed_backend", True),
        ("django.db.backends.sqlite3", False),
        ("django.db.backends.postgresql", False),
    ],
    ids=["unclaimed", "sqlite", "postgresql"],
)
def test_a_default_database_the_engine_cannot_run_on_is_an_error(
    settings: Any, engine: str, refused: bool
) -> None:
    """(red: no message; on MariaDB 10.11 `migrate` ran and `check` was silent, then every
    request to a decorated view ran the view and failed with a 500, a syntax error at the
    record's ``ON CONFLICT``, and every retry of the key ran it again)"""
    settings.DATABASES = {"default": {"ENGINE": engine, "NAME": "unused"}}
    errors = [m for m in run_checks() if m.id == "idempotency.E008"]
    assert [e.is_serious() for e in errors] == ([True] if refused else [])
    if refused:
        assert errors[0].msg.startswith('DATABASES["default"] is unclaimed')
        assert "PostgreSQL and SQLite only" in errors[0].msg


@pytest.mark.parametrize(
    ("level", "refused"),
    [("REPEATABLE_READ", True), ("SERIALIZABLE", True), ("READ_COMMITTED", False)],
)
def test_a_snapshot_isolation_level_on_the_default_database_is_an_error(
    settings: Any, level: str, refused: bool
) -> None:
    """(red: no message; under ``ATOMIC_REQUESTS`` (or psycopg2, or server-side binding) with
    Redis down, a 32-way storm on a form view ran the view 4 to 5 times: a duplicate that
    waited for the first request's claim read the key's record in a snapshot older than the
    first's commit, ran the view, then failed with a serialization error)"""
    from django.db.backends.postgresql.psycopg_any import IsolationLevel

    default = dict(settings.DATABASES["default"])
    default["OPTIONS"] = {**default.get("OPTIONS", {}), "isolation_level": IsolationLevel[level]}
    settings.DATABASES = {"default": default}
    errors = [m for m in run_checks() if m.id == "idempotency.E010"]
    assert [e.is_serious() for e in errors] == ([True] if refused else [])
    if refused:
        assert errors[0].msg.startswith(
            f'DATABASES["default"]["OPTIONS"]["isolation_level"] is {level}'
        )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("level", "refused"),
    [("repeatable read", True), ("serializable", True), ("read committed", False)],
)
def test_a_snapshot_isolation_level_the_server_defaults_to_is_an_error(
    level: str, refused: bool
) -> None:
    """The engine's ``BEGIN`` (psycopg 3's default cursor) carries no level: the server's
    ``default_transaction_isolation`` (``ALTER DATABASE``/``ROLE ... SET``) is the one its
    transactions run at, whatever OPTIONS say. ``migrate`` and ``check --database default``
    read it (red: no message)."""
    from django.db import connection

    with connection.cursor() as cursor:  # undone with the test's transaction
        cursor.execute(f"SET default_transaction_isolation = '{level}'")
    errors = [m for m in run_checks(databases=["default"]) if m.id == "idempotency.E010"]
    assert [e.is_serious() for e in errors] == ([True] if refused else [])
    if refused:
        assert f"default_transaction_isolation is {level}" in errors[0].msg
    assert [m for m in run_checks() if m.id == "idempotency.E010"] == []  # no query without


class EngineElsewhere:
    """A host's router that sends the engine's app to a database of its own, ``ops``."""

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        return "ops" if model._meta.app_label == "idempotency" else None

    db_for_read = db_for_write

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        return db == "ops" if app_label == "idempotency" else None


class EngineWritesElsewhere:
    """A host's router that sends the engine's writes to ``ops`` (and leaves migrations be)."""

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        return "ops" if model._meta.app_label == "idempotency" else None


class ReadsOnAReplica:
    """A host's router that reads everything from a replica and writes on ``default``."""

    def db_for_read(self, model: Any, **hints: Any) -> str:
        return "replica"


def routed_errors() -> list[Any]:
    return [m for m in run_checks() if m.id == "idempotency.E007"]


@pytest.mark.parametrize("routing", ["EngineElsewhere", "EngineWritesElsewhere"])
def test_a_router_that_sends_the_engine_s_models_elsewhere_is_an_error(
    settings: Any, routing: str
) -> None:
    """(red: only W003, which the README says to silence once the views write on default; the
    engine's tables were migrated on ``ops`` only, and every request to a decorated view was
    a 500 ``relation "idempotency_idempotencyrecord" does not exist``)"""
    settings.DATABASES = {**settings.DATABASES, "ops": dict(settings.DATABASES["default"])}
    settings.DATABASE_ROUTERS = [f"{__name__}.{routing}"]
    [error] = routed_errors()
    assert error.is_serious()
    assert "IdempotencyRecord" in error.msg and '"ops"' in error.msg
    assert 'transaction, claim and records are on DATABASES["default"]' in error.msg


def test_a_router_that_keeps_the_engine_s_writes_on_default_is_no_error(settings: Any) -> None:
    settings.DATABASES = {**settings.DATABASES, "replica": dict(settings.DATABASES["default"])}
    settings.DATABASE_ROUTERS = [f"{__name__}.ReadsOnAReplica"]
    assert routed_errors() == []
    assert len(engine_warnings()) == 1
