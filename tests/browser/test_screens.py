"""Every dashboard page and the main admin pages at 1280 px, in a real browser: a screenshot of
each (test-artifacts/), and no page wider than the window or with a table cut off inside a
scrolling or clipping box (the Duplicates table once read "RESOUR").

The shop looks like a restaurant mid-service: orders in every status, a payment under review,
a day of duplicates, keys, coupons, a dead letter. ``UPDATE_README_SCREENSHOTS=1`` also copies
the README's screenshots to docs/screenshots/.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from idempotency.models import DuplicateAudit
from ordering.background.dead_letters import record_dead_letter
from ordering.models import Coupon, Dish, Order, OrderStatus, OrderTransition, ProviderConflict
from ordering.services.lifecycle import transition_order
from ordering.services.placing import ItemRequest, place_order
from tenants.api_keys import issue_api_key
from tenants.models import ApiClient, Tenant
from tests.browser.conftest import screenshot
from tests.browser.test_dashboard import seed_history
from tests.dashboard.factories import make_merchant, make_order
from tests.payments.helpers import paying_order, post_callback, signed

pytestmark = [pytest.mark.browser, pytest.mark.slow]
S = OrderStatus
WIDTH = 1280
# Reports what sticks out: the page wider than the window, or any element whose content is
# wider than its own box while that box scrolls or clips (a table cut off inside a panel).
OVERFLOW_JS = """
() => {
  const width = document.documentElement.clientWidth;
  const found = [];
  const name = (el) => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '')
    + (el.className && typeof el.className === 'string'
       ? '.' + el.className.trim().split(/\\s+/).join('.') : '');
  if (document.documentElement.scrollWidth > width) {
    found.push(`page is ${document.documentElement.scrollWidth}px wide`);
  }
  for (const el of document.querySelectorAll('body *')) {
    const style = getComputedStyle(el);
    const box = el.getBoundingClientRect();
    if (box.width <= 1 || style.visibility === 'hidden' || style.display === 'none') continue;
    if (style.overflowX !== 'visible' && el.scrollWidth > el.clientWidth + 1) {
      found.push(`${name(el)} shows ${el.clientWidth} of ${el.scrollWidth}px`);
    }
  }
  return found;
}
"""


@pytest.fixture
def wide_tab(browser: object, settings: object) -> Iterator[object]:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    context = browser.new_context(
        viewport={"width": WIDTH, "height": 900}, locale="en-GB", timezone_id="Europe/Rome"
    )
    context.set_default_timeout(15_000)
    tab = context.new_page()
    yield tab
    context.close()


def restaurant() -> dict[str, object]:
    """Trattoria Roma mid-service (Europe/Rome), with what every page has to show."""
    tenant = Tenant.objects.create(
        slug="trattoria-roma", name="Trattoria Roma", time_zone="Europe/Rome"
    )
    dishes = [
        Dish.objects.for_tenant(tenant).create(
            tenant=tenant, name=name, description=text, price=Decimal(price), stock=80
        )
        for name, text, price in [
            ("Margherita", "Tomato, fior di latte, basil", "8.50"),
            ("Carbonara", "Guanciale, pecorino romano, egg yolk, black pepper", "11.00"),
            ("Tiramisu", "Mascarpone, savoiardi, espresso", "5.50"),
            ("Saltimbocca alla romana con patate al forno", "Veal, sage, prosciutto", "16.50"),
        ]
    ]
    Coupon.objects.for_tenant(tenant).create(
        tenant=tenant, code="WELCOME10", kind=Coupon.Kind.PERCENT, value=10, max_uses=100
    )
    Coupon.objects.for_tenant(tenant).create(
        tenant=tenant, code="FIVEOFF", kind=Coupon.Kind.AMOUNT, value=5, active=False
    )
    app, _ = issue_api_key(tenant=tenant, name="Roma diner app (iOS and Android)")
    issue_api_key(tenant=tenant, name="Kitchen display", kind=ApiClient.Kind.MERCHANT)
    owner = make_merchant(tenant, "roma-owner")
    orders = {}
    for i, status in enumerate([*S.values, S.PAID, S.PREPARING, S.CREATED]):
        orders[status] = make_order(tenant, dishes[i % len(dishes)], status, quantity=1 + i % 3)
    # the order page's log: a diner's app paid for it, the kitchen moved it on
    order = paying_order(tenant, dishes[0], quantity=2)[0]
    Order.all_tenants.filter(pk=order.pk).update(diner_id="d-4")
    OrderTransition.all_tenants.filter(order=order).update(actor=f"api:{app.prefix}/diner:d-4")
    post_callback(APIClient(), *signed(order.payments.get()))
    for target in (S.ACCEPTED, S.PREPARING):
        transition_order(tenant=tenant, order_id=order.pk, target=target, actor="merchant:giulia")
    # a payment under review
    disputed, payment = paying_order(tenant, dishes[1])
    post_callback(APIClient(), *signed(payment, amount=Decimal("1.00")))
    seed_history(tenant)
    DuplicateAudit.objects.filter(tenant_key=str(tenant.pk)).update(
        resource_ref=f"/api/v1/orders/{order.pk}/"
    )
    DuplicateAudit.objects.create(
        tenant_key=str(tenant.pk),
        endpoint="POST api/v1/orders/",
        key="order-3f9c2a1e-retry",
        outcome="REUSED",
        differing_fields=["items"],
        at=order.created_at,
    )
    record_dead_letter(
        key=f"cancel:{order.pk}:refund_payment",
        task="ordering.handle_outbox_event",
        payload={"args": [1]},
        error="ProviderError: simulated failure of refund_payment",
        attempts=4,
        tenant=tenant,
        order=order,
    )
    return {
        "tenant": tenant,
        "owner": owner,
        "order": order,
        "dish": dishes[3],
        "conflict": ProviderConflict.all_tenants.get(order=disputed),
    }


def log_in_as(tab: object, base_url: str, user: User) -> None:
    """Reuse a Django session in the browser (logging in through the form is tested elsewhere)."""
    client = Client()
    client.force_login(user)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME]
    tab.context.add_cookies([{"name": cookie.key, "value": cookie.value, "url": base_url}])


def visit_all(tab: object, base_url: str, pages: list[tuple[str, str]], readme: set[str]):
    """Screenshot each page; {page: what overflows} for the pages where something does."""
    overflowing = {}
    for name, path in pages:
        response = tab.goto(f"{base_url}{path}")
        assert response is not None and response.status == 200, (path, response)
        tab.wait_for_load_state("load")
        screenshot(tab, f"{name}.png", readme=name in readme)
        found = tab.evaluate(OVERFLOW_JS)
        if found:
            overflowing[name] = found
    return overflowing


def an_erasure(tenant) -> None:
    """A diner erasure in the log, with every count the page shows."""
    from ordering.models import DinerErasure

    counts = {"sessions": 2, "orders": 14, "records": 31, "audits": 9, "redis_keys": 12}
    DinerErasure.objects.create(
        tenant=tenant,
        diner_hash="0" * 64,
        pseudonym="erased-0123456789abcdef",
        requested_by="owner:a-rather-long-username",
        counts=counts,
    )


def test_every_dashboard_page_fits_1280px(wide_tab, live_server):
    shop = restaurant()
    an_erasure(shop["order"].tenant)
    log_in_as(wide_tab, live_server.url, shop["owner"])
    pages = [
        ("board", "/dashboard/"),
        ("order", f"/dashboard/orders/{shop['order'].pk}/"),
        ("menu", "/dashboard/menu/"),
        ("dish", f"/dashboard/menu/{shop['dish'].pk}/"),
        ("coupons", "/dashboard/coupons/"),
        ("api-keys", "/dashboard/api-keys/"),
        ("members", "/dashboard/members/"),
        ("idempotency", "/dashboard/idempotency/"),
        ("privacy", "/dashboard/privacy/"),
    ]
    overflowing = visit_all(
        wide_tab, live_server.url, pages, readme={"board", "order", "idempotency"}
    )
    assert overflowing == {}
    # the order page draws the lifecycle (served as a static file) when asked
    wide_tab.goto(f"{live_server.url}/dashboard/orders/{shop['order'].pk}/")
    wide_tab.get_by_text("How orders move").click()
    diagram = wide_tab.locator("img.lifecycle")
    diagram.wait_for(state="visible")
    assert wide_tab.evaluate("document.querySelector('img.lifecycle').naturalWidth") > 600
    assert wide_tab.evaluate(OVERFLOW_JS) == []
    screenshot(wide_tab, "order-lifecycle.png")


def test_the_main_admin_pages_fit_1280px(wide_tab, live_server):
    shop = restaurant()
    log_in_as(wide_tab, live_server.url, User.objects.create_superuser("staff", password="x"))
    order, conflict = shop["order"], shop["conflict"]
    an_erasure(order.tenant)
    pages = [
        ("admin-index", "/admin/"),
        ("admin-orders", "/admin/ordering/order/"),
        ("admin-order", f"/admin/ordering/order/{order.pk}/change/"),
        ("admin-tenants", "/admin/tenants/tenant/"),
        ("admin-api-clients", "/admin/tenants/apiclient/"),
        ("admin-memberships", "/admin/tenants/membership/"),
        ("admin-diner-sessions", "/admin/tenants/dinersession/"),
        ("admin-dishes", "/admin/ordering/dish/"),
        ("admin-coupons", "/admin/ordering/coupon/"),
        ("admin-duplicate-audits", "/admin/idempotency/duplicateaudit/"),
        ("admin-idempotency-records", "/admin/idempotency/idempotencyrecord/"),
        ("admin-provider-conflicts", "/admin/ordering/providerconflict/"),
        ("admin-provider-conflict", f"/admin/ordering/providerconflict/{conflict.pk}/change/"),
        ("admin-dead-letters", "/admin/ordering/deadletter/"),
        ("admin-outbox", "/admin/ordering/outboxevent/"),
        ("admin-lua-scripts", "/admin/idempotency/luascriptversion/"),
        ("admin-diner-erasures", "/admin/ordering/dinererasure/"),
        ("admin-offboardings", "/admin/ordering/tenantoffboarding/"),
    ]
    overflowing = visit_all(wide_tab, live_server.url, pages, readme={"admin-provider-conflicts"})
    assert overflowing == {}
    # the read-only pages say so
    wide_tab.goto(f"{live_server.url}/admin/ordering/order/{order.pk}/change/")
    assert wide_tab.locator("h1").inner_text() == "View order"
    assert wide_tab.locator('input[name="_save"]').count() == 0


def long_words() -> tuple[Tenant, Dish, Order]:
    """A restaurant whose every field people write is at its bound, written as one word (a
    pasted link, a code, a name without spaces)."""
    tenant = Tenant.objects.create(slug="long-words", name="Long Words")
    dish = Dish.objects.for_tenant(tenant).create(
        tenant=tenant, name="V" * 200, description="D" * 2000, price=Decimal("3.00"), stock=10
    )
    Coupon.objects.for_tenant(tenant).create(
        tenant=tenant, code="C" * 40, kind=Coupon.Kind.AMOUNT, value=1
    )
    issue_api_key(tenant=tenant, name="K" * 100)
    order = place_order(
        tenant=tenant,
        items=[ItemRequest(dish_id=dish.pk, quantity=2)],
        payment_method="card",
        diner_id="d" * 64,
        coupon_code="C" * 40,
        note="N" * 500,
        contact_phone="+390612345678",
        delivery_address="A" * 300,
        actor="test",
    )
    return tenant, dish, order


def test_the_longest_words_merchants_and_diners_may_write_fit_1280px(wide_tab, live_server):
    """Each field at its bound, written as one word (a pasted link, a code, a name without
    spaces): the dish's name and description, a coupon's code, an API key's name, and what a
    diner writes in an order (its note and address). Each breaks inside its cell; red: the
    order's items table was cut off at the panel's edge, with its quantities, prices and
    total out of sight, and the menu page 22,000 px wide."""
    tenant, dish, order = long_words()
    log_in_as(wide_tab, live_server.url, make_merchant(tenant, "u" * 150))
    pages = [
        ("long-board", "/dashboard/"),
        ("long-order", f"/dashboard/orders/{order.pk}/"),
        ("long-menu", "/dashboard/menu/"),
        ("long-dish", f"/dashboard/menu/{dish.pk}/"),
        ("long-coupons", "/dashboard/coupons/"),
        ("long-api-keys", "/dashboard/api-keys/"),
        ("long-members", "/dashboard/members/"),
    ]

    overflowing = visit_all(wide_tab, live_server.url, pages, readme=set())

    assert overflowing == {}
    wide_tab.goto(f"{live_server.url}/dashboard/orders/{order.pk}/")
    total = wide_tab.get_by_text(f"{order.total} EUR")
    assert total.is_visible()
    assert total.bounding_box()["x"] + total.bounding_box()["width"] <= WIDTH


def test_the_longest_words_merchants_and_diners_may_write_fit_the_admin_at_1280px(
    wide_tab, live_server
):
    """The same words on the admin's pages (red: the order's page 2,050 px wide, its diner's
    note and its line's dish running past the window; the lists of dishes and keys wider than
    their box)."""
    order = long_words()[2]
    log_in_as(wide_tab, live_server.url, User.objects.create_superuser("staff", password="x"))
    pages = [
        ("long-admin-order", f"/admin/ordering/order/{order.pk}/change/"),
        ("long-admin-dishes", "/admin/ordering/dish/"),
        ("long-admin-api-clients", "/admin/tenants/apiclient/"),
        ("long-admin-coupons", "/admin/ordering/coupon/"),
    ]

    assert visit_all(wide_tab, live_server.url, pages, readme=set()) == {}
