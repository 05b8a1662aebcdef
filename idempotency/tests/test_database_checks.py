"""``idempotency.W003``: more than one database, while the engine's transaction is on
``default`` (``idempotency/database_checks.py``)."""

from __future__ import annotations

from typing import Any

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
