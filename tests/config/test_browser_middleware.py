"""API calls skip sessions, Django's user and flash messages; browser pages keep them."""

from __future__ import annotations

import pytest
from django.test import Client

from tenants.api_keys import issue_api_key
from tests.dashboard.conftest import build_world

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: object) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def test_an_api_call_builds_no_session_user_or_messages(tenant):
    # given a browser logged into the dashboard (it sends its session cookie everywhere)
    world = build_world(tenant, "alice")
    browser = Client()
    browser.force_login(world.user)
    _, key = issue_api_key(tenant=tenant, name="app")
    # when it calls the API with an API key
    response = browser.get("/api/v1/menu/", HTTP_AUTHORIZATION=f"Api-Key {key}")
    # then the answer comes without any session, Django user or message storage being built,
    # and sets no cookie
    assert response.status_code == 200
    request = response.wsgi_request
    assert not hasattr(request, "session")
    assert not hasattr(request, "_messages")
    assert request.user.kind == "publishable"  # DRF's principal, from the header only
    assert not response.cookies


def test_a_session_cookie_alone_opens_no_api_call(tenant):
    world = build_world(tenant, "alice")
    browser = Client()
    browser.force_login(world.user)
    response = browser.get("/api/v1/menu/")
    assert response.status_code == 401
    assert response.json()["code"] == "API_KEY_MISSING"


def test_the_dashboard_keeps_its_session_user_and_messages(tenant):
    world = build_world(tenant, "alice")
    browser = Client()
    browser.force_login(world.user)
    response = browser.get("/dashboard/")
    assert response.status_code == 200
    assert response.wsgi_request.user == world.user
    assert response.wsgi_request.session.session_key
    assert hasattr(response.wsgi_request, "_messages")
