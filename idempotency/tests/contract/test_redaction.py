"""Redaction: a value at a redacted path goes out in the first answer and is kept nowhere —
not in Redis, not in the record table, not in the local cache, not in audits, not in logs —
and every replay is the redacted body, byte for byte, with ``Idempotency-Redacted``."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from django.http import HttpResponse
from django.test import Client

from idempotency import idempotent
from idempotency.core.replies import OMITTED_HEADER, to_stored
from idempotency.stores import nodes
from idempotency.stores.audit_stream import drain_audits
from idempotency.tests.conftest import caller, suite_redis
from idempotency.tests.leak_scan import assert_no_clear_copy, redis_dump, table_dump
from idempotency.tests.testapp.models import Note
from idempotency.tests.testapp.scope import tenant_redaction

pytestmark = pytest.mark.django_db

PHONE = "+39 333 7654321"
ADDRESS = "Via dei Mille 12, Roma"
CARD_HINT = "visa-4242"
SECRETS = (PHONE, ADDRESS, CARD_HINT)
REDACTED = "diner.phone, delivery.address, payment.card_hint"


def order(**overrides: Any) -> dict[str, Any]:
    return {
        "text": "two pizzas",
        "diner": {"name": "Ada", "phone": PHONE},
        "delivery": {"address": ADDRESS, "floor": 3},
        "payment": {"card_hint": CARD_HINT, "method": "card"},
        **overrides,
    }


def post(client: Client, tenant: str, key: str, body: dict[str, Any]) -> Any:
    return client.post(
        "/deliveries/",
        json.dumps(body),
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY=key,
        **caller(tenant),
    )


def compact(document: Any) -> bytes:
    """JSON as DRF renders it: no spaces, UTF-8."""
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()


def test_first_answer_whole_replays_redacted_byte_for_byte_and_no_clear_copy_anywhere(
    engine_mode, client, tenant, caplog
):
    caplog.set_level(logging.DEBUG)
    # when an order with a phone, an address and a card hint is placed
    first = post(client, tenant, "k-red-1", order())
    # then the first answer carries them, byte for byte as the view rendered them
    assert first.status_code == 201 and first["X-Idempotent-Result"] == "MISS"
    sent = json.loads(first.content)
    assert first.content == compact(sent)
    assert (sent["diner"]["phone"], sent["delivery"]["address"]) == (PHONE, ADDRESS)
    assert sent["payment"]["card_hint"] == CARD_HINT
    assert "Idempotency-Redacted" not in first
    redacted = compact(
        {
            **sent,
            "diner": {"name": "Ada", "phone": None},
            "delivery": {"address": None, "floor": 3},
            "payment": {"card_hint": None, "method": "card"},
        }
    )

    # and every replay — from this process's cache, from Redis (or the record in database-only
    # mode) for another process, from the record once Redis forgot — is the redacted body
    replays = [post(Client(), tenant, "k-red-1", order())]
    nodes.local_cache().clear()
    replays.append(post(Client(), tenant, "k-red-1", order()))
    nodes.local_cache().clear()
    keys = list(suite_redis().scan_iter(match="idem:*"))
    if keys:
        suite_redis().delete(*keys)
    replays.append(post(Client(), tenant, "k-red-1", order()))
    for again in replays:
        assert again.status_code == 201 and again["X-Idempotent-Result"] == "HIT"
        assert again.content == redacted
        assert again["Idempotency-Redacted"] == REDACTED
        assert again["Location"] == first["Location"]
    assert Note.objects.count() == 1

    # and no clear copy is kept: Redis, the record and audit tables, the local cache, the logs
    drain_audits()
    post(Client(), tenant, "k-red-1", order())  # cached again locally, from the record
    entries = [entry.response.body for entry, *_ in nodes.local_cache()._entries.values()]
    # database-only, a process keeps no results of its own (nothing could invalidate them)
    assert entries == ([redacted] if engine_mode == "redis" else [])
    for secret in SECRETS:
        assert_no_clear_copy(
            secret,
            redis=redis_dump(suite_redis()),
            records=table_dump("idempotency_idempotencyrecord"),
            audits=table_dump("idempotency_duplicateaudit"),
            local_cache=b"".join(entries),
            logs=caplog.text,
        )


def test_a_tenant_adds_paths_of_its_own(client, tenant):
    # given a tenant that also redacts the order's text
    tenant_redaction[tenant] = ("text", "diner.phone")
    first = post(client, tenant, "k-red-2", order())
    again = post(Client(), tenant, "k-red-2", order())
    # then the endpoint's paths come first, then the tenant's (each once)
    assert again["Idempotency-Redacted"] == f"{REDACTED}, text"
    assert json.loads(again.content)["text"] is None
    assert json.loads(first.content)["text"] == "two pizzas"
    # and another tenant's replies keep their text
    other = f"{tenant}-other"
    post(client, other, "k-red-2", order())
    assert json.loads(post(Client(), other, "k-red-2", order()).content)["text"] == "two pizzas"


def test_a_reply_with_nothing_to_hide_replays_exactly_as_sent(engine_mode, client, tenant):
    body = order(diner={"name": "Ada", "phone": ""}, delivery=None, payment={"method": "cash"})
    first = post(client, tenant, "k-red-3", body)
    nodes.local_cache().clear()
    again = post(Client(), tenant, "k-red-3", body)
    assert again["X-Idempotent-Result"] == "HIT" and again.content == first.content
    assert "Idempotency-Redacted" not in again


def test_paths_walk_lists_and_a_body_that_is_not_json_is_not_kept():
    listed = HttpResponse(
        compact({"lines": [{"note": "ring twice"}, {"note": ""}, {"dish": 1}]}),
        content_type="application/json",
    )
    stored = to_stored(listed, redact=("lines.note",))
    assert stored.body == compact({"lines": [{"note": None}, {"note": ""}, {"dish": 1}]})
    assert ("Idempotency-Redacted", "lines.note") in stored.headers

    page = HttpResponse(f"<p>Call {PHONE}</p>", content_type="text/html", status=200)
    kept = to_stored(page, redact=("diner.phone",))
    assert kept.body == b"" and (OMITTED_HEADER, str(len(page.content))) in kept.headers
    refused = HttpResponse(f"<p>{PHONE} is not valid</p>", content_type="text/html", status=400)
    assert to_stored(refused, redact=("diner.phone",)) is None  # not kept: released instead


@pytest.mark.parametrize("path", ["diner phone", "diner..phone", ".phone", "", "a.b.", 7])
def test_a_malformed_path_is_refused_when_the_view_is_declared(path):
    with pytest.raises(ValueError, match="redaction path"):
        idempotent(redact=(path,))
