"""``POST /api/v1/payments/callback/``: authentic events applied once, everything else absorbed
(2xx, nothing changed, audited) or refused before anything is written."""

from __future__ import annotations

import json
import time
from decimal import Decimal

import pytest
from django.conf import settings
from django.db import connection
from django.db.models import Sum
from django.test.utils import CaptureQueriesContext
from django.urls import resolve
from openapi_schema_validator import OAS30ReadValidator
from prometheus_client import REGISTRY
from rest_framework.test import APIClient

from idempotency.core.hashing import keyed_digest
from idempotency.models import DuplicateAudit, OutcomeCount
from idempotency.stores.audit_pending import pending
from idempotency.stores.audit_stream import drain_audits
from ordering.models import (
    EventType,
    Order,
    OrderStatus,
    OrderTransition,
    OutboxEvent,
    Payment,
    PaymentCallback,
    ProviderConflict,
)
from ordering.payments.callbacks import AUDIT_ENDPOINT as CALLBACK_ENDPOINT
from ordering.payments.departed import CONFLICT_KIND as LATE_CAPTURE
from ordering.payments.registry import webhook_secrets
from ordering.payments.signatures import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign
from ordering.services.lifecycle import cancel_order
from tenants.models import Tenant
from tests.payments.helpers import CALLBACK_URL, paying_order, post_callback, signed
from tests.support.database_gone import session_ended_before

pytestmark = pytest.mark.django_db
S = OrderStatus
INBOX_INSERT = f'INSERT INTO "{PaymentCallback._meta.db_table}"'
INBOX_UPDATE = f'UPDATE "{PaymentCallback._meta.db_table}"'
ORDER_TABLE = Order._meta.db_table
PAYMENT_TABLE = Payment._meta.db_table


@pytest.fixture
def deliver(django_capture_on_commit_callbacks):
    """Deliver a callback and run what its transaction scheduled after commit (the audit)."""

    def send(body: bytes, headers: dict[str, str]):
        with django_capture_on_commit_callbacks(execute=True):
            return post_callback(APIClient(), body, headers)

    return send


@pytest.fixture
def paying(tenant, menu):
    return paying_order(tenant, menu["pizza"], quantity=2)


def audits(outcome: str | None = None) -> list[DuplicateAudit]:
    drain_audits()
    rows = DuplicateAudit.objects.filter(endpoint=CALLBACK_ENDPOINT)
    return list(rows.filter(outcome=outcome) if outcome else rows)


def state(order: Order) -> tuple[str, str]:
    order.refresh_from_db()
    return order.status, order.payments.get().status


def inbox_outcomes(tenant: Tenant) -> dict[str, str]:
    """Each received event's outcome, as the inbox keeps it."""
    rows = PaymentCallback.objects.for_tenant(tenant).order_by("id")
    return dict(rows.values_list("event_id", "outcome"))


def test_pay_order_goes_through_the_provider_adapter(paying):
    _, payment = paying
    assert (payment.provider, payment.provider_txn_id[:4]) == ("simulated", "sim_")
    assert (payment.amount, payment.currency, payment.status) == (
        Decimal("19.00"),
        "EUR",
        "pending",
    )


def test_succeeded_callback_marks_paid_once_with_an_outbox_event(deliver, paying, tenant):
    order, payment = paying
    response = deliver(*signed(payment, event_id="evt_a"))
    assert response.status_code == 200
    assert response.json() == {
        "result": "applied",
        "order_id": str(order.pk),
        "order_status": "PAID",
        "conflict": None,
    }
    assert state(order) == (S.PAID, Payment.Status.SUCCEEDED)
    move = OrderTransition.objects.for_tenant(tenant).filter(order=order).latest("id")
    assert (move.from_status, move.to_status, move.actor) == (
        S.PAYING,
        S.PAID,
        "provider:simulated",
    )
    [event] = OutboxEvent.objects.for_tenant(tenant).filter(order=order)
    assert (event.event_type, event.version) == (EventType.ORDER_PAID, 3)  # created, paying, paid
    assert PaymentCallback.objects.for_tenant(tenant).get().outcome == "applied"
    assert audits() == []


def test_the_same_event_again_is_a_duplicate_that_changes_nothing(deliver, paying, tenant):
    order, payment = paying
    body, headers = signed(payment, event_id="evt_a")
    first = deliver(body, headers)
    again = deliver(body, headers)
    assert (first.status_code, again.status_code) == (200, 200)
    assert again.json()["result"] == "duplicate"
    assert PaymentCallback.objects.for_tenant(tenant).count() == 1
    assert OutboxEvent.objects.for_tenant(tenant).count() == 1
    assert OrderTransition.objects.for_tenant(tenant).filter(to_status=S.PAID).count() == 1
    [audit] = audits("HIT")
    assert (audit.tenant_key, audit.key, audit.resource_ref) == (
        str(tenant.pk),
        keyed_digest("simulated:evt_a"),
        f"/api/v1/orders/{order.pk}/",
    )
    assert audit.principal == "provider:simulated" and audit.source == "database"


def test_another_event_for_an_already_paid_transaction_is_a_duplicate(deliver, paying, tenant):
    _, payment = paying
    deliver(*signed(payment, event_id="evt_a"))
    late = deliver(*signed(payment, event_id="evt_b"))
    assert late.status_code == 200 and late.json()["result"] == "duplicate"
    assert inbox_outcomes(tenant) == {"evt_a": "applied", "evt_b": "duplicate"}
    assert OutboxEvent.objects.for_tenant(tenant).count() == 1
    assert [a.request_meta["reason"] for a in audits("HIT")] == ["already_succeeded"]


def test_amount_mismatch_is_a_conflict_for_staff_and_not_paid(deliver, paying, tenant):
    order, payment = paying
    response = deliver(*signed(payment, amount=Decimal("1.00")))
    assert response.status_code == 200
    assert response.json()["result"] == "conflict"
    assert response.json()["conflict"] == "amount_mismatch"
    assert state(order) == (S.PAYING, Payment.Status.PENDING)
    [conflict] = ProviderConflict.objects.for_tenant(tenant)
    assert (conflict.kind, conflict.expected_amount, conflict.reported_amount) == (
        "amount_mismatch",
        Decimal("19.00"),
        Decimal("1.00"),
    )
    assert not conflict.resolved
    assert list(inbox_outcomes(tenant).values()) == ["conflict"]
    assert OutboxEvent.objects.for_tenant(tenant).count() == 0
    assert [a.request_meta["reason"] for a in audits("CONFLICT")] == ["amount_mismatch"]


def test_currency_mismatch_is_a_conflict_too(deliver, paying, tenant):
    order, payment = paying
    response = deliver(*signed(payment, currency="USD"))
    assert response.json()["conflict"] == "amount_mismatch"
    assert state(order) == (S.PAYING, Payment.Status.PENDING)


def test_success_after_the_order_was_cancelled_is_a_conflict_the_platform_refunds(
    deliver, paying, tenant
):
    order, payment = paying
    cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
    response = deliver(*signed(payment))
    assert response.status_code == 200 and response.json()["conflict"] == "paid_after_cancel"
    # the order stays cancelled; the money goes back (tests/payments/test_capture_refunds.py)
    assert state(order) == (S.CANCELLED, Payment.Status.REFUNDED)
    conflict = ProviderConflict.objects.for_tenant(tenant).get()
    assert (conflict.kind, conflict.resolved_by) == ("paid_after_cancel", "platform:capture-refund")
    assert len(audits("CONFLICT")) == 1


@pytest.mark.django_db(transaction=True)
def test_a_conflict_whose_audit_the_ended_session_lost_is_not_answered_as_recorded(tenant, menu):
    """Money taken after the cancel: the database ends the session as the conflict's audit is
    written in the callback's transaction. It was answered 200 "conflict", the audit sent to
    the stream instead, while the transaction (its inbox row, the conflict and the refund of
    the money) was rolled back unseen: the provider, answered 2xx, stopped sending, and the
    money was never given back. Now the outage is the answer (503, the provider sends again),
    and the event sent again is recorded and refunded once."""
    order, payment = paying_order(tenant, menu["pizza"])
    cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
    callback = signed(payment, event_id="evt_after_cancel")

    with session_ended_before('"idempotency_duplicateaudit"'):
        lost = post_callback(APIClient(raise_request_exception=False), *callback)

    assert lost.status_code == 503, lost.content
    assert lost.json()["code"] == "DATABASE_UNAVAILABLE"
    assert not PaymentCallback.objects.for_tenant(tenant).exists()
    assert not ProviderConflict.objects.for_tenant(tenant).exists()
    again = post_callback(APIClient(), *callback)
    assert (again.status_code, again.json()["conflict"]) == (200, "paid_after_cancel")
    assert inbox_outcomes(tenant) == {"evt_after_cancel": "conflict"}
    assert ProviderConflict.objects.for_tenant(tenant).get().kind == "paid_after_cancel"


def test_failed_then_succeeded_out_of_order_ends_paid(deliver, paying):
    order, payment = paying
    failed = deliver(*signed(payment, status="failed", event_id="evt_f"))
    assert failed.json()["result"] == "applied"
    assert state(order) == (S.PAYING, Payment.Status.FAILED)
    ok = deliver(*signed(payment, event_id="evt_s"))
    assert ok.json()["result"] == "applied"
    assert state(order) == (S.PAID, Payment.Status.SUCCEEDED)


def test_a_late_failure_after_success_is_ignored_and_audited(deliver, paying, tenant):
    order, payment = paying
    deliver(*signed(payment, event_id="evt_s"))
    late = deliver(*signed(payment, status="failed", event_id="evt_f"))
    assert late.status_code == 200 and late.json()["result"] == "ignored"
    assert state(order) == (S.PAID, Payment.Status.SUCCEEDED)
    assert inbox_outcomes(tenant) == {"evt_s": "applied", "evt_f": "ignored"}
    assert [a.request_meta["reason"] for a in audits("CONFLICT")] == ["failed_after_succeeded"]


def _forged(headers: dict[str, str]) -> dict[str, str]:
    return {**headers, SIGNATURE_HEADER: "v1=" + "0" * 64}


def _not_hex(headers: dict[str, str]) -> dict[str, str]:
    """The right signature in upper case with its last digit made no hex digit."""
    return {
        **headers,
        SIGNATURE_HEADER: headers[SIGNATURE_HEADER].upper()[:-1].replace("V1", "v1") + "Z",
    }


def test_a_signature_written_in_upper_case_hex_is_accepted(deliver, paying, tenant):
    """A provider's SDK may write the MAC's hex in upper case (Java's printHexBinary, .NET's
    Convert.ToHexString): the same MAC, refused 401 PAYMENT_SIGNATURE_INVALID while only lower
    case matched, so every callback of such a provider was lost. Hex is read in either case."""
    order, payment = paying
    body, headers = signed(payment, event_id="evt_upper")
    mac = headers[SIGNATURE_HEADER].removeprefix("v1=")
    assert mac == mac.lower() and mac != mac.upper()  # there are letters to change
    upper = {**headers, SIGNATURE_HEADER: f"v1={mac.upper()}"}
    response = deliver(body, upper)
    assert (response.status_code, response.json().get("code")) == (200, None)
    assert response.json()["result"] == "applied"
    assert state(order) == (S.PAID, Payment.Status.SUCCEEDED)
    # and mixed case, among rotated signatures, is the same MAC again (a duplicate)
    mixed = "".join(c.upper() if i % 2 else c for i, c in enumerate(mac))
    again = {**headers, SIGNATURE_HEADER: f"v1={'0' * 64}, v1={mixed}"}
    assert deliver(body, again).json()["result"] == "duplicate"
    assert inbox_outcomes(tenant) == {"evt_upper": "applied"}


def _stale(payment: Payment) -> tuple[bytes, dict[str, str]]:
    return signed(payment, timestamp=int(time.time()) - 301)


@pytest.mark.parametrize(
    ("tamper", "status", "code"),
    [
        pytest.param(
            lambda p: (signed(p)[0], _forged(signed(p)[1])),
            401,
            "PAYMENT_SIGNATURE_INVALID",
            id="forged",
        ),
        pytest.param(lambda p: (signed(p)[0], {}), 401, "PAYMENT_SIGNATURE_INVALID", id="unsigned"),
        pytest.param(
            lambda p: (signed(p)[0], _not_hex(signed(p)[1])),
            401,
            "PAYMENT_SIGNATURE_INVALID",
            id="not-hex",
        ),
        pytest.param(_stale, 400, "PAYMENT_TIMESTAMP_STALE", id="stale-replay"),
        pytest.param(
            lambda p: (signed(p)[0], {**signed(p)[1], TIMESTAMP_HEADER: "soon"}),
            400,
            "PAYMENT_TIMESTAMP_INVALID",
            id="bad-timestamp",
        ),
        pytest.param(
            lambda p: (signed(p)[0], {**signed(p)[1], "X-Provider": "paypal"}),
            400,
            "PAYMENT_PROVIDER_UNKNOWN",
            id="unknown-provider",
        ),
    ],
)
def test_refused_callbacks_write_nothing(deliver, paying, tenant, tamper, status, code):
    order, payment = paying
    body, headers = tamper(payment)
    response = deliver(body, headers)
    assert response.status_code == status
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["code"] == code
    # a 401 challenges for the provider's signature, not for the API's credentials
    challenge = 'X-Provider-Signature realm="payment-callbacks"' if status == 401 else None
    assert response.headers.get("WWW-Authenticate") == challenge
    assert state(order) == (S.PAYING, Payment.Status.PENDING)
    assert PaymentCallback.objects.for_tenant(tenant).count() == 0
    assert OutboxEvent.objects.for_tenant(tenant).count() == 0
    assert audits() == []


@pytest.mark.parametrize(
    ("content_type", "padding", "status", "code"),
    [
        pytest.param("text/plain", 0, 415, "UNSUPPORTED_MEDIA_TYPE", id="not-json"),
        pytest.param("application/json", 1024 * 1024, 413, "REQUEST_TOO_LARGE", id="too-large"),
    ],
)
def test_a_body_of_another_type_or_too_large_is_refused_and_writes_nothing(
    client, paying, tenant, content_type, padding, status, code
):
    """The two refusals the webhook's table in docs/payments-and-saga.md left out, though the
    callback answers them as every endpoint does (README's error table)."""
    order, payment = paying
    body, headers = signed(payment)
    body = body + b" " * padding  # still the signed JSON, then blanks past MAX_REQUEST_BYTES
    response = client.post(CALLBACK_URL, data=body, content_type=content_type, headers=headers)
    assert (response.status_code, response.json()["code"]) == (status, code)
    assert state(order) == (S.PAYING, Payment.Status.PENDING)
    assert PaymentCallback.objects.for_tenant(tenant).count() == 0
    assert audits() == []


def test_a_signed_but_malformed_body_is_400(deliver, paying, tenant):
    body = b'{"event_id": "evt_x", "status": "maybe"}'
    ts = int(time.time())
    secret = webhook_secrets("simulated")[0]
    headers = {
        TIMESTAMP_HEADER: str(ts),
        SIGNATURE_HEADER: sign(secret=secret, timestamp=ts, body=body),
    }
    response = deliver(body, headers)
    assert (response.status_code, response.json()["code"]) == (400, "PAYMENT_CALLBACK_INVALID")
    assert PaymentCallback.objects.for_tenant(tenant).count() == 0


def _signed_body(data: dict[str, object]) -> tuple[bytes, dict[str, str]]:
    """``data`` sent as the provider would, validly signed."""
    body = json.dumps(data).encode()
    ts = int(time.time())
    secret = webhook_secrets("simulated")[0]
    return body, {
        TIMESTAMP_HEADER: str(ts),
        SIGNATURE_HEADER: sign(secret=secret, timestamp=ts, body=body),
    }


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("order_id", "\u00b2", id="order-id-superscript-two"),  # "²".isdigit()
        pytest.param("order_id", "\u0661", id="order-id-arabic-indic-one"),
        pytest.param("order_id", "1" * 5000, id="order-id-5000-digits"),
        pytest.param("order_id", "9" * 20, id="order-id-20-digits"),
        pytest.param("order_id", "1\n", id="order-id-newline"),
        pytest.param("event_id", "ev1\n", id="event-id-newline"),
        pytest.param("provider_txn_id", "{txn}\n", id="txn-id-newline"),
        pytest.param("currency", "{currency}\n", id="currency-newline"),
        # Decimal() reads each of these as an amount: 1,900 from "19_00", 19 from Arabic-Indic
        # digits, and it strips the spaces and the newline
        pytest.param("amount", "19_00", id="amount-underscore"),
        pytest.param("amount", "\u0661\u0669.00", id="amount-arabic-indic-digits"),
        pytest.param("amount", " 19.00", id="amount-leading-space"),
        pytest.param("amount", "19.00\n", id="amount-newline"),
        pytest.param("amount", True, id="amount-boolean"),
        pytest.param("amount", None, id="amount-null"),
    ],
)
def test_a_signed_callback_with_a_malformed_field_is_400(deliver, paying, tenant, field, value):
    """Red before: "²" and 5,000 digits passed ``isdigit`` and failed in ``int()`` (500); a
    pattern ending in ``$`` let a value ending in a newline through; an amount was whatever
    ``Decimal()`` made of the text."""
    order, payment = paying
    data = json.loads(signed(payment)[0])
    if isinstance(value, str):
        value = value.format(txn=payment.provider_txn_id, currency=payment.currency)
    data[field] = value
    response = deliver(*_signed_body(data))
    assert (response.status_code, response.json()["code"]) == (400, "PAYMENT_CALLBACK_INVALID")
    assert state(order) == (S.PAYING, Payment.Status.PENDING)
    assert PaymentCallback.objects.for_tenant(tenant).count() == 0


@pytest.mark.parametrize(
    ("field", "first", "last"),
    [
        pytest.param("status", "failed", "succeeded", id="status"),
        pytest.param("amount", "0.01", "{amount}", id="amount"),
        pytest.param("event_id", "evt_first", "evt_last", id="event-id"),
    ],
)
def test_a_signed_body_naming_a_member_twice_is_400_and_writes_nothing(
    deliver, paying, tenant, field, first, last
):
    """A body naming a member twice says two things at once (``"status": "failed"`` and
    ``"status": "succeeded"``): ``json`` keeps the last without a word, where the provider's
    own reader (or a log, a gateway) may keep the first. Such a body is malformed, as the
    API's own parser holds any body naming a member twice (``config/parsers.py``). Red before:
    the last member was applied (the order PAID on a body that also said the payment failed)."""
    order, payment = paying
    data = json.loads(signed(payment)[0])
    value = {field: last.format(amount=data["amount"])}
    text = json.dumps({**data, field: "PLACEHOLDER"})
    body = text.replace(
        '"PLACEHOLDER"', f"{json.dumps(first)}, {json.dumps(field)}: {json.dumps(value[field])}"
    ).encode()
    assert body.count(f'"{field}"'.encode()) == 2
    ts = int(time.time())
    headers = {
        TIMESTAMP_HEADER: str(ts),
        SIGNATURE_HEADER: sign(secret=webhook_secrets("simulated")[0], timestamp=ts, body=body),
    }
    response = deliver(body, headers)
    assert (response.status_code, response.json()["code"]) == (400, "PAYMENT_CALLBACK_INVALID")
    assert response.json()["detail"] == f"body names the member {field!r} twice"
    assert state(order) == (S.PAYING, Payment.Status.PENDING)
    assert PaymentCallback.objects.for_tenant(tenant).count() == 0


@pytest.mark.parametrize("amount", ["10000000000.00", "99999999999.99", "1E+12"])
def test_an_amount_no_column_of_ours_holds_is_400_and_writes_nothing(
    deliver, paying, tenant, amount
):
    """The simulated provider's own bound lets 13 integer digits through; the inbox and every
    payment hold under 10^10 (red without the check: a 500, numeric field overflow)."""
    order, payment = paying
    response = deliver(*signed(payment, amount=Decimal(amount)))
    assert (response.status_code, response.json()["code"]) == (400, "PAYMENT_CALLBACK_INVALID")
    assert "out of range" in response.json()["detail"]
    assert state(order) == (S.PAYING, Payment.Status.PENDING)
    assert PaymentCallback.objects.for_tenant(tenant).count() == 0
    assert ProviderConflict.all_tenants.count() == 0


@pytest.mark.parametrize("status", ["succeeded", "failed"])
def test_an_amount_written_with_many_trailing_zeros_is_the_amount_it_names(
    deliver, paying, tenant, status
):
    """The payment's amount followed by 20,000 zeros is that amount: applied once, kept in
    the inbox and in the audit of its redelivery at cents (red: 500 on every delivery: the
    inbox's insert sent the amount as written, past the digits PostgreSQL's numeric holds
    after the point, so the provider was never answered 2xx)."""
    order, payment = paying
    written = Decimal(f"{payment.amount}{'0' * 20_000}")
    body, headers = signed(payment, status=status, amount=written)

    first = deliver(body, headers)
    again = deliver(body, headers)

    assert (first.status_code, first.json()["result"]) == (200, "applied")
    assert (again.status_code, again.json()["result"]) == (200, "duplicate")
    assert PaymentCallback.objects.for_tenant(tenant).get().amount == payment.amount
    assert [audit.request_meta["amount"] for audit in audits()] == [str(payment.amount)]
    paid = status == "succeeded"
    assert state(order) == (
        (S.PAID, Payment.Status.SUCCEEDED) if paid else (S.PAYING, Payment.Status.FAILED)
    )


def test_the_largest_amount_a_column_holds_is_a_conflict_not_a_refusal(deliver, paying, tenant):
    order, payment = paying
    response = deliver(*signed(payment, amount=Decimal("9999999999.99")))
    assert response.status_code == 200
    assert list(inbox_outcomes(tenant).values()) == ["conflict"]
    assert state(order) == (S.PAYING, Payment.Status.PENDING)
    assert ProviderConflict.all_tenants.get().reported_amount == Decimal("9999999999.99")


def test_an_unknown_transaction_is_404_and_writes_nothing(deliver, paying, tenant):
    _, payment = paying
    Payment.objects.for_tenant(tenant).filter(pk=payment.pk).update(provider_txn_id="sim_other")
    response = deliver(*signed(payment))
    assert (response.status_code, response.json()["code"]) == (404, "PAYMENT_NOT_FOUND")
    assert PaymentCallback.objects.for_tenant(tenant).count() == 0


@pytest.mark.django_db(transaction=True)  # as served: no test transaction around it
def test_a_callback_reads_and_locks_in_one_statement_and_writes_its_inbox_row_once(
    deliver, paying, tenant
):
    # given an event delivered once
    order, payment = paying
    first = signed(payment, event_id="evt_once")
    with CaptureQueriesContext(connection) as applied:
        assert deliver(*first).json()["result"] == "applied"
    # when the provider delivers it again
    with CaptureQueriesContext(connection) as again:
        assert deliver(*first).json()["result"] == "duplicate"
    # then each opens its transaction with one read of the order and its payment, locked in
    # that order (as a cancel takes them), and reads neither outside it nor again
    for delivery in (applied, again):
        everything = [q["sql"] for q in delivery.captured_queries]
        # the callback's own statements: up to its commit (then the outbox's publish runs, and
        # the event's consumer, which the tests run in this process)
        statements = everything[: everything.index("COMMIT") + 1]
        begin = statements.index("BEGIN")
        reads = [
            sql for sql in statements if sql.startswith("SELECT") and f'"{PAYMENT_TABLE}"' in sql
        ]
        assert reads == [statements[begin + 1]], statements
        assert reads[0].endswith(f'FOR UPDATE OF "{ORDER_TABLE}", "{PAYMENT_TABLE}"'), reads
        # and the inbox row comes next, written once with the decision: an insert that does
        # nothing on the event's unique key (no savepoint, no error to catch), never updated
        [insert] = [sql for sql in statements if sql.startswith(INBOX_INSERT)]
        assert "ON CONFLICT" in insert
        assert statements.index(insert) == begin + 2, statements
        assert not statements[begin + 3].startswith("RELEASE SAVEPOINT"), statements
        assert not any(sql.startswith(INBOX_UPDATE) for sql in statements), statements
        # a duplicate reads what the inbox keeps of the event once, after the insert found it
        inbox_reads = [
            sql
            for sql in statements
            if sql.startswith(f'SELECT "{PaymentCallback._meta.db_table}"')
        ]
        assert len(inbox_reads) == (delivery is again), statements
        assert all(statements.index(read) == begin + 3 for read in inbox_reads), statements
    [row] = PaymentCallback.objects.for_tenant(tenant).all()
    assert (row.event_id, row.order_id, row.payment_id, row.outcome) == (
        "evt_once",
        order.pk,
        payment.pk,
        "applied",
    )
    assert (row.amount, row.currency, row.status) == (Decimal("19.00"), "EUR", "succeeded")


def test_the_duplicates_and_conflicts_a_provider_sends_are_counted_for_prometheus(
    deliver, paying, tenant
):
    """Audited, but never counted in ``idempotency_outcomes_total``: the provider's repeated
    deliveries and its conflicting reports (a success of another amount) were invisible in
    /metrics, where operators watch absorbed duplicates and conflicts."""

    def counted(outcome: str) -> float:
        labels = {"tenant": str(tenant.pk), "endpoint": CALLBACK_ENDPOINT, "outcome": outcome}
        return REGISTRY.get_sample_value("idempotency_outcomes_total", labels) or 0.0

    _, payment = paying
    before = {outcome: counted(outcome) for outcome in ("HIT", "CONFLICT")}
    deliver(*signed(payment, event_id="evt_c", amount=Decimal("1.00")))  # a conflict
    body, headers = signed(payment, event_id="evt_a")
    deliver(body, headers)
    deliver(body, headers)  # the same event again: a duplicate
    assert counted("HIT") - before["HIT"] == 1
    assert counted("CONFLICT") - before["CONFLICT"] == 1


def test_a_first_delivery_is_counted_as_a_first_execution_beside_its_repeats(
    deliver, paying, tenant
):
    """The provider's repeats were counted (HIT), its first deliveries never (MISS): the hit
    rate, HIT over all outcomes in Prometheus and HIT over HIT + MISS on the Duplicates page,
    read a provider that delivers each event twice as all repeats. A first delivery is now
    counted once, in /metrics and in the durable counters, as the engine counts a request
    that ran; its repeat is not counted as one."""

    def counted(outcome: str) -> float:
        labels = {"tenant": str(tenant.pk), "endpoint": CALLBACK_ENDPOINT, "outcome": outcome}
        return REGISTRY.get_sample_value("idempotency_outcomes_total", labels) or 0.0

    _, payment = paying
    before = {outcome: counted(outcome) for outcome in ("MISS", "HIT")}
    body, headers = signed(payment, event_id="evt_first")
    deliver(body, headers)
    deliver(body, headers)  # the same event again: a duplicate
    pending.flush()
    assert counted("MISS") - before["MISS"] == 1
    assert counted("HIT") - before["HIT"] == 1
    durable = dict(
        OutcomeCount.objects.filter(tenant_key=str(tenant.pk), endpoint=CALLBACK_ENDPOINT)
        .values("outcome")
        .annotate(n=Sum("count"))
        .values_list("outcome", "n")
    )
    assert durable == {"MISS": 1, "HIT": 1}


def test_a_callback_is_labelled_as_the_engine_labels_every_other_route(deliver, paying, tenant):
    """The callback's ``endpoint`` label read ``POST /api/v1/payments/callback/`` while the
    engine labels a request by its method and URLconf route (``POST api/v1/orders/``): one
    spelling per route in /metrics, the durable counters and the audits, so a query or a
    dashboard panel written for one form finds the callback too."""
    _, payment = paying
    body, headers = signed(payment, event_id="evt_label")
    deliver(body, headers)
    deliver(body, headers)  # a duplicate: audited
    route = f"POST {resolve(CALLBACK_URL).route}"
    assert route == CALLBACK_ENDPOINT
    assert [row.endpoint for row in audits()] == [route]
    labels = {"tenant": str(tenant.pk), "endpoint": route, "outcome": "MISS"}
    assert REGISTRY.get_sample_value("idempotency_outcomes_total", labels) >= 1


def test_the_schema_names_the_statuses_and_conflicts_a_callback_answers(deliver, paying):
    # the order's status and the conflict's kind were declared as any string: a provider's
    # integration generated from the schema could not switch on them
    _, payment = paying
    answered = deliver(*signed(payment, amount=Decimal("1.00"))).json()
    schema = APIClient().get("/api/schema/", HTTP_ACCEPT="application/json").json()
    declared = schema["components"]["schemas"]["PaymentCallbackResult"]["properties"]

    def enum_of(member):
        refs = [
            m["$ref"]
            for m in [member, *member.get("allOf", []), *member.get("oneOf", [])]
            if "$ref" in m
        ]
        schemas = schema["components"]["schemas"]
        return [v for ref in refs for v in schemas[ref.rsplit("/", 1)[-1]]["enum"] if v]

    result = OAS30ReadValidator({**schema, "$ref": "#/components/schemas/PaymentCallbackResult"})
    assert [e.message for e in result.iter_errors(answered)] == []
    assert enum_of(declared["order_status"]) == list(S.values)
    # and a capture after the restaurant left (ordering/payments/departed.py)
    assert enum_of(declared["conflict"]) == [*ProviderConflict.Kind.values, LATE_CAPTURE]
    assert result.is_valid({**answered, "conflict": LATE_CAPTURE})
    assert result.is_valid({**answered, "conflict": None})
    assert not result.is_valid({**answered, "conflict": "something_else"})


def _callback_parameters() -> dict[str, dict]:
    schema = APIClient().get("/api/schema/", HTTP_ACCEPT="application/json").json()
    operation = schema["paths"][CALLBACK_URL]["post"]
    return {p["name"]: p["schema"] for p in operation["parameters"] if p["in"] == "header"}


def test_the_schema_declares_the_providers_and_the_timestamps_the_callback_reads(deliver, paying):
    """Red: ``X-Provider`` was any string and ``X-Provider-Timestamp`` any integer, so a
    callback the schema allowed ("paypal", a 13-digit timestamp) was refused 400
    PAYMENT_PROVIDER_UNKNOWN or PAYMENT_TIMESTAMP_INVALID."""
    declared = _callback_parameters()
    assert declared["X-Provider"] == {"type": "string", "enum": sorted(settings.PAYMENT_PROVIDERS)}
    stamp = declared[TIMESTAMP_HEADER]
    assert (stamp["type"], stamp["minimum"]) == ("integer", 0)
    _, payment = paying
    body, _ = signed(payment)
    secret = webhook_secrets("simulated")[0]

    def sent_at(timestamp: int) -> str:
        headers = {
            "X-Provider": "simulated",
            TIMESTAMP_HEADER: str(timestamp),
            SIGNATURE_HEADER: sign(secret=secret, timestamp=timestamp, body=body),
        }
        return deliver(body, headers).json()["code"]

    # the largest timestamp the schema allows is read as one (a replay, far from now), the
    # next is refused as no timestamp: the schema's bound is the server's
    assert sent_at(stamp["maximum"]) == "PAYMENT_TIMESTAMP_STALE"
    assert sent_at(stamp["maximum"] + 1) == "PAYMENT_TIMESTAMP_INVALID"
