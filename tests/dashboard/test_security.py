"""CSRF on every dashboard form, staff-only admin (production settings: tests/config/)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from ordering.models import Order, OrderStatus
from tests.dashboard.conftest import form_token
from tests.dashboard.test_isolation import ALL_URLS, fill, snapshot

FORM_POSTS = [
    ("/dashboard/orders/{order}/", "/dashboard/orders/{order}/transition/", {"to": "ACCEPTED"}),
    ("/dashboard/menu/", "/dashboard/menu/", {"name": "Soup", "price": "5", "stock": "1"}),
    ("/dashboard/menu/{dish}/", "/dashboard/menu/{dish}/", {"price": "1", "stock": "50"}),
    ("/dashboard/coupons/", "/dashboard/coupons/", {"code": "NEW", "kind": "amount", "value": 1}),
    ("/dashboard/coupons/", "/dashboard/coupons/{coupon}/deactivate/", {}),
    ("/dashboard/api-keys/", "/dashboard/api-keys/", {"name": "x", "kind": "diner_app"}),
    ("/dashboard/api-keys/", "/dashboard/api-keys/{key}/revoke/", {}),
]


@pytest.mark.django_db
@pytest.mark.parametrize("page, action, data", FORM_POSTS, ids=[p[1] for p in FORM_POSTS])
def test_posts_without_the_csrf_token_are_403_and_change_nothing(mine, page, action, data):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(mine.user)
    token = form_token(browser.get(fill(page, mine)).content.decode())
    before = snapshot(mine)
    r = browser.post(fill(action, mine), {**data, "idempotency_key": token})
    assert r.status_code == 403 and b"This form has expired" in r.content
    assert snapshot(mine) == before


@pytest.mark.django_db
def test_posts_with_the_csrf_token_go_through(mine):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(mine.user)
    page = browser.get(f"/dashboard/orders/{mine.order.pk}/")
    csrf = page.context["csrf_token"]
    r = browser.post(
        f"/dashboard/orders/{mine.order.pk}/transition/",
        {
            "to": "ACCEPTED",
            "idempotency_key": form_token(page.content.decode()),
            "csrfmiddlewaretoken": csrf,
        },
    )
    assert r.status_code == 302
    assert Order.all_tenants.get(pk=mine.order.pk).status == OrderStatus.ACCEPTED


ADMIN_URLS = [
    "/admin/",
    "/admin/ordering/order/",
    "/admin/idempotency/duplicateaudit/",
    "/admin/idempotency/idempotencyrecord/",
    "/admin/tenants/tenant/",
    "/admin/tenants/apiclient/",
]


@pytest.mark.django_db
@pytest.mark.parametrize("url", ADMIN_URLS)
def test_admin_sends_anonymous_and_merchants_to_the_admin_login(merchant, client, url):
    for who in (client, merchant):
        r = who.get(url)
        assert r.status_code == 302 and r["Location"].startswith("/admin/login/?next="), who


@pytest.mark.django_db
@pytest.mark.parametrize("url", ADMIN_URLS[1:])
def test_staff_need_model_permissions_superusers_see_everything(url):
    staff = Client()
    staff.force_login(User.objects.create_user("helper", password="x-123456789", is_staff=True))
    assert staff.get(url).status_code == 403
    root = Client()
    root.force_login(User.objects.create_superuser("root", password="x-123456789"))
    assert root.get(url).status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize("page", ALL_URLS)
def test_dashboard_pages_are_never_stored_and_carry_the_policy(mine, page):
    browser = Client()
    browser.force_login(mine.user)

    response = browser.get(fill(page, mine))

    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    policy = response["Content-Security-Policy"]
    assert "default-src 'self'" in policy and "script-src 'self'" in policy
    assert "style-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy


@pytest.mark.django_db
def test_the_login_page_is_never_stored_either(client):
    response = client.get("/dashboard/login/")
    assert response.status_code == 200 and "no-store" in response["Cache-Control"]
