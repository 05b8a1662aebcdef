"""Staff lists over tables that grow with history cost what a page costs, not what the table
holds (``idempotency/admin/paging.py``): a list counts its rows only up to a bound, never the
whole table beside a filtered list, and pages end at the bound.

Judged by the statements a page view sends (never by time): red, each view counted every row
of the list (``SELECT COUNT(*)`` with no ``LIMIT``), and a filtered one the whole table again;
over a year's 2,000,000 audits or 5,000,000 records that was seconds per view.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.http import HttpResponse
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from idempotency.admin import audits as audits_admin
from idempotency.admin.audits import DuplicateAuditAdmin
from idempotency.admin.paging import BoundedCountPaginator
from idempotency.models import DuplicateAudit, IdempotencyRecord, StaffAccessLog
from ordering.models import DeadLetter, Order, OutboxEvent, Payment
from tenants.api_keys import issue_api_key
from tenants.models import ApiClient, DinerSession, Tenant

pytestmark = pytest.mark.django_db
BOUND = 5  # the lists' bound in these tests (COUNT_LIMIT in production)
ROWS = 8  # more than the bound, in the first tenant
COUNT = re.compile(r"\bCOUNT\(", re.IGNORECASE)


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password=None))
    return client


@pytest.fixture(autouse=True)
def small_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(BoundedCountPaginator, "limit", BOUND)


def audits(tenant: Tenant, n: int) -> None:
    now = timezone.now()
    DuplicateAudit.objects.bulk_create(
        DuplicateAudit(
            tenant_key=str(tenant.pk),
            endpoint="POST api/v1/orders/",
            key=f"k{tenant.pk}-{i}",
            outcome="HIT",
            at=now - timedelta(minutes=i),
        )
        for i in range(n)
    )


def records(tenant: Tenant, n: int) -> None:
    now = timezone.now()
    IdempotencyRecord.objects.bulk_create(
        IdempotencyRecord(
            tenant_key=str(tenant.pk),
            scope="diner:ann|POST|api/v1/orders/",
            key=f"k{tenant.pk}-{i}",
            fingerprint="f" * 64,
            response_status=201,
            created_at=now,
            expires_at=now + timedelta(hours=72),
        )
        for i in range(n)
    )


def access_logs(tenant: Tenant, n: int) -> None:
    StaffAccessLog.objects.bulk_create(
        StaffAccessLog(actor=f"staff-{tenant.pk}", action="export_audits", object_type="x")
        for _ in range(n)
    )


def orders(tenant: Tenant, n: int) -> list[Order]:
    return Order.all_tenants.bulk_create(
        Order(
            id=tenant.pk * 1000 + i,
            tenant=tenant,
            payment_method="card",
            subtotal=Decimal("1.00"),
            total=Decimal("1.00"),
        )
        for i in range(n)
    )


def outbox_events(tenant: Tenant, n: int) -> None:
    OutboxEvent.all_tenants.bulk_create(
        OutboxEvent(tenant=tenant, order=order, event_type="order.paid", version=1)
        for order in orders(tenant, n)
    )


def diner_sessions(tenant: Tenant, n: int) -> None:
    client, _ = issue_api_key(tenant=tenant, name="app", kind=ApiClient.Kind.PUBLISHABLE)
    now = timezone.now()
    DinerSession.objects.bulk_create(
        DinerSession(
            tenant=tenant,
            client=client,
            diner_id=f"guest_{tenant.pk}_{i}",
            is_guest=True,
            secret_hash="0" * 64,
            expires_at=now + timedelta(hours=24),
        )
        for i in range(n)
    )


def dead_letters(tenant: Tenant, n: int) -> None:
    DeadLetter.objects.bulk_create(
        DeadLetter(
            tenant=tenant, key=f"k{tenant.pk}-{i}", task="t", payload={}, error="e", attempts=4
        )
        for i in range(n)
    )


# (changelist, rows of a tenant, its filter by tenant)
LISTS: dict[
    str, tuple[str, Callable[[Tenant, int], object], Callable[[Tenant], dict[str, str]]]
] = {
    "audits": (
        "/admin/idempotency/duplicateaudit/",
        audits,
        lambda t: {"tenant_key": str(t.pk)},
    ),
    "records": (
        "/admin/idempotency/idempotencyrecord/",
        records,
        lambda t: {"tenant_key": str(t.pk)},
    ),
    "access log": (
        "/admin/idempotency/staffaccesslog/",
        access_logs,
        lambda t: {"q": f"staff-{t.pk}"},
    ),
    "orders": ("/admin/ordering/order/", orders, lambda t: {"tenant__id__exact": str(t.pk)}),
    "outbox": (
        "/admin/ordering/outboxevent/",
        outbox_events,
        lambda t: {"tenant__id__exact": str(t.pk)},
    ),
    "dead letters": (
        "/admin/ordering/deadletter/",
        dead_letters,
        lambda t: {"tenant__id__exact": str(t.pk)},
    ),
    # a guest session each time a diner's app opens, kept a day: the busiest table of a day
    "diner sessions": (
        "/admin/tenants/dinersession/",
        diner_sessions,
        lambda t: {"tenant__id__exact": str(t.pk)},
    ),
}


def counts_of(staff: Client, url: str, params: dict[str, str]) -> tuple[HttpResponse, list[str]]:
    """The page and the counting statements its view sent."""
    with CaptureQueriesContext(connection) as sent:
        page = staff.get(url, params)
    assert page.status_code == 200
    return page, [q["sql"] for q in sent.captured_queries if COUNT.search(q["sql"])]


@pytest.mark.parametrize("name", LISTS)
@pytest.mark.parametrize("filtered", [False, True], ids=["whole list", "filtered"])
def test_a_list_counts_its_rows_only_up_to_the_bound(
    staff: Client, tenant: Tenant, other_tenant: Tenant, name: str, filtered: bool
) -> None:
    url, make, by_tenant = LISTS[name]
    make(tenant, ROWS)
    make(other_tenant, 1)

    page, counts = counts_of(staff, url, by_tenant(tenant) if filtered else {})

    # one count, read no further than one row past the bound; no count of the whole table
    assert len(counts) == 1, counts
    assert f"LIMIT {BOUND + 1}" in counts[0], counts[0]
    assert f"more than {BOUND}" in page.content.decode()


@pytest.mark.parametrize("name", LISTS)
def test_a_list_within_the_bound_shows_its_exact_count(
    staff: Client, tenant: Tenant, other_tenant: Tenant, name: str
) -> None:
    url, make, by_tenant = LISTS[name]
    make(tenant, ROWS)
    make(other_tenant, 2)

    page, counts = counts_of(staff, url, by_tenant(other_tenant))

    assert len(counts) == 1
    assert page.context["cl"].result_count == 2
    assert "more than" not in page.content.decode()


def test_pages_end_at_the_bound(
    staff: Client, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    audits(tenant, ROWS)
    monkeypatch.setattr(DuplicateAuditAdmin, "list_per_page", 2)

    first = staff.get("/admin/idempotency/duplicateaudit/")
    last = staff.get("/admin/idempotency/duplicateaudit/", {"p": "3"})
    past = staff.get("/admin/idempotency/duplicateaudit/", {"p": "4"})

    assert first.context["cl"].paginator.num_pages == 3  # the newest 5 rows of 8, 2 a page
    assert [a.key for a in last.context["cl"].result_list] == [f"k{tenant.pk}-4"]
    assert past.status_code == 302  # Django's admin: a page past the last is "?e=1"


def test_facet_counts_are_not_offered(staff: Client, tenant: Tenant) -> None:
    audits(tenant, ROWS)

    page, counts = counts_of(staff, "/admin/idempotency/duplicateaudit/", {"_facets": "1"})

    assert len(counts) == 1  # the list's bounded count alone, none per filter choice
    assert "Hide counts" not in page.content.decode()  # nor a link to show or hide them


def rows_returned(staff: Client, url: str, params: dict[str, str]) -> list[tuple[int, str]]:
    """How many rows each statement of the page view returned, with its SQL."""
    returned: list[tuple[int, str]] = []

    def count_rows(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        result = execute(sql, params, many, context)
        returned.append((context["cursor"].rowcount, sql))
        return result

    with connection.execute_wrapper(count_rows):
        assert staff.get(url, params).status_code == 200
    return returned


@pytest.mark.parametrize(
    "url, admin_class",
    [
        ("/admin/idempotency/duplicateaudit/", "DuplicateAuditAdmin"),
        ("/admin/idempotency/idempotencyrecord/", "IdempotencyRecordAdmin"),
    ],
    ids=["audits", "records"],
)
def test_the_tenant_filter_reads_each_tenant_once_not_each_row(
    staff: Client,
    tenant: Tenant,
    other_tenant: Tenant,
    monkeypatch: pytest.MonkeyPatch,
    url: str,
    admin_class: str,
) -> None:
    # red: the tenants' choices were a DISTINCT over (tenant_key, at, id), the audits' default
    # ordering included: one row per audit, 2,000,000 into the web process for two tenants
    make = audits if "audit" in url else records
    make(tenant, 30)
    make(other_tenant, 30)
    monkeypatch.setattr(getattr(audits_admin, admin_class), "list_per_page", 10)
    monkeypatch.setattr(BoundedCountPaginator, "limit", 1000)  # pages of 10 up to it

    returned = rows_returned(staff, url, {})

    too_many = [(n, sql) for n, sql in returned if n > 10]
    assert not too_many, "a statement read more rows than the page shows"
    walks = [sql for _, sql in returned if sql.startswith("WITH RECURSIVE")]
    assert any('"tenant_key"' in sql for sql in walks)
    assert not [sql for _, sql in returned if "SELECT DISTINCT" in sql and "tenant_key" in sql]


def test_the_endpoint_filter_lists_each_endpoint_read_from_its_index(
    staff: Client, tenant: Tenant
) -> None:
    audits(tenant, 3)
    DuplicateAudit.objects.filter(key=f"k{tenant.pk}-0").update(endpoint="POST api/v1/pay/")

    with CaptureQueriesContext(connection) as sent:
        page = staff.get("/admin/idempotency/duplicateaudit/")

    (endpoints,) = [f for f in page.context["cl"].filter_specs if f.title == "endpoint"]
    assert list(endpoints.lookup_choices) == ["POST api/v1/orders/", "POST api/v1/pay/"]
    statements = [q["sql"] for q in sent.captured_queries]
    assert any(s.startswith("WITH RECURSIVE") and '"endpoint"' in s for s in statements)
    assert not [s for s in statements if "SELECT DISTINCT" in s and '"endpoint"' in s]


def test_the_dead_letters_list_reads_their_orders_and_tenants_with_the_page(
    staff: Client, tenant: Tenant
) -> None:
    # red: tenant and order are nullable foreign keys, which Django's automatic select_related
    # leaves out: two statements per letter listed (207 for a page of 100)
    placed = orders(tenant, 4)

    def statements_with_letters_of(some: list[Order]) -> int:
        for order in some:
            DeadLetter.objects.create(
                tenant=tenant,
                order=order,
                key=f"k{order.pk}",
                task="t",
                payload={},
                error="e",
                attempts=4,
            )
        with CaptureQueriesContext(connection) as sent:
            page = staff.get("/admin/ordering/deadletter/")
        assert page.status_code == 200
        assert len(page.context["cl"].result_list) == DeadLetter.objects.count()
        return len(sent.captured_queries)

    assert statements_with_letters_of(placed[:1]) == statements_with_letters_of(placed[1:])


def test_the_date_drill_down_offers_the_periods_between_the_first_and_last_row(
    staff: Client, tenant: Tenant
) -> None:
    # red: the years (months) on offer were a SELECT DISTINCT date_trunc(...) over every row
    audits(tenant, 2)
    DuplicateAudit.objects.filter(key=f"k{tenant.pk}-1").update(
        at=timezone.now() - timedelta(days=800)
    )
    placed = orders(tenant, 2)
    Order.all_tenants.filter(pk=placed[1].pk).update(
        created_at=timezone.now() - timedelta(days=800)
    )
    this_year = timezone.localtime().year

    for url, field in [
        ("/admin/idempotency/duplicateaudit/", "at"),
        ("/admin/ordering/order/", "created_at"),
    ]:
        with CaptureQueriesContext(connection) as sent:
            years = staff.get(url).content.decode()
            months = staff.get(url, {f"{field}__year": str(this_year)}).content.decode()

        assert not [q for q in sent.captured_queries if "DATE_TRUNC" in q["sql"]], url
        for year in range(this_year - 2, this_year + 1):  # the one between them too
            assert f"?{field}__year={year}" in years, (url, year)
        month = timezone.localtime().month
        assert f"?{field}__month={month}&amp;{field}__year={this_year}" in months, url


def test_the_records_list_reads_no_dates_of_every_record(staff: Client, tenant: Tenant) -> None:
    records(tenant, 3)

    with CaptureQueriesContext(connection) as sent:
        page = staff.get("/admin/idempotency/idempotencyrecord/")

    assert page.status_code == 200 and len(page.context["cl"].result_list) == 3
    statements = [q["sql"] for q in sent.captured_queries]
    assert not [s for s in statements if "DATE_TRUNC" in s or '"created_at") AS "first"' in s]


def orders_found(staff: Client, term: str) -> set[int]:
    """The orders the admin's order search lists for ``term``, checking that the statements
    that compared it did so without ``UPPER(...)``, which no index holds."""
    with CaptureQueriesContext(connection) as sent:
        page = staff.get("/admin/ordering/order/", {"q": term})
    assert page.status_code == 200
    searched = [q["sql"] for q in sent.captured_queries if f"'{term}'" in q["sql"]]
    assert searched and not [s for s in searched if "UPPER(" in s], searched
    return {o.pk for o in page.context["cl"].result_list}


def test_the_order_search_finds_by_id_diner_or_key_through_their_indexes(
    staff: Client, tenant: Tenant, other_tenant: Tenant
) -> None:
    # red: search_fields "=id", "=diner_id", "=idempotency_key" compare UPPER(column::text),
    # which no index holds: every search read all orders (5.7 s over 1,000,000)
    first, second, third = orders(tenant, 3)
    Order.all_tenants.filter(pk=second.pk).update(diner_id="diner-7")
    Order.all_tenants.filter(pk=third.pk).update(idempotency_key="Key-9")
    theirs = orders(other_tenant, 1)[0]
    Order.all_tenants.filter(pk=theirs.pk).update(idempotency_key="Key-9")

    found = functools.partial(orders_found, staff)

    assert found(str(first.pk)) == {first.pk}
    assert found("diner-7") == {second.pk}
    assert found("Key-9") == {third.pk, theirs.pk}  # a key of any restaurant
    assert found("key-9") == set()  # keys are told apart by case, as the engine does
    assert found("99999999999999999999") == set()  # past a 64-bit id: no id, no error


def test_the_sessions_search_finds_a_diner_or_a_restaurant_through_their_indexes(
    staff: Client, tenant: Tenant, other_tenant: Tenant
) -> None:
    # red: search_fields "diner_id", "tenant__slug" compared UPPER(column::text) LIKE '%…%',
    # which no index holds: every search read every session of every restaurant, twice (the
    # count and the page), beside a count of the whole table
    diner_sessions(tenant, 3)
    diner_sessions(other_tenant, 1)

    def found(term: str) -> set[str]:
        with CaptureQueriesContext(connection) as sent:
            page = staff.get("/admin/tenants/dinersession/", {"q": term})
        assert page.status_code == 200
        (count,) = [q["sql"] for q in sent.captured_queries if COUNT.search(q["sql"])]
        with connection.cursor() as cursor:
            # a few rows: judge the plan's shape, as over a day of sessions (no scan of all)
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute(f"EXPLAIN {count}")
            plan = "\n".join(row[0] for row in cursor.fetchall())
        assert "Seq Scan on tenants_dinersession" not in plan, plan
        return {s.diner_id for s in page.context["cl"].result_list}

    assert found(f"guest_{tenant.pk}_1") == {f"guest_{tenant.pk}_1"}
    assert found(f"guest_{tenant.pk}_") == set()  # exactly: not a part of one
    assert found(other_tenant.slug) == {f"guest_{other_tenant.pk}_0"}


def test_the_order_search_finds_an_order_by_its_payment_s_provider_reference(
    staff: Client, tenant: Tenant, other_tenant: Tenant
) -> None:
    # red: a diner's bank statement names the provider's transaction, and the order search
    # took only an order id, a diner id or a key: no list of the admin led from the reference
    # of a payment that raised no conflict to its order
    first, second = orders(tenant, 2)
    theirs = orders(other_tenant, 1)[0]
    for order, txn in ((first, "sim_aaa"), (second, "sim_bbb"), (second, "sim_ccc")):
        Payment.all_tenants.create(
            tenant=order.tenant,
            order=order,
            provider="simulated",
            provider_txn_id=txn,
            method="card",
            amount=Decimal("1.00"),
        )
    Payment.all_tenants.create(
        tenant=other_tenant,
        order=theirs,
        provider="simulated",
        provider_txn_id="sim_aaa",
        method="card",
        amount=Decimal("1.00"),
    )

    found = functools.partial(orders_found, staff)

    assert found("sim_ccc") == {second.pk}  # the second payment of an order paid twice
    assert found("sim_aaa") == {first.pk, theirs.pk}  # each restaurant's, named in the list
    assert found("SIM_AAA") == set()  # as the provider spells it


def test_the_audits_search_by_an_order_s_url_is_answered_by_an_index(
    staff: Client, tenant: Tenant
) -> None:
    # red: resource_ref__icontains is UPPER(resource_ref::text) LIKE '%…%', which no index
    # held: every search read every audit (about 1 s over 2,000,000)
    audits(tenant, 3)
    DuplicateAudit.objects.filter(key=f"k{tenant.pk}-1").update(resource_ref="/api/v1/orders/777/")

    with CaptureQueriesContext(connection) as sent:
        page = staff.get("/admin/idempotency/duplicateaudit/", {"q": "orders/777"})

    assert [a.key for a in page.context["cl"].result_list] == [f"k{tenant.pk}-1"]
    (count,) = [q["sql"] for q in sent.captured_queries if COUNT.search(q["sql"])]
    with connection.cursor() as cursor:
        # a few rows: judge the plan's shape, as over millions (no scan reading every row)
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_indexscan = off")
        cursor.execute(f"EXPLAIN {count}")
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "idempotency_audit_resource_ref_trgm" in plan, plan


@pytest.mark.parametrize(
    "url, make, field, offered",
    [
        ("/admin/idempotency/duplicateaudit/", audits, "source", ["local", "redis", "database"]),
        ("/admin/idempotency/idempotencyrecord/", records, "response_status", ["201", "409"]),
        ("/admin/ordering/order/", orders, "payment_method", ["card", "wallet", "cash"]),
    ],
    ids=["audits by source", "records by status", "orders by payment method"],
)
def test_a_filter_over_an_unindexed_column_offers_fixed_values(
    staff: Client, tenant: Tenant, url: str, make: Callable[..., object], field: str, offered
) -> None:
    # red: each offered the values the table holds, a SELECT DISTINCT over every row (the
    # records' statuses 1.5-2.7 s over 5,000,000)
    make(tenant, 3)

    with CaptureQueriesContext(connection) as sent:
        page = staff.get(url)

    assert not [q["sql"] for q in sent.captured_queries if "SELECT DISTINCT" in q["sql"]]
    (spec,) = [f for f in page.context["cl"].filter_specs if getattr(f, "field_path", 0) == field]
    assert set(offered) <= {str(v) for v in spec.lookup_choices}
    narrowed = staff.get(url, {f"{field}__exact": offered[1]})
    assert narrowed.status_code == 200  # filtered as before


def test_an_export_past_the_bound_is_refused_with_a_word_and_logs_nothing(
    staff: Client, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    # red: "select all" exported every audit the list held, written into memory in the
    # request (2,000,000 audits: hundreds of MB, past gunicorn's timeout)
    monkeypatch.setattr(audits_admin, "MAX_EXPORT_ROWS", 3, raising=False)
    audits(tenant, 4)
    url = "/admin/idempotency/duplicateaudit/"
    export = {"action": "export_csv", "select_across": "1", "index": "0"}

    with CaptureQueriesContext(connection) as sent:
        refused = staff.post(url, {**export, "_selected_action": ["0"]}, follow=True)

    assert refused.status_code == 200 and not refused["Content-Type"].startswith("text/csv")
    assert [str(m) for m in refused.context["messages"]] == [
        "Export at most 3 audits at a time: narrow the list with a filter, the dates or the "
        "search, and export it in parts."
    ]
    assert not StaffAccessLog.objects.exists()
    assert [q["sql"] for q in sent.captured_queries if "LIMIT 4" in q["sql"]]  # counted to 4

    older = DuplicateAudit.objects.order_by("at")[0].at
    since = urlencode({"at__gt": older.isoformat()})
    narrowed = staff.post(f"{url}?{since}", {**export, "_selected_action": ["0"]})
    assert narrowed["Content-Type"].startswith("text/csv")
    assert narrowed.content.decode().count("\n") == 1 + 3
    assert StaffAccessLog.objects.get().row_count == 3


def test_the_bounded_count_is_not_ordered(staff: Client, tenant: Tenant) -> None:
    # red: the count kept the list's ORDER BY, so a list sorted by a column no index serves
    # sorted the whole table to count 10,001 rows (3.6 s over 5,000,000 records)
    records(tenant, 3)

    for sort in ("1", "2", "3", "4", ""):
        _, counts = counts_of(staff, "/admin/idempotency/idempotencyrecord/", {"o": sort})
        assert len(counts) == 1 and "ORDER BY" not in counts[0], counts


def page_orderings(staff: Client, url: str, sort: str, table: str) -> list[str]:
    """The ORDER BY of each read of the page's rows (``SELECT "<table>"."id", …``)."""
    with CaptureQueriesContext(connection) as sent:
        assert staff.get(url, {"o": sort}).status_code == 200
    reads = [
        q["sql"] for q in sent.captured_queries if q["sql"].startswith(f'SELECT "{table}"."id"')
    ]
    return [sql.split("ORDER BY", 1)[1] for sql in reads]


def test_big_lists_sort_only_by_columns_an_index_serves(staff: Client, tenant: Tenant) -> None:
    # red: a sort link (or ?o=) sorted the whole table by a column no index serves, on every
    # page view: the records by status or date 1.1-1.4 s, the outbox by published_at 2.8 s
    records(tenant, 3)
    outbox_events(tenant, 3)

    page = staff.get("/admin/idempotency/idempotencyrecord/")
    assert "sortable" not in page.content.decode().split('id="result_list"')[1].split("</thead>")[0]
    for sort in ("0", "1", "2", "3", "4", "-3"):
        (order,) = page_orderings(
            staff, "/admin/idempotency/idempotencyrecord/", sort, "idempotency_idempotencyrecord"
        )
        assert order.strip().startswith('"idempotency_idempotencyrecord"."id" DESC'), order

    (by_date,) = page_orderings(staff, "/admin/ordering/outboxevent/", "3", "ordering_outboxevent")
    assert by_date.strip().startswith('"ordering_outboxevent"."created_at" ASC'), by_date
    (by_publishing,) = page_orderings(
        staff, "/admin/ordering/outboxevent/", "4", "ordering_outboxevent"
    )
    assert "published_at" not in by_publishing


@pytest.mark.parametrize(
    "url, make, table, served",
    [
        ("/admin/ordering/order/", orders, "ordering_order", ("created_at", "id")),
        (
            "/admin/idempotency/duplicateaudit/",
            audits,
            "idempotency_duplicateaudit",
            ("at", "key", "resource_ref", "id"),
        ),
    ],
    ids=["orders", "audits"],
)
def test_orders_and_audits_sort_only_by_columns_an_index_serves(
    staff: Client,
    tenant: Tenant,
    url: str,
    make: Callable[[Tenant, int], object],
    table: str,
    served: tuple[str, ...],
) -> None:
    # red: a sort link (or ?o=) by the orders' number, restaurant, status or total, or the
    # audits' restaurant, outcome, endpoint or review sorted the whole table on every page
    # view (a sequential scan of every order of every restaurant)
    make(tenant, 3)

    for sort in ("1", "2", "3", "4", "5", "6", "7", "-1", "-4"):
        (order,) = page_orderings(staff, url, sort, table)
        first = order.strip().split(",")[0].split(".")[1].split(" ")[0].strip('"')
        assert first in served, (sort, order)


def test_the_access_log_is_searched_and_sorted_through_its_indexes(
    staff: Client, tenant: Tenant, other_tenant: Tenant
) -> None:
    # red: the staff access log (kept for good, a row per view of personal data) was searched
    # by UPPER(actor) = UPPER(…), which no index holds, and sorted by any column: every search
    # and every sort link read the whole log
    access_logs(tenant, 3)
    access_logs(other_tenant, 1)

    with CaptureQueriesContext(connection) as sent:
        page = staff.get("/admin/idempotency/staffaccesslog/", {"q": f"staff-{other_tenant.pk}"})
    assert [e.actor for e in page.context["cl"].result_list] == [f"staff-{other_tenant.pk}"]
    (count,) = [q["sql"] for q in sent.captured_queries if COUNT.search(q["sql"])]
    with connection.cursor() as cursor:
        # a few rows: judge the plan's shape, as over years of views
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN {count}")
        plan = "\n".join(row[0] for row in cursor.fetchall())
    conditions = "\n".join(line for line in plan.splitlines() if "Index Cond" in line)
    assert "actor" in conditions and "Filter" not in plan, plan

    for sort in ("1", "2", "3", "4", "5", "-2"):
        (order,) = page_orderings(
            staff, "/admin/idempotency/staffaccesslog/", sort, "idempotency_staffaccesslog"
        )
        first = order.strip().split(",")[0]
        assert first.startswith(
            ('"idempotency_staffaccesslog"."at"', '"idempotency_staffaccesslog"."id"')
        ), (sort, order)


def test_marking_past_the_review_batch_is_refused_after_a_bounded_count(
    staff: Client, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    # red: "Mark reviewed" on "select all" counted every audit the list held, in its order
    monkeypatch.setattr(audits_admin, "MAX_REVIEW_BATCH", 3)
    audits(tenant, 4)
    action = {"action": "mark_reviewed", "select_across": "1", "index": "0"}

    with CaptureQueriesContext(connection) as sent:
        refused = staff.post(
            "/admin/idempotency/duplicateaudit/", {**action, "_selected_action": ["0"]}, follow=True
        )

    assert [str(m) for m in refused.context["messages"]] == ["Select at most 3 audits at a time."]
    counts = [q["sql"] for q in sent.captured_queries if "COUNT(" in q["sql"].upper()]
    assert [c for c in counts if "LIMIT 4" in c and "ORDER BY" not in c], counts
    assert not [c for c in counts if "LIMIT" not in c and "duplicateaudit" in c], counts
    assert not DuplicateAudit.objects.filter(reviewed=True).exists()
