"""Data migrations tested on the schema they run on: move the test database to a migration and
work with that moment's models, then leave every app at its latest migration."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.apps.registry import Apps
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

Target = list[tuple[str, str]]


def migrate_to(target: Target) -> Apps:
    """Apply or unapply migrations until ``target``; its historical models."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target)
    return executor.loader.project_state(target).apps


@pytest.fixture
def back_to_latest() -> Iterator[None]:
    """Leave the schema as every later test expects it: every app's latest migration (moving
    one app back also unapplies the later migrations of the apps that depend on it)."""
    yield
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
