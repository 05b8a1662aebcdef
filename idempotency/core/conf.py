"""The engine's settings (``settings.IDEMPOTENCY``) and per-endpoint policies.

Every setting the engine reads is a key of :data:`DEFAULTS` (the README's settings table lists
them, and a test keeps the two equal); ``manage.py check`` refuses unknown, missing or malformed
ones (:mod:`idempotency.checks`). Defaults follow the design: 72 h result retention, a 30 s
in-progress lease, a 60 s window for automatic keys; 600 writes per principal per minute;
pre-issued tokens live 24 h. Redis is used when ``REDIS_URL`` names a server (or a
``REDIS_CLIENT_FOR_TENANT`` hook returns a client for the tenant); otherwise the engine runs
database-only with the same contract.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from django.conf import settings
from django.core import mail
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

DEFAULTS: dict[str, Any] = {
    # False switches the engine off entirely (benchmarks compare with and without it)
    "ENABLED": True,
    # required. dotted path: (request) -> (tenant_key, principal) | None; the function's None
    # means "not idempotent here" (e.g. an anonymous caller)
    "SCOPE_RESOLVER": None,
    # the one Redis server of the default hooks below, e.g. "redis://127.0.0.1:6379/0";
    # None: no Redis, the engine runs database-only
    "REDIS_URL": None,
    # dotted path: (tenant_key) -> redis.Redis | RedisCluster | None (None: database-only for
    # that tenant); the default serves every tenant from REDIS_URL. None: database-only.
    "REDIS_CLIENT_FOR_TENANT": "idempotency.stores.redis_clients.client_for_tenant",
    # first part of the engine's pub/sub channel names (<prefix>:invalidate, <prefix>:scripts):
    # channels are shared by every database of a Redis server, so two sites on one server
    # need two prefixes
    "CHANNEL_PREFIX": "idem",
    "TTL_SECONDS": 72 * 3600,
    "LEASE_MS": 30_000,
    # The most seconds a 409 IN_PROGRESS asks a client to wait (Retry-After): the first request
    # usually ends well within it, and the lease left only bounds it
    "IN_PROGRESS_RETRY_AFTER_SECONDS": 1,
    "AUTO_KEY_WINDOW_SECONDS": 60,
    # {status: text}: a host's own description of an error status in the OpenAPI schema of
    # its endpoints (idempotency/web/openapi.problems), over the engine's general wording
    "PROBLEM_DESCRIPTIONS": {},
    # Largest stored reply, status and headers included (idempotency/core/replies.py)
    "MAX_STORED_REPLY_BYTES": 64 * 1024,
    "REPLAY_HEADERS": ("Content-Type", "Location", "ETag", "Last-Modified", "Content-Language"),
    "LOCAL_CACHE_ENTRIES": 10_000,
    "LOCAL_CACHE_BYTES": 64 * 1024 * 1024,  # per process, besides the entry count
    "LOCAL_CACHE_TTL_SECONDS": 60.0,
    "WAIT_POLL_MS": 50,
    # Audits (idempotency/stores/audit_stream.py): each node's Redis stream keeps at most about
    # this many entries not yet drained into the database; a drain copies at most
    # AUDIT_DRAIN_BATCH entries per transaction
    "AUDIT_STREAM_MAXLEN": 1_000_000,
    "AUDIT_DRAIN_BATCH": 1000,
    # The in-process fallback (idempotency/stores/audit_pending.py): written every
    # AUDIT_FLUSH_SECONDS, at most AUDIT_QUEUE_MAX events waiting, each tried
    # AUDIT_WRITE_ATTEMPTS times
    "AUDIT_FLUSH_SECONDS": 1.0,
    "AUDIT_QUEUE_MAX": 10_000,
    "AUDIT_WRITE_ATTEMPTS": 5,
    # False: the fallback waits until someone calls drain_audits() (tests)
    "AUDIT_IN_BACKGROUND": True,
    "HOT_TENANT_BUCKETS": {},  # tenant_key -> number of sub-buckets
    # CircuitBreaker keyword arguments (idempotency/stores/breaker.py): window_seconds, min_calls,
    # p99_threshold_ms, error_rate_threshold, open_seconds, probes_to_close
    "BREAKER": {},
    # Lua script versions (idempotency/scripts/registry.py)
    "SCRIPT_REFRESH_SECONDS": 30.0,
    # dotted path: () -> client for the <prefix>:scripts channel (None: no live reload)
    "SCRIPT_CHANNEL_CLIENT": "idempotency.stores.redis_clients.script_channel_client",
    # dotted path: () -> every node's client (SCRIPT LOAD when a version is promoted)
    "ALL_REDIS_CLIENTS": "idempotency.stores.redis_clients.all_clients",
    "SCRIPT_PIN_ALLOWED": None,  # dotted path: (request) -> may X-Lua-Version pin a version?
    "TENANT_REGION": None,  # dotted path: (tenant_key) -> region | None
    "TENANT_LABELS": None,  # dotted path: (tenant_keys) -> {tenant_key: name} (admin lists)
    "FORCE_SCRIPTS": {},  # {"claim": "/path/claim.lua"}: contract tests of a candidate
    # Write rate limit (seed 2.1, idempotency/core/ratelimit.py): requests per principal per minute
    # on the endpoints that carry the throttle; None (or 0) means no default limit. Counted in fixed
    # windows of RATE_LIMIT_WINDOW_SECONDS (the per-minute rate is scaled to the window).
    "RATE_LIMIT_PER_MINUTE": 600,
    "RATE_LIMIT_WINDOW_SECONDS": 60,
    # dotted path: (tenant_key) -> per-minute rate | None (None: RATE_LIMIT_PER_MINUTE)
    "RATE_LIMIT_FOR_TENANT": None,
    # All principals of a tenant together, per minute (None: no ceiling), and the dotted path
    # (tenant_key) -> the tenant's own ceiling | None
    "RATE_LIMIT_TENANT_CEILING_PER_MINUTE": None,
    "RATE_LIMIT_CEILING_FOR_TENANT": None,
    # dotted path: (request) -> the share (0 < share <= 1) of the tenant's ceiling that request
    # may fill, or None for all of it; it is refused once the tenant's counter reaches
    # ceil(ceiling * share). None: every request may fill the whole ceiling
    "RATE_LIMIT_CEILING_SHARE": None,
    # how long a process keeps a tenant's looked-up rate before asking again
    "RATE_LIMIT_CACHE_SECONDS": 30.0,
    # Pre-issued one-time tokens (seed 2.4, idempotency/core/tokens.py)
    "TOKEN_TTL_SECONDS": 24 * 3600,
    "TOKEN_MAX_BATCH": 1000,
    # most tokens outstanding (issued, neither used nor expired) per tenant
    "TOKEN_QUOTA": 100_000,
    # dotted path: (tenant_key) -> the tenant's own quota | None (None: TOKEN_QUOTA)
    "TOKEN_QUOTA_FOR_TENANT": None,
    # dotted path: (request) -> the share (0 < share <= 1) of the tenant's quota that request
    # may fill, or None for all of it; issuing is refused once it would bring the tenant's
    # outstanding count above ceil(quota * share). None: every request may fill the whole quota
    "TOKEN_QUOTA_SHARE": None,
    # Per-tenant usage in /metrics (idempotency/stores/usage.py): how long a process keeps its
    # count of records, and how many Redis keys its census reads further per scrape
    "USAGE_CACHE_SECONDS": 60.0,
    "USAGE_SCAN_KEYS": 10_000,
    # Instance registry (idempotency/stores/instances.py): every process that claims keys
    # heartbeats its id, so the claims of a dead one can be released before their lease ends.
    # False: claims carry no instance id and only their lease frees them.
    "INSTANCE_REGISTRY": True,
    "INSTANCE_HEARTBEAT_SECONDS": 5.0,
    "INSTANCE_DEAD_AFTER_SECONDS": 15.0,
    # The database claim (ADR 0005) is taken whenever Redis did not claim the key. True: also
    # under a Redis claim (one more statement per first execution), so that a duplicate that
    # falls back to the database because Redis died mid-run waits for the run instead of
    # repeating it.
    "DATABASE_CLAIM_UNDER_REDIS": True,
    # Tests and diagnostics only: dotted path called as hook(tenant=, endpoint=, key=) each time
    # the engine runs a view body (before it runs; a run rolled back later still counts)
    "VIEW_EXECUTED_HOOK": None,
    # Data protection (idempotency/core/redaction.py, idempotency/core/tenant_policy.py,
    # idempotency/purge.py). dotted path: (tenant_key) -> JSON paths the tenant redacts from
    # stored replies on every endpoint, besides the endpoint's own ``redact``
    "REDACT_FOR_TENANT": None,
    # dotted path: (tenant_key) -> seconds a finished result replays | None (None: the
    # endpoint's ttl_seconds, else TTL_SECONDS)
    "RECORD_TTL_FOR_TENANT": None,
    # how long a process keeps a tenant's looked-up redaction paths and record TTL
    "TENANT_POLICY_CACHE_SECONDS": 30.0,
    # days a duplicate-hit audit is kept, and the dotted path () -> {tenant_key: days} of the
    # tenants that keep theirs for another number of days
    "AUDIT_RETENTION_DAYS": 30,
    "AUDIT_RETENTION_OVERRIDES": None,
    # rows one DELETE removes when purging expired records and audits
    "PURGE_BATCH_SIZE": 1000,
    # Keyed hashes (idempotency/core/hashing.py): [(key_id, secret), ...], newest first. New
    # fingerprints, field hashes and the keys in audits and logs use the first; all verify.
    # Empty: a key derived from SECRET_KEY, refused off DEBUG by `manage.py check`.
    "HASH_KEYS": (),
}


def engine_setting(name: str) -> Any:
    return getattr(settings, "IDEMPOTENCY", {}).get(name, DEFAULTS[name])


def a_test_run() -> bool:
    """Whether Django's test environment is set up (Django's test runner and pytest-django set
    it up, and give ``django.core.mail`` its ``outbox``): a test run is no deployment. Its
    database is a throwaway one that the runner drops at the end while still naming it, and
    the runner turns DEBUG off whatever the settings say."""
    return hasattr(mail, "outbox")


def engine_hook(name: str) -> Callable[..., Any] | None:
    """The function a dotted-path setting names (REDIS_CLIENT_FOR_TENANT, TENANT_REGION…), or
    None when the setting is empty. Imports are cached: these run on every request."""
    path = engine_setting(name)
    return _imported(path) if path else None


def required_hook(name: str) -> Callable[..., Any]:
    """Like :func:`engine_hook` for a setting the engine cannot work without (SCOPE_RESOLVER):
    unset, it is a configuration error that names the setting (``manage.py check`` reports
    it before the first request)."""
    hook = engine_hook(name)
    if hook is None:
        raise ImproperlyConfigured(
            f'IDEMPOTENCY["{name}"] is not set: see the settings table in idempotency/README.md'
        )
    return hook


def caller_scope(request: Any) -> tuple[str, str] | None:
    """The ``SCOPE_RESOLVER``'s answer for ``request``: None (not idempotent), or its
    (tenant, principal) pair of strings. Anything else is the host's resolver at fault, and is
    named so (``ImproperlyConfigured``) rather than failing further on with an error that
    names nothing: a principal given as ``request.user.pk``, an int, was ``TypeError: argument
    of type 'int' is not iterable``. The message gives the answer's shape, not its values (a
    principal may be personal data)."""
    identity = required_hook("SCOPE_RESOLVER")(request)
    if identity is None:
        return None
    if isinstance(identity, tuple | list) and len(identity) == 2:
        tenant, principal = identity
        if isinstance(tenant, str) and isinstance(principal, str):
            return tenant, principal
    raise ImproperlyConfigured(
        'IDEMPOTENCY["SCOPE_RESOLVER"] must answer None or a (tenant, principal) pair of '
        f"strings, not {_shape(identity)}"
    )


def _shape(value: Any) -> str:
    if isinstance(value, tuple | list):
        return f"{type(value).__name__}({', '.join(type(part).__name__ for part in value)})"
    return type(value).__name__


def channel_name(purpose: str) -> str:
    """A pub/sub channel of the engine: ``<CHANNEL_PREFIX>:<purpose>``."""
    return f"{engine_setting('CHANNEL_PREFIX')}:{purpose}"


@cache
def _imported(path: str) -> Callable[..., Any]:
    return import_string(path)


MAX_WAIT_SECONDS = 2_147_483
# The longest a result may replay or a window last: ten years. Far past it, a record's expiry
# (now + TTL) overflows Python's dates, and the request that stores it fails after its view ran.
MAX_TTL_SECONDS = 10 * 366 * 86_400
# The longest an audit is kept: a hundred years. The purge's cut-off is now less the retention,
# and far past it that date falls before year 1 (``OverflowError``), stopping every purge.
MAX_AUDIT_RETENTION_DAYS = 36_600
"""The longest ``wait_seconds``: PostgreSQL's longest ``lock_timeout``, which a claim in the
database waits with. Past it (``float("inf")`` included) every request under ``"wait"`` was
a 500 from the claim, not a refusal when the view was decorated."""


@dataclass(frozen=True)
class Policy:
    """How one endpoint takes part in idempotency.

    - ``required``: a request without ``Idempotency-Key`` is refused (400 KEY_MISSING) unless
      ``auto_key_window`` derives one.
    - ``fields``: the request-body fields that define the operation (None: the whole body).
      Path parameters (e.g. the order id) always belong to the fingerprint.
    - ``ttl_seconds``: how long a finished result replays (default 72 h).
    - ``auto_key_window``: seconds during which an identical keyless request replays the first.
    - ``redact``: JSON paths (``"diner.phone"``) whose values are blanked in the stored reply
      (:mod:`idempotency.core.redaction`); the tenant's own (``REDACT_FOR_TENANT``) are added.
    - ``in_flight``: ``"reject"`` answers a duplicate of a running request with 409 +
      Retry-After; ``"wait"`` holds it up to ``wait_seconds`` and replays the first's result.
    - ``keep_refusals``: whether a refusal (4xx) under an explicit key is kept for replays (an
      automatic key's never is). HTML forms keep none (:func:`idempotency.web.forms.
      idempotent_form`): a refused form changed nothing, its page carries the user's CSRF
      token, and the corrected form is sent with the same form key.
    """

    required: bool = False
    fields: tuple[str, ...] | None = None
    ttl_seconds: int | None = None
    auto_key_window: int | None = None
    in_flight: Literal["reject", "wait"] = "reject"
    wait_seconds: float = 2.0
    redact: tuple[str, ...] = ()
    keep_refusals: bool = True

    def __post_init__(self) -> None:
        """A malformed option is a ``ValueError`` when the view is decorated: a negative
        ``ttl_seconds`` stored results that had expired when written, so every retry ran the
        view again; an unknown ``in_flight`` quietly meant ``"reject"``."""
        for name in ("ttl_seconds", "auto_key_window"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not 0 < value <= MAX_TTL_SECONDS
            ):
                raise ValueError(
                    f"{name} must be a positive whole number of seconds up to "
                    f"{MAX_TTL_SECONDS}, or None, not {value!r}"
                )
        if self.in_flight not in ("reject", "wait"):
            raise ValueError(f'in_flight must be "reject" or "wait", not {self.in_flight!r}')
        wait = self.wait_seconds
        if (
            isinstance(wait, bool)
            or not isinstance(wait, int | float)
            or not 0 < wait <= MAX_WAIT_SECONDS  # NaN is within no range
        ):
            raise ValueError(
                f"wait_seconds must be a positive number of seconds up to {MAX_WAIT_SECONDS}, "
                f"not {wait!r}"
            )

    def effective_ttl(self, *, automatic: bool, tenant_ttl: int | None = None) -> int:
        """An automatic key's window, but never past the tenant's record TTL; else the
        tenant's record TTL (its data, its retention), the endpoint's, or ``TTL_SECONDS``.

        The window may be a day (``AUTO_KEY_WINDOW_SECONDS``) and a tenant's retention an
        hour: a keyless reply, which shows the diner as any stored reply does, is kept no
        longer than the tenant chose."""
        if automatic:
            window = self.auto_key_window or engine_setting("AUTO_KEY_WINDOW_SECONDS")
            return min(window, tenant_ttl) if tenant_ttl else window
        return tenant_ttl or self.ttl_seconds or engine_setting("TTL_SECONDS")


def field_names(fields: Sequence[str] | None) -> tuple[str, ...] | None:
    """A decorator's ``fields`` as its policy keeps them (None: the whole body).

    A string is refused (``ValueError``): ``fields=("text")``, a one-field tuple without its
    comma, was the fields ``t``, ``e``, ``x``, ``t``, found in no body, so every payload counted
    as the same operation and a key reused with another text replayed the first answer
    instead of 422."""
    if fields is None:
        return None
    if isinstance(fields, str):
        raise ValueError(
            f"fields must be a list of field names, not the string {fields!r} "
            f"(a one-field tuple needs its comma: ({fields!r},))"
        )
    names = tuple(fields)
    for name in names:
        if not isinstance(name, str) or not name:
            raise ValueError(f"fields must be a list of field names, not {fields!r}")
    return names
