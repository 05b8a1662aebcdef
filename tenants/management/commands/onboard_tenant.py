"""``manage.py onboard_tenant SLUG --name NAME --owner USERNAME [--email E] [--time-zone TZ]
[--region R] [--issue-keys] [--json]``

Open a restaurant in production: the tenant and its first owner, in one transaction, so a
tenant never exists without someone who can sign in to run it. An owner that does not exist yet
is created without a usable password (nothing secret is printed or typed on the command line);
the command then names ``manage.py changepassword`` to set one, which is temporary: the owner
chooses their own when they first sign in (``tenants/temporary_passwords.py``).
``--issue-keys`` issues the restaurant's first publishable and secret API keys and prints them;
they are shown this once (the database keeps only their hashes), as on the dashboard's API keys
page.

Running it again for a slug that exists changes nothing and says so (exit status 1).
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import IntegrityError, transaction

from tenants.api_keys import issue_api_key
from tenants.models import ApiClient, Membership, Tenant, platform_time_zone
from tenants.temporary_passwords import set_by_another

KEY_LABELS = {ApiClient.Kind.PUBLISHABLE: "Publishable key", ApiClient.Kind.MERCHANT: "Secret key"}


class Command(BaseCommand):
    help = "Open a restaurant: the tenant and its first owner (and, asked, its first API keys)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("slug", help="The tenant's slug (letters, digits, - and _; 64 at most)")
        parser.add_argument("--name", required=True, help="The restaurant's name")
        parser.add_argument("--owner", required=True, help="Username of its first owner")
        parser.add_argument("--email", default="", help="The owner's e-mail, for a new user")
        parser.add_argument("--time-zone", help="IANA name, e.g. Europe/Rome (default: platform's)")
        parser.add_argument("--region", default="default", help="The tenant's region")
        parser.add_argument(
            "--issue-keys", action="store_true", help="Issue a publishable and a secret API key"
        )
        parser.add_argument("--json", action="store_true", help="Print the result as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant(
            slug=options["slug"],
            name=options["name"],
            region=options["region"],
            time_zone=options["time_zone"] or platform_time_zone(),
        )
        user_model = get_user_model()
        owner = user_model.objects.filter(username=options["owner"]).first()
        twin = user_model.objects.filter(username__iexact=options["owner"]).first()
        if owner is None and twin is not None:  # as Django's own user forms refuse
            raise CommandError(
                f"nothing was created; owner username: {twin.get_username()!r} exists "
                "(usernames differ only in case)"
            )
        new_owner = owner is None
        if owner is None:
            owner = user_model(username=options["owner"], email=options["email"])
            owner.set_unusable_password()
        _validate(tenant, owner, new_owner=new_owner)
        keys: dict[str, str] = {}
        try:
            with transaction.atomic():
                tenant.save()
                if new_owner:
                    owner.save()
                    set_by_another(owner)  # the operator's ``changepassword`` sets it
                Membership.objects.create(tenant=tenant, user=owner, role=Membership.Role.OWNER)
                if options["issue_keys"]:
                    for kind in (ApiClient.Kind.PUBLISHABLE, ApiClient.Kind.MERCHANT):
                        keys[kind] = issue_api_key(tenant=tenant, name=f"first {kind}", kind=kind)[
                            1
                        ]
        except IntegrityError as exc:  # a run for the same slug or username at the same time
            raise CommandError(f"nothing was created: {exc}") from exc
        self._report(tenant, owner, new_owner=new_owner, keys=keys, as_json=options["json"])

    def _report(
        self, tenant: Tenant, owner: Any, *, new_owner: bool, keys: dict[str, str], as_json: bool
    ) -> None:
        if as_json:
            self.stdout.write(
                json.dumps(
                    {
                        "tenant": tenant.slug,
                        "tenant_id": tenant.pk,
                        "owner": owner.get_username(),
                        "owner_created": new_owner,
                        "publishable_key": keys.get(ApiClient.Kind.PUBLISHABLE),
                        "merchant_api_key": keys.get(ApiClient.Kind.MERCHANT),
                    }
                )
            )
            return
        self.stdout.write(f"Tenant {tenant.slug} ({tenant.name}) opened, id {tenant.pk}.")
        who = "a new user" if new_owner else "an existing user"
        self.stdout.write(f"Owner: {owner.get_username()} ({who}).")
        if new_owner:
            self.stdout.write(
                f"Set their password: manage.py changepassword {owner.get_username()} "
                "(a temporary one: they choose their own when they first sign in)"
            )
        for kind, key in keys.items():
            self.stdout.write(f"{KEY_LABELS[kind]} (shown this once): {key}")


def _validate(tenant: Tenant, owner: Any, *, new_owner: bool) -> None:
    """Every field as the admin would check it; nothing is written unless all pass."""
    problems: list[str] = []
    for label, instance in [("tenant", tenant), *([("owner", owner)] if new_owner else [])]:
        try:
            instance.full_clean()
        except ValidationError as exc:
            problems += [
                f"{label}{'' if field == NON_FIELD_ERRORS else ' ' + field}: {' '.join(messages)}"
                for field, messages in exc.message_dict.items()
            ]
    if problems:
        raise CommandError("nothing was created; " + "; ".join(problems))
