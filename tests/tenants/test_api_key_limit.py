"""A restaurant holds at most ``MAX_API_KEYS_PER_TENANT`` live API keys; revoked ones do not
count, so a leaked key can always be revoked and replaced."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django.test import Client

from tenants import api_keys
from tenants.api_keys import ApiKeyLimitReached, issue_api_key, revoke_api_key
from tenants.models import ApiClient
from tests.dashboard.conftest import form_token
from tests.dashboard.factories import make_merchant


@pytest.mark.django_db
def test_a_tenant_holds_at_most_the_limit_of_keys(tenant, other_tenant, monkeypatch):
    """Red before: a fourth key was issued (an owner could issue keys without end)."""
    # given a tenant holding the most live keys, and another tenant as full
    monkeypatch.setattr(api_keys, "MAX_API_KEYS_PER_TENANT", 3)
    for n in range(3):
        issue_api_key(tenant=tenant, name=f"app {n}")
        issue_api_key(tenant=other_tenant, name=f"app {n}")
    # when one more is issued, then it is refused, saying the bound, and nothing is written
    with pytest.raises(ApiKeyLimitReached, match="at most 3 live API keys"):
        issue_api_key(tenant=tenant, name="one more")
    assert ApiClient.objects.filter(tenant=tenant).count() == 3


@pytest.mark.django_db
def test_a_revoked_key_makes_room_for_its_replacement(tenant, monkeypatch):
    """Revoked keys counted: a restaurant at the bound could not replace a leaked key, and one
    that had rotated its keys fifty times could never issue one again."""
    monkeypatch.setattr(api_keys, "MAX_API_KEYS_PER_TENANT", 3)
    clients = [issue_api_key(tenant=tenant, name=f"app {n}")[0] for n in range(3)]
    for leaked in clients:
        revoke_api_key(client=leaked)
        issue_api_key(tenant=tenant, name=f"{leaked.name} replaced")
    assert ApiClient.objects.filter(tenant=tenant, revoked_at__isnull=True).count() == 3
    assert ApiClient.objects.filter(tenant=tenant).count() == 6


def test_the_documented_bound_of_keys_is_100():
    """README (API keys) names this bound."""
    assert api_keys.MAX_API_KEYS_PER_TENANT == 100


@pytest.mark.django_db
def test_the_api_keys_page_says_the_restaurant_holds_every_key_it_may(tenant, monkeypatch):
    """The owner's form answers 400 with the bound on the name field, and no key is issued."""
    issue_api_key(tenant=tenant, name="app")
    monkeypatch.setattr(api_keys, "MAX_API_KEYS_PER_TENANT", 1)
    owner = Client()
    owner.force_login(make_merchant(tenant, "anna"))
    token = form_token(owner.get("/dashboard/api-keys/").content.decode())
    posted = {"name": "One more", "kind": "publishable", "idempotency_key": token}
    answer = owner.post("/dashboard/api-keys/", posted)
    assert answer.status_code == 400
    [message] = answer.context["form"].errors["name"]
    assert "at most 1 live API keys" in message
    assert ApiClient.objects.filter(tenant=tenant).count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_issues_stop_at_the_limit(tenant, monkeypatch):
    """Eight threads, eight connections, room for three."""
    monkeypatch.setattr(api_keys, "MAX_API_KEYS_PER_TENANT", 3)
    barrier = threading.Barrier(8)
    outcomes: list[str] = []

    def issue(n: int) -> None:
        try:
            barrier.wait()
            issue_api_key(tenant=tenant, name=f"app {n}")
            outcomes.append("issued")
        except ApiKeyLimitReached:
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=issue, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(outcomes) == ["issued"] * 3 + ["refused"] * 5
    assert ApiClient.objects.filter(tenant=tenant).count() == 3
