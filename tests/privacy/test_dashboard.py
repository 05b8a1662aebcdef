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
    assert f"This diner is erased: 1 order(s) show {log.pseudonym}." in again.content.decode()
    assert "Diner erased: 0" not in again.content.decode()
    # an id no diner of this restaurant had (a typo?) is said to be that
    typo = owner.post("/dashboard/privacy/", {"diner_id": "zeo", "confirm": "on"}, follow=True)
    assert "Nothing to erase: no orders, stored replies or sessions of this restaurant name" in (
        typo.content.decode()
    )


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


def test_a_redis_node_down_stops_the_erasure_with_a_message_and_a_second_submit_finishes_it(
    tenant, settings
):
    from tests.conftest import use_topology
    from tests.support.redis_nodes import RedisNode

    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    node = RedisNode().start()
    try:
        # given the tenant's Redis node, which goes down (its data kept) as the owner erases
        use_topology(settings, shards=[node.url])
        place(api_for(tenant, diner="zoe"), menu_for(tenant), "k1", note="call me")
        owner = logged_in(tenant, "owner")
        node.client().save()
        node.stop()
        r = owner.post("/dashboard/privacy/", {"diner_id": "zoe", "confirm": "on"}, follow=True)
        # then the owner is told it did not finish and to submit it again, not a server error
        page = r.content.decode()
        assert r.status_code == 200 and "The erasure did not finish" in page
        assert not DinerErasure.objects.exists()
        # and once the node is back, submitting again finishes it
        node.start()
        r = owner.post("/dashboard/privacy/", {"diner_id": "zoe", "confirm": "on"}, follow=True)
        assert "Diner erased" in r.content.decode() or "Nothing left" in r.content.decode()
        assert DinerErasure.objects.count() == 1
        assert not Order.all_tenants.filter(diner_id="zoe").exists()
    finally:
        node.remove()
