"""Production is the default (``config/settings.py``): what the app refuses to start with, what
it turns on, and a server started exactly as the README's production instructions say.

The attack these guard against: a server started with no ``DEBUG`` in its environment ran in
debug mode, with the repository's own ``SECRET_KEY`` and simulated-provider secret; a diner
signed a payment callback with that public secret and turned an unpaid order PAID, and
Django's technical 404 page listed the URL map.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.conf import settings

from ordering.models import Order, OrderStatus, Payment
from ordering.payments.signatures import PROVIDER_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, sign
from tests.hardening.conftest import World, build_world
from tests.support.live_server import GunicornFailed, LiveServer, live_gunicorn
from tests.support.production import (
    HTTPS_HEADERS,
    PROJECT_ROOT,
    documented_environment,
    guest_session_headers,
    live_server_environment,
    production_environment,
    run_manage,
    served_host,
    system_environment,
)

# Secrets that ship in the repository (config/settings.py): public, hence never valid in
# production.
DEV_SECRET_KEY = "dev-only-insecure-secret-key-change-me"
DEV_PROVIDER_SECRET = "dev-only-simulated-provider-secret"
DEV_HASH_KEY = "dev-only-idempotency-hash-key-change-me"
STRONG = secrets.token_urlsafe(50)

SHOW_SETTINGS = (
    "import json, django; django.setup(); from django.conf import settings as s; "
    "print(json.dumps({'debug': s.DEBUG, 'secret': s.SECRET_KEY, "
    "'fallbacks': s.SECRET_KEY_FALLBACKS, "
    "'session': s.SESSION_COOKIE_SECURE, 'csrf': s.CSRF_COOKIE_SECURE, "
    "'httponly': s.SESSION_COOKIE_HTTPONLY, 'hsts': s.SECURE_HSTS_SECONDS, "
    "'redirect': s.SECURE_SSL_REDIRECT, 'proxy': s.SECURE_PROXY_SSL_HEADER, "
    "'providers': {n: p['SECRETS'] for n, p in s.PAYMENT_PROVIDERS.items()}, "
    "'engine_on': s.IDEMPOTENCY['ENABLED'], 'database': s.DATABASES['default']['ENGINE'], "
    "'bench': s.BENCH_ENDPOINTS, 'queue': s.CELERY_TASK_DEFAULT_QUEUE, "
    "'export_dir': str(s.OFFBOARDING_EXPORT_DIR), 'demo_keys': str(s.DEMO_KEYS_FILE), "
    "'broker': s.CELERY_BROKER_URL}))"
)


def settings_with(env: dict[str, str]) -> tuple[int, dict[str, Any] | None, str]:
    """Load the settings in a child with exactly ``env``: exit code, values, stderr."""
    done = subprocess.run(
        [sys.executable, "-c", SHOW_SETTINGS],
        cwd=PROJECT_ROOT,
        env={**system_environment(), "DJANGO_SETTINGS_MODULE": "config.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    values = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
    return done.returncode, values, done.stderr


def without(env: dict[str, str], *names: str) -> dict[str, str]:
    return {name: value for name, value in env.items() if name not in names}


# --- settings -------------------------------------------------------------------------------


def test_the_documented_environment_never_mentions_debug() -> None:
    assert "DEBUG" not in documented_environment()


def test_without_debug_in_the_environment_the_app_runs_as_production() -> None:
    code, values, stderr = settings_with(production_environment())

    assert code == 0, stderr
    assert values is not None
    assert values["debug"] is False
    assert values["session"] is True and values["csrf"] is True and values["httponly"] is True
    assert values["hsts"] == 365 * 24 * 3600
    assert values["redirect"] is True
    assert values["proxy"] == ["HTTP_X_FORWARDED_PROTO", "https"]


@pytest.mark.parametrize(
    "change, message",
    [
        pytest.param({"SECRET_KEY": None}, "SECRET_KEY must be set", id="no-secret-key"),
        pytest.param({"SECRET_KEY": ""}, "SECRET_KEY must be set", id="empty-secret-key"),
        pytest.param(
            {"SECRET_KEY": DEV_SECRET_KEY}, "SECRET_KEY must be set", id="the-repository-key"
        ),
        pytest.param(
            {"SECRET_KEY": "django-insecure-" + "k" * 50},
            "SECRET_KEY must be set",
            id="a-startproject-key",
        ),
        pytest.param(
            {"IDEMPOTENCY_HASH_KEY": None}, "IDEMPOTENCY_HASH_KEY must be set", id="no-hash-key"
        ),
        pytest.param(
            {"IDEMPOTENCY_HASH_KEY": "dev-only-idempotency-hash-key-change-me"},
            "IDEMPOTENCY_HASH_KEY must be set",
            id="the-repository-hash-key",
        ),
        pytest.param({"SECRET_KEY": " "}, "SECRET_KEY must be set", id="a-blank-secret-key"),
        pytest.param({"SECRET_KEY": "changeme"}, "SECRET_KEY must be set", id="a-short-key"),
        pytest.param({"SECRET_KEY": "ab" * 40}, "SECRET_KEY must be set", id="two-characters"),
        pytest.param(
            {"SECRET_KEY": STRONG + " "}, "SECRET_KEY must be set", id="a-key-with-a-space"
        ),
        pytest.param(
            {"IDEMPOTENCY_HASH_KEY": "x"}, "IDEMPOTENCY_HASH_KEY must be set", id="a-short-hash-key"
        ),
        pytest.param(
            {"IDEMPOTENCY_HASH_KEY": STRONG[:31]},
            "IDEMPOTENCY_HASH_KEY must be set",
            id="a-hash-key-of-31-characters",
        ),
        pytest.param(
            {"SECRET_KEY": STRONG, "IDEMPOTENCY_HASH_KEY": STRONG},
            "IDEMPOTENCY_HASH_KEY must be a secret other than SECRET_KEY",
            id="the-hash-key-is-the-secret-key",
        ),
        pytest.param(
            {"SECRET_KEY": STRONG, "SIMULATED_PROVIDER_SECRET": STRONG},
            "SIMULATED_PROVIDER_SECRET must be a secret other than SECRET_KEY",
            id="the-provider-secret-is-the-secret-key",
        ),
        pytest.param(
            {"IDEMPOTENCY_HASH_KEY": STRONG, "SIMULATED_PROVIDER_SECRET": STRONG},
            "SIMULATED_PROVIDER_SECRET must be a secret other than IDEMPOTENCY_HASH_KEY",
            id="the-provider-secret-is-the-hash-key",
        ),
        pytest.param(
            {"SECRET_KEY": STRONG, "METRICS_TOKEN": STRONG},
            "METRICS_TOKEN must be a secret other than SECRET_KEY",
            id="the-metrics-token-is-the-secret-key",
        ),
        pytest.param(
            {"METRICS_TOKEN": STRONG, "IDEMPOTENCY_HASH_KEY": STRONG},
            "IDEMPOTENCY_HASH_KEY must be a secret other than METRICS_TOKEN",
            id="the-hash-key-is-the-metrics-token",
        ),
        pytest.param(
            {"SIMULATED_PROVIDER_SECRET": "x"},
            "SIMULATED_PROVIDER_SECRET must be set",
            id="a-short-provider-secret",
        ),
        pytest.param(
            {"METRICS_TOKEN": "metrics"}, "METRICS_TOKEN must be set", id="a-short-metrics-token"
        ),
        pytest.param({"ALLOWED_HOSTS": None}, "ALLOWED_HOSTS must name", id="no-allowed-hosts"),
        pytest.param({"ALLOWED_HOSTS": " , "}, "ALLOWED_HOSTS must name", id="blank-hosts"),
        pytest.param(
            {"SIMULATED_PROVIDER_SECRET": None},
            "SIMULATED_PROVIDER_SECRET must be set",
            id="simulated-provider-without-secret",
        ),
        pytest.param(
            {"SIMULATED_PROVIDER_SECRET": DEV_PROVIDER_SECRET},
            "SIMULATED_PROVIDER_SECRET must be set",
            id="simulated-provider-with-the-repository-secret",
        ),
        pytest.param(
            {"SIMULATED_PROVIDER": "0"},
            "PAYMENT_DEFAULT_PROVIDER='simulated' is not configured",
            id="no-payment-provider",
        ),
    ],
)
def test_production_refuses_to_start_with_a_public_or_missing_secret(
    change: dict[str, str | None], message: str
) -> None:
    env = production_environment()
    for name, value in change.items():
        if value is None:
            env.pop(name)
        else:
            env[name] = value

    code, _, stderr = settings_with(env)

    assert code != 0
    assert f"ImproperlyConfigured: {message}" in stderr


@pytest.mark.parametrize(
    ("name", "value"),
    [
        pytest.param("SIMULATED_PROVIDER_SECRET", DEV_HASH_KEY, id="provider-secret-hash-key-s"),
        pytest.param(
            "SIMULATED_PROVIDER_SECRET", DEV_SECRET_KEY, id="provider-secret-secret-key-s"
        ),
        pytest.param("IDEMPOTENCY_HASH_KEY", DEV_PROVIDER_SECRET, id="hash-key-provider-secret-s"),
        pytest.param("IDEMPOTENCY_HASH_KEY", DEV_SECRET_KEY, id="hash-key-secret-key-s"),
        pytest.param("METRICS_TOKEN", DEV_PROVIDER_SECRET, id="metrics-token-provider-secret-s"),
        pytest.param("METRICS_TOKEN", DEV_HASH_KEY, id="metrics-token-hash-key-s"),
        pytest.param(
            "IDEMPOTENCY_HASH_KEYS_PREVIOUS",
            f"1:{DEV_PROVIDER_SECRET}",
            id="previous-hash-key-provider-secret-s",
        ),
    ],
)
def test_no_secret_is_accepted_with_another_s_value_from_the_repository(
    name: str, value: str
) -> None:
    """Each secret refused only its own development value: the provider's webhook secret
    set to the hash key's (long enough, and as public as its own) started the server, and
    anyone who read the repository could sign a payment callback and have an order paid."""
    env = {**production_environment(), name: value}

    code, _, stderr = settings_with(env)

    assert code != 0
    assert f"ImproperlyConfigured: {name} must be set" in stderr


@pytest.mark.parametrize(
    "name, value",
    [
        pytest.param("SECRET_KEY", "a" * 60, id="secret-key-of-one-character"),
        pytest.param("METRICS_TOKEN", "ab" * 20, id="metrics-token-of-two-characters"),
    ],
)
def test_a_long_secret_of_too_few_characters_is_refused_for_that(name: str, value: str) -> None:
    """The refusal named only the length, which a 60-character value already had."""
    code, _, stderr = settings_with({**production_environment(), name: value})

    assert code != 0
    assert "at least 5 of them different" in stderr


def test_a_rotation_keeps_the_previous_secret_keys_verifying() -> None:
    """docs/tenancy.md promises that SECRET_KEY_FALLBACKS still verify diner sessions (and
    pre-issued idempotency tokens) during a key rotation, but no environment variable set
    them: rotating SECRET_KEY signed every diner out and refused every token held."""
    old, older = secrets.token_urlsafe(50), secrets.token_urlsafe(50)
    env = {**production_environment(), "SECRET_KEY_FALLBACKS": f"{old}, {older}"}

    code, values, stderr = settings_with(env)

    assert code == 0, stderr
    assert values is not None
    assert values["fallbacks"] == [old, older]


@pytest.mark.parametrize(
    "fallback, message",
    [
        pytest.param(DEV_SECRET_KEY, "SECRET_KEY_FALLBACKS must", id="the-repository-s"),
        pytest.param("short-but-old", "SECRET_KEY_FALLBACKS must", id="short"),
        pytest.param("b" * 60, "SECRET_KEY_FALLBACKS must", id="one-character"),
    ],
)
def test_a_guessable_previous_secret_key_stops_the_server(fallback: str, message: str) -> None:
    """A fallback verifies what it signed as SECRET_KEY does: a public or guessable one would
    let anyone sign a diner session or a token."""
    env = {**production_environment(), "SECRET_KEY_FALLBACKS": f"{STRONG},{fallback}"}

    code, _, stderr = settings_with(env)

    assert code != 0
    assert f"ImproperlyConfigured: {message}" in stderr


@pytest.mark.parametrize(
    "previous",
    [
        pytest.param("dev-only-idempotency-hash-key-change-me", id="the-repository-s"),
        pytest.param("c" * 40, id="one-character"),
    ],
)
def test_a_guessable_previous_hash_key_stops_the_server(previous: str) -> None:
    """A previous hash key still verifies fingerprints and the hashes that stand for keys,
    phone numbers and diner ids (red: the repository's development key was taken, being long
    enough for the engine's own check)."""
    env = {**production_environment(), "IDEMPOTENCY_HASH_KEYS_PREVIOUS": f"1:{previous}"}

    code, _, stderr = settings_with(env)

    assert code != 0
    assert "ImproperlyConfigured: IDEMPOTENCY_HASH_KEYS_PREVIOUS must be set to a secret" in stderr


@pytest.mark.parametrize(
    ("other", "message"),
    [
        pytest.param(
            "SECRET_KEY",
            "IDEMPOTENCY_HASH_KEYS_PREVIOUS must hold secrets other than SECRET_KEY",
            id="the-secret-key",
        ),
        pytest.param(
            "METRICS_TOKEN",
            "IDEMPOTENCY_HASH_KEYS_PREVIOUS must hold secrets other than METRICS_TOKEN",
            id="the-metrics-token",
        ),
        pytest.param(
            "SIMULATED_PROVIDER_SECRET",
            "SIMULATED_PROVIDER_SECRET must be a secret other than IDEMPOTENCY_HASH_KEYS_PREVIOUS",
            id="the-provider-s-secret",
        ),
    ],
)
def test_a_previous_hash_key_held_by_other_hands_stops_the_server(other: str, message: str) -> None:
    """Each secret must differ from the others (README): a previous hash key still verifies
    the hashes that stand for keys, phone numbers and diner ids, so whoever holds the session
    signer, the metrics token or the provider's webhook secret could test guesses against
    them, were it the same value; the current hash key was held to that, a previous one not."""
    env = production_environment()
    env["IDEMPOTENCY_HASH_KEYS_PREVIOUS"] = f"1:{env[other]}"

    code, _, stderr = settings_with(env)

    assert code != 0
    assert f"ImproperlyConfigured: {message}" in stderr


@pytest.mark.parametrize(
    "other", ["METRICS_TOKEN", "IDEMPOTENCY_HASH_KEY", "SIMULATED_PROVIDER_SECRET"]
)
def test_a_previous_secret_key_held_by_other_hands_stops_the_server(other: str) -> None:
    """Each secret must differ from the others (README): a fallback verifies diner sessions and
    tokens as SECRET_KEY does, so whoever holds the metrics token or the provider's webhook
    secret could sign a session with it, were it the same value."""
    env = production_environment()
    env["SECRET_KEY_FALLBACKS"] = f"{STRONG},{env[other]}"

    code, _, stderr = settings_with(env)

    assert code != 0
    assert f"ImproperlyConfigured: {other} must be a secret other than SECRET_KEY_FALLBACKS" in (
        stderr
    )


def test_benchmark_endpoints_are_refused_on_a_site_with_a_real_host_name() -> None:
    """They write without a credential (red: BENCH_ENDPOINTS=1 left set in production mounted
    them); the load test's servers, on loopback names only, still start with them."""
    env = {**production_environment(), "BENCH_ENDPOINTS": "1"}

    code, _, stderr = settings_with(env)

    assert code != 0
    assert "ImproperlyConfigured: BENCH_ENDPOINTS mounts endpoints that write" in stderr
    code, loaded, stderr = settings_with({**env, "ALLOWED_HOSTS": "127.0.0.1,localhost"})
    assert code == 0, stderr
    assert loaded is not None and loaded["bench"] is True


@pytest.mark.parametrize(
    "hosts", ["*", "orders.example.com,*", " * "], ids=["star", "a-name-and-star", "padded"]
)
def test_production_refuses_to_answer_any_host_name(hosts: str) -> None:
    """'*' turns Django's host check off (red: the server started with it, and its HTTPS
    redirect sent a request naming any host to https://<that host>/); a subdomain pattern
    still names the site's own domain and starts."""
    code, _, stderr = settings_with({**production_environment(), "ALLOWED_HOSTS": hosts})

    assert code != 0
    assert "ImproperlyConfigured: ALLOWED_HOSTS must name the host names" in stderr
    assert "'*', which lets any Host through, is refused" in stderr
    code, _, stderr = settings_with(
        {**production_environment(), "ALLOWED_HOSTS": ".example.com,orders.example.net"}
    )
    assert code == 0, stderr


@pytest.mark.parametrize(
    "hosts",
    [".", ".com", "orders.example.com,.net", ".com.", "..com", ".."],
    ids=["dot", "top-level", "a-name-and-tld", "tld-dot", "dot-dot-tld", "dot-dot"],
)
def test_production_refuses_a_host_pattern_of_every_owner_s_names(hosts: str) -> None:
    """A subdomain pattern of a top-level domain (".com") lets through every host of it,
    anyone's, as '*' lets every host; "." let through any name ending in two dots
    ("evil.com.."). Both started the server; a pattern of the site's own domain still does
    (the test above). Written with an empty label (".com.", "..com", ".."), the same patterns
    started it too, and let through "evil.com..", "evil..com" and "evil...": Django's host
    check reads them as written."""
    code, _, stderr = settings_with({**production_environment(), "ALLOWED_HOSTS": hosts})

    assert code != 0
    assert "ImproperlyConfigured: ALLOWED_HOSTS must name the host names" in stderr
    assert "a pattern of a whole top-level domain" in stderr


def test_production_takes_the_loopback_names_pattern() -> None:
    """The pattern ".localhost" (Django's own default under DEBUG) names this machine's
    loopback names only (RFC 6761), nobody else's: a server for local checks starts with it."""
    env = {**production_environment(), "ALLOWED_HOSTS": ".localhost,127.0.0.1"}
    code, _, stderr = settings_with(env)
    assert code == 0, stderr


def test_production_refuses_to_run_without_the_idempotency_engine() -> None:
    """IDEMPOTENCY_ENABLED=0 runs every write unprotected, the product's whole promise off (red:
    the server started with it, silently); the load test's loopback baseline still starts, as
    does the demo."""
    env = {**production_environment(), "IDEMPOTENCY_ENABLED": "0"}

    code, _, stderr = settings_with(env)

    assert code != 0
    assert "ImproperlyConfigured: IDEMPOTENCY_ENABLED=0 turns the idempotency engine off" in stderr
    loopback = {**env, "BENCH_ENDPOINTS": "1", "ALLOWED_HOSTS": "127.0.0.1,localhost"}
    code, loaded, stderr = settings_with(loopback)
    assert code == 0, stderr
    assert loaded is not None and loaded["engine_on"] is False
    code, loaded, stderr = settings_with({"DEBUG": "1", "IDEMPOTENCY_ENABLED": "0"})
    assert code == 0, stderr
    assert loaded is not None and loaded["engine_on"] is False


def test_debug_uses_the_development_secrets_only_when_asked_for() -> None:
    code, values, stderr = settings_with({"DEBUG": "1"})

    assert code == 0, stderr
    assert values is not None
    assert values["debug"] is True
    assert values["secret"] == DEV_SECRET_KEY
    assert values["providers"] == {"simulated": [DEV_PROVIDER_SECRET]}


def test_hsts_and_the_https_redirect_are_configurable() -> None:
    env = {
        **production_environment(),
        "HSTS_SECONDS": "600",
        "SECURE_SSL_REDIRECT": "0",
        "SECURE_PROXY_SSL_HEADER": "",
    }

    code, values, stderr = settings_with(env)

    assert code == 0, stderr
    assert values is not None
    assert values["hsts"] == 600 and values["redirect"] is False and values["proxy"] is None


@pytest.mark.parametrize(
    "header", ["HTTP_X_FORWARDED_PROTO", "X_Forwarded_Proto", "X-Forwarded-Proto: https", "X Proto"]
)
def test_a_proxy_ssl_header_no_proxy_can_send_stops_the_server(header: str) -> None:
    """Django's own documentation writes this setting as HTTP_X_FORWARDED_PROTO, its name in
    request.META; given here, it named a header HTTP-X-Forwarded-Proto that gunicorn drops (an
    underscore) and no proxy sends, so every request, HTTPS included, was redirected to HTTPS:
    a site that only ever answered 301."""
    code, _, stderr = settings_with({**production_environment(), "SECURE_PROXY_SSL_HEADER": header})

    assert code != 0
    assert "ImproperlyConfigured: SECURE_PROXY_SSL_HEADER must be a header name" in stderr


@pytest.mark.parametrize("header", ["X-Forwarded-Proto", "X-Scheme", "Front-End-Https"])
def test_a_proxy_ssl_header_a_proxy_sends_is_read_as_django_names_it(header: str) -> None:
    code, values, stderr = settings_with(
        {**production_environment(), "SECURE_PROXY_SSL_HEADER": header}
    )

    assert code == 0, stderr
    assert values is not None
    assert values["proxy"] == ["HTTP_" + header.upper().replace("-", "_"), "https"]


@pytest.mark.parametrize(
    "name, value",
    [
        pytest.param("IDEMPOTENCY_ENABLED", "ture", id="engine-typo"),
        pytest.param("IDEMPOTENCY_ENABLED", "enabled", id="engine-word"),
        pytest.param("SECURE_SSL_REDIRECT", "flase", id="redirect-typo"),
        pytest.param("HSTS_INCLUDE_SUBDOMAINS", "y", id="hsts-letter"),
        pytest.param("DEBUG", "2", id="debug-number"),
    ],
)
def test_a_yes_or_no_setting_spelt_neither_way_stops_the_server(name: str, value: str) -> None:
    """Read as "no", a typo turned off what it names: IDEMPOTENCY_ENABLED=ture ran the site
    without the engine, and the same order sent twice was placed twice."""
    code, _, stderr = settings_with({**production_environment(), name: value})

    assert code != 0
    assert (
        f"ImproperlyConfigured: {name} must be one of 1, true, yes, on or 0, false, no, off, "
        f"not {value!r}"
    ) in stderr


@pytest.mark.parametrize(
    "name, value",
    [
        pytest.param("IDEMPOTENCY_BREAKER", '{"open_seconds": 5', id="breaker-cut-short"),
        pytest.param("IDEMPOTENCY_BREAKER", "[5]", id="breaker-list"),
        pytest.param("IDEMPOTENCY_FORCE_SCRIPTS", "claim=/tmp/claim.lua", id="scripts-not-json"),
    ],
)
def test_a_json_setting_that_is_no_json_object_stops_the_server_naming_it(
    name: str, value: str
) -> None:
    """A bare JSONDecodeError named a line and a column, not the setting."""
    code, _, stderr = settings_with({**production_environment(), name: value})

    assert code != 0
    assert f"ImproperlyConfigured: {name} must be a JSON object, not {value!r}" in stderr


@pytest.mark.parametrize("name", ["IDEMPOTENCY_ENABLED", "SECURE_SSL_REDIRECT", "DEBUG"])
def test_a_yes_or_no_setting_left_empty_keeps_its_default(name: str) -> None:
    """An empty value (``NAME=`` in an env file, a template's unset variable) is no value."""
    code, values, stderr = settings_with({**production_environment(), name: ""})

    assert code == 0, stderr
    assert values is not None
    assert (values["engine_on"], values["redirect"], values["debug"]) == (True, True, False)


@pytest.mark.parametrize(
    "token", ["é" * 40 + "0123456789", "abcdefghij" * 4 + "\u00a0token"], ids=["accents", "nbsp"]
)
def test_a_metrics_token_no_header_can_carry_stops_the_server(token: str) -> None:
    """Prometheus sends the token in an ``Authorization`` header, which the server reads as
    Latin-1 bytes: a token of characters outside ASCII started the server and then never
    matched what was sent, so every scrape was a 404 and the metrics' alerts went quiet."""
    code, _, stderr = settings_with({**production_environment(), "METRICS_TOKEN": token})

    assert code != 0
    assert "METRICS_TOKEN must be printable ASCII" in stderr


@pytest.mark.parametrize(
    "value, queue",
    [
        pytest.param("", "celery", id="empty"),
        pytest.param("  ", "celery", id="blank"),
        pytest.param(" orders ", "orders", id="padded"),
    ],
)
def test_a_celery_queue_left_empty_is_the_default_queue(value: str, queue: str) -> None:
    """``CELERY_QUEUE=`` (an env file's empty line, a template's unset variable) named the
    queue "": the web processes sent every task to it and a worker started so consumed no
    queue at all (its banner's ``[queues]`` was empty), so no payment, refund or outbox
    event was ever handled, and nothing said why."""
    code, values, stderr = settings_with({**production_environment(), "CELERY_QUEUE": value})

    assert code == 0, stderr
    assert values is not None
    assert values["queue"] == queue


@pytest.mark.parametrize("value", ["", "  "], ids=["empty", "blank"])
def test_a_broker_url_left_empty_is_the_one_beside_redis(value: str) -> None:
    """``CELERY_BROKER_URL=" "`` (a stray space in an env file) was the broker's URL: the
    server started, every task's publish failed to resolve a host, and a worker never
    connected; the outbox's payments and refunds waited for ever."""
    env = {**production_environment(), "CELERY_BROKER_URL": value}

    code, values, stderr = settings_with(env)

    assert code == 0, stderr
    assert values is not None
    assert values["broker"] == env["REDIS_URL"].removesuffix("/0") + "/1"


@pytest.mark.parametrize(
    "url, shown",
    [
        pytest.param("broker.example.com:6379/1", "'broker.example.com:6379/1'", id="no-scheme"),
        pytest.param(
            "redis:/broker.example.com:6379/1", "'redis:/broker.example.com:6379/1'", id="one-slash"
        ),
        pytest.param(
            "redis://:{password}@broker.example.com:port/1",
            "'redis://:***@broker.example.com:port/1'",
            id="port-no-number",
        ),
        pytest.param(
            "redis://broker.example.com:6379/celery",
            "'redis://broker.example.com:6379/celery'",
            id="named-database",
        ),
        pytest.param("redis+socket://", "'redis+socket://'", id="socket-no-path"),
        pytest.param(
            "amqp://broker.example.com:5672//", "'amqp://broker.example.com:5672//'", id="not-redis"
        ),
    ],
)
def test_a_broker_url_that_names_no_redis_broker_stops_the_server(url: str, shown: str) -> None:
    """A CELERY_BROKER_URL Celery cannot reach a Redis broker by started the server all the
    same: every task's publish failed (a port that is no number a ValueError, no scheme read
    as amqp://guest@<the whole text>), and a worker never connected, or stopped in a
    traceback; the outbox's payments and refunds waited for ever. Its password is not shown."""
    password = secrets.token_urlsafe(24)
    env = {**production_environment(), "CELERY_BROKER_URL": url.format(password=password)}

    code, _, stderr = settings_with(env)

    assert code != 0
    assert (
        "ImproperlyConfigured: CELERY_BROKER_URL must be redis://host:port/<database number>"
        in stderr
    )
    assert f"not {shown.format(password=password)}" in stderr
    assert password not in stderr


def test_documented_broker_urls_start_the_server() -> None:
    for url in (
        "redis://broker.example.com:6379/1",
        "redis://broker.example.com:6379",
        "rediss://:pw@broker.example.com:6380/2?ssl_cert_reqs=required",
        "redis+socket:///run/redis/redis.sock?virtual_host=1",
    ):
        code, values, stderr = settings_with({**production_environment(), "CELERY_BROKER_URL": url})

        assert code == 0, (url, stderr)
        assert values is not None
        assert values["broker"] == url


@pytest.mark.parametrize("value", ["", "  "], ids=["empty", "blank"])
def test_a_path_setting_left_empty_is_its_default_never_the_working_directory(
    value: str,
) -> None:
    """``OFFBOARDING_EXPORT_DIR=`` was ``Path("")``, the process's working directory: the
    admin's offboarding wrote a leaving restaurant's archive (its diners' ids, notes and
    contact details) into the checkout the worker runs from, beside the code and outside
    the git-ignored ``var/``; ``DEMO_KEYS_FILE=`` named that directory as a file."""
    code, values, stderr = settings_with(
        {**production_environment(), "OFFBOARDING_EXPORT_DIR": value, "DEMO_KEYS_FILE": value}
    )

    assert code == 0, stderr
    assert values is not None
    assert values["export_dir"] == str(PROJECT_ROOT / "var" / "offboarding")
    assert values["demo_keys"] == str(PROJECT_ROOT / "var" / "demo_keys.json")


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("HSTS_SECONDS", "1y", "HSTS_SECONDS must be an integer, not '1y'"),
        ("DB_CONN_MAX_AGE", "abc", "DB_CONN_MAX_AGE must be an integer, not 'abc'"),
        ("IDEMPOTENCY_TTL_SECONDS", "-5", "IDEMPOTENCY_TTL_SECONDS must be within 60.."),
        ("IDEMPOTENCY_HASH_KEY_ID", "abc", "IDEMPOTENCY_HASH_KEY_ID must be an integer"),
        ("ORDER_ID_LEASE_SECONDS", "0", "ORDER_ID_LEASE_SECONDS must be within 3..3600, not 0"),
        ("REDIS_SOCKET_TIMEOUT", "fast", "REDIS_SOCKET_TIMEOUT must be a number, not 'fast'"),
        ("OUTBOX_SWEEP_SECONDS", "nan", "OUTBOX_SWEEP_SECONDS must be within 0.1..86400"),
        ("CREDENTIAL_CACHE_SECONDS", "-1", "CREDENTIAL_CACHE_SECONDS must be within 0..3600"),
        (
            "API_TENANT_WRITE_CEILING_PER_MINUTE",
            "3k",
            "API_TENANT_WRITE_CEILING_PER_MINUTE must be an integer, not '3k'",
        ),
        (
            "API_TENANT_WRITE_CEILING_PER_MINUTE",
            "-5",
            "API_TENANT_WRITE_CEILING_PER_MINUTE must be within 0..",
        ),
        (
            "SIMULATED_PAYMENT_AUTO_COMPLETE_SECONDS",
            "2s",
            "SIMULATED_PAYMENT_AUTO_COMPLETE_SECONDS must be a number, not '2s'",
        ),
        (
            "SIMULATED_PAYMENT_AUTO_COMPLETE_SECONDS",
            "nan",
            "SIMULATED_PAYMENT_AUTO_COMPLETE_SECONDS must be within 0..",
        ),
        (
            "INSTANCE_DEAD_AFTER_SECONDS",
            "15s",
            "INSTANCE_DEAD_AFTER_SECONDS must be a number, not '15s'",
        ),
        (
            "INSTANCE_DEAD_AFTER_SECONDS",
            "-5",
            "INSTANCE_DEAD_AFTER_SECONDS must be within 0.1..",
        ),
        (
            "INSTANCE_DEAD_AFTER_SECONDS",
            "4",
            "INSTANCE_DEAD_AFTER_SECONDS (4.0) must be longer than INSTANCE_HEARTBEAT_SECONDS",
        ),
        (
            "TENANT_POLICY_CACHE_SECONDS",
            "nan",
            "TENANT_POLICY_CACHE_SECONDS must be within 0..",
        ),
        (
            "IDEMPOTENCY_HASH_KEYS_PREVIOUS",
            "an-old-secret-without-its-id-0123456789",
            "IDEMPOTENCY_HASH_KEYS_PREVIOUS must list <id>:<secret> entries",
        ),
    ],
)
def test_a_number_setting_that_is_no_number_or_out_of_range_stops_the_server_naming_it(
    name: str, value: str, message: str
) -> None:
    """Each was read by a bare int() or float(): a ValueError that named no setting, or a
    negative period taken as it was (INSTANCE_DEAD_AFTER_SECONDS is read by the Celery worker's
    stale-lease recovery too, and Celery ignores the system checks' verdict)."""
    code, _, stderr = settings_with({**production_environment(), name: value})

    assert code != 0
    assert f"ImproperlyConfigured: {message}" in stderr
    assert "ValueError" not in stderr


@pytest.mark.parametrize("url", [None, ""], ids=["unset", "empty"])
def test_production_refuses_to_start_without_a_database_url(url: str | None) -> None:
    """Off DEBUG a missing DATABASE_URL (a typo in its name) ran the site on a SQLite file of
    the checkout, each host with its own orders and idempotency records."""
    env = without(production_environment(), "DATABASE_URL")
    if url is not None:
        env["DATABASE_URL"] = url

    code, _, stderr = settings_with(env)

    assert code != 0
    assert "ImproperlyConfigured: DATABASE_URL must name the PostgreSQL database" in stderr


@pytest.mark.parametrize(
    "url", ["sqlite:////var/lib/ordering/db.sqlite3", "mysql://ordering@db.example.com/ordering"]
)
def test_production_refuses_a_database_other_than_postgresql(url: str) -> None:
    """SQLite is the demo's alone (README): named in DATABASE_URL off DEBUG, each host kept its
    orders and idempotency records in a file of its own, as without the variable; and any other
    database than PostgreSQL, the only one production is documented and tested on, started."""
    code, _, stderr = settings_with({**production_environment(), "DATABASE_URL": url})

    assert code != 0
    assert "ImproperlyConfigured: DATABASE_URL must name the PostgreSQL database" in stderr


@pytest.mark.parametrize(
    "url, shown",
    [
        pytest.param(
            "postgres://ordering:{password}@db.example.com:5432",
            "'postgres://ordering:***@db.example.com:5432'",
            id="no-name",
        ),
        pytest.param(
            "postgres://ordering@db.example.com:5432/",
            "'postgres://***@db.example.com:5432/'",
            id="empty-name",
        ),
        pytest.param("postgresql://", "'postgresql://'", id="nothing"),
        pytest.param(
            "postgres://ordering:{password}@db.example.com:port/ordering",
            "'postgres://ordering:***@db.example.com:port/ordering'",
            id="port-no-number",
        ),
        pytest.param(
            "db.example.com:5432/ordering", "'db.example.com:5432/ordering'", id="no-scheme"
        ),
        pytest.param(
            "postgress://ordering:{password}@db.example.com/ordering",
            "'postgress://ordering:***@db.example.com/ordering'",
            id="misspelt-scheme",
        ),
    ],
)
def test_production_refuses_a_database_url_that_names_no_database(url: str, shown: str) -> None:
    """Django connects to no PostgreSQL database without its name (libpq's default, the
    user's name, is not taken): such a DATABASE_URL started a server that answered every
    request 500, the readiness probe too. One that cannot be read at all got dj-database-url's
    own errors, which named no setting ("Scheme '://' is unknown. Did you forget to register
    custom backend?", "This string is not a valid url"), and no command or server wrote them
    in one line as it writes a setting's refusal. The password is never shown."""
    password = secrets.token_urlsafe(24)
    env = {**production_environment(), "DATABASE_URL": url.format(password=password)}

    code, _, stderr = settings_with(env)

    assert code != 0
    assert "ImproperlyConfigured: DATABASE_URL must name the PostgreSQL database" in stderr
    assert f"not {shown}" in stderr
    assert password not in stderr


def test_the_demo_without_a_database_url_runs_on_sqlite_even_when_it_is_empty() -> None:
    code, values, stderr = settings_with({"DEBUG": "1", "DATABASE_URL": ""})

    assert code == 0, stderr
    assert values is not None
    assert values["database"] == "django.db.backends.sqlite3"


@pytest.mark.parametrize(
    "url, message",
    [
        pytest.param(
            "redis.example.com:6379",
            "REDIS_URL must be redis://host:port/<database number>, not 'redis.example.com:6379'",
            id="no-scheme",
        ),
        pytest.param(
            "redis://redis.example.com:6379/cache",
            "REDIS_URL must be redis://host:port/<database number>",
            id="a-named-database",
        ),
        pytest.param(
            "redis://redis.example.com:6379/15",
            "REDIS_URL uses database 15, the last: set CELERY_BROKER_URL",
            id="the-last-database",
        ),
        pytest.param(
            "unix:///run/redis/redis.sock?db=0",
            "REDIS_URL names a unix socket, which Celery's broker URL cannot take from it: set "
            "CELERY_BROKER_URL",
            id="a-unix-socket",
        ),
    ],
)
def test_a_redis_url_the_broker_cannot_be_placed_beside_stops_the_server(
    url: str, message: str
) -> None:
    """The broker takes REDIS_URL's next database: a URL without one was a ValueError ("invalid
    literal for int()"), and database 15 put the broker in database 0, another's perhaps."""
    code, _, stderr = settings_with({**production_environment(), "REDIS_URL": url})

    assert code != 0
    assert f"ImproperlyConfigured: {message}" in stderr


def test_on_a_redis_cluster_the_broker_must_be_named() -> None:
    """README: the broker's default is REDIS_URL's server or the first of REDIS_SHARDS; a
    Redis Cluster gives it none (Celery's Redis transport takes one node), so a site on
    REDIS_CLUSTER_URL alone stops and says to set CELERY_BROKER_URL."""
    env = {
        **without(production_environment(), "REDIS_URL", "CELERY_BROKER_URL"),
        "REDIS_CLUSTER_URL": "redis://cluster.example.com:7000",
    }

    code, _, stderr = settings_with(env)

    assert code != 0
    assert "ImproperlyConfigured: CELERY_BROKER_URL (or REDIS_URL) must be set" in stderr


@pytest.mark.parametrize(
    "name, url, message",
    [
        pytest.param(
            "REDIS_URL",
            "redis.example.com:6379",
            "REDIS_URL must be redis://host:port/<database number>",
            id="url-no-scheme",
        ),
        pytest.param(
            "REDIS_URL",
            "redis://redis.example.com:6379/cache",
            "REDIS_URL must be redis://host:port/<database number>",
            id="url-named-database",
        ),
        pytest.param(
            "REDIS_URL",
            "redis:///0",
            "REDIS_URL must be redis://host:port/<database number>",
            id="url-no-host",
        ),
        pytest.param(
            "REDIS_URL",
            "redis://redis.example.com:6379?db=3",
            "REDIS_URL must be redis://host:port/<database number>",
            id="url-database-as-a-query",
        ),
        pytest.param(
            "REDIS_SHARDS",
            "redis://a.example.com:6379?db=1,redis://a.example.com:6379?db=2",
            "REDIS_SHARDS must be redis://host:port/<database number>",
            id="shards-database-as-a-query",
        ),
        pytest.param(
            "REDIS_CLUSTER_URL",
            "redis://cluster.example.com:7000?db=3",
            "REDIS_CLUSTER_URL must be redis://host:port",
            id="cluster-database-as-a-query",
        ),
        pytest.param(
            "REDIS_SHARDS",
            "redis://a.example.com:6379/0,b.example.com:6379",
            "REDIS_SHARDS must be redis://host:port/<database number>, not 'b.example.com:6379'",
            id="second-shard",
        ),
        pytest.param(
            "REDIS_CLUSTER_URL",
            "cluster.example.com:7000",
            "REDIS_CLUSTER_URL must be redis://host:port",
            id="cluster-no-scheme",
        ),
        pytest.param(
            "REDIS_CLUSTER_URL",
            "redis://cluster.example.com:7000/3",
            "REDIS_CLUSTER_URL must be redis://host:port",
            id="cluster-database",
        ),
    ],
)
def test_a_redis_url_that_names_no_node_stops_the_server_with_its_own_broker(
    name: str, url: str, message: str
) -> None:
    """With CELERY_BROKER_URL set (as the README asks on database 15, and for a cluster) no
    Redis URL was read before a request: a URL with no scheme started a server that answered
    every API request 500 (redis-py's "Redis URL must specify one of the following schemes"),
    one naming its database by a word was database 0 (another's perhaps), and only the first
    of REDIS_SHARDS was ever looked at."""
    env = {
        **without(production_environment(), "REDIS_URL"),
        "CELERY_BROKER_URL": "redis://broker.example.com:6379/1",
        name: url,
    }

    code, _, stderr = settings_with(env)

    assert code != 0
    assert f"ImproperlyConfigured: {message}" in stderr


@pytest.mark.parametrize(
    "name, url, shown",
    [
        pytest.param(
            "REDIS_URL",
            "redis://ordering:{password}@redis.example.com:6379/cache",
            "not 'redis://ordering:***@redis.example.com:6379/cache'",
            id="url-user-and-password",
        ),
        pytest.param(
            "REDIS_URL",
            "rediss://:{password}@redis.example.com:port/0",
            "not 'rediss://:***@redis.example.com:port/0'",
            id="url-password-port-no-number",
        ),
        pytest.param(
            "REDIS_SHARDS",
            "redis://a.example.com:6379/0,redis://:{password}@b.example.com:6379?db=2",
            "not 'redis://:***@b.example.com:6379?db=2'",
            id="second-shard-password",
        ),
        pytest.param(
            "REDIS_CLUSTER_URL",
            "redis://:{password}@cluster.example.com:7000/3",
            "not 'redis://:***@cluster.example.com:7000/3'",
            id="cluster-password",
        ),
        pytest.param(
            "REDIS_URL",
            ":{password}@redis.example.com:6379/0",
            "not ':***@redis.example.com:6379/0'",
            id="url-no-scheme-password",
        ),
    ],
)
def test_a_refused_redis_url_is_named_without_its_password(name: str, url: str, shown: str) -> None:
    """The refusal names the URL it refused, and a server's stderr goes to its logs, which
    more people read than hold the Redis password: the password is shown as ***, the rest of
    the URL as written, so the operator still sees which part is wrong."""
    password = secrets.token_urlsafe(24)
    env = {
        **without(production_environment(), "REDIS_URL"),
        "CELERY_BROKER_URL": "redis://broker.example.com:6379/1",
        name: url.format(password=password),
    }

    code, _, stderr = settings_with(env)

    assert code != 0
    assert f"ImproperlyConfigured: {name} must be redis://host:port" in stderr
    assert shown in stderr
    assert password not in stderr


def test_documented_redis_urls_start_the_server() -> None:
    broker = {"CELERY_BROKER_URL": "redis://broker.example.com:6379/1"}
    base = without(production_environment(), "REDIS_URL")
    for extra in (
        {"REDIS_URL": "redis://redis.example.com:6379/0"},
        {"REDIS_URL": "rediss://:pw@redis.example.com:6380"},
        {"REDIS_URL": "unix:///run/redis.sock?db=2"},
        {"REDIS_SHARDS": "redis://a.example.com:6379/0, redis://b.example.com:6379/0"},
        {"REDIS_CLUSTER_URL": "redis://cluster.example.com:7000"},
        {"REDIS_CLUSTER_URL": "redis://cluster.example.com:7000/0"},
    ):
        code, _, stderr = settings_with({**base, **broker, **extra})

        assert code == 0, (extra, stderr)


@pytest.mark.parametrize("store", ["databse", "Database", "db", "postgres"])
def test_an_order_id_lease_store_of_neither_kind_stops_the_server(store: str) -> None:
    """docs/scaling.md has every process set ORDER_ID_LEASE_STORE=database while the Redis
    topology changes, so that no two processes lease one worker id on two nodes: a misspelt
    value was read as "redis" without a word, and the change went ahead with Redis leases."""
    code, _, stderr = settings_with({**production_environment(), "ORDER_ID_LEASE_STORE": store})

    assert code != 0
    assert (
        f"ImproperlyConfigured: ORDER_ID_LEASE_STORE must be redis or database, not {store!r}"
        in stderr
    )


@pytest.mark.parametrize("store", ["redis", "database", ""])
def test_an_order_id_lease_store_of_either_kind_starts(store: str) -> None:
    code, _, stderr = settings_with({**production_environment(), "ORDER_ID_LEASE_STORE": store})

    assert code == 0, stderr


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("LOG_FORMAT", "jsn", "LOG_FORMAT must be json or text, not 'jsn'"),
        ("LOG_LEVEL", "Verbose", "LOG_LEVEL must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL"),
    ],
)
def test_a_log_setting_of_no_known_value_stops_the_server_naming_it(
    name: str, value: str, message: str
) -> None:
    """Both went to logging.config as they were: the refusal named a handler ("Unable to
    configure handler 'console'") or "the root logger", never the setting to fix."""
    code, _, stderr = settings_with({**production_environment(), name: value})

    assert code != 0
    assert f"ImproperlyConfigured: {message}" in stderr


@pytest.mark.parametrize("name, value", [("LOG_FORMAT", "text"), ("LOG_LEVEL", "warning")])
def test_a_known_log_setting_starts(name: str, value: str) -> None:
    code, _, stderr = settings_with({**production_environment(), name: value})

    assert code == 0, stderr


@pytest.mark.parametrize("share", ["0", "1.5", "-0.2", "most"])
def test_a_guest_ceiling_share_outside_0_to_1_stops_the_server(share: str) -> None:
    code, _, stderr = settings_with({**production_environment(), "API_GUEST_CEILING_SHARE": share})

    assert code != 0
    assert "API_GUEST_CEILING_SHARE must be" in stderr


def test_check_deploy_passes_with_exactly_the_documented_environment() -> None:
    done = run_manage("check", "--deploy", "--fail-level", "WARNING", env=production_environment())

    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues" in done.stdout


# --- a server started as the README says -------------------------------------------------


def live_environment() -> dict[str, str | None]:
    return live_server_environment(redis_url=settings.REDIS_URL or "redis://127.0.0.1:6379/0")


@pytest.fixture(scope="module")
def production_server(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveServer, dict[str, str | None]]]:
    env = live_environment()
    with live_gunicorn(
        db_name=settings.DATABASES["default"]["NAME"],
        log_dir=tmp_path_factory.mktemp("production"),
        env=env,
        workers=2,
        ready_headers={"Host": served_host(env), **HTTPS_HEADERS},
    ) as server:
        yield server, env


def _client(server: LiveServer, env: dict[str, str | None]) -> httpx.Client:
    return httpx.Client(
        base_url=server.url,
        headers={"Host": served_host(env), **HTTPS_HEADERS},
        timeout=30,
        follow_redirects=False,
    )


@pytest.fixture
def live_world(transactional_db: None) -> World:
    return build_world("prod")


def paying_order(client: httpx.Client, world: World) -> Order:
    """An order a guest diner placed and started paying, through the API."""
    headers = guest_session_headers(client, world.publishable_key)
    placed = client.post(
        "/api/v1/orders/",
        json={"items": [{"dish_id": world.dish.pk, "quantity": 1}], "payment_method": "card"},
        headers={**headers, "Idempotency-Key": "prod-order-1"},
    )
    assert placed.status_code == 201, placed.text
    order_id = placed.json()["id"]
    paid = client.post(
        f"/api/v1/orders/{order_id}/pay/", headers={**headers, "Idempotency-Key": "prod-pay-1"}
    )
    assert paid.status_code == 200, paid.text
    return Order.all_tenants.get(pk=order_id)


def forged_callback(order: Order, *, secret: str) -> tuple[bytes, dict[str, str]]:
    """What a diner who knows ``secret`` sends to declare their own order paid."""
    payment = Payment.all_tenants.get(order_id=order.pk)
    body = json.dumps(
        {
            "event_id": "evt_forged",
            "provider_txn_id": payment.provider_txn_id,
            "order_id": str(order.pk),
            "status": "succeeded",
            "amount": str(payment.amount),
            "currency": payment.currency,
        }
    ).encode()
    now = int(time.time())
    return body, {
        PROVIDER_HEADER: "simulated",
        TIMESTAMP_HEADER: str(now),
        SIGNATURE_HEADER: sign(secret=secret, timestamp=now, body=body),
        "Content-Type": "application/json",
    }


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
class TestTheDocumentedProductionServer:
    def test_a_callback_signed_with_the_repository_secret_is_refused(
        self, production_server: tuple[LiveServer, dict[str, str | None]], live_world: World
    ) -> None:
        server, env = production_server
        with _client(server, env) as client:
            order = paying_order(client, live_world)
            body, headers = forged_callback(order, secret=DEV_PROVIDER_SECRET)

            answer = client.post("/api/v1/payments/callback/", content=body, headers=headers)

        assert answer.status_code == 401
        assert answer.json()["code"] == "PAYMENT_SIGNATURE_INVALID"
        order.refresh_from_db()
        assert order.status == OrderStatus.PAYING

    def test_a_callback_signed_with_the_configured_secret_is_applied(
        self, production_server: tuple[LiveServer, dict[str, str | None]], live_world: World
    ) -> None:
        server, env = production_server
        with _client(server, env) as client:
            order = paying_order(client, live_world)
            body, headers = forged_callback(order, secret=env["SIMULATED_PROVIDER_SECRET"] or "")

            answer = client.post("/api/v1/payments/callback/", content=body, headers=headers)

        assert answer.status_code == 200, answer.text
        assert answer.json()["result"] == "applied"
        order.refresh_from_db()
        assert order.status == OrderStatus.PAID

    def test_one_guest_cannot_mint_more_than_2000_tokens(
        self, production_server: tuple[LiveServer, dict[str, str | None]], live_world: World
    ) -> None:
        """The reproduced attacks minted 600,000 tokens with one key in 10 s, then the whole
        tenant's 100,000 with one guest session; a principal now holds at most 1/50 of it."""
        server, env = production_server
        with _client(server, env) as client:
            headers = guest_session_headers(client, live_world.publishable_key)
            issued = [
                client.post("/api/v1/idempotency-tokens/", json={"count": 1000}, headers=headers)
                for _ in range(2)
            ]
            refused = client.post("/api/v1/idempotency-tokens/", json={"count": 1}, headers=headers)

        assert {answer.status_code for answer in issued} == {201}
        assert refused.status_code == 429
        assert refused.json()["code"] == "IDEMPOTENCY_TOKEN_QUOTA_EXCEEDED"
        assert (refused.json()["limit"], refused.json()["scope"]) == (2000, "principal")

    @pytest.mark.parametrize("path", ["/no-such-page/", "/dashboard/no-such-page/"])
    def test_a_404_is_the_site_page_never_the_technical_one(
        self, production_server: tuple[LiveServer, dict[str, str | None]], path: str
    ) -> None:
        server, env = production_server
        with _client(server, env) as client:
            answer = client.get(path)

        assert answer.status_code == 404
        assert answer.headers["Content-Type"].startswith("text/html")
        assert "URLconf" not in answer.text and "DEBUG = True" not in answer.text
        assert "api/v1/" not in answer.text  # the URL map is not listed
        assert "Not found" in answer.text

    def test_plain_http_is_redirected_to_https(
        self, production_server: tuple[LiveServer, dict[str, str | None]]
    ) -> None:
        server, env = production_server
        with httpx.Client(base_url=server.url, headers={"Host": served_host(env)}) as client:
            answer = client.get("/dashboard/login/")

        assert answer.status_code == 301
        assert answer.headers["Location"] == f"https://{served_host(env)}/dashboard/login/"

    @pytest.mark.parametrize(
        ("method", "path"),
        [
            ("POST", "/api/v1/orders/"),
            ("GET", "/api/v1/menu/"),
            ("POST", "/api/v1/diner-sessions/"),
        ],
    )
    def test_an_api_request_over_plain_http_is_refused_not_redirected(
        self, production_server: tuple[LiveServer, dict[str, str | None]], method: str, path: str
    ) -> None:
        """A 301 to HTTPS: a client following it sends a POST again as a GET (``fetch``,
        curl ``-L``, most HTTP stacks), so ``POST /api/v1/orders/`` over plain HTTP became a
        read of the order list that looked like an answer, and a client whose base URL said
        ``http://`` kept sending its credential in the clear without ever seeing an error.
        The API refuses it, 403 ``HTTPS_REQUIRED``, before reading the credential."""
        server, env = production_server
        with httpx.Client(base_url=server.url, headers={"Host": served_host(env)}) as client:
            answer = client.request(
                method,
                path,
                json={} if method == "POST" else None,
                headers={"Authorization": "Api-Key pk_nobody.secret", "Idempotency-Key": "k-1"},
            )

        assert answer.status_code == 403, answer.text
        assert answer.headers["Content-Type"] == "application/problem+json"
        assert answer.json()["code"] == "HTTPS_REQUIRED"
        assert "Location" not in answer.headers
        assert "no-store" in answer.headers["Cache-Control"]

    @pytest.mark.parametrize(
        "header", [{"X-Forwarded-Ssl": "on"}, {"X-Forwarded-Protocol": "ssl"}], ids=str
    )
    def test_only_the_proxy_s_header_says_https_not_gunicorn_s_others(
        self, production_server: tuple[LiveServer, dict[str, str | None]], header: dict
    ) -> None:
        """From loopback, gunicorn would take these for HTTPS itself (red: 200, with HSTS)."""
        server, env = production_server
        with httpx.Client(
            base_url=server.url, headers={"Host": served_host(env), **header}
        ) as client:
            answer = client.get("/dashboard/login/")

        assert answer.status_code == 301
        assert "Strict-Transport-Security" not in answer.headers

    @pytest.mark.parametrize("path", ["/x/readyz", "/x/api/v1/menu/"])
    def test_a_client_s_script_name_header_moves_no_path(
        self, production_server: tuple[LiveServer, dict[str, str | None]], path: str
    ) -> None:
        """From loopback (a proxy on this host) gunicorn took a ``SCRIPT_NAME`` header for the
        site's mount point: through a proxy that passes it on, ``/x/readyz`` was the readiness
        probe the proxy keeps from the internet, and ``/x/api/v1/menu/`` the menu's API answer
        to its view but a page to the checks that read the path, so without ``no-store``
        (red: 200 and 401)."""
        server, env = production_server
        with _client(server, env) as client:
            answer = client.get(path, headers={"SCRIPT_NAME": "/x"})

        assert answer.status_code == 404
        assert "database" not in answer.text

    def test_a_head_probe_gets_no_body(
        self, production_server: tuple[LiveServer, dict[str, str | None]]
    ) -> None:
        server, _ = production_server
        with httpx.Client(base_url=server.url) as client:
            for path in ("/healthz", "/readyz"):
                assert client.head(path).status_code == 200
        # gunicorn says so when an app sends a body with a HEAD answer (red: two such lines)
        assert "no-body response" not in server.log_tail(400)

    def test_a_refused_host_is_one_warning_line_not_an_error_with_a_traceback(
        self, production_server: tuple[LiveServer, dict[str, str | None]]
    ) -> None:
        server, _ = production_server
        with httpx.Client(base_url=server.url, headers={"Host": "10.9.9.9:8000"}) as client:
            assert client.get("/api/v1/menu/").status_code == 400
        lines = [
            json.loads(line)
            for line in server.log_tail(400).splitlines()
            if "10.9.9.9" in line and line.startswith("{")
        ]
        assert [(line["level"], line["logger"]) for line in lines] == [
            ("WARNING", "django.security.DisallowedHost")
        ]  # red: an ERROR with Django's traceback
        assert "Traceback" not in server.log_tail(400)

    @pytest.mark.parametrize(
        "method, path, body, status",
        [
            pytest.param("GET", "/api/v1/no-such-route/", None, 404, id="api-no-route"),
            pytest.param("GET", "/api/v1/menu", None, 404, id="api-no-slash"),
            pytest.param("POST", "/api/v1/orders/", 2 << 20, 413, id="api-too-large"),
            pytest.param("POST", "/dashboard/login/", 2 << 20, 413, id="page-too-large"),
            pytest.param("GET", "/admin/?q=%00", None, 400, id="page-nul-query"),
        ],
    )
    def test_https_error_answers_carry_the_security_headers(
        self,
        production_server: tuple[LiveServer, dict[str, str | None]],
        method: str,
        path: str,
        body: int | None,
        status: int,
    ) -> None:
        """The answers made before Django's SecurityMiddleware ran (a body too large, a NUL in
        a page's query) or rebuilt after it (an API path's 404, rewritten as problem+json) had
        none of its headers: no Strict-Transport-Security, no nosniff, no Referrer-Policy,
        while every other answer of the site carries them."""
        server, env = production_server
        with _client(server, env) as client:
            answer = client.request(
                method,
                path,
                content=b"{" + b" " * body + b"}" if body else None,
                headers={"Content-Type": "application/json"} if body else {},
            )

        assert answer.status_code == status, answer.text
        assert answer.headers.get("Strict-Transport-Security") == (
            "max-age=31536000; includeSubDomains"
        )
        assert answer.headers.get("X-Content-Type-Options") == "nosniff"
        assert answer.headers.get("Referrer-Policy") == "same-origin"
        assert answer.headers.get("Cross-Origin-Opener-Policy") == "same-origin"

    def test_https_answers_carry_hsts_and_secure_cookies(
        self, production_server: tuple[LiveServer, dict[str, str | None]]
    ) -> None:
        server, env = production_server
        with _client(server, env) as client:
            answer = client.get("/dashboard/login/")

        assert answer.status_code == 200
        assert answer.headers["Strict-Transport-Security"] == (
            "max-age=31536000; includeSubDomains"
        )
        cookie = answer.headers["Set-Cookie"]
        assert cookie.startswith("csrftoken=") and "Secure" in cookie


@pytest.mark.slow
def test_a_server_without_debug_or_a_provider_secret_does_not_start(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The reproduced attack's server: the operator forgot DEBUG and the provider secret. It
    used to start in debug mode and accept callbacks signed with the repository's secret."""
    env = live_environment()
    env.pop("SIMULATED_PROVIDER_SECRET")
    env["SIMULATED_PROVIDER_SECRET"] = None

    with (
        pytest.raises(GunicornFailed, match="SIMULATED_PROVIDER_SECRET must be set"),
        live_gunicorn(
            db_name=settings.DATABASES["default"]["NAME"],
            log_dir=tmp_path_factory.mktemp("forgetful"),
            env=env,
            workers=1,
            ready_timeout=30,
        ),
    ):
        pass


@pytest.mark.parametrize(
    "name, value, message",
    [
        pytest.param(
            "IDEMPOTENCY_BREAKER",
            '{"p99_threshold_ms": -1}',
            r"option 'p99_threshold_ms' must be a positive number, not -1",
            id="negative-breaker-threshold",
        ),
        pytest.param(
            "IDEMPOTENCY_HASH_KEYS_PREVIOUS",
            f"1:{secrets.token_urlsafe(40)}",  # the current key's id (1 unless set)
            r'IDEMPOTENCY\["HASH_KEYS"\] lists a key id twice',
            id="previous-hash-key-under-the-current-id",
        ),
    ],
)
def test_a_server_the_system_checks_refuse_does_not_start(
    django_db_setup: None,
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    value: str,
    message: str,
) -> None:
    """gunicorn runs no system checks: a setting they name as an error was served anyway (a
    circuit breaker whose latency threshold no Redis call can stay under, a previous hash key
    under the current one's id, which could not tell the two apart)."""
    env = {**live_environment(), name: value}

    with (
        pytest.raises(GunicornFailed, match=message),
        live_gunicorn(
            db_name=settings.DATABASES["default"]["NAME"],
            log_dir=tmp_path_factory.mktemp("refused-by-checks"),
            env=env,
            workers=1,
            ready_timeout=30,
        ),
    ):
        pass


@pytest.mark.slow
def test_a_server_refused_for_its_settings_says_why_in_one_line_and_stops(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A setting that stops the server (here a Redis URL that names no node) ended each
    worker's boot in gunicorn's "Exception in worker process" and a traceback of some forty
    lines through the import machinery, the reason at its end, and gunicorn halted with
    "Worker failed to boot": a page of Python for a typo. The worker now writes the reason in
    one line and gunicorn halts as for an app that cannot be loaded."""
    env = {**live_environment(), "REDIS_URL": "redis.example.com:6379"}
    log_dir = tmp_path_factory.mktemp("refused-settings")

    with (
        pytest.raises(GunicornFailed, match="exited with code"),
        live_gunicorn(
            db_name=settings.DATABASES["default"]["NAME"],
            log_dir=log_dir,
            env=env,
            workers=1,
            ready_timeout=30,
        ),
    ):
        pass

    log = (log_dir / "gunicorn.log").read_text()
    assert (
        "ImproperlyConfigured: REDIS_URL must be redis://host:port/<database number>, "
        "not 'redis.example.com:6379'\n"
    ) in log
    assert "Traceback" not in log
    assert "Reason: App failed to load." in log


def refused_at_start(arguments: list[str]) -> str:
    """Run Python with ``arguments`` in the production environment with a setting the system
    checks call an error; assert it stopped, and give what it wrote."""
    env = {**production_environment(), "IDEMPOTENCY_BREAKER": '{"p99_threshold_ms": -1}'}
    done = subprocess.run(
        [sys.executable, *arguments],
        cwd=PROJECT_ROOT,
        env={**system_environment(), **env},
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode != 0
    return done.stdout + done.stderr


@pytest.mark.parametrize("command", ["worker", "beat"])
def test_a_celery_process_the_system_checks_refuse_does_not_start(
    command: str, tmp_path: Any
) -> None:
    """Celery runs the system checks and ignores what they find, and logs any exception a
    signal handler raises and carries on: with a setting the checks call an error, the worker
    and beat (which run stale-lease recovery, the sagas and the sweeps) started anyway."""
    extra = ["--pool=solo"] if command == "worker" else ["-s", str(tmp_path / "schedule")]

    refused = refused_at_start(["-m", "celery", "-A", "config", command, *extra])

    assert "option 'p99_threshold_ms' must be a positive number" in refused


def test_an_asgi_server_the_system_checks_refuse_does_not_start() -> None:
    """The ASGI entry point (``config.asgi``, for servers such as uvicorn) ran no system
    checks, as the WSGI one did before them: loaded by a server, a setting they call an
    error was served (red: the application loaded, exit status 0)."""
    refused = refused_at_start(["-c", "import config.asgi"])

    assert "option 'p99_threshold_ms' must be a positive number" in refused


@pytest.mark.parametrize(
    "adapter", ["ordering.delivery.NoDeliveryPartnr", "couriers.Acme", "NoDeliveryPartner"]
)
def test_a_delivery_adapter_that_cannot_be_imported_stops_the_server(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory, adapter: str
) -> None:
    """DELIVERY_ADAPTER was read only when a cancel's saga reached its delivery step: a server
    with a misspelt one started, and every cancel failed that step, dead-lettered before its
    refund."""
    env = {**live_environment(), "DELIVERY_ADAPTER": adapter}

    with (
        pytest.raises(GunicornFailed, match=r"\(ordering.E001\) DELIVERY_ADAPTER names no class"),
        live_gunicorn(
            db_name=settings.DATABASES["default"]["NAME"],
            log_dir=tmp_path_factory.mktemp("no-delivery-adapter"),
            env=env,
            workers=1,
            ready_timeout=30,
        ),
    ):
        pass


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"CELERY_BROKER_URL": "memory://"}, id="memory-broker"),
        pytest.param({"CELERY_BROKER_URL": "memory://localhost/"}, id="memory-broker-host"),
        pytest.param({"CELERY_TASK_ALWAYS_EAGER": "1"}, id="eager"),
    ],
)
def test_production_refuses_the_demo_s_ways_to_run_tasks_without_a_broker(
    change: dict[str, str],
) -> None:
    """They started silently (red): a memory:// broker is each process's own, so no worker
    received what the web process sent; eager tasks ran inside the web request."""
    code, _, stderr = settings_with({**production_environment(), **change})

    assert code != 0
    assert (
        "ImproperlyConfigured: CELERY_BROKER_URL=memory:// and CELERY_TASK_ALWAYS_EAGER=1 run "
        "tasks without a broker"
    ) in stderr
    code, _, stderr = settings_with({"DEBUG": "1", **change})
    assert code == 0, stderr


def test_production_refuses_payments_that_confirm_themselves() -> None:
    """The demo's simulated provider confirms each payment by itself after
    SIMULATED_PAYMENT_AUTO_COMPLETE_SECONDS; off DEBUG it started silently (red), and every
    order was PAID with no money taken. 0, the default, and the demo still start."""
    env = {**production_environment(), "SIMULATED_PAYMENT_AUTO_COMPLETE_SECONDS": "2"}

    code, _, stderr = settings_with(env)

    assert code != 0
    assert (
        "ImproperlyConfigured: SIMULATED_PAYMENT_AUTO_COMPLETE_SECONDS has the simulated "
        "provider confirm every payment by itself"
    ) in stderr
    code, _, stderr = settings_with({**env, "SIMULATED_PAYMENT_AUTO_COMPLETE_SECONDS": "0"})
    assert code == 0, stderr
    code, _, stderr = settings_with({"DEBUG": "1", "SIMULATED_PAYMENT_AUTO_COMPLETE_SECONDS": "2"})
    assert code == 0, stderr


@pytest.mark.parametrize(
    "name, value",
    [
        pytest.param("IDEMPOTENCY_FORCE_SCRIPTS", '{"claim": "/tmp/claim.lua"}', id="scripts"),
        pytest.param(
            "IDEMPOTENCY_VIEW_EXECUTED_HOOK", "tests.support.view_executions.record", id="hook"
        ),
    ],
)
def test_production_refuses_the_test_suite_s_knobs(name: str, value: str) -> None:
    """Honoured off DEBUG (red): a forced Lua script ran for every tenant, past the versions
    staff activate after their contract run; the hook ran test code in every write."""
    code, _, stderr = settings_with({**production_environment(), name: value})

    assert code != 0
    assert f"ImproperlyConfigured: {name} is for the test suite: refused when DEBUG is off" in (
        stderr
    )
    code, _, stderr = settings_with({"DEBUG": "1", name: value})
    assert code == 0, stderr


@pytest.mark.parametrize(
    "cache_seconds, timeout, message",
    [
        pytest.param("35", "", "at most 15.0 s", id="past-the-default-timeout"),
        pytest.param("16", "", "at most 15.0 s", id="past-half-the-default-timeout"),
        pytest.param("50", "90", "at most 45.0 s", id="past-half-a-longer-timeout"),
    ],
)
def test_a_session_cache_an_erasure_cannot_wait_out_in_a_request_stops_the_server(
    cache_seconds: str, timeout: str, message: str
) -> None:
    """Erasing a diner (the dashboard's Privacy page, the admin) waits
    DINER_SESSION_STATE_CACHE_SECONDS inside the request; at 35 s gunicorn killed the request
    at its 30 s timeout half-way (a 500; the diner's sessions gone, the orders still showing
    the diner), and every later try the same: the erasure could never be finished."""
    env = {"DEBUG": "1", "DINER_SESSION_STATE_CACHE_SECONDS": cache_seconds}

    code, _, stderr = settings_with({**env, "GUNICORN_TIMEOUT": timeout})

    assert code != 0
    assert "ImproperlyConfigured: DINER_SESSION_STATE_CACHE_SECONDS must be " + message in stderr
    assert "GUNICORN_TIMEOUT" in stderr
    assert "and OFFBOARDING_DRAIN_SECONDS past it" in stderr  # whose default outlasts only 30 s


@pytest.mark.parametrize(
    "cache_seconds, timeout",
    [("0", ""), ("15", ""), ("15", "30"), ("45", "90"), ("3600", "7200")],
)
def test_a_session_cache_an_erasure_can_wait_out_is_taken(cache_seconds: str, timeout: str) -> None:
    env = {"DEBUG": "1", "DINER_SESSION_STATE_CACHE_SECONDS": cache_seconds}
    code, _, stderr = settings_with({**env, "GUNICORN_TIMEOUT": timeout})
    assert code == 0, stderr
