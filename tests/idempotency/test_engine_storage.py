"""What the engine stores and replays: header allow-list, binary bodies, the size cap,
purging, and invalidation of local caches."""

from __future__ import annotations

import time
from datetime import timedelta
from io import StringIO

import pytest
import redis
from django.conf import settings
from django.core.management import call_command
from django.utils import timezone

from idempotency.core.keys import ScopedKey, key_digest, redis_key_for
from idempotency.core.outcomes import StoredResponse
from idempotency.models import IdempotencyRecord
from idempotency.purge import purge_record
from idempotency.stores import database as db_store
from idempotency.stores import nodes as stores
from ordering.models import Order, Payment
from tests.flows.test_idempotent_orders import post_order

pytestmark = pytest.mark.django_db


def test_binary_body_survives_the_database_round_trip():
    scoped = ScopedKey(tenant="9", principal="p", method="POST", route="r", key="bin")
    body = bytes(range(256)) * 4
    stored = StoredResponse(
        status=201, headers=(("Content-Type", "application/octet-stream"),), body=body
    )
    assert db_store.insert_record(
        scoped=scoped,
        fingerprint="f" * 64,
        fingerprint_version=1,
        field_hashes={},
        response=stored,
        ttl_seconds=60,
    )
    assert db_store.committed_result(scoped).response == stored


def test_expired_record_is_replaced_live_one_is_not():
    scoped = ScopedKey(tenant="9", principal="p", method="POST", route="r", key="k")
    first = StoredResponse(status=201, body=b"first")
    second = StoredResponse(status=201, body=b"second")
    args = {"scoped": scoped, "fingerprint": "a" * 64, "fingerprint_version": 1, "field_hashes": {}}
    assert db_store.insert_record(**args, response=first, ttl_seconds=60)
    assert not db_store.insert_record(**args, response=second, ttl_seconds=60)
    IdempotencyRecord.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert db_store.committed_result(scoped) is None
    assert db_store.insert_record(**args, response=second, ttl_seconds=60)
    assert db_store.committed_result(scoped).response.body == b"second"


def test_replay_never_carries_set_cookie(api, menu, engine_mode, monkeypatch):
    """The replay header allow-list (``REPLAY_HEADERS``) keeps a cookie and an internal header
    the first answer carried out of every stored reply (Redis, database, local cache)."""
    from rest_framework.response import Response

    from ordering.api import views

    class LeakyResponse(Response):
        """What the view would answer if something on its path set a cookie."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.set_cookie("session-ish", "secret")  # kept in ``cookies``
            self["Set-Cookie"] = "raw=secret; Path=/"  # a header like any other
            self["X-Debug-Internal"] = "1"

    # The handler builds its answer with the module's ``Response``: the engine sees this one.
    monkeypatch.setattr(views, "Response", LeakyResponse)
    first = post_order(api, menu, key="cookie")
    # Given the first answer really carried both (the patch is on the handler's path) ...
    assert first.status_code == 201 and first["X-Idempotent-Result"] == "MISS"
    assert first.cookies["session-ish"].value == "secret" and first["X-Debug-Internal"] == "1"
    assert first["Set-Cookie"] == "raw=secret; Path=/"
    stores.local_cache().clear()
    # ... when it is replayed from Redis or the database, and then from the local cache ...
    for again in (post_order(api, menu, key="cookie"), post_order(api, menu, key="cookie")):
        # ... then neither comes back, and the allow-listed headers and the body do.
        assert again["X-Idempotent-Result"] == "HIT"
        assert "secret" not in again.serialize_headers().decode()
        assert "Set-Cookie" not in again and not again.cookies
        assert "X-Debug-Internal" not in again
        assert again["Content-Type"] == first["Content-Type"]
        assert again["Location"] == first["Location"] and again.content == first.content


# A cap below an order's body (about 600 bytes) and above its pointer form (about 150).
CAP = 300


def stored_sizes(key: str) -> dict[str, int]:
    """The stored reply's bytes in the database record, in Redis and in the local cache
    (where Redis serves the tenant)."""
    record = IdempotencyRecord.objects.get(key=key_digest(key))
    sizes = {
        "database": StoredResponse(
            status=record.response_status,
            headers=tuple(tuple(h) for h in record.response_headers),
            body=bytes(record.response_body),
            pointer=record.resource_location,
        ).size
    }
    redis_key = redis_key_for(tenant=record.tenant_key, scope=record.scope, key=key)
    cache = stores.shared_cache_for(record.tenant_key, key=redis_key)
    if cache is not None:  # database-only, a process keeps no results of its own
        sizes["local"] = cache.get(redis_key).response.size
    client = redis.Redis.from_url(settings.REDIS_URL)
    stored = client.hget(redis_key, "res")
    if stored is not None:
        sizes["redis"] = len(stored)
    return sizes


def test_a_refusal_over_the_cap_is_not_kept_and_a_retry_runs_it_again(
    api, menu, tenant, settings, engine_mode
):
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "MAX_STORED_REPLY_BYTES": CAP}
    # every line refused on its own: an error body longer than the cap
    body = {"items": [{"dish_id": 0, "quantity": 1}] * 20, "payment_method": "card"}

    first = api.post("/api/v1/orders/", body, format="json", HTTP_IDEMPOTENCY_KEY="too-big")
    again = api.post("/api/v1/orders/", body, format="json", HTTP_IDEMPOTENCY_KEY="too-big")

    assert first.status_code == again.status_code == 400 and len(first.content) > CAP
    assert again.content == first.content
    assert first["X-Idempotent-Result"] == again["X-Idempotent-Result"] == "MISS"
    assert IdempotencyRecord.objects.count() == 0 and len(stores.local_cache()) == 0
    client = redis.Redis.from_url(settings.REDIS_URL)
    assert list(client.scan_iter(match=f"idem:{{t:{tenant.pk}}}:*")) == []


def test_a_refusal_under_the_cap_is_kept_and_replayed(api, menu, settings, engine_mode):
    body = {"items": [{"dish_id": menu["pizza"].pk, "quantity": 1}], "payment_method": "x" * 900}

    first = api.post("/api/v1/orders/", body, format="json", HTTP_IDEMPOTENCY_KEY="small")
    again = api.post("/api/v1/orders/", body, format="json", HTTP_IDEMPOTENCY_KEY="small")

    assert first.status_code == 400 and again["X-Idempotent-Result"] == "HIT"
    assert again.content == first.content
    assert IdempotencyRecord.objects.get().response_status == 400


def test_a_success_over_the_cap_without_location_is_kept_as_a_marker(
    api, menu, settings, engine_mode
):
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "MAX_STORED_REPLY_BYTES": CAP}
    order_id = post_order(api, menu, key="order").json()["id"]

    first = api.post(f"/api/v1/orders/{order_id}/pay/", HTTP_IDEMPOTENCY_KEY="pay")
    again = api.post(f"/api/v1/orders/{order_id}/pay/", HTTP_IDEMPOTENCY_KEY="pay")

    assert first.status_code == 200 and len(first.content) > CAP and "Location" not in first
    assert again.status_code == 200 and again["X-Idempotent-Result"] == "HIT"
    assert again.content == b"" and "Content-Type" not in again
    assert again["Idempotent-Body-Omitted"] == str(len(first.content))
    assert Payment.all_tenants.filter(order_id=order_id).count() == 1
    assert all(size <= CAP for size in stored_sizes("pay").values())


def test_body_over_the_cap_is_stored_as_a_pointer_and_rerendered(api, menu, settings, engine_mode):
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "MAX_STORED_REPLY_BYTES": CAP}
    first = post_order(api, menu, key="big-body")
    assert len(first.content) > CAP
    record = IdempotencyRecord.objects.get()
    assert bytes(record.response_body) == b"" and record.resource_location == first["Location"]
    stores.local_cache().clear()
    again = post_order(api, menu, key="big-body")
    assert again.status_code == 201 and again["X-Idempotent-Result"] == "HIT"
    assert again["Location"] == first["Location"]
    assert again.json() == api.get(first["Location"]).json()
    assert again.json()["id"] == first.json()["id"] and Order.all_tenants.count() == 1
    assert all(size <= CAP for size in stored_sizes("big-body").values())


def test_purge_command_deletes_only_expired(api, menu):
    post_order(api, menu, key="old")
    post_order(api, menu, key="new")
    IdempotencyRecord.objects.filter(key=key_digest("old")).update(expires_at=timezone.now())
    call_command("purge_idempotency_records", stdout=StringIO())
    assert list(IdempotencyRecord.objects.values_list("key", flat=True)) == [key_digest("new")]


def test_purging_a_record_clears_redis_and_local_caches(api, menu):
    # given a finished request, cached in this process
    first = post_order(api, menu, key="purge-me")
    assert post_order(api, menu, key="purge-me")["X-Idempotent-Result"] == "HIT"
    record = IdempotencyRecord.objects.get()
    cache_key = next(iter(stores.local_cache()._entries))
    # when staff purge it
    purge_record(record)
    # then the pub/sub invalidation reaches the local cache, and Redis forgot the key
    deadline = time.monotonic() + 2
    while stores.local_cache().get(cache_key) is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stores.local_cache().get(cache_key) is None
    assert IdempotencyRecord.objects.count() == 0
    assert first.status_code == 201
