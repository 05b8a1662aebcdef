"""PostgreSQL unreachable: 503 DATABASE_UNAVAILABLE with Retry-After, not a 500
(config/database_unavailable.py). A write caught by the outage mid-run, and its key's retry,
under a live server: tests/faults/test_database_gone.py."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.db import DatabaseError, connection, transaction
from django.test import Client

from config.database_unavailable import is_database_unavailable
from tenants.models import Tenant
from tests.support.auth import diner_token
from tests.support.database_gone import database_unreachable

pytestmark = pytest.mark.django_db


@pytest.fixture(params=[True, False], ids=["debug", "production"])
def client(request: pytest.FixtureRequest, settings: object) -> Client:
    settings.DEBUG = request.param  # type: ignore[attr-defined]
    return Client(raise_request_exception=False)


@pytest.mark.parametrize(
    "method, path",
    [("get", "/api/v1/menu/"), ("get", "/api/v1/orders/"), ("post", "/api/v1/orders/")],
)
def test_an_api_request_while_the_database_is_down_is_503_with_retry_after(
    client: Client, method: str, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """It was 500 SERVER_ERROR, "a bug on our side", for an outage, logged with a traceback."""
    token = diner_token(Tenant.objects.create(slug="down", name="Down"))
    with database_unreachable():
        answer = getattr(client, method)(
            path,
            data={"items": [{"dish_id": 1, "quantity": 1}], "payment_method": "card"},
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
            HTTP_IDEMPOTENCY_KEY="while-down",
        )

    assert answer.status_code == 503, answer.content
    assert answer["Content-Type"] == "application/problem+json"
    assert answer["Retry-After"] == "5"
    body = json.loads(answer.content)
    assert (body["code"], body["status"]) == ("DATABASE_UNAVAILABLE", 503)
    assert "retry later with the same key" in body["detail"]
    logged = [r for r in caplog.records if r.name == "config.database_unavailable"]
    assert [(r.levelname, r.exc_info) for r in logged] == [("WARNING", None)]
    assert logged[0].getMessage().startswith("PostgreSQL unavailable (connection failed")


def test_a_dashboard_page_while_the_database_is_down_is_a_page_of_its_own(client: Client) -> None:
    """The site's layout reads the user and the tenant from the database: the 503 page does not."""
    user = get_user_model().objects.create_user("owner", password="pw-owner-1234")
    client.force_login(user)
    with database_unreachable():
        answer = client.get("/dashboard/")

    assert answer.status_code == 503
    assert answer["Content-Type"].startswith("text/html")
    assert answer["Retry-After"] == "5"
    assert b"Temporarily unavailable" in answer.content


def test_an_unreachable_server_is_an_outage() -> None:
    with (
        database_unreachable(),
        pytest.raises(DatabaseError) as raised,
        connection.cursor() as cursor,
    ):
        cursor.execute("SELECT 1")
    assert is_database_unavailable(raised.value)


def test_a_statement_the_server_cancelled_is_no_outage() -> None:
    """A statement the server cancelled (past a statement_timeout) is the request's own
    failure, not an outage: still a 500."""
    with (
        pytest.raises(DatabaseError) as raised,
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute("SET LOCAL statement_timeout = 10")
        cursor.execute("SELECT pg_sleep(5)")
    assert raised.value.__cause__ is not None
    assert raised.value.__cause__.sqlstate == "57014"  # type: ignore[attr-defined]
    assert not is_database_unavailable(raised.value)


def test_a_session_the_server_ended_is_an_outage() -> None:
    """A restart or a failover ends every session ("terminating connection due to administrator
    command"): what the next statement on one gets."""
    ended = connection.copy()
    try:
        with ended.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            (pid,) = cursor.fetchone()
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s, 10000)", [pid])
        with pytest.raises(DatabaseError) as raised, ended.cursor() as cursor:
            cursor.execute("SELECT 1")
    finally:
        ended.close()
    assert raised.value.__cause__.sqlstate == "57P01"  # type: ignore[union-attr]
    assert is_database_unavailable(raised.value)
