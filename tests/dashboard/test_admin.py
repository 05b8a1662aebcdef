"""The staff admin: orders moved only through the lifecycle, read-only audits with review and
CSV export, read-only idempotency records, API clients that can be revoked but not shown."""

from __future__ import annotations

import csv
import io
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.db.models import Model
from django.db.models.signals import post_init
from django.test import Client
from django.utils import timezone

from idempotency.core.hashing import keyed_digest
from idempotency.models import DuplicateAudit, IdempotencyRecord
from ordering.models import Coupon, Dish, Order, OrderStatus, OrderTransition, TenantOffboarding
from ordering.services.placing import ItemRequest, place_order
from tenants.api_keys import issue_api_key, revoke_api_key
from tenants.diner_sessions import end_sessions, open_session
from tenants.models import ApiClient, DinerSession, Tenant
from tests.conftest import api_for
from tests.dashboard.factories import make_order

pytestmark = pytest.mark.django_db
S = OrderStatus


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="x-123456789"))
    return client


def run_action(staff: Client, changelist: str, action: str, pks: list[object], **extra: str):
    return staff.post(
        changelist, {"action": action, ACTION_CHECKBOX_NAME: [str(pk) for pk in pks], **extra}
    )


@pytest.mark.parametrize("zone", ["UTC", "Europe/Rome"])
def test_every_admin_page_says_the_time_zone_its_times_are_in(staff, mine, settings, zone):
    """The admin writes every time (an order's, an audit's, a login's) in the site's time zone
    and said nothing of which: staff in Rome read 09:00 as their morning (red: no zone)."""
    settings.TIME_ZONE = zone
    for path in (
        "/admin/",
        "/admin/ordering/order/",
        f"/admin/ordering/order/{mine.order.pk}/change/",
    ):
        page = staff.get(path)
        assert f'<div id="site-time-zone">Times are in {zone}</div>' in page.content.decode(), path


# --- orders --------------------------------------------------------------------------------


def test_order_page_shows_the_log_inline_and_money_read_only(staff, mine):
    page = staff.get(f"/admin/ordering/order/{mine.order.pk}/change/")
    html = page.content.decode()
    assert page.status_code == 200
    assert "transition log" in html.lower() and "provider:test" in html
    for field in ("total", "subtotal", "discount", "status", "currency"):
        assert f'name="{field}"' not in html, field
    assert staff.get("/admin/ordering/order/add/").status_code == 403


def test_a_coupon_s_code_is_shown_not_edited(staff, mine):
    # diners' codes are read in capitals, as the dashboard writes them: staff editing one into
    # lower case would make it unusable
    html = staff.get(f"/admin/ordering/coupon/{mine.coupon.pk}/change/").content.decode()
    assert mine.coupon.code in html
    assert 'name="code"' not in html and 'name="active"' in html


def test_an_order_page_is_a_view_without_save_buttons_and_names_who_moved_it(staff, mine):
    html = staff.get(f"/admin/ordering/order/{mine.order.pk}/change/").content.decode()
    assert "<h1>View order</h1>" in html
    assert 'name="_save"' not in html and 'name="_continue"' not in html
    assert "Payment provider (test)" in html  # the log's actor, in words
    listing = staff.get("/admin/ordering/order/").content.decode()
    assert mine.order.number_label in listing and mine.tenant.name in listing


def test_admin_action_moves_orders_through_the_lifecycle_as_staff(staff, mine, theirs, order_in):
    created = order_in(mine.tenant, mine.dishes["pasta"], S.CREATED)
    r = run_action(
        staff,
        "/admin/ordering/order/",
        "move_to_accepted",
        [mine.order.pk, theirs.order.pk, created.pk],
    )
    assert r.status_code == 302
    statuses = dict(Order.all_tenants.values_list("pk", "status"))
    assert statuses[mine.order.pk] == statuses[theirs.order.pk] == S.ACCEPTED
    assert statuses[created.pk] == S.CREATED  # not allowed from CREATED: left alone
    last = OrderTransition.all_tenants.filter(order=mine.order).last()
    assert (last.to_status, last.actor) == (S.ACCEPTED, "staff:root")
    notices = [str(m) for m in staff.get("/admin/ordering/order/").context["messages"]]
    assert "Accept: 2 order(s) moved." in notices
    assert any(str(created.pk) in n and "not allowed" in n for n in notices)


def test_a_move_by_staff_names_them_to_staff_only(staff, mine, merchant):
    """A staff member's sign-in name, half of what opens the platform's admin, showed to the
    restaurant: "root (platform staff)" in the dashboard's status log, ``staff:root`` as the
    actor the merchant's API key reads. The restaurant now reads platform staff, unnamed."""
    run_action(staff, "/admin/ordering/order/", "move_to_accepted", [mine.order.pk])
    assert OrderTransition.all_tenants.filter(order=mine.order).last().actor == "staff:root"

    admin_page = staff.get(f"/admin/ordering/order/{mine.order.pk}/change/").content.decode()
    dashboard_page = merchant.get(f"/dashboard/orders/{mine.order.pk}/").content.decode()
    api_order = api_for(mine.tenant, kind=ApiClient.Kind.MERCHANT).get(
        f"/api/v1/orders/{mine.order.pk}/"
    )

    assert "root (platform staff)" in admin_page
    assert "by Platform staff" in dashboard_page and "root" not in dashboard_page
    actors = [step["actor"] for step in api_order.json()["transitions"]]
    assert actors[-1] == "staff" and not any("root" in actor for actor in actors)


def test_admin_cancel_action_uses_the_cancel_service(staff, mine, order_in):
    unpaid = order_in(mine.tenant, mine.dishes["pasta"], S.CREATED)
    run_action(staff, "/admin/ordering/order/", "move_to_cancelled", [mine.order.pk, unpaid.pk])
    statuses = dict(Order.all_tenants.values_list("pk", "status"))
    assert statuses[mine.order.pk] == S.CANCELLING and statuses[unpaid.pk] == S.CANCELLED


@pytest.mark.parametrize(
    ("action", "label", "arrived"),
    [
        ("move_to_accepted", "Accept", {S.ACCEPTED}),
        ("move_to_cancelled", "Cancel (refund if paid)", {S.CANCELLING, S.CANCELLED}),
    ],
)
def test_an_action_sent_twice_says_the_orders_are_already_moved(
    staff, mine, action, label, arrived
):
    """A double click on an action's button sends it twice: the second said the move was "not
    allowed" for the orders the first had just moved, as if it had failed. It says they were
    already moved, moves nothing again and logs no second transition."""
    first = run_action(staff, "/admin/ordering/order/", action, [mine.order.pk])
    second = run_action(staff, "/admin/ordering/order/", action, [mine.order.pk])
    assert (first.status_code, second.status_code) == (302, 302)
    assert Order.all_tenants.get(pk=mine.order.pk).status in arrived
    moves = OrderTransition.all_tenants.filter(order=mine.order, actor="staff:root")
    assert moves.count() == 1
    notices = [str(m) for m in staff.get("/admin/ordering/order/").context["messages"]]
    assert notices == [
        f"{label}: 1 order(s) moved.",
        f"{label}: already done for {mine.order.pk}.",
    ]


def test_cancelling_in_the_admin_needs_the_permission_to_cancel_orders(mine):
    """Staff who move orders (view and change them) may not cancel one, which refunds it when
    paid: on the dashboard a cancel needs a manager (red: the paid order was cancelled and its
    refund started); given "Can cancel orders" they may."""
    mover = User.objects.create_user("mover", password="x-123456789", is_staff=True)
    mover.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_order", "change_order"])
    )
    client = Client()
    client.force_login(mover)

    offered = client.get("/admin/ordering/order/").content.decode()
    assert 'value="move_to_accepted"' in offered and 'value="move_to_cancelled"' not in offered
    run_action(client, "/admin/ordering/order/", "move_to_cancelled", [mine.order.pk])
    assert Order.all_tenants.get(pk=mine.order.pk).status == S.PAID

    mover.user_permissions.add(Permission.objects.get(codename="cancel_order"))
    client.force_login(User.objects.get(pk=mover.pk))  # permissions are cached per user object
    run_action(client, "/admin/ordering/order/", "move_to_cancelled", [mine.order.pk])
    assert Order.all_tenants.get(pk=mine.order.pk).status == S.CANCELLING


def test_order_search_by_id(staff, mine, theirs):
    page = staff.get("/admin/ordering/order/", {"q": str(mine.order.pk)})
    assert [o.pk for o in page.context["cl"].result_list] == [mine.order.pk]
    assert staff.get("/admin/ordering/order/", {"q": "not-a-number"}).status_code == 200


# --- duplicate-hit audits ------------------------------------------------------------------


RAW_KEYS: dict[str, str] = {}  # keyed hash -> the key it was made from


def make_audit(tenant_key: str, outcome: str, key: str, days_ago: int = 0, **fields):
    """An audit as the engine writes it: the key kept as its keyed hash."""
    RAW_KEYS[keyed_digest(key)] = key
    return DuplicateAudit.objects.create(
        tenant_key=tenant_key,
        endpoint=fields.pop("endpoint", "POST api/v1/orders/"),
        key=keyed_digest(key),
        outcome=outcome,
        at=timezone.now() - timedelta(days=days_ago),
        **fields,
    )


@pytest.fixture
def audits(db) -> dict[str, DuplicateAudit]:
    return {
        "hit": make_audit("1", "HIT", "k-hit", resource_ref="/api/v1/orders/777/"),
        "reused": make_audit("1", "REUSED", "k-reused", differing_fields=["items"]),
        "old": make_audit(
            "2",
            "CONFLICT",
            "=cmd|' /C calc'!A0",
            days_ago=10,
            endpoint="POST dashboard/orders/<int:order_id>/transition/",
            resource_ref="=HYPERLINK(1)",
        ),
    }


def listed(staff: Client, **params: str) -> set[str]:
    page = staff.get("/admin/idempotency/duplicateaudit/", params)
    assert page.status_code == 200
    return {RAW_KEYS[a.key] for a in page.context["cl"].result_list}


def test_audit_list_filters_and_search(staff, audits):
    assert listed(staff) == {"k-hit", "k-reused", "=cmd|' /C calc'!A0"}
    assert listed(staff, outcome__exact="HIT") == {"k-hit"}
    assert listed(staff, tenant_key="2") == {"=cmd|' /C calc'!A0"}
    assert listed(staff, endpoint="POST api/v1/orders/") == {"k-hit", "k-reused"}
    since = (timezone.now() - timedelta(days=1)).isoformat()
    assert listed(staff, at__gte=since) == {"k-hit", "k-reused"}
    assert listed(staff, q="k-reused") == {"k-reused"}
    assert listed(staff, q="777") == {"k-hit"}  # by order, through resource_ref
    # the stored hash pasted from a row, whole or as the list shows it (red: nothing found)
    stored = audits["reused"].key
    assert listed(staff, q=stored) == {"k-reused"}
    assert listed(staff, q=f"{stored[:13]}…") == {"k-reused"}


def test_audit_lists_name_tenants_and_show_the_breakers_to_staff(staff, mine, theirs):
    from idempotency.stores.nodes import node_for, reset

    # a process that has used no Redis node yet does not say the engine runs without Redis
    # (it read "No Redis node used by this process yet, or none configured: the engine then
    # runs on the database alone" on a site with Redis)
    reset()
    fresh = staff.get("/admin/idempotency/duplicateaudit/").content.decode()
    assert "No Redis node used by this process yet: each is listed once" in fresh
    node_for(str(mine.tenant.pk))  # this process has used the tenant's Redis node
    make_audit(str(mine.tenant.pk), "HIT", "k-mine")
    make_audit(str(theirs.tenant.pk), "HIT", "k-theirs")
    page = staff.get("/admin/idempotency/duplicateaudit/")
    html = page.content.decode()
    rows = {RAW_KEYS[a.key]: a.tenant_label for a in page.context["cl"].result_list}
    assert rows == {"k-mine": mine.tenant.name, "k-theirs": theirs.tenant.name}
    assert f'?tenant_key={theirs.tenant.pk}"' in html and f">{theirs.tenant.name}</a>" in html
    assert page.context["engine_nodes"][0]["state"] == "closed"
    assert 'class="breaker-state">closed<' in html


def test_audit_rows_are_read_only(staff, audits):
    url = f"/admin/idempotency/duplicateaudit/{audits['hit'].pk}/change/"
    page = staff.get(url)
    assert page.status_code == 200 and 'name="key"' not in page.content.decode()
    assert staff.post(url, {"key": "changed"}).status_code == 403
    assert staff.get("/admin/idempotency/duplicateaudit/add/").status_code == 403
    assert staff.post(url.replace("change", "delete"), {"post": "yes"}).status_code == 403
    assert DuplicateAudit.objects.get(pk=audits["hit"].pk).key == keyed_digest("k-hit")


def test_mark_reviewed_asks_for_a_note_then_applies_it(staff, audits):
    pks = [audits["hit"].pk, audits["reused"].pk]
    confirm = run_action(staff, "/admin/idempotency/duplicateaudit/", "mark_reviewed", pks)
    assert confirm.status_code == 200 and b"Resolution note" in confirm.content
    assert not DuplicateAudit.objects.filter(reviewed=True).exists()

    empty = run_action(staff, "/admin/idempotency/duplicateaudit/", "mark_reviewed", pks, apply="1")
    assert empty.status_code == 200 and not DuplicateAudit.objects.filter(reviewed=True).exists()

    done = run_action(
        staff,
        "/admin/idempotency/duplicateaudit/",
        "mark_reviewed",
        pks,
        apply="1",
        resolution_note="Client retried after a timeout; one order, as it should be.",
    )
    assert done.status_code == 302
    reviewed = DuplicateAudit.objects.filter(reviewed=True)
    assert {a.pk for a in reviewed} == set(pks)
    assert {(a.reviewed_by, a.resolution_note[:14]) for a in reviewed} == {
        ("root", "Client retried")
    }
    assert DuplicateAudit.objects.get(pk=audits["old"].pk).reviewed is False
    # a second run keeps the first review (red when it overwrites the reviewer and the note)
    again = run_action(
        staff,
        "/admin/idempotency/duplicateaudit/",
        "mark_reviewed",
        [*pks, audits["old"].pk],
        apply="1",
        resolution_note="Looked again.",
    )
    assert again.status_code == 302
    notes = dict(DuplicateAudit.objects.values_list("pk", "resolution_note"))
    assert {notes[pk][:14] for pk in pks} == {"Client retried"}
    assert notes[audits["old"].pk] == "Looked again."
    shown = staff.get(again["Location"]).content.decode()
    assert "1 audit(s) marked reviewed." in shown and "2 were reviewed already" in shown


def test_mark_reviewed_needs_the_change_permission(audits):
    viewer = User.objects.create_user("viewer", password="x-123456789", is_staff=True)
    from django.contrib.auth.models import Permission

    viewer.user_permissions.add(Permission.objects.get(codename="view_duplicateaudit"))
    client = Client()
    client.force_login(viewer)
    page = client.get("/admin/idempotency/duplicateaudit/")
    assert page.status_code == 200
    actions = [name for name, _ in page.context["action_form"].fields["action"].choices]
    assert "mark_reviewed" not in actions and "export_csv" in actions


def test_csv_export_has_every_column_and_defuses_formulas(staff, audits):
    r = run_action(
        staff, "/admin/idempotency/duplicateaudit/", "export_csv", [a.pk for a in audits.values()]
    )
    assert r.status_code == 200 and r["Content-Type"].startswith("text/csv")
    assert r["Content-Disposition"].startswith('attachment; filename="duplicate-audits-')
    rows = list(csv.DictReader(io.StringIO(r.content.decode())))
    keys = ["=cmd|' /C calc'!A0", "k-hit", "k-reused"]
    assert [row["key"] for row in rows] == [keyed_digest(k) for k in keys]  # never the key
    assert rows[0]["resource_ref"] == "'=HYPERLINK(1)"  # a formula, defused
    assert rows[2]["differing_fields"] == "items" and rows[1]["resource_ref"].endswith("777/")


# --- idempotency records, tenants, API clients -------------------------------------------


def test_idempotency_records_are_read_only(staff):
    now = timezone.now()
    rec = IdempotencyRecord.objects.create(
        tenant_key="1",
        scope="s",
        key="k",
        fingerprint="f" * 64,
        response_status=201,
        response_body=b'{"id": "1"}',
        created_at=now,
        expires_at=now + timedelta(hours=1),
    )
    url = f"/admin/idempotency/idempotencyrecord/{rec.pk}/change/"
    page = staff.get(url)
    assert page.status_code == 200 and "{&quot;id&quot;: &quot;1&quot;}" in page.content.decode()
    assert staff.post(url, {"key": "x"}).status_code == 403
    assert staff.get("/admin/idempotency/idempotencyrecord/add/").status_code == 403


def test_api_clients_can_be_revoked_but_not_added_or_shown(staff, mine):
    page = staff.get(f"/admin/tenants/apiclient/{mine.api_client.pk}/change/")
    assert page.status_code == 200
    assert mine.api_client.secret_hash not in page.content.decode()
    assert staff.get("/admin/tenants/apiclient/add/").status_code == 403
    run_action(staff, "/admin/tenants/apiclient/", "revoke", [mine.api_client.pk])
    assert ApiClient.objects.get(pk=mine.api_client.pk).revoked_at is not None


def test_an_api_client_s_kind_and_flags_cannot_be_edited(staff, mine):
    # a publishable key ships in every diner's app: made a merchant's key, it would list and
    # move the restaurant's orders
    url = f"/admin/tenants/apiclient/{mine.api_client.pk}/change/"
    staff.post(url, {"name": "renamed", "kind": ApiClient.Kind.MERCHANT, "is_test": "on"})
    key = ApiClient.objects.get(pk=mine.api_client.pk)
    assert (key.kind, key.is_test, key.name) == (
        ApiClient.Kind.PUBLISHABLE,
        False,
        mine.api_client.name,
    )


@pytest.mark.parametrize("name", ["\u3164", "Pizza \u202e99.5"])
def test_staff_cannot_give_a_dish_a_name_that_reads_otherwise(staff, mine, name):
    pizza = mine.dishes["pizza"]
    answer = staff.post(
        f"/admin/ordering/dish/{pizza.pk}/change/",
        {"name": name, "description": "", "price": "9.00", "active": "on"},
    )
    assert answer.status_code == 200 and "name" in answer.context["adminform"].form.errors
    pizza.refresh_from_db()
    assert pizza.name != name


@pytest.mark.parametrize("action", ["suspend", "reactivate"])
def test_a_suspension_or_reactivation_in_the_admin_reaches_the_api_at_once(staff, mine, action):
    # given the key's tenant read (and cached) by this process in its current status
    if action == "reactivate":
        Tenant.objects.filter(pk=mine.tenant.pk).update(status=Tenant.Status.SUSPENDED)
    before, after = (200, 403) if action == "suspend" else (403, 200)
    _, raw_key = issue_api_key(tenant=mine.tenant, name="diner app")
    api = Client(HTTP_AUTHORIZATION=f"Api-Key {raw_key}")
    assert api.get("/api/v1/menu/").status_code == before
    # when staff change its status, then the next request sees it (it kept the cached status
    # for a minute)
    run_action(staff, "/admin/tenants/tenant/", action, [mine.tenant.pk])
    assert api.get("/api/v1/menu/").status_code == after


@pytest.mark.parametrize(
    "url",
    [
        "/admin/ordering/order/?status__exact=%00",
        "/admin/ordering/order/?payment_method__exact=%00",
        "/admin/idempotency/duplicateaudit/?outcome__exact=%00",
        "/admin/ordering/deadletter/?state__exact=%00",
        "/admin/ordering/providerconflict/?kind__exact=%00",
        "/admin/tenants/apiclient/?kind__exact=%00",
        "/admin/tenants/apiclient/?k%00ind=x",
    ],
)
def test_a_nul_in_a_list_filter_is_a_400_not_a_500(staff, mine, url):
    # PostgreSQL refuses NUL in text: the filter failed in the database (red: 500)
    staff.raise_request_exception = False
    answer = staff.get(url)
    assert answer.status_code == 400 and b"NUL" in answer.content


@pytest.mark.parametrize("selected", ["abc", "1 OR 1=1", "\x00", "1e3"])
def test_an_admin_action_on_rows_that_are_not_keys_is_a_400(staff, mine, selected):
    # Django's admin converted them to the key's type and failed: a 500
    staff.raise_request_exception = False
    answer = run_action(staff, "/admin/tenants/tenant/", "suspend", [selected])
    assert answer.status_code == 400 and b"not rows of this list" in answer.content
    assert Tenant.objects.get(pk=mine.tenant.pk).status == Tenant.Status.ACTIVE


def test_every_model_the_admin_lists_has_an_integer_or_uuid_key():
    # what the guard of admin actions' selected rows relies on (config/request_limits.py)
    from django.contrib import admin
    from django.db import models

    kinds = (models.AutoField, models.BigAutoField, models.BigIntegerField, models.IntegerField)
    for model in admin.site._registry:
        key = model._meta.pk
        assert isinstance(key, (*kinds, models.UUIDField)), (model, key)


def test_tenants_list_counts_members_and_keys_and_can_suspend(staff, mine, theirs):
    page = staff.get("/admin/tenants/tenant/")
    rows = {t.slug: (t.member_count, t.active_key_count) for t in page.context["cl"].result_list}
    assert rows == {"alpha": (1, 1), "beta": (1, 1)}
    run_action(staff, "/admin/tenants/tenant/", "suspend", [theirs.tenant.pk])
    assert Tenant.objects.get(pk=theirs.tenant.pk).status == Tenant.Status.SUSPENDED
    assert staff.get("/admin/tenants/membership/").status_code == 200


def test_without_the_tenant_labels_hook_the_admin_shows_tenant_keys(staff, settings, mine):
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "TENANT_LABELS": None}
    make_audit(str(mine.tenant.pk), "HIT", "k-plain")
    page = staff.get("/admin/idempotency/duplicateaudit/")
    assert [a.tenant_label for a in page.context["cl"].result_list] == [str(mine.tenant.pk)]


def departed_ramen(mine) -> int:
    """The id of "ramen", a restaurant that left (its offboarding done, its row gone)."""
    gone = mine.tenant.pk + 1000
    TenantOffboarding.objects.create(
        tenant_ref=gone,
        tenant_slug="ramen",
        phase=TenantOffboarding.Phase.DONE,
        export_path="/tmp/ramen.zip",
        requested_by="staff:ops",
    )
    return gone


def test_the_audits_of_a_restaurant_that_left_name_it_by_its_slug(staff, mine):
    """A capture reported after a restaurant left is audited under its id, the tenant gone:
    the list and its tenant filter showed a bare number ("3") that named nothing staff could
    look up; they name the restaurant as its offboarding and its departed payments do."""
    gone = departed_ramen(mine)
    make_audit(str(gone), "CONFLICT", "k-late", endpoint="POST api/v1/payments/callback/")
    make_audit(str(mine.tenant.pk), "HIT", "k-mine")

    page = staff.get("/admin/idempotency/duplicateaudit/")

    labels = {a.tenant_key: a.tenant_label for a in page.context["cl"].result_list}
    assert labels == {str(gone): "ramen (offboarded)", str(mine.tenant.pk): mine.tenant.name}
    (tenant_filter,) = [f for f in page.context["cl"].filter_specs if f.title == "tenant"]
    assert (str(gone), "ramen (offboarded)") in tenant_filter.lookup_choices


def test_an_audit_s_page_and_its_review_name_its_restaurant(staff, mine):
    """The list names each audit's restaurant; the audit's own page and the page confirming
    its review showed the bare tenant key ("1", "3"), which named nothing, a restaurant that
    left least of all."""
    gone = departed_ramen(mine)
    late = make_audit(str(gone), "CONFLICT", "k-late", endpoint="POST api/v1/payments/callback/")
    ours = make_audit(str(mine.tenant.pk), "HIT", "k-mine")

    page = staff.get(f"/admin/idempotency/duplicateaudit/{late.pk}/change/").content.decode()
    confirm = run_action(
        staff, "/admin/idempotency/duplicateaudit/", "mark_reviewed", [late.pk, ours.pk]
    ).content.decode()

    assert "ramen (offboarded)" in page and "Tenant key:" not in page
    assert "<td>ramen (offboarded)</td>" in confirm
    assert f"<td>{mine.tenant.name}</td>" in confirm


def test_an_action_over_orders_of_a_restaurant_being_offboarded_moves_the_others(
    staff, mine, theirs
):
    # given a paid order of each restaurant, the second's offboarding begun (its rows fenced)
    Tenant.objects.filter(pk=theirs.tenant.pk).update(status=Tenant.Status.OFFBOARDING)
    # when staff accept both
    r = run_action(
        staff, "/admin/ordering/order/", "move_to_accepted", [mine.order.pk, theirs.order.pk]
    )
    # then the first is moved and the leaving restaurant's left as it was, both told
    assert r.status_code == 302
    statuses = dict(Order.all_tenants.values_list("pk", "status"))
    assert statuses == {mine.order.pk: S.ACCEPTED, theirs.order.pk: S.PAID}
    notices = [str(m) for m in staff.get("/admin/ordering/order/").context["messages"]]
    assert "Accept: 1 order(s) moved." in notices
    assert f"Accept: not allowed for {theirs.order.pk} (its restaurant is being offboarded)" in (
        notices
    )


def test_a_change_form_of_a_restaurant_being_offboarded_is_a_409_saving_nothing(
    staff, mine, theirs
):
    # given a dish of a restaurant whose offboarding has begun
    Tenant.objects.filter(pk=theirs.tenant.pk).update(status=Tenant.Status.OFFBOARDING)
    dish = theirs.dishes["pasta"]
    # when staff save its change form, then it is a 409 saying why, and nothing was saved
    staff.raise_request_exception = False
    r = staff.post(
        f"/admin/ordering/dish/{dish.pk}/change/",
        {"name": "Renamed", "description": "", "price": "1.00", "active": "on"},
    )
    assert r.status_code == 409
    assert "Restaurant being offboarded" in r.content.decode()
    assert Dish.all_tenants.get(pk=dish.pk).name == dish.name


@contextmanager
def done_after_the_admin_read(row: Model, act: Callable[[], object]) -> Iterator[None]:
    """Within the block, once this thread (the admin's request) has read ``row``, ``act`` is
    done and committed on another connection (a ``post_init`` receiver): a change made
    between the admin reading a row and the end of its save."""
    done: list[object] = []
    admin_thread = threading.get_ident()

    def act_once(sender: type, instance: Model, **kwargs: object) -> None:
        if done or threading.get_ident() != admin_thread or instance.pk != row.pk:
            return

        def other_connection() -> None:
            try:
                done.append(act())
            finally:
                connection.close()

        worker = threading.Thread(target=other_connection)
        worker.start()
        worker.join(timeout=30)
        assert done, "the change meanwhile was not made"

    post_init.connect(act_once, sender=type(row))
    try:
        yield
    finally:
        post_init.disconnect(act_once, sender=type(row))


@pytest.mark.django_db(transaction=True)
def test_a_dish_saved_in_the_admin_keeps_the_portions_orders_took_meanwhile(staff, mine):
    """Red before: the admin saved every column of the dish as it had read it, stock
    included (read-only on the form), so an order placed between that read and the save got
    its portion back on the menu: one more portion sold than the kitchen had."""
    pizza = mine.dishes["pizza"]
    pizza.refresh_from_db()
    portions = pizza.stock
    with done_after_the_admin_read(pizza, lambda: make_order(mine.tenant, pizza, status=S.CREATED)):
        answer = staff.post(
            f"/admin/ordering/dish/{pizza.pk}/change/",
            {"name": "Pizza", "description": "", "price": "11.00", "active": "on"},
        )
    assert answer.status_code == 302
    pizza.refresh_from_db()
    assert (pizza.price, pizza.stock) == (Decimal("11.00"), portions - 1)


@pytest.mark.django_db(transaction=True)
def test_a_coupon_saved_in_the_admin_keeps_the_uses_orders_took_meanwhile(staff, mine):
    """Red before: the admin saved the coupon whole as it had read it, its use count included
    (read-only on the form), so an order using it between that read and the save was not
    counted: one more use than the coupon's limit could be taken."""
    coupon = Coupon.objects.for_tenant(mine.tenant).create(
        tenant=mine.tenant, code="TEN", kind=Coupon.Kind.PERCENT, value=Decimal("10"), max_uses=2
    )
    pizza = mine.dishes["pizza"]

    def order_with_the_coupon() -> Order:
        return place_order(
            tenant=mine.tenant,
            items=[ItemRequest(dish_id=pizza.pk, quantity=1)],
            payment_method="card",
            coupon_code="TEN",
            diner_id="diner-2",
            actor="test",
        )

    with done_after_the_admin_read(coupon, order_with_the_coupon):
        answer = staff.post(
            f"/admin/ordering/coupon/{coupon.pk}/change/",
            {"kind": "percent", "value": "15", "max_uses": "2", "active": "on"},
        )
    assert answer.status_code == 302
    coupon.refresh_from_db()
    assert (coupon.value, coupon.used_count) == (Decimal("15.00"), 1)


@pytest.mark.django_db(transaction=True)
def test_an_api_key_saved_in_the_admin_stays_revoked_when_revoked_meanwhile(staff, mine):
    """Red before: every field of a key is read-only in the admin, yet its Save wrote the row
    back as the POST had read it, ``revoked_at`` included: a key its owner revoked on the
    dashboard at that moment was live again, and went on opening sessions."""
    _, raw_key = issue_api_key(tenant=mine.tenant, name="leaked app key")
    key = ApiClient.objects.get(prefix=raw_key.split(".")[0])
    with done_after_the_admin_read(
        key, lambda: revoke_api_key(client=ApiClient.objects.get(pk=key.pk))
    ):
        answer = staff.post(f"/admin/tenants/apiclient/{key.pk}/change/", {"_save": "Save"})
    assert answer.status_code == 302
    key.refresh_from_db()
    assert key.revoked_at is not None
    api = Client(HTTP_AUTHORIZATION=f"Api-Key {raw_key}")
    assert api.get("/api/v1/menu/").json()["code"] == "API_KEY_INVALID"


@pytest.mark.django_db(transaction=True)
def test_a_diner_session_saved_in_the_admin_stays_ended_when_ended_meanwhile(staff, mine):
    """Red before: a session's fields are all read-only in the admin, yet its Save wrote the
    row back as the POST had read it, ``revoked_at`` included: a diner who signed out at that
    moment (or whose sessions were ended) was signed in again."""
    merchant, _ = issue_api_key(tenant=mine.tenant, name="backend", kind=ApiClient.Kind.MERCHANT)
    issued = open_session(client=merchant, diner_id="alice")
    session = DinerSession.objects.get(pk=issued.session_id)
    with done_after_the_admin_read(session, lambda: end_sessions(session_ids=[session.pk])):
        answer = staff.post(f"/admin/tenants/dinersession/{session.pk}/change/", {"_save": "Save"})
    assert answer.status_code == 302
    assert DinerSession.objects.get(pk=session.pk).revoked_at is not None
    api = Client(HTTP_AUTHORIZATION=f"Bearer {issued.token}")
    assert api.get("/api/v1/orders/").json()["code"] == "SESSION_REVOKED"
