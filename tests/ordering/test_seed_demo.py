"""``manage.py seed_demo``: the demo data, machine-readable, and safe to run twice."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from rest_framework.test import APIClient

from ordering.models import Coupon, Dish
from tenants.api_keys import issue_api_key
from tenants.models import ApiClient, Membership, Tenant

pytestmark = pytest.mark.django_db


def seed(*args: str) -> dict:
    out = StringIO()
    call_command("seed_demo", "--json", *args, stdout=out)
    return json.loads(out.getvalue())


@pytest.fixture
def key_file(settings, tmp_path):
    settings.DEBUG = True  # the demo: keys are kept in a local file
    settings.DEMO_KEYS_FILE = tmp_path / "demo_keys.json"
    return settings.DEMO_KEYS_FILE


def menu_status(key: str) -> int:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    return api.get("/api/v1/menu/").status_code


def test_seed_demo_json_and_rerun_creates_nothing_new_and_keeps_the_keys(client, key_file):
    first = seed()
    counts = (
        Tenant.objects.count(),
        Dish.all_tenants.count(),
        Coupon.all_tenants.count(),
        Membership.objects.count(),
    )
    second = seed()
    assert counts == (2, 6, 2, 2)
    assert (
        Tenant.objects.count(),
        Dish.all_tenants.count(),
        Coupon.all_tenants.count(),
        Membership.objects.count(),
    ) == counts
    assert [t["dish_ids"] for t in first["tenants"]] == [t["dish_ids"] for t in second["tenants"]]
    for old, new in zip(first["tenants"], second["tenants"], strict=True):
        assert set(new) >= {"slug", "publishable_key", "api_key", "merchant_api_key", "dish_ids"}
        assert new["api_key"] == new["publishable_key"]
        assert (new["publishable_key"], new["merchant_api_key"]) == (
            old["publishable_key"],
            old["merchant_api_key"],
        )
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Api-Key {new['publishable_key']}")
        assert {d["id"] for d in api.get("/api/v1/menu/").json()} == set(new["dish_ids"])
        assert api.get("/api/v1/orders/").status_code == 403  # publishable: menu and sessions
        merchant = APIClient()
        merchant.credentials(HTTP_AUTHORIZATION=f"Api-Key {new['merchant_api_key']}")
        assert merchant.get("/api/v1/orders/").status_code == 200
        login = {"username": new["owner_username"], "password": new["owner_password"]}
        assert client.post("/dashboard/login/", login).status_code == 302
        # the demo's printed password is set in code, not a temporary one: the board opens
        assert client.get("/dashboard/").status_code == 200
    assert ApiClient.objects.filter(revoked_at__isnull=True).count() == 4
    kinds = ApiClient.objects.filter(revoked_at__isnull=True).values_list("kind", flat=True)
    assert sorted(kinds) == ["merchant", "merchant", "publishable", "publishable"]
    assert key_file.stat().st_mode & 0o777 == 0o600


def test_rotate_keys_revokes_the_old_ones(key_file):
    first = seed()
    second = seed("--rotate-keys")
    for old, new in zip(first["tenants"], second["tenants"], strict=True):
        assert new["publishable_key"] != old["publishable_key"]
        assert (menu_status(old["publishable_key"]), menu_status(new["publishable_key"])) == (
            401,
            200,
        )
    assert ApiClient.objects.filter(revoked_at__isnull=True).count() == 4


def test_without_debug_it_refuses_and_creates_nothing(settings, tmp_path, django_user_model):
    """Run on a production site it made a superuser called ``staff`` (or gave one of that name
    a new password and printed it), two restaurants with live keys, and their owners."""
    settings.DEBUG = False
    settings.DEMO_KEYS_FILE = tmp_path / "demo_keys.json"

    with pytest.raises(CommandError, match="seed_demo loads the demo's data: only with DEBUG=1"):
        seed()

    assert (Tenant.objects.count(), django_user_model.objects.count()) == (0, 0)
    assert not settings.DEMO_KEYS_FILE.exists()


def test_a_key_file_that_no_longer_matches_is_replaced(key_file):
    first = seed()
    ApiClient.objects.update(revoked_at=timezone.now())  # e.g. revoked in the dashboard
    second = seed()
    assert menu_status(second["tenants"][0]["publishable_key"]) == 200
    assert second["tenants"][0]["publishable_key"] != first["tenants"][0]["publishable_key"]


@pytest.mark.parametrize(
    ("port", "address"), [(None, "127.0.0.1:8000"), ("8123", "127.0.0.1:8123")]
)
def test_the_printout_s_commands_name_the_port_make_run_serves_on(
    key_file, monkeypatch, port, address
):
    """``PORT`` moves the demo's server (scripts/run_demo.sh) and the commands printed for it."""
    if port is None:
        monkeypatch.delenv("PORT", raising=False)
    else:
        monkeypatch.setenv("PORT", port)
    out = StringIO()
    call_command("seed_demo", stdout=out)
    printed = out.getvalue()
    publishable = seed()["tenants"][0]["publishable_key"]
    assert f"  KEY={publishable}\n" in printed
    assert printed.count(f"http://{address}/api/v1/") == 2
    assert printed.count("http://127.0.0.1:") == 2


def test_a_demo_run_on_another_database_keeps_this_ones_keys(key_file, monkeypatch):
    """The key file was one per checkout, not per database: ``make run`` on SQLite, then with
    ``DATABASE_URL`` (whose run found the file's keys unknown and wrote its own), then on SQLite
    again found its keys replaced, revoked them and printed new ones, though README promises the
    keys later runs keep. Each database's run now keeps its own keys in the file."""
    from django.db import connection, transaction

    first = seed()
    # a run against another database: its own empty tables, its own name
    with monkeypatch.context() as other:
        other.setitem(connection.settings_dict, "NAME", "another_demo_database")
        with pytest.raises(RuntimeError), transaction.atomic():
            Tenant.objects.all().delete()
            elsewhere = seed()
            raise RuntimeError("the other database's rows go with it")
    assert elsewhere["tenants"][0]["publishable_key"] != first["tenants"][0]["publishable_key"]

    again = seed()

    for old, new in zip(first["tenants"], again["tenants"], strict=True):
        assert (new["publishable_key"], new["merchant_api_key"]) == (
            old["publishable_key"],
            old["merchant_api_key"],
        )
        assert menu_status(new["publishable_key"]) == 200


def test_a_demo_restaurant_being_offboarded_is_refused_clearly_seeding_nothing(key_file):
    # given the demo, one of whose restaurants' offboarding has suspended it (keys revoked)
    seed()
    roma = Tenant.objects.get(slug="trattoria-roma")
    ApiClient.objects.filter(tenant=roma).update(revoked_at=timezone.now())
    Tenant.objects.filter(pk=roma.pk).update(status=Tenant.Status.OFFBOARDING)
    keys = ApiClient.objects.count()
    # when the demo is seeded again (make run), then it says why, and writes nothing
    with pytest.raises(CommandError, match="trattoria-roma is being offboarded"):
        seed()
    assert ApiClient.objects.count() == keys


def test_the_keys_never_sit_in_a_file_others_may_read(key_file):
    """The file was written, then made 0600: a key file left readable by others (an older
    one, or the umask's mode) showed the new keys to whoever read it meanwhile, or had it
    open (red: the open handle reads them)."""
    key_file.write_text("{}")
    key_file.chmod(0o644)
    with key_file.open() as opened_before:
        merchant_key = seed()["tenants"][0]["merchant_api_key"]
        assert merchant_key not in opened_before.read()
    assert merchant_key in key_file.read_text()
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in key_file.parent.iterdir()] == [key_file.name]  # nothing left behind


def test_rotating_keys_again_and_again_never_meets_the_key_limit(key_file, monkeypatch):
    """Each ``--rotate-keys`` leaves the demo's old keys revoked; revoked keys do not count
    towards a restaurant's limit of live keys, so a demo rotated past it keeps working."""
    monkeypatch.setattr("tenants.api_keys.MAX_API_KEYS_PER_TENANT", 4)
    seed()
    for _ in range(3):
        kept = seed("--rotate-keys")

    for tenant in kept["tenants"]:
        assert menu_status(tenant["publishable_key"]) == 200
    assert ApiClient.objects.filter(revoked_at__isnull=False).count() == 12


def test_a_restaurant_whose_owners_hold_every_live_key_is_refused_clearly_changing_nothing(
    key_file, monkeypatch
):
    """Its owners issued the rest of the live keys a restaurant may hold: the run failed with a
    traceback of ``ApiKeyLimitReached``. It now says so and what to do, and the keys in use
    stay."""
    kept = seed()
    roma = Tenant.objects.get(slug="trattoria-roma")
    for n in range(2):
        issue_api_key(tenant=roma, name=f"till {n}")
    monkeypatch.setattr("tenants.api_keys.MAX_API_KEYS_PER_TENANT", 3)

    with pytest.raises(
        CommandError, match="nothing was seeded: trattoria-roma holds 3 live API keys"
    ):
        seed("--rotate-keys")

    for tenant in kept["tenants"]:
        assert menu_status(tenant["publishable_key"]) == 200
