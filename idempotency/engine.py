"""The protection engine: one request through layers 1-3 (DESIGN §3).

::

    local LRU ──hit──► replay (0 Redis, 0 DB)
        │miss
    Redis claim (1 round trip, Lua) ──HIT──► replay      ──REUSED──► 422
        │MISS                        └─IN_PROGRESS─► committed in DB? replay : 409 / wait
    transaction { view ; INSERT record ON CONFLICT } ──conflict──► roll back, replay committed
        │commit
    Redis finish (compare owner) ──► answer, X-Idempotent-Result: MISS

Without Redis (not configured, or failing) the claim step is a database lookup and the
database's unique constraint alone arbitrates: the contract stays the same, duplicates still
execute once. A 5xx answer is rolled back and its key released, so the client may retry.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import IntegrityError, transaction
from django.http import HttpResponse
from redis.exceptions import RedisError

from idempotency import audit, db_store, responses
from idempotency.conf import Policy, engine_setting
from idempotency.fingerprint import FINGERPRINT_VERSION, diff_field_hashes
from idempotency.keys import ScopedKey
from idempotency.local_cache import LocalResultCache
from idempotency.outcomes import ClaimResult, Outcome, StoredResponse
from idempotency.redis_store import new_owner_token
from idempotency.stores import GuardedStore, local_cache, redis_store_for

logger = logging.getLogger(__name__)

Execute = Callable[[], HttpResponse]


@dataclass(frozen=True)
class IdempotentRequest:
    """Everything the engine needs to know about one request, already validated."""

    scoped: ScopedKey
    fingerprints: dict[int, str]
    field_hashes: dict[str, str]
    policy: Policy
    endpoint: str
    request_meta: dict = field(default_factory=dict)
    # Renders a resource URL afresh, for replays of bodies stored as a pointer.
    render_pointer: Callable[[str], HttpResponse] | None = None

    @property
    def fingerprint(self) -> str:
        return self.fingerprints[FINGERPRINT_VERSION]

    @property
    def ttl_seconds(self) -> int:
        return self.policy.effective_ttl(automatic=self.scoped.is_automatic)


class _AlreadyCommitted(Exception):
    """Another transaction committed a live record for this key first."""


def process(req: IdempotentRequest, execute: Execute) -> HttpResponse:
    """Answer ``req``: replay, refuse, or run ``execute`` exactly once across duplicates."""
    cache = local_cache()
    cached = cache.lookup(req.scoped.redis_key, fingerprints=req.fingerprints)
    if cached is not None and cached.outcome is Outcome.HIT:
        return _answer(req, cached, source="local")
    store = redis_store_for(req.scoped.tenant)
    if store is not None:
        owner = new_owner_token()
        try:
            claim = _claim(req, store, owner)
        except RedisError:
            logger.warning("Redis claim failed; answering from the database", exc_info=True)
        else:
            if claim.outcome is Outcome.MISS:
                return _execute(req, execute, store=store, owner=owner)
            if claim.outcome is Outcome.IN_PROGRESS:
                return _in_progress(req, claim)
            return _answer(req, claim, source="redis")
    committed = db_store.committed_result(req.scoped)
    if committed is not None:
        return _answer(req, _as_claim(req, committed), source="database")
    return _execute(req, execute, store=None, owner=None)


def _claim(req: IdempotentRequest, store: GuardedStore, owner: str) -> ClaimResult:
    """Claim the key; under the ``wait`` policy keep asking while it is in progress."""
    deadline = time.monotonic() + (req.policy.wait_seconds if req.policy.in_flight == "wait" else 0)
    poll = engine_setting("WAIT_POLL_MS") / 1000
    while True:
        claim = store.claim(
            key=req.scoped.redis_key,
            fingerprints=req.fingerprints,
            current_version=FINGERPRINT_VERSION,
            owner=owner,
            lease_ms=engine_setting("LEASE_MS"),
            field_hashes=req.field_hashes,
        )
        if claim.outcome is not Outcome.IN_PROGRESS or time.monotonic() + poll > deadline:
            return claim
        time.sleep(poll)


def _in_progress(req: IdempotentRequest, claim: ClaimResult) -> HttpResponse:
    """Redis says running. If the database already has the result (the first request died
    between commit and finish), replay it; otherwise it really is running: 409."""
    committed = db_store.committed_result(req.scoped)
    if committed is not None:
        return _answer(req, _as_claim(req, committed), source="database")
    _audit(req, "IN_PROGRESS", source="redis")
    return responses.in_progress(claim.retry_after_ms)


def _execute(
    req: IdempotentRequest,
    execute: Execute,
    *,
    store: GuardedStore | None,
    owner: str | None,
) -> HttpResponse:
    stored: StoredResponse | None = None
    try:
        with transaction.atomic():
            response = execute()
            if response.status_code >= 500:
                transaction.set_rollback(True)
            else:
                stored = _to_stored(response)
                if not db_store.insert_record(
                    scoped=req.scoped,
                    fingerprint=req.fingerprint,
                    fingerprint_version=FINGERPRINT_VERSION,
                    field_hashes=req.field_hashes,
                    response=stored,
                    ttl_seconds=req.ttl_seconds,
                ):
                    raise _AlreadyCommitted
    except (_AlreadyCommitted, IntegrityError):
        # A duplicate won the race in the database (Redis lost the claim, or database-only
        # mode). Our transaction is rolled back; the winner's committed result is the answer.
        committed = db_store.committed_result(req.scoped)
        if committed is None:
            _release(store, req, owner)
            raise
        _finish(store, req, owner, committed.response)
        return _answer(req, _as_claim(req, committed), source="database")
    except BaseException:
        _release(store, req, owner)
        raise
    if stored is None:
        _release(store, req, owner)
    else:
        _finish(store, req, owner, stored)
        _remember(req, stored)
    response[responses.RESULT_HEADER] = "MISS"
    return response


def _answer(req: IdempotentRequest, result: ClaimResult, *, source: str) -> HttpResponse:
    """A HIT or a MISMATCH, audited."""
    assert result.response is not None or result.outcome is Outcome.MISMATCH
    if result.outcome is Outcome.HIT and result.response is not None:
        if source != "local":
            _remember(req, result.response)
        _audit(req, "HIT", source=source, resource=_location(result.response))
        return responses.replay(result.response, render_pointer=req.render_pointer)
    differing = diff_field_hashes(result.stored_field_hashes or {}, req.field_hashes)
    _audit(req, "REUSED", source=source, differing=differing)
    return responses.key_reused()


def _as_claim(req: IdempotentRequest, committed: db_store.CommittedResult) -> ClaimResult:
    """The committed record as a claim answer: HIT if it was the same operation."""
    same = req.fingerprints.get(committed.fingerprint_version) == committed.fingerprint
    return ClaimResult(
        Outcome.HIT if same else Outcome.MISMATCH,
        response=committed.response,
        stored_fingerprint=committed.fingerprint,
        fingerprint_version=committed.fingerprint_version,
        stored_field_hashes=committed.field_hashes,
    )


def _to_stored(response: HttpResponse) -> StoredResponse:
    """What a replay will send: the status, allow-listed headers (never ``Set-Cookie``) and the
    body — or, over ``MAX_STORED_BODY_BYTES``, a pointer to the created resource when the
    response names one in ``Location`` (the replay then renders the resource afresh)."""
    allowed = {h.lower() for h in engine_setting("REPLAY_HEADERS")}
    headers = tuple((k, v) for k, v in response.items() if k.lower() in allowed)
    body = response.content
    location = response.get("Location", "")
    if len(body) > engine_setting("MAX_STORED_BODY_BYTES") and location:
        return StoredResponse(status=response.status_code, headers=headers, pointer=location)
    if len(body) > engine_setting("MAX_STORED_BODY_BYTES"):
        logger.warning(
            "storing a %d-byte body: over the cap and no Location to point to", len(body)
        )
    return StoredResponse(status=response.status_code, headers=headers, body=body)


def _location(response: StoredResponse) -> str:
    return next((v for k, v in response.headers if k.lower() == "location"), "")


def _remember(req: IdempotentRequest, stored: StoredResponse) -> None:
    cache: LocalResultCache = local_cache()
    cache.put(
        req.scoped.redis_key,
        fingerprint=req.fingerprint,
        fingerprint_version=FINGERPRINT_VERSION,
        response=stored,
        ttl_s=req.ttl_seconds,
    )


def _finish(
    store: GuardedStore | None,
    req: IdempotentRequest,
    owner: str | None,
    stored: StoredResponse,
) -> None:
    if store is None or owner is None:
        return
    try:
        if not store.finish(
            key=req.scoped.redis_key, owner=owner, response=stored, ttl_ms=req.ttl_seconds * 1000
        ):
            logger.warning("idempotency lease lost before finish; the database holds the result")
    except RedisError:
        logger.warning("Redis finish failed; the database holds the result", exc_info=True)


def _release(store: GuardedStore | None, req: IdempotentRequest, owner: str | None) -> None:
    if store is None or owner is None:
        return
    try:
        store.release(key=req.scoped.redis_key, owner=owner)
    except RedisError:
        logger.warning("Redis release failed; the lease will expire", exc_info=True)


def _audit(
    req: IdempotentRequest,
    outcome: str,
    *,
    source: str,
    differing: list[str] | None = None,
    resource: str = "",
) -> None:
    audit.writer.record(
        audit.AuditEvent(
            tenant_key=req.scoped.tenant,
            endpoint=req.endpoint,
            key=req.scoped.key,
            outcome=outcome,
            source=source,
            principal=req.scoped.principal,
            request_meta=req.request_meta,
            differing_fields=differing or [],
            resource_ref=resource,
        )
    )
