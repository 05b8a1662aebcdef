"""The tenant's admin page: what staff type into its JSON fields (the paths a restaurant's
stored replies redact, the optional fields its log lines keep) is refused as a form error
whatever it is, never a 500, and nothing is saved."""

from __future__ import annotations

import json

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Permission, User
from django.test import Client

from tenants.api_keys import issue_api_key
from tenants.models import Membership, Tenant

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff() -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(User.objects.create_superuser("root", password=None))
    return client


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("[" * 5000 + "]" * 5000, id="nested-past-the-recursion-limit"),
        pytest.param("[1" + "0" * 5000 + "]", id="a-number-of-5000-digits"),
        pytest.param('["\\ud800"]', id="a-lone-surrogate"),
    ],
)
@pytest.mark.parametrize("field", ["redacted_paths", "log_fields"])
def test_json_no_field_can_hold_is_a_form_error(staff: Client, field: str, text: str) -> None:
    """Red: 500. Django's JSON form field let through what Python's reader raises besides a
    syntax error (a RecursionError, an integer past its digit limit), and a lone surrogate,
    read from its escape, reached the page drawn again with the error, which could not be
    encoded."""
    tenant = Tenant.objects.create(slug="roma", name="Roma")
    page = {"slug": tenant.slug, "name": "Roma Centro", "region": tenant.region}
    page.update(status=tenant.status, time_zone=tenant.time_zone, redacted_paths="[]")
    rows = {"memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0"}

    answer = staff.post(f"/admin/tenants/tenant/{tenant.pk}/change/", {**page, **rows, field: text})

    assert answer.status_code == 200
    assert answer.context["adminform"].form.errors[field] == ["Enter a valid JSON."]
    assert Tenant.objects.get(pk=tenant.pk).name == "Roma"


@pytest.mark.parametrize(
    "field, value, message",
    [
        pytest.param(
            "redacted_paths",
            json.dumps([f"path{n}" for n in range(51)]),
            "At most 50 paths, each of at most 200 characters.",
            id="more-paths-than-the-bound",
        ),
        pytest.param(
            "redacted_paths",
            json.dumps(["a" * 201]),
            "At most 50 paths, each of at most 200 characters.",
            id="a-path-longer-than-the-bound",
        ),
        pytest.param(
            "log_fields",
            json.dumps(["request_id"] * 2),
            "Name each log field once.",
            id="a-log-field-named-twice",
        ),
    ],
)
def test_json_past_its_bound_is_a_form_error(
    staff: Client, field: str, value: str, message: str
) -> None:
    """Red: saved. Each was bounded by the request's size alone (1 MiB): 100,000 paths, or
    one path of 750,000 characters, or a log field named 75,000 times, were kept on the
    tenant's row, and every stored reply of the restaurant's writes walked each path."""
    tenant = Tenant.objects.create(slug="roma", name="Roma")
    page = {"slug": tenant.slug, "name": "Roma Centro", "region": tenant.region}
    page.update(status=tenant.status, time_zone=tenant.time_zone, redacted_paths="[]")
    rows = {"memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0"}

    answer = staff.post(
        f"/admin/tenants/tenant/{tenant.pk}/change/", {**page, **rows, field: value}
    )

    assert answer.status_code == 200
    assert answer.context["adminform"].form.errors[field] == [message]
    saved = Tenant.objects.get(pk=tenant.pk)
    assert (saved.name, saved.redacted_paths, saved.log_fields) == ("Roma", [], None)


def page_as_shown(staff: Client, tenant: Tenant) -> dict[str, object]:
    """The tenant's admin page's form as a browser would send it back unchanged."""
    page = staff.get(f"/admin/tenants/tenant/{tenant.pk}/change/")
    form = page.context["adminform"].form
    data = {name: form[name].value() for name in form.fields}
    data = {name: "" if value is None else value for name, value in data.items()}
    return {**data, "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0"}


def test_a_page_open_before_a_suspension_saved_after_it_leaves_the_tenant_suspended(
    staff: Client,
) -> None:
    """Red before: the page sent back the status it showed, and the form wrote it: staff
    renaming a restaurant in a tab opened before a colleague suspended it (its keys abused)
    reactivated it, and its keys answered again."""
    tenant = Tenant.objects.create(slug="roma", name="Roma")
    _, raw_key = issue_api_key(tenant=tenant, name="diner app")
    shown = page_as_shown(staff, tenant)
    staff.post(
        "/admin/tenants/tenant/",
        {"action": "suspend", ACTION_CHECKBOX_NAME: [str(tenant.pk)]},
    )

    answer = staff.post(
        f"/admin/tenants/tenant/{tenant.pk}/change/", {**shown, "name": "Roma Centro"}
    )

    assert answer.status_code == 302
    tenant.refresh_from_db()
    assert (tenant.name, tenant.status) == ("Roma Centro", Tenant.Status.SUSPENDED)
    api = Client(HTTP_AUTHORIZATION=f"Api-Key {raw_key}")
    assert api.get("/api/v1/menu/").json()["code"] == "TENANT_SUSPENDED"


def test_staff_still_suspend_and_reactivate_a_tenant_on_its_page(staff: Client) -> None:
    tenant = Tenant.objects.create(slug="roma", name="Roma")
    for status in (Tenant.Status.SUSPENDED, Tenant.Status.ACTIVE):
        answer = staff.post(
            f"/admin/tenants/tenant/{tenant.pk}/change/",
            {**page_as_shown(staff, tenant), "status": status},
        )
        assert answer.status_code == 302
        tenant.refresh_from_db()
        assert tenant.status == status


def test_pages_to_view_only_show_no_field_of_what_a_page_showed() -> None:
    """The hidden fields that send back what a page showed (status, role, active) have no use
    on a page that saves nothing, where every field is shown as text: there they read as
    rows of their own ("Status shown: active")."""
    tenant = Tenant.objects.create(slug="roma", name="Roma")
    member = Membership.objects.create(
        tenant=tenant, user=User.objects.create(username="o"), role=Membership.Role.OWNER
    )
    viewer = User.objects.create_user("viewer", password=None, is_staff=True)
    viewer.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_user", "view_membership", "view_tenant"])
    )
    client = Client()
    client.force_login(viewer)
    for url in (
        f"/admin/tenants/tenant/{tenant.pk}/change/",
        f"/admin/tenants/membership/{member.pk}/change/",
        f"/admin/auth/user/{member.user_id}/change/",
    ):
        page = client.get(url)
        assert page.status_code == 200
        assert "_shown" not in page.content.decode() and " shown" not in page.content.decode()
