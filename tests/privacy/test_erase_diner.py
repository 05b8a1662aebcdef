"""Erasing a diner (issue 15 item 4) on one Redis node, three shards and a Redis Cluster.

A diner places orders with a note, replays one, cancels one, spends a pre-issued token and
holds an unused one; the restaurant's backend cancels another of the diner's orders (its stored
reply shows the diner id). After ``erase_diner`` nothing in PostgreSQL or Redis names the
diner, the orders are still there under a pseudonym, and another diner's and another tenant's
replays are byte-identical to their first answers.
"""

from __future__ import annotations

import io
import os
import pwd
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone
from redis.exceptions import RedisError

from idempotency.audit import AuditEvent
from idempotency.core import engine
from idempotency.core.keys import redis_key_for
from idempotency.core.ratelimit import rate_key
from idempotency.core.tokens import principal_quota_key
from idempotency.models import DuplicateAudit, IdempotencyRecord
from idempotency.stores import nodes as stores
from idempotency.stores.audit_stream import append, drain_audits, stream_key
from ordering.models import DinerErasure, Order, OrderTransition
from ordering.privacy.diner_export import log_export
from ordering.privacy.diners import NotADinerId, diner_hash, erase_diner
from tenants.models import ApiClient, DinerSession, Tenant
from tenants.redis_routing import client_for_tenant
from tenants.retention import purge_expired_data
from tests.conftest import api_for, menu_for, use_topology
from tests.dashboard.factories import make_merchant
from tests.privacy.conftest import dropped_by_another_process, tenant_keys
from tests.support.concurrency import at_once, committed_once_waited_on
from tests.support.ports import free_port
from tests.support.redis_nodes import RedisNode
from tests.support.terminal import Terminal

pytestmark = pytest.mark.django_db


def place(api: Any, menu: Any, key: str, note: str = "") -> Any:
    body = {
        "items": [{"dish_id": menu["pizza"].pk, "quantity": 1}],
        "payment_method": "card",
        "note": note,
    }
    return api.post("/api/v1/orders/", body, format="json", HTTP_IDEMPOTENCY_KEY=key)


def diner_activity(tenant: Any, menu: Any, diner: str) -> dict[str, Any]:
    """What a busy diner leaves behind; returns the diner's API client and its answers."""
    api = api_for(tenant, diner=diner)
    first = place(api, menu, "k1", note=f"ring twice, ask for {diner}")
    second = place(api, menu, "k2", note="leave at the door")
    assert first.status_code == second.status_code == 201
    stores.local_cache().clear()
    assert place(api, menu, "k1", note=f"ring twice, ask for {diner}").content == first.content
    assert api.post(f"/api/v1/orders/{first.json()['id']}/cancel/").status_code == 200
    issued = api.post("/api/v1/idempotency-tokens/", {"count": 2}, format="json")
    assert issued.status_code == 201, issued.content
    token, _unused = issued.json()["tokens"]
    assert place(api, menu, token).status_code == 201
    return {"api": api, "first": first, "second": second}


def cancel_as_merchant(tenant: Any, order_id: str) -> Any:
    """The restaurant's backend cancels the order: its stored reply shows the diner."""
    merchant = api_for(tenant, kind=ApiClient.Kind.MERCHANT)
    return merchant.post(
        f"/api/v1/orders/{order_id}/transition/",
        {"to": "CANCELLED"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="m1",
    )


def outstanding_tokens(tenant_key: str) -> int:
    """The tenant's count of outstanding tokens in its quota ledgers (issue_tokens.lua)."""
    ledgers = [c for k, c in tenant_keys(tenant_key).items() if k.endswith(b":tokq")]
    return sum(int(pair.split(b"=")[1]) for c in ledgers for pair in c.split(b"|"))


def replay_is_identical(api: Any, menu: Any, key: str, first: Any, note: str = "") -> bool:
    stores.local_cache().clear()
    again = place(api, menu, key, note=note)
    return again["X-Idempotent-Result"] == "HIT" and again.content == first.content


def test_erase_diner_leaves_nothing_of_theirs(topology, tenant, make_tenant, settings):
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    # given diner zoe's activity, diner yan's order, and another tenant's diner zoe
    menu = menu_for(tenant)
    zoe = diner_activity(tenant, menu, "zoe")
    moved = cancel_as_merchant(tenant, zoe["second"].json()["id"])
    assert moved.status_code == 200 and b'"zoe"' in moved.content
    d2_api = api_for(tenant, diner="yan")
    d2_first = place(d2_api, menu, "k1")
    other = make_tenant()
    other_menu = menu_for(other)
    other_api = api_for(other, diner="zoe")
    other_first = place(other_api, other_menu, "k1")
    drain_audits()
    tenant_key = str(tenant.pk)
    assert any(b"zoe" in content for content in tenant_keys(tenant_key).values())
    assert DuplicateAudit.objects.filter(tenant_key=tenant_key, principal="diner:zoe").exists()
    zoe_orders = set(Order.all_tenants.filter(tenant=tenant, diner_id="zoe").values_list("pk"))
    assert len(zoe_orders) == 3

    assert outstanding_tokens(tenant_key) == 1  # zoe's unused one
    zoe_rate = rate_key(tenant=tenant_key, principal="diner:zoe", window_seconds=60).encode()
    assert zoe_rate in tenant_keys(tenant_key)
    # zoe's own count of outstanding tokens (one key per tenant without sub-buckets)
    zoe_ledger = principal_quota_key(
        tenant=tenant_key, token="tok_x.y", principal="diner:zoe"
    ).encode()
    assert zoe_ledger in tenant_keys(tenant_key)

    Order.all_tenants.filter(pk__in=[pk for (pk,) in zoe_orders]).update(
        contact_phone="+33 6 12 34 56 78", delivery_address="4 rue des Lilas"
    )
    # and one more replay of zoe's, whose audit still waits in a Redis stream (not drained)
    late = place(zoe["api"], menu, "k2", note="leave at the door")
    assert late["X-Idempotent-Result"] == "HIT"
    # when staff erase zoe of the first tenant
    log = erase_diner(tenant=tenant, diner_id="zoe", requested_by="staff:alice")

    # then the orders are kept, anonymised under one pseudonym, note, contact and key gone
    orders = Order.all_tenants.filter(pk__in=[pk for (pk,) in zoe_orders])
    assert orders.count() == 3
    assert {
        (o.diner_id, o.note, o.contact_phone, o.delivery_address, o.idempotency_key) for o in orders
    } == {(log.pseudonym, "", "", "", None)}
    assert log.pseudonym.startswith("erased-")
    assert not OrderTransition.all_tenants.filter(tenant=tenant, actor__contains="diner:zoe")
    assert OrderTransition.all_tenants.filter(actor__endswith=f"diner:{log.pseudonym}").exists()
    # no record, audit or session of zoe, and no reply that shows zoe, in PostgreSQL
    records = IdempotencyRecord.objects.filter(tenant_key=tenant_key)
    assert not records.filter(scope__startswith="diner:zoe|").exists()
    assert not [r for r in records if b'"zoe"' in bytes(r.response_body)]
    drain_audits()  # an audit the erasure left in a stream would land now
    assert not DuplicateAudit.objects.filter(tenant_key=tenant_key, principal="diner:zoe")
    assert not DinerSession.objects.filter(tenant=tenant, diner_id="zoe").exists()
    # nothing in Redis names zoe: no reply body, no token of zoe, no claim key of zoe
    left = tenant_keys(tenant_key)
    assert not [k for k, content in left.items() if b"zoe" in content]
    assert not [k for k, content in left.items() if content.startswith(b"p:diner:zoe")]
    zoe_claims = {
        redis_key_for(tenant=tenant_key, scope="diner:zoe|POST|api/v1/orders/", key=k).encode()
        for k in ("k1", "k2")
    }
    assert not zoe_claims & set(left)
    assert zoe_rate not in left
    assert zoe_ledger not in left
    assert outstanding_tokens(tenant_key) == 0  # the quota no longer counts the erased token
    # zoe's token is refused: the session is gone
    assert zoe["api"].get("/api/v1/orders/").status_code == 401
    # the log names who and when, never the id
    assert log.requested_by == "staff:alice" and log.diner_hash == diner_hash("zoe")
    assert log.counts["orders"] == 3 and log.counts["sessions"] == 1
    assert log.counts["records"] >= 5 and log.counts["audits"] >= 1
    assert "zoe" not in repr(DinerErasure.objects.values().get(pk=log.pk)).replace(
        log.diner_hash, ""
    )
    # yan and the other tenant's zoe still replay byte for byte
    assert replay_is_identical(d2_api, menu, "k1", d2_first)
    assert replay_is_identical(other_api, other_menu, "k1", other_first)
    assert Order.all_tenants.filter(tenant=other, diner_id="zoe").count() == 1


def test_erasing_twice_is_safe(tenant, settings):
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    menu = menu_for(tenant)
    diner_activity(tenant, menu, "zoe")
    first = erase_diner(tenant=tenant, diner_id="zoe", requested_by="staff:alice")
    again = erase_diner(tenant=tenant, diner_id="zoe", requested_by="staff:alice")
    assert first.counts["orders"] == 3
    assert again.counts == dict.fromkeys(
        ("sessions", "orders", "records", "audits", "redis_keys"), 0
    )
    assert Order.all_tenants.filter(diner_id=first.pseudonym).count() == 3
    assert DinerErasure.objects.filter(diner_hash=diner_hash("zoe")).count() == 2


def test_a_key_sent_again_after_the_erasure_places_a_new_order(tenant, settings):
    """Nothing links a key sent before the erasure to its order any more: no record, no key
    digest on the order (docs/data-protection.md); the order placed again is the diner's new
    one, the erased one keeps its pseudonym."""
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    menu = menu_for(tenant)
    before = place(api_for(tenant, diner="zoe"), menu, "k1")
    erasure = erase_diner(tenant=tenant, diner_id="zoe", requested_by="staff:alice")
    again = place(api_for(tenant, diner="zoe"), menu, "k1")
    assert (before.status_code, again.status_code) == (201, 201)
    assert again["X-Idempotent-Result"] == "MISS" and again.json()["id"] != before.json()["id"]
    assert Order.all_tenants.get(pk=before.json()["id"]).diner_id == erasure.pseudonym


def test_a_diner_erased_again_after_a_secret_key_rotation_keeps_one_pseudonym(tenant, settings):
    """The README's rotation (the new ``SECRET_KEY``, the old one in ``SECRET_KEY_FALLBACKS``)
    gave the pseudonym a new key: the diner's order placed after the first erasure and erased
    after the rotation took another pseudonym, and the restaurant's books showed one diner as
    two. The erasure keeps the pseudonym an erasure under a key still configured gave."""
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    menu = menu_for(tenant)
    # given zoe erased once
    assert place(api_for(tenant, diner="zoe"), menu, "k1").status_code == 201
    first = erase_diner(tenant=tenant, diner_id="zoe", requested_by="staff:alice")
    # when the site's key is rotated, zoe orders again and is erased again
    settings.SECRET_KEY_FALLBACKS = [settings.SECRET_KEY]
    settings.SECRET_KEY = "a-rotated-secret-key-of-the-site-" + "x" * 40
    assert place(api_for(tenant, diner="zoe"), menu, "k2").status_code == 201
    again = erase_diner(tenant=tenant, diner_id="zoe", requested_by="staff:alice")
    # then both her orders carry the first pseudonym, and the log says so
    assert again.counts["orders"] == 1
    assert again.pseudonym == first.pseudonym
    assert Order.all_tenants.filter(tenant=tenant, diner_id=first.pseudonym).count() == 2
    # and once the old key is dropped, a third erasure still finds it through the second
    settings.SECRET_KEY_FALLBACKS = []
    assert place(api_for(tenant, diner="zoe"), menu, "k3").status_code == 201
    third = erase_diner(tenant=tenant, diner_id="zoe", requested_by="staff:alice")
    assert third.pseudonym == first.pseudonym
    assert Order.all_tenants.filter(tenant=tenant, diner_id=first.pseudonym).count() == 3


def test_other_processes_drop_the_erased_replies(tenant, settings):
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    # given another process's local cache holding the diner's reply, listening for purges
    assert place(api_for(tenant, diner="zoe"), menu_for(tenant), "k1").status_code == 201
    key = redis_key_for(tenant=str(tenant.pk), scope="diner:zoe|POST|api/v1/orders/", key="k1")
    # when the diner is erased, then that process drops it
    assert dropped_by_another_process(
        str(tenant.pk),
        key,
        lambda: erase_diner(tenant=tenant, diner_id="zoe", requested_by="staff:alice"),
    )


def test_command_erases_and_reports(tenant, settings):
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    menu = menu_for(tenant)
    place(api_for(tenant, diner="zoe"), menu, "k1", note="call me")
    out = io.StringIO()
    call_command("erase_diner", tenant.slug, "zoe", "--by", "dpo:carol", stdout=out)
    log = DinerErasure.objects.get()
    assert out.getvalue().startswith(f"erasure {log.pk}: diner now {log.pseudonym}")
    assert log.requested_by == "dpo:carol" and log.counts["orders"] == 1
    assert not Order.all_tenants.filter(diner_id="zoe").exists()


def test_command_run_by_a_user_id_the_system_has_no_name_for_names_the_id(
    tenant, settings, monkeypatch
):
    """A container running as an arbitrary user id, no passwd entry and no ``USER``: without
    ``--by`` the command asked ``getpass.getuser()`` who ran it, which raised ``KeyError``, and
    it died with a traceback before erasing anything."""
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    place(api_for(tenant, diner="zoe"), menu_for(tenant), "k1")
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.delenv(name, raising=False)

    def no_entry(uid: int) -> None:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_entry)

    call_command("erase_diner", tenant.slug, "zoe", stdout=io.StringIO())

    assert DinerErasure.objects.get().requested_by == f"cli:uid-{os.getuid()}"
    assert not Order.all_tenants.filter(diner_id="zoe").exists()


@pytest.mark.parametrize("answer", ["yan\n", "", "\n"], ids=["another-id", "no-answer", "empty"])
def test_the_command_erases_nothing_until_the_diner_id_is_typed(
    tenant, settings, monkeypatch, answer
):
    """Given a diner id, it anonymised the diner's orders and removed their replies without a
    word, where the Privacy page wants a confirmation: a mistyped id (another diner's) or a
    line recalled from the shell's history erased someone else. From a terminal it says what
    goes and wants the id typed; a script, cron or ``call_command`` erases as written."""
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    menu = menu_for(tenant)
    zoe = api_for(tenant, diner="zoe")
    place(zoe, menu, "k1")
    place(zoe, menu, "k2")
    monkeypatch.setattr("sys.stdin", Terminal(answer))
    out = io.StringIO()

    with pytest.raises(CommandError, match="nothing was done"):
        call_command("erase_diner", tenant.slug, "zoe", stdout=out)

    assert f"diner 'zoe' of {tenant.slug} (2 orders)" in out.getvalue()
    assert "cannot be undone" in out.getvalue()
    assert not DinerErasure.objects.exists()
    assert Order.all_tenants.filter(tenant=tenant, diner_id="zoe").count() == 2
    monkeypatch.setattr("sys.stdin", Terminal("zoe\n"))
    call_command("erase_diner", tenant.slug, "zoe", stdout=io.StringIO())
    assert DinerErasure.objects.get().counts["orders"] == 2
    assert not Order.all_tenants.filter(diner_id="zoe").exists()


def test_the_command_under_noinput_asks_nothing(tenant, settings, monkeypatch):
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    place(api_for(tenant, diner="zoe"), menu_for(tenant), "k1")
    monkeypatch.setattr("sys.stdin", Terminal(""))

    call_command("erase_diner", "--noinput", tenant.slug, "zoe", stdout=io.StringIO())

    assert DinerErasure.objects.get().counts["orders"] == 1


def test_the_privacy_page_names_owners_and_not_platform_staff(tenant, settings):
    """The page's "By" column showed the log's ``requested_by`` as stored: ``staff:<user
    name>`` of the staff member who erased in the admin, ``cli:<login>`` of the operator."""
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    for diner, who in [("zoe", "staff:root"), ("yan", "cli:operator"), ("xia", "owner:alice")]:
        erase_diner(tenant=tenant, diner_id=diner, requested_by=who)
    log_export(tenant=tenant, diner_id="wu", requested_by="cli:exporter")
    owner = Client()
    owner.force_login(make_merchant(tenant, "alice"))

    page = owner.get("/dashboard/privacy/").content.decode()

    assert page.count("Platform staff") == 3 and "alice (owner)" in page
    assert "root" not in page and "operator" not in page and "exporter" not in page


def test_command_refuses_an_unknown_tenant(db):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="no tenant with slug 'nope'"):
        call_command("erase_diner", "nope", "zoe")


def test_command_names_the_redis_node_that_did_not_answer_and_what_to_do(tenant, settings):
    """It stopped with redis-py's traceback (ConnectionError, Error 111)."""
    from django.core.management.base import CommandError

    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    place(api_for(tenant, diner="zoe"), menu_for(tenant), "k1", note="call me")
    use_topology(settings, shards=[f"redis://127.0.0.1:{free_port()}/0"])

    with pytest.raises(CommandError, match=r"a Redis node did not answer .*: run it again"):
        call_command("erase_diner", tenant.slug, "zoe")

    assert not DinerErasure.objects.exists()


def test_only_replies_that_show_the_diner_go(tenant, settings):
    """A diner called ``card`` is not every order paid by card, nor a note that names them
    (red when any quoted "card" in a reply matches: frank's records go, and his retry is a
    500 on the order's own unique key)."""
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    menu = menu_for(tenant)
    frank = api_for(tenant, diner="frank")
    frank_first = place(frank, menu, "f1", note="card")
    assert b'"payment_method":"card"' in frank_first.content
    assert place(api_for(tenant, diner="card"), menu, "c1").status_code == 201
    frank_records = IdempotencyRecord.objects.filter(scope__startswith="diner:frank|").count()
    log = erase_diner(tenant=tenant, diner_id="card", requested_by="staff:alice")
    assert log.counts["records"] == 1 and log.counts["orders"] == 1
    assert IdempotencyRecord.objects.filter(scope__startswith="diner:frank|").count() == 1
    assert frank_records == 1
    assert replay_is_identical(frank, menu, "f1", frank_first, note="card")


@pytest.mark.parametrize("diner_id", ["", "a b", "x" * 65, '"quoted"'])
def test_what_no_diner_can_be_called_is_refused_before_anything_goes(tenant, diner_id):
    menu = menu_for(tenant)
    first = place(api_for(tenant, diner="gina"), menu, "g1")
    with pytest.raises(NotADinerId):
        erase_diner(tenant=tenant, diner_id=diner_id, requested_by="staff:alice")
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="is not a diner id"):
        call_command("erase_diner", tenant.slug, diner_id)
    assert not DinerErasure.objects.exists()
    assert replay_is_identical(api_for(tenant, diner="gina"), menu, "g1", first)


@pytest.mark.fault
def test_an_erasure_stopped_by_redis_is_finished_by_running_it_again(tenant, settings):
    """A Redis node down mid-erasure stops it with the error, and running it again
    finishes it, as the docs say (red when the merchant's record, deleted before its Redis
    entry, stayed deleted: the second run had nothing to find the entry by, and the
    merchant's retry kept replaying the erased diner's id and note for the TTL)."""
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    node = RedisNode().start()
    try:
        use_topology(settings, shards=[node.url])
        menu = menu_for(tenant)
        order_id = place(api_for(tenant, diner="zoe"), menu, "k1", note="ring twice").json()["id"]
        assert b'"diner_id":"zoe"' in cancel_as_merchant(tenant, order_id).content
        # given zoe's own stored replies expired and were purged (the merchant's is younger)
        IdempotencyRecord.objects.filter(scope__startswith="diner:zoe|").update(
            expires_at=timezone.now() - timedelta(seconds=1)
        )
        assert purge_expired_data()["idempotency_records"] == 1
        # when the node goes down during the erasure (its data kept), then it stops with
        # the error
        node.client().save()
        node.stop()
        with pytest.raises(RedisError):
            erase_diner(tenant=tenant, diner_id="zoe", requested_by="staff:alice")
        node.start()
        # and once it is back, running it again leaves no reply that shows zoe
        erase_diner(tenant=tenant, diner_id="zoe", requested_by="staff:alice")
        left = tenant_keys(str(tenant.pk))
        assert not [k for k, content in left.items() if b"ring twice" in content]
        assert not [k for k, content in left.items() if b"zoe" in content]
    finally:
        node.remove()


def test_a_pseudonym_is_refused_and_the_erased_orders_keep_theirs(tenant, settings):
    """Staff or an owner pasting the pseudonym an erasure showed (red when it was taken for a
    diner id: the orders went under a pseudonym of the pseudonym, and the diner's late order,
    erased afterwards, under the first one: one diner's orders under two names)."""
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    menu = menu_for(tenant)
    place(api_for(tenant, diner="zoe"), menu, "k1")
    first = erase_diner(tenant=tenant, diner_id="zoe", requested_by="staff:alice")
    with pytest.raises(NotADinerId, match="pseudonym of a diner erased already"):
        erase_diner(tenant=tenant, diner_id=first.pseudonym, requested_by="staff:alice")
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="pseudonym of a diner erased already"):
        call_command("erase_diner", tenant.slug, first.pseudonym)
    assert DinerErasure.objects.count() == 1
    place(api_for(tenant, diner="zoe"), menu, "k2")  # a request that was in flight
    erase_diner(tenant=tenant, diner_id="zoe", requested_by="staff:alice")
    diners = set(Order.all_tenants.filter(tenant=tenant).values_list("diner_id", flat=True))
    assert diners == {first.pseudonym}


def test_an_order_placed_after_an_erasure_joins_the_same_pseudonym(tenant, make_tenant, settings):
    """The docs advise erasing again after a request that was in flight: every order of the
    diner ends under one pseudonym (red with a new random one per run); the same id in
    another restaurant gets another."""
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    menu = menu_for(tenant)
    place(api_for(tenant, diner="zoe"), menu, "k1")
    first = erase_diner(tenant=tenant, diner_id="zoe", requested_by="staff:alice")
    place(api_for(tenant, diner="zoe"), menu, "k2")  # a request that was in flight
    again = erase_diner(tenant=tenant, diner_id="zoe", requested_by="staff:alice")
    assert again.pseudonym == first.pseudonym and again.counts["orders"] == 1
    assert Order.all_tenants.filter(tenant=tenant, diner_id=first.pseudonym).count() == 2
    other = erase_diner(tenant=tenant, diner_id="yan", requested_by="staff:alice")
    elsewhere = erase_diner(tenant=make_tenant(), diner_id="zoe", requested_by="staff:alice")
    assert first.pseudonym not in (other.pseudonym, elsewhere.pseudonym)


@pytest.mark.django_db(transaction=True)
def test_erasures_of_one_diner_at_the_same_time_give_one_pseudonym(tenant, settings):
    """A double submit of the privacy form, or two staff at once (red with a pseudonym
    chosen per run: the orders under one, the other logs under others)."""
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.2
    menu = menu_for(tenant)
    for key in ("k1", "k2", "k3"):
        place(api_for(tenant, diner="zoe"), menu, key)

    def erase() -> DinerErasure:
        return erase_diner(tenant=tenant, diner_id="zoe", requested_by="staff:alice")

    logs = [
        log for log in at_once(erase, erase, erase, timeout=120) if isinstance(log, DinerErasure)
    ]
    assert len(logs) == 3
    [pseudonym] = {log.pseudonym for log in logs}
    diners = set(Order.all_tenants.filter(tenant=tenant).values_list("diner_id", flat=True))
    assert diners == {pseudonym}


@pytest.mark.parametrize(
    "redacted", [["diner_id"], ["transitions"]], ids=["actor-only", "diner-id-only"]
)
def test_a_reply_that_shows_the_diner_one_way_only_goes_too(tenant, settings, redacted):
    """A tenant that redacts the diner id leaves the transitions' actors to show the diner,
    and one that redacts the transitions leaves the diner id (red with either pattern
    dropped)."""
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    tenant.redacted_paths = redacted
    tenant.save(update_fields=["redacted_paths"])
    menu = menu_for(tenant)
    placed = place(api_for(tenant, diner="zoe"), menu, "k1")
    moved = cancel_as_merchant(tenant, placed.json()["id"])
    assert moved.status_code == 200
    [stored] = IdempotencyRecord.objects.exclude(scope__startswith="diner:zoe|")
    assert b"zoe" in bytes(stored.response_body)
    erase_diner(tenant=tenant, diner_id="zoe", requested_by="staff:alice")
    assert not [r for r in IdempotencyRecord.objects.all() if b"zoe" in bytes(r.response_body)]


@pytest.mark.parametrize("diner_id", ["zoe\n", "zoe\r\n", ""], ids=["newline", "crlf", "empty"])
def test_an_id_no_diner_can_have_is_refused_with_nothing_logged(tenant, diner_id):
    """A line read with its newline ('zoe\\n' from a file or a script) is no diner's id: the
    sessions never carry one. (red for 'zoe\\n': '$' matches before a final newline, so it was
    taken, logged as an erasure and given a pseudonym, while zoe's own data stayed.)"""
    with pytest.raises(NotADinerId, match="is not a diner id"):
        erase_diner(tenant=tenant, diner_id=diner_id, requested_by="staff:alice")
    assert DinerErasure.objects.count() == 0


def test_without_redis_this_process_forgets_the_replies_it_erased(tenant, settings):
    # given database-only mode (no Redis for the tenant, so no invalidation channel heard) and
    # the restaurant's move on zoe's order, its reply (which shows zoe) held in this
    # process's local cache
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    settings.IDEMPOTENCY = {
        **settings.IDEMPOTENCY,
        "REDIS_CLIENT_FOR_TENANT": "tests.conftest.no_redis",
        "ALL_REDIS_CLIENTS": "tests.privacy.test_erase_diner.no_nodes",
    }
    stores.reset()
    menu = menu_for(tenant)
    placed = place(api_for(tenant, diner="zoe"), menu, "k1", note="ring twice")
    merchant = api_for(tenant, kind=ApiClient.Kind.MERCHANT)
    move = f"/api/v1/orders/{placed.json()['id']}/transition/"
    moved = merchant.post(move, {"to": "CANCELLED"}, format="json", HTTP_IDEMPOTENCY_KEY="m1")
    assert moved.status_code == 200 and b'"zoe"' in moved.content
    # when zoe is erased in this process
    erase_diner(tenant=tenant, diner_id="zoe", requested_by="owner:ann")
    # then sending the move again does not replay the reply that showed zoe
    again = merchant.post(move, {"to": "CANCELLED"}, format="json", HTTP_IDEMPOTENCY_KEY="m1")
    assert again["X-Idempotent-Result"] != "HIT"
    assert b"zoe" not in again.content


def no_nodes() -> list[Any]:
    """ALL_REDIS_CLIENTS of a site without Redis."""
    return []


def test_no_audit_of_the_erased_diner_stays_in_the_nodes_audit_stream(
    tenant, make_tenant, settings, monkeypatch
):
    """The erasure drains the audit stream, deletes the diner's audits from the database and
    leaves none in the stream either, on a busy node too: another restaurant's request
    appending its audit while the drain copies (between its read and its trim) left every
    copied entry in the stream, the diner's principal, address and user agent with them,
    because the trim was Redis's approximate one (``XTRIM MINID ~``), which removes only
    whole blocks of entries and keeps one that also holds an entry not copied yet."""
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    # given a replay of zoe's, audited in the node's stream
    menu = menu_for(tenant)
    zoe = api_for(tenant, diner="zoe")
    assert place(zoe, menu, "k1").status_code == 201
    stores.local_cache().clear()
    assert place(zoe, menu, "k1")["X-Idempotent-Result"] == "HIT"
    client = redis.Redis.from_url(settings.REDIS_URL)
    assert b"diner:zoe" in [fields[b"p"] for _, fields in client.xrange(stream_key())]
    # and another restaurant's request that appends its audit just as a drain trims
    other = str(make_tenant().pk)
    real_xtrim = redis.Redis.xtrim

    def xtrim_as_another_request_appends(node: redis.Redis, name: Any, **kwargs: Any) -> Any:
        append(
            node,
            AuditEvent(
                tenant_key=other,
                endpoint="POST api/v1/orders/",
                key="k",
                outcome="HIT",
                source="redis",
                principal="diner:yan",
                request_meta={"request_id": "r1"},
            ),
        )
        return real_xtrim(node, name, **kwargs)

    monkeypatch.setattr(redis.Redis, "xtrim", xtrim_as_another_request_appends)
    # when zoe is erased
    erase_diner(tenant=tenant, diner_id="zoe", requested_by="staff:alice")
    # then the stream holds only what arrived after the drain, nothing of zoe's
    left = [fields for _, fields in client.xrange(stream_key())]
    assert [(f[b"t"].decode(), f[b"p"]) for f in left] == [(other, b"diner:yan")]
    assert not DuplicateAudit.objects.filter(tenant_key=str(tenant.pk), principal="diner:zoe")


@pytest.mark.django_db(transaction=True)
def test_a_merchant_move_that_read_the_order_before_the_erasure_keeps_no_reply_showing_the_diner(
    settings,
):
    """The restaurant's backend moves zoe's order while zoe is erased: it read the order (zoe,
    her note) before the erasure renamed it, and its move's update waited for the erasure to
    commit. Its answer, kept as the reply its key replays, showed zoe and her note although
    the erasure had finished (the merchant's key is no session the erasure ends, and its
    reply was stored after the erasure had looked for replies showing zoe); it now shows the
    order as the move left it, under the pseudonym."""
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    tenant = Tenant.objects.create(slug="roma", name="Roma")
    menu = menu_for(tenant)
    placed = place(api_for(tenant, diner="zoe"), menu, "k1", note="ring twice, ask for zoe")
    order_id = placed.json()["id"]
    merchant = api_for(tenant, kind=ApiClient.Kind.MERCHANT)
    erased: list[DinerErasure] = []

    def erase() -> None:
        erased.append(erase_diner(tenant=tenant, diner_id="zoe", requested_by="staff:alice"))

    # when the erasure commits while the merchant's cancel waits on the order it renamed
    with committed_once_waited_on(erase):
        moved = merchant.post(
            f"/api/v1/orders/{order_id}/transition/",
            {"to": "CANCELLED"},
            format="json",
            HTTP_IDEMPOTENCY_KEY="m1",
        )

    # then the move went through, and neither its answer nor its kept reply shows zoe
    assert moved.status_code == 200, moved.content
    assert moved.json()["diner_id"] == erased[0].pseudonym
    assert moved.json()["note"] == ""
    kept = IdempotencyRecord.objects.filter(tenant_key=str(tenant.pk))
    assert not [r.scope for r in kept if b"zoe" in bytes(r.response_body)]
    assert not [k for k, content in tenant_keys(str(tenant.pk)).items() if b"zoe" in content]
    stores.local_cache().clear()
    again = merchant.post(
        f"/api/v1/orders/{order_id}/transition/",
        {"to": "CANCELLED"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="m1",
    )
    assert again["X-Idempotent-Result"] == "HIT" and b"zoe" not in again.content


def test_command_refuses_a_requester_longer_than_the_log_keeps(tenant):
    """The log keeps 200 characters of who asked: a longer ``--by`` was cut without a word, so
    the log named someone else than given (red: the erasure ran and kept the first 200)."""
    from django.core.management.base import CommandError

    place(api_for(tenant, diner="zoe"), menu_for(tenant), "k1")
    with pytest.raises(CommandError, match="--by"):
        call_command("erase_diner", tenant.slug, "zoe", "--by", "d" * 201)
    assert not DinerErasure.objects.exists()
    assert Order.all_tenants.filter(diner_id="zoe").exists()


def test_a_reply_left_on_the_node_the_restaurant_moved_from_goes_too(tenant, settings, shard_nodes):
    """Adding Redis nodes moves some restaurants to a new one and leaves their keys behind on
    the old node until they expire (docs/scaling.md). The merchant's reply that showed the
    diner, left there, kept the erased diner's id and note for the record TTL, and replayed
    them to the merchant's retry once the restaurant was back on that node (the nodes added
    taken away again) (red: the erasure deleted each such reply's entry on the restaurant's
    node of now only)."""
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    for node in shard_nodes:
        node.client().flushall()
    every_node = [node.url for node in shard_nodes]
    use_topology(settings, shards=every_node)
    serving = client_for_tenant(str(tenant.pk)).connection_pool.connection_kwargs["port"]
    old = next(node for node in shard_nodes if node.port != serving)
    # given the restaurant on one node, which keeps the merchant's cancel of zoe's order
    use_topology(settings, shards=[old.url])
    menu = menu_for(tenant)
    order_id = place(api_for(tenant, diner="zoe"), menu, "k1", note="ring twice").json()["id"]
    assert b'"diner_id":"zoe"' in cancel_as_merchant(tenant, order_id).content
    # when two nodes are added, the restaurant moves to one of them, and zoe is erased
    use_topology(settings, shards=every_node)
    erase_diner(tenant=tenant, diner_id="zoe", requested_by="staff:alice")
    # then no node keeps a reply that shows zoe
    left = tenant_keys(str(tenant.pk))
    assert not [k for k, content in left.items() if b"zoe" in content]
    assert not [k for k, content in left.items() if b"ring twice" in content]
    # and with the nodes added taken away again, the merchant's retry does not replay zoe
    use_topology(settings, shards=[old.url])
    stores.local_cache().clear()
    again = cancel_as_merchant(tenant, order_id)
    assert again["X-Idempotent-Result"] != "HIT" and b"zoe" not in again.content


def test_a_reply_kept_before_the_restaurant_was_split_into_sub_buckets_goes_too(tenant, settings):
    """Splitting a hot restaurant into sub-buckets (``HOT_TENANT_BUCKETS``) gives its keys
    another hash tag; the entries kept before stay under the old one until they expire. The
    merchant's reply that showed the diner, kept there, stayed after the erasure and replayed
    them once the split was undone (red: the erasure deleted each such reply's entry under the
    restaurant's hash tag of now only)."""
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    menu = menu_for(tenant)
    order_id = place(api_for(tenant, diner="zoe"), menu, "k1", note="ring twice").json()["id"]
    assert b'"diner_id":"zoe"' in cancel_as_merchant(tenant, order_id).content
    # when the restaurant is split into sub-buckets, and zoe is erased
    unsplit = settings.IDEMPOTENCY
    settings.IDEMPOTENCY = {**unsplit, "HOT_TENANT_BUCKETS": {str(tenant.pk): 8}}
    erase_diner(tenant=tenant, diner_id="zoe", requested_by="staff:alice")
    # then no key of the restaurant shows zoe
    left = tenant_keys(str(tenant.pk))
    assert not [k for k, content in left.items() if b"zoe" in content]
    # and with the split undone, the merchant's retry does not replay zoe
    settings.IDEMPOTENCY = unsplit
    stores.local_cache().clear()
    again = cancel_as_merchant(tenant, order_id)
    assert again["X-Idempotent-Result"] != "HIT" and b"zoe" not in again.content


def test_a_merchant_reply_finished_while_the_diner_is_erased_is_not_replayed_from_memory(
    tenant, settings, monkeypatch
):
    """The restaurant's backend moves zoe's order, and its move commits (the order, and the
    record of its reply, which shows zoe and her note); zoe is erased before the serving
    process hands that reply to Redis and to its own cache of finished replies. The erasure
    deleted the record and the key, and told every cache to drop it, before the process put
    the reply in its cache: the merchant's retry within LOCAL_CACHE_TTL_SECONDS was replayed
    zoe and her note from memory although the erasure had finished."""
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    menu = menu_for(tenant)
    placed = place(api_for(tenant, diner="zoe"), menu, "k1", note="ring twice, ask for zoe")
    merchant = api_for(tenant, kind=ApiClient.Kind.MERCHANT)
    move = f"/api/v1/orders/{placed.json()['id']}/transition/"
    finish = engine._finish
    erased: list[DinerErasure] = []

    def erased_first(*args: Any, **kwargs: Any) -> Any:
        # the move's record is committed: the erasure runs before its reply is kept
        if not erased:
            erased.append(erase_diner(tenant=tenant, diner_id="zoe", requested_by="owner:ann"))
        return finish(*args, **kwargs)

    monkeypatch.setattr(engine, "_finish", erased_first)
    moved = merchant.post(move, {"to": "CANCELLED"}, format="json", HTTP_IDEMPOTENCY_KEY="m1")
    assert moved.status_code == 200 and b'"zoe"' in moved.content
    assert erased and erased[0].counts["records"] == 2  # zoe's order and the merchant's move
    monkeypatch.setattr(engine, "_finish", finish)

    again = merchant.post(move, {"to": "CANCELLED"}, format="json", HTTP_IDEMPOTENCY_KEY="m1")

    assert b"zoe" not in again.content, (again["X-Idempotent-Result"], again.content)
    assert not [k for k, content in tenant_keys(str(tenant.pk)).items() if b"zoe" in content]
