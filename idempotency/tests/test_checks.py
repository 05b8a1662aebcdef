"""``manage.py check`` names every missing or malformed engine setting, before any request."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.core import mail
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

import idempotency
from idempotency.checks import check_engine_settings
from idempotency.core.conf import DEFAULTS
from idempotency.stores import nodes
from idempotency.tests.conftest import idem_keys, post_note

# One malformed value per setting: a new setting without a check fails the test below.
MALFORMED: dict[str, tuple[Any, str]] = {
    "ENABLED": ("yes", "must be True or False"),
    "SCOPE_RESOLVER": ("no.such.module.resolve", "cannot be imported"),
    "REDIS_URL": ("127.0.0.1:6379", "is not a Redis URL"),
    "REDIS_CLIENT_FOR_TENANT": ("idempotency.core.conf.DEFAULTS", "is not callable"),
    "CHANNEL_PREFIX": ("", "must be a non-empty string"),
    "TTL_SECONDS": (-1, "must be a positive integer"),
    "LEASE_MS": (0, "must be a positive integer"),
    "IN_PROGRESS_RETRY_AFTER_SECONDS": (0, "must be a positive integer"),
    "AUTO_KEY_WINDOW_SECONDS": (-60, "must be a positive integer"),
    "MAX_STORED_REPLY_BYTES": ("64k", "must be a positive integer"),
    "REPLAY_HEADERS": ("Location", "must be a list of header names"),
    "LOCAL_CACHE_ENTRIES": (-5, "must be a positive integer"),
    "LOCAL_CACHE_BYTES": (0, "must be a positive integer"),
    "LOCAL_CACHE_TTL_SECONDS": (-1.0, "must be 0 or more"),
    "WAIT_POLL_MS": (0, "must be a positive integer"),
    "HASH_KEYS": ([(1, "short")], "shorter than 32 characters"),
    "AUDIT_STREAM_MAXLEN": (0, "must be a positive integer"),
    "AUDIT_DRAIN_BATCH": (-1, "must be a positive integer"),
    "AUDIT_FLUSH_SECONDS": (0, "must be more than 0"),
    "AUDIT_QUEUE_MAX": ("10k", "must be a positive integer"),
    "AUDIT_WRITE_ATTEMPTS": (0, "must be a positive integer"),
    "AUDIT_IN_BACKGROUND": (1, "must be True or False"),
    "HOT_TENANT_BUCKETS": ({"t1": 0}, "gives tenant 't1' 0 buckets"),
    "BREAKER": ({"p99_ms": 200}, "has an unknown option"),
    "SCRIPT_REFRESH_SECONDS": (-30, "must be more than 0"),
    "SCRIPT_CHANNEL_CLIENT": (42, "must be a dotted path to a function"),
    "ALL_REDIS_CLIENTS": ("idempotency.nothing.here", "cannot be imported"),
    "SCRIPT_PIN_ALLOWED": ("idempotency.core.conf.NOPE", "cannot be imported"),
    "TENANT_REGION": (["a", "b"], "must be a dotted path to a function"),
    "TENANT_LABELS": ("idempotency.no_such_module.labels", "cannot be imported"),
    "FORCE_SCRIPTS": ({"claim": "/nowhere/claim.lua"}, "names files that do not exist"),
    "RATE_LIMIT_PER_MINUTE": (-1, "must be None or a whole number"),
    "RATE_LIMIT_WINDOW_SECONDS": (0, "must be a positive integer"),
    "RATE_LIMIT_FOR_TENANT": ("builtins.nonexistent", "cannot be imported"),
    "RATE_LIMIT_TENANT_CEILING_PER_MINUTE": (2.5, "must be None or a whole number"),
    "RATE_LIMIT_CEILING_FOR_TENANT": (True, "must be a dotted path to a function"),
    "RATE_LIMIT_CEILING_SHARE": ("idempotency.no_such_module.share", "cannot be imported"),
    "RATE_LIMIT_CACHE_SECONDS": ("30", "must be a number"),
    "TOKEN_TTL_SECONDS": (-86400, "must be a positive integer"),
    "TOKEN_MAX_BATCH": (0, "must be a positive integer"),
    "TOKEN_QUOTA": (-100, "must be a positive integer"),
    "TOKEN_QUOTA_FOR_TENANT": ("builtins.nonexistent", "cannot be imported"),
    "TOKEN_QUOTA_SHARE": ("idempotency.no_such_module.share", "cannot be imported"),
    "USAGE_CACHE_SECONDS": (-60, "must be 0 or more"),
    "USAGE_SCAN_KEYS": (0, "must be a positive integer"),
    "INSTANCE_REGISTRY": ("true", "must be True or False"),
    "INSTANCE_HEARTBEAT_SECONDS": (0, "must be more than 0"),
    "INSTANCE_DEAD_AFTER_SECONDS": (-15, "must be more than 0"),
    "DATABASE_CLAIM_UNDER_REDIS": ("on", "must be True or False"),
    "VIEW_EXECUTED_HOOK": ("idempotency.tests.no_such_counter.count", "cannot be imported"),
    "REDACT_FOR_TENANT": ("builtins.nonexistent", "cannot be imported"),
    "RECORD_TTL_FOR_TENANT": (3600, "must be a dotted path to a function"),
    "TENANT_POLICY_CACHE_SECONDS": (-1, "must be 0 or more"),
    "AUDIT_RETENTION_DAYS": (0, "must be a positive integer"),
    "AUDIT_RETENTION_OVERRIDES": ("idempotency.core.conf.NOPE", "cannot be imported"),
    "PURGE_BATCH_SIZE": (-1000, "must be a positive integer"),
    "PROBLEM_DESCRIPTIONS": ({"403": "Not yours"}, "must be a dict of error statuses"),
}


def errors_with(settings: Any, **changes: Any) -> list[str]:
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, **changes}
    return [m.msg for m in run_checks() if m.id.startswith("idempotency.") and m.is_serious()]


def test_every_setting_has_a_malformed_case():
    assert set(MALFORMED) == set(DEFAULTS)


def test_the_test_project_is_well_configured(settings):
    assert errors_with(settings) == []


def test_a_redis_url_that_a_custom_hook_ignores_is_a_warning(settings):
    settings.IDEMPOTENCY = {
        **settings.IDEMPOTENCY,
        "REDIS_CLIENT_FOR_TENANT": "idempotency.tests.testapp.scope.from_headers",
    }
    assert [m.id for m in run_checks() if m.id.startswith("idempotency.")] == ["idempotency.W001"]


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_setting_is_named(settings, name):
    value, problem = MALFORMED[name]
    [message] = errors_with(settings, **{name: value})
    assert message.startswith(f'IDEMPOTENCY["{name}"] ') and problem in message


@pytest.mark.parametrize("header", ["Set-Cookie", "set-cookie"])
def test_replay_headers_naming_set_cookie_are_refused(settings, header):
    """The README's "never ``Set-Cookie``" held only while no one listed it (red: accepted)."""
    [message] = errors_with(settings, REPLAY_HEADERS=("Content-Type", header))
    assert message.startswith('IDEMPOTENCY["REPLAY_HEADERS"] ') and "Set-Cookie" in message


@pytest.mark.parametrize("name", ["TTL_SECONDS", "AUTO_KEY_WINDOW_SECONDS", "TOKEN_TTL_SECONDS"])
def test_a_period_past_ten_years_is_named(settings, name):
    """(red: the check passed, and every request overflowed the record's expiry date after
    its view ran)"""
    [message] = errors_with(settings, **{name: 10**12})
    assert message == (
        f'IDEMPOTENCY["{name}"] must be at most 316224000 seconds (ten years), not 1000000000000'
    )


@pytest.mark.parametrize(
    ("name", "unit", "longest"),
    [
        ("RATE_LIMIT_WINDOW_SECONDS", "seconds", 316_224_000),
        ("LEASE_MS", "milliseconds", 316_224_000_000),
        ("WAIT_POLL_MS", "milliseconds", 316_224_000_000),
    ],
)
def test_a_redis_expiry_or_a_wait_past_ten_years_is_named(settings, name, unit, longest):
    """(red: the check passed; Redis refuses such an expiry, ``value is not an integer or out
    of range``, and ``time.sleep`` such a wait, ``OverflowError``, on requests)"""
    assert errors_with(settings, **{name: longest}) == []
    [message] = errors_with(settings, **{name: 10**30})
    assert message == (
        f'IDEMPOTENCY["{name}"] must be at most {longest} {unit} (ten years), not {10**30}'
    )


def test_an_audit_retention_past_a_hundred_years_is_named(settings):
    """(red: the check passed, and every purge of audits stopped on ``OverflowError: date
    value out of range``, its cut-off date before year 1)"""
    [message] = errors_with(settings, AUDIT_RETENTION_DAYS=999_999)
    assert message == (
        'IDEMPOTENCY["AUDIT_RETENTION_DAYS"] must be at most 36600 days (a hundred years), '
        "not 999999"
    )


@pytest.mark.django_db(transaction=True)
def test_a_reply_cap_too_small_for_an_answer_without_its_body_is_named(settings, tenant):
    """(red: the check passed a cap of 40 bytes, under which even the status and headers of
    an answer kept without its body do not fit: every create ran, was rolled back and
    answered 500, ``ReplyTooLarge``, at each retry)"""
    [message] = errors_with(settings, MAX_STORED_REPLY_BYTES=40)
    assert message == (
        'IDEMPOTENCY["MAX_STORED_REPLY_BYTES"] must be at least 1024 bytes (an answer kept '
        "without its body keeps its status and replayed headers), not 40"
    )
    assert post_note(Client(raise_request_exception=False), tenant, key="k").status_code == 500
    assert errors_with(settings, MAX_STORED_REPLY_BYTES=1024) == []


@pytest.mark.parametrize("value", [None, 5, {"Location": 1}], ids=["none", "int", "dict"])
def test_replay_headers_that_are_not_a_list_are_named(settings, value):
    """(red: ``manage.py check`` stopped on a TypeError, ``'NoneType' object is not
    iterable``, naming no setting)"""
    [message] = errors_with(settings, REPLAY_HEADERS=value)
    assert message.startswith('IDEMPOTENCY["REPLAY_HEADERS"] must be a list of header names')


@pytest.mark.parametrize("debug", [True, False], ids=["debug", "off-debug"])
def test_engine_settings_that_are_not_a_dict_are_named(settings, debug):
    """(red off DEBUG: the HASH_KEYS check stopped ``manage.py check`` on an AttributeError,
    ``'list' object has no attribute 'get'``)"""
    settings.IDEMPOTENCY = []
    settings.DEBUG = debug
    serious = [m for m in run_checks() if m.id.startswith("idempotency.") and m.is_serious()]
    assert [(m.id, m.msg) for m in serious] == [
        ("idempotency.E001", "IDEMPOTENCY must be a dict of engine settings")
    ]


@pytest.mark.parametrize(
    "url",
    ["redis://127.0.0.1:6379/notanumber", "redis://127.0.0.1:6379/1/2", "redis://h:6379/-1"],
    ids=["word", "two-parts", "negative"],
)
def test_a_redis_url_whose_database_is_not_a_number_is_an_error(settings, url):
    """redis-py ignores such a path and uses database 0 (red: the check passed)."""
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "REDIS_URL": url}
    [error] = [m for m in run_checks() if m.id.startswith("idempotency.") and m.is_serious()]
    assert error.id == "idempotency.E003"
    assert error.msg.startswith('IDEMPOTENCY["REDIS_URL"] names the database')


@pytest.mark.parametrize(
    "url", ["redis://127.0.0.1:6379/12", "redis://127.0.0.1:6379", "unix:///tmp/redis.sock?db=3"]
)
def test_a_redis_url_with_a_database_number_or_none_passes(settings, url):
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "REDIS_URL": url}
    assert errors_with(settings) == []


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"SCOPE_RESOLVER": None}, 'IDEMPOTENCY["SCOPE_RESOLVER"] is not set'),
        (
            {"REDIS": None},
            'IDEMPOTENCY["REDIS"] is not an engine setting (did you mean "REDIS_URL"?)',
        ),
        ({"BREAKER": {"open_seconds": -1}}, "option 'open_seconds' must be a positive number"),
        (
            {"INSTANCE_HEARTBEAT_SECONDS": 20.0, "INSTANCE_DEAD_AFTER_SECONDS": 15.0},
            "must be longer than INSTANCE_HEARTBEAT_SECONDS",
        ),
    ],
    ids=["missing-resolver", "unknown-key", "breaker-value", "dead-before-heartbeat"],
)
def test_missing_unknown_and_inconsistent_settings_are_named(settings, changes, expected):
    [message] = errors_with(settings, **changes)
    assert expected in message


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("open_seconds", float("nan"), "must be a finite number more than 0"),
        ("p99_threshold_ms", float("inf"), "must be a finite number more than 0"),
        ("window_seconds", 1e309, "must be a finite number more than 0"),
        ("min_calls", 2.5, "must be a whole number more than 0"),
        ("probes_to_close", float("inf"), "must be a whole number more than 0"),
        ("error_rate_threshold", 2, "must be a share more than 0 and at most 1"),
    ],
    ids=["nan-open", "inf-threshold", "inf-window", "fractional-calls", "inf-probes", "rate-2"],
)
def test_a_breaker_option_no_breaker_can_work_with_is_named(settings, option, value, expected):
    """``IDEMPOTENCY_BREAKER`` is JSON, which reads ``NaN`` and ``Infinity`` (and 1e309 as
    infinity): each passed the check, being no number <= 0. A NaN ``open_seconds`` kept an
    opened breaker open for ever (no time is >= NaN), an infinite threshold or window or an
    error rate over 1 never opened it, and a fractional count is no count of calls."""
    [message] = errors_with(settings, BREAKER={option: value})
    assert f"option {option!r} {expected}" in message


@pytest.mark.parametrize(
    "name",
    [
        "AUDIT_FLUSH_SECONDS",
        "SCRIPT_REFRESH_SECONDS",
        "INSTANCE_DEAD_AFTER_SECONDS",
        "LOCAL_CACHE_TTL_SECONDS",
        "RATE_LIMIT_CACHE_SECONDS",
        "USAGE_CACHE_SECONDS",
        "TENANT_POLICY_CACHE_SECONDS",
    ],
)
@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_a_period_in_seconds_that_is_no_finite_number_is_named(settings, name, value):
    """A setting read from the environment with ``float()`` takes "nan" and "inf": each passed
    the check. An ``AUDIT_FLUSH_SECONDS`` of either killed the audit writer's thread at its
    first batch (``time.sleep`` refuses them), so first-execution counts and the audits
    neither Redis nor the database took piled up until dropped; a NaN refresh period or cache
    lifetime is never reached (no time is past NaN), an infinite one never ends."""
    [message] = errors_with(settings, **{name: value})
    assert message.startswith(f'IDEMPOTENCY["{name}"] ') and "must be a finite number" in message


def test_a_missing_scope_resolver_stops_manage_py_check(tmp_path: Path):
    (tmp_path / "host_settings.py").write_text(
        "from idempotency.tests.settings import *\n"
        'IDEMPOTENCY = {k: v for k, v in IDEMPOTENCY.items() if k != "SCOPE_RESOLVER"}\n'
    )
    run = subprocess.run(
        [sys.executable, "-m", "django", "check", "--settings", "host_settings"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1
    assert re.search(r'idempotency\.E003\) IDEMPOTENCY\["SCOPE_RESOLVER"\] is not set', run.stderr)


@pytest.mark.django_db
def test_without_scope_resolver_a_request_fails_with_the_setting_named(settings, tenant):
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "SCOPE_RESOLVER": None}
    with pytest.raises(ImproperlyConfigured, match=r'IDEMPOTENCY\["SCOPE_RESOLVER"\] is not set'):
        post_note(Client(), tenant, key="k")


@pytest.mark.django_db
def test_the_default_hook_never_reads_the_host_redis_url(settings, tenant):
    # the host has a REDIS_URL of its own (the test project does: it is the suite's Redis);
    # the engine, told nothing, runs database-only instead of borrowing it
    assert settings.REDIS_URL
    settings.IDEMPOTENCY = {k: v for k, v in settings.IDEMPOTENCY.items() if k != "REDIS_URL"}
    nodes.reset()
    assert post_note(Client(), tenant, key="k").status_code == 201
    assert post_note(Client(), tenant, key="k")["X-Idempotent-Result"] == "HIT"
    assert idem_keys() == []


@pytest.mark.django_db
def test_pub_sub_channels_carry_the_configured_prefix(settings, tenant):
    # given a process whose local cache holds two finished results, on prefix "site-<tenant>"
    prefix = f"site-{tenant}"
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "CHANNEL_PREFIX": prefix}
    nodes.reset()
    node = nodes.node_for(tenant)
    # a listener empties the cache when its subscription starts: let that happen first
    assert nodes._listeners[node.name].wait_subscribed(10)
    post_note(Client(), tenant, key="k1", text="one")
    post_note(Client(), tenant, key="k2", text="two")
    cache = nodes.local_cache()
    first, second = (k.decode() for k in idem_keys())
    assert cache.get(first) is not None and cache.get(second) is not None
    client = node.store.client
    assert client.pubsub_numsub(f"{prefix}:invalidate") == [(f"{prefix}:invalidate".encode(), 1)]
    # when another site on the same server announces one key on the default channel, then
    # this site announces the other on its own channel (one connection gets both in order)
    client.publish("idem:invalidate", first)
    client.publish(f"{prefix}:invalidate", second)
    deadline = time.monotonic() + 10
    while cache.get(second) is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    # then only this site's announcement reached this process
    assert cache.get(second) is None
    assert cache.get(first) is not None


def test_every_setting_the_engine_reads_is_in_defaults():
    package = Path(idempotency.__file__).parent
    read: set[str] = set()
    for source in package.rglob("*.py"):
        if "tests" in source.relative_to(package).parts:
            continue
        text = source.read_text("utf-8")
        read |= set(re.findall(r'(?:engine_setting|engine_hook|required_hook)\("(\w+)"\)', text))
        if source.name not in ("conf.py", "checks.py", "database_checks.py"):
            assert 'getattr(settings, "IDEMPOTENCY"' not in text, source
            # Django's own settings only: the tokens' signing keys
            assert set(re.findall(r"settings\.([A-Z_]+)", text)) <= {
                "SECRET_KEY",
                "SECRET_KEY_FALLBACKS",
            }, source
    assert read <= set(DEFAULTS), read - set(DEFAULTS)


@pytest.mark.parametrize(
    ("options", "warned"),
    [
        ({}, True),
        ({"transaction_mode": "DEFERRED"}, True),
        ({"transaction_mode": "IMMEDIATE"}, False),
    ],
    ids=["default", "deferred", "immediate"],
)
@pytest.mark.parametrize(
    "engine",
    ["django.db.backends.sqlite3", "idempotency.tests.testapp.host_sqlite_backend"],
    ids=["django", "host-backend"],
)
def test_sqlite_without_immediate_transactions_is_a_warning(settings, options, warned, engine):
    """The database claim on SQLite is the writer lock BEGIN IMMEDIATE takes (ADR 0005),
    whatever the backend's module is called (red for ``host-backend``: a SQLite backend whose
    ENGINE does not end in ``sqlite3``, as GeoDjango's spatialite, was never warned about)."""
    settings.DATABASES = {
        **settings.DATABASES,
        "default": {"ENGINE": engine, "NAME": ":memory:", "OPTIONS": options},
    }
    ids = [m.id for m in check_engine_settings()]
    assert ("idempotency.W002" in ids) is warned


def test_off_debug_keyed_hashes_need_a_secret_of_their_own(settings: Any, monkeypatch) -> None:
    """As a site refuses to run without SECRET_KEY: no HASH_KEYS off DEBUG is an error."""
    monkeypatch.delattr(mail, "outbox")  # a site as it is deployed, not a test run
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "HASH_KEYS": []}
    settings.DEBUG = False
    [refusal] = [m for m in run_checks() if m.id == "idempotency.E004"]
    assert refusal.is_serious() and 'IDEMPOTENCY["HASH_KEYS"] is empty' in refusal.msg
    settings.DEBUG = True
    assert [m for m in run_checks() if m.id == "idempotency.E004"] == []
    settings.DEBUG = False
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "HASH_KEYS": [(1, "s" * 40)]}
    assert [m for m in run_checks() if m.id == "idempotency.E004"] == []


def test_a_form_page_that_names_no_url_is_named_before_any_request(monkeypatch):
    """(red: ``form_page="note-froms"`` passed every check, and a refused form that arrived
    without a ``Referer`` was a 500, ``NoReverseMatch``, in place of the form with its message)"""
    from django.http import HttpResponse

    from idempotency.web import forms

    monkeypatch.setattr(forms, "NAMED_FORM_PAGES", list(forms.NAMED_FORM_PAGES))

    def save_note(request):
        return HttpResponse()

    def with_errors() -> list[str]:
        return [m.msg for m in run_checks() if m.id == "idempotency.E006"]

    assert with_errors() == []  # the test app's own pages ("note-form") resolve
    forms.idempotent_form(form_page="/notes/form/")(save_note)  # a path is taken as is
    assert with_errors() == []
    forms.idempotent_form(form_page="note-froms")(save_note)
    assert with_errors() == [
        "@idempotent_form(form_page='note-froms') of "
        f"{__name__}.test_a_form_page_that_names_no_url_is_named_before_any_request."
        "<locals>.save_note names no URL"
    ]


def test_a_form_page_given_lazily_or_as_no_page_is_named_before_any_request(monkeypatch):
    """``form_page=reverse_lazy("note-froms")``, Django's idiom for a URL named in a decorator,
    passed the check that a name does (only strings were checked), and ``form_page=5`` passed
    the decorator: either was a 500 at the first refused form without a ``Referer``."""
    from django.http import HttpResponse
    from django.urls import reverse_lazy

    from idempotency.web import forms

    monkeypatch.setattr(forms, "NAMED_FORM_PAGES", list(forms.NAMED_FORM_PAGES))

    def save_note(request):
        return HttpResponse()

    forms.idempotent_form(form_page=reverse_lazy("note-form"))(save_note)
    assert [m for m in run_checks() if m.id == "idempotency.E006"] == []
    forms.idempotent_form(form_page=reverse_lazy("note-froms"))(save_note)
    [message] = [m.msg for m in run_checks() if m.id == "idempotency.E006"]
    assert "form_page=reverse_lazy('note-froms')" in message and "names no URL" in message
    with pytest.raises(ImproperlyConfigured, match=r"form_page of .*save_note .* not 5"):
        forms.idempotent_form(form_page=5)(save_note)


def test_an_async_class_based_form_view_is_an_error_before_any_request(settings):
    """``@method_decorator(idempotent_form(...), name="post")`` applies the decorator at each
    call, so an ``async def post`` passed the import and every POST was a 500
    (``ImproperlyConfigured``); the check names it before any request (red: no message)."""
    assert [m for m in run_checks() if m.id == "idempotency.E009"] == []
    settings.ROOT_URLCONF = "idempotency.tests.testapp.async_form_urls"
    [error] = [m for m in run_checks() if m.id == "idempotency.E009"]
    assert error.is_serious()
    assert error.msg.startswith("@idempotent_form of AsyncNoteFormView.post (notes/form/async/)")
    assert "async view" in error.msg


@pytest.mark.django_db
def test_a_local_cache_ttl_of_0_passes_the_check_and_keeps_no_result(settings, tenant):
    """``LOCAL_CACHE_TTL_SECONDS = 0`` ("keep none in the process") passed ``manage.py check``,
    then the cache refused it when first built: every write under Redis answered 500."""
    assert errors_with(settings, LOCAL_CACHE_TTL_SECONDS=0) == []
    nodes.reset()
    nodes.local_cache.cache_clear()
    try:
        first = post_note(Client(), tenant, key="k")
        retry = post_note(Client(), tenant, key="k")
        assert (first.status_code, retry.status_code) == (201, 201)
        assert retry["Idempotent-Replayed"] == "true" and retry.content == first.content
        assert nodes.local_cache().bytes_used == 0 and len(nodes.local_cache()) == 0
    finally:
        nodes.local_cache.cache_clear()


def test_a_test_run_needs_no_hash_keys_of_its_own(settings: Any) -> None:
    """Django's test runner turns DEBUG off whatever the settings say: the README's quick start
    (DEBUG on, ``HASH_KEYS`` left out) could not run ``manage.py test`` at all, its checks
    stopping on E004 "while DEBUG is off" (red). A test run is no deployment."""
    assert hasattr(mail, "outbox")  # Django's test environment, as the runner sets it up
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "HASH_KEYS": []}
    settings.DEBUG = False
    assert [m for m in run_checks() if m.id == "idempotency.E004"] == []
