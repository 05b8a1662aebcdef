"""``manage.py seed_demo [--json] [--rotate-keys]``: two demo restaurants with owners, API keys
(a publishable key for the diner app, a secret merchant key), menu and coupon.

Safe to run again: tenants, users, dishes and coupons are found by their natural keys and not
duplicated, and the demo API keys are kept. The database holds only hashes of keys, so to print
them again a run in DEBUG keeps the demo's full keys in a local, git-ignored file
(``DEMO_KEYS_FILE``, default ``var/demo_keys.json``), one set per database (the demo on SQLite
and on PostgreSQL keep theirs side by side). When that file is missing, does not match
the active keys, or with ``--rotate-keys``, the demo keys are revoked and fresh ones issued.
Owner passwords are new on every run. A demo restaurant being offboarded is refused (nothing is
seeded) until its offboarding has erased it; the next run makes it anew.

Only with DEBUG (``make run`` sets it): on a production site it would make a superuser called
``staff`` (or give the one of that name a new password, printed) and open two restaurants with
live keys.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from ordering.models import Coupon, Dish
from tenants import api_keys
from tenants.api_keys import ApiKeyLimitReached, authenticate_api_key, issue_api_key
from tenants.models import ApiClient, Membership, Tenant
from tenants.write_fence import refused_by_fence

DEMO_TENANTS = [
    {
        "slug": "trattoria-roma",
        "name": "Trattoria Roma",
        "region": "eu-south",
        "menu": [("Margherita", "8.50", 40), ("Carbonara", "11.00", 25), ("Tiramisu", "5.50", 5)],
        "coupon": ("WELCOME10", Coupon.Kind.PERCENT, "10", 100),
    },
    {
        "slug": "sushi-kyoto",
        "name": "Sushi Kyoto",
        "region": "eu-north",
        "menu": [("Salmon nigiri", "4.20", 60), ("Ramen", "12.90", 30), ("Mochi", "3.80", 5)],
        "coupon": ("FIVEOFF", Coupon.Kind.AMOUNT, "5.00", 50),
    },
]
DEMO_KEY_NAMES = {ApiClient.Kind.PUBLISHABLE: "Demo diner app", ApiClient.Kind.MERCHANT: "Demo POS"}


class Command(BaseCommand):
    help = "Create (or refresh) the demo tenants, owners, API keys, menus and coupons."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--json", action="store_true", help="Print only machine-readable JSON")
        parser.add_argument(
            "--rotate-keys", action="store_true", help="Revoke the demo API keys and issue new ones"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.DEBUG:
            raise CommandError(
                "seed_demo loads the demo's data: only with DEBUG=1 (as `make run` sets it), "
                "never on a production site (it makes a superuser 'staff')"
            )
        stored = {} if options["rotate_keys"] else _read_key_file()
        try:
            with transaction.atomic():
                result = {"tenants": [seed_tenant(spec, stored) for spec in DEMO_TENANTS]}
                staff_password = _ensure_user("staff", is_staff=True)
        except DatabaseError as exc:
            if not refused_by_fence(exc):
                raise
            # its rows are fenced (tenants/write_fence.py): the run failed with a traceback
            leaving = Tenant.objects.filter(
                slug__in=[spec["slug"] for spec in DEMO_TENANTS],
                status=Tenant.Status.OFFBOARDING,
            ).values_list("slug", flat=True)
            raise CommandError(
                f"nothing was seeded: {', '.join(leaving) or 'a demo restaurant'} is being "
                "offboarded; let its offboarding finish (the admin's offboarding jobs), then "
                "run seed_demo again to make it anew"
            ) from None
        _write_key_file(result["tenants"])
        if options["json"]:
            self.stdout.write(json.dumps(result))
            return
        for t in result["tenants"]:
            self.stdout.write(
                f"{t['slug']}: owner {t['owner_username']} / {t['owner_password']}\n"
                f"  publishable key (ships in the diner app): {t['publishable_key']}\n"
                f"  merchant secret key (server only):        {t['merchant_api_key']}\n"
                f"  dishes: {t['dish_ids']}"
            )
        self.stdout.write(f"staff (Django admin): staff / {staff_password}")
        first = result["tenants"][0]
        # the address `make run` serves on (scripts/run_demo.sh reads the same PORT)
        base = f"http://127.0.0.1:{os.environ.get('PORT') or 8000}"
        self.stdout.write(
            f"\nTry the API as a diner of {first['slug']} (README, 'Try the API'):\n"
            f"  KEY={first['publishable_key']}\n"
            f"  TOKEN=$(curl -s -X POST {base}/api/v1/diner-sessions/ "
            '-H "Authorization: Api-Key $KEY" | sed -E \'s/.*"token":"([^"]+)".*/\\1/\')\n'
            f'  curl -s {base}/api/v1/orders/ -H "Authorization: Bearer $TOKEN" '
            "-H 'Idempotency-Key: first-order' -H 'Content-Type: application/json' "
            f'-d \'{{"items":[{{"dish_id":{first["dish_ids"][0]},"quantity":2}}],'
            '"payment_method":"card"}\'\n'
            "Owner passwords are new on every run; API keys are kept (--rotate-keys for new ones)."
        )


def seed_tenant(spec: dict[str, Any], stored: dict[str, dict[str, str]]) -> dict[str, Any]:
    tenant, _ = Tenant.objects.get_or_create(
        slug=spec["slug"], defaults={"name": spec["name"], "region": spec["region"]}
    )
    owner_username = f"{spec['slug'].split('-')[0]}-owner"
    password = _ensure_user(owner_username)
    owner = get_user_model().objects.get(username=owner_username)
    Membership.objects.get_or_create(user=owner, tenant=tenant, defaults={"role": "owner"})
    dish_ids = []
    for name, price, stock in spec["menu"]:
        dish, _ = Dish.objects.for_tenant(tenant).get_or_create(
            tenant=tenant, name=name, defaults={"price": Decimal(price), "stock": stock}
        )
        dish_ids.append(dish.pk)
    code, kind, value, max_uses = spec["coupon"]
    Coupon.objects.for_tenant(tenant).get_or_create(
        tenant=tenant,
        code=code,
        defaults={"kind": kind, "value": Decimal(value), "max_uses": max_uses},
    )
    keys = {
        kind: _demo_key(tenant, kind, name, stored.get(tenant.slug, {}).get(kind))
        for kind, name in DEMO_KEY_NAMES.items()
    }
    return {
        "slug": tenant.slug,
        "publishable_key": keys[ApiClient.Kind.PUBLISHABLE],
        "api_key": keys[ApiClient.Kind.PUBLISHABLE],
        "merchant_api_key": keys[ApiClient.Kind.MERCHANT],
        "dish_ids": dish_ids,
        "owner_username": owner_username,
        "owner_password": password,
    }


def _ensure_user(username: str, *, is_staff: bool = False) -> str:
    """Create the user if missing; (re)set a fresh random password and return it."""
    user, _ = get_user_model().objects.get_or_create(
        username=username, defaults={"is_staff": is_staff, "is_superuser": is_staff}
    )
    password = secrets.token_urlsafe(9)
    user.set_password(password)
    user.save(update_fields=["password"])
    return password


def _demo_key(tenant: Tenant, kind: str, name: str, known: str | None) -> str:
    """The stored demo key if it still opens this tenant's active demo client of ``kind``;
    else a fresh one (revoking any other active demo key of that name)."""
    client = authenticate_api_key(known) if known else None
    if client is not None and client.tenant_id == tenant.pk and client.kind == kind:
        return known
    ApiClient.objects.filter(tenant=tenant, name=name, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    try:
        return issue_api_key(tenant=tenant, name=name, kind=kind)[1]
    except ApiKeyLimitReached:
        # its owners issued the rest of the live keys a restaurant may hold: the run failed
        # with the exception's traceback
        raise CommandError(
            f"nothing was seeded: {tenant.slug} holds {api_keys.MAX_API_KEYS_PER_TENANT:,} live "
            "API keys, the most a restaurant may; revoke keys it no longer uses on its API keys "
            "page, then seed again"
        ) from None


def _key_file() -> Path:
    return Path(settings.DEMO_KEYS_FILE)


def _database_label() -> str:
    """The database this run seeds: one checkout's demo may run on SQLite and on PostgreSQL
    (``DATABASE_URL``), each with its own keys, and neither run may take the other's keys for
    stale (it would revoke its own and print new ones)."""
    db = connection.settings_dict
    return f"{connection.vendor}:{db.get('HOST') or ''}:{db.get('PORT') or ''}:{db.get('NAME')}"


def _read_file() -> dict[str, Any]:
    path = _key_file()
    if not settings.DEBUG or not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _read_key_file() -> dict[str, dict[str, str]]:
    """This database's demo keys (a file written before keys were kept per database holds one
    set at its top level: tried too, as ``_demo_key`` keeps only keys that still open it)."""
    data = _read_file()
    databases = data.get("databases")
    if not isinstance(databases, dict):
        return data
    keys = databases.get(_database_label())
    return keys if isinstance(keys, dict) else {}


def _write_key_file(tenants: list[dict[str, Any]]) -> None:
    """Only in DEBUG (the demo): production keys are shown once and kept nowhere in clear."""
    if not settings.DEBUG:
        return
    path = _key_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    keys = {
        t["slug"]: {
            ApiClient.Kind.PUBLISHABLE: t["publishable_key"],
            ApiClient.Kind.MERCHANT: t["merchant_api_key"],
        }
        for t in tenants
    }
    databases = _read_file().get("databases")
    databases = dict(databases) if isinstance(databases, dict) else {}
    databases[_database_label()] = keys
    # Written to a new file that only its owner may read from the start, which then takes the
    # name: an older file's readers (or those of one the umask left readable) never see a key.
    descriptor, written = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(descriptor, "w") as out:
        out.write(json.dumps({"databases": databases}))
    os.replace(written, path)
