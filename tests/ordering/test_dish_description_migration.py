"""Migration 0014: a dish description stored before the bound, longer than 2,000 characters,
keeps its first 2,000 (the column's new type refuses a longer one); shorter ones are kept."""

from __future__ import annotations

import pytest

from tests.support.migrations import migrate_to

BEFORE = [("ordering", "0013_outbox_resend_at")]
AFTER = [("ordering", "0014_dish_description_bound")]


@pytest.mark.django_db(transaction=True)
def test_long_descriptions_are_cut_to_the_bound_and_others_kept(back_to_latest: None) -> None:
    old = migrate_to(BEFORE)
    tenant = old.get_model("tenants", "Tenant").objects.create(slug="mig", name="Mig")
    dishes = old.get_model("ordering", "Dish")._base_manager
    long = dishes.create(tenant=tenant, name="Long", price=1, description="é" * 2500 + "tail")
    short = dishes.create(tenant=tenant, name="Short", price=1, description="as it was")

    new = migrate_to(AFTER).get_model("ordering", "Dish")._base_manager

    assert new.get(pk=long.pk).description == "é" * 2000
    assert new.get(pk=short.pk).description == "as it was"
