"""A restaurant's owner erases a diner from the dashboard's privacy page."""

from __future__ import annotations

import pytest
from django.test import Client

from ordering.models import DinerErasure, Order
from tenants.models import DinerSession
from tests.conftest import api_for, menu_for
from tests.dashboard.factories import make_merchant
from tests.privacy.test_erase_diner import place

pytestmark = pytest.mark.django_db


def logged_in(tenant, role: str) -> Client:
    client = Client()
    client.force_login(make_merchant(tenant, f"{role}-user", role=role))
    return client


def test_the_owner_erases_a_diner(tenant, other_tenant, settings):
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    menu = menu_for(tenant)
    place(api_for(tenant, diner="zoe"), menu, "k1", note="call me")
    place(api_for(other_tenant, diner="zoe"), menu_for(other_tenant), "k1")
    owner = logged_in(tenant, "owner")
    r = owner.post("/dashboard/privacy/", {"diner_id": "zoe", "confirm": "on"})
    assert r.status_code == 302 and r["Location"] == "/dashboard/privacy/"
    log = DinerErasure.objects.get()
    assert log.requested_by == "owner:owner-user" and log.tenant == tenant
    assert Order.all_tenants.get(tenant=tenant).diner_id == log.pseudonym
    assert not DinerSession.objects.filter(tenant=tenant, diner_id="zoe").exists()
    # only this restaurant's diner: the other restaurant's zoe is untouched
    assert Order.all_tenants.get(tenant=other_tenant).diner_id == "zoe"
    page = owner.get("/dashboard/privacy/").content.decode()
    assert log.pseudonym in page and "Diner erased: 1 order(s)" in page
    # submitted again (a double click): logged, and said to have found nothing left (it said
    # "Diner erased: 0 order(s)")
    again = owner.post("/dashboard/privacy/", {"diner_id": "zoe", "confirm": "on"}, follow=True)
    assert DinerErasure.objects.count() == 2
    assert "Nothing left to erase for this diner" in again.content.decode()
    assert "Diner erased: 0" not in again.content.decode()


@pytest.mark.parametrize(
    "form",
    [{"diner_id": "zoe"}, {"diner_id": "not valid!", "confirm": "on"}, {"confirm": "on"}],
    ids=["unconfirmed", "malformed id", "no id"],
)
def test_a_bad_form_erases_nothing(tenant, form):
    place(api_for(tenant, diner="zoe"), menu_for(tenant), "k1")
    r = logged_in(tenant, "owner").post("/dashboard/privacy/", form)
    assert r.status_code == 400
    assert not DinerErasure.objects.exists()
    assert Order.all_tenants.get().diner_id == "zoe"


def test_a_manager_may_not(tenant):
    r = logged_in(tenant, "manager").post(
        "/dashboard/privacy/", {"diner_id": "zoe", "confirm": "on"}
    )
    assert r.status_code == 403 and not DinerErasure.objects.exists()


def test_the_pseudonym_an_erasure_showed_is_refused_with_the_reason(tenant, settings):
    """The orders list and the erasure log show the pseudonym; an owner who pastes it is told
    why nothing happens (red when it was erased as a diner: the orders changed name)."""
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    place(api_for(tenant, diner="zoe"), menu_for(tenant), "k1")
    owner = logged_in(tenant, "owner")
    assert (
        owner.post("/dashboard/privacy/", {"diner_id": "zoe", "confirm": "on"}).status_code == 302
    )
    pseudonym = DinerErasure.objects.get().pseudonym
    r = owner.post("/dashboard/privacy/", {"diner_id": pseudonym, "confirm": "on"})
    assert r.status_code == 400
    assert "is the pseudonym of a diner erased already" in r.content.decode()
    assert DinerErasure.objects.count() == 1
    assert Order.all_tenants.get().diner_id == pseudonym
