"""Keyed hashes (issue 15, item 2): no raw idempotency key at rest in records, audits, the
audit stream, Redis, the CSV export or the logs; fingerprints and field hashes are HMACs whose
version names the key; a rotation keeps old entries verifiable and old audits findable."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
import redis
from django.conf import settings as django_settings
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import User
from django.test import Client

from config.logging import JsonFormatter
from idempotency.core.fingerprint import field_hashes, fingerprint, keyed_version
from idempotency.core.hashing import keyed_digest
from idempotency.core.keys import key_digest
from idempotency.core.tenant_policy import reset_tenant_policy_cache
from idempotency.models import DuplicateAudit, IdempotencyRecord, OutcomeCount
from idempotency.stores.audit_stream import drain_audits, stream_key
from idempotency.tests.leak_scan import assert_no_clear_copy, redis_dump, table_dump
from tests.flows.test_idempotent_orders import post_order

pytestmark = pytest.mark.django_db

RAW_KEY = "raw-key-5c1e9a77-never-at-rest"
KEY_1 = (1, "first-hash-key-secret-0123456789abcdef")
KEY_2 = (2, "second-hash-key-secret-0123456789abcdef")


@pytest.fixture
def captured_logs() -> Iterator[io.StringIO]:
    """Every log line of every logger, as the production JSON formatter writes it."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield stream
    root.removeHandler(handler)
    root.setLevel(level)


def admin_client() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="x-123456789"))
    return client


def with_keys(settings, *keys: tuple[int, str]) -> None:
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "HASH_KEYS": list(keys)}


def test_a_raw_key_is_nowhere_at_rest_in_records_audits_stream_export_or_logs(
    api, menu, captured_logs, engine_mode
):
    post_order(api, menu, key=RAW_KEY, HTTP_X_REQUEST_ID="req-keyed-0001")
    post_order(api, menu, key=RAW_KEY)  # HIT
    post_order(api, menu, key=RAW_KEY, quantity=5)  # REUSED
    stream = redis.Redis.from_url(django_settings.REDIS_URL).xrange(stream_key())
    assert RAW_KEY.encode() not in repr(stream).encode()
    drain_audits()

    assert IdempotencyRecord.objects.get().key == key_digest(RAW_KEY)
    assert_no_clear_copy(
        RAW_KEY,
        records=table_dump("idempotency_idempotencyrecord"),
        audits=table_dump("idempotency_duplicateaudit"),
        redis=redis_dump(redis.Redis.from_url(django_settings.REDIS_URL)),
    )
    audits = list(DuplicateAudit.objects.values())
    assert {a["outcome"] for a in audits} == {"HIT", "REUSED"}
    assert {a["key"] for a in audits} == {keyed_digest(RAW_KEY)}
    assert RAW_KEY not in repr(audits) + repr(list(OutcomeCount.objects.values()))
    export = admin_client().post(
        "/admin/idempotency/duplicateaudit/",
        {"action": "export_csv", ACTION_CHECKBOX_NAME: [str(a["id"]) for a in audits]},
    )
    assert export.status_code == 200 and keyed_digest(RAW_KEY) in export.content.decode()
    assert RAW_KEY not in export.content.decode()
    logs = captured_logs.getvalue()
    assert "Unprocessable Entity" in logs  # the refusal was logged (django.request)
    assert RAW_KEY not in logs


def test_fingerprints_and_field_hashes_are_keyed_and_name_their_key(api, menu, settings):
    with_keys(settings, KEY_1)
    post_order(api, menu, key=RAW_KEY)
    record = IdempotencyRecord.objects.get()
    assert record.fingerprint_version == keyed_version(1) == 101
    body = {"items": [{"dish_id": menu["pizza"].pk, "quantity": 2}], "payment_method": "card"}
    unkeyed = {**body, "path": {}}
    assert record.fingerprint != fingerprint(unkeyed, None)  # not the plain SHA-256
    assert record.field_hashes == field_hashes(unkeyed, None, secret=KEY_1[1].encode(), version=101)
    assert record.field_hashes != field_hashes(unkeyed, None)


def test_after_a_rotation_old_entries_verify_and_old_audits_are_found(
    api, menu, settings, engine_mode
):
    with_keys(settings, KEY_1)
    first = post_order(api, menu, key=RAW_KEY)
    post_order(api, menu, key=RAW_KEY)  # an audit hashed under key 1
    drain_audits()

    with_keys(settings, KEY_2, KEY_1)  # key 2 writes now; key 1 still verifies
    again = post_order(api, menu, key=RAW_KEY)
    reused = post_order(api, menu, key=RAW_KEY, quantity=5)
    other = post_order(api, menu, key="another-key")
    drain_audits()

    assert again["X-Idempotent-Result"] == "HIT" and again.content == first.content
    assert reused.status_code == 422
    [mismatch] = DuplicateAudit.objects.filter(outcome="REUSED")
    assert mismatch.differing_fields == ["items"]  # compared under key 1, the entry's key
    assert other.status_code == 201
    assert IdempotencyRecord.objects.get(key=key_digest("another-key")).fingerprint_version == 201
    digests = set(DuplicateAudit.objects.values_list("key", flat=True))
    assert {d.split(":")[0] for d in digests} == {"k1", "k2"}
    found = admin_client().get("/admin/idempotency/duplicateaudit/", {"q": RAW_KEY})
    assert {a.key for a in found.context["cl"].result_list} == digests
    assert found.context["cl"].result_count == 3  # the HIT before, the HIT and REUSED after


def test_a_hash_key_must_outlive_the_longest_retention_not_only_the_default_ttl(
    api, menu, settings, tenant
):
    """docs/data-protection.md's rotation: keep the old key "for at least TTL_SECONDS" (72 h)
    was too short. A restaurant may keep its replies up to RETENTION_RECORD_TTL_HOURS_MAX
    (720 h), and a retry of an entry whose key was dropped can no longer be verified: the
    same payload is refused as the key reused (422), the client's "do not retry"."""
    tenant.record_ttl_hours = settings.RETENTION_RECORD_TTL_HOURS_MAX
    tenant.save(update_fields=["record_ttl_hours"])
    reset_tenant_policy_cache()
    with_keys(settings, KEY_1)
    first = post_order(api, menu, key=RAW_KEY)
    record = IdempotencyRecord.objects.get()
    kept = (record.expires_at - record.created_at).total_seconds()
    assert (
        kept == settings.RETENTION_RECORD_TTL_HOURS_MAX * 3600 > settings.IDEMPOTENCY["TTL_SECONDS"]
    )

    with_keys(settings, KEY_2, KEY_1)  # within the retention: the retry replays
    assert post_order(api, menu, key=RAW_KEY).content == first.content
    with_keys(settings, KEY_2)  # dropped while the record still lives
    dropped = post_order(api, menu, key=RAW_KEY)

    assert dropped.status_code == 422 and dropped.json()["code"] == "IDEMPOTENCY_KEY_REUSED"


def test_the_record_admin_finds_a_record_by_the_key_typed_in(api, menu):
    post_order(api, menu, key=RAW_KEY)
    post_order(api, menu, key="another-key")
    staff = admin_client()
    for term in (RAW_KEY, key_digest(RAW_KEY)):
        found = staff.get("/admin/idempotency/idempotencyrecord/", {"q": term})
        assert [r.key for r in found.context["cl"].result_list] == [key_digest(RAW_KEY)]
    page = staff.get("/admin/idempotency/idempotencyrecord/", {"q": RAW_KEY}).content.decode()
    assert key_digest(RAW_KEY)[:13] in page
