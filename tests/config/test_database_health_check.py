"""A worker's kept connection is checked before each request's first query without a round
trip, and one the server ended is replaced, not used (config/postgresql/base.py, ADR 0006).

Real PostgreSQL; what goes over the wire is read from libpq's protocol trace. The tests run
outside the test transaction (``transaction=True``): the check looks at an idle connection, as
a worker's is between requests."""

from __future__ import annotations

import psycopg
import pytest
from django.db import close_old_connections, connection

from config.postgresql.base import _has_input
from idempotency.tests.wire import round_trips_sent
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def next_request() -> None:
    """What Django does between two requests of a worker (``request_started``); the test
    client leaves it out, so the tests do it themselves."""
    close_old_connections()


def test_the_check_of_an_idle_connection_sends_nothing() -> None:
    pid = backend_pid()
    next_request()
    assert not connection.health_check_done  # the request's first query checks the connection
    with round_trips_sent() as sent:
        connection.close_if_health_check_failed()  # what the request's first query runs first
    assert sent == []
    assert connection.health_check_done and backend_pid() == pid


def test_a_connection_the_server_ended_is_replaced_before_the_next_query(api) -> None:
    assert api.get("/api/v1/orders/").status_code == 200
    ended = backend_pid()
    with psycopg.connect(connection.connection.info.dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [ended])
    # the server says goodbye on the socket before it closes it
    wait_until(lambda: _has_input(connection.connection.pgconn.socket), what="the session's end")
    next_request()
    assert api.get("/api/v1/orders/").status_code == 200  # not a 500
    assert backend_pid() != ended


def test_after_an_error_a_query_decides() -> None:
    backend_pid()
    connection.errors_occurred = True  # an error other than a constraint's since the last commit
    try:
        with round_trips_sent() as sent:
            assert connection.is_usable()
    finally:
        connection.errors_occurred = False
    assert len(sent) == 1


def test_a_transaction_left_open_is_checked_with_a_query() -> None:
    backend_pid()
    raw = connection.connection
    raw.execute("BEGIN")
    try:
        with round_trips_sent() as sent:
            assert connection.is_usable()
        assert len(sent) == 1
    finally:
        raw.execute("ROLLBACK")


def test_a_connection_the_driver_closed_is_not_usable() -> None:
    backend_pid()
    connection.connection.close()
    assert not connection.is_usable()
    connection.close()
    assert backend_pid() > 0  # reconnected
