"""Staff see less (issue 15, item 6): stored reply bodies, and what diners wrote on orders, only
with a dedicated permission, and every view of either and every export of audits written to
the staff access log."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.utils import timezone

from idempotency.admin.audits import HIDDEN_BODY
from idempotency.core.hashing import keyed_digest
from idempotency.models import DuplicateAudit, IdempotencyRecord, StaffAccessLog
from ordering.admin.orders import HIDDEN_DINER_DETAILS
from ordering.models import Dish, Order
from tenants.models import Tenant
from tests.dashboard.factories import make_order

pytestmark = pytest.mark.django_db

BODY = b'{"id": "8123", "note": "ring twice, flat 4B", "phone": "+44 7700 900123"}'


def staff_with(*codenames: str) -> Client:
    user = User.objects.create_user(
        f"staff-{len(codenames)}", password="x-123456789", is_staff=True
    )
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def record() -> IdempotencyRecord:
    now = timezone.now()
    return IdempotencyRecord.objects.create(
        tenant_key="1",
        scope="diner:d1|POST|api/v1/orders/",
        key="k-body",
        fingerprint="f" * 64,
        response_status=201,
        response_body=BODY,
        created_at=now,
        expires_at=now + timedelta(hours=72),
    )


def test_without_the_permission_a_stored_body_is_a_placeholder_and_nothing_is_logged(record):
    staff = staff_with("view_idempotencyrecord")
    page = staff.get(f"/admin/idempotency/idempotencyrecord/{record.pk}/change/")
    html = page.content.decode()
    assert page.status_code == 200
    # the phone number whole: its digits alone may turn up in an id or a time on the page
    assert "ring twice" not in html and "7700 900123" not in html
    assert HIDDEN_BODY in html
    assert not StaffAccessLog.objects.exists()


def test_with_the_permission_the_body_is_shown_and_the_view_is_logged(record):
    staff = staff_with("view_idempotencyrecord", "view_stored_body")
    page = staff.get(f"/admin/idempotency/idempotencyrecord/{record.pk}/change/")
    assert page.status_code == 200 and "ring twice, flat 4B" in page.content.decode()
    [entry] = StaffAccessLog.objects.all()
    assert (entry.actor, entry.action, entry.object_type) == (
        "staff-2",
        "view_stored_body",
        "idempotency.IdempotencyRecord",
    )
    assert entry.object_ids == [str(record.pk)] and entry.row_count == 1
    assert entry.at > timezone.now() - timedelta(minutes=1)


def test_an_export_carries_hashed_keys_and_is_logged():
    audits = [
        DuplicateAudit.objects.create(
            tenant_key="1",
            endpoint="POST api/v1/orders/",
            key=keyed_digest(f"raw-{n}"),
            outcome="HIT",
            at=timezone.now(),
        )
        for n in range(3)
    ]
    staff = staff_with("view_duplicateaudit")
    export = staff.post(
        "/admin/idempotency/duplicateaudit/",
        {"action": "export_csv", ACTION_CHECKBOX_NAME: [str(a.pk) for a in audits]},
    )
    rows = list(csv.DictReader(io.StringIO(export.content.decode())))
    assert [r["key"] for r in rows] == [keyed_digest(f"raw-{n}") for n in range(3)]
    assert "raw-0" not in export.content.decode()
    [entry] = StaffAccessLog.objects.all()
    assert (entry.actor, entry.action, entry.row_count) == ("staff-1", "export_audits", 3)
    assert entry.object_ids == [str(a.pk) for a in audits]


def test_an_audit_s_page_shows_the_client_s_address_and_the_view_is_logged():
    """An audit's page shows the request's client address and user agent (red: no log)."""
    audit = DuplicateAudit.objects.create(
        tenant_key="1",
        endpoint="POST api/v1/orders/",
        key=keyed_digest("raw-x"),
        outcome="HIT",
        at=timezone.now(),
        request_meta={"client_ip": "203.0.113.7", "user_agent": "DinerApp/2.1"},
    )
    staff = staff_with("view_duplicateaudit")
    listing = staff.get("/admin/idempotency/duplicateaudit/")
    assert listing.status_code == 200 and not StaffAccessLog.objects.exists()
    page = staff.get(f"/admin/idempotency/duplicateaudit/{audit.pk}/change/")
    assert page.status_code == 200 and "203.0.113.7" in page.content.decode()
    [entry] = StaffAccessLog.objects.all()
    assert (entry.actor, entry.action, entry.object_type, entry.object_ids) == (
        "staff-1",
        "view_request_details",
        "idempotency.DuplicateAudit",
        [str(audit.pk)],
    )


def test_the_access_log_is_read_only_evidence(record):
    viewer = staff_with("view_idempotencyrecord", "view_stored_body", "view_staffaccesslog")
    viewer.get(f"/admin/idempotency/idempotencyrecord/{record.pk}/change/")
    [entry] = StaffAccessLog.objects.all()
    listing = viewer.get("/admin/idempotency/staffaccesslog/")
    assert listing.status_code == 200 and "Viewed a stored reply body" in listing.content.decode()
    url = f"/admin/idempotency/staffaccesslog/{entry.pk}/"
    assert viewer.post(url + "change/", {"actor": "someone-else"}).status_code == 403
    assert viewer.post(url + "delete/", {"post": "yes"}).status_code == 403
    assert StaffAccessLog.objects.get().actor == "staff-3"


@pytest.fixture
def order_with_details() -> Order:
    tenant = Tenant.objects.create(slug="roma", name="Roma")
    dish = Dish.objects.for_tenant(tenant).create(
        tenant=tenant, name="Pizza", price="8.50", stock=5
    )
    order = make_order(tenant, dish)
    Order.all_tenants.filter(pk=order.pk).update(
        note="ring twice, flat 4B", contact_phone="+44 7700 900123", delivery_address="1 Via Roma"
    )
    return order


def test_without_the_permission_an_order_s_page_hides_what_the_diner_wrote(order_with_details):
    """Red before: any staff user who could view orders read the note, phone and address."""
    staff = staff_with("view_order")
    page = staff.get(f"/admin/ordering/order/{order_with_details.pk}/change/")
    html = page.content.decode()
    assert page.status_code == 200 and order_with_details.number_label in html
    assert "ring twice" not in html and "7700 900123" not in html and "Via Roma" not in html
    assert HIDDEN_DINER_DETAILS in html
    assert not StaffAccessLog.objects.exists()


def test_with_the_permission_what_the_diner_wrote_is_shown_and_the_view_is_logged(
    order_with_details,
):
    staff = staff_with("view_order", "view_diner_details")
    page = staff.get(f"/admin/ordering/order/{order_with_details.pk}/change/")
    html = page.content.decode()
    assert page.status_code == 200
    assert "ring twice, flat 4B" in html and "+44 7700 900123" in html and "1 Via Roma" in html
    [entry] = StaffAccessLog.objects.all()
    assert (entry.actor, entry.action, entry.object_type) == (
        "staff-2",
        "view_personal_data",
        "ordering.Order",
    )
    assert entry.object_ids == [str(order_with_details.pk)] and entry.row_count == 1
