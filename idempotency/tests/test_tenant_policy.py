"""A tenant's own policy (``RECORD_TTL_FOR_TENANT``) that cannot be kept runs nothing."""

from __future__ import annotations

import pytest
from django.test import Client

from idempotency.tests.conftest import idem_keys, post_note
from idempotency.tests.testapp.models import Note


def negative_ttl(tenant: str) -> int:
    """A host hook with a sign error."""
    return -3600


def ttl_past_dates(tenant: str) -> int:
    """A host hook answering in milliseconds where seconds are asked, times a thousand."""
    return 10**13


@pytest.mark.django_db
def test_a_negative_record_ttl_runs_nothing_and_keeps_no_claim(engine_mode, tenant, settings):
    """(red: the view ran and committed; database-only the record was written already
    expired, so the retry ran the view again, a second note; under Redis the answer was a 500
    after the commit and the key stayed claimed, so the retry got 409 until the lease ended)"""
    settings.IDEMPOTENCY = {
        **settings.IDEMPOTENCY,
        "RECORD_TTL_FOR_TENANT": f"{__name__}.negative_ttl",
    }
    client = Client(raise_request_exception=False)

    answers = [post_note(client, tenant, key="ttl-sign") for _ in range(2)]

    assert [a.status_code for a in answers] == [500, 500]
    assert not Note.objects.exists()
    assert idem_keys() == []


@pytest.mark.django_db
def test_a_record_ttl_past_ten_years_is_refused_before_the_view_runs(engine_mode, tenant, settings):
    """(red: an ``OverflowError`` from the record's expiry date, after the view had run and
    been rolled back)"""
    settings.IDEMPOTENCY = {
        **settings.IDEMPOTENCY,
        "RECORD_TTL_FOR_TENANT": f"{__name__}.ttl_past_dates",
    }

    with pytest.raises(ValueError, match=r"returned 10000000000000: .* up to 316224000"):
        post_note(Client(), tenant, key="ttl-overflow")

    assert not Note.objects.exists()
    assert idem_keys() == []
