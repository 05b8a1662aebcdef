"""The purge: each tenant's audit retention honoured, and never more than PURGE_BATCH_SIZE rows
per DELETE."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from idempotency.models import DuplicateAudit, IdempotencyRecord
from idempotency.purge import purge_expired, purge_expired_audits
from idempotency.tests.testapp.scope import tenant_audit_days

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def overrides(settings) -> Iterator[dict[str, int]]:
    settings.IDEMPOTENCY = {
        **settings.IDEMPOTENCY,
        "AUDIT_RETENTION_OVERRIDES": "idempotency.tests.testapp.scope.audit_retention_overrides",
    }
    yield tenant_audit_days
    tenant_audit_days.clear()


def audit(tenant: str, days_ago: float) -> None:
    DuplicateAudit.objects.create(
        tenant_key=tenant,
        endpoint="POST notes/",
        key=f"{tenant}-{days_ago}",
        outcome="HIT",
        at=timezone.now() - timedelta(days=days_ago),
    )


def test_audits_go_after_their_tenants_own_number_of_days(overrides):
    overrides["brief"] = 1
    for tenant, age in (("brief", 2), ("brief", 0.5), ("default", 2), ("default", 31)):
        audit(tenant, age)
    assert purge_expired_audits() == 2
    assert set(DuplicateAudit.objects.values_list("key", flat=True)) == {"brief-0.5", "default-2"}


def test_records_are_deleted_in_batches_of_at_most_the_batch_size(settings):
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "PURGE_BATCH_SIZE": 10}
    past = timezone.now() - timedelta(seconds=1)
    IdempotencyRecord.objects.bulk_create(
        IdempotencyRecord(
            tenant_key="t", scope="s", key=f"k{n}", fingerprint="f", response_status=201,
            created_at=past, expires_at=past,
        )
        for n in range(25)
    )  # fmt: skip
    batches: list[int] = []
    assert purge_expired(max_batches=1, on_batch=batches.append) == 10
    with CaptureQueriesContext(connection) as queries:
        assert purge_expired(on_batch=batches.append) == 15
    assert batches == [10, 10, 5]
    assert sum(q["sql"].startswith("DELETE") for q in queries) == 2
    assert not IdempotencyRecord.objects.exists()


@pytest.mark.parametrize("days", [0, -7, 999_999, float("nan"), "30"])
def test_an_override_the_purge_cannot_apply_is_named_and_deletes_nothing(overrides, days):
    """(red: 0 or -7 days put the tenant's cut-off at or after now, and every one of its audits
    was deleted at once; 999999 days stopped every purge on ``OverflowError``)"""
    overrides["odd"] = days
    audit("odd", 2)
    audit("default", 31)
    with pytest.raises(ValueError, match=r'IDEMPOTENCY\["AUDIT_RETENTION_OVERRIDES"\] gives .*odd'):
        purge_expired_audits()
    assert DuplicateAudit.objects.count() == 2
