"""Database-only mode by configuration: no Redis at all, the same contract."""

from __future__ import annotations

import pytest
from django.test import Client

from idempotency.tests.conftest import idem_keys, post_note
from idempotency.tests.testapp.models import Note

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "no_redis", [{"REDIS_URL": None}, {"REDIS_CLIENT_FOR_TENANT": None}], ids=["url", "hook"]
)
def test_without_redis_the_database_alone_keeps_the_contract(settings, tenant, no_redis):
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, **no_redis}
    first = post_note(Client(), tenant, key="db-only")
    again = post_note(Client(), tenant, key="db-only")
    reused = post_note(Client(), tenant, key="db-only", text="other")
    assert first["X-Idempotent-Result"] == "MISS"
    assert again["X-Idempotent-Result"] == "HIT" and again.content == first.content
    assert reused.status_code == 422
    assert Note.objects.count() == 1
    assert idem_keys() == []  # nothing went to the Redis server the suite could have used
