"""Forgetting what the engine keeps about one principal, or about a whole tenant.

The engine stores, per tenant (an opaque key) and principal (an opaque string): idempotency
records with their reply bodies (PostgreSQL), duplicate-hit audits (PostgreSQL), and in Redis,
under the tenant's hash tag ``{t:<tenant>}`` or ``{t:<tenant>:<bucket>}``, claim entries
(``idem:{…}:<scope hash>:<key hash>``), pre-issued tokens (``idem:{…}:tok:<id>``, worth
``p:<principal>`` unused or ``u:<claim key>`` once consumed), token quota ledgers
(``idem:{…}:tokq``, and ``idem:{…}:tokq:<principal hash>`` per principal) and rate
counters (``rl:{…}:<principal hash>:<window>s``). Finished results
are also held in every process's local cache, which drops a key when it is announced on the
invalidation channel.

Everything here deletes what exists and reports how much; nothing depends on state kept
between calls, so running a call twice, or again after a crash half-way, is safe and the second
run finds only what the first left. Redis is walked with ``SCAN`` on every standalone node and
on every primary of a cluster (a hot tenant's sub-buckets spread over several slots), one page
of at most ``batch`` keys at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import reduce
from itertools import count
from operator import or_
from typing import Any

from django.db import DEFAULT_DB_ALIAS, transaction
from django.db.models import BinaryField, F, Func, IntegerField, Q, QuerySet, Value
from django.db.models.lookups import GreaterThan
from django.urls import URLPattern, URLResolver, get_resolver
from redis.cluster import RedisCluster

from idempotency.core.conf import channel_name, engine_hook, engine_setting
from idempotency.core.hashing import hash_keys, principal_digest
from idempotency.core.keys import MAX_SCOPE_LENGTH, redis_key_for, redis_key_from_digest, scope_of
from idempotency.core.tokens import QUOTA_BUCKET_MS
from idempotency.models import DuplicateAudit, IdempotencyRecord
from idempotency.stores.audit_stream import drain_audits
from idempotency.stores.nodes import local_cache

WRITE_METHODS = ("POST", "PUT", "PATCH", "DELETE")
_TOKEN_UNUSED = b"p:"
_TOKEN_USED = b"u:"
# Delete an unused token and take it off its expiry bucket of the tenant's quota ledger, as
# consuming it would (claim_token.lua): an erased token no longer counts as outstanding.
# KEYS[1] the token, KEYS[2] its ledger (same hash tag); ARGV[1] its unused value, ARGV[2] the
# ledger's bucket width (ms).
_FORGET_UNUSED_TOKEN_LUA = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local expires_at = redis.call('PEXPIRETIME', KEYS[1])
if expires_at > 0 then
  local bucket = math.floor(expires_at / tonumber(ARGV[2]))
  if tonumber(redis.call('HGET', KEYS[2], bucket) or '0') > 0 then
    redis.call('HINCRBY', KEYS[2], bucket, -1)
  end
end
return redis.call('DEL', KEYS[1])
"""


@dataclass
class Forgotten:
    """How much one call removed."""

    records: int = 0
    audits: int = 0
    redis_keys: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"records": self.records, "audits": self.audits, "redis_keys": self.redis_keys}


# --- Redis: every node, every primary ---------------------------------------------------------


def node_clients() -> Iterator[Any]:
    """A client per standalone node and per cluster primary (``ALL_REDIS_CLIENTS``): SCAN and
    the deletes go to the node that holds the keys."""
    hook = engine_hook("ALL_REDIS_CLIENTS")
    for client in hook() if hook else []:
        if isinstance(client, RedisCluster):
            for node in client.get_primaries():
                yield client.get_redis_connection(node)
        else:
            yield client


def tenant_key_patterns(tenant_key: str) -> tuple[str, ...]:
    """SCAN patterns of every key under the tenant's hash tag, sub-buckets included; the
    closing brace or colon keeps tenant ``1`` from matching tenant ``12``."""
    tag = _glob_escape(f"t:{tenant_key}")
    return (f"*{{{tag}}}*", f"*{{{tag}:*}}*")


def scan_pages(client: Any, patterns: Iterable[str], *, batch: int) -> Iterator[list[bytes]]:
    """Pages of at most ``batch`` keys matching ``patterns`` on one node (a full pass each)."""
    for pattern in patterns:
        page: list[bytes] = []
        for key in client.scan_iter(match=pattern, count=max(batch, 100)):
            page.append(key)
            if len(page) >= batch:
                yield page
                page = []
        if page:
            yield page


def delete_keys(client: Any, keys: list[bytes]) -> int:
    """Delete ``keys`` on the node that holds them and announce each on the invalidation
    channel, so every process's local cache drops it (one key per command: keys of several
    cluster slots may share a node)."""
    if not keys:
        return 0
    channel = channel_name("invalidate")
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.unlink(key)
    deleted = sum(int(n) for n in pipe.execute())
    _forget_here(k.decode() if isinstance(k, bytes) else k for k in keys)
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.publish(channel, key)
    pipe.execute()
    return deleted


def announce(keys: Iterable[str]) -> None:
    """Tell every process's local cache to drop ``keys`` (results it may hold although their
    Redis entry is gone). PUBLISH reaches a cluster's every node; shards each have their own
    listeners, so each standalone node hears it."""
    keys = list(keys)
    if not keys:
        return
    _forget_here(keys)
    channel = channel_name("invalidate")
    hook = engine_hook("ALL_REDIS_CLIENTS")
    for client in hook() if hook else []:
        if isinstance(client, RedisCluster):
            for key in keys:
                client.publish(channel, key)
            continue
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.publish(channel, key)
        pipe.execute()


def _forget_here(keys: Iterable[str]) -> None:
    """Drop ``keys`` from this process's local cache at once. The channel reaches it only
    through a listener, and a process without one (database-only mode: no Redis for the
    tenant, or none at all) kept replaying an erased reply from its cache for up to
    ``LOCAL_CACHE_TTL_SECONDS``."""
    cache = local_cache()
    for key in keys:
        cache.invalidate(key)


def forget_tenant_keys(tenant_key: str, *, batch: int = 500) -> int:
    """Delete every Redis key of the tenant, node by node; how many were deleted. Deleted
    when called: a generator here deleted nothing for a caller that did not iterate it, and
    said nothing of it (:func:`forget_tenant_keys_by_page` is that generator, for a caller
    recording progress between pages)."""
    return sum(forget_tenant_keys_by_page(tenant_key, batch=batch))


def forget_tenant_keys_by_page(tenant_key: str, *, batch: int = 500) -> Iterator[int]:
    """Delete every Redis key of the tenant, node by node, a page at a time as it is
    iterated; yields the count of each page, so a caller can record progress between pages.
    Nothing is deleted until it is iterated."""
    for client in node_clients():
        for page in scan_pages(client, tenant_key_patterns(tenant_key), batch=batch):
            yield delete_keys(client, page)


# --- one principal ----------------------------------------------------------------------------


def write_routes() -> set[str]:
    """Every route of the URLconf, spelt as ``request.resolver_match.route`` spells it: what
    the route part of a scope can be."""
    routes: set[str] = set()

    def walk(patterns: Iterable[URLPattern | URLResolver], prefix: str) -> None:
        for item in patterns:
            route = _join_route(prefix, str(item.pattern))
            if isinstance(item, URLResolver):
                walk(item.url_patterns, route)
            else:
                routes.add(route)

    walk(get_resolver().url_patterns, "")
    return routes


def principal_scopes(principal: str, routes: Iterable[str]) -> set[str]:
    """Every scope ``principal`` can have had: its write methods on the given routes."""
    return {
        scope_of(principal=principal, method=method, route=route)
        for route in routes
        for method in WRITE_METHODS
    }


def _principal_records(principal: str) -> Q:
    """The principal's records: their scopes start with ``<principal>|``, unless the scope was
    too long to keep whole (:func:`~idempotency.core.keys.scope_of`), when its readable prefix
    may have lost the principal's end; those are found by their exact names, one per write
    method and route, as the principal's Redis keys are."""
    long_scopes = {
        scope
        for scope in principal_scopes(principal, write_routes())
        if len(scope) == MAX_SCOPE_LENGTH
    }
    return Q(scope__startswith=f"{principal}|") | Q(scope__in=long_scopes)


def principal_records(*, tenant_key: str, principal: str) -> QuerySet[IdempotencyRecord]:
    """The tenant's records of the principal's own scopes: what :func:`forget_principal`
    removes first, and what a copy of the principal's data lists (one way of finding them,
    so a copy shows exactly what an erasure would remove)."""
    return IdempotencyRecord.objects.filter(tenant_key=tenant_key).filter(
        _principal_records(principal)
    )


def principal_audits(*, tenant_key: str, principal: str) -> QuerySet[DuplicateAudit]:
    """The tenant's duplicate-hit audits of the principal (an audit keeps at most 255
    characters of the principal, ``AuditEvent.as_row``). Audits still waiting in a Redis
    stream are not rows yet: drain them first (``drain_audits``)."""
    return DuplicateAudit.objects.filter(tenant_key=tenant_key, principal=principal[:255])


def forget_principal(
    *,
    tenant_key: str,
    principal: str,
    also_records_showing: Sequence[bytes] = (),
    batch: int = 500,
) -> Forgotten:
    """Remove the principal's records (and every record of the tenant whose stored reply
    contains one of ``also_records_showing``, e.g. another principal's answer that shows this
    one's id: give whole JSON members, such as ``b'"diner_id":"alice"'``, so that the id as
    part of another value, or as another field's value, matches nothing), its audits, and its
    Redis keys: claim entries of its scopes, its tokens, its rate counters, and any copy of
    those other replies on another node or sub-bucket. Local caches are told about every key
    removed."""
    own = principal_records(tenant_key=tenant_key, principal=principal)
    done = Forgotten(records=forget_records(own, batch=batch))
    shown: set[str] = set()
    if also_records_showing:
        done.records += forget_records(
            IdempotencyRecord.objects.filter(tenant_key=tenant_key).filter(
                _showing_any(also_records_showing)
            ),
            batch=batch,
            removed_keys=shown,
        )
    drain_audits()  # audits still waiting in a Redis stream would land after the delete
    done.audits = delete_in_batches(
        principal_audits(tenant_key=tenant_key, principal=principal), batch=batch
    )
    done.redis_keys = _forget_principal_keys(tenant_key, principal, copies_of=shown, batch=batch)
    return done


class _BodyPosition(Func):
    """Where ``needle`` starts in a record's stored reply, 0 when it is not there, compared
    byte for byte by the database (``POSITION`` on a ``bytea``, ``INSTR`` on a SQLite blob)."""

    output_field = IntegerField()

    def __init__(self, needle: bytes) -> None:
        super().__init__(F("response_body"), Value(needle, output_field=BinaryField()))

    def _operands(self, compiler: Any) -> tuple[tuple[str, list[Any]], tuple[str, list[Any]]]:
        body, needle = (compiler.compile(e) for e in self.get_source_expressions())
        return (body[0], list(body[1])), (needle[0], list(needle[1]))

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list[Any]]:
        (body, body_params), (needle, needle_params) = self._operands(compiler)
        return f"POSITION({needle} IN {body})", [*needle_params, *body_params]

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list[Any]]:
        (body, body_params), (needle, needle_params) = self._operands(compiler)
        return f"INSTR({body}, {needle})", [*body_params, *needle_params]


def _showing_any(shown: Sequence[bytes]) -> Q:
    """The records whose stored reply contains one of ``shown``, found by the database: an
    erasure reads the few replies that show someone, not every reply the tenant keeps (a
    busy tenant keeps hundreds of thousands within the TTL, and reading them all took
    seconds per diner, past a request's timeout for a few diners at once)."""
    return reduce(or_, (Q(GreaterThan(_BodyPosition(needle), 0)) for needle in shown))


def scope_hash(scope: str) -> str:
    """The scope's part of a claim key (``idem:{…}:<scope hash>:<key hash>``)."""
    return redis_key_for(tenant="", scope=scope, key="").partition("}:")[2].split(":")[0]


def _forget_principal_keys(
    tenant_key: str, principal: str, *, copies_of: Iterable[str] = (), batch: int
) -> int:
    """Delete the principal's keys on every node, and every copy of the entries ``copies_of``
    (other callers' replies that showed the principal, deleted with their records on the
    tenant's node of now): a tenant that moved when a node was added, or was split into
    sub-buckets since, left its earlier entries under another node or hash tag until they
    expire, and one of them replayed the erased principal's reply once the tenant was back
    there. A claim key's part after its hash tag (``<scope hash>:<key digest>``) is the same
    on every node and in every sub-bucket."""
    scopes = principal_scopes(principal, write_routes())
    scope_hashes = {scope_hash(scope) for scope in scopes}
    copies = {key.partition("}:")[2].encode() for key in copies_of}
    # its rate counters' and token ledger's name, under every configured hash key (one
    # rotated in since they were written still finds them)
    rate_hashes = {principal_digest(principal, key=key)[:16] for key in hash_keys()}
    unused_token = _TOKEN_UNUSED + principal.encode()
    removed = 0
    for client in node_clients():
        for page in scan_pages(client, tenant_key_patterns(tenant_key), batch=batch):
            tokens = [k for k in page if k.split(b"}:", 1)[-1].startswith(b"tok:")]
            values = _values(client, tokens)
            removed += sum(
                _forget_unused_token(client, key, unused_token)
                for key in tokens
                if values.get(key) == unused_token
            )
            doomed = []
            for key in page:
                kind, _, rest = key.partition(b"}:")
                head = rest.split(b":", 1)[0]
                if kind.startswith(b"rl:"):
                    if head.decode("utf-8", "replace") in rate_hashes:
                        doomed.append(key)
                elif head == b"tokq":
                    # its ledger, tokq:<principal hash> (core/tokens.py)
                    if rest.partition(b":")[2].decode("utf-8", "replace") in rate_hashes:
                        doomed.append(key)
                elif head == b"tok":
                    value = values.get(key) or b""
                    used_by = value[len(_TOKEN_USED) :].split(b"}:", 1)[-1].split(b":", 1)[0]
                    if value.startswith(_TOKEN_USED) and used_by.decode() in scope_hashes:
                        doomed.append(key)
                elif head.decode("utf-8", "replace") in scope_hashes or rest in copies:
                    doomed.append(key)
            removed += delete_keys(client, doomed)
    return removed


def _forget_unused_token(client: Any, key: bytes, unused_value: bytes) -> int:
    ledger = key[: key.index(b"}:") + 2] + b"tokq"
    return int(client.eval(_FORGET_UNUSED_TOKEN_LUA, 2, key, ledger, unused_value, QUOTA_BUCKET_MS))


def _values(client: Any, keys: list[bytes]) -> dict[bytes, bytes | None]:
    if not keys:
        return {}
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.get(key)
    return dict(zip(keys, pipe.execute(), strict=True))


# --- database rows ----------------------------------------------------------------------------


def forget_records(
    queryset: QuerySet[IdempotencyRecord],
    *,
    batch: int = 500,
    matching: Callable[[bytes], bool] | None = None,
    max_batches: int | None = None,
    removed_keys: set[str] | None = None,
) -> int:
    """Delete the records of ``queryset`` (only those whose body ``matching`` accepts, if
    given) in batches, each batch's Redis entries with them, and announce their keys to local
    caches; at most ``max_batches`` batches if given. Returns how many records were deleted,
    and adds their Redis keys to ``removed_keys`` if given. A batch whose entries Redis could
    not delete keeps its records (the error propagates)."""
    deleted = 0
    last_id = 0
    buckets_of = engine_setting("HOT_TENANT_BUCKETS")
    for _ in count() if max_batches is None else range(max_batches):
        rows = list(
            # where the records are written (default, idempotency.E007), not where the host's
            # router reads: a replica behind it lacks the newest, which were left unerased
            queryset.using(DEFAULT_DB_ALIAS)
            .filter(id__gt=last_id)
            .order_by("id")
            .values_list("id", "tenant_key", "scope", "key", "response_body")[:batch]
        )
        if not rows:
            return deleted
        last_id = rows[-1][0]
        chosen = [r for r in rows if matching is None or matching(bytes(r[4]))]
        if not chosen:
            continue
        keys = [
            redis_key_from_digest(tenant=t, scope=s, digest=k, buckets=buckets_of.get(t, 1))
            for _, t, s, k, _ in chosen
        ]
        # The rows commit only once their entries are gone: a Redis error rolls them back, and
        # running again finds them. Committed first, they left the entries behind with nothing
        # to find them by, and another caller's reply kept replaying what was erased.
        with transaction.atomic():
            deleted += IdempotencyRecord.objects.filter(id__in=[r[0] for r in chosen]).delete()[0]
            _delete_entries(keys, tenant_key=chosen[0][1])
            announce(keys)
        if removed_keys is not None:
            removed_keys.update(keys)
    return deleted


def _delete_entries(keys: list[str], *, tenant_key: str) -> None:
    hook = engine_hook("REDIS_CLIENT_FOR_TENANT")
    client = hook(tenant_key) if hook else None
    if client is None:
        return
    for key in keys:  # one key per command: a hot tenant's keys span cluster slots
        client.unlink(key)


def delete_in_batches(
    queryset: QuerySet[Any], *, batch: int = 500, max_batches: int | None = None
) -> int:
    """Delete ``queryset``'s rows ``batch`` at a time (at most ``max_batches`` batches if
    given), each batch its own transaction, so a large delete neither holds locks long nor
    loses what it did when interrupted."""
    deleted = 0
    for _ in count() if max_batches is None else range(max_batches):
        with transaction.atomic():
            # read where the rows are written (default), as forget_records does
            ids = list(
                queryset.using(DEFAULT_DB_ALIAS).order_by("pk").values_list("pk", flat=True)[:batch]
            )
            if not ids:
                return deleted
            deleted += queryset.model._base_manager.filter(pk__in=ids).delete()[0]
    return deleted


def _join_route(prefix: str, route: str) -> str:
    """How Django joins nested routes into ``ResolverMatch.route``."""
    if not prefix:
        return route
    return prefix + route.removeprefix("^")


def _glob_escape(text: str) -> str:
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)
