"""Settings for the ordering platform, driven by environment variables.

Production is the default: with ``DEBUG`` unset the settings refuse to start without a real
``SECRET_KEY``, a non-empty ``ALLOWED_HOSTS`` (not ``*``), the idempotency engine on, a
``DATABASE_URL`` and, when the simulated payment provider is on, its own secret (README, "Run
it in production"). ``make run`` and
``make test`` set ``DEBUG=1``: the embedded demo (SQLite, no Redis, the idempotency engine
database-only) and the test suite run with development defaults.
"""

from __future__ import annotations

import json
import os
import re
from datetime import timedelta
from pathlib import Path

import dj_database_url
from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured

from config.static_files import add_page_headers

BASE_DIR = Path(__file__).resolve().parent.parent


_YES = ("1", "true", "yes", "on")
_NO = ("0", "false", "no", "off")


def env_bool(name: str, default: bool) -> bool:
    """A yes/no setting: one of ``_YES`` or ``_NO`` (any case); unset or empty, ``default``.
    Anything else stops the server from starting: read as "no", a typo turned off what it
    names (``IDEMPOTENCY_ENABLED=ture`` ran the site without the engine, so a retried order was
    placed twice; ``SECURE_SSL_REDIRECT=ye`` served plain HTTP)."""
    raw = os.environ.get(name, "")
    value = raw.strip().lower()
    if not value:
        return default
    if value in _YES or value in _NO:
        return value in _YES
    raise ImproperlyConfigured(
        f"{name} must be one of {', '.join(_YES)} or {', '.join(_NO)}, not {raw!r}"
    )


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def env_json_object(name: str) -> dict:
    """A JSON object setting; unset or empty, ``{}``. Anything else stops the server from
    starting, naming the setting (a bare ``JSONDecodeError`` named only a line and column)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a JSON object, not {raw!r}: {exc}") from None
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object, not {raw!r}")
    return value


def env_bounded(name: str, default: int, *, low: int, high: int) -> int:
    """An integer setting within ``low..high``; anything else stops the server from starting
    (a period of years would overflow the date arithmetic of every sweep that reads it)."""
    raw = os.environ.get(name, "").strip()
    try:
        value = int(raw) if raw else default
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, not {raw!r}") from None
    if not low <= value <= high:
        raise ImproperlyConfigured(f"{name} must be within {low}..{high}, not {value}")
    return value


def env_number(name: str, default: float, *, low: float, high: float) -> float:
    """A number setting (seconds, mostly) within ``low..high``; anything else stops the server
    from starting, naming the setting, instead of a bare ``ValueError`` or a negative period."""
    raw = os.environ.get(name, "").strip()
    try:
        value = float(raw) if raw else default
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, not {raw!r}") from None
    if not low <= value <= high:  # NaN is within no range
        raise ImproperlyConfigured(f"{name} must be within {low}..{high}, not {raw}")
    return value


def env_share(name: str, default: float) -> float:
    """A share (more than 0, at most 1) from the environment; anything else stops the server
    from starting."""
    raw = os.environ.get(name, "").strip()
    try:
        value = float(raw) if raw else default
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, not {raw!r}") from None
    if not 0 < value <= 1:
        raise ImproperlyConfigured(f"{name} must be more than 0 and at most 1, not {value}")
    return value


_YEAR = 365 * 86400


def shown_without_password(url: str) -> str:
    """``url`` as a refusal may show it: the password of its user part (``user:password@``)
    as ``***``, the rest as written. The refusal goes to the server's stderr, its logs, which
    more people read than hold the Redis password. Read by hand, not by ``urlsplit``: a URL
    refused for its port or brackets is one ``urlsplit`` cannot read, and its password shown
    all the same; everything up to the last ``@`` is the user part, a password holding ``@``
    or ``/`` included."""
    scheme, separator, rest = url.partition("://")
    if not separator:
        scheme, rest = "", url
    user_part, at, host_part = rest.rpartition("@")
    if not at:
        return url
    user, colon, _ = user_part.partition(":")
    return f"{scheme}{separator}{user if colon else ''}{colon}***@{host_part}"


DEBUG = env_bool("DEBUG", False)
# Secrets that ship in this repository: public, so never accepted off DEBUG.
_DEV_SECRET = "dev-only-insecure-secret-key-change-me"
_DEV_SIMULATED_PROVIDER_SECRET = "dev-only-simulated-provider-secret"
_DEV_HASH_KEY = "dev-only-idempotency-hash-key-change-me"
# Each is as public as the others: none is any secret's value off DEBUG.
_REPOSITORY_SECRETS = frozenset({_DEV_SECRET, _DEV_SIMULATED_PROVIDER_SECRET, _DEV_HASH_KEY})


def refuse_a_weak_secret(name: str, value: str, development: str, *, min_chars: int) -> None:
    """Stop the server when ``value``, set for ``name``, is missing, the repository's
    ``development`` one or any other secret the repository ships (the hash key's, long
    enough for a webhook secret, is as public as that secret's own), Django's insecure kind,
    short, padded, or of fewer than five different characters (see :func:`production_secret`)."""
    if (
        value in {"", development, *_REPOSITORY_SECRETS}
        or value.startswith("django-insecure")
        or value != value.strip()
        or len(value) < min_chars
        or len(set(value)) < 5
    ):
        raise ImproperlyConfigured(
            f"{name} must be set to a secret of your own when DEBUG is off: at least "
            f"{min_chars} characters, at least 5 of them different, no surrounding spaces "
            "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(50))')"
        )


def production_secret(
    name: str, development: str, *, min_chars: int, unlike: dict[str, str] | None = None
) -> str:
    """The secret ``name`` from the environment; with DEBUG, the repository's ``development``
    value when it is unset. Off DEBUG the server does not start with a missing, public, short
    or padded one, or one of fewer than five different characters: whoever guesses it forges
    what it signs or keys (sessions, payment callbacks, the hashes that stand for diners'
    data), and a value read with a stray space is another secret than the one meant. Nor with
    the value of a secret named in ``unlike``: some are held by other hands too (the payment
    provider, Prometheus), and whoever holds one must not hold another's power with it."""
    value = os.environ.get(name, "")
    if DEBUG:
        return value or development
    refuse_a_weak_secret(name, value, development, min_chars=min_chars)
    for other_name, other in (unlike or {}).items():
        if value == other:
            raise ImproperlyConfigured(f"{name} must be a secret other than {other_name}")
    return value


# Django's own deployment check asks for 50 characters of at least 5 different ones
SECRET_KEY = production_secret("SECRET_KEY", _DEV_SECRET, min_chars=50)
# During a rotation, the previous SECRET_KEYs (comma-separated): what they signed still
# verifies (diner sessions, pre-issued idempotency tokens, dashboard sessions) while new
# signatures use SECRET_KEY. A fallback verifies as SECRET_KEY does, so it must be as strong.
SECRET_KEY_FALLBACKS = env_list("SECRET_KEY_FALLBACKS")
if not DEBUG:
    for _fallback in SECRET_KEY_FALLBACKS:
        refuse_a_weak_secret("SECRET_KEY_FALLBACKS", _fallback, _DEV_SECRET, min_chars=50)
# What signs and verifies as SECRET_KEY: the secrets held by other hands must be none of them.
_SIGNING_KEYS = {
    "SECRET_KEY": SECRET_KEY,
    **{f"SECRET_KEY_FALLBACKS ({n})": key for n, key in enumerate(SECRET_KEY_FALLBACKS, 1)},
}


def pattern_of_anyone_s_hosts(host: str) -> bool:
    """Whether the ``ALLOWED_HOSTS`` entry ``host`` is a pattern of a whole top-level domain.

    ".com" lets through every .com host, anyone's, as "*" lets every host; "." lets through
    any name ending in two dots ("evil.com..", which Django reads as "evil.com."). Counted by
    labels, not dots: Django matches a pattern as written, so ".com." let "evil.com.."
    through, "..com" "evil..com" and ".." "evil...". Only ".localhost" names one owner's
    hosts: this machine's loopback names (RFC 6761)."""
    labels = [label for label in host.lower().split(".") if label]
    return host.startswith(".") and len(labels) < 2 and labels != ["localhost"]


ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost" if DEBUG else "")
if DEBUG:
    ALLOWED_HOSTS += ["testserver"]
elif not ALLOWED_HOSTS or "*" in ALLOWED_HOSTS:
    # "*" turns Django's host check off: whatever Host a client sends is the site's name, so
    # the plain-HTTP redirect sends a browser to https://<any host>/, and any page or link
    # built from the request's host names the sender's. A subdomain pattern (".example.com")
    # still names the site's own domain.
    raise ImproperlyConfigured(
        "ALLOWED_HOSTS must name the host names this site answers to when DEBUG is off "
        f"(comma-separated; '*', which lets any Host through, is refused), not {ALLOWED_HOSTS!r}"
    )
elif any(pattern_of_anyone_s_hosts(host) for host in ALLOWED_HOSTS):
    raise ImproperlyConfigured(
        "ALLOWED_HOSTS must name the host names this site answers to when DEBUG is off: "
        "a pattern of a whole top-level domain (.com, or a bare .) lets through hosts of "
        f"anyone's, not {ALLOWED_HOSTS!r}"
    )

INSTALLED_APPS = [
    "config.admin_site.PlatformAdminConfig",  # django.contrib.admin, on the site above
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "axes",
    "csp",
    "tenants",
    "idempotency",
    "ordering",
]

MIDDLEWARE = [
    # REMOTE_ADDR made the client's behind TRUSTED_PROXIES (config/client_address.py)
    "config.client_address.ClientAddressMiddleware",
    # /healthz and /readyz, before the host check and the HTTPS redirect (config/health.py)
    "config.health.HealthMiddleware",
    # /metrics scraped by a server's address from METRICS_ALLOWED_IPS, the same way
    "config.metrics_view.MetricsByAddressMiddleware",
    "config.request_context.RequestContextMiddleware",
    # Cache-Control: no-store on the dashboard's and the API's answers: outside every
    # middleware below that answers by itself (413, 415, 400) or rebuilds an API error as
    # problem+json (a 404 route, a Host not served), so those answers carry it too
    "config.cache_headers.NoStoreMiddleware",
    "config.api_error_pages.ApiErrorPagesMiddleware",
    # HSTS, nosniff, the referrer and opener policies, and the HTTPS redirect: before every
    # middleware below that may answer by itself (413, 415, 503, a NUL in a page's query), so
    # those answers carry the headers too, and inside the API's problem pages, which keep them
    "django.middleware.security.SecurityMiddleware",
    # an /api/v1/ request over plain HTTP is 403 HTTPS_REQUIRED, not redirected (a client
    # following a redirect sends a POST again as a GET): config/api_https.py
    "config.api_https.ApiHttpsOnlyMiddleware",
    # 503 DATABASE_UNAVAILABLE, not a 500, while PostgreSQL cannot be reached
    # (config/database_unavailable.py)
    "config.database_unavailable.DatabaseUnavailableMiddleware",
    # 409, not a 500, for a change the offboarding fence refused (config/tenant_leaving.py)
    "config.tenant_leaving.TenantLeavingMiddleware",
    # an API answer's Allow names no OPTIONS, which the API answers with 405
    "config.allow_header.AllowWithoutOptionsMiddleware",
    # a body in a charset other than UTF-8 is 415, before anything decodes it (the size
    # guard below reads an admin form's fields)
    "config.body_charset.BodyCharsetMiddleware",
    "config.request_limits.RequestSizeLimitMiddleware",
    # an API write's body that is not JSON is 415, whether its view reads a body or not
    "config.json_bodies.JsonBodiesOnlyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "config.csp.SettingsPolicyCSPMiddleware",
    # Sessions, Django's user and messages: browser pages only (config/browser_middleware.py)
    "config.browser_middleware.SessionMiddleware",
    # Django's, except that an /api/ path is never redirected to add a slash
    "config.api_error_pages.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "config.browser_middleware.AuthenticationMiddleware",
    "config.browser_middleware.MessageMiddleware",
    # a password someone else set lets its holder choose their own, nothing else
    # (config/temporary_passwords.py)
    "config.temporary_passwords.TemporaryPasswordMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- database ---------------------------------------------------------------------------
# DATABASE_URL (postgres://...) in production and tests; SQLite is the embedded demo default.
# Persistent connections: a worker keeps its connection for DB_CONN_MAX_AGE seconds (0: one per
# request) and checks it before reusing it after a request, without a query when it is idle
# (config/postgresql/), so a restarted PostgreSQL or a PgBouncer that dropped it costs a
# reconnect, not an error (docs/adr/0006).
# Off DEBUG there is no default: without DATABASE_URL (or with a typo in its name) each host
# would keep its orders and idempotency records in a SQLite file of its own checkout.
_database_url = os.environ.get("DATABASE_URL", "").strip()
if not _database_url and not DEBUG:
    raise ImproperlyConfigured(
        "DATABASE_URL must name the PostgreSQL database when DEBUG is off "
        "(postgres://user@host:5432/name); SQLite is the demo's"
    )
# dj-database-url's own errors name no setting ("Scheme '://' is unknown", "This string is not
# a valid url"): a URL it cannot read stops the server naming DATABASE_URL, its password hidden.
try:
    DATABASES = {
        "default": dj_database_url.parse(
            _database_url or f"sqlite:///{BASE_DIR / 'db.sqlite3'}",
            conn_max_age=env_bounded("DB_CONN_MAX_AGE", 300, low=0, high=86_400),
            conn_health_checks=True,
        )
    }
except (dj_database_url.ParseError, dj_database_url.UnknownSchemeError):
    raise ImproperlyConfigured(
        "DATABASE_URL must name the PostgreSQL database (postgres://user@host:5432/name), "
        f"not {shown_without_password(_database_url)!r}"
    ) from None
# Seconds a worker waits to connect to PostgreSQL (whole seconds, libpq's unit; psycopg waits
# at least 2). Without it a database that accepts the connection and never answers (a hung
# server, an address a failover left half-open) held each request that connected for
# psycopg's default of 130 s, past gunicorn's timeout (30 s), which killed the worker: an HTML
# 500 instead of the 503 DATABASE_UNAVAILABLE it is now (config/database_unavailable.py).
DB_CONNECT_TIMEOUT = env_bounded("DB_CONNECT_TIMEOUT", 5, low=2, high=60)
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Django's backend, with a health check that sends no query (config/postgresql/base.py)
    DATABASES["default"]["ENGINE"] = "config.postgresql"
    _database_options = DATABASES["default"].setdefault("OPTIONS", {})
    # Django connects to no database without its name (libpq's default, the user's, is not
    # taken): a URL naming none started a server that answered every request 500, /readyz too.
    if not DATABASES["default"].get("NAME") and "service" not in _database_options:
        raise ImproperlyConfigured(
            "DATABASE_URL must name the PostgreSQL database (postgres://user@host:5432/name), "
            f"not {shown_without_password(_database_url)!r}"
        )
    if "connect_timeout" in _database_options:  # one place for it, checked as the others
        raise ImproperlyConfigured(
            "DATABASE_URL must not set connect_timeout: set DB_CONNECT_TIMEOUT (seconds)"
        )
    _database_options["connect_timeout"] = DB_CONNECT_TIMEOUT
elif not DEBUG:
    # SQLite named outright is the same file per host as no URL at all, and production is
    # PostgreSQL (README): the schema, the engine's claims and the health check are its.
    raise ImproperlyConfigured(
        "DATABASE_URL must name the PostgreSQL database when DEBUG is off "
        f"(postgres://user@host:5432/name), not a {DATABASES['default']['ENGINE']} one"
    )
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Concurrent writers on the embedded demo: a transaction takes SQLite's write lock when it
    # begins (a deferred one that reads first fails with "database is locked" at once, without
    # waiting, when it later needs to write), and waits up to 20 s for it.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"transaction_mode": "IMMEDIATE", "timeout": 20}
    )
# Behind PgBouncer in transaction mode (docs/scaling.md, "Fleet setup"): a server-side cursor
# lives in one server connection's session, which the pooler may hand to another client between
# transactions, so set DATABASE_DISABLE_SERVER_SIDE_CURSORS=1 there.
DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = env_bool(
    "DATABASE_DISABLE_SERVER_SIDE_CURSORS", False
)
# A live test server (gunicorn started by the test suite) shares pytest's test database.
if os.environ.get("APP_DB_NAME"):
    DATABASES["default"]["NAME"] = os.environ["APP_DB_NAME"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# /readyz's limit for PostgreSQL to answer (config/health.py): a balancer's probe times out
# after a few seconds, and a silent database would otherwise hold the probe and its worker.
READINESS_TIMEOUT_SECONDS = env_number("READINESS_TIMEOUT_SECONDS", 2.0, low=0.1, high=30)

# --- redis ------------------------------------------------------------------------------
# One of: REDIS_CLUSTER_URL (a Redis Cluster, any node), REDIS_SHARDS (comma-separated
# standalone nodes; tenants are spread by rendezvous hashing), REDIS_URL (one node). None: no
# Redis at all (the engine runs database-only). See tenants/redis_routing.py and docs/scaling.md.


def redis_node_url(name: str, url: str, *, cluster: bool = False) -> str:
    """``url`` when it names a Redis node: ``redis://`` or ``rediss://`` with a host and at
    most a database number (0 or none for a cluster, which has only database 0), or ``unix://``
    with a socket path. Anything else stops the server, naming the setting. redis-py reads a
    URL only when a request first needs it: one with no scheme started a server that answered
    every API request 500, and a database named by a word was read as database 0.

    A ``redis://`` URL names its database in the path only: redis-py reads a ``?db=`` query
    over the path, while the broker (the next database) and the placement of tenants on shards
    (``tenants.redis_routing.node_identity``) read the path, so ``redis://host:6379?db=3`` put
    the engine in database 3 and the broker in database 1, and two shards ``?db=1`` and
    ``?db=2`` of one server were one node to placement (the second got no tenant). ``unix://``
    keeps its ``?db=``: a socket URL has no other place for it."""
    from urllib.parse import parse_qsl, urlsplit

    shape = "redis://host:port" if cluster else "redis://host:port/<database number>"
    try:
        parts = urlsplit(url)
        database = parts.path.strip("/")
        if parts.scheme == "unix":
            valid = bool(parts.path) and not cluster
        else:
            _ = parts.port  # a port that is no number raises ValueError
            valid = (
                parts.scheme in ("redis", "rediss")
                and bool(parts.hostname)
                and (not database or (database.isdigit() and (not cluster or database == "0")))
                and all(key != "db" for key, _ in parse_qsl(parts.query, keep_blank_values=True))
            )
    except ValueError:
        valid = False
    if not valid:
        raise ImproperlyConfigured(f"{name} must be {shape}, not {shown_without_password(url)!r}")
    return url


REDIS_URL = os.environ.get("REDIS_URL", "").strip()
if REDIS_URL:
    redis_node_url("REDIS_URL", REDIS_URL)
REDIS_SHARDS = [redis_node_url("REDIS_SHARDS", url) for url in env_list("REDIS_SHARDS")]
REDIS_CLUSTER_URL = os.environ.get("REDIS_CLUSTER_URL", "").strip()
if REDIS_CLUSTER_URL:
    redis_node_url("REDIS_CLUSTER_URL", REDIS_CLUSTER_URL, cluster=True)
REDIS_SOCKET_TIMEOUT = env_number("REDIS_SOCKET_TIMEOUT", 1.0, low=0.01, high=60)


def redis_cache(url: str, **options: object) -> dict:
    """A standalone node's cache alias, whose connections read each reply within
    ``REDIS_SOCKET_TIMEOUT`` in all, not per read (``idempotency/stores/reply_deadline.py``):
    a node trickling its replies held requests until gunicorn killed the workers."""
    from idempotency.stores.reply_deadline import connection_class_for

    return {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": url,
        "OPTIONS": {
            "SOCKET_CONNECT_TIMEOUT": REDIS_SOCKET_TIMEOUT,
            "SOCKET_TIMEOUT": REDIS_SOCKET_TIMEOUT,
            "CONNECTION_POOL_KWARGS": {"connection_class": connection_class_for(url)},
            **options,
        },
    }


if REDIS_CLUSTER_URL:
    CACHES = {
        "default": redis_cache(
            REDIS_CLUSTER_URL, CONNECTION_FACTORY="tenants.redis_routing.ClusterConnectionFactory"
        )
    }
    REDIS_NODE_ALIASES = ["default"]
elif REDIS_SHARDS:
    REDIS_NODE_ALIASES = [f"redis-{i}" for i in range(len(REDIS_SHARDS))]
    CACHES = {a: redis_cache(u) for a, u in zip(REDIS_NODE_ALIASES, REDIS_SHARDS, strict=True)}
    CACHES["default"] = CACHES["redis-0"]
elif REDIS_URL:
    CACHES = {"default": redis_cache(REDIS_URL)}
    REDIS_NODE_ALIASES = ["default"]
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    REDIS_NODE_ALIASES = []

# --- auth, i18n, static -----------------------------------------------------------------
# Django's four: a length alone let "password" and "12345678" through (for platform staff
# too, who see every restaurant), the first guesses of anyone trying the login, within the
# lockout's tries from each address. Checked by the admin's password forms, `changepassword`
# and `createsuperuser`.
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Login throttling (django-axes) on the dashboard's and the admin's login: after
# LOGIN_FAILURE_LIMIT failures of one account from one address, that pair is locked out for
# LOGIN_LOCKOUT_MINUTES (429). Per account *and* address, so nobody can lock a merchant out
# from elsewhere; the address is REMOTE_ADDR, the client's behind TRUSTED_PROXIES (an IPv6
# client's /64). And after LOGIN_ADDRESS_FAILURE_LIMIT failures from one address across every
# name, that address is (config/login_throttle.py): else it could try four passwords on every
# account. Four accounts' lockouts' worth, as a member's failures are forgotten once that member
# signs in: staff sharing a restaurant's address who mistype and then sign in never reach it.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_bounded("LOGIN_FAILURE_LIMIT", 5, low=1, high=1000)
AXES_COOLOFF_TIME = timedelta(minutes=env_bounded("LOGIN_LOCKOUT_MINUTES", 15, low=1, high=525_600))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
LOGIN_ADDRESS_FAILURE_LIMIT = env_bounded("LOGIN_ADDRESS_FAILURE_LIMIT", 20, low=1, high=100_000)
AXES_HANDLER = "config.login_throttle.AddressLimitedHandler"
AXES_RESET_ON_SUCCESS = True
# An attempt the lockout refuses checked no password: it is not recorded. axes' default records
# it, appending its form and query string (up to 2 KB) to the pair's one row and moving the
# cool-off on, so anyone could grow that row without bound, each request rewriting all of it,
# and keep it (the name typed) past the cool-off for as long as they kept sending. The row now
# holds at most LOGIN_FAILURE_LIMIT attempts, and the lockout ends its time after the last.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
# Its log lines about each sign-in and failure mask these (the name typed and the address by
# its default); the user agent too, a detail about the person no other log line keeps.
AXES_SENSITIVE_PARAMETERS = ["username", "ip_address", "user_agent"]
AXES_IPWARE_META_PRECEDENCE_ORDER = ["REMOTE_ADDR"]
# An IPv6 client counts as its /64, every address of which it may send from: without this, a
# fresh address for each guess was never locked out.
AXES_CLIENT_IP_CALLABLE = "config.client_address.limited_address_of"
# Its logs of logins (name, address, user agent) are purged after this many days, its failed
# attempts once past the cool-off (tenants/retention.py, docs/data-protection.md).
LOGIN_RECORD_RETENTION_DAYS = env_bounded("LOGIN_RECORD_RETENTION_DAYS", 30, low=1, high=3650)

# The merchants' board fetches its columns again every this many seconds (an unchanged board is
# a 304 without rendering it, ordering/dashboard/orders.py).
DASHBOARD_REFRESH_SECONDS = env_number("DASHBOARD_REFRESH_SECONDS", 5, low=1, high=3600)

LOGIN_URL = "/dashboard/login/"
LOGIN_REDIRECT_URL = "/dashboard/"
# a stale sign-in form of someone signed in (in another tab) goes on to its page
CSRF_FAILURE_VIEW = "config.csrf_failure.csrf_failure"
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# Static files (the dashboard's, the admin's, the API docs') are served by the app itself through
# WhiteNoise, from STATIC_ROOT after `manage.py collectstatic` (from the apps' folders with DEBUG).
# Every page may load scripts, styles, images and fonts from this site only: no inline script or
# style, no third-party origin (the API docs' Swagger UI is served from here too,
# drf-spectacular-sidecar), no framing.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [NONE],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}
STATIC_URL = "static/"
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT") or BASE_DIR / "staticfiles")
WHITENOISE_USE_FINDERS = WHITENOISE_AUTOREFRESH = DEBUG
# WhiteNoise answers before the CSP and framing middlewares: each file gets their headers here
WHITENOISE_ADD_HEADERS_FUNCTION = add_page_headers

# Request bodies above this answer 413 REQUEST_TOO_LARGE before anything reads them
# (config/request_limits.py); Django's own check on reading request.body uses the same number.
MAX_REQUEST_BYTES = env_bounded("MAX_REQUEST_BYTES", 1024 * 1024, low=1024, high=1 << 30)
DATA_UPLOAD_MAX_MEMORY_SIZE = MAX_REQUEST_BYTES

# --- HTTPS (off DEBUG) --------------------------------------------------------------------
# Production sits behind a TLS-terminating proxy. SECURE_PROXY_SSL_HEADER tells Django which
# request header that proxy sets to say the client used HTTPS (default X-Forwarded-Proto); the
# proxy must overwrite any copy a client sends. Set it empty when no proxy sets such a header.
# With the HTTPS redirect on, the API is refused over plain HTTP instead (config/api_https.py)
SECURE_REDIRECT_EXEMPT = [r"^api/v1/"]
if not DEBUG:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = env_bounded("HSTS_SECONDS", 31536000, low=0, high=2 * _YEAR)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("HSTS_PRELOAD", False)
    # Asking browsers to preload HTTPS-only for the whole domain cannot be undone quickly: the
    # operator opts in (HSTS_PRELOAD=1); `check --deploy` is not to nag about the default.
    SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]
    SECURE_CONTENT_TYPE_NOSNIFF = True
    _proxy_ssl_header = os.environ.get("SECURE_PROXY_SSL_HEADER", "X-Forwarded-Proto").strip()
    # A name as the proxy sends it. Django's documentation writes the setting as
    # HTTP_X_FORWARDED_PROTO (its request.META key): given here it named a header no proxy
    # sends and gunicorn drops (an underscore), so every request was redirected to HTTPS.
    if _proxy_ssl_header and not re.fullmatch(r"[A-Za-z0-9-]+", _proxy_ssl_header):
        raise ImproperlyConfigured(
            "SECURE_PROXY_SSL_HEADER must be a header name as the proxy sends it (letters, "
            f"digits and hyphens, e.g. X-Forwarded-Proto), not {_proxy_ssl_header!r}"
        )
    if _proxy_ssl_header:
        SECURE_PROXY_SSL_HEADER = (
            "HTTP_" + _proxy_ssl_header.upper().replace("-", "_"),
            "https",
        )

# --- REST API ---------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tenants.authentication.ApiKeyAuthentication",
        "tenants.authentication.DinerSessionAuthentication",
    ],
    # Every API view declares the capability each method needs (tenants/permissions.py).
    "DEFAULT_PERMISSION_CLASSES": ["tenants.permissions.HasDeclaredCapability"],
    # JSON only: no browsable HTML API. An answer is the same bytes whatever the client's
    # Accept says, so a replay can never be labelled or shaped unlike its first answer (a
    # client that accepts no JSON is answered 406 NOT_ACCEPTABLE); people read /api/docs/.
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # No OPTIONS metadata (405 with Allow): /api/schema/ describes every endpoint.
    "DEFAULT_METADATA_CLASS": None,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # DRF's renderer choice, remembered per Accept header (config/negotiation.py)
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "config.negotiation.RememberingContentNegotiation",
    # JSON bodies only: a form (urlencoded or multipart) cannot carry what most bodies hold, an
    # order's items (a list of objects) nor an integer (a form's values are strings, and no
    # field converts one: the idempotency fingerprint tells "1" from 1), so a form that named
    # only text fields worked and one naming a number was a VALIDATION_ERROR about its type.
    # Any other media type is 415 UNSUPPORTED_MEDIA_TYPE, before the engine reads the body.
    "DEFAULT_PARSER_CLASSES": ["config.parsers.StrictJSONParser"],
    "EXCEPTION_HANDLER": "config.api_errors.api_exception_handler",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Restaurant ordering API",
    "DESCRIPTION": "Place, pay, cancel and track orders; every write is safe to retry.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI's files come from this site (drf-spectacular-sidecar), never from a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    # Request bodies are JSON only (DEFAULT_PARSER_CLASSES above; the payment callback reads
    # raw JSON bytes, its signature over them). drf-spectacular would offer each body in every
    # encoding DRF's own JSON parser's subclass could be mistaken for; name JSON alone.
    "PARSER_WHITELIST": ["rest_framework.parsers.JSONParser"],
    "ENUM_NAME_OVERRIDES": {
        "OrderStatusEnum": "ordering.models.orders.OrderStatus",
        # an order's payment_method and its payment's method, one name for both
        "PaymentMethodEnum": "ordering.services.placing.PAYMENT_METHODS",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "config.schema_hooks.declare_refusals_of_every_operation",
        "config.schema_hooks.declare_problem_members",
        "config.schema_hooks.declare_null_as_left_out",
        "config.schema_hooks.lift_defaults_out_of_blank_alternatives",
        "config.schema_hooks.admit_null_beside_nullable_references",
        "idempotency.web.openapi.declare_retry_after",
        "config.schema_hooks.declare_www_authenticate",
        "config.schema_hooks.declare_accept_encoding",
    ],
}

# --- diner sessions (tenants/diner_sessions.py, docs/tenancy.md) ----------------------------
# A Bearer token lives this long; a refresh moves it on, but never past the session's max age.
DINER_SESSION_TTL_SECONDS = env_bounded("DINER_SESSION_TTL_SECONDS", 24 * 3600, low=60, high=_YEAR)
DINER_SESSION_MAX_AGE_SECONDS = env_bounded(
    "DINER_SESSION_MAX_AGE_SECONDS", 30 * 24 * 3600, low=60, high=10 * _YEAR
)
# Each process keeps a session's or API key's state this long when it cannot hear the credential
# feed: a revoked session or key is refused by every process at most this long after it.
DINER_SESSION_STATE_CACHE_SECONDS = env_number(
    "DINER_SESSION_STATE_CACHE_SECONDS", 1.0, low=0, high=3600
)
# Erasing a diner (the Privacy page, the admin) waits that long inside its request, so that no
# process still honours the sessions it ended when it renames the orders; gunicorn kills a
# request past GUNICORN_TIMEOUT (config/gunicorn.py reads the same variable), which left the
# erasure half-done (sessions ended, orders still showing the diner), every try alike. So the
# wait may take at most half of that, the other half left to the erasure's own work.
REQUEST_TIMEOUT_SECONDS = env_bounded("GUNICORN_TIMEOUT", 30, low=1, high=1_000_000)
if DINER_SESSION_STATE_CACHE_SECONDS > REQUEST_TIMEOUT_SECONDS / 2:
    raise ImproperlyConfigured(
        f"DINER_SESSION_STATE_CACHE_SECONDS must be at most {REQUEST_TIMEOUT_SECONDS / 2} s, "
        f"half of GUNICORN_TIMEOUT ({REQUEST_TIMEOUT_SECONDS} s), not "
        f"{DINER_SESSION_STATE_CACHE_SECONDS:g}: erasing a diner waits it out inside the "
        "request, which gunicorn ends at its timeout (raise GUNICORN_TIMEOUT for a longer cache, "
        "and OFFBOARDING_DRAIN_SECONDS past it: an offboarding waits out the longest request)"
    )
# Where the admin's "Offboard" action writes a leaving tenant's archive (docs/data-protection.md).
# Left empty, the default: Path("") is the working directory, the checkout the worker runs from.
OFFBOARDING_EXPORT_DIR = Path(
    os.environ.get("OFFBOARDING_EXPORT_DIR", "").strip() or BASE_DIR / "var" / "offboarding"
)
# How long after its suspension an offboarding waits before its last sweep of the tenant's
# Redis keys and engine rows: a request authenticated just before may still be running, and
# store tokens or a reply in Redis (no table fences that), or an audit. Gunicorn kills a request
# past GUNICORN_TIMEOUT (30 s); the engine writes its audits within AUDIT_FLUSH_SECONDS (1 s).
OFFBOARDING_DRAIN_SECONDS = env_number("OFFBOARDING_DRAIN_SECONDS", 60.0, low=0, high=3600)
# ... unless the process hears the credential feed (Redis pub/sub), which announces every
# revocation at once: then a session's or API key's state is kept up to this long
# (tenants/credential_cache.py).
CREDENTIAL_CACHE_SECONDS = env_number("CREDENTIAL_CACHE_SECONDS", 60.0, low=0, high=3600)
# Guest sessions opened per minute, per publishable key and per client address (REMOTE_ADDR,
# the client's behind TRUSTED_PROXIES or with gunicorn's PROXY protocol).
DINER_SESSION_OPEN_RATE_PER_KEY = env_bounded(
    "DINER_SESSION_OPEN_RATE_PER_KEY", 600, low=1, high=100_000_000
)
DINER_SESSION_OPEN_RATE_PER_IP = env_bounded(
    "DINER_SESSION_OPEN_RATE_PER_IP", 20, low=1, high=100_000_000
)
# The share of a tenant's write ceiling (API_TENANT_WRITE_CEILING_PER_MINUTE or its own) that
# all guest sessions together may fill: anyone can open guests with the public publishable key,
# so they stop at this share and the rest of each window stays the merchant's (0 < share <= 1).
# Guests' outstanding pre-issued tokens stop at the same share of the tenant's token quota.
API_GUEST_CEILING_SHARE = env_share("API_GUEST_CEILING_SHARE", 0.8)

# `manage.py seed_demo` keeps the demo's full API keys here (DEBUG only, git-ignored) so that a
# re-run can print them again; the database has only their hashes.
DEMO_KEYS_FILE = Path(
    os.environ.get("DEMO_KEYS_FILE", "").strip() or BASE_DIR / "var" / "demo_keys.json"
)

# The site's own reverse proxies (addresses or networks, comma-separated; empty by default;
# `unix` for one on gunicorn's unix socket): from them the client's address is read from
# X-Forwarded-For (config/client_address.py).
TRUSTED_PROXIES = env_list("TRUSTED_PROXIES")

# --- metrics ----------------------------------------------------------------------------
# GET /metrics answers a caller sending "Authorization: Bearer <METRICS_TOKEN>", or one whose
# address is in METRICS_ALLOWED_IPS (addresses or networks, comma-separated; empty by default:
# no address is trusted, loopback included); anyone else gets 404 (config/metrics_view.py).
METRICS_ALLOWED_IPS = env_list("METRICS_ALLOWED_IPS")
# Optional; when set, a secret like the others. Honoured over HTTPS only (DEBUG aside).
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "")
if METRICS_TOKEN:
    METRICS_TOKEN = production_secret("METRICS_TOKEN", "", min_chars=32, unlike=_SIGNING_KEYS)
    # Sent in a header, which the server reads as Latin-1 bytes: a character outside printable
    # ASCII never matched what Prometheus sent, and every scrape was a 404.
    if not (METRICS_TOKEN.isascii() and METRICS_TOKEN.isprintable()):
        raise ImproperlyConfigured(
            "METRICS_TOKEN must be printable ASCII: Prometheus sends it in a header "
            "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )

# --- order ids --------------------------------------------------------------------------
# Largest backwards clock step (ms) the ID generator waits out; larger steps are refused.
ORDER_ID_MAX_CLOCK_BACKSTEP_MS = env_bounded(
    "ORDER_ID_MAX_CLOCK_BACKSTEP_MS", 200, low=0, high=60_000
)
ORDER_ID_LEASE_SECONDS = env_bounded("ORDER_ID_LEASE_SECONDS", 30, low=3, high=3600)
# "redis" (Redis with the database as fallback, when Redis is configured) or "database" (always
# the database: use it while changing the Redis topology, see docs/scaling.md).
ORDER_ID_LEASE_STORE = os.environ.get("ORDER_ID_LEASE_STORE", "").strip() or "redis"
# Anything else was read as "redis": a misspelt "database" set for a topology change
# (docs/scaling.md) left the processes leasing worker ids on Redis nodes that may differ.
if ORDER_ID_LEASE_STORE not in ("redis", "database"):
    raise ImproperlyConfigured(
        f"ORDER_ID_LEASE_STORE must be redis or database, not {ORDER_ID_LEASE_STORE!r}"
    )

# Structured logs: one JSON object per line with request id, tenant and the idempotency key's
# hash (config/logging.py). LOG_FORMAT=text for plain lines.
# Both are checked here: handed to logging.config as they were, a typo stopped the server
# naming a handler or "the root logger", never the setting (and "warning" was refused).
LOG_FORMAT = os.environ.get("LOG_FORMAT", "").strip().lower() or "json"
if LOG_FORMAT not in ("json", "text"):
    raise ImproperlyConfigured(f"LOG_FORMAT must be json or text, not {os.environ['LOG_FORMAT']!r}")
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_LEVEL = os.environ.get("LOG_LEVEL", "").strip().upper() or "INFO"
if LOG_LEVEL not in _LOG_LEVELS:
    raise ImproperlyConfigured(
        f"LOG_LEVEL must be one of {', '.join(_LOG_LEVELS)} (any case), "
        f"not {os.environ['LOG_LEVEL']!r}"
    )
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "json": {"()": "config.logging.JsonFormatter"},
        "text": {"()": "config.logging.TextFormatter"},
    },
    "filters": {"refused_host": {"()": "config.logging.RefusedHostFilter"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
        }
    },
    "loggers": {
        # Django's own handlers of its "django" logger (a plain console copy under DEBUG, the
        # admins' mail off DEBUG) wrote each line a second time with the request's path as
        # sent: a diner id the tenant keeps out of its logs, and no JSON. Its lines go to the
        # root's handler alone, through the formatter that masks them (config/logging.py).
        "django": {"handlers": [], "propagate": True},
        "django.security.DisallowedHost": {
            "handlers": ["console"],
            "filters": ["refused_host"],
            "propagate": False,
        },
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
}

# --- idempotency engine -----------------------------------------------------------------
IDEMPOTENCY = {
    "ENABLED": env_bool("IDEMPOTENCY_ENABLED", True),
    "SCOPE_RESOLVER": "tenants.idempotency_scope.resolve",
    "REDIS_CLIENT_FOR_TENANT": "tenants.redis_routing.client_for_tenant",
    "SCRIPT_CHANNEL_CLIENT": "tenants.redis_routing.script_channel_client",
    "ALL_REDIS_CLIENTS": "tenants.redis_routing.all_clients",
    "SCRIPT_PIN_ALLOWED": "tenants.idempotency_scope.may_pin_script_version",
    "TENANT_REGION": "tenants.idempotency_scope.tenant_region",
    "TENANT_LABELS": "ordering.tenant_labels.tenant_labels",
    # Contract tests of a candidate Lua version: {"claim": "/path/to/claim.lua"}
    "FORCE_SCRIPTS": env_json_object("IDEMPOTENCY_FORCE_SCRIPTS"),
    "TTL_SECONDS": env_bounded("IDEMPOTENCY_TTL_SECONDS", 72 * 3600, low=60, high=_YEAR),
    "LEASE_MS": env_bounded("IDEMPOTENCY_LEASE_MS", 30_000, low=100, high=3_600_000),
    "AUTO_KEY_WINDOW_SECONDS": env_bounded("IDEMPOTENCY_AUTO_KEY_WINDOW", 60, low=1, high=86_400),
    # The API's own words for these refusals in the OpenAPI schema (the engine's are general)
    "PROBLEM_DESCRIPTIONS": {
        403: "Tenant suspended, or not allowed for this API client (see `code`)",
        409: "Conflict: the order's state, stock, or the same key still in progress (see `code`)",
    },
    # Circuit breaker per Redis node, JSON, e.g. {"p99_threshold_ms": 200, "open_seconds": 5}
    "BREAKER": env_json_object("IDEMPOTENCY_BREAKER"),
    # API writes per principal (a diner, or a secret server key) per minute
    # (Tenant.write_rate_per_minute overrides; 0: no default limit)
    "RATE_LIMIT_PER_MINUTE": env_bounded("API_WRITE_RATE_PER_MINUTE", 600, low=0, high=100_000_000)
    or None,
    "RATE_LIMIT_FOR_TENANT": "tenants.models.write_rate_per_minute_of",
    # API writes per minute of a whole tenant, all principals together
    # (Tenant.write_ceiling_per_minute overrides; 0: no default ceiling)
    "RATE_LIMIT_TENANT_CEILING_PER_MINUTE": env_bounded(
        "API_TENANT_WRITE_CEILING_PER_MINUTE", 3000, low=0, high=100_000_000
    )
    or None,
    "RATE_LIMIT_CEILING_FOR_TENANT": "tenants.models.write_ceiling_per_minute_of",
    # Guest sessions fill at most API_GUEST_CEILING_SHARE of that ceiling; the rest is left
    # to the merchant's keys and the diners they sign in (tenants/ceiling_share.py)
    "RATE_LIMIT_CEILING_SHARE": "tenants.ceiling_share.ceiling_share_of",
    "TOKEN_TTL_SECONDS": env_bounded(
        "IDEMPOTENCY_TOKEN_TTL_SECONDS", 24 * 3600, low=60, high=_YEAR
    ),
    # Pre-issued tokens outstanding per tenant (Tenant.token_quota overrides)
    "TOKEN_QUOTA": env_bounded("IDEMPOTENCY_TOKEN_QUOTA", 100_000, low=1, high=100_000_000),
    "TOKEN_QUOTA_FOR_TENANT": "tenants.models.token_quota_of",
    # Guests hold at most API_GUEST_CEILING_SHARE of the tenant's outstanding tokens, all
    # together; the rest is left to the merchant's keys and the diners they sign in
    "TOKEN_QUOTA_SHARE": "tenants.ceiling_share.ceiling_share_of",
    # Also take the database claim under a Redis claim (ADR 0005): a duplicate that falls back
    # to the database because Redis died mid-run then waits for that run (one more statement)
    "DATABASE_CLAIM_UNDER_REDIS": env_bool("IDEMPOTENCY_DATABASE_CLAIM_UNDER_REDIS", True),
    # Audit stream entries the drain (beat's ordering.drain_idempotency_audits) copies into
    # the database per transaction; the alert IdempotencyAuditStreamBacklog says to raise it
    "AUDIT_DRAIN_BATCH": env_bounded("IDEMPOTENCY_AUDIT_DRAIN_BATCH", 1000, low=1, high=100_000),
    # Tests only: called each time a view body runs (tests/support/view_executions.py)
    "VIEW_EXECUTED_HOOK": os.environ.get("IDEMPOTENCY_VIEW_EXECUTED_HOOK") or None,
}
# The two test-only knobs, refused off DEBUG, where they were honoured silently: a forced Lua
# script runs for every tenant instead of the versions staff activated after their contract
# run (manage.py check_lua_version), and the hook runs code of the tests in every write.
for _name, _knob in (
    ("IDEMPOTENCY_FORCE_SCRIPTS", "FORCE_SCRIPTS"),
    ("IDEMPOTENCY_VIEW_EXECUTED_HOOK", "VIEW_EXECUTED_HOOK"),
):
    if IDEMPOTENCY[_knob] and not DEBUG:
        raise ImproperlyConfigured(f"{_name} is for the test suite: refused when DEBUG is off")

# --- benchmark endpoints (bench/plain/, docs/benchmarks.md): never on in production --------
# BENCH_ENDPOINTS=1 mounts /api/bench/plain/ (a bare DRF create), /api/bench/plain-engine/ (the
# same behind @idempotent) and /api/bench/plain-peer/ (behind drf-idempotency, `bench` extra).
BENCH_ENDPOINTS = env_bool("BENCH_ENDPOINTS", False)
# They write without any credential: off DEBUG, only on a server that answers loopback names
# alone (the load test's), so a flag left set on a site reached by a real host name stops it.
_LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "[::1]", "::1"}
if BENCH_ENDPOINTS and not DEBUG and not set(ALLOWED_HOSTS) <= _LOOPBACK_HOSTS:
    raise ImproperlyConfigured(
        "BENCH_ENDPOINTS mounts endpoints that write without a credential: off DEBUG it is "
        f"refused unless ALLOWED_HOSTS names loopback hosts only, not {ALLOWED_HOSTS!r}"
    )
# IDEMPOTENCY_ENABLED=0 runs every write unprotected: a retried order is placed, a retried
# payment started, twice. It is the load test's baseline ("off", bench/http_load.py) and
# nothing else's, so off DEBUG it is refused unless BENCH_ENDPOINTS is on too, which is itself
# refused on a site that answers any name but loopback's (above).
if not IDEMPOTENCY["ENABLED"] and not DEBUG and not BENCH_ENDPOINTS:
    raise ImproperlyConfigured(
        "IDEMPOTENCY_ENABLED=0 turns the idempotency engine off, so a retried write runs "
        "twice: off DEBUG it is refused unless BENCH_ENDPOINTS=1 (a load test's loopback "
        "server)"
    )
if BENCH_ENDPOINTS:
    INSTALLED_APPS.append("bench.plain")
    IDEMPOTENCY["SCOPE_RESOLVER"] = "bench.plain.scope.resolve"
    DRF_IDEMPOTENCY = {
        "BACKEND": "drf_idempotency.backends.redis.RedisBackend",
        "BACKEND_OPTIONS": {"url": REDIS_URL or "redis://127.0.0.1:6379/0"},
        "REQUIRE_KEY": True,
    }
# Keyed hashes (idempotency/core/hashing.py): fingerprints, field hashes and the keys kept in
# audits, logs and exports are HMACs under IDEMPOTENCY_HASH_KEY (id IDEMPOTENCY_HASH_KEY_ID);
# during a rotation the previous ones still verify: IDEMPOTENCY_HASH_KEYS_PREVIOUS="1:<secret>".
# A key of its own: with SECRET_KEY's, whoever learns one (a leaked session signer) could
# also test guesses of a phone number or a diner's id against the hashes that stand for them.
_hash_key = production_secret(
    "IDEMPOTENCY_HASH_KEY",
    _DEV_HASH_KEY,
    min_chars=32,
    unlike={**_SIGNING_KEYS, "METRICS_TOKEN": METRICS_TOKEN},
)


def _previous_hash_key(entry: str) -> tuple[int, str]:
    """One ``<id>:<secret>`` of ``IDEMPOTENCY_HASH_KEYS_PREVIOUS`` (the secret may hold colons)."""
    key_id, colon, secret = entry.partition(":")
    if not (colon and key_id.strip().isdigit() and secret):
        raise ImproperlyConfigured(
            "IDEMPOTENCY_HASH_KEYS_PREVIOUS must list <id>:<secret> entries, comma-separated; "
            f"one entry is {entry[:3]!r}…"
        )
    if not DEBUG:  # a previous key verifies as the current one does: as strong, never public
        refuse_a_weak_secret("IDEMPOTENCY_HASH_KEYS_PREVIOUS", secret, _DEV_HASH_KEY, min_chars=32)
        # ... and, as the current one, held by no other hands (the hashes it verifies stand
        # for phone numbers and diner ids, which its holder could test guesses against)
        for other_name, other in {**_SIGNING_KEYS, "METRICS_TOKEN": METRICS_TOKEN}.items():
            if secret == other:
                raise ImproperlyConfigured(
                    f"IDEMPOTENCY_HASH_KEYS_PREVIOUS must hold secrets other than {other_name}"
                )
    return int(key_id), secret


IDEMPOTENCY["HASH_KEYS"] = [
    (env_bounded("IDEMPOTENCY_HASH_KEY_ID", 1, low=1, high=327), _hash_key),
    *[_previous_hash_key(entry) for entry in env_list("IDEMPOTENCY_HASH_KEYS_PREVIOUS")],
]

# --- celery / payments ------------------------------------------------------------------
# Everything below belongs to layer 4 (DESIGN §3): the Celery broker, the outbox, the cancel
# saga, payment providers and stale-lease recovery. See docs/payments-and-saga.md.


def _broker_next_to(redis_url: str, *, name: str) -> str:
    """``redis_url``'s server with the next database index: broker keys never share a database
    with idempotency keys (a test's cleanup of one cannot touch the other). A URL with no next
    database (15, the last of Redis's 16) or none that can be read stops the server: the
    broker would land in another's database, or in one made of a port number. (A ``?db=``
    query, which redis-py would read over the path, is refused earlier: :func:`redis_node_url`.)"""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(redis_url)
    if parts.scheme == "unix":  # a REDIS_URL the README allows: say what to do, not "must be"
        raise ImproperlyConfigured(
            f"{name} names a unix socket, which Celery's broker URL cannot take from it: set "
            "CELERY_BROKER_URL (e.g. redis+socket:///run/redis/redis.sock?virtual_host=1)"
        )
    index = parts.path.lstrip("/") or "0"
    if parts.scheme not in ("redis", "rediss") or not index.isdigit():
        raise ImproperlyConfigured(
            f"{name} must be redis://host:port/<database number>, not "
            f"{shown_without_password(redis_url)!r} "
            "(or set CELERY_BROKER_URL)"
        )
    if int(index) >= 15:
        raise ImproperlyConfigured(
            f"{name} uses database {index}, the last: set CELERY_BROKER_URL "
            "(the broker takes the next database by default)"
        )
    return urlunsplit(parts._replace(path=f"/{int(index) + 1}"))


def redis_broker_url(url: str) -> str:
    """``url`` when it names a Redis broker as Celery reads one: a Redis node as
    :func:`redis_node_url` reads ``REDIS_URL`` (``redis://`` or ``rediss://``), a socket
    (``redis+socket://<path>``), Sentinel (``sentinel://``) or the demo's ``memory://`` (refused
    off DEBUG below). Anything else stops the server, the URL shown without its password: it
    started, and every task's publish failed (a port that is no number a ``ValueError``, a URL
    with no scheme read as ``amqp://guest@`` the whole text as a host), while a worker never
    connected or stopped in a traceback, so payments and refunds waited in the outbox."""
    from urllib.parse import urlsplit

    scheme, separator, _ = url.partition("://")
    if separator and scheme in ("redis", "rediss"):
        try:
            return redis_node_url("CELERY_BROKER_URL", url)
        except ImproperlyConfigured:
            pass
    elif separator and (
        scheme in ("sentinel", "memory") or (scheme == "redis+socket" and urlsplit(url).path)
    ):
        return url
    raise ImproperlyConfigured(
        "CELERY_BROKER_URL must be redis://host:port/<database number>, rediss://…, "
        f"redis+socket://<socket path> or sentinel://…, not {shown_without_password(url)!r}"
    )


_redis_for_broker = REDIS_URL or (REDIS_SHARDS[0] if REDIS_SHARDS else "")
# Left empty or blank, the default beside Redis: a stray space was a broker URL of no host.
CELERY_BROKER_URL = (
    redis_broker_url(os.environ["CELERY_BROKER_URL"].strip())
    if os.environ.get("CELERY_BROKER_URL", "").strip()
    else ""
) or (
    _broker_next_to(_redis_for_broker, name="REDIS_URL" if REDIS_URL else "REDIS_SHARDS")
    if _redis_for_broker
    else ""
)
# No broker (the embedded demo): tasks run in the process that sends them, after the commit
# that scheduled them. Production (DEBUG off) must name a broker.
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", not CELERY_BROKER_URL)
if not CELERY_BROKER_URL:
    if not DEBUG:
        raise ImproperlyConfigured("CELERY_BROKER_URL (or REDIS_URL) must be set when DEBUG is off")
    CELERY_BROKER_URL = "memory://"
# Named outright, both are the demo's way to run tasks without a broker, refused off DEBUG,
# where they started silently: a memory:// broker is each process's own, so what the web
# process sends (a payment's confirmation, a cancelled order's refund) no worker ever receives;
# eager tasks run inside the web request, and a delayed one on a timer thread that is lost when
# the worker exits (ordering/background/dispatch.py).
if not DEBUG and (CELERY_TASK_ALWAYS_EAGER or CELERY_BROKER_URL.startswith("memory:")):
    raise ImproperlyConfigured(
        "CELERY_BROKER_URL=memory:// and CELERY_TASK_ALWAYS_EAGER=1 run tasks without a broker "
        "(the demo's way; no worker receives them): refused when DEBUG is off"
    )
# The queue tasks are sent to and workers consume; left empty, the default: an empty name was
# a queue no worker consumes (a worker started with it listens on none), so nothing ran.
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("CELERY_QUEUE", "").strip() or "celery"
# Seconds before a delivered-but-unacknowledged message goes back to the queue. Must exceed the
# longest task run *and* the longest retry countdown (a worker holds ETA messages unacked).
CELERY_VISIBILITY_TIMEOUT = env_bounded("CELERY_VISIBILITY_TIMEOUT", 900, low=1, high=86_400)
# Seconds between the worker's sweeps that put such messages back (kombu >= 5.7).
CELERY_RESTORE_INTERVAL = env_bounded("CELERY_RESTORE_INTERVAL", 5, low=1, high=3600)

# Outbox: rows still unpublished this long after their commit are published by the sweeper.
OUTBOX_PUBLISH_GRACE_SECONDS = env_number("OUTBOX_PUBLISH_GRACE_SECONDS", 10, low=0, high=86_400)
OUTBOX_SWEEP_SECONDS = env_number("OUTBOX_SWEEP_SECONDS", 30, low=0.1, high=86_400)
# An event sent but not consumed this long after its send (the broker lost it) is sent again,
# the wait doubling after each send (ordering/background/outbox.py); 0 turns this off.
OUTBOX_REDELIVER_AFTER_SECONDS = env_bounded(
    "OUTBOX_REDELIVER_AFTER_SECONDS", 600, low=0, high=86400
)
STALE_LEASE_SWEEP_SECONDS = env_number("STALE_LEASE_SWEEP_SECONDS", 30, low=0.1, high=86_400)
# How often the engine's audit streams are copied into the database
# (idempotency/stores/audit_stream.py)
AUDIT_DRAIN_SECONDS = env_number("AUDIT_DRAIN_SECONDS", 5, low=0.1, high=86_400)
CELERY_BEAT_SCHEDULE = {
    "drain-idempotency-audits": {
        "task": "ordering.drain_idempotency_audits",
        "schedule": AUDIT_DRAIN_SECONDS,
    },
    "sweep-outbox": {"task": "ordering.sweep_outbox", "schedule": OUTBOX_SWEEP_SECONDS},
    "reclaim-stale-leases": {
        "task": "ordering.reclaim_stale_leases",
        "schedule": STALE_LEASE_SWEEP_SECONDS,
    },
}
# An offboarding job runs in Celery messages, each sending the next; one the broker lost (a
# worker killed, Redis restarted empty) stopped the job for good while it said it was under way
# or waiting for the restaurant's money. A job nothing has moved for this long, stopped by no
# error, is sent again (ordering/privacy/offboarding.stalled_jobs); a job a step of which ran
# into an error waits for staff ("Continue selected jobs"). Longer than a message's longest
# step (the drain before the last phase) and the minute a waiting job looks again after.
OFFBOARDING_STALLED_AFTER_SECONDS = env_number(
    "OFFBOARDING_STALLED_AFTER_SECONDS",
    max(600.0, 2 * OFFBOARDING_DRAIN_SECONDS + 120),
    low=OFFBOARDING_DRAIN_SECONDS + 120,
    high=86_400,
)
CELERY_BEAT_SCHEDULE["resume-stalled-offboardings"] = {
    "task": "ordering.resume_stalled_offboardings",
    "schedule": OFFBOARDING_STALLED_AFTER_SECONDS / 2,
}

# Cancel saga: retries per step after the first attempt, then a dead letter. Backoff is
# base * 2^(attempt-1), capped, with jitter.
SAGA_MAX_RETRIES = env_bounded("SAGA_MAX_RETRIES", 3, low=0, high=100)
SAGA_RETRY_BASE_SECONDS = env_number("SAGA_RETRY_BASE_SECONDS", 2.0, low=0.01, high=3600)
SAGA_RETRY_MAX_SECONDS = env_number("SAGA_RETRY_MAX_SECONDS", 300.0, low=0.01, high=86_400)

# Payment providers: name -> adapter class and webhook secret(s) (a list allows rotation: the
# first signs, any verifies). The simulated provider is for the demo and tests only: it is on
# when DEBUG is, or when SIMULATED_PROVIDER=1; off DEBUG it needs its own secret.
# A callback signed further than this from now is a replay (400 PAYMENT_TIMESTAMP_STALE). The
# environment once named it PAYMENT_CALLBACK_TOLERANCE, not as documented: that name, still
# set, stops the server rather than be ignored for the default.
if os.environ.get("PAYMENT_CALLBACK_TOLERANCE", "").strip():
    raise ImproperlyConfigured(
        "PAYMENT_CALLBACK_TOLERANCE is not read: set PAYMENT_CALLBACK_TOLERANCE_SECONDS"
    )
PAYMENT_CALLBACK_TOLERANCE_SECONDS = env_bounded(
    "PAYMENT_CALLBACK_TOLERANCE_SECONDS", 300, low=1, high=86_400
)
PAYMENT_PROVIDERS: dict[str, dict] = {}
if env_bool("SIMULATED_PROVIDER", DEBUG):
    _simulated_secret = production_secret(
        "SIMULATED_PROVIDER_SECRET",
        _DEV_SIMULATED_PROVIDER_SECRET,
        min_chars=32,
        unlike={
            **_SIGNING_KEYS,
            "IDEMPOTENCY_HASH_KEY": _hash_key,
            **{
                f"IDEMPOTENCY_HASH_KEYS_PREVIOUS ({key_id})": key
                for key_id, key in IDEMPOTENCY["HASH_KEYS"][1:]
            },
            "METRICS_TOKEN": METRICS_TOKEN,
        },
    )
    PAYMENT_PROVIDERS["simulated"] = {
        "ADAPTER": "ordering.payments.simulated.SimulatedProvider",
        "SECRETS": [_simulated_secret],
    }
PAYMENT_DEFAULT_PROVIDER = os.environ.get("PAYMENT_DEFAULT_PROVIDER", "simulated")
if PAYMENT_DEFAULT_PROVIDER not in PAYMENT_PROVIDERS:
    raise ImproperlyConfigured(
        f"PAYMENT_DEFAULT_PROVIDER={PAYMENT_DEFAULT_PROVIDER!r} is not configured "
        "(off DEBUG the simulated provider needs SIMULATED_PROVIDER=1 and its secret)"
    )
# Payments whose callback never came are asked about at the provider (ordering/payments/
# due_checks.py): first this long after they started, then after their age (at least the
# recheck; the recheck after an unanswered ask), for at most the max age, up to a batch per beat
# run this often.
PAYMENT_RECONCILE_AFTER_SECONDS = env_bounded(
    "PAYMENT_RECONCILE_AFTER_SECONDS", 600, low=0, high=_YEAR
)
PAYMENT_RECONCILE_BATCH = env_bounded("PAYMENT_RECONCILE_BATCH", 200, low=1, high=100_000)
PAYMENT_RECONCILE_RECHECK_SECONDS = env_bounded(
    "PAYMENT_RECONCILE_RECHECK_SECONDS", 300, low=1, high=_YEAR
)
PAYMENT_RECONCILE_MAX_AGE_SECONDS = env_bounded(
    "PAYMENT_RECONCILE_MAX_AGE_SECONDS", 7 * 86400, low=0, high=_YEAR
)
PAYMENT_RECONCILE_SECONDS = env_number("PAYMENT_RECONCILE_SECONDS", 60, low=0.1, high=86_400)
CELERY_BEAT_SCHEDULE["reconcile-payments"] = {
    "task": "ordering.reconcile_payments",
    "schedule": PAYMENT_RECONCILE_SECONDS,
}
# refunds of money no order wanted (ordering/payments/capture_refunds.py) whose message was lost
CELERY_BEAT_SCHEDULE["resend-capture-refunds"] = {
    "task": "ordering.resend_capture_refunds",
    "schedule": PAYMENT_RECONCILE_SECONDS,
}
# An order still CREATED this long after it was placed gives its portions back (ordering/
# expiry.py); 0: never. Swept by a beat task this often.
UNPAID_ORDER_EXPIRY_SECONDS = env_bounded("UNPAID_ORDER_EXPIRY_SECONDS", 1800, low=0, high=_YEAR)
# An order whose payment is still pending this long after it started, once reconciliation has
# asked the provider and it had nothing settled, is cancelled and the payment voided (a capture
# after that is refunded: ordering/payments/capture_refunds.py); 0: never.
PENDING_PAYMENT_EXPIRY_SECONDS = env_bounded(
    "PENDING_PAYMENT_EXPIRY_SECONDS", 6 * 3600, low=0, high=_YEAR
)
UNPAID_ORDER_EXPIRY_SWEEP_SECONDS = env_number(
    "UNPAID_ORDER_EXPIRY_SWEEP_SECONDS", 60, low=0.1, high=86_400
)
CELERY_BEAT_SCHEDULE["expire-unpaid-orders"] = {
    "task": "ordering.expire_unpaid_orders",
    "schedule": UNPAID_ORDER_EXPIRY_SWEEP_SECONDS,
}
# Demo only: the simulated provider confirms each payment by itself (a signed callback through
# the webhook service) this many seconds after it was started; 0 leaves it to `simulate_payment`.
SIMULATED_PAYMENT_AUTO_COMPLETE_SECONDS = env_number(
    "SIMULATED_PAYMENT_AUTO_COMPLETE_SECONDS", 0, low=0, high=86_400
)
# Off DEBUG it started silently, and every payment was confirmed with no money taken: an order
# PAID, cooked and delivered for nothing.
if SIMULATED_PAYMENT_AUTO_COMPLETE_SECONDS and not DEBUG:
    raise ImproperlyConfigured(
        "SIMULATED_PAYMENT_AUTO_COMPLETE_SECONDS has the simulated provider confirm every "
        "payment by itself, no money taken: it is the demo's, refused when DEBUG is off"
    )
# The courier service the cancel saga tells to stand down. No courier partner is integrated
# yet: production uses the null adapter (nothing to cancel), the demo and tests the simulated one.
DELIVERY_ADAPTER = os.environ.get(
    "DELIVERY_ADAPTER",
    "ordering.delivery.SimulatedDelivery" if DEBUG else "ordering.delivery.NoDeliveryPartner",
)

# Stale-lease recovery (idempotency/stores/instances.py, ordering/instances.py): every process that
# takes leases heartbeats an instance id; one silent this long is dead and its leases reclaimed.
IDEMPOTENCY["INSTANCE_REGISTRY"] = env_bool("INSTANCE_REGISTRY", True)
IDEMPOTENCY["INSTANCE_HEARTBEAT_SECONDS"] = env_number(
    "INSTANCE_HEARTBEAT_SECONDS", 5, low=0.1, high=3600
)
# Checked here as well as by the engine's system check: the Celery worker and beat, which run
# the recovery, ignore the checks' verdict.
IDEMPOTENCY["INSTANCE_DEAD_AFTER_SECONDS"] = env_number(
    "INSTANCE_DEAD_AFTER_SECONDS", 15, low=0.1, high=86_400
)
if IDEMPOTENCY["INSTANCE_DEAD_AFTER_SECONDS"] <= IDEMPOTENCY["INSTANCE_HEARTBEAT_SECONDS"]:
    raise ImproperlyConfigured(
        f"INSTANCE_DEAD_AFTER_SECONDS ({IDEMPOTENCY['INSTANCE_DEAD_AFTER_SECONDS']}) must be "
        f"longer than INSTANCE_HEARTBEAT_SECONDS ({IDEMPOTENCY['INSTANCE_HEARTBEAT_SECONDS']}): "
        "every live process would look dead, and its running requests' claims be freed"
    )
# --- end celery / payments --------------------------------------------------------------

# --- data protection (docs/data-protection.md) -------------------------------------------
# Redaction: each order endpoint declares the personal paths of its answer; a tenant adds its
# own (Tenant.redacted_paths). Looked up at most every TENANT_POLICY_CACHE_SECONDS per process.
IDEMPOTENCY["REDACT_FOR_TENANT"] = "tenants.models.redacted_paths_of"
IDEMPOTENCY["TENANT_POLICY_CACHE_SECONDS"] = env_number(
    "TENANT_POLICY_CACHE_SECONDS", 30, low=0, high=86_400
)
# Retention: a tenant's own values (Tenant.record_ttl_hours, .audit_retention_days) must lie
# within these platform bounds; the admin refuses others.
RETENTION_RECORD_TTL_HOURS_MIN = env_bounded(
    "RETENTION_RECORD_TTL_HOURS_MIN", 1, low=1, high=87_600
)
RETENTION_RECORD_TTL_HOURS_MAX = env_bounded(
    "RETENTION_RECORD_TTL_HOURS_MAX", 30 * 24, low=1, high=87_600
)
RETENTION_AUDIT_DAYS_MIN = env_bounded("RETENTION_AUDIT_DAYS_MIN", 1, low=1, high=3650)
RETENTION_AUDIT_DAYS_MAX = env_bounded("RETENTION_AUDIT_DAYS_MAX", 365, low=1, high=3650)
IDEMPOTENCY["AUDIT_RETENTION_DAYS"] = env_bounded("RETENTION_AUDIT_DAYS", 30, low=1, high=3650)


def refuse_a_default_outside_its_bounds(
    name: str, value: float, bounds: str, low: float, high: float, unit: str
) -> None:
    """The platform's default retention is the retention of every tenant that chose none, so
    it is bound as a tenant's own value is: with the maximum narrowed below it (a shorter
    legal limit), tenants that had chosen more were cut to the maximum while every tenant
    that had chosen nothing kept the default, past the platform's own maximum."""
    if low > high:
        raise ImproperlyConfigured(
            f"{bounds}_MIN ({low:g}) must not be more than {bounds}_MAX ({high:g})"
        )
    if not low <= value <= high:
        raise ImproperlyConfigured(
            f"{name} ({value:g} {unit}) must be within {bounds}_MIN..{bounds}_MAX "
            f"({low:g}..{high:g} {unit}): it is the retention of every tenant that chose none"
        )


refuse_a_default_outside_its_bounds(
    "RETENTION_AUDIT_DAYS",
    IDEMPOTENCY["AUDIT_RETENTION_DAYS"],
    "RETENTION_AUDIT_DAYS",
    RETENTION_AUDIT_DAYS_MIN,
    RETENTION_AUDIT_DAYS_MAX,
    "days",
)
refuse_a_default_outside_its_bounds(
    "IDEMPOTENCY_TTL_SECONDS",
    IDEMPOTENCY["TTL_SECONDS"] / 3600,
    "RETENTION_RECORD_TTL_HOURS",
    RETENTION_RECORD_TTL_HOURS_MIN,
    RETENTION_RECORD_TTL_HOURS_MAX,
    "hours",
)
IDEMPOTENCY["RECORD_TTL_FOR_TENANT"] = "tenants.models.record_ttl_seconds_of"
IDEMPOTENCY["AUDIT_RETENTION_OVERRIDES"] = "tenants.models.audit_retention_overrides"
# The purge (tenants/retention.py) runs on Celery beat: rows per DELETE, and DELETEs per kind
# and run (what is left is reported as overdue and purged by the next run).
IDEMPOTENCY["PURGE_BATCH_SIZE"] = env_bounded(
    "RETENTION_PURGE_BATCH_SIZE", 1000, low=1, high=1_000_000
)
RETENTION_PURGE_MAX_BATCHES = env_bounded("RETENTION_PURGE_MAX_BATCHES", 100, low=1, high=1_000_000)
RETENTION_PURGE_SECONDS = env_number("RETENTION_PURGE_SECONDS", 3600, low=1, high=86_400)
# What a diner wrote on an order (note, phone, address) is cleared this long after the order
# was completed or cancelled (ordering/privacy/contact_retention.py), by the same purge.
ORDER_CONTACT_RETENTION_DAYS = env_bounded("ORDER_CONTACT_RETENTION_DAYS", 30, low=1, high=3650)
if ORDER_CONTACT_RETENTION_DAYS * 24 < RETENTION_RECORD_TTL_HOURS_MAX:
    # a reply kept for retries shows the order's note (the contact fields are redacted, the
    # note is not): one kept longer than the note outlived the purge that cleared it
    raise ImproperlyConfigured(
        f"ORDER_CONTACT_RETENTION_DAYS ({ORDER_CONTACT_RETENTION_DAYS * 24} hours) is shorter "
        f"than RETENTION_RECORD_TTL_HOURS_MAX ({RETENTION_RECORD_TTL_HOURS_MAX} hours): a reply "
        "kept for retries, which shows the order's note, would outlive the note; narrow "
        "RETENTION_RECORD_TTL_HOURS_MAX (and IDEMPOTENCY_TTL_SECONDS) to the same time"
    )
# A guest's order cancelled before any payment (no money moved, and no one can ask for it
# again) is deleted this long after its last change (ordering/privacy/guest_orders.py), by the
# same purge; never before a reply kept for retries, which shows the order, would expire.
GUEST_UNPAID_ORDER_RETENTION_DAYS = env_bounded(
    "GUEST_UNPAID_ORDER_RETENTION_DAYS", 30, low=1, high=3650
)
if GUEST_UNPAID_ORDER_RETENTION_DAYS * 24 < RETENTION_RECORD_TTL_HOURS_MAX:
    raise ImproperlyConfigured(
        f"GUEST_UNPAID_ORDER_RETENTION_DAYS ({GUEST_UNPAID_ORDER_RETENTION_DAYS * 24} hours) is "
        f"shorter than RETENTION_RECORD_TTL_HOURS_MAX ({RETENTION_RECORD_TTL_HOURS_MAX} hours): "
        "a reply kept for retries would replay an order already deleted; narrow "
        "RETENTION_RECORD_TTL_HOURS_MAX (and IDEMPOTENCY_TTL_SECONDS) to the same time"
    )
# An offboarding keeps the leaving restaurant's payments started this many days back that a
# provider could still capture late (voided or declined), and each is kept this long after its
# last change, so a capture reported meanwhile is refunded by the platform (ordering/payments/
# departed.py); then the same purge deletes it, unless its refund is to run or waits for staff.
DEPARTED_PAYMENT_RETENTION_DAYS = env_bounded(
    "DEPARTED_PAYMENT_RETENTION_DAYS", 30, low=1, high=3650
)
CELERY_BEAT_SCHEDULE["purge-expired-data"] = {
    "task": "tenants.purge_expired_data",
    "schedule": RETENTION_PURGE_SECONDS,
}
# Log fields a tenant may drop from the lines logged while its requests run (Tenant.log_fields)
LOG_FIELDS_TENANT_MAY_KEEP = ("request_id", "idempotency_key_hmac", "order_id", "diner_id")
# --- end data protection ------------------------------------------------------------------
