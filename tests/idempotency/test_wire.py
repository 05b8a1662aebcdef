"""The wire helpers the tests and the benchmark count with (``idempotency/tests/wire.py``),
against real PostgreSQL."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection

from idempotency.tests.wire import round_trips_sent

pytestmark = pytest.mark.django_db(transaction=True)  # no test transaction: no BEGIN


def test_a_round_trip_is_a_query_however_many_statements_or_an_extended_exchange():
    connection.ensure_connection()
    with round_trips_sent() as trips:
        with connection.cursor() as client_bound:  # Django's: the simple protocol
            client_bound.execute("SELECT 1; SELECT 2")
        with psycopg.Cursor(connection.connection) as server_bound:  # Parse, Bind, …, Sync
            server_bound.execute("SELECT %s::int", [3])
    assert trips == ["SELECT 1; SELECT 2", "Sync"]
