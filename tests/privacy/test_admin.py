"""Staff start data-protection requests from the admin: erase the diners of selected orders,
offboard selected tenants (a Celery task, run eagerly here), and read the logs (erasures,
copies of diners' data given)."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.test import Client

from ordering.models import DinerDataExport, DinerErasure, Order, TenantOffboarding
from ordering.privacy.diners import diner_hash
from tenants.models import DinerSession, Tenant
from tests.conftest import api_for, menu_for
from tests.privacy.test_erase_diner import place
from tests.support.broker import sending_to
from tests.support.ports import free_port

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="x-123456789"))
    return client


@pytest.fixture
def celery_eager() -> Iterator[None]:
    from config.celery import app

    before = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = before


def run_action(client: Client, changelist: str, action: str, pks: list[object], **confirm: str):
    """The action as the changelist posts it; with ``confirm``, as its confirmation page does."""
    data = {"action": action, ACTION_CHECKBOX_NAME: [str(p) for p in pks]}
    if confirm:
        data |= {"apply": "1", **confirm}
    return client.post(changelist, data)


def test_staff_erase_the_diners_of_selected_orders(staff, tenant, settings):
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    menu = menu_for(tenant)
    place(api_for(tenant, diner="zoe"), menu, "k1", note="call me")
    place(api_for(tenant, diner="zoe"), menu, "k2")
    place(api_for(tenant, diner="yan"), menu, "k1")
    zoe = list(Order.all_tenants.filter(diner_id="zoe").values_list("pk", flat=True))
    r = run_action(staff, "/admin/ordering/order/", "erase_diners", zoe[:1])
    # first a page naming the diner and all her orders; nothing is erased yet
    assert r.status_code == 200 and "Yes, erase these diners" in r.content.decode()
    assert [row for row in page_rows(r) if "zoe" in row] == [[tenant.slug, "zoe", "2"]]
    assert not DinerErasure.objects.exists()
    assert Order.all_tenants.filter(diner_id="zoe").count() == 2
    r = run_action(staff, "/admin/ordering/order/", "erase_diners", zoe[:1], confirmed="1")
    assert r.status_code == 302
    log = DinerErasure.objects.get()
    assert log.requested_by == "staff:root" and log.counts["orders"] == 2
    assert Order.all_tenants.filter(diner_id=log.pseudonym).count() == 2
    assert Order.all_tenants.filter(diner_id="yan").count() == 1
    # the log is found by the diner id, which it does not keep
    found = staff.get("/admin/ordering/dinererasure/", {"q": "zoe"}).content.decode()
    assert log.pseudonym in found
    other = staff.get("/admin/ordering/dinererasure/", {"q": "yan"}).content.decode()
    assert log.pseudonym not in other


def test_staff_offboard_a_tenant_as_a_task(staff, make_tenant, settings, tmp_path, celery_eager):
    settings.OFFBOARDING_EXPORT_DIR = tmp_path
    leaving, staying = make_tenant(slug="leaving"), make_tenant(slug="staying")
    menu = menu_for(leaving)
    place(api_for(leaving, diner="zoe"), menu, "k1")
    r = run_action(staff, "/admin/tenants/tenant/", "offboard", [leaving.pk])
    assert r.status_code == 200 and page_rows(r) == [["leaving", leaving.name, "active", "1"]]
    r = run_action(staff, "/admin/tenants/tenant/", "offboard", [leaving.pk], typed="leaving")
    assert r.status_code == 302
    job = TenantOffboarding.objects.get()
    assert job.is_done and job.requested_by == "staff:root"
    assert not Tenant.objects.filter(pk=leaving.pk).exists()
    assert Tenant.objects.filter(pk=staying.pk).exists()
    [archive] = tmp_path.glob("leaving-*.zip")
    assert Path(job.export_path) == archive
    assert staff.get(f"/admin/ordering/tenantoffboarding/{job.pk}/change/").status_code == 200


def test_an_offboarding_whose_task_cannot_be_sent_is_recorded_and_continued_later(
    staff, make_tenant, settings, tmp_path, celery_eager
):
    """The task queue refusing connections: the job is recorded and staff are told to continue
    it, instead of a server error after the job was written; continued, it runs (red: 500)."""
    settings.OFFBOARDING_EXPORT_DIR = tmp_path
    leaving = make_tenant(slug="leaving")
    with sending_to(f"redis://127.0.0.1:{free_port()}/0"):  # nothing listens there
        r = run_action(staff, "/admin/tenants/tenant/", "offboard", [leaving.pk], typed="leaving")
        assert r.status_code == 302
        shown = staff.get(r["Location"]).content.decode()
        job = TenantOffboarding.objects.get()
        assert f"Offboarding {job.pk} is recorded, but its task could not be sent now" in shown
        assert not job.is_done and Tenant.objects.filter(pk=leaving.pk).exists()
    r = run_action(staff, "/admin/ordering/tenantoffboarding/", "resume", [job.pk])
    assert r.status_code == 302
    assert TenantOffboarding.objects.get().is_done
    assert not Tenant.objects.filter(pk=leaving.pk).exists()


def test_offboarding_needs_the_permission_to_delete_tenants(tenant):
    manager = User.objects.create_user("bob", password="x-123456789", is_staff=True)
    manager.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_tenant", "change_tenant"])
    )
    client = Client()
    client.force_login(manager)
    assert 'value="offboard"' not in client.get("/admin/tenants/tenant/").content.decode()
    run_action(client, "/admin/tenants/tenant/", "offboard", [tenant.pk], typed=tenant.slug)
    assert not TenantOffboarding.objects.exists()
    assert Tenant.objects.get(pk=tenant.pk).is_active


def test_a_tenant_leaves_only_through_offboarding_never_a_plain_delete(staff, make_tenant):
    """Django's Delete page and "Delete selected" were offered beside Offboard: a restaurant
    with no orders (one opened in the admin, no owner yet) was deleted there by a cascade that
    skipped the offboarding's archive and its removal of the engine's records and the Redis
    keys, left behind holding its diners' stored replies and tokens."""
    quiet = make_tenant(slug="quiet")
    api_for(quiet, diner="zoe")  # a key and a diner's session: rows a plain delete cascaded

    change = staff.get(f"/admin/tenants/tenant/{quiet.pk}/change/").content.decode()
    listed = staff.get("/admin/tenants/tenant/").content.decode()
    deleted = staff.post(f"/admin/tenants/tenant/{quiet.pk}/delete/", {"post": "yes"})
    bulk = run_action(staff, "/admin/tenants/tenant/", "delete_selected", [quiet.pk], post="yes")

    assert f"/admin/tenants/tenant/{quiet.pk}/delete/" not in change
    assert 'value="delete_selected"' not in listed and 'value="offboard"' in listed
    assert deleted.status_code == 403 and bulk.status_code in (200, 302)
    assert Tenant.objects.filter(pk=quiet.pk).exists()
    assert DinerSession.objects.filter(tenant=quiet).exists()


def test_erasing_diners_needs_the_permission_to_log_an_erasure(tenant, settings):
    """Staff who move orders (view and change them) may not erase their diners, which cannot be
    undone (red: they erased zoe); given "Can add diner erasure" they may."""
    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    place(api_for(tenant, diner="zoe"), menu_for(tenant), "k1", note="call me")
    zoe = list(Order.all_tenants.values_list("pk", flat=True))
    mover = User.objects.create_user("mover", password="x-123456789", is_staff=True)
    mover.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_order", "change_order"])
    )
    client = Client()
    client.force_login(mover)

    assert 'value="erase_diners"' not in client.get("/admin/ordering/order/").content.decode()
    run_action(client, "/admin/ordering/order/", "erase_diners", zoe, confirmed="1")
    assert not DinerErasure.objects.exists()
    assert Order.all_tenants.get().diner_id == "zoe"

    mover.user_permissions.add(Permission.objects.get(codename="add_dinererasure"))
    client.force_login(User.objects.get(pk=mover.pk))  # permissions are cached per user object
    assert 'value="erase_diners"' in client.get("/admin/ordering/order/").content.decode()
    run_action(client, "/admin/ordering/order/", "erase_diners", zoe, confirmed="1")
    assert DinerErasure.objects.count() == 1
    assert Order.all_tenants.get().diner_id.startswith("erased-")


def page_rows(response) -> list[list[str]]:
    """The cells of the confirmation page's table, row by row."""
    rows = re.findall(r"<tr>(.*?)</tr>", response.content.decode(), re.S)
    return [re.findall(r"<td>(.*?)</td>", row) for row in rows if "<td>" in row]


@pytest.mark.parametrize("typed", [None, "", "leavin", "leaving staying", "staying"])
def test_offboarding_starts_only_when_every_selected_slug_is_typed(
    staff, make_tenant, settings, tmp_path, celery_eager, typed
):
    """A misclick of the action, or a confirmation naming another tenant, starts nothing."""
    settings.OFFBOARDING_EXPORT_DIR = tmp_path
    leaving, staying = make_tenant(slug="leaving"), make_tenant(slug="staying")
    confirm = {} if typed is None else {"typed": typed}
    r = run_action(staff, "/admin/tenants/tenant/", "offboard", [leaving.pk], **confirm)
    assert r.status_code == 200 and "Yes, offboard" in r.content.decode()
    if typed:
        assert "Type exactly the slugs of the selected tenants." in r.content.decode()
    elif typed == "":
        assert "This field is required." in r.content.decode()
    assert not TenantOffboarding.objects.exists()
    assert Tenant.objects.filter(pk__in=[leaving.pk, staying.pk]).count() == 2
    assert not list(tmp_path.iterdir())


def test_two_tenants_are_offboarded_with_both_slugs_typed(
    staff, make_tenant, settings, tmp_path, celery_eager
):
    settings.OFFBOARDING_EXPORT_DIR = tmp_path
    first, second = make_tenant(slug="first"), make_tenant(slug="second")
    r = run_action(
        staff, "/admin/tenants/tenant/", "offboard", [first.pk, second.pk], typed="second, first"
    )
    assert r.status_code == 302
    assert not Tenant.objects.filter(pk__in=[first.pk, second.pk]).exists()
    assert TenantOffboarding.objects.count() == 2


def test_the_page_lists_exactly_the_selected_diners_of_each_restaurant(staff, make_tenant):
    """alice and bob order in both restaurants; alice's order at one and bob's at the other
    are selected: the page names those two (red: all four pairs), and only they go."""
    roma, kyoto = make_tenant(slug="roma"), make_tenant(slug="kyoto")
    for shop in (roma, kyoto):
        menu = menu_for(shop)
        for diner in ("alice", "bob"):
            place(api_for(shop, diner=diner), menu, f"k-{diner}")
    chosen = [
        Order.all_tenants.get(tenant=roma, diner_id="alice").pk,
        Order.all_tenants.get(tenant=kyoto, diner_id="bob").pk,
    ]
    r = run_action(staff, "/admin/ordering/order/", "erase_diners", chosen)
    assert sorted(page_rows(r)) == [["kyoto", "bob", "1"], ["roma", "alice", "1"]]
    run_action(staff, "/admin/ordering/order/", "erase_diners", chosen, confirmed="1")
    left = set(Order.all_tenants.values_list("tenant__slug", "diner_id"))
    assert {("roma", "bob"), ("kyoto", "alice")} <= left
    assert not {("roma", "alice"), ("kyoto", "bob")} & left


def test_many_diners_are_erased_with_one_wait_for_the_sessions(
    staff, tenant, settings, monkeypatch
):
    """As many diners as one request takes: every session ends before the one wait, no order
    is touched until after it (red: a wait per diner, each before its own diner's orders)."""
    from ordering.admin.privacy import MAX_DINERS_PER_ERASURE as many

    settings.DINER_SESSION_STATE_CACHE_SECONDS = 1.0
    menu = menu_for(tenant, stock=500)
    diners = [f"d{i}" for i in range(many)]
    for diner in diners:
        place(api_for(tenant, diner=diner), menu, "k1")
    waits: list[tuple[int, int]] = []

    def wait(seconds: float) -> None:  # the state of things at the wait
        waits.append(
            (
                DinerSession.objects.filter(tenant=tenant).count(),
                Order.all_tenants.filter(diner_id__in=diners).count(),
            )
        )

    monkeypatch.setattr("ordering.privacy.diners.time.sleep", wait)
    selected = list(Order.all_tenants.values_list("pk", flat=True))
    r = run_action(staff, "/admin/ordering/order/", "erase_diners", selected, confirmed="1")
    assert r.status_code == 302
    assert waits == [(0, many)]
    assert DinerErasure.objects.count() == many
    assert not Order.all_tenants.filter(diner_id__in=diners).exists()


def test_more_diners_than_one_request_erases_are_refused_whole(staff, tenant, settings):
    from ordering.admin import privacy

    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.0
    menu = menu_for(tenant, stock=500)
    for i in range(privacy.MAX_DINERS_PER_ERASURE + 1):
        place(api_for(tenant, diner=f"d{i}"), menu, "k1")
    selected = list(Order.all_tenants.values_list("pk", flat=True))
    r = run_action(staff, "/admin/ordering/order/", "erase_diners", selected, confirmed="1")
    assert r.status_code == 302
    assert not DinerErasure.objects.exists()


def test_a_redis_node_down_stops_the_staff_erasure_with_a_message(staff, tenant, settings):
    from tests.conftest import use_topology
    from tests.support.redis_nodes import RedisNode

    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    node = RedisNode().start()
    try:
        use_topology(settings, shards=[node.url])
        place(api_for(tenant, diner="zoe"), menu_for(tenant), "k1", note="call me")
        zoe = list(Order.all_tenants.filter(diner_id="zoe").values_list("pk", flat=True))
        node.client().save()
        node.stop()
        r = run_action(staff, "/admin/ordering/order/", "erase_diners", zoe, confirmed="1")
        assert r.status_code == 302
        shown = staff.get(r["Location"]).content.decode()
        assert "The erasure did not finish" in shown
        assert not DinerErasure.objects.exists()
    finally:
        node.remove()


def test_erasing_a_diner_of_a_restaurant_being_offboarded_is_refused_whole(
    staff, tenant, settings, tmp_path
):
    """Its rows are fenced: the erasure ended the diner's sessions, then failed on the orders
    with a server error, half done."""
    from ordering.privacy.offboarding import run_offboarding, start_offboarding

    settings.DINER_SESSION_STATE_CACHE_SECONDS = 0.05
    place(api_for(tenant, diner="zoe"), menu_for(tenant), "k1", note="call me")
    zoe = list(Order.all_tenants.filter(diner_id="zoe").values_list("pk", flat=True))
    job = start_offboarding(tenant=tenant, export_path=tmp_path / "a.zip", requested_by="t")
    run_offboarding(job.pk, max_steps=1)
    sessions = DinerSession.objects.filter(tenant=tenant).count()

    r = run_action(staff, "/admin/ordering/order/", "erase_diners", zoe, apply="1")

    assert r.status_code == 302
    shown = " ".join(m.message for m in r.wsgi_request._messages)
    assert f"Nothing was erased: {tenant.slug} is being offboarded" in shown
    assert DinerSession.objects.filter(tenant=tenant).count() == sessions == 1
    assert Order.all_tenants.filter(diner_id="zoe").count() == 1
    assert not DinerErasure.objects.exists()


def test_a_tenant_form_opened_before_its_offboarding_does_not_reopen_it(staff, tenant, tmp_path):
    """Saved as it was shown (status: active), the form reopened the tenant's tables while
    its offboarding exported and deleted them, and its keys answered again."""
    from ordering.privacy.offboarding import run_offboarding, start_offboarding

    # given the tenant's admin page, opened while it was active
    url = f"/admin/tenants/tenant/{tenant.pk}/change/"
    page = staff.get(url)
    form = page.context["adminform"].form
    shown = {name: form[name].value() for name in form.fields}
    data = {name: "" if value is None else value for name, value in shown.items()}
    data |= {"memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0"}
    assert data["status"] == Tenant.Status.ACTIVE
    # when its offboarding begins, and then the page is saved (a name corrected)
    job = start_offboarding(tenant=tenant, export_path=tmp_path / "a.zip", requested_by="t")
    run_offboarding(job.pk, max_steps=1)
    saved = staff.post(url, {**data, "name": "Renamed"})
    # then the name is saved and the tenant stays offboarding
    assert saved.status_code == 302
    tenant.refresh_from_db()
    assert (tenant.name, tenant.status) == ("Renamed", Tenant.Status.OFFBOARDING)
    # and its page no longer offers to change its status
    assert "status" not in staff.get(url).context["adminform"].form.fields


def test_staff_find_a_diner_s_copies_in_the_export_log_by_the_id_typed(staff, tenant):
    """The log keeps the diner id only as its hash: the list never shows it, and the id typed
    into the search is hashed to find the rows (another diner's are not found)."""
    call_command("export_diner", tenant.slug, "zoe", "--by", "dpo:carol", stdout=io.StringIO())
    call_command("export_diner", tenant.slug, "yan", "--by", "dpo:dan", stdout=io.StringIO())

    listed = staff.get("/admin/ordering/dinerdataexport/").content.decode()
    found = staff.get("/admin/ordering/dinerdataexport/", {"q": "zoe"}).content.decode()

    assert "dpo:carol" in listed and "dpo:dan" in listed and "zoe" not in listed
    assert "dpo:carol" in found and "dpo:dan" not in found
    assert staff.get("/admin/ordering/dinerdataexport/add/").status_code == 403


@pytest.mark.parametrize(
    "changelist, model",
    [
        ("/admin/ordering/dinererasure/", DinerErasure),
        ("/admin/ordering/dinerdataexport/", DinerDataExport),
    ],
    ids=["erasure log", "export log"],
)
def test_both_logs_find_a_diner_logged_before_the_site_s_key_was_rotated(
    staff, tenant, settings, changelist, model
):
    """While ``SECRET_KEY`` rotates, the rows logged under the old key (now a fallback) are
    found by the id typed, in the erasure log as in the log of copies given."""
    # red before for the erasure log: its search hashed the id under SECRET_KEY alone
    old = settings.SECRET_KEY
    extra = {"pseudonym": "erased-0123456789abcdef"} if model is DinerErasure else {}
    for diner, by in (("zoe", "dpo:before"), ("yan", "dpo:other")):
        model.objects.create(
            tenant=tenant, diner_hash=diner_hash(diner, secret=old), requested_by=by, **extra
        )
    settings.SECRET_KEY = "a-new-site-key-" + "n" * 50
    settings.SECRET_KEY_FALLBACKS = [old]
    model.objects.create(
        tenant=tenant, diner_hash=diner_hash("zoe"), requested_by="dpo:after", **extra
    )

    found = staff.get(changelist, {"q": "zoe"}).content.decode()

    assert "dpo:before" in found and "dpo:after" in found and "dpo:other" not in found
