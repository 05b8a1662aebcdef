"""A diner's copy of their data (right of access): ``export_diner`` and ``manage.py
export_diner``, against PostgreSQL and Redis.

Diner zoe of restaurant A places, pays and replays orders, which a merchant key and platform
staff move; diner yan of A and diner zoe of restaurant B order too. Zoe's copy at A holds her
orders, payments, moves, sessions, stored replies and audits, and nothing of yan, of B, of a
session's secret, or of the staff member's or a restaurant member's username. After an erasure
her copy is empty.
"""

from __future__ import annotations

import io
import json
import os
import pwd
import re
import stat
from decimal import Decimal
from typing import Any

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from idempotency.erasure import principal_audits
from idempotency.models import DuplicateAudit, IdempotencyRecord
from idempotency.stores import nodes as stores
from idempotency.stores.audit_stream import drain_audits
from ordering.background.dead_letters import discard_dead_letter
from ordering.background.saga import SagaOutcome, run_cancel_saga
from ordering.background.steps import RetryLater
from ordering.models import (
    Compensation,
    DeadLetter,
    DinerDataExport,
    Dish,
    EventType,
    Order,
    OutboxEvent,
    Payment,
    ProviderConflict,
)
from ordering.payments.capture_refunds import capture_refund_id, refund_unwanted_capture
from ordering.payments.conflicts import resolve_conflict
from ordering.payments.simulated import complete_payment, signed_callback
from ordering.privacy import diner_export
from ordering.privacy.diner_export import export_diner
from ordering.privacy.diners import NotADinerId, diner_hash, erase_diner
from ordering.services.lifecycle import cancel_order, transition_order
from ordering.services.payments import pay_order
from ordering.services.placing import ItemRequest, place_order
from ordering.simulation import plan_fault
from tenants.models import ApiClient, DinerSession
from tests.conftest import api_for, menu_for, use_topology
from tests.payments.helpers import post_callback
from tests.privacy.test_erase_diner import place
from tests.support.broker import sending_to
from tests.support.ports import free_port

pytestmark = pytest.mark.django_db

STAFF_NAME = "bob-the-staffer"
SECTIONS = ("orders", "diner_sessions", "idempotency_records", "duplicate_audits")

ZOE = "api:pk_test/diner:zoe"  # the actor of zoe's requests through the app


def zoe_and_the_others(tenant: Any, other_tenant: Any) -> dict[str, Any]:
    """Zoe's paid order moved by a merchant key and by staff, her replayed order with contact
    details; yan's order at the same restaurant; zoe's order at another restaurant."""
    menu = menu_for(tenant)
    zoe = api_for(tenant, diner="zoe")
    first = place(zoe, menu, "k1", note="zoe's doorbell is broken")
    assert first.status_code == 201
    order_id = int(first.json()["id"])
    paying = zoe.post(f"/api/v1/orders/{order_id}/pay/")
    assert paying.status_code == 200, paying.content
    payment = Order.all_tenants.get(pk=order_id).payments.get()
    complete_payment(provider_name=payment.provider, provider_txn_id=payment.provider_txn_id)
    transition_order(
        tenant=tenant, order_id=order_id, target="ACCEPTED", actor=f"staff:{STAFF_NAME}"
    )
    merchant = api_for(tenant, kind=ApiClient.Kind.MERCHANT)
    moved = merchant.post(
        f"/api/v1/orders/{order_id}/transition/",
        {"to": "PREPARING"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="m1",
    )
    assert moved.status_code == 200, moved.content
    second = place(zoe, menu, "k2", note="leave at the door")
    Order.all_tenants.filter(pk=second.json()["id"]).update(
        contact_phone="+33 6 12 34 56 78", delivery_address="4 rue des Lilas"
    )
    stores.local_cache().clear()
    zoe.credentials(
        HTTP_AUTHORIZATION=zoe._credentials["HTTP_AUTHORIZATION"], HTTP_USER_AGENT="ZoeApp/2.1"
    )
    replay = place(zoe, menu, "k2", note="leave at the door")
    assert replay["X-Idempotent-Result"] == "HIT"
    yan = api_for(tenant, diner="yan")
    assert place(yan, menu, "k1", note="yan's secret recipe").status_code == 201
    stores.local_cache().clear()
    assert place(yan, menu, "k1", note="yan's secret recipe")["X-Idempotent-Result"] == "HIT"
    elsewhere = place(api_for(other_tenant, diner="zoe"), menu_for(other_tenant), "k1", "at B")
    assert elsewhere.status_code == 201
    return {"first": order_id, "second": int(second.json()["id"]), "menu": menu}


def test_the_copy_holds_exactly_the_diner_s_data_at_that_restaurant(tenant, other_tenant):
    ids = zoe_and_the_others(tenant, other_tenant)

    document = export_diner(tenant, "zoe")

    assert document["restaurant"] == {
        "name": tenant.name,
        "slug": tenant.slug,
        "time_zone": tenant.time_zone,
    }
    assert document["diner_id"] == "zoe" and document["produced_at"]
    orders = {int(o["id"]): o for o in document["orders"]}
    assert set(orders) == {ids["first"], ids["second"]}
    paid = orders[ids["first"]]
    assert paid["status"] == "PREPARING" and paid["note"] == "zoe's doorbell is broken"
    assert paid["lines"] == [
        {"dish_name": "Pizza", "quantity": 1, "unit_price": "9.50", "line_total": "9.50"}
    ]
    assert (paid["total"], paid["currency"], paid["payment_method"]) == ("9.50", "EUR", "card")
    assert [(p["status"], p["amount"]) for p in paid["payments"]] == [("succeeded", paid["total"])]
    history = [(m["from"], m["to"]) for m in paid["status_history"]]
    assert history == [
        ("", "CREATED"),
        ("CREATED", "PAYING"),
        ("PAYING", "PAID"),
        ("PAID", "ACCEPTED"),
        ("ACCEPTED", "PREPARING"),
    ]
    by = {m["to"]: m["by"] for m in paid["status_history"]}
    assert by["ACCEPTED"] == "Platform staff"
    assert by["CREATED"].startswith("Diner zoe")
    contact = orders[ids["second"]]
    assert (contact["contact_phone"], contact["delivery_address"]) == (
        "+33 6 12 34 56 78",
        "4 rue des Lilas",
    )
    # her sessions, without their secrets
    sessions = document["diner_sessions"]
    assert len(sessions) == DinerSession.objects.filter(tenant=tenant, diner_id="zoe").count()
    assert sessions and set(sessions[0]) == {
        "created_at",
        "expires_at",
        "ended_at",
        "guest",
        "opened_through",
    }
    # her own stored replies (place k1, pay, place k2), not the merchant's move that shows her
    records = document["idempotency_records"]
    assert sorted(r["endpoint"] for r in records) == [
        "POST api/v1/orders/",
        "POST api/v1/orders/",
        "POST api/v1/orders/<int:order_id>/pay/",
    ]
    assert all(r["status_code"] in (200, 201) for r in records)
    assert {r["response_body"]["id"] for r in records} == {str(ids["first"]), str(ids["second"])}
    # her replay's audit, with the request's address and user agent as stored
    [audit] = document["duplicate_audits"]
    assert (audit["endpoint"], audit["outcome"]) == ("POST api/v1/orders/", "HIT")
    assert audit["user_agent"] == "ZoeApp/2.1" and audit["client_ip"] == "127.0.0.1"

    text = json.dumps(document)
    for absent in ("yan", "at B", STAFF_NAME, "secret_hash"):
        assert absent not in text, absent
    for session in DinerSession.objects.filter(tenant=tenant, diner_id="zoe"):
        assert session.secret_hash not in text and str(session.pk) not in text


def test_the_streamed_copy_is_the_same_document_read_a_batch_at_a_time(
    tenant, other_tenant, monkeypatch
):
    """Read in batches of 1 row (every list spans several), each order appears once, and the
    text written piece by piece parses into the document built in memory."""
    ids = zoe_and_the_others(tenant, other_tenant)
    third = place(api_for(tenant, diner="zoe"), ids["menu"], "k3")
    monkeypatch.setattr(diner_export, "BATCH", 1)

    streamed = json.loads("".join(diner_export.diner_export_chunks(tenant, "zoe")))
    in_memory = export_diner(tenant, "zoe")

    assert [int(o["id"]) for o in streamed["orders"]] == sorted(
        [ids["first"], ids["second"], int(third.json()["id"])]
    )
    for section in SECTIONS:
        assert streamed[section] == in_memory[section], section
    assert len(streamed["idempotency_records"]) == 4


def test_a_diner_with_nothing_kept_gets_empty_lists(tenant):
    document = export_diner(tenant, "nobody-here")
    assert document["diner_id"] == "nobody-here"
    assert all(document[section] == [] for section in SECTIONS)


def test_after_an_erasure_the_copy_of_that_id_is_empty(tenant, other_tenant, settings):
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    zoe_and_the_others(tenant, other_tenant)
    assert export_diner(tenant, "zoe")["orders"]

    erase_diner(tenant=tenant, diner_id="zoe", requested_by="dpo")

    document = export_diner(tenant, "zoe")
    assert all(document[section] == [] for section in SECTIONS)
    # yan's and the other restaurant's zoe's copies are untouched
    assert len(export_diner(tenant, "yan")["orders"]) == 1
    assert len(export_diner(other_tenant, "zoe")["orders"]) == 1


@pytest.mark.parametrize(
    "diner_id", ["", "not valid!", "x" * 65, "erased-0123456789abcdef"], ids=str
)
def test_an_id_no_diner_can_have_is_refused(tenant, diner_id):
    with pytest.raises(NotADinerId):
        export_diner(tenant, diner_id)


def test_an_order_cancelled_by_an_offboarding_names_no_staff_member(tenant):
    """An offboarding that waits for the money cancels the restaurant's paid orders as
    ``offboarding:<who asked>`` (``staff:<username>`` from the admin), while the restaurant is
    suspended, when the command still writes copies. The copy read "offboarding staff:bob":
    the staff member's sign-in name, which a restaurant and its diners are never told."""
    zoe = api_for(tenant, diner="zoe")
    order_id = int(place(zoe, menu_for(tenant), "k1").json()["id"])
    transition_order(
        tenant=tenant,
        order_id=order_id,
        target="CANCELLED",
        actor=f"offboarding:staff:{STAFF_NAME}",
    )
    type(tenant).objects.filter(pk=tenant.pk).update(status=type(tenant).Status.SUSPENDED)
    out = io.StringIO()

    call_command("export_diner", tenant.slug, "zoe", stdout=out)

    assert STAFF_NAME not in out.getvalue()
    [order] = json.loads(out.getvalue())["orders"]
    assert order["status_history"][-1]["by"] == "Platform staff (closing the restaurant's account)"


def test_a_move_a_restaurant_member_made_names_no_one(tenant):
    """A member's move from the dashboard is ``merchant:<username>``: the copy read
    "chef-marta (dashboard)", the member's sign-in name, which is the member's personal data and
    not the diner's (the API never shows a diner who moved an order). It reads "Restaurant
    staff (dashboard)"; the diner's own moves still read as hers."""
    zoe = api_for(tenant, diner="zoe")
    order_id = int(place(zoe, menu_for(tenant), "k1").json()["id"])
    transition_order(
        tenant=tenant, order_id=order_id, target="CANCELLED", actor="merchant:chef-marta"
    )

    document = json.dumps(export_diner(tenant, "zoe"))

    assert "chef-marta" not in document
    [order] = json.loads(document)["orders"]
    by = {m["to"]: m["by"] for m in order["status_history"]}
    assert by == {
        "CREATED": by["CREATED"],
        "CANCELLED": "Restaurant staff (dashboard)",
    }
    assert by["CREATED"].startswith("Diner zoe")


# --- the command ------------------------------------------------------------------------------


def test_the_command_writes_the_copy_to_stdout_and_logs_it(tenant, other_tenant):
    ids = zoe_and_the_others(tenant, other_tenant)
    out = io.StringIO()

    call_command("export_diner", tenant.slug, "zoe", "--by", "dpo:carol", stdout=out)

    document = json.loads(out.getvalue())
    assert {int(o["id"]) for o in document["orders"]} == {ids["first"], ids["second"]}
    log = DinerDataExport.objects.get()
    assert (log.tenant, log.requested_by) == (tenant, "dpo:carol")
    assert log.diner_hash == diner_hash("zoe") and "zoe" not in str(log.__dict__)


def test_the_command_run_by_a_user_id_the_system_has_no_name_for_names_the_id(
    tenant, other_tenant, monkeypatch
):
    """A container running as an arbitrary user id, no passwd entry and no ``USER``: without
    ``--by`` the command asked ``getpass.getuser()`` who ran it, which raised, and it died with
    a traceback after creating the file (erase_diner and offboard_tenant named the id)."""
    ids = zoe_and_the_others(tenant, other_tenant)
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.delenv(name, raising=False)

    def no_entry(uid: int) -> None:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    out = io.StringIO()

    call_command("export_diner", tenant.slug, "zoe", stdout=out)

    document = json.loads(out.getvalue())
    assert {int(o["id"]) for o in document["orders"]} == {ids["first"], ids["second"]}
    assert DinerDataExport.objects.get().requested_by == f"cli:uid-{os.getuid()}"


def test_the_command_writes_a_new_file_only_its_owner_reads_and_never_overwrites(
    tenant, other_tenant, tmp_path
):
    zoe_and_the_others(tenant, other_tenant)
    path = tmp_path / "zoe.json"

    call_command("export_diner", tenant.slug, "zoe", "--out", str(path), stderr=io.StringIO())

    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(json.loads(path.read_text())["orders"]) == 2
    path.write_text("a copy not handed over yet")
    with pytest.raises(CommandError, match="exists"):
        call_command("export_diner", tenant.slug, "zoe", "--out", str(path))
    assert path.read_text() == "a copy not handed over yet"
    assert DinerDataExport.objects.count() == 1


class ReaderThatStops(io.StringIO):
    """A pipe whose reader stopped after its first piece (``export_diner ... | head``)."""

    def write(self, text: str) -> int:
        if self.tell():
            raise BrokenPipeError(32, "Broken pipe")
        return super().write(text)


def test_a_reader_that_stops_early_gets_the_reason_not_a_traceback(tenant, other_tenant):
    """Closing stdout early cut the copy with a BrokenPipeError traceback; the operator is told
    in one line that what was read is cut short, and how to write it whole."""
    zoe_and_the_others(tenant, other_tenant)

    with pytest.raises(CommandError, match="stdout was closed before the copy was written whole"):
        call_command("export_diner", tenant.slug, "zoe", stdout=ReaderThatStops())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope", "zoe"], "no tenant with slug 'nope'"),
        (["{slug}", "not valid!"], "is not a diner id"),
        (["{slug}", "erased-0123456789abcdef"], "pseudonym"),
    ],
    ids=["unknown tenant", "malformed id", "pseudonym"],
)
def test_the_command_refuses_with_the_reason_and_logs_nothing(tenant, args, message):
    with pytest.raises(CommandError, match=message):
        call_command("export_diner", *(a.format(slug=tenant.slug) for a in args))
    assert not DinerDataExport.objects.exists()


def test_audits_still_in_the_redis_stream_are_in_the_copy(tenant):
    menu = menu_for(tenant)
    zoe = api_for(tenant, diner="zoe")
    place(zoe, menu, "k1")
    drain_audits()
    stores.local_cache().clear()
    assert place(zoe, menu, "k1")["X-Idempotent-Result"] == "HIT"  # its audit not drained

    assert [a["outcome"] for a in export_diner(tenant, "zoe")["duplicate_audits"]] == ["HIT"]


def test_the_command_refuses_a_restaurant_being_offboarded(tenant):
    """Its archive holds its diners' data, and its tables take no write (the log's row)."""
    type(tenant).objects.filter(pk=tenant.pk).update(status=type(tenant).Status.OFFBOARDING)
    with pytest.raises(CommandError, match="being offboarded"):
        call_command("export_diner", tenant.slug, "zoe")
    assert not DinerDataExport.objects.exists()


def test_a_stored_reply_over_the_bound_is_named_by_its_size(tenant):
    place(api_for(tenant, diner="zoe"), menu_for(tenant), "k1")
    record = IdempotencyRecord.objects.get(
        tenant_key=str(tenant.pk), scope__startswith="diner:zoe|"
    )
    huge = b'{"note":"' + b"x" * diner_export.BODY_LIMIT + b'"}'
    IdempotencyRecord.objects.filter(pk=record.pk).update(response_body=huge)

    [kept] = export_diner(tenant, "zoe")["idempotency_records"]

    assert kept["response_body"] is None
    assert kept["response_body_omitted"] == f"{len(huge)} bytes"


def test_with_a_redis_node_not_answering_the_copy_is_made_from_the_database(
    tenant, settings, tmp_path
):
    """The database holds the records; only audits still queued on that node wait for it
    (they are copied in once it answers), so the restaurant still answers its diner."""
    place(api_for(tenant, diner="zoe"), menu_for(tenant), "k1")
    use_topology(settings, shards=[f"redis://127.0.0.1:{free_port()}/0"])  # nothing listens
    path = tmp_path / "zoe.json"

    call_command("export_diner", tenant.slug, "zoe", "--out", str(path), stderr=io.StringIO())

    assert len(json.loads(path.read_text())["orders"]) == 1
    assert DinerDataExport.objects.count() == 1


def test_a_diner_s_audits_are_read_through_an_index_not_every_audit_of_the_restaurant(
    tenant, other_tenant
):
    # red: the audits were found by the tenant's index and each one's principal compared, so
    # a diner's copy (its bound's count, then the copy) and an erasure read every audit the
    # restaurant keeps (30 days by default, up to 365) to find the few of one diner
    now = timezone.now()
    DuplicateAudit.objects.bulk_create(
        DuplicateAudit(
            tenant_key=str(t.pk),
            endpoint="POST api/v1/orders/",
            key=f"k{i}",
            outcome="HIT",
            principal=f"diner:d{i % 30}",
            at=now,
        )
        for t in (tenant, other_tenant)
        for i in range(300)
    )
    audits = principal_audits(tenant_key=str(tenant.pk), principal="diner:d1")
    assert sorted(audits.values_list("key", flat=True)) == sorted(
        f"k{i}" for i in range(1, 300, 30)
    )

    with CaptureQueriesContext(connection) as sent:
        diner_export.rows_kept(tenant, "d1")
    (count,) = [q["sql"] for q in sent.captured_queries if "idempotency_duplicateaudit" in q["sql"]]
    # found by the tenant and the principal alone, which an index holds in that order: the
    # database reads the diner's audits and no other (judged by the schema: over a few rows
    # the planner may take any index that leads with the tenant, as the audits' others do)
    where = count.split(" WHERE ", 1)[1]
    assert set(re.findall(r'"idempotency_duplicateaudit"\."(\w+)"', where)) == {
        "tenant_key",
        "principal",
    }, count
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, "idempotency_duplicateaudit")
    assert any(
        c["index"] and c["columns"][:2] == ["tenant_key", "principal"] for c in constraints.values()
    ), constraints


def zoe_pays(
    tenant: Any, dish: Dish, *, quantity: int = 1, actor: str = ZOE
) -> tuple[Order, Payment]:
    """An order of ``quantity`` of ``dish`` that zoe placed, and the payment started for it."""
    order = place_order(
        tenant=tenant,
        items=[ItemRequest(dish_id=dish.pk, quantity=quantity)],
        payment_method="card",
        diner_id="zoe",
        actor=ZOE,
    )
    return pay_order(tenant=tenant, order_id=order.pk, actor=actor)


def test_a_refund_is_in_the_copy_with_its_amount_and_time_not_only_as_a_status(
    tenant, celery_eager, django_capture_on_commit_callbacks
):
    """A diner's money given back is something the platform keeps (the refund's amount, when
    it was asked for and when it was made), and the diner may ask to see it: the copy showed
    it only as a payment's status ``refunded`` and a move to CANCELLED (red: no ``refunds``).
    A cancel's refund and the refund of money taken after the cancel are both listed; a cancel
    that only voided a payment never taken lists none, and no provider reference is shown."""
    dish = menu_for(tenant)["pizza"]
    # a paid order cancelled: its saga refunds the payment
    paid, payment = zoe_pays(tenant, dish, quantity=2)
    complete_payment(provider_name=payment.provider, provider_txn_id=payment.provider_txn_id)
    cancel_order(tenant=tenant, order_id=paid.pk, actor="api:pk_test/diner:zoe")
    event = OutboxEvent.objects.for_tenant(tenant).get(
        order_id=paid.pk, event_type=EventType.CANCEL_REQUESTED
    )
    assert run_cancel_saga(event=event) == SagaOutcome.COMPLETED
    # an order cancelled while paying, then captured by the provider: refunded on its own
    late, late_payment = zoe_pays(tenant, dish, quantity=2)
    cancel_order(tenant=tenant, order_id=late.pk, actor="api:pk_test/diner:zoe")
    body, headers = signed_callback(payment=late_payment, event_id="evt-late")
    with django_capture_on_commit_callbacks(execute=True):
        answer = post_callback(APIClient(), body, headers)
    assert answer.status_code == 200, answer.content
    # an order cancelled while paying, never captured: its payment voided, no money moved
    voided, _ = zoe_pays(tenant, dish, quantity=2)
    cancel_order(tenant=tenant, order_id=voided.pk, actor="api:pk_test/diner:zoe")

    orders = {int(o["id"]): o for o in export_diner(tenant, "zoe")["orders"]}

    steps = Compensation.objects.for_tenant(tenant)
    made = {c.order_id: c for c in steps.filter(status="done").exclude(result__refund_id=None)}
    assert set(made) == {paid.pk, late.pk}
    for order, kind in ((paid, "cancel"), (late, "unwanted_capture")):
        [refund] = orders[order.pk]["refunds"]
        assert refund == {
            "of": kind,
            "amount": "19.00",
            "currency": "EUR",
            "status": "refunded",
            "asked_at": refund["asked_at"],
            "refunded_at": timezone.localtime(made[order.pk].done_at, tenant.zone).isoformat(),
        }
        assert refund["asked_at"] <= refund["refunded_at"]
    assert orders[voided.pk]["refunds"] == []
    text = json.dumps(orders)
    assert "sim_re_" not in text and payment.provider_txn_id not in text


@pytest.mark.django_db(transaction=True)
def test_a_refund_staff_settled_by_hand_is_listed_as_they_settled_it(tenant, settings):
    """When the platform's refund of money taken after a cancel fails for good, staff settle
    its conflict by hand: refunded at the provider (a refund the diner got: listed, with the
    amount reported and when staff made it), or not refunded (ignored, accepted: no refund to
    list). The copy listed both as refunded (red), from the step staff's settling closes."""
    settings.SAGA_MAX_RETRIES = 1
    dish = menu_for(tenant)["pizza"]
    settled = {}
    for outcome in ("refunded", "ignored"):
        order, payment = zoe_pays(tenant, dish, actor="test")
        cancel_order(tenant=tenant, order_id=order.pk, actor="api:pk_test/diner:zoe")
        plan_fault(order=order, step=Compensation.Step.REFUND_PAYMENT, fail_times=10)
        body, headers = signed_callback(payment=payment, event_id=f"evt-{outcome}")
        with sending_to("memory://"):  # the refund's message is sent, and not run
            answer = post_callback(APIClient(), body, headers)
        assert answer.json()["result"] == "conflict"
        with pytest.raises(RetryLater):
            refund_unwanted_capture(compensation_id=capture_refund_id(payment.pk))
        refund_unwanted_capture(compensation_id=capture_refund_id(payment.pk))
        conflict = ProviderConflict.objects.for_tenant(tenant).get(order=order)
        assert not conflict.resolved
        resolve_conflict(
            conflict_id=conflict.pk, outcome=outcome, note="by hand", actor=f"staff:{STAFF_NAME}"
        )
        conflict.refresh_from_db()
        settled[outcome] = (order.pk, conflict)

    orders = {int(o["id"]): o for o in export_diner(tenant, "zoe")["orders"]}

    order_id, conflict = settled["refunded"]
    assert orders[order_id]["refunds"] == [
        {
            "of": "unwanted_capture",
            "amount": "9.50",
            "currency": "EUR",
            "status": "refunded_by_staff",
            "asked_at": timezone.localtime(conflict.created_at, tenant.zone).isoformat(),
            "refunded_at": timezone.localtime(conflict.resolved_at, tenant.zone).isoformat(),
        }
    ]
    assert orders[settled["ignored"][0]]["refunds"] == []
    assert STAFF_NAME not in json.dumps(orders) and "by hand" not in json.dumps(orders)


def test_every_field_of_the_copy_is_named_as_it_is_written_in_the_docs(tenant, other_tenant):
    """The copy's format is documented field by field, so a diner (or the restaurant's
    software reading it) can rely on it: every member of the document and of each item, nested
    lists included, is named in docs/data-protection.md's table as the file writes it (red:
    the table described them in words, "when", "who", "kept until", and named none of
    ``id``, ``business_day``, ``at``, ``by``, ``kept_until``, ``opened_through``)."""
    ids = zoe_and_the_others(tenant, other_tenant)
    # and an order another amount was reported for, which staff refunded: a refund and a
    # provider report, so their members are written too
    order = place_order(
        tenant=tenant,
        items=[ItemRequest(dish_id=ids["menu"]["pizza"].pk, quantity=1)],
        payment_method="card",
        diner_id="zoe",
        actor="api:pk_test/diner:zoe",
    )
    order, payment = pay_order(tenant=tenant, order_id=order.pk, actor="test")
    body, headers = signed_callback(payment=payment, event_id="evt-odd", amount=Decimal("1.00"))
    assert post_callback(APIClient(), body, headers).json()["result"] == "conflict"
    resolve_conflict(
        conflict_id=ProviderConflict.objects.for_tenant(tenant).get(order=order).pk,
        outcome="refunded",
        note="n",
        actor="staff:a",
    )
    document = export_diner(tenant, "zoe")
    for nested in ("lines", "payments", "refunds", "provider_reports", "status_history"):
        assert any(o[nested] for o in document["orders"]), nested
    docs = (settings.BASE_DIR / "docs" / "data-protection.md").read_text()
    part = docs.split("## A diner's copy of their data", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`([a-z_]+)`", part))

    def members(value: Any) -> set[str]:
        """Member names, nested ones too, but those of a stored reply (the API's own)."""
        if isinstance(value, dict):
            inner = (v for k, v in value.items() if k != "response_body")
            return set(value) | {m for v in inner for m in members(v)}
        if isinstance(value, list):
            return {m for v in value for m in members(v)}
        return set()

    fields = set(document) | members(document["restaurant"])
    for section in SECTIONS:
        assert document[section], section
        fields |= {m for item in document[section] for m in members(item)}
    assert sorted(fields - named) == []


def test_a_cancel_s_refund_staff_settled_outside_the_platform_no_longer_waits_for_them(
    tenant, settings
):
    """A cancel's refund that failed for good waits for staff (its dead letter open); staff
    who settle it some other way discard the letter with a note, and the step stays failed.
    The copy kept saying ``waiting_for_staff`` after that (red): it now says
    ``settled_by_staff``, still without the note or who wrote it."""
    settings.SAGA_MAX_RETRIES = 0
    order, payment = zoe_pays(tenant, menu_for(tenant)["pizza"], actor="test")
    complete_payment(provider_name=payment.provider, provider_txn_id=payment.provider_txn_id)
    cancel_order(tenant=tenant, order_id=order.pk, actor="api:pk_test/diner:zoe")
    plan_fault(order=order, step=Compensation.Step.REFUND_PAYMENT, fail_times=10)
    event = OutboxEvent.objects.for_tenant(tenant).get(
        order_id=order.pk, event_type=EventType.CANCEL_REQUESTED
    )
    assert run_cancel_saga(event=event) == SagaOutcome.DEAD_LETTERED

    def refunds() -> list[dict[str, Any]]:
        [copy] = export_diner(tenant, "zoe")["orders"]
        return copy["refunds"]

    [waiting] = refunds()
    assert (waiting["of"], waiting["amount"], waiting["status"]) == (
        "cancel",
        "9.50",
        "waiting_for_staff",
    )
    letter = DeadLetter.objects.get(order=order, state=DeadLetter.State.OPEN)

    discard_dead_letter(
        dead_letter_id=letter.pk, actor=f"staff:{STAFF_NAME}", note="refunded by bank transfer"
    )

    [settled] = refunds()
    assert settled == {**waiting, "status": "settled_by_staff"}
    assert STAFF_NAME not in json.dumps(settled) and "bank transfer" not in json.dumps(settled)


def test_what_the_provider_reported_against_the_order_is_in_the_copy(tenant, celery_eager):
    """A provider that reports another amount taken for the diner's payment leaves the
    platform a record of the diner's money (the amount, the currency, what the provider
    said, when, and how staff settled it): the copy showed only the payment as expected
    (red: no ``provider_reports``). Staff's names and notes, the provider's event and
    transaction ids stay out."""
    order, payment = zoe_pays(tenant, menu_for(tenant)["pizza"], actor="test")
    body, headers = signed_callback(payment=payment, event_id="evt-odd", amount=Decimal("19.00"))
    assert post_callback(APIClient(), body, headers).json()["result"] == "conflict"
    conflict = ProviderConflict.objects.for_tenant(tenant).get(order=order)

    [copy] = export_diner(tenant, "zoe")["orders"]

    at = timezone.localtime(conflict.created_at, tenant.zone).isoformat()
    assert copy["provider_reports"] == [
        {
            "about": "amount_mismatch",
            "amount": "19.00",
            "currency": "EUR",
            "status": "succeeded",
            "at": at,
            "outcome": None,
            "settled_at": None,
        }
    ]
    resolve_conflict(
        conflict_id=conflict.pk, outcome="refunded", note="sent back", actor=f"staff:{STAFF_NAME}"
    )
    [copy] = export_diner(tenant, "zoe")["orders"]
    [report] = copy["provider_reports"]
    assert (report["outcome"], report["settled_at"] is not None) == ("refunded", True)
    text = json.dumps(copy)
    for absent in (STAFF_NAME, "sent back", "evt-odd", payment.provider_txn_id):
        assert absent not in text, absent
