"""The dashboard's role matrix (OWNER ⊃ MANAGER ⊃ STAFF), every URL, role and method, and the
members page.

The matrix below is written out by hand (it is the documented policy, docs/tenancy.md): a
dashboard URL missing from it fails the first test, so a new page cannot ship without a decision
about who may use it.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import URLPattern

from ordering.dashboard import urls as dashboard_urls
from ordering.models import Order, OrderStatus
from tenants.members import add_member
from tenants.models import ApiClient, Membership
from tests.dashboard.conftest import World
from tests.dashboard.factories import form_token, make_merchant
from tests.support.concurrency import committed_once_waited_on

pytestmark = pytest.mark.django_db
Role = Membership.Role
RANK = {Role.STAFF: 1, Role.MANAGER: 2, Role.OWNER: 3}
STAFF = {"role": Role.STAFF}

# url name -> the least role that may use it
MATRIX: dict[str, str] = {
    "board": Role.STAFF,
    "dash-board-fragment": Role.STAFF,
    "dash-order": Role.STAFF,
    "dash-order-transition": Role.STAFF,  # cancelling: MANAGER (below)
    "switch-tenant": Role.STAFF,
    "dash-menu": Role.MANAGER,
    "dash-dish": Role.MANAGER,
    "dash-coupons": Role.MANAGER,
    "dash-coupon-deactivate": Role.MANAGER,
    "dash-idempotency": Role.MANAGER,
    "dash-api-keys": Role.OWNER,
    "dash-api-key-revoke": Role.OWNER,
    "dash-members": Role.OWNER,
    "dash-member-role": Role.OWNER,
    "dash-member-remove": Role.OWNER,
    "dash-privacy": Role.OWNER,
    "dash-privacy-export": Role.OWNER,
    # one's own password: every role (and platform staff, of no restaurant)
    "dash-password": Role.STAFF,
}
PUBLIC = {"login", "logout", None}  # None: "/" redirects to the board


def dashboard_patterns() -> list[URLPattern]:
    return [p for p in dashboard_urls.urlpatterns if p.name not in PUBLIC]


def test_the_matrix_names_every_dashboard_url() -> None:
    assert {p.name for p in dashboard_patterns()} == set(MATRIX)


def url_of(pattern: URLPattern, world: World, member: Membership) -> str:
    ids = {
        "order_id": world.order.pk,
        "dish_id": world.dishes["pizza"].pk,
        "coupon_id": world.coupon.pk,
        "client_id": world.api_client.pk,
        "membership_id": member.pk,
    }
    path = "/" + str(pattern.pattern)
    for name in pattern.pattern.converters:
        path = path.replace(f"<int:{name}>", str(ids[name]))
    return path


FORM = {"to": OrderStatus.ACCEPTED, "role": Role.STAFF, "tenant_id": "0"}
CASES = [
    pytest.param(name, role, method, id=f"{method} {name} as {role}")
    for name in MATRIX
    for role in (Role.STAFF, Role.MANAGER, Role.OWNER)
    for method in ("GET", "POST")
]


@pytest.mark.parametrize(("name", "role", "method"), CASES)
def test_every_url_refuses_roles_below_its_own(
    mine: World, name: str, role: str, method: str
) -> None:
    pattern = next(p for p in dashboard_patterns() if p.name == name)
    client = Client()
    client.force_login(make_merchant(mine.tenant, f"as-{role}", role=role))
    other = Membership.objects.create(
        user=User.objects.create_user("someone"), tenant=mine.tenant, role=Role.STAFF
    )
    before = (
        Order.objects.for_tenant(mine.tenant).get(pk=mine.order.pk).status,
        ApiClient.objects.get(pk=mine.api_client.pk).revoked_at,
        sorted(Membership.objects.filter(tenant=mine.tenant).values_list("pk", "role")),
    )
    url = url_of(pattern, mine, other)
    response = client.get(url) if method == "GET" else client.post(url, FORM)
    if RANK[role] < RANK[MATRIX[name]]:
        assert response.status_code == 403, (url, response.status_code)
        after = (
            Order.objects.for_tenant(mine.tenant).get(pk=mine.order.pk).status,
            ApiClient.objects.get(pk=mine.api_client.pk).revoked_at,
            sorted(Membership.objects.filter(tenant=mine.tenant).values_list("pk", "role")),
        )
        assert after == before  # nothing ran
    else:
        assert response.status_code in {200, 302, 400, 405}, (url, response.status_code)


def test_navigation_shows_only_what_the_role_reaches(mine: World) -> None:
    links = {
        Role.STAFF: ({"/dashboard/"}, {"/dashboard/menu/", "/dashboard/api-keys/"}),
        Role.MANAGER: (
            {"/dashboard/menu/", "/dashboard/coupons/", "/dashboard/idempotency/"},
            {"/dashboard/api-keys/", "/dashboard/members/"},
        ),
        Role.OWNER: ({"/dashboard/api-keys/", "/dashboard/members/"}, set()),
    }
    for role, (shown, hidden) in links.items():
        client = Client()
        client.force_login(make_merchant(mine.tenant, f"nav-{role}", role=role))
        nav = client.get("/dashboard/").content.decode().split("</nav>")[0]
        assert all(f'href="{url}"' in nav for url in shown), (role, nav)
        assert not any(f'href="{url}"' in nav for url in hidden), (role, nav)


@pytest.mark.parametrize(("role", "allowed"), [(Role.STAFF, False), (Role.MANAGER, True)])
def test_cancelling_an_order_needs_a_manager(mine: World, role: str, allowed: bool) -> None:
    client = Client()
    client.force_login(make_merchant(mine.tenant, f"c-{role}", role=role))
    page = client.get(f"/dashboard/orders/{mine.order.pk}/").content.decode()
    assert ("Yes, cancel this order" in page) is allowed
    response = client.post(
        f"/dashboard/orders/{mine.order.pk}/transition/",
        {"to": OrderStatus.CANCELLED, "idempotency_key": form_token(page)},
    )
    status = Order.objects.for_tenant(mine.tenant).get(pk=mine.order.pk).status
    if allowed:
        assert response.status_code == 302 and status == OrderStatus.CANCELLING
    else:
        assert response.status_code == 403 and status == OrderStatus.PAID


# --- members page -------------------------------------------------------------------------


def owner_client(world: World) -> Client:
    client = Client()
    client.force_login(world.user)  # the world's merchant is an owner
    return client


def post_form(client: Client, url: str, data: dict[str, Any]) -> Any:
    page = client.get("/dashboard/members/").content.decode()
    return client.post(url, {**data, "idempotency_key": form_token(page)})


def test_an_owner_adds_changes_and_removes_a_member(mine: World) -> None:
    User.objects.create_user("carol")
    owner = owner_client(mine)
    added = post_form(owner, "/dashboard/members/", {"username": "carol", "role": Role.STAFF})
    assert added.status_code == 302
    carol = Membership.objects.get(tenant=mine.tenant, user__username="carol")
    assert carol.role == Role.STAFF
    post_form(owner, f"/dashboard/members/{carol.pk}/role/", {"role": Role.MANAGER})
    carol.refresh_from_db()
    assert carol.role == Role.MANAGER
    post_form(owner, f"/dashboard/members/{carol.pk}/remove/", {})
    assert not Membership.objects.filter(pk=carol.pk).exists()


def test_adding_an_unknown_or_existing_user_is_a_form_error(mine: World) -> None:
    owner = owner_client(mine)
    unknown = post_form(owner, "/dashboard/members/", {"username": "nobody", "role": "staff"})
    assert unknown.status_code == 400 and "can be added here" in unknown.content.decode()
    again = post_form(
        owner, "/dashboard/members/", {"username": mine.user.username, "role": "staff"}
    )
    assert again.status_code == 400 and "already a member" in again.content.decode()
    assert Membership.objects.filter(tenant=mine.tenant).count() == 1


def form_errors(page: Any, username: str) -> list[str]:
    """The add form's errors, the name typed written as ``<name>``."""
    return [
        str(error).replace(repr(username), "<name>")
        for error in page.context["form"].errors.get("username", [])
    ]


def test_the_members_form_does_not_tell_other_restaurants_accounts_from_unknown_names(
    mine: World, theirs: World
) -> None:
    """An owner could learn which names the platform's other restaurants sign in with: an
    unknown name was "No active user", another restaurant's account was added (and could be
    removed again, no trace). Every account the owner may not add answers as a name no
    account has, and nothing is written (red: bob added, 302)."""
    User.objects.create_user("platform-staff", is_staff=True)
    User.objects.create_user("gone", is_active=False)
    owner = owner_client(mine)

    answers = {
        name: post_form(owner, "/dashboard/members/", {"username": name, "role": Role.OWNER})
        for name in ("nobody", theirs.user.username, "platform-staff", "gone")
    }

    assert {name: a.status_code for name, a in answers.items()} == dict.fromkeys(answers, 400)
    errors = {name: form_errors(a, name) for name, a in answers.items()}
    assert len({tuple(e) for e in errors.values()}) == 1, errors
    assert Membership.objects.filter(tenant=mine.tenant).count() == 1


def test_an_account_of_no_restaurant_is_added_once_then_not_by_another(
    mine: World, theirs: World
) -> None:
    User.objects.create_user("newcomer")
    theirs_owner = owner_client(theirs)

    added = post_form(owner_client(mine), "/dashboard/members/", {"username": "newcomer"} | STAFF)
    refused = post_form(theirs_owner, "/dashboard/members/", {"username": "newcomer"} | STAFF)

    assert (added.status_code, refused.status_code) == (302, 400)
    assert form_errors(refused, "newcomer") == form_errors(
        post_form(theirs_owner, "/dashboard/members/", {"username": "nobody"} | STAFF), "nobody"
    )
    assert list(
        Membership.objects.filter(user__username="newcomer").values_list("tenant", flat=True)
    ) == [mine.tenant.pk]


@pytest.mark.django_db(transaction=True)
def test_two_restaurants_adding_one_new_account_at_once_add_it_once(
    mine: World, theirs: World
) -> None:
    """Another restaurant's owner adds the account while this owner's add waits on it: the
    add reads the account's memberships after that commit and refuses (red: both added)."""
    User.objects.create_user("newcomer")
    owner = owner_client(mine)
    form = {"username": "newcomer", "role": Role.STAFF}

    with committed_once_waited_on(
        lambda: add_member(tenant=theirs.tenant, username="newcomer", role=Role.STAFF)
    ):
        answer = post_form(owner, "/dashboard/members/", form)

    assert answer.status_code == 400, answer.status_code
    assert list(
        Membership.objects.filter(user__username="newcomer").values_list("tenant", flat=True)
    ) == [theirs.tenant.pk]


def test_the_last_owner_can_neither_leave_nor_be_demoted(mine: World) -> None:
    owner = owner_client(mine)
    me = Membership.objects.get(tenant=mine.tenant, user=mine.user)
    demoted = post_form(owner, f"/dashboard/members/{me.pk}/role/", {"role": Role.STAFF})
    removed = post_form(owner, f"/dashboard/members/{me.pk}/remove/", {})
    assert demoted.status_code == removed.status_code == 302
    me.refresh_from_db()
    assert me.role == Role.OWNER
    # with a second owner, stepping down works
    second = make_merchant(mine.tenant, "second-owner", role=Role.OWNER)
    post_form(owner, f"/dashboard/members/{me.pk}/role/", {"role": Role.MANAGER})
    me.refresh_from_db()
    assert me.role == Role.MANAGER
    assert Membership.objects.get(user=second).role == Role.OWNER


def test_a_manager_cannot_reach_the_members_page(mine: World) -> None:
    client = Client()
    client.force_login(make_merchant(mine.tenant, "mgr", role=Role.MANAGER))
    assert client.get("/dashboard/members/").status_code == 403


@pytest.mark.parametrize("step", ["demote", "leave"])
def test_an_owner_stepping_down_lands_on_the_board_with_the_change_said(
    mine: World, step: str
) -> None:
    """An owner (not the last) makes themselves a manager, or leaves: they are sent to the
    orders board, which they still reach, with the change said (red: back to the members page,
    a "Not allowed" 403 right after their own change went through). Leaving their only
    restaurant, the board says they have none."""
    make_merchant(mine.tenant, "second-owner", role=Role.OWNER)
    owner = owner_client(mine)
    me = Membership.objects.get(tenant=mine.tenant, user=mine.user)
    if step == "demote":
        r = post_form(owner, f"/dashboard/members/{me.pk}/role/", {"role": Role.MANAGER})
    else:
        r = post_form(owner, f"/dashboard/members/{me.pk}/remove/", {})

    assert r.status_code == 302 and r["Location"] == "/dashboard/"
    landing = owner.get(r["Location"])
    text = landing.content.decode()
    if step == "demote":
        assert landing.status_code == 200 and f"{mine.user.username} is now manager." in text
    else:
        assert landing.status_code == 403 and f"Removed {mine.user.username}." in text


@pytest.mark.parametrize("repeat", ["double-click", "stale-tab"])
def test_an_owner_stepping_down_twice_is_told_the_change_is_made_not_refused(
    mine: World, repeat: str
) -> None:
    """An owner makes themselves a manager with a double click (the second press arriving
    once the first is done, the same form token) or again from a members page left open in
    another tab: their change is in place, so they land on the board told so (red: a "Not
    allowed" 403, "this needs the Owner role", at the form's URL, for a change that was made),
    and nothing else changes."""
    make_merchant(mine.tenant, "second-owner", role=Role.OWNER)
    owner = owner_client(mine)
    me = Membership.objects.get(tenant=mine.tenant, user=mine.user)
    url = f"/dashboard/members/{me.pk}/role/"
    form = {"role": Role.MANAGER, "form_restaurant": str(mine.tenant.pk)}
    first_tab = form_token(owner.get("/dashboard/members/").content.decode())
    other_tab = form_token(owner.get("/dashboard/members/").content.decode())
    owner.post(url, {**form, "idempotency_key": first_tab})
    owner.get("/dashboard/")  # the first press's landing, its message shown

    again = first_tab if repeat == "double-click" else other_tab
    r = owner.post(url, {**form, "idempotency_key": again})

    assert r.status_code == 302 and r["Location"] == "/dashboard/", r.status_code
    landing = owner.get(r["Location"])
    assert landing.status_code == 200
    assert f"{mine.user.username} is now manager" in landing.content.decode()
    me.refresh_from_db()
    assert me.role == Role.MANAGER
    # a change other than the one made is still refused: a manager may not give roles
    refused = owner.post(url, {"role": Role.OWNER, "form_restaurant": str(mine.tenant.pk)})
    assert refused.status_code == 403
    me.refresh_from_db()
    assert me.role == Role.MANAGER
