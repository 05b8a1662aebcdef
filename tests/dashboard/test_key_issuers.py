"""Secret keys that a member who has left still knows (``tenants/key_issuers.py``): a key
records who issued it on the dashboard, and the owners left are told which live secret keys
someone no longer an owner saw in full."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib import messages
from django.contrib.auth.models import User
from django.test import Client

from tenants.api_keys import issue_api_key
from tenants.models import ApiClient, Membership
from tests.dashboard.conftest import World
from tests.dashboard.factories import form_token, make_merchant

pytestmark = pytest.mark.django_db
Role = Membership.Role
KEYS = "/dashboard/api-keys/"


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def post_form(client: Client, url: str, data: dict[str, Any], page: str) -> Any:
    token = form_token(client.get(page).content.decode())
    return client.post(url, {**data, "idempotency_key": token})


def issue(client: Client, name: str, kind: str) -> ApiClient:
    post_form(client, KEYS, {"name": name, "kind": kind}, KEYS)
    return ApiClient.objects.get(name=name)


def warnings_after(response: Any) -> list[str]:
    return [
        str(m) for m in messages.get_messages(response.wsgi_request) if m.level == messages.WARNING
    ]


def marked_rows(owner: Client) -> list[str]:
    """The names of the keys the keys page marks as known by someone who has left."""
    clients = owner.get(KEYS).context["clients"].rows
    return [client.name for client in clients if client.issuer_left]


def test_a_key_records_who_issued_it_and_the_page_names_them(mine: World) -> None:
    owner = signed_in(mine.user)

    kiosk = issue(owner, "Kiosk", ApiClient.Kind.MERCHANT)

    assert kiosk.issued_by_id == mine.user.pk
    page = owner.get(KEYS).content.decode()
    assert f'<td class="words">{mine.user.username}' in page
    assert marked_rows(owner) == []


@pytest.mark.parametrize("leaving", ["removed", "lowered to manager"])
def test_the_owners_left_are_told_of_the_secret_keys_a_leaving_owner_saw(
    mine: World, leaving: str
) -> None:
    """Red before: removing an owner said "Removed bob." and nothing of the secret key bob
    had issued and seen in full, which still worked, and the keys page did not say who had
    issued which key, so the owners left could not tell which to revoke."""
    bob = make_merchant(mine.tenant, "bob", role=Role.OWNER)
    as_bob = signed_in(bob)
    issue(as_bob, "Bob's till", ApiClient.Kind.MERCHANT)
    issue(as_bob, "Bob's app", ApiClient.Kind.PUBLISHABLE)  # public already: not counted
    revoked = issue(as_bob, "Bob's old till", ApiClient.Kind.MERCHANT)
    post_form(as_bob, f"{KEYS}{revoked.pk}/revoke/", {}, KEYS)
    owner = signed_in(mine.user)
    membership = Membership.objects.get(tenant=mine.tenant, user=bob)

    if leaving == "removed":
        url, data = f"/dashboard/members/{membership.pk}/remove/", {}
    else:
        url, data = f"/dashboard/members/{membership.pk}/role/", {"role": Role.MANAGER}
    done = post_form(owner, url, data, "/dashboard/members/")

    assert warnings_after(done) == [
        "1 active secret key(s) bob issued still work, and bob saw each in full. "
        "Revoke them on the API keys page if bob should no longer hold them."
    ]
    assert marked_rows(owner) == ["Bob's till"]


def test_an_owner_who_stays_an_owner_or_issued_no_secret_key_is_no_warning(mine: World) -> None:
    bob = make_merchant(mine.tenant, "bob", role=Role.OWNER)
    carol = make_merchant(mine.tenant, "carol", role=Role.OWNER)
    issue(signed_in(bob), "Bob's till", ApiClient.Kind.MERCHANT)
    owner = signed_in(mine.user)
    bob_membership = Membership.objects.get(tenant=mine.tenant, user=bob)
    carol_membership = Membership.objects.get(tenant=mine.tenant, user=carol)

    kept = post_form(
        owner,
        f"/dashboard/members/{bob_membership.pk}/role/",
        {"role": Role.OWNER},
        "/dashboard/members/",
    )
    carol_left = post_form(
        owner, f"/dashboard/members/{carol_membership.pk}/remove/", {}, "/dashboard/members/"
    )

    assert warnings_after(kept) == [] and warnings_after(carol_left) == []
    assert marked_rows(owner) == []


def test_a_key_whose_issuer_s_account_is_gone_reads_as_issued_by_no_one(mine: World) -> None:
    bob = make_merchant(mine.tenant, "bob", role=Role.OWNER)
    till = issue(signed_in(bob), "Bob's till", ApiClient.Kind.MERCHANT)

    bob.delete()

    till.refresh_from_db()
    assert till.issued_by_id is None and till.revoked_at is None
    page = signed_in(mine.user).get(KEYS)
    assert page.status_code == 200 and "Bob&#x27;s till" in page.content.decode()


def test_a_live_secret_key_whose_issuer_s_account_was_deleted_stays_marked(mine: World) -> None:
    """An account deleted (the admin's delete, say) is someone who has left as surely as a
    member removed, and saw the key in full; red before: the deletion set ``issued_by`` to
    NULL, which read as a key a command issued, and the mark went with it. A command's key,
    which no one saw on the page, stays unmarked."""
    bob = make_merchant(mine.tenant, "bob", role=Role.OWNER)
    as_bob = signed_in(bob)
    issue(as_bob, "Bob's till", ApiClient.Kind.MERCHANT)
    issue(as_bob, "Bob's app", ApiClient.Kind.PUBLISHABLE)  # public already: not marked
    revoked = issue(as_bob, "Bob's old till", ApiClient.Kind.MERCHANT)
    post_form(as_bob, f"{KEYS}{revoked.pk}/revoke/", {}, KEYS)
    issue_api_key(tenant=mine.tenant, name="Command's till", kind=ApiClient.Kind.MERCHANT)

    bob.delete()

    owner = signed_in(mine.user)
    assert marked_rows(owner) == ["Bob's till"]
    assert '<td class="words">—' in owner.get(KEYS).content.decode()


def test_saving_a_key_in_the_admin_keeps_its_issuer_s_deletion(mine: World) -> None:
    """The admin shows a key's fields read-only, ``issuer_gone`` too: editable, a staff
    member's Save, whose form holds no such box, cleared it and the keys page's mark."""
    bob = make_merchant(mine.tenant, "bob", role=Role.OWNER)
    till = issue(signed_in(bob), "Bob's till", ApiClient.Kind.MERCHANT)
    bob.delete()
    staff = signed_in(User.objects.create_superuser("root", password="x-123456789"))

    saved = staff.post(f"/admin/tenants/apiclient/{till.pk}/change/", {"_save": "Save"})

    assert saved.status_code == 302
    till.refresh_from_db()
    assert till.issuer_gone
    assert marked_rows(signed_in(mine.user)) == ["Bob's till"]
