"""The write rate limit: per principal, counted in Redis, 429 with Retry-After beyond it."""

from __future__ import annotations

import pytest

from idempotency.tests.conftest import post_note
from idempotency.tests.testapp.models import Note

pytestmark = pytest.mark.django_db


@pytest.fixture
def three_per_minute(settings):
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "RATE_LIMIT_PER_MINUTE": 3}


def test_writes_beyond_the_limit_get_429_with_retry_after(three_per_minute, client, tenant):
    answers = [post_note(client, tenant, key=f"k-{n}", text=f"n{n}") for n in range(4)]
    assert [a.status_code for a in answers] == [201, 201, 201, 429]
    assert 1 <= int(answers[-1]["Retry-After"]) <= 60
    assert Note.objects.count() == 3
    # replays count too: a retry storm cannot bypass the limit
    assert post_note(client, tenant, key="k-0", text="n0").status_code == 429


def test_retry_after_is_the_wait_the_refusal_names_rounded_up(three_per_minute, client, tenant):
    """(red under DRF's own exception handler, which writes ``Retry-After`` as ``%d`` of the
    throttle's ``wait``: the window's exact remaining time rounded down, 58 where the detail
    said 59, so a client that waited as told was refused again)"""
    for n in range(3):
        post_note(client, tenant, key=f"k-{n}", text=f"n{n}")
    refused = post_note(client, tenant, key="k-3", text="n3")
    assert refused.status_code == 429
    detail = refused.json()["detail"]
    assert detail.endswith(f"retry in {refused['Retry-After']} s.")


def test_the_limit_is_per_principal(three_per_minute, client, tenant):
    for n in range(3):
        post_note(client, tenant, key=f"a-{n}", text=f"a{n}")
    assert post_note(client, tenant, key="a-9", text="a9").status_code == 429
    assert post_note(client, tenant, key="b-0", text="b0", principal="bob").status_code == 201
