"""System checks of ``settings.IDEMPOTENCY`` (``manage.py check``, and every command that runs
checks: ``migrate``, ``runserver``…).

A wrong setting should stop a deploy, not the first request that needs it: an unset
``SCOPE_RESOLVER`` would otherwise surface as an error inside a customer's write, a typo in a
key (``"REDIS"`` for ``"REDIS_URL"``) would silently fall back to a default, and a negative TTL
would store results that expire at once. Every message names the setting.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.utils.module_loading import import_string
from redis.connection import parse_url

from idempotency.core.conf import DEFAULTS, MAX_AUDIT_RETENTION_DAYS, MAX_TTL_SECONDS, a_test_run
from idempotency.core.transactions import backend_vendor
from idempotency.stores.breaker import CircuitBreaker

Problem = str  # what is wrong, as a sentence that follows the setting's name

HOOKS = (
    "SCOPE_RESOLVER",
    "REDIS_CLIENT_FOR_TENANT",
    "SCRIPT_CHANNEL_CLIENT",
    "ALL_REDIS_CLIENTS",
    "SCRIPT_PIN_ALLOWED",
    "TENANT_REGION",
    "TENANT_LABELS",
    "RATE_LIMIT_FOR_TENANT",
    "RATE_LIMIT_CEILING_FOR_TENANT",
    "RATE_LIMIT_CEILING_SHARE",
    "TOKEN_QUOTA_FOR_TENANT",
    "TOKEN_QUOTA_SHARE",
    "VIEW_EXECUTED_HOOK",
    "REDACT_FOR_TENANT",
    "RECORD_TTL_FOR_TENANT",
    "AUDIT_RETENTION_OVERRIDES",
)
REQUIRED = ("SCOPE_RESOLVER",)
MIN_STORED_REPLY_BYTES = 1024
POSITIVE_INTS = (
    "TTL_SECONDS",
    "LEASE_MS",
    "IN_PROGRESS_RETRY_AFTER_SECONDS",
    "AUTO_KEY_WINDOW_SECONDS",
    "MAX_STORED_REPLY_BYTES",
    "LOCAL_CACHE_ENTRIES",
    "LOCAL_CACHE_BYTES",
    "WAIT_POLL_MS",
    "RATE_LIMIT_WINDOW_SECONDS",
    "TOKEN_TTL_SECONDS",
    "TOKEN_MAX_BATCH",
    "TOKEN_QUOTA",
    "USAGE_SCAN_KEYS",
    "AUDIT_RETENTION_DAYS",
    "PURGE_BATCH_SIZE",
    "AUDIT_STREAM_MAXLEN",
    "AUDIT_DRAIN_BATCH",
    "AUDIT_QUEUE_MAX",
    "AUDIT_WRITE_ATTEMPTS",
)
# periods added to a date: more than MAX_TTL_SECONDS overflows it
PERIODS = ("TTL_SECONDS", "AUTO_KEY_WINDOW_SECONDS", "TOKEN_TTL_SECONDS")
# periods Redis is given as an expiry, or a process sleeps for: Redis refuses an expiry past a
# 64-bit count of milliseconds ("value is not an integer or out of range", a Redis error on
# every request) and ``time.sleep`` one past ``time_t`` (``OverflowError``); held to the
# same ten years
SECOND_PERIODS = ("RATE_LIMIT_WINDOW_SECONDS",)
MILLISECOND_PERIODS = ("LEASE_MS", "WAIT_POLL_MS")
POSITIVE_NUMBERS = (
    "AUDIT_FLUSH_SECONDS",
    "SCRIPT_REFRESH_SECONDS",
    "INSTANCE_HEARTBEAT_SECONDS",
    "INSTANCE_DEAD_AFTER_SECONDS",
)
NON_NEGATIVE_NUMBERS = (
    "LOCAL_CACHE_TTL_SECONDS",
    "RATE_LIMIT_CACHE_SECONDS",
    "USAGE_CACHE_SECONDS",
    "TENANT_POLICY_CACHE_SECONDS",
)
BOOLEANS = ("ENABLED", "AUDIT_IN_BACKGROUND", "INSTANCE_REGISTRY", "DATABASE_CLAIM_UNDER_REDIS")


@register(Tags.compatibility)
def check_engine_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    configured = getattr(settings, "IDEMPOTENCY", {})
    if not isinstance(configured, Mapping):
        return [_error("", "must be a dict of engine settings", code="E001")]
    messages: list[CheckMessage] = [
        _error(name, f"is not an engine setting{_did_you_mean(name)}", code="E002")
        for name in configured
        if name not in DEFAULTS
    ]
    values = {**DEFAULTS, **configured}
    for name, problem in _problems(values):
        messages.append(_error(name, problem, code="E003"))
    if (
        configured.get("REDIS_URL")
        and values["REDIS_CLIENT_FOR_TENANT"] != DEFAULTS["REDIS_CLIENT_FOR_TENANT"]
    ):
        messages.append(
            Warning(
                'IDEMPOTENCY["REDIS_URL"] is set but REDIS_CLIENT_FOR_TENANT is not the default '
                "hook, which alone reads it: the engine ignores REDIS_URL.",
                id="idempotency.W001",
            )
        )
    messages.extend(_database_claim_warnings())
    return messages


def _database_claim_warnings() -> list[CheckMessage]:
    """The database claim on SQLite is the writer lock a transaction takes when it begins
    (ADR 0005); a deferred transaction takes it only at its first write, after the view ran."""
    database = settings.DATABASES.get("default", {})
    engine = str(database.get("ENGINE") or "")
    if not engine or backend_vendor(engine) != "sqlite":
        return []
    if str(database.get("OPTIONS", {}).get("transaction_mode", "")).upper() == "IMMEDIATE":
        return []
    return [
        Warning(
            'DATABASES["default"] is SQLite without OPTIONS["transaction_mode"] = "IMMEDIATE": '
            "without Redis, concurrent duplicates may each run the view before the record's "
            "unique index rolls all but one back.",
            hint='Set DATABASES["default"]["OPTIONS"]["transaction_mode"] = "IMMEDIATE".',
            id="idempotency.W002",
        )
    ]


def _problems(values: Mapping[str, Any]) -> list[tuple[str, Problem]]:
    found: list[tuple[str, Problem]] = []
    for name in HOOKS:
        problem = _hook_problem(values[name], required=name in REQUIRED)
        if problem:
            found.append((name, problem))
    checks: list[tuple[tuple[str, ...], Callable[[Any], Problem | None]]] = [
        (POSITIVE_INTS, _positive_int),
        (PERIODS + SECOND_PERIODS, _period),
        (MILLISECOND_PERIODS, _millisecond_period),
        (("AUDIT_RETENTION_DAYS",), _audit_retention),
        (POSITIVE_NUMBERS, lambda v: _number(v, minimum_exclusive=0)),
        (NON_NEGATIVE_NUMBERS, lambda v: _number(v, minimum=0)),
        (BOOLEANS, lambda v: None if isinstance(v, bool) else "must be True or False"),
        (("REDIS_URL",), _redis_url),
        (("CHANNEL_PREFIX",), _channel_prefix),
        (("MAX_STORED_REPLY_BYTES",), _reply_cap),
        (("REPLAY_HEADERS",), _header_names),
        (("HOT_TENANT_BUCKETS",), _buckets),
        (("BREAKER",), _breaker),
        (("FORCE_SCRIPTS",), _forced_scripts),
        (("RATE_LIMIT_PER_MINUTE", "RATE_LIMIT_TENANT_CEILING_PER_MINUTE"), _optional_rate),
        (("HASH_KEYS",), _hash_keys),
        (("PROBLEM_DESCRIPTIONS",), _problem_descriptions),
    ]
    for names, check in checks:
        for name in names:
            problem = check(values[name])
            if problem:
                found.append((name, problem))
    heartbeat, dead_after = (
        values["INSTANCE_HEARTBEAT_SECONDS"],
        values["INSTANCE_DEAD_AFTER_SECONDS"],
    )
    if (
        _number(heartbeat, minimum_exclusive=0) is None
        and _number(dead_after, minimum_exclusive=0) is None
        and dead_after <= heartbeat
    ):
        found.append(
            (
                "INSTANCE_DEAD_AFTER_SECONDS",
                f"({dead_after}) must be longer than INSTANCE_HEARTBEAT_SECONDS ({heartbeat}): "
                "every live process would look dead",
            )
        )
    return found


def _problem_descriptions(value: Any) -> Problem | None:
    if not isinstance(value, Mapping) or not all(
        type(status) is int and 400 <= status <= 599 and isinstance(text, str) and text.strip()
        for status, text in value.items()
    ):
        return "must be a dict of error statuses (400-599) to non-empty descriptions"
    return None


@register(Tags.security, deploy=False)
def check_hash_keys_off_debug(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Off DEBUG the keyed hashes need a secret of their own (as SECRET_KEY must be set):
    without one they fall back to a key derived from SECRET_KEY, meant for development."""
    configured = getattr(settings, "IDEMPOTENCY", {})
    if not isinstance(configured, Mapping):
        return []  # idempotency.E001 names that
    # a test run: the runner turns DEBUG off whatever the settings say, so a project in
    # development (DEBUG on, no HASH_KEYS) could not run `manage.py test` at all; a test run is
    # no deployment, and its hashes are thrown away
    if settings.DEBUG or configured.get("HASH_KEYS") or a_test_run():
        return []
    return [
        Error(
            'IDEMPOTENCY["HASH_KEYS"] is empty while DEBUG is off: fingerprints, field hashes '
            "and the keys in audits and logs would be keyed by a development fallback",
            hint='Set it to [(1, "<a long random secret>")] (newest key first).',
            id="idempotency.E004",
        )
    ]


def _hash_keys(value: Any) -> Problem | None:
    if not isinstance(value, list | tuple):
        return f"must be a list of (key_id, secret) pairs, not {value!r}"
    ids = []
    for entry in value:
        if not (isinstance(entry, list | tuple) and len(entry) == 2):
            return f"has {entry!r}, which is not a (key_id, secret) pair"
        key_id, secret = entry
        if isinstance(key_id, bool) or not isinstance(key_id, int) or not 1 <= key_id <= 327:
            return f"has key id {key_id!r}: ids are integers 1..327"
        if not isinstance(secret, str) or len(secret) < 32:
            return f"has a secret for key {key_id} shorter than 32 characters"
        ids.append(key_id)
    if len(set(ids)) != len(ids):
        return "lists a key id twice"
    return None


def _error(name: str, problem: str, *, code: str) -> Error:
    where = f'IDEMPOTENCY["{name}"]' if name else "IDEMPOTENCY"
    return Error(
        f"{where} {problem}",
        hint="The engine's settings are listed in idempotency/README.md.",
        id=f"idempotency.{code}",
    )


def _did_you_mean(name: str) -> str:
    close = difflib.get_close_matches(str(name), DEFAULTS, n=1)
    return f' (did you mean "{close[0]}"?)' if close else ""


def _hook_problem(value: Any, *, required: bool) -> Problem | None:
    if value in (None, ""):
        return "is not set: the engine cannot scope a key without it" if required else None
    if not isinstance(value, str):
        return f"must be a dotted path to a function, not {value!r}"
    try:
        hook = import_string(value)
    except ImportError as exc:
        return f"cannot be imported ({value!r}): {exc}"
    if not callable(hook):
        return f"names {value!r}, which is not callable"
    return None


def _positive_int(value: Any) -> Problem | None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return f"must be a positive integer, not {value!r}"
    return None


def _reply_cap(value: Any) -> Problem | None:
    """A reply over the cap is kept without its body (idempotency/core/replies.py), but its
    status and replayed headers are kept still; a cap they do not fit in cannot keep even
    that, and such an answer is rolled back and answered 500 at every try. A cap of 1 KiB
    holds an answer's status, its ``Location``, ``ETag``, ``Last-Modified`` and
    ``Content-Language`` (about 300 bytes for the usual values) with room to spare."""
    if _positive_int(value) is None and value < MIN_STORED_REPLY_BYTES:
        return (
            f"must be at least {MIN_STORED_REPLY_BYTES} bytes (an answer kept without its body "
            f"keeps its status and replayed headers), not {value!r}"
        )
    return None


def _period(value: Any) -> Problem | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > MAX_TTL_SECONDS:
        return f"must be at most {MAX_TTL_SECONDS} seconds (ten years), not {value!r}"
    return None


def _millisecond_period(value: Any) -> Problem | None:
    longest = MAX_TTL_SECONDS * 1000
    if isinstance(value, int) and not isinstance(value, bool) and value > longest:
        return f"must be at most {longest} milliseconds (ten years), not {value!r}"
    return None


def _audit_retention(value: Any) -> Problem | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > MAX_AUDIT_RETENTION_DAYS:
        return f"must be at most {MAX_AUDIT_RETENTION_DAYS} days (a hundred years), not {value!r}"
    return None


def _number(
    value: Any, *, minimum: float | None = None, minimum_exclusive: float | None = None
) -> Problem | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"must be a number, not {value!r}"
    if not math.isfinite(value):
        # float() reads "nan" and "inf" from the environment: a NaN period is never reached
        # (no time is past it), an infinite one never ends, and time.sleep() refuses both
        return f"must be a finite number, not {value!r}"
    if minimum is not None and value < minimum:
        return f"must be {minimum} or more, not {value!r}"
    if minimum_exclusive is not None and value <= minimum_exclusive:
        return f"must be more than {minimum_exclusive}, not {value!r}"
    return None


def _optional_rate(value: Any) -> Problem | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return f"must be None or a whole number of requests per minute, not {value!r}"
    return None


def _redis_url(value: Any) -> Problem | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        return f"must be a redis:// URL or None (database-only), not {value!r}"
    try:
        parse_url(value)
    except ValueError as exc:
        return f"is not a Redis URL ({value!r}): {exc}"
    database = urlsplit(value).path.removeprefix("/")
    if urlsplit(value).scheme != "unix" and database and not database.isdigit():
        # redis-py ignores a path that is not a number and silently uses database 0
        return f"names the database {database!r} ({value!r}): the path must be a number, e.g. /0"
    return None


def _channel_prefix(value: Any) -> Problem | None:
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        return f"must be a non-empty string without spaces, not {value!r}"
    return None


def _header_names(value: Any) -> Problem | None:
    if not isinstance(value, list | tuple | set | frozenset) or not all(
        isinstance(h, str) and h for h in value
    ):
        return f"must be a list of header names, not {value!r}"
    if any(h.lower() == "set-cookie" for h in value):
        # a replay goes to whoever sends the key again: a session cookie kept with the first
        # answer would be handed to every retry, and the README promises it never is
        return "must not name Set-Cookie: a replay never repeats a cookie"
    return None


def _buckets(value: Any) -> Problem | None:
    if not isinstance(value, Mapping):
        return f"must be a dict of tenant -> number of buckets, not {value!r}"
    for tenant, buckets in value.items():
        if _positive_int(buckets):
            return f"gives tenant {tenant!r} {buckets!r} buckets; it must be a positive integer"
    return None


def _breaker(value: Any) -> Problem | None:
    if not isinstance(value, Mapping):
        return f"must be a dict of circuit-breaker options, not {value!r}"
    try:
        CircuitBreaker("settings-check", **value)
    except TypeError as exc:
        return f"has an unknown option: {exc}"
    for option, number in value.items():
        if isinstance(number, bool) or not isinstance(number, int | float) or number <= 0:
            return f"option {option!r} must be a positive number, not {number!r}"
        if option in _BREAKER_COUNTS and not isinstance(number, int):
            return f"option {option!r} must be a whole number more than 0, not {number!r}"
        if not math.isfinite(number):
            # JSON settings read NaN and Infinity: a NaN open_seconds kept an opened breaker
            # open for ever (no time is >= NaN), an infinite threshold never opened it
            return f"option {option!r} must be a finite number more than 0, not {number!r}"
        if option == "error_rate_threshold" and number > 1:
            return (
                f"option {option!r} must be a share more than 0 and at most 1 (of the calls "
                f"that failed; more never opens the breaker), not {number!r}"
            )
    return None


# The breaker's options that count calls or samples: a fraction of one is no count.
_BREAKER_COUNTS = ("min_calls", "probes_to_close", "max_samples")


def _forced_scripts(value: Any) -> Problem | None:
    if not isinstance(value, Mapping):
        return f"must be a dict of script name -> file, not {value!r}"
    missing = [path for path in value.values() if not Path(str(path)).is_file()]
    return f"names files that do not exist: {missing}" if missing else None
