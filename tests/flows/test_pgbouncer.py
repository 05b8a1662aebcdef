"""Through PgBouncer in transaction mode, the fleet setup of ``docs/scaling.md`` (issue 13 item 4).

A real ``pgbouncer`` (Debian's package, installed by ``scripts/ensure_services.sh``) runs the
configuration the doc shows (``tests/support/pgbouncer.py`` reads it from there). Through it:

- a same-key storm on a database-only gunicorn: the database claim is a transaction-scoped
  advisory lock, which is what survives transaction pooling (a session lock would not);
- the crash-window tests, run by a pytest of their own whose every connection goes through
  PgBouncer;
- the API's reads that send several statements in one query (the order list) or a kept
  statement (the menu).

Each test also asks PgBouncer's admin console how many transactions it pooled for the database,
so a run that bypassed it cannot pass.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from django.conf import settings

from tests.flows.conftest import DATABASE_ONLY_ENV, Shop
from tests.flows.test_exactly_once_without_redis import (
    DUPLICATES,
    CountedServer,
    assert_executed_once,
    counted_server,
    operation,
)
from tests.flows.test_storm import fire
from tests.support.live_server import PROJECT_ROOT
from tests.support.pgbouncer import PgBouncer, running_pgbouncer
from tests.support.ports import free_port
from tests.support.waiting import DEADLINE_SECONDS

pytestmark = pytest.mark.slow

CRASH_WINDOW_TESTS = "tests/flows/test_crash_windows.py"
INNER_PYTEST_ARGS = ("-q", "-p", "no:cacheprovider", "--reuse-db")


@pytest.fixture(scope="module")
def pgbouncer(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PgBouncer]:
    """PgBouncer in front of the test database's server; it stops before the test database is
    dropped (PostgreSQL refuses to drop a database PgBouncer still holds connections to)."""
    database = settings.DATABASES["default"]
    with running_pgbouncer(
        workdir=tmp_path_factory.mktemp("pgbouncer"),
        port=free_port(),
        server_host=database["HOST"] or "127.0.0.1",
        server_port=int(database["PORT"] or 5432),
        user=database["USER"] or "postgres",
    ) as bouncer:
        yield bouncer


@pytest.fixture(scope="module")
def server_through_pgbouncer(
    pgbouncer: PgBouncer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CountedServer]:
    """A database-only gunicorn (4 sync workers) whose connections all go through PgBouncer."""
    env = {
        **DATABASE_ONLY_ENV,
        "DATABASE_URL": pgbouncer.url(settings.DATABASES["default"]["NAME"]),
        "DATABASE_DISABLE_SERVER_SIDE_CURSORS": "1",
    }
    with counted_server("sync-4", env=env, log_dir=tmp_path_factory.mktemp("pgb-server")) as s:
        yield s


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("name", ["create", "pay", "accept"])
def test_a_same_key_storm_through_pgbouncer_runs_the_view_once(
    server_through_pgbouncer: CountedServer, pgbouncer: PgBouncer, shop: Shop, name: str
):
    dbname = settings.DATABASES["default"]["NAME"]
    before = pgbouncer.transactions(dbname)
    # given an operation, and a server whose database is behind PgBouncer in transaction mode
    key = f"pgbouncer-{name}-{uuid.uuid4()}"
    op = operation(name, shop, key)
    # when 64 copies arrive at once
    responses = fire(server_through_pgbouncer.server, [op.call] * DUPLICATES)
    # then the view ran once, and PgBouncer carried the storm's transactions
    assert_executed_once(server_through_pgbouncer, op, key, responses)
    # (the test's own connection is direct: only the server's transactions are counted; not
    # one per request, since replays from a worker's local cache need no SQL)
    assert pgbouncer.wait_for_transactions(dbname, more_than=before) > before


def test_the_crash_window_tests_pass_through_pgbouncer(pgbouncer: PgBouncer, tmp_path: Path):
    # given a database of their own, reached only through PgBouncer
    base = f"{settings.DATABASES['default']['NAME']}_pgbouncer"
    dbname = base if base.startswith("test_") else f"test_{base}"
    drop_database(dbname)
    env = {
        **os.environ,
        "DEBUG": "1",
        "DATABASE_URL": pgbouncer.url(base.removeprefix("test_")),
        "DATABASE_DISABLE_SERVER_SIDE_CURSORS": "1",
    }
    try:
        # when the crash-window tests run with that database (--reuse-db: pytest-django does
        # not drop it at the end, which PgBouncer's open server connections would refuse)
        run = subprocess.run(
            [sys.executable, "-m", "pytest", CRASH_WINDOW_TESTS, *INNER_PYTEST_ARGS],
            cwd=PROJECT_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        # then they all pass, through PgBouncer
        assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
        assert " passed" in run.stdout and "failed" not in run.stdout, run.stdout[-2000:]
        assert pgbouncer.wait_for_transactions(dbname, more_than=0) > 0
    finally:
        drop_database(dbname)


def drop_database(dbname: str) -> None:
    """Drop ``dbname`` on the server directly (``WITH (FORCE)`` closes PgBouncer's
    connections to it)."""
    database = settings.DATABASES["default"]
    with psycopg.connect(
        host=database["HOST"] or "127.0.0.1",
        port=int(database["PORT"] or 5432),
        user=database["USER"] or "postgres",
        dbname="postgres",
        autocommit=True,
    ) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


@pytest.mark.django_db(transaction=True)
def test_the_api_s_reads_through_pgbouncer_answer_what_the_database_holds(
    server_through_pgbouncer: CountedServer, pgbouncer: PgBouncer, shop: Shop
):
    """The order list reads its page, then the page's lines and payments as one query of
    several statements (``ordering/order_list.py``), and the menu by a kept statement: through
    PgBouncer in transaction mode they answer what the database holds."""
    dbname = settings.DATABASES["default"]["NAME"]
    diner = shop.headers(diner="lister")
    body = {"items": [{"dish_id": shop.dish.pk, "quantity": 1}], "payment_method": "card"}
    with httpx.Client(base_url=server_through_pgbouncer.server.url, timeout=DEADLINE_SECONDS) as c:
        placed = [
            c.post(
                "/api/v1/orders/",
                json=body,
                headers={**diner, "Idempotency-Key": str(uuid.uuid4())},
            )
            for _ in range(3)
        ]
        before = pgbouncer.transactions(dbname)
        listed = c.get("/api/v1/orders/", headers=diner)
        menu = c.get("/api/v1/menu/", headers={"Authorization": f"Api-Key {shop.api_key}"})
    assert [answer.status_code for answer in placed] == [201] * 3
    assert listed.status_code == 200 and menu.status_code == 200
    ids = [answer.json()["id"] for answer in placed]
    assert len(listed.json()["results"]) == 3
    assert [order["id"] for order in listed.json()["results"]] == ids[::-1]
    assert all(order["lines"][0]["dish_id"] == shop.dish.pk for order in listed.json()["results"])
    assert [dish["id"] for dish in menu.json()] == [shop.dish.pk]
    assert pgbouncer.wait_for_transactions(dbname, more_than=before) > before
