"""Behind the site's proxies (TRUSTED_PROXIES) the client's address is read from
X-Forwarded-For, so per-address limits and the login lockout are the client's, not the proxy's;
from anyone else the header is ignored (config/client_address.py)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from rest_framework.test import APIClient

from config.client_address import client_address, limited_address, trusted_networks
from tenants.api_keys import issue_api_key
from tenants.models import ApiClient
from tests.dashboard.factories import PASSWORD

PROXY = "10.0.0.2"
NETS = trusted_networks([PROXY, "10.0.1.0/24", "fd00::/8"])


@pytest.mark.parametrize(
    ("remote", "forwarded", "client"),
    [
        (PROXY, "203.0.113.7", "203.0.113.7"),
        # what the client wrote (left) is not believed: the address our proxy saw is
        (PROXY, "6.6.6.6, 203.0.113.7", "203.0.113.7"),
        # two of our proxies in a row
        (PROXY, "203.0.113.7, 10.0.1.9", "203.0.113.7"),
        (PROXY, "6.6.6.6, 203.0.113.7, 10.0.1.9", "203.0.113.7"),
        (PROXY, "2001:db8::1, fd00::5", "2001:db8::1"),
        # not a proxy of ours: its header is whatever it says, and ignored
        ("198.51.100.4", "203.0.113.7", "198.51.100.4"),
        # our proxy without the header, or with rubbish where an address should be
        (PROXY, "", PROXY),
        (PROXY, "not-an-address", PROXY),
        (PROXY, "6.6.6.6, rubbish, 203.0.113.7", "203.0.113.7"),
        # every hop ours: the leftmost
        (PROXY, "10.0.1.3, 10.0.1.9", "10.0.1.3"),
        # an IPv6 address with a zone (a link of the sender's own host) is no client address:
        # its zone is any text, and the address is stored in audits (red: 5,000 characters)
        (PROXY, "fe80::1%" + "x" * 5000, PROXY),
        (PROXY, "6.6.6.6, 2001:db8::1%eth0", PROXY),
        # a dual-stack server sees our proxy as IPv4 mapped into IPv6 (red: the proxy's own)
        ("::ffff:10.0.0.2", "203.0.113.7", "203.0.113.7"),
        # one client, one spelling: one limit
        (PROXY, "::ffff:203.0.113.7", "203.0.113.7"),
        (PROXY, "2001:0DB8:0::1", "2001:db8::1"),
        # a proxy that writes the client's port, or brackets an IPv6 address (red: the proxy's
        # own address, one budget for every client behind it)
        (PROXY, "203.0.113.7:51234", "203.0.113.7"),
        (PROXY, "[2001:db8::1]:51234", "2001:db8::1"),
        (PROXY, "[2001:db8::1]", "2001:db8::1"),
        (PROXY, "6.6.6.6, 203.0.113.7:443, 10.0.1.9:80", "203.0.113.7"),
        # and still no address: a port that is no number, a bracket left open
        (PROXY, "203.0.113.7:http", PROXY),
        (PROXY, "[2001:db8::1:51234", PROXY),
        (PROXY, "[2001:db8::1]x", PROXY),
    ],
)
def test_the_client_is_the_rightmost_address_that_is_not_our_proxy(remote, forwarded, client):
    assert client_address(remote, forwarded, NETS) == client


def test_without_trusted_proxies_the_header_is_never_read():
    assert client_address(PROXY, "203.0.113.7", []) == PROXY


def test_a_malformed_entry_stops_the_server_from_starting():
    with pytest.raises(ImproperlyConfigured, match="TRUSTED_PROXIES"):
        trusted_networks(["10.0.0.300"])


@pytest.mark.parametrize("entry", ["0.0.0.0/0", "::/0", "::ffff:0.0.0.0/96"])
@pytest.mark.parametrize("setting", ["TRUSTED_PROXIES", "METRICS_ALLOWED_IPS"])
def test_a_network_of_every_address_stops_the_server_from_starting(entry, setting):
    """Trusted as a proxy, every client could write its own address into X-Forwarded-For: a
    fresh one per guess passed the login lockout and per guest session the address budget.
    Allowed to scrape, it showed /metrics to the whole internet. No network of proxies (or of
    Prometheus servers) holds every address."""
    with pytest.raises(ImproperlyConfigured, match=f"{setting}: .* holds every address"):
        trusted_networks(["10.0.0.2", entry], setting=setting)


@pytest.mark.django_db
def test_behind_the_proxy_each_diner_has_the_per_address_budget(tenant, settings):
    settings.TRUSTED_PROXIES = [PROXY]
    settings.DINER_SESSION_OPEN_RATE_PER_IP = 2
    _, key = issue_api_key(tenant=tenant, name="app", kind=ApiClient.Kind.PUBLISHABLE)
    app = APIClient()
    app.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")

    def opened(forwarded: str) -> int:
        return app.post(
            "/api/v1/diner-sessions/",
            format="json",
            REMOTE_ADDR=PROXY,
            HTTP_X_FORWARDED_FOR=forwarded,
        ).status_code

    # five diners through one proxy: each within its own budget (red: 201, 201, 429, ...)
    assert [opened(f"203.0.113.{i}") for i in range(5)] == [201] * 5
    # one diner's third open is over its budget, whatever it writes in front
    assert [opened(f"6.6.6.{i}, 203.0.113.0") for i in range(2)] == [201, 429]


@pytest.mark.django_db
def test_behind_a_proxy_on_a_unix_socket_each_diner_has_the_per_address_budget(tenant, settings):
    """nginx in front of gunicorn bound to a unix socket (GUNICORN_BIND=unix:/run/…) is a
    common setup: gunicorn gives such a request an empty REMOTE_ADDR, which no entry of
    TRUSTED_PROXIES could name, so every diner of the site shared one address's budget (20
    guest sessions a minute for the whole restaurant) and one login lockout per account. The
    entry "unix" trusts the socket: only processes of this host can connect to it."""
    settings.TRUSTED_PROXIES = ["unix"]
    settings.DINER_SESSION_OPEN_RATE_PER_IP = 2
    _, key = issue_api_key(tenant=tenant, name="app", kind=ApiClient.Kind.PUBLISHABLE)
    app = APIClient()
    app.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")

    def opened(forwarded: str, remote: str = "") -> int:
        return app.post(
            "/api/v1/diner-sessions/",
            format="json",
            REMOTE_ADDR=remote,
            HTTP_X_FORWARDED_FOR=forwarded,
        ).status_code

    assert [opened(f"203.0.113.{i}") for i in range(5)] == [201] * 5
    assert [opened(f"6.6.6.{i}, 203.0.113.0") for i in range(2)] == [201, 429]
    # a client reaching the server over TCP is not the socket: its header is ignored
    assert [opened(f"203.0.114.{i}", remote="198.51.100.4") for i in range(3)] == [201, 201, 429]


@pytest.mark.django_db
def test_without_trusted_proxies_a_forged_header_earns_no_budget(tenant, settings):
    settings.DINER_SESSION_OPEN_RATE_PER_IP = 2
    _, key = issue_api_key(tenant=tenant, name="app", kind=ApiClient.Kind.PUBLISHABLE)
    app = APIClient()
    app.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    statuses = [
        app.post(
            "/api/v1/diner-sessions/",
            format="json",
            REMOTE_ADDR="198.51.100.4",
            HTTP_X_FORWARDED_FOR=f"203.0.113.{i}",
        ).status_code
        for i in range(3)
    ]
    assert statuses == [201, 201, 429]


@pytest.mark.django_db
def test_behind_the_proxy_wrong_passwords_lock_out_only_their_own_address(settings):
    from django.contrib.auth.models import User

    settings.TRUSTED_PROXIES = [PROXY]
    User.objects.create_user("tina", password=PASSWORD)

    def login(password: str, forwarded: str) -> int:
        browser = Client(REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR=forwarded)
        answer = browser.post("/dashboard/login/", {"username": "tina", "password": password})
        return 302 if "_auth_user_id" in browser.session else answer.status_code

    attacker = [login("wrong", "203.0.113.66") for _ in range(5)]
    assert attacker == [200] * 4 + [429]
    assert login(PASSWORD, "203.0.113.66") == 429  # that address is locked out
    assert login(PASSWORD, "198.51.100.10") == 302  # tina, from her own, is not (red: 429)


@pytest.mark.django_db
def test_behind_the_proxy_a_spray_across_accounts_locks_out_only_its_own_address(settings):
    from django.contrib.auth.models import User

    settings.TRUSTED_PROXIES = [PROXY]
    User.objects.create_user("tina", password=PASSWORD)

    def login(username: str, password: str, forwarded: str) -> int:
        browser = Client(REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR=forwarded)
        answer = browser.post("/dashboard/login/", {"username": username, "password": password})
        return 302 if "_auth_user_id" in browser.session else answer.status_code

    spray = [login(f"guess-{n}", "wrong", "203.0.113.66") for n in range(20)]
    assert spray == [200] * 19 + [429]
    assert login("tina", PASSWORD, "203.0.113.66") == 429
    assert login("tina", PASSWORD, "198.51.100.10") == 302  # not the proxy's address


@pytest.mark.parametrize(
    ("address", "counted_as"),
    [
        ("203.0.113.7", "203.0.113.7"),
        # one IPv6 client is given a whole /64 and may pick any address in it
        ("2001:db8:1:2::1", "2001:db8:1:2::"),
        ("2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::"),
        ("2001:0DB8:1:2::5", "2001:db8:1:2::"),
        ("2001:db8:1:3::1", "2001:db8:1:3::"),
        ("::ffff:203.0.113.7", "203.0.113.7"),
        ("", ""),
    ],
)
def test_per_address_limits_count_an_ipv6_client_by_its_64(address, counted_as):
    assert limited_address(address) == counted_as


@pytest.mark.parametrize(
    ("address", "counted_as"),
    [
        ("64:ff9b::203.0.113.7", "203.0.113.7"),
        ("64:ff9b::cb00:7108", "203.0.113.8"),
    ],
)
def test_an_ipv4_client_behind_a_nat64_translator_is_counted_by_its_own_address(
    address, counted_as
):
    # given an IPv6-only site that IPv4 clients reach through a NAT64 translator, which writes
    # each one's address into the well-known prefix 64:ff9b::/96 (RFC 6052)
    # then each is counted as its IPv4 address (red: all as 64:ff9b::, one /64, so every IPv4
    # diner shared one budget of guest sessions, and five wrong passwords from anyone locked
    # an account out for all of them)
    assert limited_address(address) == counted_as


@pytest.mark.django_db
def test_one_ipv6_client_cannot_earn_budget_by_changing_address_in_its_64(tenant, settings):
    settings.DINER_SESSION_OPEN_RATE_PER_IP = 2
    _, key = issue_api_key(tenant=tenant, name="app", kind=ApiClient.Kind.PUBLISHABLE)
    app = APIClient()
    app.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")

    def opened(address: str) -> int:
        return app.post("/api/v1/diner-sessions/", format="json", REMOTE_ADDR=address).status_code

    # red: 201, 201, 201 (every address of the /64 had a budget of its own)
    assert [opened(f"2001:db8:1:2::{i}") for i in range(1, 4)] == [201, 201, 429]
    assert opened("2001:db8:1:3::1") == 201  # another /64: another client


@pytest.mark.django_db
def test_one_ipv6_client_cannot_guess_passwords_from_every_address_in_its_64(settings):
    from django.contrib.auth.models import User

    User.objects.create_user("tina", password=PASSWORD)

    def login(password: str, address: str) -> int:
        browser = Client(REMOTE_ADDR=address)
        answer = browser.post("/dashboard/login/", {"username": "tina", "password": password})
        return 302 if "_auth_user_id" in browser.session else answer.status_code

    # red: [200] * 6 (a fresh address of the /64 for each guess is never locked out)
    assert [login("wrong", f"2001:db8:1:2::{i}") for i in range(1, 7)] == [200] * 4 + [429] * 2
    assert login(PASSWORD, "2001:db8:1:2::99") == 429
    assert login(PASSWORD, "2001:db8:7:7::1") == 302  # tina, from her own network, is not
