"""Retention per tenant: each tenant's audit retention and record TTL honoured, the purge
deletes in bounded batches, its metrics move, and out-of-bounds values are refused."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta

import pytest
import redis
from axes.models import AccessAttempt, AccessFailureLog, AccessLog
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.sessions.backends.db import SessionStore
from django.contrib.sessions.models import Session
from django.core.exceptions import ValidationError
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from idempotency.models import DuplicateAudit, IdempotencyRecord, OutcomeCount
from idempotency.stores import nodes as stores
from ordering.api.views import OrderPayView
from ordering.models import Dish, Order, OrderStatus
from ordering.services.placing import ItemRequest, place_order
from tenants.models import DinerSession, Tenant
from tenants.retention import KINDS, overdue_rows, purge_expired_data
from tests.conftest import api_for
from tests.observability.test_metrics import TOKEN, samples, scrape, value
from tests.support.auth import diner_token

pytestmark = pytest.mark.django_db


def audit(tenant, *, days_ago: float, key: str) -> DuplicateAudit:
    return DuplicateAudit.objects.create(
        tenant_key=str(tenant.pk),
        endpoint="POST api/v1/orders/",
        key=key,
        outcome="HIT",
        at=timezone.now() - timedelta(days=days_ago),
    )


def expired_record(tenant, n: int, *, hours_ago: float = 1) -> IdempotencyRecord:
    past = timezone.now() - timedelta(hours=hours_ago)
    return IdempotencyRecord.objects.create(
        tenant_key=str(tenant.pk),
        scope="p·POST·api/v1/orders/",
        key=f"old-{n}",
        fingerprint="f" * 64,
        response_status=201,
        created_at=past - timedelta(hours=72),
        expires_at=past,
    )


def test_each_tenant_keeps_its_audits_for_its_own_number_of_days(make_tenant):
    # given tenant A keeps audits 1 day, B 30 days (its own), C the platform default (30)
    a = make_tenant("keeps-1-day", audit_retention_days=1)
    b = make_tenant("keeps-30-days", audit_retention_days=30)
    c = make_tenant("keeps-default")
    kept = [audit(a, days_ago=0.5, key="a-fresh"), audit(b, days_ago=2, key="b-2d")]
    kept += [audit(c, days_ago=29, key="c-29d")]
    audit(a, days_ago=2, key="a-2d")
    audit(b, days_ago=31, key="b-31d")
    audit(c, days_ago=31, key="c-31d")
    # when the purge runs
    purged = purge_expired_data()
    # then A's 2-day-old audit went, B's stayed, and each 31-day-old one went
    assert purged["duplicate_audits"] == 3
    remaining = set(DuplicateAudit.objects.values_list("key", flat=True))
    assert remaining == {k.key for k in kept}


def outcome_count(tenant, *, hours_ago: float, outcome: str = "MISS") -> OutcomeCount:
    hour = (timezone.now() - timedelta(hours=hours_ago)).replace(minute=0, second=0, microsecond=0)
    return OutcomeCount.objects.create(
        tenant_key=str(tenant.pk), endpoint="POST api/v1/orders/", outcome=outcome, hour=hour,
        count=7,
    )  # fmt: skip


def test_hourly_outcome_counts_are_kept_as_long_as_their_tenants_audits(make_tenant):
    """Every request adds to its tenant's hourly count of outcomes (one row per endpoint,
    outcome and hour, whoever sent it, a guest of the public key included); the Duplicates page
    reads the last 24 hours. Rows older than the tenant's audit retention go with its audits
    (red: none was ever deleted, so the table grew by the hour for as long as the tenant
    lived)."""
    # given tenant A keeps audits 1 day, C the platform default (30)
    a = make_tenant("counts-1-day", audit_retention_days=1)
    c = make_tenant("counts-default")
    kept = [outcome_count(a, hours_ago=0), outcome_count(a, hours_ago=20)]
    kept += [outcome_count(c, hours_ago=2 * 24), outcome_count(c, hours_ago=29 * 24)]
    outcome_count(a, hours_ago=2 * 24)
    outcome_count(c, hours_ago=31 * 24, outcome="HIT")
    outcome_count(c, hours_ago=400 * 24)
    assert overdue_rows()["outcome_counts"] == 3
    # when the purge runs
    purged = purge_expired_data()
    # then the three past their tenant's retention went, and the rest stayed
    assert purged["outcome_counts"] == 3
    assert set(OutcomeCount.objects.values_list("pk", flat=True)) == {row.pk for row in kept}
    assert overdue_rows()["outcome_counts"] == 0


def test_a_tenants_record_ttl_sets_how_long_its_replies_are_kept(make_tenant, menu_for_tenant):
    short = make_tenant("one-hour", record_ttl_hours=1)
    default = make_tenant("default-ttl")
    for tenant in (short, default):
        api = api_for(tenant, diner="d1")
        body = {"items": [{"dish_id": menu_for_tenant(tenant).pk, "quantity": 1}]}
        answer = api.post(
            "/api/v1/orders/", {**body, "payment_method": "card"}, format="json",
            HTTP_IDEMPOTENCY_KEY="ttl-1",
        )  # fmt: skip
        assert answer.status_code == 201
    kept = {
        r.tenant_key: (r.expires_at - r.created_at).total_seconds()
        for r in IdempotencyRecord.objects.all()
    }
    assert kept == {str(short.pk): 3600, str(default.pk): 72 * 3600}
    client = redis.Redis.from_url(settings.REDIS_URL)
    [entry] = client.scan_iter(match=f"idem:{{t:{short.pk}}}:*")
    assert 3500 < client.ttl(entry) <= 3600


@pytest.fixture
def day_long_keyless_window():
    """The pay endpoint's automatic-key window at its longest (IDEMPOTENCY_AUTO_KEY_WINDOW,
    86,400 s), read when the view was decorated, so set on its policy for this test."""
    policy = OrderPayView.post.idempotency_policy
    window = policy.auto_key_window
    object.__setattr__(policy, "auto_key_window", 86_400)
    yield
    object.__setattr__(policy, "auto_key_window", window)


def test_a_keyless_reply_is_kept_no_longer_than_the_tenants_record_ttl(
    make_tenant, menu_for_tenant, day_long_keyless_window
):
    # given a restaurant keeping replies one hour, and a keyless window of a day
    tenant = make_tenant("one-hour-keyless", record_ttl_hours=1)
    api = api_for(tenant, diner="d1")
    body = {"items": [{"dish_id": menu_for_tenant(tenant).pk, "quantity": 1}]}
    placed = api.post(
        "/api/v1/orders/", {**body, "payment_method": "card"}, format="json",
        HTTP_IDEMPOTENCY_KEY="k",
    )  # fmt: skip
    # when the diner pays without a key
    paid = api.post(f"/api/v1/orders/{placed.json()['id']}/pay/")
    assert paid.status_code == 200
    # then its reply (the diner id, the note) is kept the restaurant's hour, not the window's
    # day: the record and the Redis entry alike (red: 86,400 s)
    kept = sorted(
        (r.expires_at - r.created_at).total_seconds()
        for r in IdempotencyRecord.objects.filter(tenant_key=str(tenant.pk))
    )
    assert kept == [3600, 3600]
    client = redis.Redis.from_url(settings.REDIS_URL)
    ttls = [client.ttl(key) for key in client.scan_iter(match=f"idem:{{t:{tenant.pk}}}:*")]
    assert len(ttls) == 2 and all(0 < ttl <= 3600 for ttl in ttls), ttls


def test_a_reply_redis_lost_and_got_back_from_its_record_expires_with_the_record(
    make_tenant, menu_for_tenant
):
    # given an order placed 70 hours ago (its record, kept 72 h, expires in 2 h) whose Redis
    # entry was lost (a restart without its data, an eviction, a failover)
    tenant = make_tenant("kept-72-hours")
    api = api_for(tenant, diner="d1")
    body = {"items": [{"dish_id": menu_for_tenant(tenant).pk, "quantity": 1}]}
    order = {**body, "payment_method": "card"}
    assert api.post(
        "/api/v1/orders/", order, format="json", HTTP_IDEMPOTENCY_KEY="k"
    ).status_code == 201  # fmt: skip
    now = timezone.now()
    IdempotencyRecord.objects.filter(tenant_key=str(tenant.pk)).update(
        created_at=now - timedelta(hours=70), expires_at=now + timedelta(hours=2)
    )
    client = redis.Redis.from_url(settings.REDIS_URL)
    [entry] = client.scan_iter(match=f"idem:{{t:{tenant.pk}}}:*")
    client.delete(entry)
    stores.local_cache().clear()
    # when the diner retries and the record answers it (and puts it back into Redis)
    again = api.post("/api/v1/orders/", order, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert again.status_code == 201 and again["X-Idempotent-Result"] == "HIT"
    # then Redis keeps it no longer than the record: not another 72 hours from now
    assert 0 < client.ttl(entry) <= 2 * 3600


def test_the_platform_bounds_bind_retentions_a_tenant_chose_before_they_changed(
    make_tenant, menu_for_tenant, settings
):
    # given tenants that chose the longest retentions the platform allowed then
    keeps_long = make_tenant("keeps-long", audit_retention_days=365, record_ttl_hours=720)
    keeps_short = make_tenant("keeps-short", audit_retention_days=1)
    audit(keeps_long, days_ago=60, key="long-60d")
    audit(keeps_long, days_ago=20, key="long-20d")
    audit(keeps_short, days_ago=2, key="short-2d")
    # when the platform narrows its bounds (a shorter maximum, a longer minimum)
    settings.RETENTION_AUDIT_DAYS_MAX = 30
    settings.RETENTION_AUDIT_DAYS_MIN = 3
    settings.RETENTION_RECORD_TTL_HOURS_MAX = 24
    # then the purge keeps no audit past the new maximum and none short of the new minimum
    assert purge_expired_data()["duplicate_audits"] == 1
    assert set(DuplicateAudit.objects.values_list("key", flat=True)) == {"long-20d", "short-2d"}
    # and a write made now keeps its reply no longer than the new maximum
    api = api_for(keeps_long, diner="d1")
    body = {"items": [{"dish_id": menu_for_tenant(keeps_long).pk, "quantity": 1}]}
    placed = api.post(
        "/api/v1/orders/", {**body, "payment_method": "card"}, format="json",
        HTTP_IDEMPOTENCY_KEY="ttl-1",
    )  # fmt: skip
    assert placed.status_code == 201
    record = IdempotencyRecord.objects.get(tenant_key=str(keeps_long.pk))
    assert (record.expires_at - record.created_at).total_seconds() == 24 * 3600


@pytest.mark.parametrize(
    "env, message",
    [
        pytest.param(
            {"RETENTION_AUDIT_DAYS_MAX": "14"},
            "RETENTION_AUDIT_DAYS (30 days) must be within RETENTION_AUDIT_DAYS_MIN.."
            "RETENTION_AUDIT_DAYS_MAX (1..14 days)",
            id="audit-maximum-narrowed-below-the-default",
        ),
        pytest.param(
            {"RETENTION_AUDIT_DAYS": "400"},
            "RETENTION_AUDIT_DAYS (400 days) must be within RETENTION_AUDIT_DAYS_MIN.."
            "RETENTION_AUDIT_DAYS_MAX (1..365 days)",
            id="audit-default-past-the-maximum",
        ),
        pytest.param(
            {"RETENTION_RECORD_TTL_HOURS_MAX": "24"},
            "IDEMPOTENCY_TTL_SECONDS (72 hours) must be within RETENTION_RECORD_TTL_HOURS_MIN.."
            "RETENTION_RECORD_TTL_HOURS_MAX (1..24 hours)",
            id="record-maximum-narrowed-below-the-default",
        ),
        pytest.param(
            {"RETENTION_AUDIT_DAYS_MIN": "60", "RETENTION_AUDIT_DAYS_MAX": "40"},
            "RETENTION_AUDIT_DAYS_MIN (60) must not be more than RETENTION_AUDIT_DAYS_MAX (40)",
            id="audit-bounds-crossed",
        ),
        pytest.param(
            {"ORDER_CONTACT_RETENTION_DAYS": "1"},
            "ORDER_CONTACT_RETENTION_DAYS (24 hours) is shorter than "
            "RETENTION_RECORD_TTL_HOURS_MAX (720 hours): a reply kept for retries, which "
            "shows the order's note, would outlive the note",
            id="contact-retention-shorter-than-a-reply",
        ),
        pytest.param(
            {"GUEST_UNPAID_ORDER_RETENTION_DAYS": "1"},
            "GUEST_UNPAID_ORDER_RETENTION_DAYS (24 hours) is shorter than "
            "RETENTION_RECORD_TTL_HOURS_MAX (720 hours): a reply kept for retries would replay "
            "an order already deleted",
            id="guest-order-retention-shorter-than-a-reply",
        ),
    ],
)
def test_a_platform_default_outside_the_platform_bounds_stops_the_server(env, message):
    """The default is the retention of every tenant that chose none: with the maximum
    narrowed below it, tenants that had chosen more were cut to the maximum while the
    others kept their replies and audits past it."""
    from tests.config.test_production_settings import settings_with
    from tests.support.production import production_environment

    code, _, stderr = settings_with({**production_environment(), **env})

    assert code != 0
    assert f"ImproperlyConfigured: {message}" in stderr


def test_bounds_narrowed_with_the_defaults_inside_them_start_the_server():
    from tests.config.test_production_settings import settings_with
    from tests.support.production import production_environment

    narrowed = {
        "RETENTION_AUDIT_DAYS_MAX": "14",
        "RETENTION_AUDIT_DAYS": "14",
        "RETENTION_RECORD_TTL_HOURS_MAX": "24",
        "IDEMPOTENCY_TTL_SECONDS": str(24 * 3600),
        "ORDER_CONTACT_RETENTION_DAYS": "1",  # no reply outlives the note
        "GUEST_UNPAID_ORDER_RETENTION_DAYS": "1",
    }
    code, _, stderr = settings_with({**production_environment(), **narrowed})

    assert code == 0, stderr


@pytest.fixture
def menu_for_tenant():
    from tests.conftest import menu_for

    return lambda tenant: menu_for(tenant)["pizza"]


def test_the_purge_deletes_in_bounded_batches_and_reports_what_it_leaves(tenant, settings):
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "PURGE_BATCH_SIZE": 10}
    for n in range(25):
        expired_record(tenant, n)
    live = IdempotencyRecord.objects.create(
        tenant_key=str(tenant.pk), scope="s", key="live", fingerprint="f", response_status=201,
        created_at=timezone.now(), expires_at=timezone.now() + timedelta(hours=1),
    )  # fmt: skip
    # a run bounded to two batches takes 20 rows in two DELETEs of 10, and leaves 5 overdue
    with CaptureQueriesContext(connection) as queries:
        first = purge_expired_data(max_batches=2)
    deletes = [q["sql"] for q in queries if q["sql"].startswith("DELETE")]
    record_deletes = [d for d in deletes if "idempotency_idempotencyrecord" in d]
    assert first["idempotency_records"] == 20 and len(record_deletes) == 2
    assert all(len(re.findall(r"\b\d+\b", d.split(" IN (")[1])) <= 10 for d in record_deletes)
    assert overdue_rows()["idempotency_records"] == 5
    # the next run takes the rest; the live record stays
    assert purge_expired_data()["idempotency_records"] == 5
    assert list(IdempotencyRecord.objects.values_list("pk", flat=True)) == [live.pk]


def test_rows_overdue_are_counted_up_to_twice_a_run_s_capacity(tenant, settings):
    """A scrape counts what is overdue at a bounded cost: an exact COUNT read every overdue row
    on every scrape, so the further the purge fell behind (the very case the gauge is for),
    the longer /metrics took (a second for 3 million records), until scrapes timed out and
    every alert lost its series. Past twice what a run deletes, the number changes nothing:
    the alert compares it with one run's capacity."""
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "PURGE_BATCH_SIZE": 10}
    settings.RETENTION_PURGE_MAX_BATCHES = 2
    for n in range(30):
        expired_record(tenant, n)
    assert overdue_rows()["idempotency_records"] == 30  # within twice a run's 20: exact
    for n in range(30, 55):
        expired_record(tenant, n)
    with CaptureQueriesContext(connection) as queries:
        counted = overdue_rows()["idempotency_records"]
    assert counted == 40  # 55 overdue, read no further than 40
    counts = [q["sql"] for q in queries if "idempotency_idempotencyrecord" in q["sql"]]
    assert len(counts) == 1 and "LIMIT 40" in counts[0]


def test_expired_diner_sessions_are_purged_and_live_ones_kept(tenant):
    diner_token(tenant, "gone")
    diner_token(tenant, "here")
    DinerSession.objects.filter(diner_id="gone").update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert purge_expired_data()["diner_sessions"] == 1
    assert list(DinerSession.objects.values_list("diner_id", flat=True)) == ["here"]


def test_expired_browser_sessions_are_purged_and_live_ones_kept():
    """A dashboard session past its expiry goes, with what it held (red: Django deletes none
    by itself, and the row stayed)."""
    gone, kept = SessionStore(), SessionStore()
    for store in (gone, kept):
        store["dashboard_new_api_key"] = "pk_live.secret"
        store.create()
    Session.objects.filter(pk=gone.session_key).update(
        expire_date=timezone.now() - timedelta(seconds=1)
    )
    assert purge_expired_data()["browser_sessions"] == 1
    assert list(Session.objects.values_list("pk", flat=True)) == [kept.session_key]


def test_the_login_throttle_s_records_are_purged_after_their_time(settings):
    # what the login throttle keeps about people: the name typed (a mistyped password, too),
    # the address, the user agent; a failed attempt locks nothing after the cool-off
    now = timezone.now()
    kept, old = now - timedelta(days=29), now - timedelta(days=31)
    for when, name in ((kept, "recent"), (old, "old")):
        AccessLog.objects.create(username=name, ip_address="198.51.100.7", user_agent="ua")
        AccessFailureLog.objects.create(username=name, ip_address="198.51.100.7", user_agent="ua")
        AccessLog.objects.filter(username=name).update(attempt_time=when)
        AccessFailureLog.objects.filter(username=name).update(attempt_time=when)
    cooled_off = now - settings.AXES_COOLOFF_TIME - timedelta(minutes=1)
    for when, name in ((now, "locking"), (cooled_off, "cooled-off")):
        AccessAttempt.objects.create(
            username=name, ip_address="198.51.100.7", user_agent="ua", failures_since_start=5
        )
        AccessAttempt.objects.filter(username=name).update(attempt_time=when)

    purged = purge_expired_data()

    assert (purged["login_records"], purged["login_failures"], purged["login_attempts"]) == (
        1,
        1,
        1,
    )
    assert list(AccessLog.objects.values_list("username", flat=True)) == ["recent"]
    assert list(AccessFailureLog.objects.values_list("username", flat=True)) == ["recent"]
    assert list(AccessAttempt.objects.values_list("username", flat=True)) == ["locking"]


def test_what_diners_wrote_on_orders_finished_long_ago_is_cleared_and_nothing_else(
    tenant, menu_for_tenant, settings
):
    """A note, phone and address were kept until the restaurant left the platform, though
    nothing needs them once the order is done (red: the purge had no such kind)."""
    settings.ORDER_CONTACT_RETENTION_DAYS = 30
    dish = menu_for_tenant(tenant)
    now = timezone.now()
    cases = {  # name -> (status, last change)
        "completed-31d": (OrderStatus.COMPLETED, now - timedelta(days=31)),
        "cancelled-31d": (OrderStatus.CANCELLED, now - timedelta(days=31)),
        "completed-29d": (OrderStatus.COMPLETED, now - timedelta(days=29)),
    }
    orders = orders_with_contact_details(tenant, dish, cases)

    purged = purge_expired_data()

    assert purged["order_contact_details"] == 2
    written = {
        name: Order.all_tenants.values_list(
            "note", "contact_phone", "delivery_address", "diner_id", "total", "updated_at"
        ).get(pk=pk)
        for name, pk in orders.items()
    }
    for name, (note, phone, address, diner_id, total, updated_at) in written.items():
        cleared = name in ("completed-31d", "cancelled-31d")
        assert (note == "", phone == "", address == "") == (cleared, cleared, cleared), name
        assert (diner_id, total, updated_at) == (f"diner-{name}", dish.price, cases[name][1])
    assert overdue_rows()["order_contact_details"] == 0
    assert purge_expired_data()["order_contact_details"] == 0  # nothing left to clear


def test_what_diners_wrote_on_orders_left_unfinished_is_cleared_after_the_same_time(
    tenant, menu_for_tenant, settings
):
    """A restaurant that never marks its orders completed left them PAID or READY for good,
    and with them the diner's note, phone and address (red: only completed and cancelled
    orders were cleared, the three below kept theirs). An order changed within the retention
    keeps them, whatever its status."""
    settings.ORDER_CONTACT_RETENTION_DAYS = 30
    now = timezone.now()
    cases = {
        "paid-60d": (OrderStatus.PAID, now - timedelta(days=60)),
        "ready-31d": (OrderStatus.READY, now - timedelta(days=31)),
        "cancelling-31d": (OrderStatus.CANCELLING, now - timedelta(days=31)),
        "preparing-29d": (OrderStatus.PREPARING, now - timedelta(days=29)),
    }
    orders = orders_with_contact_details(tenant, menu_for_tenant(tenant), cases)

    assert purge_expired_data()["order_contact_details"] == 3

    cleared = {
        name: Order.all_tenants.values_list("note", "contact_phone", "delivery_address").get(pk=pk)
        == ("", "", "")
        for name, pk in orders.items()
    }
    assert cleared == {
        "paid-60d": True,
        "ready-31d": True,
        "cancelling-31d": True,
        "preparing-29d": False,
    }
    assert overdue_rows()["order_contact_details"] == 0


def orders_with_contact_details(
    tenant: Tenant, dish: Dish, cases: dict[str, tuple[str, datetime]]
) -> dict[str, int]:
    """An order per case (name -> its status and last change) with a note, phone and address
    of its own; name -> the order's id."""
    orders = {}
    for name, (status, changed) in cases.items():
        order = place_order(
            tenant=tenant,
            items=[ItemRequest(dish_id=dish.pk, quantity=1)],
            payment_method="card",
            diner_id=f"diner-{name}",
            note=f"ring twice ({name})",
            contact_phone="+44 20 7946 0000",
            delivery_address=f"1 {name} Street",
            actor="test",
        )
        Order.all_tenants.filter(pk=order.pk).update(status=status, updated_at=changed)
        orders[name] = order.pk
    return orders


def test_a_tenant_being_offboarded_does_not_stop_the_purge_of_the_others(
    make_tenant, menu_for_tenant, settings, tmp_path
):
    """Its rows are fenced while its offboarding exports and deletes them: clearing its
    orders failed the purge run, every tenant's kinds with it."""
    from ordering.privacy.offboarding import run_offboarding, start_offboarding

    settings.ORDER_CONTACT_RETENTION_DAYS = 30
    long_ago = timezone.now() - timedelta(days=31)
    leaving, staying = make_tenant(slug="leaving"), make_tenant(slug="staying")
    orders = {}
    for tenant in (leaving, staying):
        order = place_order(
            tenant=tenant,
            items=[ItemRequest(dish_id=menu_for_tenant(tenant).pk, quantity=1)],
            payment_method="card",
            diner_id="zoe",
            note="ring twice",
            actor="test",
        )
        Order.all_tenants.filter(pk=order.pk).update(
            status=OrderStatus.COMPLETED, updated_at=long_ago
        )
        orders[tenant.slug] = order.pk
    job = start_offboarding(tenant=leaving, export_path=tmp_path / "a.zip", requested_by="t")
    run_offboarding(job.pk, max_steps=1)  # suspended: its rows are fenced

    assert purge_expired_data()["order_contact_details"] == 1

    notes = dict(Order.all_tenants.filter(pk__in=orders.values()).values_list("pk", "note"))
    assert (notes[orders["staying"]], notes[orders["leaving"]]) == ("", "ring twice")
    assert overdue_rows()["order_contact_details"] == 0


def test_metrics_count_rows_purged_and_overdue(tenant, settings, client):
    settings.METRICS_TOKEN = TOKEN
    before = scrape(client).content.decode()
    for n in range(3):
        expired_record(tenant, n)
    audit(tenant, days_ago=40, key="old")
    kinds = {"kind": "idempotency_records"}
    mid = scrape(client).content.decode()
    assert value(mid, "retention_overdue_rows", **kinds) == 3
    assert value(mid, "retention_overdue_rows", kind="duplicate_audits") == 1
    purge_expired_data()
    after = scrape(client).content.decode()
    assert value(after, "retention_overdue_rows", **kinds) == 0
    purged = value(after, "retention_purged_rows_total", **kinds)
    assert purged - value(before, "retention_purged_rows_total", **kinds) == 3
    assert value(after, "retention_purged_rows_total", kind="duplicate_audits") >= 1
    # every kind the purge deletes has its overdue gauge, as docs/data-protection.md lists them
    gauged = {dict(ls).get("kind") for n, ls in samples(after) if n == "retention_overdue_rows"}
    assert gauged == set(KINDS)


@pytest.mark.parametrize(
    ("field", "bad", "message"),
    [
        ("record_ttl_hours", 0, "between 1 and 720 hours"),
        ("record_ttl_hours", 721, "between 1 and 720 hours"),
        ("audit_retention_days", 366, "between 1 and 365 days"),
        ("audit_retention_days", 0, "between 1 and 365 days"),
        ("log_fields", ["request_id", "remote_addr"], "remote_addr: not a log field"),
        ("log_fields", "request_id", "Enter a list of log field names"),
    ],
)
def test_values_outside_the_platform_bounds_are_refused_in_the_admin(tenant, field, bad, message):
    staff = get_user_model().objects.create_superuser("root", "root@example.com", "pw-12345678")
    admin = Client()
    admin.force_login(staff)
    url = f"/admin/tenants/tenant/{tenant.pk}/change/"
    form = {
        "slug": tenant.slug, "name": tenant.name, "region": tenant.region,
        "status": tenant.status, "time_zone": tenant.time_zone, "redacted_paths": "[]",
        "log_fields": "null", "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0",
    }  # fmt: skip
    good = admin.post(url, {**form, "record_ttl_hours": "24", "audit_retention_days": "7"})
    assert good.status_code == 302
    tenant.refresh_from_db()
    assert (tenant.record_ttl_hours, tenant.audit_retention_days) == (24, 7)
    posted = json.dumps(bad) if field == "log_fields" else str(bad)
    refused = admin.post(url, {**form, field: posted})
    assert refused.status_code == 200
    assert message in refused.content.decode()
    with pytest.raises(ValidationError) as error:
        setattr(tenant, field, bad)
        tenant.full_clean()
    assert field in error.value.message_dict


def test_beat_schedules_the_purge_task():
    from config.celery import app

    entry = settings.CELERY_BEAT_SCHEDULE["purge-expired-data"]
    assert entry == {"task": "tenants.purge_expired_data", "schedule": 3600.0}
    app.loader.import_default_modules()
    assert "tenants.purge_expired_data" in app.tasks
