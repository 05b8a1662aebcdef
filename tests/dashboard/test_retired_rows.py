"""The coupons and API keys pages list every live row and only the newest retired ones
(``ordering/dashboard/retired_rows.py``): retired rows are kept and no longer count toward a
restaurant's bound, so listed whole they grew the pages without end."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from ordering.dashboard import retired_rows
from ordering.models import Coupon
from ordering.services.menu import create_coupon, deactivate_coupon
from tenants.api_keys import issue_api_key, revoke_api_key
from tests.dashboard.conftest import World

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retired_rows, "RETIRED_SHOWN", 2)


def test_the_keys_page_lists_live_keys_and_the_newest_revoked(
    merchant: Client, mine: World, two_shown: None
) -> None:
    revoked = []
    for n in range(3):
        client, _ = issue_api_key(tenant=mine.tenant, name=f"old till {n}")
        revoke_api_key(client=client)
        revoked.append(client.name)

    page = merchant.get("/dashboard/api-keys/")

    listed = page.context["clients"]
    assert [c.name for c in listed.rows] == [mine.api_client.name, *reversed(revoked[1:])]
    assert listed.older_retired_left_out
    assert "Older revoked keys are not listed" in page.content.decode()


def test_the_coupons_page_lists_active_coupons_and_the_newest_inactive(
    merchant: Client, mine: World, two_shown: None
) -> None:
    for n in range(3):
        coupon = create_coupon(tenant=mine.tenant, code=f"OLD{n}", kind="amount", value=Decimal(1))
        deactivate_coupon(tenant=mine.tenant, coupon_id=coupon.pk)

    with CaptureQueriesContext(connection) as sent:
        page = merchant.get("/dashboard/coupons/")

    # the inactive ones are read up to one past those shown, never all of them
    [inactive_read] = [q["sql"] for q in sent if 'NOT "ordering_coupon"."active"' in q["sql"]]
    assert inactive_read.endswith("LIMIT 3")
    listed = page.context["coupons"]
    assert [c.code for c in listed.rows] == [mine.coupon.code, "OLD2", "OLD1"]
    assert listed.older_retired_left_out
    assert "Older inactive coupons are not listed" in page.content.decode()
    assert Coupon.objects.for_tenant(mine.tenant).count() == 4


def test_nothing_is_said_left_out_when_every_retired_row_is_listed(
    merchant: Client, mine: World, two_shown: None
) -> None:
    client, _ = issue_api_key(tenant=mine.tenant, name="old till")
    revoke_api_key(client=client)

    page = merchant.get("/dashboard/api-keys/")

    assert len(page.context["clients"].rows) == 2
    assert "not listed" not in page.content.decode()


def test_the_documented_number_shown_is_50() -> None:
    """README (Coupons, API keys) names it."""
    assert retired_rows.RETIRED_SHOWN == 50
