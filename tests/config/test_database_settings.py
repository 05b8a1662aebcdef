"""Workers keep their PostgreSQL connection and check it before reuse (ADR 0006), and wait
for a connection a bounded time (``DB_CONNECT_TIMEOUT``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from django.conf import settings
from django.test import Client

from tests.support.silent_database import answer_with_a_silent_database


def test_connections_persist_and_are_health_checked_by_default() -> None:
    assert "DB_CONN_MAX_AGE" not in os.environ
    assert settings.DATABASES["default"]["CONN_MAX_AGE"] == 300
    assert settings.DATABASES["default"]["CONN_HEALTH_CHECKS"] is True


def test_db_conn_max_age_0_opens_a_connection_per_request() -> None:
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "d = settings.DATABASES['default']; print(d['CONN_MAX_AGE'], d['CONN_HEALTH_CHECKS'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "DB_CONN_MAX_AGE": "0", "DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split()[-2:] == ["0", "True"]


def test_connecting_to_postgresql_is_bounded_by_default() -> None:
    assert "DB_CONNECT_TIMEOUT" not in os.environ
    assert settings.DB_CONNECT_TIMEOUT == 5
    assert settings.DATABASES["default"]["OPTIONS"]["connect_timeout"] == 5


@pytest.mark.django_db
def test_a_database_that_accepts_and_never_answers_does_not_hold_a_request(settings) -> None:
    """A PostgreSQL that accepts connections and says nothing (a hung server, an address a
    failover left half-open) held a request connecting to it for psycopg's default of 130 s:
    under gunicorn until its ``timeout`` (30 s) killed the worker, an HTML 500. The attempt
    now gives up after ``DB_CONNECT_TIMEOUT``, and the API answers 503."""
    settings.DEBUG = False
    client = Client(raise_request_exception=False)
    answer = answer_with_a_silent_database(
        lambda: client.get("/api/v1/menu/", HTTP_AUTHORIZATION="Api-Key abc123.silent"),
        within=60,  # generous: the attempt's own limit is a few seconds
    )
    assert answer is not None, "the request waited on the silent database past the timeout"
    assert answer.status_code == 503
    assert json.loads(answer.content)["code"] == "DATABASE_UNAVAILABLE"


@pytest.mark.parametrize(
    "env, message",
    [
        pytest.param(
            {"DB_CONNECT_TIMEOUT": "1"}, "DB_CONNECT_TIMEOUT must be within 2..60, not 1", id="1"
        ),
        pytest.param(
            {"DB_CONNECT_TIMEOUT": "0"}, "DB_CONNECT_TIMEOUT must be within 2..60, not 0", id="0"
        ),
        pytest.param(
            {"DB_CONNECT_TIMEOUT": "2.5"},
            "DB_CONNECT_TIMEOUT must be an integer, not '2.5'",
            id="fraction",
        ),
        pytest.param(
            {"DATABASE_URL": os.environ["DATABASE_URL"] + "?connect_timeout=0"},
            "DATABASE_URL must not set connect_timeout: set DB_CONNECT_TIMEOUT",
            id="in-the-url",
        ),
    ],
)
def test_a_connect_timeout_that_would_not_bound_the_wait_stops_the_server(
    env: dict[str, str], message: str
) -> None:
    """0 is libpq's "wait forever" (psycopg's 130 s); one given in the URL would bypass the
    setting's bounds."""
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", **env},
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0
    assert f"ImproperlyConfigured: {message}" in done.stderr
