"""The idempotency contract on the real endpoints (DESIGN §4), in both engine modes."""

from __future__ import annotations

import pytest

from idempotency.core.hashing import keyed_digest
from idempotency.core.keys import key_digest
from idempotency.models import DuplicateAudit, IdempotencyRecord
from idempotency.purge import purge_record
from idempotency.stores import nodes as stores
from idempotency.stores.audit_stream import drain_audits
from idempotency.web import http
from ordering.models import Dish, Order, Payment
from tests.conftest import api_for

pytestmark = pytest.mark.django_db


def post_order(api, menu, key=None, quantity=2, **extra_headers):
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key is not None else {}
    body = {
        "items": [{"dish_id": menu["pizza"].pk, "quantity": quantity}],
        "payment_method": "card",
    }
    return api.post("/api/v1/orders/", body, format="json", **headers, **extra_headers)


def audits(**filters):
    drain_audits()
    return list(DuplicateAudit.objects.filter(**filters).order_by("id"))


def test_first_execution_then_byte_identical_replay(api, menu, engine_mode):
    first = post_order(api, menu, key="order-1")
    again = post_order(api, menu, key="order-1")
    assert first.status_code == 201 and first["X-Idempotent-Result"] == "MISS"
    assert "Idempotent-Replayed" not in first
    assert again.status_code == 201
    assert again["X-Idempotent-Result"] == "HIT" and again["Idempotent-Replayed"] == "true"
    assert again.content == first.content
    assert again["Content-Type"] == first["Content-Type"] and again["Location"] == first["Location"]
    assert Order.all_tenants.count() == 1
    assert Dish.all_tenants.get(pk=menu["pizza"].pk).stock == 48
    [audit] = audits()
    assert (audit.outcome, audit.endpoint) == ("HIT", "POST api/v1/orders/")
    assert audit.key == keyed_digest("order-1")  # never the key itself
    assert audit.resource_ref == first["Location"]


def test_record_is_committed_with_the_order(api, menu, engine_mode):
    post_order(api, menu, key="k-1")
    record = IdempotencyRecord.objects.get()
    order = Order.all_tenants.get()
    assert record.key == key_digest("k-1") and record.response_status == 201  # not "k-1"
    assert order.idempotency_key and len(order.idempotency_key) == 64


def test_key_required_on_create(api, menu, engine_mode):
    r = post_order(api, menu)
    assert r.status_code == 400 and r.json()["code"] == "IDEMPOTENCY_KEY_MISSING"
    assert Order.all_tenants.count() == 0


@pytest.mark.parametrize(
    "key",
    [
        pytest.param("", id="empty"),
        pytest.param("x" * 256, id="too-long"),
        pytest.param("ключ", id="non-ascii"),
        pytest.param("a\tb", id="control-char"),
        pytest.param("a\x7fb", id="DEL"),
    ],
)
def test_malformed_keys_are_400(api, menu, key):
    r = post_order(api, menu, key=key)
    assert r.status_code == 400 and r.json()["code"] == "IDEMPOTENCY_KEY_INVALID"
    assert Order.all_tenants.count() == 0 and IdempotencyRecord.objects.count() == 0


def test_longest_valid_key_works(api, menu):
    assert post_order(api, menu, key="k" * 255).status_code == 201


def test_key_reused_with_other_payload_is_422(api, menu, engine_mode):
    assert post_order(api, menu, key="same", quantity=2).status_code == 201
    r = post_order(api, menu, key="same", quantity=3)
    assert r.status_code == 422 and r.json()["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert Order.all_tenants.count() == 1
    [audit] = audits(outcome="REUSED")
    assert audit.differing_fields == ["items"]


def test_a_replay_from_the_workers_table_computes_no_field_hashes(
    api, menu, engine_mode, monkeypatch
):
    computed = []
    original = http._field_hashes_under

    def counted(payload, version):
        computed.append(version)
        return original(payload, version)

    monkeypatch.setattr(http, "_field_hashes_under", counted)
    post_order(api, menu, key="k")
    assert computed  # stored with the first execution
    computed.clear()
    assert post_order(api, menu, key="k")["X-Idempotent-Result"] == "HIT"
    [hit] = audits(outcome="HIT")
    # database-only a process keeps no results of its own: the record answers, unhashed too
    assert hit.source == ("local" if engine_mode == "redis" else "database") and computed == []
    assert post_order(api, menu, key="k", quantity=3).status_code == 422
    assert computed  # a REUSED answer names the differing fields
    assert audits(outcome="REUSED")[0].differing_fields == ["items"]


def test_same_key_other_tenant_or_diner_is_another_key(
    api, tenant, other_tenant, menu, engine_mode
):
    from tests.conftest import menu_for

    other_menu = menu_for(other_tenant)
    mine = post_order(api, menu, key="shared")
    theirs = post_order(api_for(other_tenant, diner="diner-1"), other_menu, key="shared")
    neighbour = post_order(api_for(tenant, diner="diner-2"), menu, key="shared")
    assert [r["X-Idempotent-Result"] for r in (mine, theirs, neighbour)] == ["MISS"] * 3
    assert len({r.json()["id"] for r in (mine, theirs, neighbour)}) == 3
    assert Order.objects.for_tenant(tenant).count() == 2
    assert Order.objects.for_tenant(other_tenant).count() == 1


def test_refusal_is_stored_and_replayed(api, menu, engine_mode):
    first = post_order(api, menu, key="big", quantity=99)
    again = post_order(api, menu, key="big", quantity=99)
    assert first.status_code == again.status_code == 409
    assert first.json()["code"] == "INSUFFICIENT_STOCK"
    assert again.content == first.content and again["X-Idempotent-Result"] == "HIT"
    assert Order.all_tenants.count() == 0


def test_5xx_is_not_stored_and_retry_executes(api, menu, engine_mode, monkeypatch):
    from ordering.api import views

    real = views.place_order
    calls = []

    def flaky(**kwargs):
        calls.append(1)
        if len(calls) == 1:
            real(**kwargs)  # writes, then the process "crashes": the transaction must roll back
            raise RuntimeError("database went away")
        return real(**kwargs)

    monkeypatch.setattr(views, "place_order", flaky)
    api.raise_request_exception = False
    failed = post_order(api, menu, key="retry-me")
    assert failed.status_code == 500
    assert Order.all_tenants.count() == 0 and IdempotencyRecord.objects.count() == 0
    assert Dish.all_tenants.get(pk=menu["pizza"].pk).stock == 50
    retried = post_order(api, menu, key="retry-me")
    assert retried.status_code == 201 and retried["X-Idempotent-Result"] == "MISS"
    assert Order.all_tenants.count() == 1


def test_a_key_whose_answer_is_no_longer_kept_names_its_order(api, menu, engine_mode):
    """A retry after the record's retention ran out (here: purged, as the retention purge
    does) meets the orders' own unique key: 409 ORDER_ALREADY_PLACED naming the order, not a
    500, and nothing new placed (red without the view's handling: the IntegrityError)."""
    first = post_order(api, menu, key="long-ago")
    purge_record(IdempotencyRecord.objects.get())
    stores.local_cache().clear()
    again = post_order(api, menu, key="long-ago")
    assert again.status_code == 409, again.content
    body = again.json()
    assert body["code"] == "ORDER_ALREADY_PLACED" and body["order_id"] == first.json()["id"]
    assert again["Location"] == first["Location"]
    assert Order.all_tenants.count() == 1
    assert Dish.all_tenants.get(pk=menu["pizza"].pk).stock == 50 - 2
    assert api.get(again["Location"]).json()["id"] == first.json()["id"]


def test_pay_and_cancel_absorb_keyless_double_submits(api, menu, engine_mode):
    order_id = post_order(api, menu, key="o").json()["id"]
    first = api.post(f"/api/v1/orders/{order_id}/pay/")
    second = api.post(f"/api/v1/orders/{order_id}/pay/")
    assert (first.status_code, second.status_code) == (200, 200)
    assert second["X-Idempotent-Result"] == "HIT" and second.content == first.content
    assert Payment.all_tenants.count() == 1
    c1 = api.post(f"/api/v1/orders/{order_id}/cancel/")
    c2 = api.post(f"/api/v1/orders/{order_id}/cancel/")
    assert c1.json()["status"] == "CANCELLED" and c2["X-Idempotent-Result"] == "HIT"


def test_a_keyless_move_refused_runs_again_once_the_order_allows_it(
    api, merchant_api, menu, engine_mode
):
    """A keyless ACCEPTED before the payment arrived is refused; the same keyless request once
    the order is PAID accepts it, not a replay of the stale 409 for the automatic key's minute."""
    order_id = post_order(api, menu, key="early").json()["id"]
    url = f"/api/v1/orders/{order_id}/transition/"
    early = merchant_api.post(url, {"to": "ACCEPTED"}, format="json")
    assert early.status_code == 409 and early.json()["code"] == "ORDER_STATUS_CONFLICT"
    Order.all_tenants.filter(pk=order_id).update(status="PAID")
    accepted = merchant_api.post(url, {"to": "ACCEPTED"}, format="json")
    assert accepted.status_code == 200 and accepted["X-Idempotent-Result"] == "MISS"
    assert accepted.json()["status"] == "ACCEPTED"
    again = merchant_api.post(url, {"to": "ACCEPTED"}, format="json")
    assert again["X-Idempotent-Result"] == "HIT" and again.content == accepted.content


def test_auto_key_is_per_order(api, menu, engine_mode):
    a = post_order(api, menu, key="a").json()["id"]
    b = post_order(api, menu, key="b").json()["id"]
    assert api.post(f"/api/v1/orders/{a}/pay/")["X-Idempotent-Result"] == "MISS"
    assert api.post(f"/api/v1/orders/{b}/pay/")["X-Idempotent-Result"] == "MISS"
    assert Payment.all_tenants.count() == 2


def test_merchant_transition_double_submit(api, merchant_api, menu, engine_mode):
    order_id = post_order(api, menu, key="m").json()["id"]
    Order.all_tenants.filter(pk=order_id).update(status="PAID")
    url = f"/api/v1/orders/{order_id}/transition/"
    r1 = merchant_api.post(url, {"to": "ACCEPTED"}, format="json")
    r2 = merchant_api.post(url, {"to": "ACCEPTED"}, format="json")
    assert r1.status_code == r2.status_code == 200 and r2["X-Idempotent-Result"] == "HIT"
    assert Order.all_tenants.get(pk=order_id).transitions.filter(to_status="ACCEPTED").count() == 1
