"""The data migration that replaces raw keys in existing records with their digests."""

from __future__ import annotations

import pytest
from django.utils import timezone

from idempotency.core.keys import key_digest, redis_key_for, redis_key_from_digest
from tests.support.migrations import migrate_to

BEFORE = [("idempotency", "0004_audit_stored_body_permission_staff_access_log")]
AFTER = [("idempotency", "0005_rawkeys_digest_record_keys")]
LOOKS_LIKE_A_DIGEST = "0123456789abcdef0123456789abcdef"  # a client may send 32 hex chars


@pytest.mark.django_db(transaction=True)
def test_existing_records_keep_the_digest_their_redis_key_ends_with(back_to_latest: None) -> None:
    old = migrate_to(BEFORE).get_model("idempotency", "IdempotencyRecord")
    now = timezone.now()
    raw_keys = ["order-1", "auto:" + "f" * 64, LOOKS_LIKE_A_DIGEST, *(f"k{i}" for i in range(1200))]
    old.objects.bulk_create(
        old(
            tenant_key="7",
            scope="p|POST|api/v1/orders/",
            key=key,
            fingerprint="f",
            response_status=201,
            created_at=now,
            expires_at=now,
        )
        for key in raw_keys
    )

    new = migrate_to(AFTER).get_model("idempotency", "IdempotencyRecord")
    stored = set(new.objects.values_list("key", flat=True))
    assert stored == {key_digest(key) for key in raw_keys}  # every row, the 32-hex one once
    assert not stored & set(raw_keys)
    scope = "p|POST|api/v1/orders/"
    for buckets in (1, 4):
        assert redis_key_from_digest(
            tenant="7", scope=scope, digest=key_digest("order-1"), buckets=buckets
        ) == redis_key_for(tenant="7", scope=scope, key="order-1", buckets=buckets)
