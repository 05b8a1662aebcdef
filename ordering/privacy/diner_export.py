"""A diner's copy of their data (right of access): every record the platform keeps of one diner
at one restaurant, as a JSON document the restaurant hands to the diner.

It finds the diner's data the way an erasure does (:mod:`ordering.privacy.diners`): the same
tenant scope, the same id check (:class:`NotADinerId`, a pseudonym included), the same engine
queries for the diner's own idempotency records and audits, so a copy shows what an erasure
would remove or anonymise. After an erasure the id finds nothing: the document says so with
empty lists.

What it never holds: another diner's or another restaurant's rows, session tokens or their
hashes, payment provider references, a stored reply of someone else (a merchant's reply that
shows the diner is the merchant's), or anyone's sign-in name: a move platform staff made reads
"Platform staff", one a restaurant member made "Restaurant staff (dashboard)"
(:mod:`ordering.actors`).

Bounded: the lists are generators read in batches of :data:`BATCH` rows (an order's lines,
payments and moves with it), so :func:`diner_export_chunks` writes a diner with a hundred
thousand orders in the memory of one batch. :func:`export_diner` builds the whole document as
a dict, for callers that want it in memory.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, tzinfo
from typing import Any

from django.db.models import Q
from django.utils import timezone

from idempotency import erasure
from idempotency.stores.audit_stream import drain_audits
from ordering.actors import describe_actors
from ordering.models import DinerDataExport, Order
from ordering.privacy.diner_provider_reports import provider_reports_of
from ordering.privacy.diner_refunds import refunds_of
from ordering.privacy.diners import TenantLeaving, check_diner_id, diner_hash
from tenants.models import DinerSession, Tenant

BATCH = 200
# A stored reply larger than this is named by its size only: replies to a diner's requests
# are an order (a few KiB); the limit keeps one odd body from swelling the document.
BODY_LIMIT = 64 * 1024
SECTIONS = ("orders", "diner_sessions", "idempotency_records", "duplicate_audits")


def export_diner(tenant: Tenant, diner_id: str) -> dict[str, Any]:
    """The whole document, in memory: the restaurant, the diner id, when it was produced, and
    one list per kind of record (:data:`SECTIONS`), empty when nothing is kept. Raises
    :class:`NotADinerId` for an id no diner can have. Writes nothing (no export log row)."""
    return {
        name: list(value) if name in SECTIONS else value
        for name, value in _document(tenant, diner_id).items()
    }


def diner_export_chunks(tenant: Tenant, diner_id: str) -> Iterator[str]:
    """The same document as JSON text, in pieces to write as they come (a file, an HTTP
    response): the id is checked and the audits drained before this returns, so a refused id
    raises here, before any piece is written."""
    return _json_chunks(_document(tenant, diner_id))


def rows_kept(tenant: Tenant, diner_id: str) -> int:
    """How many rows the copy lists (orders, sessions, stored replies, audits), counted by the
    database: what a caller bound by a time limit (a web request) checks before writing one.
    Audits still waiting in a Redis stream are drained first, as the copy drains them: counted
    without them, a diner who retried a lot while no drain ran passed the check with a copy
    larger than the bound."""
    check_diner_id(diner_id)
    drain_audits()
    principal = f"diner:{diner_id}"
    tenant_key = str(tenant.pk)
    return (
        Order.all_tenants.filter(tenant=tenant, diner_id=diner_id).count()
        + DinerSession.objects.filter(tenant=tenant, diner_id=diner_id).count()
        + erasure.principal_records(tenant_key=tenant_key, principal=principal).count()
        + erasure.principal_audits(tenant_key=tenant_key, principal=principal).count()
    )


def check_exportable(tenant: Tenant) -> None:
    """Raise :class:`TenantLeaving` for a restaurant being offboarded: its offboarding archive
    holds every row of its diners, and its tables take no write (not even this log's row)."""
    if tenant.status == Tenant.Status.OFFBOARDING:
        raise TenantLeaving(
            f"{tenant.slug} is being offboarded: its diners' data is in its offboarding "
            "archive, and nothing of it can be written meanwhile (not even the export log)"
        )


def log_export(*, tenant: Tenant, diner_id: str, requested_by: str) -> DinerDataExport:
    """Record that a copy of the diner's data was given out: who asked, when, and the diner
    id only as the erasure log keeps it (:func:`diner_hash`)."""
    check_diner_id(diner_id)
    check_exportable(tenant)
    return DinerDataExport.objects.create(
        tenant=tenant, diner_hash=diner_hash(diner_id), requested_by=requested_by[:200]
    )


def _document(tenant: Tenant, diner_id: str) -> dict[str, Any]:
    check_diner_id(diner_id)
    # Audits still waiting in a Redis stream are the diner's too. A node that does not answer
    # is passed by (logged): its audits land once it answers, and the database holds the rest.
    drain_audits()
    zone = tenant.zone
    principal = f"diner:{diner_id}"
    return {
        "restaurant": {"name": tenant.name, "slug": tenant.slug, "time_zone": str(zone)},
        "diner_id": diner_id,
        "produced_at": _when(timezone.now(), zone),
        "orders": _orders(tenant, diner_id, zone),
        "diner_sessions": _sessions(tenant, diner_id, zone),
        "idempotency_records": _records(tenant, principal, zone),
        "duplicate_audits": _audits(tenant, principal, zone),
        "not_included": (
            "Session tokens and pre-issued idempotency tokens (credentials), the platform's "
            "counters of requests, and log lines. When a session was last used is not recorded."
        ),
    }


def _json_chunks(document: dict[str, Any]) -> Iterator[str]:
    yield "{"
    for position, (name, value) in enumerate(document.items()):
        yield ("," if position else "") + json.dumps(name) + ":"
        if name in SECTIONS:
            yield "["
            for index, item in enumerate(value):
                yield ("," if index else "") + _dumps(item)
            yield "]"
        else:
            yield _dumps(value)
    yield "}\n"


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _when(value: datetime | None, zone: tzinfo) -> str | None:
    """ISO 8601 in the restaurant's time zone (its offset written): as its pages show times."""
    return timezone.localtime(value, zone).isoformat() if value is not None else None


def _batches(queryset: Any, *, by_creation: bool = False) -> Iterator[list[Any]]:
    """``queryset`` a batch at a time, each read by a keyset query (no server-side cursor,
    which a connection pooler in transaction mode does not keep): in ``pk`` order, or in
    ``created_at`` order (ties by ``pk``) when ``by_creation``."""
    queryset = queryset.order_by(*(("created_at", "pk") if by_creation else ("pk",)))
    page = queryset
    while rows := list(page[:BATCH]):
        yield rows
        last = rows[-1]
        after = Q(pk__gt=last.pk)
        if by_creation:
            after = Q(created_at__gt=last.created_at) | (Q(created_at=last.created_at) & after)
        page = queryset.filter(after)


def _orders(tenant: Tenant, diner_id: str, zone: tzinfo) -> Iterator[dict[str, Any]]:
    orders = (
        Order.all_tenants.filter(tenant=tenant, diner_id=diner_id)
        .select_related("coupon")
        .prefetch_related(
            "lines",
            "payments",
            "transitions",
            "compensations",
            "provider_conflicts",
            "dead_letters",
        )
    )
    for batch in _batches(orders):
        actors = describe_actors(
            tenant, (t.actor for o in batch for t in o.transitions.all()), member_names=False
        )
        for order in batch:
            yield _order(order, actors, zone)


def _order(order: Order, actors: dict[str, str], zone: tzinfo) -> dict[str, Any]:
    return {
        "id": str(order.pk),
        "number": order.number_label,
        "business_day": order.business_day.isoformat() if order.business_day else None,
        "status": order.status,
        "created_at": _when(order.created_at, zone),
        "updated_at": _when(order.updated_at, zone),
        "lines": [
            {
                "dish_name": line.dish_name,
                "quantity": line.quantity,
                "unit_price": str(line.unit_price),
                "line_total": str(line.line_total),
            }
            for line in sorted(order.lines.all(), key=lambda line: line.pk)
        ],
        "subtotal": str(order.subtotal),
        "discount": str(order.discount),
        "total": str(order.total),
        "currency": order.currency,
        "note": order.note,
        "contact_phone": order.contact_phone,
        "delivery_address": order.delivery_address,
        "coupon_code": order.coupon.code if order.coupon else None,
        "payment_method": order.payment_method,
        "payments": [
            {
                "method": payment.method,
                "amount": str(payment.amount),
                "currency": payment.currency,
                "status": payment.status,
                "created_at": _when(payment.created_at, zone),
            }
            for payment in sorted(order.payments.all(), key=lambda payment: payment.pk)
        ],
        "refunds": refunds_of(order, when=lambda value: _when(value, zone)),
        "provider_reports": provider_reports_of(order, when=lambda value: _when(value, zone)),
        "status_history": [
            {
                "from": move.from_status,
                "to": move.to_status,
                "at": _when(move.at, zone),
                "by": actors[move.actor],
            }
            for move in sorted(order.transitions.all(), key=lambda move: (move.at, move.pk))
        ],
    }


def _sessions(tenant: Tenant, diner_id: str, zone: tzinfo) -> Iterator[dict[str, Any]]:
    sessions = DinerSession.objects.filter(tenant=tenant, diner_id=diner_id).select_related(
        "client"
    )
    for batch in _batches(sessions, by_creation=True):
        for session in batch:
            yield {
                "created_at": _when(session.created_at, zone),
                "expires_at": _when(session.expires_at, zone),
                "ended_at": _when(session.revoked_at, zone),
                "guest": session.is_guest,
                "opened_through": session.client.name,
            }


def _records(tenant: Tenant, principal: str, zone: tzinfo) -> Iterator[dict[str, Any]]:
    records = erasure.principal_records(tenant_key=str(tenant.pk), principal=principal)
    fields = ("pk", "scope", "created_at", "expires_at", "response_status", "response_body")
    for batch in _batches(records.only(*fields)):
        for record in batch:
            yield {
                "endpoint": _endpoint(record.scope, principal),
                "created_at": _when(record.created_at, zone),
                "kept_until": _when(record.expires_at, zone),
                "status_code": record.response_status,
                **_body(bytes(record.response_body)),
            }


def _endpoint(scope: str, principal: str) -> str:
    """``diner:zoe|POST|api/v1/orders/`` → ``POST api/v1/orders/``."""
    return " ".join(scope.removeprefix(f"{principal}|").split("|"))


def _body(body: bytes) -> dict[str, Any]:
    """The stored reply (redacted as kept: contact details are ``null``), as JSON when it is
    JSON; one over :data:`BODY_LIMIT` is named by its size only."""
    if len(body) > BODY_LIMIT:
        return {"response_body": None, "response_body_omitted": f"{len(body)} bytes"}
    text = body.decode("utf-8", "replace")
    try:
        return {"response_body": json.loads(text)}
    except ValueError:
        return {"response_body": text}


def _audits(tenant: Tenant, principal: str, zone: tzinfo) -> Iterator[dict[str, Any]]:
    audits = erasure.principal_audits(tenant_key=str(tenant.pk), principal=principal)
    for batch in _batches(audits):
        for audit in batch:
            meta = audit.request_meta if isinstance(audit.request_meta, dict) else {}
            yield {
                "at": _when(audit.at, zone),
                "endpoint": audit.endpoint,
                "outcome": audit.outcome,
                "client_ip": meta.get("remote_addr", ""),
                "user_agent": meta.get("user_agent", ""),
                "request_id": meta.get("request_id", ""),
            }
