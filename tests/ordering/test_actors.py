"""Status-log actors read as words: key names, diners, dashboard users, the provider, the saga;
strings of an unknown shape still read as something, and other tenants' key names never show."""

from __future__ import annotations

import pytest

from ordering.actors import describe_actors
from ordering.services.lifecycle import transition_order
from tenants.api_keys import issue_api_key
from tenants.models import ApiClient
from tests.conftest import api_for, menu_for
from tests.privacy.test_erase_diner import place

pytestmark = pytest.mark.django_db


def test_each_known_actor_reads_as_words(tenant):
    app, _ = issue_api_key(tenant=tenant, name="Demo diner app")
    actors = {
        f"api:{app.prefix}/diner:d-4": "Diner d-4 (via Demo diner app)",
        f"api:{app.prefix}": "Demo diner app",
        "merchant:alice": "alice (dashboard)",
        "staff:bob": "Platform staff",  # the restaurant is never told staff's names
        "provider:simulated": "Payment provider (simulated)",
        "saga:cancel": "Automatic refund",
    }
    assert describe_actors(tenant, actors) == actors


def test_staff_read_each_other_by_name(tenant):
    actor = "staff:bob"
    assert describe_actors(tenant, [actor], staff_names=True) == {actor: "bob (platform staff)"}


def test_another_tenants_key_name_is_never_shown(tenant, other_tenant):
    theirs, _ = issue_api_key(tenant=other_tenant, name="Their secret integration")
    actor = f"api:{theirs.prefix}/diner:d-1"
    assert describe_actors(tenant, [actor]) == {actor: f"Diner d-1 (via API key {theirs.prefix})"}


@pytest.mark.parametrize(
    ("actor", "reads"),
    [
        pytest.param("session:s-9/diner:d-1", "Diner d-1 (via session s-9)", id="unknown-part"),
        pytest.param("test", "test", id="bare-word"),
        pytest.param("diner:d-2", "Diner d-2", id="diner-alone"),
    ],
)
def test_an_actor_of_an_unknown_shape_still_reads(tenant, actor, reads):
    assert describe_actors(tenant, [actor]) == {actor: reads}


def test_a_whole_log_costs_one_query(tenant, django_assert_num_queries):
    keys = [issue_api_key(tenant=tenant, name=f"app {i}")[0] for i in range(5)]
    actors = [f"api:{k.prefix}/diner:d-{i}" for i, k in enumerate(keys)] + ["merchant:alice"]
    with django_assert_num_queries(1):
        described = describe_actors(tenant, actors)
    assert described[actors[3]] == "Diner d-3 (via app 3)"


def test_an_offboarding_s_cancel_names_no_staff_member_to_the_merchant_key(tenant):
    """An offboarding cancels paid orders as ``offboarding:staff:<username>``; a restaurant
    reactivated after it read that actor whole through its merchant key, the staff member's
    sign-in name with it. It reads ``offboarding``, as a staff move reads ``staff``."""
    order_id = int(place(api_for(tenant, diner="zoe"), menu_for(tenant), "k1").json()["id"])
    transition_order(
        tenant=tenant, order_id=order_id, target="CANCELLED", actor="offboarding:staff:bob"
    )

    api_order = api_for(tenant, kind=ApiClient.Kind.MERCHANT).get(f"/api/v1/orders/{order_id}/")

    actors = [step["actor"] for step in api_order.json()["transitions"]]
    assert actors[-1] == "offboarding" and not any("bob" in actor for actor in actors)
