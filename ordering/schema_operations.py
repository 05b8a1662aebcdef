"""Index operations for migrations of large, busy tables (the orders above all).

A plain ``CREATE INDEX`` holds a ``SHARE`` lock on its table for the whole build: no row of it
is inserted or updated meanwhile (about 1.5 s per million orders on the 2-core machine, every
order placed, paid or moved waiting), and ``DROP INDEX`` takes an ``ACCESS EXCLUSIVE`` lock,
which a migration's transaction keeps until it commits, so a drop before a build stops the
reads too. Each lock is first queued behind every open transaction that wrote the table, and
every request queues behind it. ``CONCURRENTLY`` builds and drops without stopping writers.

Django's own ``AddIndexConcurrently`` and ``RemoveIndexConcurrently`` are PostgreSQL's alone;
these do the same on PostgreSQL and what ``AddIndex`` and ``RemoveIndex`` do elsewhere (the
SQLite demo), so one migration serves both. ``CONCURRENTLY`` cannot run in a transaction: the
migration that uses them sets ``atomic = False``. A build that fails (a unique index finding a
duplicate, a lost connection) leaves an invalid index of its name and the migration unrecorded:
``DROP INDEX CONCURRENTLY`` it before ``migrate`` runs again.
"""

from __future__ import annotations

from typing import Any

from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations


def _on_postgresql(schema_editor: Any) -> bool:
    return schema_editor.connection.vendor == "postgresql"


class AddIndexWithoutLocking(AddIndexConcurrently):
    """``AddIndex``, built ``CONCURRENTLY`` on PostgreSQL."""

    def database_forwards(self, app_label: str, schema_editor: Any, *states: Any) -> None:
        if _on_postgresql(schema_editor):
            super().database_forwards(app_label, schema_editor, *states)
        else:
            migrations.AddIndex.database_forwards(self, app_label, schema_editor, *states)

    def database_backwards(self, app_label: str, schema_editor: Any, *states: Any) -> None:
        if _on_postgresql(schema_editor):
            super().database_backwards(app_label, schema_editor, *states)
        else:
            migrations.AddIndex.database_backwards(self, app_label, schema_editor, *states)


class RemoveIndexWithoutLocking(RemoveIndexConcurrently):
    """``RemoveIndex``, dropped ``CONCURRENTLY`` on PostgreSQL."""

    def database_forwards(self, app_label: str, schema_editor: Any, *states: Any) -> None:
        if _on_postgresql(schema_editor):
            super().database_forwards(app_label, schema_editor, *states)
        else:
            migrations.RemoveIndex.database_forwards(self, app_label, schema_editor, *states)

    def database_backwards(self, app_label: str, schema_editor: Any, *states: Any) -> None:
        if _on_postgresql(schema_editor):
            super().database_backwards(app_label, schema_editor, *states)
        else:
            migrations.RemoveIndex.database_backwards(self, app_label, schema_editor, *states)
