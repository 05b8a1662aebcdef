"""What each dashboard page shows and does, for a merchant of one tenant."""

from __future__ import annotations

import re
import threading
from datetime import UTC, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.contrib.staticfiles import finders
from django.core.exceptions import ValidationError
from django.db import connection
from django.templatetags.static import static
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import resolve
from django.utils import timezone

from idempotency.audit import AuditEvent, save_events
from idempotency.core.hashing import keyed_digest
from idempotency.models import DuplicateAudit, IdempotencyRecord
from ordering.dashboard import api_keys as api_keys_views
from ordering.dashboard import tenant as tenant_views
from ordering.dashboard.idempotency_page import request_name
from ordering.dashboard.orders import merchant_moves
from ordering.lifecycle_diagram import PNG_PATH
from ordering.models import Coupon, Dish, Order, OrderStatus, OrderTransition
from ordering.services.lifecycle import transition_order
from ordering.services.payments import pay_order
from tenants.api_keys import authenticate_api_key
from tenants.models import ApiClient, Tenant
from tests.dashboard.conftest import form_token, make_order
from tests.support.django_child import run_with_environment
from tests.support.paying_flips import STATES, paying_flips

pytestmark = pytest.mark.django_db
S = OrderStatus


def post_form(client, url, data, page_url=None):
    """Submit the form as a browser would: with the token of a freshly rendered page."""
    token = form_token(client.get(page_url or url).content.decode())
    return client.post(url, {**data, "idempotency_key": token})


# --- board -------------------------------------------------------------------------------


def test_board_groups_orders_by_status_and_polls_a_fragment(merchant, mine, order_in):
    created = order_in(mine.tenant, mine.dishes["pasta"], S.CREATED, quantity=3)
    page = merchant.get("/dashboard/")
    html = page.content.decode()
    assert page.status_code == 200
    columns = page.context["columns"]
    assert [o.pk for o in columns[S.PAID]] == [mine.order.pk]
    assert [o.pk for o in columns[S.CREATED]] == [created.pk]
    assert list(columns) == S.values  # every status has a column, in lifecycle order
    assert 'data-refresh-url="/dashboard/board/fragment/"' in html
    assert "3\u00d7 Pasta" in html

    fragment = merchant.get("/dashboard/board/fragment/")
    assert fragment.status_code == 200 and fragment["Cache-Control"] == "no-store"
    assert f'data-order-id="{created.pk}"' in fragment.content.decode()
    assert "<html" not in fragment.content.decode()


def test_board_refresh_interval_is_a_setting(merchant, mine, settings):
    settings.DASHBOARD_REFRESH_SECONDS = 1
    assert 'data-refresh-ms="1000"' in merchant.get("/dashboard/").content.decode()


@pytest.mark.parametrize(
    ("environment", "read"),
    [
        pytest.param({}, "5.0", id="default-5-s"),
        pytest.param({"DASHBOARD_REFRESH_SECONDS": "15"}, "15.0", id="set-15-s"),
        pytest.param({"DASHBOARD_REFRESH_SECONDS": "0"}, "refused", id="0-refused"),
        pytest.param({"DASHBOARD_REFRESH_SECONDS": "soon"}, "refused", id="not-a-number"),
    ],
)
def test_board_refresh_interval_is_read_from_the_environment(environment, read):
    """README names DASHBOARD_REFRESH_SECONDS beside the settings an operator sets in the
    environment; the view read it with getattr and nothing set it, so it could not be
    changed without editing config/settings.py."""
    code = (
        "import django\n"
        "from django.core.exceptions import ImproperlyConfigured\n"
        "try:\n"
        "    django.setup()\n"
        "except ImproperlyConfigured:\n"
        "    print('refused')\n"
        "else:\n"
        "    from django.conf import settings\n"
        "    print(float(settings.DASHBOARD_REFRESH_SECONDS))\n"
    )
    done = run_with_environment(code, environment, unset=("DASHBOARD_REFRESH_SECONDS",))
    assert done.stdout.split()[-1:] == [read], done.stderr


# --- order page ----------------------------------------------------------------------------

ALLOWED = {
    S.CREATED: [S.CANCELLED],
    S.PAYING: [S.CANCELLED],
    S.PAID: [S.ACCEPTED, S.CANCELLED],
    S.ACCEPTED: [S.PREPARING, S.CANCELLED],
    S.PREPARING: [S.READY, S.CANCELLED],
    S.READY: [S.DELIVERING, S.CANCELLED],
    S.DELIVERING: [S.COMPLETED],
    S.COMPLETED: [],
    S.CANCELLING: [],  # the refund saga finishes it, not the merchant
    S.CANCELLED: [],
}


@pytest.mark.parametrize("status", list(ALLOWED), ids=str)
def test_order_page_offers_only_the_moves_allowed_now(merchant, mine, status):
    order = make_order(mine.tenant, mine.dishes["pizza"], status)
    page = merchant.get(f"/dashboard/orders/{order.pk}/")
    assert page.status_code == 200
    assert [m.target for m in page.context["moves"]] == ALLOWED[status]
    html = page.content.decode()
    for target in S.values:
        shown = f'name="to" value="{target}"' in html
        assert shown == (target in ALLOWED[status]), target


def test_order_page_shows_lines_payment_and_log(merchant, mine):
    page = merchant.get(f"/dashboard/orders/{mine.order.pk}/")
    html = page.content.decode()
    assert "Pizza" in html and "9.50" in html
    assert "simulated" in html and "Pending" in html  # the payment row
    assert [(t.from_status, t.to_status) for t in page.context["transitions"]] == [
        ("", S.CREATED),
        (S.CREATED, S.PAYING),
        (S.PAYING, S.PAID),
    ]
    assert html.count('class="log-entry"') == 3


def test_order_page_says_an_order_that_costs_nothing_needs_no_payment(merchant, mine):
    # given an order of a free dish, paid (settled without a payment)
    free = Dish.objects.for_tenant(mine.tenant).create(
        tenant=mine.tenant, name="Water", price=Decimal("0.00"), stock=5
    )
    order = make_order(mine.tenant, free, S.CREATED)
    pay_order(tenant=mine.tenant, order_id=order.pk, actor="test")
    # then its page says why there is no payment, where an unpaid order's says none came yet
    html = merchant.get(f"/dashboard/orders/{order.pk}/").content.decode()
    assert "No payment needed: the order costs nothing." in html
    unpaid = make_order(mine.tenant, mine.dishes["pizza"], S.CREATED)
    assert "No payment yet." in merchant.get(f"/dashboard/orders/{unpaid.pk}/").content.decode()


def test_order_page_shows_how_to_reach_the_diner(merchant, mine):
    Order.all_tenants.filter(pk=mine.order.pk).update(
        contact_phone="+39 06 1234567", delivery_address="\u202eVia Roma 1", note="ring"
    )
    html = merchant.get(f"/dashboard/orders/{mine.order.pk}/").content.decode()
    # each isolated from the page's text direction: a right-to-left override a diner typed
    # reorders its own value only (red: the bare value)
    assert '<dt>Phone</dt><dd><bdi class="diner-text">+39 06 1234567</bdi></dd>' in html
    assert '<dt>Deliver to</dt><dd><bdi class="diner-text">\u202eVia Roma 1</bdi></dd>' in html
    assert '<strong>Note:</strong> <bdi class="diner-text">ring</bdi>' in html


def test_order_page_shows_the_short_number_and_times_in_the_tenants_zone(merchant, mine):
    mine.tenant.time_zone = "Asia/Tokyo"
    mine.tenant.save()
    html = merchant.get(f"/dashboard/orders/{mine.order.pk}/").content.decode()
    assert f'<span class="order-number">{mine.order.number_label}</span>' in html
    tokyo = timezone.localtime(mine.order.created_at, ZoneInfo("Asia/Tokyo"))
    assert f"{tokyo:%Y-%m-%d %H:%M:%S} JST" in html
    board = merchant.get("/dashboard/").content.decode()
    assert f'<span class="order-number">{mine.order.number_label}</span>' in board


def test_order_page_shows_the_lifecycle_diagram(merchant, mine):
    html = merchant.get(f"/dashboard/orders/{mine.order.pk}/").content.decode()
    src = re.search(r'<img class="lifecycle" src="([^"]+)"', html)
    assert src and src[1] == static("dashboard/order-lifecycle.png")
    assert finders.find("dashboard/order-lifecycle.png") == str(PNG_PATH)


def test_accept_moves_the_order_once_and_logs_the_merchant(merchant, mine):
    url = f"/dashboard/orders/{mine.order.pk}/"
    r = post_form(merchant, url + "transition/", {"to": S.ACCEPTED}, page_url=url)
    assert r.status_code == 302 and r["Location"] == url
    assert Order.all_tenants.get(pk=mine.order.pk).status == S.ACCEPTED
    last = OrderTransition.all_tenants.filter(order=mine.order).last()
    assert (last.to_status, last.actor) == (S.ACCEPTED, "merchant:alice")
    page = merchant.get(url)
    html = page.content.decode()
    assert f"Order {mine.order.number_label} is now ACCEPTED." in html
    assert "by alice (dashboard)</span>" in html  # the log says who, in words
    assert [m.target for m in page.context["moves"]] == [S.PREPARING, S.CANCELLED]


def test_cancel_of_a_paid_order_starts_the_refund(merchant, mine):
    url = f"/dashboard/orders/{mine.order.pk}/"
    r = post_form(merchant, url + "transition/", {"to": S.CANCELLED}, page_url=url)
    assert r.status_code == 302
    assert Order.all_tenants.get(pk=mine.order.pk).status == S.CANCELLING


def test_a_move_made_meanwhile_in_another_tab_is_refused_and_audited(merchant, mine):
    url = f"/dashboard/orders/{mine.order.pk}/"
    tab_1 = form_token(merchant.get(url).content.decode())
    tab_2 = form_token(merchant.get(url).content.decode())
    merchant.post(url + "transition/", {"to": S.ACCEPTED, "idempotency_key": tab_1})
    r = merchant.post(url + "transition/", {"to": S.ACCEPTED, "idempotency_key": tab_2})
    assert r.status_code == 302
    assert OrderTransition.all_tenants.filter(order=mine.order, to_status=S.ACCEPTED).count() == 1
    assert (
        f"Order {mine.order.number_label} is ACCEPTED already (moved in another tab, or by a "
        "colleague); nothing more was done."
    ) in merchant.get(url).content.decode()
    from idempotency.stores.audit_stream import drain_audits

    drain_audits()
    [conflict] = DuplicateAudit.objects.filter(outcome="CONFLICT")
    assert conflict.key == keyed_digest(tab_2) and conflict.resource_ref == url
    assert conflict.tenant_key == str(mine.tenant.pk)


@pytest.mark.parametrize(
    ("first", "then", "said"),
    [
        (S.CANCELLED, S.CANCELLED, "is CANCELLING already (moved in another tab"),
        (S.PREPARING, S.ACCEPTED, "Not applied: A move to ACCEPTED is not allowed from PREPARING"),
    ],
    ids=["cancelled-twice", "accepted-after-preparing"],
)
def test_a_stale_tab_s_move_says_whether_the_order_is_there_already(
    merchant, mine, first, then, said
):
    """Tab 2, left open on a paid order, cancels it after tab 1 did: the order is cancelling,
    the refund running once, and tab 2 is told so (red: "Not applied: A move to CANCELLING
    is not allowed from CANCELLING", as if the cancel had failed). A move the order went past
    is still refused in those words."""
    url = f"/dashboard/orders/{mine.order.pk}/"
    tab_1 = form_token(merchant.get(url).content.decode())
    tab_2 = form_token(merchant.get(url).content.decode())
    if first == S.PREPARING:
        transition_order(tenant=mine.tenant, order_id=mine.order.pk, target=S.ACCEPTED, actor="t")
    merchant.post(url + "transition/", {"to": first, "idempotency_key": tab_1})
    merchant.get(url)  # tab 1's landing
    r = merchant.post(url + "transition/", {"to": then, "idempotency_key": tab_2})

    assert r.status_code == 302 and r["Location"] == url
    assert said in merchant.get(url).content.decode()
    moves = OrderTransition.all_tenants.filter(order=mine.order, to_status=then)
    assert moves.count() == (1 if then == S.ACCEPTED else 0)
    if then == S.CANCELLED:
        assert Order.all_tenants.get(pk=mine.order.pk).status in (S.CANCELLING, S.CANCELLED)
        assert (
            OrderTransition.all_tenants.filter(order=mine.order, to_status=S.CANCELLING).count()
            == 1
        )


def test_unknown_move_changes_nothing(merchant, mine):
    url = f"/dashboard/orders/{mine.order.pk}/"
    r = post_form(merchant, url + "transition/", {"to": "PAID"}, page_url=url)
    assert r.status_code == 302
    assert Order.all_tenants.get(pk=mine.order.pk).status == S.PAID


def test_merchant_moves_match_the_fsm_for_a_paid_order(mine):
    assert [m.label for m in merchant_moves(mine.order)] == ["Accept", "Cancel order"]


# --- menu ----------------------------------------------------------------------------------


def test_menu_lists_dishes_and_adds_one(merchant, mine):
    r = post_form(
        merchant,
        "/dashboard/menu/",
        {"name": " Risotto ", "price": "14.50", "stock": "12", "active": "on"},
    )
    assert r.status_code == 302 and r["Location"] == "/dashboard/menu/"
    dish = Dish.objects.for_tenant(mine.tenant).get(name="Risotto")
    assert (dish.price, dish.stock, dish.active) == (Decimal("14.50"), 12, True)
    html = merchant.get("/dashboard/menu/").content.decode()
    assert "Added Risotto." in html and "Pizza" in html


@pytest.mark.parametrize(
    "data, field",
    [
        pytest.param({"name": "Pizza", "price": "1", "stock": "1"}, "name", id="duplicate-name"),
        pytest.param({"name": "X", "price": "-1", "stock": "1"}, "price", id="negative-price"),
        pytest.param({"name": "X", "price": "1", "stock": "-2"}, "stock", id="negative-stock"),
        pytest.param(
            {"name": "X", "price": "1", "stock": "1", "description": "d" * 2001},
            "description",
            id="description-over-2000",
        ),
        pytest.param({"name": "\u200b", "price": "1", "stock": "1"}, "name", id="invisible"),
        pytest.param({"name": "\u2066 \u00ad", "price": "1", "stock": "1"}, "name", id="format"),
        pytest.param(
            {"name": "Pizza \u202e05.99", "price": "1", "stock": "1"}, "name", id="reversed"
        ),
    ],
)
def test_menu_refuses_bad_dishes(merchant, mine, data, field):
    r = post_form(merchant, "/dashboard/menu/", data)
    assert r.status_code == 400 and field in r.context["form"].errors
    assert Dish.objects.for_tenant(mine.tenant).count() == 2


def test_edit_dish_sets_price_stock_and_availability(merchant, mine):
    pizza = mine.dishes["pizza"]
    url = f"/dashboard/menu/{pizza.pk}/"
    seen = Dish.all_tenants.get(pk=pizza.pk).stock
    r = post_form(
        merchant, url, {"price": "10.00", "stock": "80", "stock_seen": str(seen), "active": ""}
    )
    assert r.status_code == 302
    pizza.refresh_from_db()
    assert (pizza.price, pizza.stock, pizza.active) == (Decimal("10.00"), 80, False)


def test_edit_dish_does_not_overwrite_stock_that_orders_took_meanwhile(merchant, mine):
    pizza = mine.dishes["pizza"]
    url = f"/dashboard/menu/{pizza.pk}/"
    page = merchant.get(url)
    seen = page.context["form"].initial["stock_seen"]
    make_order(mine.tenant, pizza, S.CREATED, quantity=5)  # an order lands while editing
    r = merchant.post(
        url,
        {
            "price": "11.00",
            "stock": "100",
            "stock_seen": seen,
            "active": "on",
            "idempotency_key": form_token(page.content.decode()),
        },
    )
    pizza.refresh_from_db()
    assert r.status_code == 400 and "Orders changed the stock to" in r.content.decode()
    assert (pizza.price, pizza.stock) == (Decimal("9.50"), seen - 5)  # nothing written
    assert r.context["form"]["stock_seen"].value() == seen - 5  # next save is deliberate


def test_edit_dish_keeps_stock_when_only_the_price_changes(merchant, mine):
    pizza = mine.dishes["pizza"]
    url = f"/dashboard/menu/{pizza.pk}/"
    page = merchant.get(url)
    seen = page.context["form"].initial["stock_seen"]
    make_order(mine.tenant, pizza, S.CREATED, quantity=5)
    r = merchant.post(
        url,
        {
            "price": "11.00",
            "stock": seen,
            "stock_seen": seen,
            "active": "on",
            "idempotency_key": form_token(page.content.decode()),
        },
    )
    pizza.refresh_from_db()
    assert r.status_code == 302 and (pizza.price, pizza.stock) == (Decimal("11.00"), seen - 5)


# --- coupons -------------------------------------------------------------------------------


def test_coupons_create_and_deactivate(merchant, mine):
    r = post_form(
        merchant,
        "/dashboard/coupons/",
        {"code": "summer-5", "kind": "percent", "value": "5", "max_uses": "10"},
    )
    assert r.status_code == 302
    coupon = Coupon.objects.for_tenant(mine.tenant).get(code="SUMMER-5")
    assert (coupon.kind, coupon.value, coupon.max_uses, coupon.active) == (
        "percent",
        Decimal("5"),
        10,
        True,
    )
    page = merchant.get("/dashboard/coupons/").content.decode()
    token = form_token(page[page.index(f'data-coupon-id="{coupon.pk}"') :])
    r = merchant.post(f"/dashboard/coupons/{coupon.pk}/deactivate/", {"idempotency_key": token})
    assert r.status_code == 302
    coupon.refresh_from_db()
    assert coupon.active is False


@pytest.mark.parametrize(
    "data, field",
    [
        pytest.param({"code": "C-ALICE", "kind": "amount", "value": "1"}, "code", id="duplicate"),
        pytest.param({"code": "BIG", "kind": "percent", "value": "120"}, "value", id="over-100%"),
        pytest.param({"code": "ZERO", "kind": "amount", "value": "0"}, "value", id="zero"),
        pytest.param({"code": "a b", "kind": "amount", "value": "1"}, "code", id="bad-code"),
        *(
            pytest.param(
                {"code": "END", "kind": "amount", "value": "1", "valid_until": end},
                "valid_until",
                id=f"ends-{name}",
            )
            for name, end in [
                ("year-9999", "9999-12-31T23:59"),
                ("year-1", "0001-01-01T00:00"),
                ("in-the-past", "2020-01-01T00:00"),
            ]
        ),
    ],
)
def test_coupons_refuse_bad_input(merchant, mine, data, field):
    r = post_form(merchant, "/dashboard/coupons/", data)
    assert r.status_code == 400 and field in r.context["form"].errors
    assert Coupon.objects.for_tenant(mine.tenant).count() == 1


def test_a_coupon_s_end_is_typed_and_shown_in_the_restaurant_s_time_zone(merchant, mine):
    Tenant.objects.filter(pk=mine.tenant.pk).update(time_zone="Europe/Rome")
    page = merchant.get("/dashboard/coupons/").content.decode()
    assert "Valid until (Europe/Rome)" in page and "(UTC)" not in page
    end = f"{timezone.now().year + 1}-07-01T23:30"
    data = {"code": "SUMMER", "kind": "amount", "value": "1", "valid_until": end}
    assert post_form(merchant, "/dashboard/coupons/", data).status_code == 302
    coupon = Coupon.objects.for_tenant(mine.tenant).get(code="SUMMER")
    # 23:30 in Rome in July is 21:30 UTC, and the list shows it as it was typed
    assert coupon.valid_until.astimezone(UTC).strftime("%H:%M") == "21:30"
    assert f"{end.replace('T', ' ')}</td>" in merchant.get("/dashboard/coupons/").content.decode()


def test_a_coupon_ending_near_the_calendar_s_end_is_refused_by_the_model_too(mine):
    """Whatever form writes it (the admin's too): the coupons page shows the end in the
    restaurant's zone, and a date within a day of year 9999 (or 1) cannot be (red without
    the model's validator: the dashboard's coupons page answered 500 for good)."""
    coupon = Coupon.objects.for_tenant(mine.tenant).get()
    coupon.valid_until = timezone.now().replace(year=9999, month=12, day=31)
    with pytest.raises(ValidationError, match="2000 to 2999"):
        coupon.full_clean()


# --- API keys ------------------------------------------------------------------------------


def test_api_key_is_shown_once_and_works(merchant, mine):
    r = post_form(merchant, "/dashboard/api-keys/", {"name": "Kiosk", "kind": "merchant"})
    issued = ApiClient.objects.get(tenant=mine.tenant, name="Kiosk")
    assert r.status_code == 302 and r["Location"] == f"/dashboard/api-keys/?issued={issued.pk}"
    first = merchant.get(r["Location"])
    key = first.context["new_key"]["key"]
    assert key in first.content.decode() and "will not be shown again" in first.content.decode()
    client = authenticate_api_key(key)
    assert client is not None and client.tenant == mine.tenant and client.kind == "merchant"
    again = merchant.get(r["Location"])  # a reload
    assert again.context["new_key"] is None and key not in again.content.decode()
    assert client.secret_hash not in again.content.decode()


@pytest.mark.parametrize(
    "name", ["\u200b\u200b", "Kiosk\u202e", "\u2067x", "\u3164", "\uffa0\u2800", "\u034f\ufe0f"]
)
def test_an_api_key_s_name_must_read_as_it_is_stored(merchant, mine, name):
    r = post_form(merchant, "/dashboard/api-keys/", {"name": name, "kind": "merchant"})
    assert r.status_code == 400 and "name" in r.context["form"].errors
    assert not ApiClient.objects.filter(tenant=mine.tenant, name=name).exists()


def test_a_dish_description_of_2000_characters_and_a_name_in_arabic_are_kept(merchant, mine):
    data = {"name": "\u0634\u0627\u0648\u0631\u0645\u0627", "price": "5", "stock": "1"}
    r = post_form(merchant, "/dashboard/menu/", {**data, "description": "d" * 2000})
    assert r.status_code == 302
    dish = Dish.objects.for_tenant(mine.tenant).get(name=data["name"])
    assert len(dish.description) == 2000


def test_api_key_revoke(merchant, mine):
    page = merchant.get("/dashboard/api-keys/").content.decode()
    token = form_token(page[page.index(f'data-client-id="{mine.api_client.pk}"') :])
    r = merchant.post(
        f"/dashboard/api-keys/{mine.api_client.pk}/revoke/", {"idempotency_key": token}
    )
    assert r.status_code == 302
    assert ApiClient.objects.get(pk=mine.api_client.pk).revoked_at is not None


def test_revoking_a_key_revoked_in_another_tab_says_it_was_revoked_already(merchant, mine):
    """Two tabs show the key's "Revoke" button; the second click changes nothing and must not
    report a revocation of its own."""

    def revoke_button() -> str:
        page = merchant.get("/dashboard/api-keys/").content.decode()
        return form_token(page[page.index(f'data-client-id="{mine.api_client.pk}"') :])

    url = f"/dashboard/api-keys/{mine.api_client.pk}/revoke/"
    first_tab, second_tab = revoke_button(), revoke_button()

    first = merchant.post(url, {"idempotency_key": first_tab}, follow=True)
    revoked_at = ApiClient.objects.get(pk=mine.api_client.pk).revoked_at
    second = merchant.post(url, {"idempotency_key": second_tab}, follow=True)

    prefix = mine.api_client.prefix
    assert f"Revoked key {prefix}" in first.content.decode()
    said = second.content.decode()
    assert f"Revoked key {prefix}" not in said
    assert f"Key {prefix} ({mine.api_client.name}) was revoked already" in said
    assert ApiClient.objects.get(pk=mine.api_client.pk).revoked_at == revoked_at


def test_a_key_issued_for_one_restaurant_is_not_shown_in_another(client, mine, theirs):
    from tenants.models import Membership

    Membership.objects.create(user=mine.user, tenant=theirs.tenant, role=Membership.Role.OWNER)
    client.force_login(mine.user)
    issued = post_form(client, "/dashboard/api-keys/", {"name": "Kiosk", "kind": "merchant"})
    post_form(client, "/dashboard/switch-tenant/", {"tenant_id": theirs.tenant.pk}, "/dashboard/")
    page = client.get(issued["Location"])
    assert page.context["request"].membership.tenant == theirs.tenant
    assert page.context["new_key"] is None


def test_a_key_opened_in_another_restaurant_is_still_shown_back_in_its_own(client, mine, theirs):
    """The issue's redirect loaded while another restaurant was current (switched in another
    tab) shows nothing there, and must not drop the key: back in its restaurant the same page
    shows it, once (red: it was taken out of the session unseen, a key never shown)."""
    from tenants.models import Membership

    Membership.objects.create(user=mine.user, tenant=theirs.tenant, role=Membership.Role.OWNER)
    client.force_login(mine.user)
    issued = post_form(client, "/dashboard/api-keys/", {"name": "Kiosk", "kind": "merchant"})
    post_form(client, "/dashboard/switch-tenant/", {"tenant_id": theirs.tenant.pk}, "/dashboard/")
    assert client.get(issued["Location"]).context["new_key"] is None
    post_form(client, "/dashboard/switch-tenant/", {"tenant_id": mine.tenant.pk}, "/dashboard/")

    shown = client.get(issued["Location"])

    assert shown.context["request"].membership.tenant == mine.tenant
    key = shown.context["new_key"]["key"]
    client_of_key = authenticate_api_key(key)
    assert client_of_key is not None and client_of_key.tenant == mine.tenant
    assert client.get(issued["Location"]).context["new_key"] is None  # once


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("held", ["issue", "show"])
def test_a_key_issued_in_another_tab_meanwhile_is_still_shown(mine, monkeypatch, held):
    """Two tabs of one browser session: the first tab's request (issuing a key, or showing
    one issued before) has read the session when the second tab issues a key; the first must
    not write back the keys it read over the second's (red: the second key's page showed
    nothing, a live secret key no one was ever shown). Threads with their own connections."""
    tab_a, tab_b = Client(), Client()
    tab_a.force_login(mine.user)
    tab_b.cookies = tab_a.cookies  # the same browser: one session
    earlier = post_form(tab_a, "/dashboard/api-keys/", {"name": "Earlier", "kind": "merchant"})
    a_form = form_token(tab_a.get("/dashboard/api-keys/").content.decode())
    a_has_read, b_is_done = threading.Event(), threading.Event()
    real_tenant_of = api_keys_views.tenant_of

    def held_tenant_of(request):  # the view's first step, once the session is read
        if threading.current_thread().name == "tab-a":
            a_has_read.set()
            assert b_is_done.wait(30)
        return real_tenant_of(request)

    monkeypatch.setattr(api_keys_views, "tenant_of", held_tenant_of)
    answers = {}

    def first_tab() -> None:
        try:
            if held == "issue":
                data = {"name": "Tab A", "kind": "merchant", "idempotency_key": a_form}
                answers["a"] = tab_a.post("/dashboard/api-keys/", data)
            else:
                answers["a"] = tab_a.get(earlier["Location"])
        finally:
            connection.close()

    thread = threading.Thread(target=first_tab, name="tab-a")
    thread.start()
    assert a_has_read.wait(30)
    issued_b = post_form(tab_b, "/dashboard/api-keys/", {"name": "Tab B", "kind": "merchant"})
    b_is_done.set()
    thread.join(30)

    shown_b = tab_b.get(issued_b["Location"]).context["new_key"]
    assert shown_b is not None and shown_b["name"] == "Tab B"
    assert authenticate_api_key(shown_b["key"]).name == "Tab B"
    if held == "issue":
        shown_a = tab_a.get(answers["a"]["Location"]).context["new_key"]
        assert shown_a is not None and shown_a["name"] == "Tab A"
    else:
        # by its page (the test client's context also caught the other tab's pages meanwhile)
        shown_a = re.search(r'id="new-key-value"[^>]* value="([^"]+)"', answers["a"].text)
        assert shown_a is not None and authenticate_api_key(shown_a[1]).name == "Earlier"
        assert tab_a.get(earlier["Location"]).context["new_key"] is None  # once
    assert tab_b.get(issued_b["Location"]).context["new_key"] is None  # once


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("held", ["switch", "issue"])
def test_a_key_issued_and_a_restaurant_switched_in_two_tabs_at_once_both_hold(
    mine, theirs, monkeypatch, held
):
    """One tab switches the restaurant while another issues a key, each request having read
    the session before the other wrote it: neither writes its older copy back over the other
    (red: the switch's request dropped the key, live and shown to no one). Threads with their
    own connections."""
    from tenants.models import Membership

    Membership.objects.create(user=mine.user, tenant=theirs.tenant, role=Membership.Role.OWNER)
    tab_a, tab_b = Client(), Client()
    tab_a.force_login(mine.user)
    tab_b.cookies = tab_a.cookies  # the same browser: one session
    a_has_read, b_is_done = threading.Event(), threading.Event()

    def hold(real):
        def held_step(*args, **kwargs):  # the views' first step once the session is read
            if threading.current_thread().name == "tab-a":
                a_has_read.set()
                assert b_is_done.wait(30)
            return real(*args, **kwargs)

        return held_step

    switch = {"tenant_id": theirs.tenant.pk}
    key = {"name": "Kiosk", "kind": "merchant"}
    if held == "switch":
        a_token = form_token(tab_a.get("/dashboard/").content.decode())
        monkeypatch.setattr(tenant_views, "switch_tenant", hold(tenant_views.switch_tenant))
        a_request = ("/dashboard/switch-tenant/", {**switch, "idempotency_key": a_token})
    else:
        a_token = form_token(tab_a.get("/dashboard/api-keys/").content.decode())
        monkeypatch.setattr(api_keys_views, "tenant_of", hold(api_keys_views.tenant_of))
        a_request = ("/dashboard/api-keys/", {**key, "idempotency_key": a_token})
    answers = {}

    def first_tab() -> None:
        try:
            answers["a"] = tab_a.post(*a_request)
        finally:
            connection.close()

    thread = threading.Thread(target=first_tab, name="tab-a")
    thread.start()
    assert a_has_read.wait(30)
    if held == "switch":
        b = post_form(tab_b, "/dashboard/api-keys/", key)
    else:
        b = post_form(tab_b, "/dashboard/switch-tenant/", switch, "/dashboard/")
    b_is_done.set()
    thread.join(30)
    issued = b if held == "switch" else answers["a"]

    assert tab_a.get("/dashboard/").context["request"].membership.tenant == theirs.tenant
    post_form(tab_a, "/dashboard/switch-tenant/", {"tenant_id": mine.tenant.pk}, "/dashboard/")
    shown = tab_a.get(issued["Location"]).context["new_key"]
    assert shown is not None and authenticate_api_key(shown["key"]).name == "Kiosk"


# --- idempotency page --------------------------------------------------------------------


def audit(tenant, outcome, at, **fields):
    """An outcome as the engine reports it: an audit row (but for MISS) and its count."""
    save_events(
        [
            AuditEvent(
                tenant_key=str(tenant.pk),
                endpoint=fields.pop("endpoint", "POST api/v1/orders/"),
                key=fields.pop("key", f"k-{outcome}-{at.timestamp()}"),
                outcome=outcome,
                source=fields.pop("source", "redis"),
                principal="user:1",
                at=at,
                **fields,
            )
        ]
    )


def record(tenant, key, at):
    """A first execution, counted."""
    audit(tenant, "MISS", at, key=key)


def test_idempotency_page_shows_repeats_refusals_and_their_orders_in_plain_words(
    merchant, mine, theirs
):
    now = timezone.now()
    two_hours_ago = now - timedelta(hours=2)
    for i in range(3):
        record(mine.tenant, f"first-{i}", two_hours_ago)
    order_ref = f"/api/v1/orders/{mine.order.pk}/"
    audit(mine.tenant, "HIT", two_hours_ago, resource_ref=order_ref, source="redis")
    audit(mine.tenant, "REUSED", now, differing_fields=["items", "note"], key="reused-key")
    audit(
        mine.tenant,
        "CONFLICT",
        now,
        key="conflict-key",
        endpoint="POST dashboard/orders/<int:order_id>/transition/",
    )
    audit(theirs.tenant, "HIT", now, key="their-secret-key")
    audit(theirs.tenant, "REUSED", now, key="their-reused-key")

    page = merchant.get("/dashboard/idempotency/")
    html = page.content.decode()
    assert page.status_code == 200
    ctx = page.context
    assert (ctx["hits"], ctx["first_executions"], ctx["hit_rate"]) == (1, 3, "25%")
    assert (ctx["refused"], ctx["stopped"]) == (1, 1)
    busy = [b for b in ctx["chart"].bars if b.rate_text]
    assert len(busy) == 1 and busy[0].rate_text == "25%"
    assert html.count('<rect class="bar-hit"') == 1 and html.count('<rect class="bar-first"') == 1
    assert "<svg" in html and 'role="img"' in html and "<script" not in html.split("<svg")[1]
    # orders by their short number, requests by what they did, outcomes in words
    hits_table = html.split('id="duplicate-hits"')[1].split("</table>")[0]
    assert f'<a href="/dashboard/orders/{mine.order.pk}/">Order {mine.order.number_label}</a>' in (
        hits_table
    )
    assert "Place an order (diner app)" in hits_table
    assert "Refused: same request key, different contents" in html and "items, note" in html
    assert "Move an order (dashboard)" in html
    assert "their-secret-key" not in html and "their-reused-key" not in html
    # no engine jargon for restaurant owners
    for word in ("Redis", "breaker", "api/v1", "reused-key", "HIT", "redis", "database"):
        assert word not in html.split("<main")[1], word


def test_a_payment_the_provider_reported_wrong_is_not_called_a_duplicate_and_links_its_order(
    merchant, mine
):
    """A callback's CONFLICT (another amount, an order cancelled or paid already) was not
    applied and is under review: not "already done elsewhere". Its audit names the order by
    its bare id, as ``ordering/payments/callbacks.py`` writes it."""
    audit(
        mine.tenant,
        "CONFLICT",
        timezone.now(),
        key="provider-event",
        source="database",
        endpoint="POST /api/v1/payments/callback/",
        resource_ref=str(mine.order.pk),
    )

    html = merchant.get("/dashboard/idempotency/").content.decode()
    problems = html.split('id="problems"')[1].split("</table>")[0]

    assert "Payment confirmation (payment provider)" in problems
    assert "Not applied: the payment provider reported what does not fit the order" in problems
    assert "already done elsewhere" not in problems
    assert (
        f'<a href="/dashboard/orders/{mine.order.pk}/">Order {mine.order.number_label}</a>'
        in problems
    )


def test_the_idempotency_page_names_its_orders_in_statements_that_do_not_grow_with_them(
    merchant, mine, order_in
):
    """Red: each order an audit names was read again for its status (the lifecycle's
    bookkeeping reads it when an order is built, and the page read only id and number), so
    the page sent two statements more per order linked: 70 for its 20 rows."""

    def statements_linking(orders: list[Order]) -> int:
        for order in orders:
            audit(mine.tenant, "HIT", timezone.now(), resource_ref=f"/api/v1/orders/{order.pk}/")
        with CaptureQueriesContext(connection) as sent:
            html = merchant.get("/dashboard/idempotency/").content.decode()
        for order in orders:
            assert f'<a href="/dashboard/orders/{order.pk}/">Order {order.number_label}</a>' in html
        return len(sent.captured_queries)

    more = [order_in(mine.tenant, mine.dishes["pizza"]) for _ in range(3)]
    assert statements_linking([mine.order]) == statements_linking(more)


def test_the_idempotency_page_reads_only_the_restaurant_s_own_audits_of_each_kind(
    merchant, mine, theirs
):
    """Red: the newest replays and the newest refusals were each read by walking the index of
    every restaurant's audits by time and dropping the other restaurants' and the other
    outcomes' rows, so a restaurant with no replay (or no refusal) had every audit of the
    platform read at each view of its page (100,000 audits read for none, 42 ms)."""
    now = timezone.now()
    for i in range(3):
        audit(theirs.tenant, "HIT", now - timedelta(minutes=i))
        audit(mine.tenant, "REUSED", now - timedelta(minutes=i))

    with CaptureQueriesContext(connection) as sent:
        assert merchant.get("/dashboard/idempotency/").status_code == 200
    reads = [q["sql"] for q in sent.captured_queries if "idempotency_duplicateaudit" in q["sql"]]
    assert len(reads) == 2  # the replays, the refusals
    with connection.cursor() as cursor:
        # a few rows: judge the plan's shape, as over a year of every restaurant's audits (the
        # restaurant's and the kind's rows alone, found by the index, none dropped after)
        for setting in ("enable_seqscan", "enable_bitmapscan"):
            cursor.execute(f"SET LOCAL {setting} = off")
        for sql in reads:
            cursor.execute(f"EXPLAIN {sql}")
            plan = "\n".join(row[0] for row in cursor.fetchall())
            assert "Filter" not in plan, plan


def test_idempotency_page_hours_are_in_the_tenants_zone(merchant, mine):
    mine.tenant.time_zone = "Asia/Kolkata"  # UTC+05:30: hours land on :30
    mine.tenant.save()
    page = merchant.get("/dashboard/idempotency/")
    assert {bar.label[-2:] for bar in page.context["chart"].bars} == {"30"}
    assert "(times in Asia/Kolkata)" in page.content.decode()


def test_every_state_changing_form_carries_a_one_time_token(merchant, mine):
    """Each render gets a fresh token; every POST form of every page carries one."""
    pages = [
        "/dashboard/",
        f"/dashboard/orders/{mine.order.pk}/",
        "/dashboard/menu/",
        f"/dashboard/menu/{mine.dishes['pizza'].pk}/",
        "/dashboard/coupons/",
        "/dashboard/api-keys/",
        "/dashboard/idempotency/",
    ]
    for url in pages:
        html = merchant.get(url).content.decode()
        forms = html.split('method="post"')[1:]
        for form in forms:
            body = form[: form.index("</form>")]
            if 'action="/dashboard/logout/"' in body:
                continue  # logging out twice is harmless and not tenant-scoped
            assert 'name="idempotency_key"' in body, (url, body[:200])
    assert form_token(merchant.get("/dashboard/menu/").content.decode()) != form_token(
        merchant.get("/dashboard/menu/").content.decode()
    )


def test_a_refused_coupon_form_is_stored_nowhere_and_its_correction_is_applied(merchant, mine):
    """The page of a refused form holds the user's CSRF token: it was kept as the form
    token's answer, readable by staff who may see stored bodies, and the corrected form, sent
    with the same token, was refused as the token reused with other values."""
    token = form_token(merchant.get("/dashboard/coupons/").content.decode())
    refused = {"code": "!", "kind": "amount", "value": "1", "idempotency_key": token}
    answer = merchant.post("/dashboard/coupons/", refused)
    assert answer.status_code == 400 and b"csrfmiddlewaretoken" in answer.content
    assert not IdempotencyRecord.objects.exists()
    corrected = merchant.post("/dashboard/coupons/", {**refused, "code": "FIXED"})
    assert corrected.status_code == 302
    assert Coupon.objects.for_tenant(mine.tenant).filter(code="FIXED").exists()


def test_a_coupon_form_resubmitted_with_other_values_goes_back_to_the_form(merchant, mine):
    """Back, edit, submit again with the page's old token: the form again with a message, not
    the API's JSON (red: a 422 problem+json page)."""
    page = merchant.get("/dashboard/coupons/").content.decode()
    token = form_token(page)
    first = {"code": "H1", "kind": "amount", "value": "1", "idempotency_key": token}
    assert merchant.post("/dashboard/coupons/", first).status_code == 302
    again = merchant.post("/dashboard/coupons/", {**first, "code": "H2"}, follow=True)
    assert again.redirect_chain == [("/dashboard/coupons/", 303)]
    assert "already submitted with other values" in again.content.decode()
    codes = set(Coupon.objects.for_tenant(mine.tenant).values_list("code", flat=True))
    assert "H1" in codes and "H2" not in codes


def test_signing_out_ends_on_the_dashboard_s_sign_in_page(merchant, mine):
    # it ended on the admin's "Logged out" page, whose link led into the admin
    signed_out = merchant.post("/dashboard/logout/", follow=True)
    assert signed_out.redirect_chain == [("/dashboard/login/", 302)]
    page = signed_out.content.decode()
    assert "You are signed out." in page and "Django site admin" not in page
    assert merchant.get("/dashboard/")["Location"].startswith("/dashboard/login/")


@pytest.mark.parametrize(
    "route",
    [
        "orders/1/transition/",
        "menu/",
        "menu/1/",
        "coupons/",
        "coupons/1/deactivate/",
        "api-keys/",
        "api-keys/1/revoke/",
        "members/",
        "members/1/role/",
        "members/1/remove/",
        "privacy/",
        "switch-tenant/",
    ],
)
def test_every_dashboard_form_s_duplicates_are_named_for_what_they_did(route: str) -> None:
    """Red before for the members' and the privacy page's forms: "Other request"."""
    resolve(f"/dashboard/{route}")  # a route the dashboard has
    assert request_name(f"POST dashboard/{route}") != "Other request"


@pytest.mark.django_db(transaction=True)  # as served: the page in no transaction of its own
def test_an_order_page_shows_the_order_and_its_payment_from_one_moment(mine, merchant):
    # given a paying order, and a writer that pays it and takes that back again and again,
    # each time the order and its payment in one transaction (as a provider's callback does)
    order = make_order(mine.tenant, mine.dishes["pizza"], OrderStatus.PAYING)
    payment = order.payments.get()
    # when the merchant opens its page meanwhile, many times
    seen = []
    with paying_flips(order, payment) as flips:
        while len(seen) < 150 or len(flips) < 50:
            page = merchant.get(f"/dashboard/orders/{order.pk}/")
            assert page.status_code == 200
            seen.append((page.context["order"].status, page.context["payments"][0].status))
    # then every page shows the order and its payment as one committed moment left them
    assert set(seen) <= set(STATES), set(seen) - set(STATES)


def test_a_head_request_for_the_issued_key_s_page_leaves_the_key_to_be_shown(client, mine):
    """A HEAD of the page (a link checker, a prefetch) answers no body, so it shows nothing:
    it must not use up the key's one showing (red: the GET after it showed no key)."""
    client.force_login(mine.user)
    issued = post_form(client, "/dashboard/api-keys/", {"name": "Kiosk", "kind": "merchant"})
    head = client.head(issued["Location"])
    assert head.status_code == 200 and head.content == b""
    key = client.get(issued["Location"]).context["new_key"]["key"]
    assert authenticate_api_key(key).tenant == mine.tenant
