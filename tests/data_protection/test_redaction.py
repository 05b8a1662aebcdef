"""Personal data in order answers (``contact.phone``, ``contact.address``, and what a tenant
adds) goes to the diner in the first answer and is kept nowhere else: every replay is the
redacted body, byte for byte, with ``Idempotency-Redacted``; Redis, the record and audit
tables and the logs hold no clear copy."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
import redis
from django.conf import settings
from django.core.exceptions import ValidationError

from config.logging import JsonFormatter
from idempotency.stores import nodes
from idempotency.stores.audit_stream import drain_audits
from idempotency.tests.leak_scan import assert_no_clear_copy, redis_dump, table_dump
from tests.conftest import api_for, menu_for, use_topology

pytestmark = pytest.mark.django_db

PHONE = "+39 333 765 4321"
ADDRESS = "Via dei Mille 12, 00185 Roma"
NOTE = "Ring twice, the name on the bell is Rossi"
PERSONAL = "contact.phone, contact.address"


def place(api: Any, menu: dict, key: str) -> Any:
    body = {
        "items": [{"dish_id": menu["pizza"].pk, "quantity": 1}],
        "payment_method": "card",
        "note": NOTE,
        "contact": {"phone": PHONE, "address": ADDRESS},
    }
    return api.post("/api/v1/orders/", body, format="json", HTTP_IDEMPOTENCY_KEY=key)


def redacted(answer: Any, *extra: str) -> bytes:
    """``answer``'s body as a replay must give it: the personal values null, compact JSON."""
    document = json.loads(answer.content)
    document["contact"] = {"phone": None, "address": None}
    for path in extra:
        document[path] = None
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()


def forget_redis() -> None:
    client = redis.Redis.from_url(settings.REDIS_URL)
    keys = list(client.scan_iter(match="idem:{t:[0-9]*"))
    if keys:
        client.delete(*keys)


def test_place_and_pay_replay_redacted_and_nothing_personal_is_kept(api, menu, engine_mode, caplog):
    caplog.set_level(logging.DEBUG)
    first = place(api, menu, "order-red-1")
    assert first.status_code == 201 and first["X-Idempotent-Result"] == "MISS"
    assert first.json()["contact"] == {"phone": PHONE, "address": ADDRESS}
    assert "Idempotency-Redacted" not in first
    # replays from this process, from Redis (or the record), from the record alone
    replays = [place(api, menu, "order-red-1")]
    nodes.local_cache().clear()
    replays.append(place(api, menu, "order-red-1"))
    nodes.local_cache().clear()
    forget_redis()
    replays.append(place(api, menu, "order-red-1"))
    for again in replays:
        assert again["X-Idempotent-Result"] == "HIT" and again.status_code == 201
        assert again.content == redacted(first)
        assert again["Idempotency-Redacted"] == PERSONAL
    # the order itself keeps them: the diner reads them back
    order_url = first["Location"]
    assert api.get(order_url).json()["contact"] == {"phone": PHONE, "address": ADDRESS}

    # paying answers the order too: its replay is redacted the same way
    pay_url = f"{order_url}pay/"
    paid = api.post(pay_url, HTTP_IDEMPOTENCY_KEY="pay-red-1")
    assert paid.status_code == 200 and paid.json()["contact"]["phone"] == PHONE
    nodes.local_cache().clear()
    paid_again = api.post(pay_url, HTTP_IDEMPOTENCY_KEY="pay-red-1")
    assert paid_again["X-Idempotent-Result"] == "HIT"
    assert paid_again.content == redacted(paid)
    assert paid_again["Idempotency-Redacted"] == PERSONAL

    drain_audits()
    logs = "\n".join(JsonFormatter().format(r) for r in caplog.records)
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    for secret in (PHONE, ADDRESS):
        assert_no_clear_copy(
            secret,
            redis=redis_dump(redis.Redis.from_url(settings.REDIS_URL)),
            broker=redis_dump(broker),
            records=table_dump("idempotency_idempotencyrecord"),
            audits=table_dump("idempotency_duplicateaudit"),
            logs=logs,
        )


def test_a_tenant_redacts_the_note_too_and_other_tenants_keep_theirs(tenant, other_tenant, menu):
    from tests.conftest import menu_for

    tenant.redacted_paths = ["note"]
    tenant.save(update_fields=["redacted_paths"])
    mine = api_for(tenant, diner="diner-1")
    first = place(mine, menu, "order-red-2")
    again = place(mine, menu, "order-red-2")
    assert first.json()["note"] == NOTE
    assert again.content == redacted(first, "note")
    assert again["Idempotency-Redacted"] == f"{PERSONAL}, note"
    assert_no_clear_copy(NOTE, records=table_dump("idempotency_idempotencyrecord"))

    theirs = api_for(other_tenant, diner="diner-1")
    other_menu = menu_for(other_tenant)
    place(theirs, other_menu, "order-red-2")
    assert place(theirs, other_menu, "order-red-2").json()["note"] == NOTE


@pytest.mark.parametrize("paths", [["contact phone"], "note", [".note"], [7]])
def test_a_malformed_tenant_path_is_refused(tenant, paths):
    tenant.redacted_paths = paths
    with pytest.raises(ValidationError) as refused:
        tenant.full_clean()
    assert "redacted_paths" in refused.value.message_dict


@pytest.mark.parametrize("topology", ["shards", "cluster"])
def test_no_node_of_a_sharded_setup_or_a_cluster_keeps_the_values(
    topology, settings, request, make_tenant
):
    nodes_of = request.getfixturevalue("shard_nodes" if topology == "shards" else "cluster_nodes")
    if topology == "shards":
        use_topology(settings, shards=[n.url for n in nodes_of])
    else:
        use_topology(settings, cluster=nodes_of[0].url)
    tenants = [make_tenant() for _ in range(3)]  # spread over several nodes
    for tenant in tenants:
        api = api_for(tenant, diner="diner-1")
        menu = menu_for(tenant)
        first = place(api, menu, "order-red-topology")
        nodes.local_cache().clear()
        again = place(api, menu, "order-red-topology")
        assert again["X-Idempotent-Result"] == "HIT" and again.content == redacted(first)
    dumps = {
        f"node {node.port}": redis_dump(redis.Redis(host="127.0.0.1", port=node.port))
        for node in nodes_of
    }
    # every tenant's stored reply is on some node, redacted, and no node holds a clear value
    for tenant in tenants:
        assert any(f"idem:{{t:{tenant.pk}}}:".encode() in dump for dump in dumps.values())
    stored = b"".join(dumps.values())
    assert stored.count(b'"contact":{"phone":null,"address":null}') == len(tenants)
    for secret in (PHONE, ADDRESS):
        assert_no_clear_copy(secret, **dumps)
