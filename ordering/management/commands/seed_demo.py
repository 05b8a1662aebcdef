"""``manage.py seed_demo [--json]``: two demo restaurants with owners, API keys, menu and coupon.

Safe to run again: tenants, users, dishes and coupons are found by their natural keys and not
duplicated. Each run issues fresh demo API keys (revoking the previous demo keys, since secrets are
only stored hashed and cannot be shown again) and sets fresh owner passwords, all printed.
"""

from __future__ import annotations

import json
import secrets
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from ordering.models import Coupon, Dish
from tenants.api_keys import issue_api_key
from tenants.models import ApiClient, Membership, Tenant

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
DEMO_KEY_NAMES = {ApiClient.Kind.DINER_APP: "Demo diner app", ApiClient.Kind.MERCHANT: "Demo POS"}


class Command(BaseCommand):
    help = "Create (or refresh) the demo tenants, owners, API keys, menus and coupons."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--json", action="store_true", help="Print only machine-readable JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        with transaction.atomic():
            result = {"tenants": [seed_tenant(spec) for spec in DEMO_TENANTS]}
            staff_password = _ensure_user("staff", is_staff=True)
        if options["json"]:
            self.stdout.write(json.dumps(result))
            return
        for t in result["tenants"]:
            self.stdout.write(
                f"{t['slug']}: owner {t['owner_username']} / {t['owner_password']}\n"
                f"  diner-app API key: {t['api_key']}\n"
                f"  merchant API key:  {t['merchant_api_key']}\n"
                f"  dishes: {t['dish_ids']}"
            )
        self.stdout.write(f"staff (Django admin): staff / {staff_password}")
        self.stdout.write(
            "API keys and passwords are new on every run; earlier demo keys are revoked."
        )


def seed_tenant(spec: dict[str, Any]) -> dict[str, Any]:
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
    keys = {}
    for kind, name in DEMO_KEY_NAMES.items():
        ApiClient.objects.filter(tenant=tenant, name=name, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        keys[kind] = issue_api_key(tenant=tenant, name=name, kind=kind)[1]
    return {
        "slug": tenant.slug,
        "api_key": keys[ApiClient.Kind.DINER_APP],
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
