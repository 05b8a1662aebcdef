"""Which version of each engine Lua script a call runs (seed 2.5: hot update, gray release).

The registry keeps, per script name, the stable version and at most one canary with its
audience: a percentage of tenants (a stable hash of the tenant into 100 buckets), an allow-list
of tenants, and regions. With no stable version in the database the script shipped in
``idempotency/scripts/lua/`` is used, so a fresh install needs no setup.

Running processes pick up a change without a restart: every change is published on the Redis
channel ``<CHANNEL_PREFIX>:scripts`` and a listener thread reloads the table; as a safety net
the table is also reloaded when older than ``SCRIPT_REFRESH_SECONDS`` (checked on use, no
thread needed).

Every load re-checks each row's source against the SHA-256 recorded (and reviewed) when it was
uploaded: a row changed behind the workflow's back (a direct database write) is refused and
logged, and calls run what they would run without it (the stable version, else the shipped
file). A request resolves its whole set of versions once (:meth:`ScriptRegistry.resolve`), so
its claim, finish and release never mix versions when a change lands mid-request.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from idempotency.core.conf import channel_name, engine_hook, engine_setting

logger = logging.getLogger(__name__)

BUCKETS = 100
# The scripts the engine calls that a stored version may replace (claim_token.lua is a prelude
# that always runs in front of the chosen claim).
VERSIONED_SCRIPTS = ("claim", "finish", "release")
# How long a process's first use of the registry waits for its listener to subscribe.
SUBSCRIBE_WAIT_SECONDS = 1.0


@dataclass(frozen=True)
class ScriptRef:
    """A script's source as a call should run it; ``version`` 0 is the shipped file."""

    name: str
    version: int
    source: str


@dataclass(frozen=True)
class Rollout:
    stable: ScriptRef | None = None
    canary: ScriptRef | None = None
    percent: int = 0
    tenants: frozenset[str] = field(default_factory=frozenset)
    regions: frozenset[str] = field(default_factory=frozenset)
    versions: dict[int, ScriptRef] = field(default_factory=dict)

    def for_tenant(self, tenant_key: str, region: str | None) -> ScriptRef | None:
        if self.canary is not None and (
            tenant_key in self.tenants
            or (region is not None and region in self.regions)
            or tenant_bucket(tenant_key) < self.percent
        ):
            return self.canary
        return self.stable


_NO_ROLLOUT = Rollout()  # a script with no uploaded version: the shipped file runs


def tenant_bucket(tenant_key: str) -> int:
    """0..99, the same for a tenant in every process: who is in a 5 % canary."""
    digest = hashlib.blake2b(f"lua-canary:{tenant_key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % BUCKETS


@cache
def shipped(name: str) -> ScriptRef:
    source = (Path(__file__).parent / "lua" / f"{name}.lua").read_text("utf-8")
    return ScriptRef(name=name, version=0, source=source)


class ScriptRegistry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._table: dict[str, Rollout] = {}
        self._loaded_at = float("-inf")
        self._listener: threading.Thread | None = None
        self._subscribed = threading.Event()

    def choose(
        self, name: str, *, tenant_key: str, region: str | None = None, pinned: int | None = None
    ) -> ScriptRef:
        """The version of ``name`` this tenant's call runs (a pinned version wins if it exists)."""
        return _chosen(
            self._rollouts(),
            name,
            tenant_key=tenant_key,
            region=region,
            pinned=pinned,
            forced=engine_setting("FORCE_SCRIPTS"),
        )

    def resolve(
        self, *, tenant_key: str, region: str | None = None, pinned: int | None = None
    ) -> dict[str, ScriptRef]:
        """The version of every versioned script for one request, from one table."""
        table = self._rollouts()
        forced = engine_setting("FORCE_SCRIPTS")
        return {
            name: _chosen(
                table, name, tenant_key=tenant_key, region=region, pinned=pinned, forced=forced
            )
            for name in VERSIONED_SCRIPTS
        }

    def reload(self) -> None:
        """Read the table from the database now."""
        from idempotency.models import LuaScriptVersion

        rows = LuaScriptVersion.objects.exclude(state=LuaScriptVersion.State.DRAFT).filter(
            name__in=VERSIONED_SCRIPTS
        )
        table: dict[str, dict] = {}
        for row in rows:
            if sha256_of(row.source) != row.sha256:
                logger.error(
                    "Lua script %s v%s refused: its source does not match the SHA-256 recorded "
                    "at upload (%s); it was changed outside the review workflow",
                    row.name,
                    row.version,
                    row.sha256,
                )
                continue
            ref = ScriptRef(name=row.name, version=row.version, source=row.source)
            entry = table.setdefault(row.name, {"versions": {}})
            entry["versions"][row.version] = ref
            if row.state == LuaScriptVersion.State.STABLE:
                entry["stable"] = ref
            elif row.state == LuaScriptVersion.State.CANARY:
                entry.update(
                    canary=ref,
                    percent=row.canary_percent,
                    tenants=frozenset(map(str, row.canary_tenants)),
                    regions=frozenset(map(str, row.canary_regions)),
                )
        with self._lock:
            self._table = {name: Rollout(**entry) for name, entry in table.items()}
            self._loaded_at = time.monotonic()

    def _rollouts(self) -> dict[str, Rollout]:
        self._ensure_listener()
        if time.monotonic() - self._loaded_at > engine_setting("SCRIPT_REFRESH_SECONDS"):
            try:
                self.reload()
            except Exception:  # keep serving the last table; the next call tries again
                logger.exception("could not reload Lua script versions")
                self._loaded_at = time.monotonic()
        return self._table

    def _ensure_listener(self) -> None:
        if self._listener is not None and self._listener.is_alive():
            return
        client = _channel_client()
        if client is None:
            return
        with self._lock:
            if self._listener is None or not self._listener.is_alive():
                self._listener = threading.Thread(
                    target=self._listen, args=(client,), name="lua-script-listener", daemon=True
                )
                self._listener.start()
        # The first table is read once the channel is subscribed, so no change announced in
        # between is missed and the table needs no second read (waits once per process).
        self._subscribed.wait(SUBSCRIBE_WAIT_SECONDS)

    def _listen(self, client: object) -> None:
        """Reload on every announcement; on a broken connection, resubscribe (and reload,
        since announcements may have been missed). The first subscription marks the table
        stale only if it was read before (announcements may have been missed meanwhile)."""
        backoff = 0.1
        while True:
            try:
                pubsub = client.pubsub(ignore_subscribe_messages=False)
                pubsub.subscribe(channel_name("scripts"))
                for message in pubsub.listen():
                    backoff = 0.1
                    if message["type"] == "message" or (
                        message["type"] == "subscribe"
                        and (self._subscribed.is_set() or self._loaded_at > float("-inf"))
                    ):
                        self._loaded_at = float("-inf")  # reload on next use
                    if message["type"] == "subscribe":
                        self._subscribed.set()
            except Exception as exc:
                logger.warning("Lua script channel lost (%s); resubscribing", exc)
                time.sleep(backoff)
                backoff = min(backoff * 2, 5.0)


def sha256_of(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def _chosen(
    table: dict[str, Rollout],
    name: str,
    *,
    tenant_key: str,
    region: str | None,
    pinned: int | None,
    forced: dict[str, str],
) -> ScriptRef:
    """``forced``: the ``FORCE_SCRIPTS`` setting, read once by the caller."""
    path = forced.get(name)
    if path:
        return _forced_script(name, path)
    rollout = table.get(name, _NO_ROLLOUT)
    if pinned is not None and pinned in rollout.versions:
        return rollout.versions[pinned]
    return rollout.for_tenant(tenant_key, region) or shipped(name)


def _channel_client() -> object | None:
    hook = engine_hook("SCRIPT_CHANNEL_CLIENT")
    return hook() if hook else None


def _forced_script(name: str, path: str) -> ScriptRef:
    """``IDEMPOTENCY["FORCE_SCRIPTS"] = {"claim": "/path/claim.lua"}`` runs that file for every
    tenant: how the contract tests are run against a candidate version."""
    return ScriptRef(name=name, version=-1, source=Path(path).read_text("utf-8"))


def announce() -> None:
    """Tell every running process to reload the table (best effort; the refresh covers it)."""
    client = _channel_client()
    if client is None:
        return
    try:
        client.publish(channel_name("scripts"), "reload")
    except Exception:
        logger.warning("could not announce a Lua script change", exc_info=True)


registry = ScriptRegistry()
