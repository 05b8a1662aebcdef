"""A restaurant's owner erases a diner, and downloads a diner's copy of their data, from the
dashboard's privacy page."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.utils import timezone

from idempotency.stores import nodes as stores
from idempotency.stores.audit_stream import drain_audits
from ordering.dashboard import privacy as privacy_page
from ordering.models import DinerDataExport, DinerErasure, Order
from ordering.privacy.diners import diner_hash
from ordering.services.lifecycle import transition_order
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
        # and once the node is back, submitting again finishes it, saying how many orders
        # show the pseudonym: the first submit renamed them before the node stopped it, and
        # the page said "0 order(s) now show …" of a diner with an order
        node.start()
        r = owner.post("/dashboard/privacy/", {"diner_id": "zoe", "confirm": "on"}, follow=True)
        log = DinerErasure.objects.get()
        assert f"Diner erased: 1 order(s) now show {log.pseudonym}" in r.content.decode()
        assert not Order.all_tenants.filter(diner_id="zoe").exists()
    finally:
        node.remove()


# --- a diner's copy of their data -------------------------------------------------------------


def test_the_owner_downloads_exactly_the_diner_s_data_and_the_copy_is_logged(tenant, other_tenant):
    # given zoe's orders, one moved by platform staff; yan's; and zoe's at another restaurant
    menu = menu_for(tenant)
    first = place(api_for(tenant, diner="zoe"), menu, "k1", note="zoe's doorbell")
    transition_order(
        tenant=tenant, order_id=int(first.json()["id"]), target="CANCELLED", actor="staff:bob-x"
    )
    place(api_for(tenant, diner="yan"), menu, "k1", note="yan's note")
    place(api_for(other_tenant, diner="zoe"), menu_for(other_tenant), "k1", note="at B")
    owner = logged_in(tenant, "owner")

    r = owner.post("/dashboard/privacy/export/", {"diner_id": "zoe"})

    assert r.status_code == 200 and r.streaming
    day = timezone.localdate(timezone=tenant.zone).isoformat()
    assert r["Content-Disposition"] == f'attachment; filename="diner-{tenant.slug}-{day}.json"'
    assert r["Cache-Control"] == "no-store"
    assert r["Content-Type"] == "application/json; charset=utf-8"
    text = b"".join(r.streaming_content).decode()
    document = json.loads(text)
    assert document["restaurant"]["slug"] == tenant.slug and document["diner_id"] == "zoe"
    [order] = document["orders"]
    assert order["id"] == first.json()["id"] and order["note"] == "zoe's doorbell"
    assert order["status_history"][-1]["by"] == "Platform staff"
    for absent in ("yan", "at B", "bob-x"):
        assert absent not in text, absent
    # logged: who and when, the diner only as a keyed hash; the page lists it without the id
    log = DinerDataExport.objects.get()
    assert (log.tenant, log.requested_by) == (tenant, "owner:owner-user")
    assert log.diner_hash == diner_hash("zoe")
    page = owner.get("/dashboard/privacy/").content.decode()
    assert "owner-user (owner)" in page and "zoe" not in page


def test_a_diner_erased_already_downloads_as_empty_lists(tenant, settings):
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    place(api_for(tenant, diner="zoe"), menu_for(tenant), "k1", note="call me")
    owner = logged_in(tenant, "owner")
    assert (
        owner.post("/dashboard/privacy/", {"diner_id": "zoe", "confirm": "on"}).status_code == 302
    )

    r = owner.post("/dashboard/privacy/export/", {"diner_id": "zoe"})

    document = json.loads(b"".join(r.streaming_content))
    sections = ("orders", "diner_sessions", "idempotency_records", "duplicate_audits")
    assert r.status_code == 200 and all(document[s] == [] for s in sections)


@pytest.mark.parametrize(
    ("form", "error"),
    [
        ({"diner_id": "not valid!"}, "1-64 letters, digits or . _ : @ -"),
        ({}, "This field is required."),
        ({"diner_id": "erased-0123456789abcdef"}, "is the pseudonym of a diner erased already"),
    ],
    ids=["malformed id", "no id", "pseudonym"],
)
def test_a_bad_id_is_the_download_form_s_error(tenant, form, error):
    r = logged_in(tenant, "owner").post("/dashboard/privacy/export/", form)
    assert r.status_code == 400 and not r.streaming
    page = r.content.decode()
    assert error in page and 'id="export-diner_id"' in page
    assert not DinerDataExport.objects.exists()


@pytest.mark.parametrize("role", ["manager", "staff"])
def test_roles_below_owner_may_not_download(tenant, role):
    place(api_for(tenant, diner="zoe"), menu_for(tenant), "k1", note="call me")
    r = logged_in(tenant, role).post("/dashboard/privacy/export/", {"diner_id": "zoe"})
    assert r.status_code == 403 and not r.streaming
    assert "call me" not in r.content.decode() and not DinerDataExport.objects.exists()


def test_the_download_is_a_csrf_checked_post_never_a_get(tenant):
    """The id stays out of URLs (a GET with it in the query is refused), and another site
    cannot make an owner's browser download and log a copy (no CSRF token: 403)."""
    owner = Client(enforce_csrf_checks=True)
    owner.force_login(make_merchant(tenant, "owner-user", role="owner"))
    assert owner.get("/dashboard/privacy/export/?diner_id=zoe").status_code == 405
    assert owner.post("/dashboard/privacy/export/", {"diner_id": "zoe"}).status_code == 403
    assert not DinerDataExport.objects.exists()
    # with the token the page's form carries, it answers
    page = owner.get("/dashboard/privacy/")
    token = page.cookies["csrftoken"].value
    r = owner.post(
        "/dashboard/privacy/export/",
        {"diner_id": "zoe", "csrfmiddlewaretoken": token},
    )
    assert r.status_code == 200 and DinerDataExport.objects.count() == 1


def test_a_copy_larger_than_the_page_writes_in_one_request_is_refused_with_the_way(
    tenant, monkeypatch
):
    """The page writes the copy within one request, which the server ends after its time
    limit: a copy cut there reached the owner as a 200 with half a JSON file. Past the bound
    the form says so and names the command, and nothing is logged."""
    menu = menu_for(tenant)
    zoe = api_for(tenant, diner="zoe")
    place(zoe, menu, "k1")
    place(zoe, menu, "k2")  # 2 orders, 1 session, 2 stored replies: 5 rows
    owner = logged_in(tenant, "owner")
    monkeypatch.setattr(privacy_page, "PAGE_MAX_ROWS", 4)

    r = owner.post("/dashboard/privacy/export/", {"diner_id": "zoe"})

    assert r.status_code == 400 and not r.streaming
    page = r.content.decode()
    assert "This diner has 5 records here, more than this page writes in one go (4)" in page
    assert f"export_diner {tenant.slug}" in page
    assert not DinerDataExport.objects.exists()
    monkeypatch.setattr(privacy_page, "PAGE_MAX_ROWS", 5)
    assert owner.post("/dashboard/privacy/export/", {"diner_id": "zoe"}).status_code == 200


def test_audits_still_in_the_redis_stream_count_toward_the_page_s_bound(tenant, monkeypatch):
    """The copy drains the Redis audit stream and lists what it drained: the count checked
    against the bound must hold those audits too, or a diner who retried a lot while the drain
    was not running passed the check and the page wrote a copy past its bound."""
    menu = menu_for(tenant)
    zoe = api_for(tenant, diner="zoe")
    place(zoe, menu, "k1")  # 1 order, 1 session, 1 stored reply
    drain_audits()
    for _ in range(2):  # 2 duplicate-hit audits, still in the stream
        stores.local_cache().clear()
        assert place(zoe, menu, "k1")["X-Idempotent-Result"] == "HIT"
    owner = logged_in(tenant, "owner")
    monkeypatch.setattr(privacy_page, "PAGE_MAX_ROWS", 4)

    r = owner.post("/dashboard/privacy/export/", {"diner_id": "zoe"})

    assert r.status_code == 400 and not r.streaming
    assert "This diner has 5 records here" in r.content.decode()
    assert not DinerDataExport.objects.exists()
