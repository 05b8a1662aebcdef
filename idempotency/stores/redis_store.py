"""The Redis layer of the idempotency engine (seed 2.1, 2.3, 4.2): claim, finish, release.

Every state change is one Lua script on one key, so it is atomic and needs one round trip
(``EVALSHA``; redis-py's ``register_script`` loads the script again after ``NOSCRIPT``, e.g.
after a failover or ``SCRIPT FLUSH``). A script touches only ``KEYS[1]``, which keeps it valid
on Redis Cluster: the caller's key carries a tenant hash tag, ``idem:{t:42}:...``.

Redis is a fast path, not the truth: a lost lease or a lost result is answered by the
database layer, so the methods here report what happened and never raise for it.

Entry layout (one HASH per idempotency key):

- ``st``  ``p`` in progress / ``d`` done
- ``own`` owner token, while in progress
- ``fp``  fingerprint; ``fpv`` its version
- ``res`` ``StoredResponse.to_bytes()``, when done; zlib-compressed behind the marker ``SZ\x01``
  when that is smaller (a JSON body about halves: a finished one-line order then costs Redis
  under 1 KB, ``docs/benchmarks.md``). Uncompressed entries stay readable.
- ``loc`` the answer's ``Location`` ("" for none), when done: ``claim_audit.lua`` names the
  resource of a replay's audit from it (entries finished before it was kept have none).
- ``fh``  optional JSON of per-field hashes, for mismatch forensics

A pre-issued token (:mod:`idempotency.core.tokens`) is consumed by ``claim_token.lua``, which is
``claim.lua`` behind a token check, on two keys of the same hash tag (so one slot).

Off a Cluster, a claim can carry the audit of the replay it may answer
(:class:`AuditAppend`): ``claim_audit.lua`` wraps whichever claim runs and appends the event to
the node's audit stream when it answers HIT, so a replay Redis serves is one round trip.
"""

from __future__ import annotations

import json
import secrets
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal

import redis
from redis.cluster import RedisCluster
from redis.commands.core import Script

from idempotency.core.outcomes import ClaimResult, Outcome, StoredResponse

__all__ = [
    "DEFAULT_CHANNEL",
    "RedisIdempotencyStore",
    "TokenRefusal",
    "TokenUse",
    "new_owner_token",
]

DEFAULT_CHANNEL = "idem:invalidate"
"""Pub/sub channel on which purged keys are announced to in-process caches."""

_SCRIPTS = ("claim", "finish", "release", "claim_token")
# Where claim_audit.lua takes the claim it wraps.
_WRAPPED_CLAIM = "--[[CLAIM]]\n"
# Scripts made of several files, run as one: the token check falls through to the plain claim.
_COMPOSED = {"claim_token": ("claim_token", "claim"), "claim_token_prelude": ("claim_token",)}


@dataclass(frozen=True)
class TokenUse:
    """The pre-issued token a claim must consume (see ``claim_token.lua``).

    ``unused_value`` is the token key's value while issued and unused, ``used_value`` the mark
    that names this operation once consumed, kept ``mark_ttl_ms``. Consuming it also takes it
    off the tenant's and its principal's counts of outstanding tokens (``quota_key`` and
    ``principal_quota_key``, buckets of ``quota_bucket_ms``; ``issue_tokens.lua``).
    """

    key: str
    unused_value: str
    used_value: str
    mark_ttl_ms: int
    quota_key: str
    quota_bucket_ms: int
    principal_quota_key: str


@dataclass(frozen=True)
class AuditAppend:
    """The audit a claim appends itself if it answers HIT (``claim_audit.lua``): the node's
    stream, its approximate cap, and the event's fields except the resource, which the
    script takes from the entry's ``loc`` field."""

    stream: str
    maxlen: int
    fields: Mapping[str, str]


@dataclass(frozen=True)
class TokenRefusal:
    """A token claim refused: ``used`` by another operation, or ``unknown`` (expired, or
    never issued)."""

    reason: Literal["used", "unknown"]


def new_owner_token() -> str:
    """A fresh, unguessable owner token for :meth:`RedisIdempotencyStore.claim`.

    It starts with this process's instance id (``<host>:<pid>:<random>/``), so stale-lease
    recovery (:mod:`idempotency.stores.instances`) can tell the claims of a dead process apart; the
    first call also starts the process's heartbeat.
    """
    from idempotency.stores.instances import owner_prefix  # lazily: this module needs no Django

    return owner_prefix() + secrets.token_hex(16)


@cache
def _with_audit(claim_source: str) -> str:
    """``claim_source`` wrapped by ``claim_audit.lua`` (cached: a handful of sources run)."""
    head, tail = _script_source("claim_audit").split(_WRAPPED_CLAIM)
    return head + claim_source + "\n" + tail


@cache
def _script_source(name: str) -> str:
    files = _COMPOSED.get(name, (name,))
    lua = resources.files("idempotency.scripts").joinpath("lua")
    return "\n".join(lua.joinpath(f"{part}.lua").read_text("utf-8") for part in files)


class RedisIdempotencyStore:
    """Atomic idempotency-key operations against one Redis node or a Redis Cluster.

    The client must return raw bytes (``decode_responses=False``, the redis-py and
    django-redis default): stored bodies are binary.
    """

    def __init__(
        self, client: redis.Redis | RedisCluster, *, channel: str = DEFAULT_CHANNEL
    ) -> None:
        if client.get_connection_kwargs().get("decode_responses"):
            raise ValueError("the Redis client must not decode responses (bodies are binary)")
        self._client = client
        self._on_cluster = is_cluster(client)
        self._channel = channel
        self._scripts = {name: client.register_script(_script_source(name)) for name in _SCRIPTS}
        self._versions: dict[str, Script] = {}  # source -> registered script

    @property
    def client(self) -> redis.Redis | RedisCluster:
        """The raw client, for the engine's other scripts on the same node (rate limits,
        token issuing) so they share its connection pool and its breaker."""
        return self._client

    @property
    def appends_audits_in_claim(self) -> bool:
        """Whether a claim can append its own audit: not on a Cluster, where the node's audit
        stream is not in the claim key's slot."""
        return not self._on_cluster

    @property
    def channel(self) -> str:
        """The invalidation channel this store publishes on."""
        return self._channel

    @property
    def script_shas(self) -> dict[str, str]:
        """SHA1 of each script as the server knows it, for the script registry and the admin."""
        return {name: script.sha for name, script in self._scripts.items()}

    def claim(
        self,
        *,
        key: str,
        fingerprints: Mapping[int, str],
        current_version: int,
        owner: str,
        lease_ms: int,
        field_hashes: Mapping[str, str] | None = None,
        token: TokenUse | None = None,
        source: str | None = None,
        audit: AuditAppend | None = None,
    ) -> ClaimResult | TokenRefusal:
        """Claim ``key`` for ``owner`` for ``lease_ms``, or report why not.

        ``fingerprints`` holds the request's fingerprint under every version this code can
        compute (``fingerprint.all_fingerprints``); an entry stored by a process on another
        version is compared under the stored version, so a rolling change of the canonical
        form causes no false mismatches. An entry under a version the caller cannot compute
        is reported as a mismatch (the safe answer).

        With a ``token``, the same call first consumes it (``claim_token.lua``): a token
        consumed by another operation, or absent, is a :class:`TokenRefusal`.

        ``source`` (every method has it) runs another version of the script than the shipped
        one (``idempotency.scripts.registry``); EVALSHA with a reload on NOSCRIPT either way.

        ``audit`` (only where :attr:`appends_audits_in_claim`): a HIT is appended to the audit
        stream in the same call and comes back with ``audited`` set; a HIT without it (an
        entry finished before ``loc`` was kept) is the caller's to audit.
        """
        if current_version not in fingerprints:
            raise ValueError("fingerprints must include current_version")
        _check_fingerprints(fingerprints)
        _check_token("owner", owner)
        _check_ms("lease_ms", lease_ms)
        args = [
            fingerprints[current_version],
            current_version,
            owner,
            lease_ms,
            _hashes_json(field_hashes),
            ",".join(f"{version}:{fp}" for version, fp in fingerprints.items()),
        ]
        keys = [key]
        if token is not None:
            _check_token("token value", token.unused_value)
            _check_token("token mark", token.used_value)
            _check_ms("mark_ttl_ms", token.mark_ttl_ms)
            keys += [token.key, token.quota_key, token.principal_quota_key]
            args += [token.unused_value, token.used_value, token.mark_ttl_ms, token.quota_bucket_ms]
            prelude = _script_source("claim_token_prelude")
            source = "\n".join((prelude, source or _script_source("claim")))
        if audit is not None and self.appends_audits_in_claim:
            keys.append(audit.stream)
            fields = [item for pair in audit.fields.items() for item in pair]
            args += [audit.maxlen, *fields, len(fields) + 1]
            source = _with_audit(source or _script_source("claim"))
        if source is None:
            reply = self._scripts["claim"](keys=keys, args=args)
        else:
            reply = self._versioned(source)(keys=keys, args=args)
        tag = _text(reply[0])
        if tag == "TOKEN_USED":
            return TokenRefusal("used")
        if tag == "TOKEN_UNKNOWN":
            return TokenRefusal("unknown")
        return _parse_claim_reply(reply)

    def finish(
        self,
        *,
        key: str,
        owner: str,
        response: StoredResponse,
        ttl_ms: int,
        source: str | None = None,
    ) -> bool:
        """Store the response if ``owner`` still holds the lease; ``False`` if it was lost."""
        _check_token("owner", owner)
        _check_ms("ttl_ms", ttl_ms)
        reply = pack_reply(response)
        return self._run("finish", key, owner, reply, ttl_ms, response.location, source=source) == 1

    def release(self, *, key: str, owner: str, source: str | None = None) -> bool:
        """Delete the claim if ``owner`` still holds it, so the client may retry at once."""
        _check_token("owner", owner)
        return self._run("release", key, owner, source=source) == 1

    def purge(self, *, key: str) -> None:
        """Delete the entry whatever its state, and tell in-process caches to drop it."""
        if self._on_cluster:
            # Cluster pipelines refuse PUBLISH; two calls are fine for this rare admin action.
            self._client.delete(key)
            self.publish_invalidation(key)
            return
        pipe = self._client.pipeline(transaction=False)
        pipe.delete(key)
        pipe.publish(self._channel, key)
        pipe.execute()

    def publish_invalidation(self, key: str) -> None:
        """Announce that ``key`` changed, so every ``LocalResultCache`` listening drops it."""
        self._client.publish(self._channel, key)

    def _run(self, script: str, key: str, *args: Any, source: str | None = None) -> Any:
        runner = self._scripts[script] if source is None else self._versioned(source)
        return runner(keys=[key], args=list(args))

    def _versioned(self, source: str) -> Script:
        script = self._versions.get(source)
        if script is None:
            script = self._versions[source] = self._client.register_script(source)
        return script


def is_cluster(client: Any) -> bool:
    """Whether ``client`` is a ``RedisCluster``. redis-py declares it a ``typing.Protocol``, so
    ``isinstance`` runs Python code (~2 µs); requests ask this on every node lookup."""
    return _is_cluster_type(type(client))


@cache
def _is_cluster_type(cls: type) -> bool:
    return issubclass(cls, RedisCluster)


PACKED_MARKER = b"SZ\x01"  # a `res` field that starts so is zlib-compressed
_ZIP_FROM_BYTES = 256  # smaller replies do not shrink enough to pay for the marker


def pack_reply(response: StoredResponse) -> bytes:
    """The ``res`` field: the serialised reply, compressed when that makes it smaller."""
    raw = response.to_bytes()
    if len(raw) < _ZIP_FROM_BYTES:
        return raw
    packed = PACKED_MARKER + zlib.compress(raw, 1)
    return packed if len(packed) < len(raw) else raw


def unpack_reply(raw: bytes) -> StoredResponse:
    """Read a ``res`` field written by :func:`pack_reply` (or by an older version, which
    never compressed); ``ValueError`` on anything else."""
    raw = bytes(raw)
    if raw.startswith(PACKED_MARKER):
        try:
            raw = zlib.decompress(raw[len(PACKED_MARKER) :])
        except zlib.error as exc:
            raise ValueError(f"corrupt compressed StoredResponse: {exc}") from exc
    return StoredResponse.from_bytes(raw)


def _parse_claim_reply(reply: Sequence[Any]) -> ClaimResult:
    tag = _text(reply[0])
    if tag == "MISS":
        return ClaimResult(Outcome.MISS)
    if tag == "HIT":
        return ClaimResult(
            Outcome.HIT,
            response=unpack_reply(reply[1]),
            fingerprint_version=int(reply[2]),
            stored_fingerprint=_text(reply[3]),
            audited=len(reply) > 4 and _text(reply[4]) == "AUDITED",
        )
    if tag == "IN_PROGRESS":
        remaining = int(reply[1])
        return ClaimResult(
            Outcome.IN_PROGRESS, retry_after_ms=remaining if remaining >= 0 else None
        )
    if tag == "REUSED":
        stored_fp, stored_fh, stored_fpv = (_text(item) for item in reply[1:4])
        return ClaimResult(
            Outcome.MISMATCH,
            stored_fingerprint=stored_fp or None,
            stored_field_hashes=json.loads(stored_fh) if stored_fh else None,
            fingerprint_version=int(stored_fpv) if stored_fpv else None,
        )
    raise ValueError(f"unexpected reply from claim.lua: {reply!r}")


def _text(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _hashes_json(field_hashes: Mapping[str, str] | None) -> str:
    if not field_hashes:
        return ""
    return json.dumps(dict(field_hashes), sort_keys=True, separators=(",", ":"))


def _check_fingerprints(fingerprints: Mapping[int, str]) -> None:
    """Versions are ints and fingerprints contain no separator of claim.lua's ``alt`` list."""
    for version, fp in fingerprints.items():
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise ValueError(f"fingerprint version must be a non-negative int: {version!r}")
        _check_token("fingerprint", fp)
        if "," in fp or ":" in fp:
            raise ValueError("a fingerprint must not contain ',' or ':'")


def _check_token(name: str, value: str) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty str")


def _check_ms(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int of milliseconds, not {value!r}")
