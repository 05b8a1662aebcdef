"""System check of the databases the engine shares with the host's views.

The engine's guarantees (a refusal or a crash leaves neither the view's writes nor the record;
a committed write always has its record, so a retry replays) hold because the record commits
in the same transaction as the view's writes. That transaction, the database claim and the
records are on ``DATABASES["default"]``: a view whose models ``DATABASE_ROUTERS`` (or a
``using=``) send to another database writes outside it, and loses them silently. Django cannot
tell which database a view writes to, so the check warns whenever there is more than one; a
router that sends the engine's own models elsewhere is an error (``idempotency.E007``), and so
is a ``default`` that is neither PostgreSQL nor SQLite (``idempotency.E008``).
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import DEFAULT_DB_ALIAS, connections, router

from idempotency.core.transactions import backend_vendor


@register(Tags.compatibility)
def check_views_write_to_the_engines_database(
    app_configs: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    default_engine = str(settings.DATABASES.get(DEFAULT_DB_ALIAS, {}).get("ENGINE") or "")
    if default_engine in ("", "django.db.backends.dummy"):
        # Django's "default": {} of a multi-database site: every decorated request would stop
        # on "settings.DATABASES is improperly configured", behind only the warning below
        return [
            Error(
                'DATABASES["default"] names no database, while the idempotency engine\'s '
                "transaction, claim and records are there: every request to an @idempotent or "
                "@idempotent_form view would fail.",
                hint='Make the database the decorated views write to DATABASES["default"].',
                id="idempotency.E005",
            )
        ]
    unsupported = [
        *_unsupported_vendor(default_engine),
        *_snapshot_isolation(default_engine, settings.DATABASES[DEFAULT_DB_ALIAS]),
    ]
    others = [alias for alias in settings.DATABASES if alias != DEFAULT_DB_ALIAS]
    if not others:
        return unsupported
    return [
        *unsupported,
        *_engine_models_routed_away(),
        Warning(
            f"More than one database is configured ({', '.join(others)} besides default): the "
            'idempotency engine\'s transaction, claim and records are on DATABASES["default"]. '
            "A decorated view's writes to another database (DATABASE_ROUTERS, using=) are not "
            "in that transaction: a refused or crashed request may keep them without a record, "
            "and its retry runs the view again.",
            hint="Keep the writes of @idempotent and @idempotent_form views on the default "
            'database, then silence this warning (SILENCED_SYSTEM_CHECKS = ["idempotency.W003"]).',
            id="idempotency.W003",
        ),
    ]


def _unsupported_vendor(engine: str) -> list[CheckMessage]:
    """An error when ``DATABASES["default"]`` is neither PostgreSQL nor SQLite. The record's
    statement (PostgreSQL's function, SQLite's ``INSERT … ON CONFLICT … RETURNING``) and the
    database claim (an advisory lock, the writer lock) are theirs: on MySQL or MariaDB
    ``migrate`` ran and the check was silent, then every decorated request ran its view and
    failed with a 500 at the record's statement, and every retry of its key ran the view
    again. A backend whose driver is missing is left to Django, which names it."""
    vendor = backend_vendor(engine)
    if vendor is None or vendor in _SUPPORTED_VENDORS:
        return []
    return [
        Error(
            f'DATABASES["default"] is {vendor} ({engine}), while the idempotency engine runs on '
            "PostgreSQL and SQLite only (its record statement and its database claim are "
            "theirs): every request to an @idempotent or @idempotent_form view would run the "
            "view, then fail with a 500, and every retry of its key would run the view again.",
            hint='Make DATABASES["default"] a PostgreSQL database (SQLite for an embedded site).',
            id="idempotency.E008",
        )
    ]


_SUPPORTED_VENDORS = ("postgresql", "sqlite")


def _snapshot_isolation(engine: str, database: dict[str, Any]) -> list[CheckMessage]:
    """An error when ``default`` is PostgreSQL with ``OPTIONS["isolation_level"]`` repeatable
    read or serializable. A transaction at those levels reads in one snapshot, taken at its
    first statement: the database claim's own, or an earlier one of ``ATOMIC_REQUESTS``. A
    duplicate that waited for the claim then read the key's record in a snapshot older than the
    first request's commit, did not see it, and ran the view again before its record failed
    with a serialization error. (With psycopg 3's default cursor the engine's ``BEGIN`` rode
    along its first statement without the level, and the view ran at read committed.)"""
    if backend_vendor(engine) != "postgresql":
        return []
    value = (database.get("OPTIONS") or {}).get("isolation_level")
    if value is None:
        return []
    from django.db.backends.postgresql.psycopg_any import IsolationLevel

    try:
        level = IsolationLevel(value)
    except ValueError:
        return []  # Django refuses it itself when it connects
    if level not in (IsolationLevel.REPEATABLE_READ, IsolationLevel.SERIALIZABLE):
        return []
    return [
        Error(
            f'DATABASES["default"]["OPTIONS"]["isolation_level"] is {level.name}, while the '
            "idempotency engine reads a key's record once it holds the key's database claim: "
            "in a snapshot taken before that (repeatable read, serializable), a duplicate that "
            "waited for the first request does not see its record and runs the view again.",
            hint="Leave isolation_level unset (read committed, PostgreSQL's default) on the "
            "database the decorated views write to.",
            id="idempotency.E010",
        )
    ]


@register(Tags.database)
def check_the_servers_default_isolation(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """``idempotency.E010`` for the level the server starts a transaction at (``ALTER
    DATABASE``/``ROLE ... SET default_transaction_isolation``): the engine's ``BEGIN``, riding
    along its first statement, names no level, so its transactions run at that one whatever
    ``OPTIONS`` say. A database check: ``migrate`` and ``check --database default`` run it."""
    if not databases or DEFAULT_DB_ALIAS not in databases:
        return []
    wrapper = connections[DEFAULT_DB_ALIAS]
    if wrapper.vendor != "postgresql":
        return []
    with wrapper.cursor() as cursor:
        cursor.execute("SHOW default_transaction_isolation")
        level = cursor.fetchone()[0]
    if level not in ("repeatable read", "serializable"):
        return []
    return [
        Error(
            f"The default database's default_transaction_isolation is {level}, while the "
            "idempotency engine reads a key's record once it holds the key's database claim: "
            "in a snapshot taken before that, a duplicate that waited for the first request "
            "does not see its record and runs the view again.",
            hint="Reset it to read committed (ALTER DATABASE/ROLE ... RESET "
            "default_transaction_isolation) for the database the decorated views write to.",
            id="idempotency.E010",
        )
    ]


def _engine_models_routed_away() -> list[CheckMessage]:
    """An error when ``DATABASE_ROUTERS`` send the engine's own models' writes (or their
    migrations) away from ``default``. The request path reads and writes the records with
    ``default``'s connection, inside the view's transaction: with the tables migrated on another
    database, every decorated request failed with a 500 ``relation
    "idempotency_idempotencyrecord" does not exist``, behind only the warning that the README
    says to silence; and with both, the purge, the erasure and the admin would work on other
    rows than the ones requests replay."""
    routed: dict[str, list[str]] = {}
    for model in apps.get_app_config("idempotency").get_models():
        if not router.allow_migrate_model(DEFAULT_DB_ALIAS, model):
            elsewhere = [a for a in settings.DATABASES if router.allow_migrate_model(a, model)]
            named = ", ".join(f'"{alias}"' for alias in elsewhere) or "no database"
            routed.setdefault(f"migrated on {named}, not on default", []).append(model.__name__)
            continue
        written = router.db_for_write(model)
        if written != DEFAULT_DB_ALIAS:
            routed.setdefault(f'written to "{written}"', []).append(model.__name__)
    return [
        Error(
            f"DATABASE_ROUTERS route the idempotency engine's models ({', '.join(models)}): "
            f"{where}, while its transaction, claim and records are on "
            'DATABASES["default"]: every request to an @idempotent or @idempotent_form view '
            "would fail or go unrecorded.",
            hint='Let your routers answer None for app_label "idempotency" (db_for_write, '
            "allow_migrate), so that its models stay on the default database.",
            id="idempotency.E007",
        )
        for where, models in routed.items()
    ]
