"""An audit names its request (issue 17, item 6): the request id the logs carry, and its
metadata as labelled fields on the admin page rather than raw JSON."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from idempotency.models import DuplicateAudit
from idempotency.stores.audit_stream import drain_audits
from tests.flows.test_idempotent_orders import post_order

pytestmark = pytest.mark.django_db


def test_an_audit_carries_the_request_id_of_its_request(api, menu):
    post_order(api, menu, key="k-id")
    given = post_order(api, menu, key="k-id", HTTP_X_REQUEST_ID="req-audit-000123")
    made = post_order(api, menu, key="k-id")  # no header: the middleware makes one
    drain_audits()
    ids = [a.request_meta["request_id"] for a in DuplicateAudit.objects.order_by("id")]
    assert given["X-Request-ID"] == "req-audit-000123"
    assert ids == ["req-audit-000123", made["X-Request-ID"]] and len(ids[1]) == 32


def test_the_admin_shows_request_metadata_as_labelled_fields(api, menu):
    post_order(api, menu, key="k-meta")
    post_order(
        api, menu, key="k-meta", HTTP_X_REQUEST_ID="req-audit-000456", HTTP_USER_AGENT="PizzaApp/3"
    )
    drain_audits()
    audit = DuplicateAudit.objects.get()
    staff = Client()
    staff.force_login(User.objects.create_superuser("root", password="x-123456789"))
    html = staff.get(f"/admin/idempotency/duplicateaudit/{audit.pk}/change/").content.decode()
    assert "<th scope='row'>Request ID (as in the logs)</th><td>req-audit-000456</td>" in html
    assert "<th scope='row'>User agent</th><td>PizzaApp/3</td>" in html
    assert "<th scope='row'>Client IP</th><td>127.0.0.1</td>" in html
    assert "remote_addr" not in html  # no raw JSON
