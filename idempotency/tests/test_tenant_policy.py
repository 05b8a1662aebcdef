"""A tenant's own policy (``RECORD_TTL_FOR_TENANT``) that cannot be kept runs nothing."""

from __future__ import annotations

import pytest
from django.test import Client

from idempotency.tests.conftest import idem_keys, post_note
from idempotency.tests.testapp.models import Note


def negative_ttl(tenant: str) -> int:
    """A host hook with a sign error."""
    return -3600


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
