"""Every state-changing dashboard form applies once: a double click, a re-submit after "back"
or a retry sends the same one-time token, and gets the first answer plus a notice."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pytest
from django.db import connection
from django.test import Client

from idempotency.core.hashing import keyed_digest
from idempotency.core.keys import key_digest
from idempotency.models import DuplicateAudit, IdempotencyRecord
from idempotency.stores.audit_stream import drain_audits
from idempotency.web.forms import ALREADY_APPLIED
from ordering.models import Coupon, Dish, OrderStatus, OrderTransition
from tenants.models import ApiClient, Membership
from tests.dashboard.conftest import World, build_world, form_token, make_merchant
from tests.dashboard.factories import PASSWORD

S = OrderStatus


@dataclass(frozen=True)
class FormCase:
    """A form: where it is rendered, where it posts, what it sends, what its effect counts."""

    page: Callable[[World], str]
    action: Callable[[World], str]
    data: Callable[[World], dict[str, Any]]
    effect: Callable[[World], object]
    anchor: Callable[[World], str] | None = None  # the form's row, when a page has many


CASES = {
    "order-transition": FormCase(
        page=lambda w: f"/dashboard/orders/{w.order.pk}/",
        action=lambda w: f"/dashboard/orders/{w.order.pk}/transition/",
        data=lambda w: {"to": S.ACCEPTED},
        effect=lambda w: OrderTransition.all_tenants.filter(order=w.order).count(),
    ),
    "dish-create": FormCase(
        page=lambda w: "/dashboard/menu/",
        action=lambda w: "/dashboard/menu/",
        data=lambda w: {"name": "Soup", "price": "6.00", "stock": "5", "active": "on"},
        effect=lambda w: Dish.objects.for_tenant(w.tenant).count(),
    ),
    "dish-edit": FormCase(
        page=lambda w: f"/dashboard/menu/{w.dishes['pizza'].pk}/",
        action=lambda w: f"/dashboard/menu/{w.dishes['pizza'].pk}/",
        data=lambda w: {
            "price": "9.90",
            "stock": "7",
            "stock_seen": str(Dish.all_tenants.get(pk=w.dishes["pizza"].pk).stock),
        },
        effect=lambda w: Dish.all_tenants.values_list("price", "stock", "active").get(
            pk=w.dishes["pizza"].pk
        ),
    ),
    "coupon-create": FormCase(
        page=lambda w: "/dashboard/coupons/",
        action=lambda w: "/dashboard/coupons/",
        data=lambda w: {"code": "TWICE", "kind": "amount", "value": "3"},
        effect=lambda w: Coupon.objects.for_tenant(w.tenant).count(),
    ),
    "coupon-deactivate": FormCase(
        page=lambda w: "/dashboard/coupons/",
        action=lambda w: f"/dashboard/coupons/{w.coupon.pk}/deactivate/",
        data=lambda w: {},
        effect=lambda w: Coupon.objects.for_tenant(w.tenant).filter(active=True).count(),
        anchor=lambda w: f'data-coupon-id="{w.coupon.pk}"',
    ),
    "api-key-create": FormCase(
        page=lambda w: "/dashboard/api-keys/",
        action=lambda w: "/dashboard/api-keys/",
        data=lambda w: {"name": "POS", "kind": "merchant"},
        effect=lambda w: ApiClient.objects.filter(tenant=w.tenant).count(),
    ),
    "api-key-revoke": FormCase(
        page=lambda w: "/dashboard/api-keys/",
        action=lambda w: f"/dashboard/api-keys/{w.api_client.pk}/revoke/",
        data=lambda w: {},
        effect=lambda w: ApiClient.objects.filter(tenant=w.tenant, revoked_at=None).count(),
        anchor=lambda w: f'data-client-id="{w.api_client.pk}"',
    ),
}


def token_for(client: Client, case: FormCase, world: World) -> str:
    html = client.get(case.page(world)).content.decode()
    if case.anchor is not None:
        html = html[html.index(case.anchor(world)) :]
    return form_token(html)


@pytest.mark.django_db
@pytest.mark.parametrize("name", list(CASES))
def test_second_submit_of_the_same_form_replays_the_first(merchant, mine, engine_mode, name):
    case = CASES[name]
    before = case.effect(mine)
    body = {**case.data(mine), "idempotency_key": token_for(merchant, case, mine)}

    first = merchant.post(case.action(mine), body)
    after_first = case.effect(mine)
    second = merchant.post(case.action(mine), body)

    assert first.status_code == 302 and first["X-Idempotent-Result"] == "MISS"
    assert after_first != before  # the first submit did something...
    assert case.effect(mine) == after_first  # ...and the second nothing more
    assert second.status_code == 302 and second["X-Idempotent-Result"] == "HIT"
    assert second["Location"] == first["Location"]
    landing = merchant.get(second["Location"]).content.decode()
    assert ALREADY_APPLIED in landing
    drain_audits()
    [hit] = DuplicateAudit.objects.filter(outcome="HIT")
    assert hit.tenant_key == str(mine.tenant.pk) and hit.key == keyed_digest(
        body["idempotency_key"]
    )
    assert hit.resource_ref == first["Location"]


@pytest.mark.django_db
def test_replayed_api_key_creation_does_not_show_the_key_again(merchant, mine, engine_mode):
    case = CASES["api-key-create"]
    body = {**case.data(mine), "idempotency_key": token_for(merchant, case, mine)}
    first = merchant.post(case.action(mine), body)
    shown = merchant.get(first["Location"])
    key = shown.context["new_key"]["key"]

    replay = merchant.post(case.action(mine), body)
    landing = merchant.get(replay["Location"])

    assert replay["X-Idempotent-Result"] == "HIT" and replay.content == b""
    assert landing.context["new_key"] is None and key not in landing.content.decode()
    assert ALREADY_APPLIED in landing.content.decode()
    stored = IdempotencyRecord.objects.get(key=key_digest(body["idempotency_key"]))
    assert key.split(".")[1].encode() not in bytes(stored.response_body)


@pytest.mark.django_db
def test_repeated_tenant_switch_lands_in_the_same_place(client, mine, theirs, engine_mode):
    """The token is scoped to the tenant current when the form was rendered, which the first
    submit changes; so a repeat runs again, and setting the same session value twice is the
    same as once."""
    Membership.objects.create(user=mine.user, tenant=theirs.tenant)
    client.force_login(mine.user)
    token = form_token(client.get("/dashboard/").content.decode())
    body = {"tenant_id": theirs.tenant.pk, "idempotency_key": token}
    first = client.post("/dashboard/switch-tenant/", body)
    second = client.post("/dashboard/switch-tenant/", body)
    assert first.status_code == second.status_code == 302
    assert first["Location"] == second["Location"] == "/dashboard/"
    assert client.get("/dashboard/").context["request"].membership.tenant == theirs.tenant


@pytest.mark.django_db
def test_same_token_with_other_fields_is_refused(merchant, mine):
    """A token is one action: reusing it for another move is refused (back to the page, 303),
    never a second action."""
    case = CASES["order-transition"]
    token = token_for(merchant, case, mine)
    merchant.post(case.action(mine), {"to": S.ACCEPTED, "idempotency_key": token})
    page = f"http://testserver{case.page(mine)}"
    reused = merchant.post(
        case.action(mine), {"to": S.CANCELLED, "idempotency_key": token}, HTTP_REFERER=page
    )
    # back to the order's page, with the refusal in words (the transition's own URL takes only
    # POST: the browser's GET of it was a blank 405)
    assert reused.status_code == 303 and reused["Location"] == page
    shown = merchant.get(reused["Location"])
    assert shown.status_code == 200 and "already submitted with other values" in shown.text
    assert OrderTransition.all_tenants.filter(order=mine.order, to_status=S.CANCELLING).count() == 0
    drain_audits()
    [audit] = DuplicateAudit.objects.filter(outcome="REUSED")
    assert audit.differing_fields == ["to"]


@pytest.mark.django_db
def test_a_name_of_text_with_no_canonical_form_is_refused_in_words_on_its_page(merchant, mine):
    """A dish's name with more than 30 accents in a row (Unicode's stream-safe limit) cannot
    be fingerprinted: the merchant is sent back to the menu, told why, nothing added (red:
    the API's JSON problem, IDEMPOTENCY_PAYLOAD_INVALID, shown in the browser)."""
    case = CASES["dish-create"]
    before = case.effect(mine)
    name = "Zuppa" + "\u0301" * 31
    body = {**case.data(mine), "name": name, "idempotency_key": token_for(merchant, case, mine)}

    refused = merchant.post(case.action(mine), body)

    assert refused.status_code == 303 and refused["Location"] == case.page(mine)
    shown = merchant.get(refused["Location"])
    assert shown.status_code == 200 and "cannot be read one way only" in shown.text
    assert case.effect(mine) == before


def _colleague(world: World) -> int:
    return Membership.objects.get(user=make_merchant(world.tenant, "colleague", "staff")).pk


# (the URL posted to, which takes only POST; the page showing its form)
POST_ONLY = {
    "order-transition": (CASES["order-transition"].action, CASES["order-transition"].page),
    "coupon-deactivate": (CASES["coupon-deactivate"].action, CASES["coupon-deactivate"].page),
    "api-key-revoke": (CASES["api-key-revoke"].action, CASES["api-key-revoke"].page),
    "member-role": (
        lambda w: f"/dashboard/members/{_colleague(w)}/role/",
        lambda w: "/dashboard/members/",
    ),
    "member-remove": (
        lambda w: f"/dashboard/members/{_colleague(w)}/remove/",
        lambda w: "/dashboard/members/",
    ),
    "switch-tenant": (lambda w: "/dashboard/switch-tenant/", lambda w: "/dashboard/"),
}


@pytest.mark.django_db
@pytest.mark.parametrize("name", list(POST_ONLY))
def test_a_refused_button_without_a_referer_lands_on_its_page(merchant, mine, name):
    """A browser that sends no ``Referer`` is sent to the page showing the form, with the
    refusal in words, not to the URL it posted to, which takes only POST (red: a blank 405)."""
    action, page = POST_ONLY[name]
    posted_to = action(mine)
    refused = merchant.post(posted_to, {"role": "staff", "idempotency_key": "bad\u00e9token"})
    assert refused.status_code == 303 and refused["Location"] == page(mine)
    shown = merchant.get(refused["Location"])
    assert shown.status_code == 200 and "token is not valid" in shown.text


@pytest.mark.django_db(transaction=True)
def test_concurrent_double_submit_moves_the_order_once(tenant, engine_mode):
    """Two requests with the same token at the same instant (two threads, two connections):
    one transition, both answered with the same redirect."""
    world = build_world(tenant, "carol")
    case = CASES["order-transition"]
    clients = [Client(), Client()]
    for c in clients:
        c.force_login(world.user)
    body = {"to": S.ACCEPTED, "idempotency_key": token_for(clients[0], case, world)}
    barrier = threading.Barrier(2)
    answers: list[Any] = [None, None]

    def submit(i: int) -> None:
        try:
            barrier.wait()
            answers[i] = clients[i].post(case.action(world), body)
        finally:
            connection.close()

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)

    accepted = OrderTransition.all_tenants.filter(order=world.order, to_status=S.ACCEPTED)
    assert accepted.count() == 1
    assert [a.status_code for a in answers] == [302, 302]
    assert answers[0]["Location"] == answers[1]["Location"]
    assert sorted(a["X-Idempotent-Result"] for a in answers) == ["HIT", "MISS"]
    drain_audits()
    assert not DuplicateAudit.objects.filter(outcome="CONFLICT").exists()


@pytest.mark.django_db
def test_other_member_of_the_same_tenant_cannot_replay_my_token(merchant, mine):
    """Keys are scoped per user: a colleague's request with my token runs on its own."""
    case = CASES["dish-create"]
    token = token_for(merchant, case, mine)
    merchant.post(case.action(mine), {**case.data(mine), "idempotency_key": token})
    colleague = Client()
    colleague.force_login(make_merchant(mine.tenant, "dave", role="manager"))
    r = colleague.post(case.action(mine), {**case.data(mine), "idempotency_key": token})
    assert r.status_code == 400 and "A dish with this name exists." in r.content.decode()


@pytest.mark.django_db
@pytest.mark.parametrize("name", list(CASES))
def test_a_form_submitted_after_its_session_ended_does_nothing_and_says_so(client, mine, name):
    """The session expired (or the person signed out in another tab) while the form was open:
    the submit changes nothing, the sign-in page says so, and signing in leads back to the
    form's page (the URL it posted to takes only POST: it was a blank 405)."""
    case = CASES[name]
    client.force_login(mine.user)
    page = case.page(mine)
    body = {**case.data(mine), "idempotency_key": token_for(client, case, mine)}
    client.logout()
    before = case.effect(mine)

    r = client.post(case.action(mine), body, HTTP_REFERER=f"http://testserver{page}")

    assert r.status_code == 302 and r["Location"] == f"/dashboard/login/?next={quote(page)}"
    assert case.effect(mine) == before
    assert "You were signed out, so nothing was done" in client.get(r["Location"]).content.decode()
    back = client.post(
        r["Location"], {"username": mine.user.username, "password": PASSWORD}, follow=True
    )
    assert back.redirect_chain == [(page, 302)] and back.status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize(
    "referer",
    [
        None,
        "http://evil.example/dashboard/orders/1/",
        "http://testserver/admin/",
        "http://testserver//evil.example/dashboard/",
    ],
    ids=["none", "another-site", "not-the-dashboard", "scheme-relative-path"],
)
def test_after_a_session_ended_sign_in_leads_only_to_this_site_s_dashboard(client, mine, referer):
    """Where a form came from is the Referer, which anyone can write: only one of this site's
    dashboard pages is taken as the page to come back to, else the board."""
    case = CASES["dish-create"]
    headers = {} if referer is None else {"HTTP_REFERER": referer}
    r = client.post(case.action(mine), case.data(mine), **headers)
    assert (
        r.status_code == 302 and r["Location"] == f"/dashboard/login/?next={quote('/dashboard/')}"
    )
