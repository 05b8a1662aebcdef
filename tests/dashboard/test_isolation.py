"""Tenant isolation of every dashboard URL: another tenant's ids are "not found" and change
nothing; lists never show another tenant's rows; anonymous users are sent to log in."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from idempotency.models import DuplicateAudit
from ordering.models import Coupon, DinerErasure, Dish, Order, OrderTransition
from tenants.models import ApiClient, Membership
from tests.dashboard.conftest import World, form_token

pytestmark = pytest.mark.django_db


def snapshot(world: World) -> dict[str, object]:
    """Everything a foreign request could try to change in ``world``."""
    return {
        "order": Order.all_tenants.values_list("status", "total").get(pk=world.order.pk),
        "log": OrderTransition.all_tenants.filter(order=world.order).count(),
        "dishes": sorted(
            Dish.all_tenants.filter(tenant=world.tenant).values_list(
                "pk", "price", "stock", "active"
            )
        ),
        "coupons": sorted(
            Coupon.all_tenants.filter(tenant=world.tenant).values_list("pk", "code", "active")
        ),
        "keys": sorted(
            ApiClient.objects.filter(tenant=world.tenant).values_list("pk", "revoked_at")
        ),
        "members": sorted(
            Membership.objects.filter(tenant=world.tenant).values_list("pk", "user_id", "role")
        ),
    }


FOREIGN_GETS = {
    "order-detail": lambda w: f"/dashboard/orders/{w.order.pk}/",
    "dish-edit": lambda w: f"/dashboard/menu/{w.dishes['pizza'].pk}/",
}
FOREIGN_POSTS = {
    "order-transition": (
        lambda w: f"/dashboard/orders/{w.order.pk}/transition/",
        {"to": "ACCEPTED"},
    ),
    "order-cancel": (lambda w: f"/dashboard/orders/{w.order.pk}/transition/", {"to": "CANCELLED"}),
    "dish-edit": (
        lambda w: f"/dashboard/menu/{w.dishes['pizza'].pk}/",
        {"price": "0.01", "stock": "0", "stock_seen": "50"},
    ),
    "coupon-deactivate": (lambda w: f"/dashboard/coupons/{w.coupon.pk}/deactivate/", {}),
    "api-key-revoke": (lambda w: f"/dashboard/api-keys/{w.api_client.pk}/revoke/", {}),
    "member-role": (lambda w: f"/dashboard/members/{their_member(w)}/role/", {"role": "staff"}),
    "member-remove": (lambda w: f"/dashboard/members/{their_member(w)}/remove/", {}),
}


def their_member(world: World) -> int:
    return Membership.objects.get(tenant=world.tenant, user=world.user).pk


@pytest.mark.parametrize("name", list(FOREIGN_GETS))
def test_foreign_ids_in_page_urls_are_404(merchant, mine, theirs, name):
    assert merchant.get(FOREIGN_GETS[name](theirs)).status_code == 404
    assert merchant.get(FOREIGN_GETS[name](mine)).status_code == 200  # the control


@pytest.mark.parametrize("with_token", [True, False], ids=["with-token", "without-token"])
@pytest.mark.parametrize("name", list(FOREIGN_POSTS))
def test_foreign_ids_in_form_posts_are_404_and_change_nothing(
    merchant, mine, theirs, name, with_token
):
    url, data = FOREIGN_POSTS[name]
    before = snapshot(theirs)
    if with_token:  # a token from one of my own pages, as a crafted request would carry
        data = {
            **data,
            "idempotency_key": form_token(merchant.get("/dashboard/menu/").content.decode()),
        }
    r = merchant.post(url(theirs), data)
    assert r.status_code == 404
    assert snapshot(theirs) == before
    assert theirs.user.username not in r.content.decode()  # nothing of theirs on the page


def test_switching_to_a_foreign_tenant_changes_nothing(merchant, mine, theirs):
    token = form_token(merchant.get("/dashboard/menu/").content.decode())
    r = merchant.post(
        "/dashboard/switch-tenant/", {"tenant_id": theirs.tenant.pk, "idempotency_key": token}
    )
    assert r.status_code == 302
    assert merchant.get("/dashboard/").context["request"].membership.tenant == mine.tenant


@pytest.mark.parametrize(
    "url",
    [
        "/dashboard/",
        "/dashboard/board/fragment/",
        "/dashboard/menu/",
        "/dashboard/coupons/",
        "/dashboard/api-keys/",
        "/dashboard/idempotency/",
    ],
)
def test_list_pages_never_show_another_tenants_rows(merchant, mine, theirs, url):
    DuplicateAudit.objects.create(
        tenant_key=str(theirs.tenant.pk),
        endpoint="POST api/v1/orders/",
        key="their-duplicate",
        outcome="HIT",
        at=theirs.order.created_at,
        resource_ref=f"/api/v1/orders/{theirs.order.pk}/",
    )
    html = merchant.get(url).content.decode()
    for leak in [
        str(theirs.order.pk),
        f'data-dish-id="{theirs.dishes["pizza"].pk}"',
        theirs.coupon.code,
        theirs.api_client.prefix,
        theirs.api_client.name,
        "their-duplicate",
    ]:
        assert leak not in html, leak


def test_huge_and_unknown_ids_are_404_not_500(merchant, mine):
    assert merchant.get("/dashboard/orders/99999999999999999999999/").status_code == 404
    assert merchant.get("/dashboard/orders/1/").status_code == 404
    assert merchant.get("/dashboard/menu/99999999999999999999999/").status_code == 404


ALL_URLS = [
    "/dashboard/",
    "/dashboard/board/fragment/",
    "/dashboard/orders/{order}/",
    "/dashboard/menu/",
    "/dashboard/menu/{dish}/",
    "/dashboard/coupons/",
    "/dashboard/api-keys/",
    "/dashboard/idempotency/",
]
ALL_POSTS = [
    "/dashboard/orders/{order}/transition/",
    "/dashboard/coupons/{coupon}/deactivate/",
    "/dashboard/api-keys/{key}/revoke/",
    "/dashboard/switch-tenant/",
]


def fill(url: str, world: World) -> str:
    return url.format(
        order=world.order.pk,
        dish=world.dishes["pizza"].pk,
        coupon=world.coupon.pk,
        key=world.api_client.pk,
    )


@pytest.mark.parametrize("url", ALL_URLS + ALL_POSTS)
def test_anonymous_users_are_sent_to_log_in(client, mine, url):
    before = snapshot(mine)
    r = client.post(fill(url, mine)) if url in ALL_POSTS else client.get(fill(url, mine))
    assert r.status_code == 302 and r["Location"].startswith("/dashboard/login/?next=")
    assert snapshot(mine) == before


@pytest.mark.parametrize("url", ALL_URLS + ALL_POSTS)
def test_users_without_a_membership_get_403(mine, url):
    client = Client()
    client.force_login(User.objects.create_user("drifter", password="x-123456789"))
    before = snapshot(mine)
    r = client.post(fill(url, mine)) if url in ALL_POSTS else client.get(fill(url, mine))
    assert r.status_code == 403
    assert snapshot(mine) == before


HIDDEN_RE = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)">')
# A form of each kind that creates or erases something: the page showing it, where it posts,
# what the person typed, and what it would leave behind in a restaurant
FORMS_OF_A_PAGE = {
    "api-key-issue": (
        "/dashboard/api-keys/",
        {"name": "Kiosk", "kind": "merchant"},
        lambda tenant: ApiClient.objects.filter(tenant=tenant, name="Kiosk").exists(),
    ),
    "coupon-create": (
        "/dashboard/coupons/",
        {"code": "HALF", "kind": "percent", "value": "50"},
        lambda tenant: Coupon.all_tenants.filter(tenant=tenant, code="HALF").exists(),
    ),
    "dish-create": (
        "/dashboard/menu/",
        {"name": "Calzone", "price": "9.00", "stock": "5", "active": "on"},
        lambda tenant: Dish.all_tenants.filter(tenant=tenant, name="Calzone").exists(),
    ),
    "member-add": (
        "/dashboard/members/",
        {"username": "carol", "role": "owner"},
        lambda tenant: Membership.objects.filter(tenant=tenant, user__username="carol").exists(),
    ),
    "diner-erase": (
        "/dashboard/privacy/",
        {"diner_id": "diner-1", "confirm": "on"},
        lambda tenant: DinerErasure.objects.filter(tenant=tenant).exists(),
    ),
}


def switch_to(client: Client, tenant_pk: int) -> None:
    token = form_token(client.get("/dashboard/").content.decode())
    client.post("/dashboard/switch-tenant/", {"tenant_id": tenant_pk, "idempotency_key": token})


@pytest.mark.parametrize("name", list(FORMS_OF_A_PAGE))
def test_a_form_shown_for_one_restaurant_does_nothing_after_a_switch_in_another_tab(
    client, mine, theirs, name
):
    """A user of two restaurants opens a form of one, switches to the other in a second tab
    (the current restaurant is the session's, every tab's), then submits the first tab's form:
    it acts on neither restaurant, and the page says why."""
    page, typed, left_in = FORMS_OF_A_PAGE[name]
    Membership.objects.create(user=mine.user, tenant=theirs.tenant, role=Membership.Role.OWNER)
    User.objects.create_user("carol", password="pw-carol-123")
    client.force_login(mine.user)
    switch_to(client, theirs.tenant.pk)
    html = client.get(page).content.decode()
    form = html[html.index(f'action="{page}"') :]
    shown = dict(HIDDEN_RE.findall(form[: form.index("</form>")]))
    assert shown["form_restaurant"] == str(theirs.tenant.pk)

    switch_to(client, mine.tenant.pk)  # the second tab
    r = client.post(page, {**shown, **typed}, follow=True)

    assert r.redirect_chain == [("/dashboard/", 302)]
    assert "Nothing was done: that form was shown for another restaurant" in r.content.decode()
    assert not left_in(mine.tenant) and not left_in(theirs.tenant)
    # the same form shown for the current restaurant does what it says
    html = client.get(page).content.decode()
    form = html[html.index(f'action="{page}"') :]
    shown = dict(HIDDEN_RE.findall(form[: form.index("</form>")]))
    client.post(page, {**shown, **typed})
    assert left_in(mine.tenant)


def test_a_form_of_a_restaurant_the_user_was_removed_from_does_nothing_and_says_so(
    client, mine, theirs
):
    """A user of two restaurants has a page of one open when its owner removes them; the
    page's form then does nothing, and the board says they are no longer a member there, not
    that they switched restaurants in another tab (red: "(switched in another tab)")."""
    page, typed, left_in = FORMS_OF_A_PAGE["dish-create"]
    Membership.objects.create(user=mine.user, tenant=theirs.tenant, role=Membership.Role.OWNER)
    client.force_login(mine.user)
    switch_to(client, theirs.tenant.pk)
    html = client.get(page).content.decode()
    form = html[html.index(f'action="{page}"') :]
    shown = dict(HIDDEN_RE.findall(form[: form.index("</form>")]))

    Membership.objects.filter(user=mine.user, tenant=theirs.tenant).delete()  # by its owner
    r = client.post(page, {**shown, **typed}, follow=True)

    assert r.redirect_chain == [("/dashboard/", 302)]
    text = r.content.decode()
    assert "Nothing was done: that form was shown for a restaurant you are no longer a member" in (
        text
    )
    assert "switched in another tab" not in text
    assert not left_in(mine.tenant) and not left_in(theirs.tenant)
