"""Staff resolve payment provider conflicts in the admin: open/resolved filter, a "resolve" action
with an outcome and a note, who and when recorded, once; merchants see what is under review."""

from __future__ import annotations

import threading
from decimal import Decimal

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from rest_framework.test import APIClient

from ordering.models import ProviderConflict
from ordering.payments.conflicts import ConflictNotOpen, resolve_conflict
from tests.conftest import menu_for
from tests.dashboard.factories import make_merchant
from tests.payments.helpers import paying_order, post_callback, signed

LIST = "/admin/ordering/providerconflict/"


def conflict_for(tenant, dish) -> ProviderConflict:
    """A real conflict: the provider reports 1.00 for an order of 9.50."""
    order, payment = paying_order(tenant, dish)
    response = post_callback(APIClient(), *signed(payment, amount=Decimal("1.00")))
    assert response.json()["result"] == "conflict"
    return ProviderConflict.all_tenants.get(order=order)


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("ops", password="x-123456789"))
    return client


def resolve_in_admin(staff: Client, conflicts: list[ProviderConflict], **form: str):
    return staff.post(
        LIST,
        {
            "action": "resolve",
            ACTION_CHECKBOX_NAME: [str(c.pk) for c in conflicts],
            "apply": "1",
            **form,
        },
        follow=True,
    )


@pytest.mark.django_db
def test_staff_filter_open_and_resolved_and_resolve_with_an_outcome_and_a_note(staff, tenant):
    dish = menu_for(tenant)["pizza"]
    first, second = conflict_for(tenant, dish), conflict_for(tenant, dish)

    listed = staff.get(LIST, {"state": "open"}).context["cl"].result_list
    assert {c.pk for c in listed} == {first.pk, second.pk}
    # the action first asks for the outcome and the note
    ask = staff.post(LIST, {"action": "resolve", ACTION_CHECKBOX_NAME: [str(first.pk)]})
    assert ask.status_code == 200 and b"Resolve payment provider conflicts" in ask.content
    row = ask.context["page"].rows[0]  # the conflict the page lists, as staff read it
    assert row[2] == f"{first.order.number_label} ({first.order_id})" and row[-1] == "Open"
    assert row[4] == (
        f"{first.expected_amount} {first.expected_currency} → "
        f"{first.reported_amount} {first.reported_currency}"
    )
    assert f"<td>{row[4]}</td>" in ask.content.decode()
    page = resolve_in_admin(staff, [first], outcome="refunded", note="Refunded 1.00 by hand")
    assert b"1 conflict(s) resolved." in page.content

    first.refresh_from_db()
    assert (first.resolved, first.outcome, first.resolved_by) == (True, "refunded", "staff:ops")
    assert first.resolution_note == "Refunded 1.00 by hand" and first.resolved_at is not None
    assert [c.pk for c in staff.get(LIST, {"state": "open"}).context["cl"].result_list] == [
        second.pk
    ]
    assert [c.pk for c in staff.get(LIST, {"state": "resolved"}).context["cl"].result_list] == [
        first.pk
    ]


@pytest.mark.django_db
def test_resolving_again_keeps_the_first_resolution(staff, tenant):
    conflict = conflict_for(tenant, menu_for(tenant)["pizza"])
    resolve_in_admin(staff, [conflict], outcome="accepted", note="Diner paid the rest in cash")
    again = resolve_in_admin(staff, [conflict], outcome="ignored", note="second click")
    assert b"were resolved already" in again.content
    conflict.refresh_from_db()
    assert (conflict.outcome, conflict.resolution_note) == (
        "accepted",
        "Diner paid the rest in cash",
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    "form",
    [
        pytest.param({"outcome": "refunded", "note": ""}, id="no-note"),
        pytest.param({"outcome": "forgiven", "note": "x"}, id="unknown-outcome"),
        pytest.param({"outcome": "refunded", "note": "x" * 2001}, id="note-too-long"),
    ],
)
def test_an_incomplete_resolution_changes_nothing(staff, tenant, form):
    conflict = conflict_for(tenant, menu_for(tenant)["pizza"])
    page = resolve_in_admin(staff, [conflict], **form)
    assert b"Resolve payment provider conflicts" in page.content  # the form, with its errors
    conflict.refresh_from_db()
    assert (conflict.resolved, conflict.outcome, conflict.resolved_by) == (False, "", "")


@pytest.mark.django_db
def test_resolving_needs_the_change_permission_and_rows_stay_read_only(tenant):
    conflict = conflict_for(tenant, menu_for(tenant)["pizza"])
    viewer = User.objects.create_user("viewer", password="x-123456789", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_providerconflict"))
    client = Client()
    client.force_login(viewer)
    resolve_in_admin(client, [conflict], outcome="ignored", note="not allowed")
    conflict.refresh_from_db()
    assert not conflict.resolved
    detail = client.get(f"{LIST}{conflict.pk}/change/").content.decode()
    assert "View provider conflict" in detail and 'name="_save"' not in detail


@pytest.mark.django_db(transaction=True)
def test_two_staff_resolving_at_once_resolve_it_once(tenant):
    conflict = conflict_for(tenant, menu_for(tenant)["pizza"])
    barrier, results = threading.Barrier(2), []

    def run(who: str) -> None:
        try:
            barrier.wait()
            resolve_conflict(conflict_id=conflict.pk, outcome="ignored", note=who, actor=who)
            results.append(who)
        except ConflictNotOpen:
            results.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(w,)) for w in ("staff:a", "staff:b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(results)[0] == "refused" and len(results) == 2
    conflict.refresh_from_db()
    assert (
        conflict.resolved_by
        == conflict.resolution_note
        == next(r for r in results if r != "refused")
    )


@pytest.mark.django_db
def test_the_merchant_dashboard_counts_its_open_conflicts_until_staff_resolve_them(
    tenant, other_tenant
):
    mine = conflict_for(tenant, menu_for(tenant)["pizza"])
    conflict_for(other_tenant, menu_for(other_tenant)["pizza"])
    merchant = Client()
    merchant.force_login(make_merchant(tenant, "owner"))

    board = merchant.get("/dashboard/").content.decode()
    assert "1 payment under review" in board
    assert f'href="/dashboard/orders/{mine.order_id}/">Order {mine.order.number_label}</a>' in board
    assert "the payment provider reported a different amount" in board
    order_page = merchant.get(f"/dashboard/orders/{mine.order_id}/").content.decode()
    assert "Payment under review:" in order_page and "1.00 EUR reported" in order_page

    resolve_conflict(conflict_id=mine.pk, outcome="refunded", note="done", actor="staff:ops")
    assert "under review" not in merchant.get("/dashboard/").content.decode()
