"""The protection engine: one request through layers 1-3 (DESIGN §3).

::

    local LRU ──hit──► replay (0 Redis, 0 DB)
        │miss
    Redis claim (1 round trip, Lua) ──HIT──► replay      ──REUSED──► 422
        │MISS                        └─IN_PROGRESS─► committed in DB? replay : 409 / wait
    transaction { view ; INSERT record ON CONFLICT } ──conflict──► roll back, replay committed
        │commit
    Redis finish (compare owner) ──► answer, X-Idempotent-Result: MISS

Without a Redis claim (not configured, the node's breaker open, a Redis error) the claim is
taken in the database instead (``stores/database_claim.py``, ADR 0005): inside the business
transaction, before the committed-record check, so a duplicate waits for the first to commit
(``wait``) or is refused with 409 (``reject``) and never runs the view. The contract stays the
same. A 5xx answer is rolled back and its key released, so the client may retry; so is
a refusal too large to keep (``idempotency/core/replies.py`` bounds every stored reply).

A pre-issued token used as the key is consumed in the claim's own Lua call; a refused token
(used by another operation, or expired) is still answered from the database when this very
operation committed there, so a retry never loses its replay.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from http import HTTPStatus
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.http import HttpResponse
from redis.exceptions import RedisError

from idempotency import metrics
from idempotency.audit import MISS, AuditEvent
from idempotency.core import responses
from idempotency.core.conf import Policy, engine_hook, engine_setting
from idempotency.core.error_codes import IdempotencyErrorCode
from idempotency.core.fingerprint import FINGERPRINT_VERSION, diff_field_hashes
from idempotency.core.hashing import keyed_digest
from idempotency.core.keys import ScopedKey
from idempotency.core.outcomes import ClaimResult, Outcome, StoredResponse
from idempotency.core.replies import to_stored
from idempotency.core.tenant_policy import tenant_record_ttl, tenant_redaction
from idempotency.core.transactions import (
    Opening,
    WriterBusy,
    engine_transaction,
    new_savepoint,
    roll_back_to,
    statements_ride_along,
    view_savepoint,
)
from idempotency.scripts.registry import ScriptRef, registry
from idempotency.stores import audit_stream, database_claim
from idempotency.stores import database as db_store
from idempotency.stores.audit_pending import pending
from idempotency.stores.local_cache import LocalResultCache
from idempotency.stores.nodes import (
    GuardedStore,
    cache_beside,
    node_cannot_serve,
    node_for,
    usable,
)
from idempotency.stores.redis_store import TokenRefusal, TokenUse, new_owner_token

logger = logging.getLogger(__name__)

Execute = Callable[[], HttpResponse]


@dataclass(frozen=True)
class IdempotentRequest:
    """Everything the engine needs to know about one request, already validated."""

    scoped: ScopedKey
    fingerprints: dict[int, str]
    policy: Policy
    endpoint: str
    request_meta: dict = field(default_factory=dict)
    # Renders a resource URL afresh, for replays of bodies stored as a pointer.
    render_pointer: Callable[[str], HttpResponse | None] | None = None
    # Set when the key is a pre-issued token: the claim consumes it (idempotency/core/tokens.py).
    token: TokenUse | None = None
    # The endpoint's own memory of the key (a business row under its own unique key): the
    # answer for a token Redis no longer knows whose record is gone too, or None.
    recall: Callable[[], HttpResponse | None] | None = None
    # Which Lua script versions run (idempotency/scripts/registry.py): the tenant's region for
    # region canaries, and a version pinned by a staff or test client (X-Lua-Version).
    region: str | None = None
    script_pin: int | None = None
    # The version new fingerprints are stored under (it names the hash key, see
    # idempotency/core/fingerprint.py), and the per-field hashes under a version: this one's
    # are stored with a first execution; another's name the differing fields against an
    # entry stored before a key rotation. None: the request has no per-field hashes.
    fingerprint_version: int = FINGERPRINT_VERSION
    field_hashes_under: Callable[[int], dict[str, str]] | None = None
    # Set when the key is a token no signing key verifies (400 IDEMPOTENCY_TOKEN_INVALID): the
    # answer unless the caller's own operation under it answers (:func:`_own_answer`).
    unverified_token: HttpResponse | None = None

    @cached_property
    def node(self) -> GuardedStore | None:
        """The Redis node serving this key, whatever its breaker says (None: database-only):
        found once per request (the tenant's routing hook, the node's name) for the claim,
        this process's cache and the finish, which each looked it up again."""
        return node_for(self.scoped.tenant, key=self.scoped.redis_key)

    @cached_property
    def cache_mark(self) -> int | None:
        """This process's result cache's :meth:`~LocalResultCache.mark` as the request began
        (:func:`process` reads it first): its result is kept in that cache only if no key was
        invalidated since. Between the commit of its record and its reply reaching the cache,
        an erasure could remove both and announce the key, and the reply put after that
        announcement replayed the erased diner for ``LOCAL_CACHE_TTL_SECONDS``."""
        cache = cache_beside(self.node)
        return None if cache is None else cache.mark()

    @cached_property
    def field_hashes(self) -> dict[str, str]:
        """The per-field hashes under :attr:`fingerprint_version`, computed when first asked
        for: a claim stores them, a REUSED answer compares them, and a replay the worker's
        own table serves needs neither."""
        if self.field_hashes_under is None:
            return {}
        return self.field_hashes_under(self.fingerprint_version)

    @cached_property
    def audit_key(self) -> str:
        """The key as audits keep it (:func:`~idempotency.core.hashing.keyed_digest`): a first
        execution prepares a HIT's audit for its claim and writes its own MISS, one HMAC."""
        return keyed_digest(self.scoped.key)

    @cached_property
    def audit_event_id(self) -> str:
        """The id of this request's one audit event. Every path that may report it (its claim's
        own append, the stream, the database) names it, so copies of it are one row."""
        return uuid.uuid4().hex

    @cached_property
    def scripts(self) -> dict[str, ScriptRef]:
        """The Lua script versions this request runs, resolved once: its claim, finish and
        release come from one set even when a version changes while it runs."""
        return registry.resolve(
            tenant_key=self.scoped.tenant, region=self.region, pinned=self.script_pin
        )

    def script_source(self, name: str) -> str | None:
        """The source of the version of ``name`` this request runs; None: the shipped one."""
        ref = self.scripts[name]
        return None if ref.version == 0 else ref.source

    @property
    def fingerprint(self) -> str:
        return self.fingerprints[self.fingerprint_version]

    @cached_property
    def ttl_seconds(self) -> int:
        """How long the result replays: the tenant's record TTL, the endpoint's, the default."""
        return self.policy.effective_ttl(
            automatic=self.scoped.is_automatic, tenant_ttl=tenant_record_ttl(self.scoped.tenant)
        )

    @cached_property
    def redact(self) -> tuple[str, ...]:
        """The JSON paths blanked in the stored reply: the endpoint's, then the tenant's."""
        return tuple(dict.fromkeys((*self.policy.redact, *tenant_redaction(self.scoped.tenant))))


class _AlreadyCommitted(Exception):
    """Another transaction committed a live record for this key first."""


def process(req: IdempotentRequest, execute: Execute) -> HttpResponse:
    """Answer ``req``: replay, refuse, or run ``execute`` exactly once across duplicates."""
    if req.unverified_token is not None:
        return _own_answer(req) or req.unverified_token
    cache = cache_beside(req.node)
    # the cache's mark is taken before anything is read or stored (IdempotentRequest.cache_mark)
    cached = (
        cache.lookup(req.scoped.redis_key, fingerprints=req.fingerprints)
        if cache is not None and req.cache_mark is not None
        else None
    )
    if cached is not None and cached.outcome is Outcome.HIT:
        return _answer(req, cached, source="local")
    store = usable(req.node)
    if store is not None:
        owner = new_owner_token()
        try:
            claim = _claim(req, store, owner)
        except RedisError as exc:
            # the node's state in a line (every request says it while the node is down or
            # refusing: a traceback each flooded the log); anything else with its traceback
            logger.warning(
                "Redis claim failed (%s); answering from the database",
                exc,
                exc_info=not node_cannot_serve(exc),
            )
        else:
            if isinstance(claim, TokenRefusal):
                return _token_refused(req, claim)
            if claim.outcome is Outcome.MISS:
                return _execute(req, execute, store=store, owner=owner)
            if claim.outcome is Outcome.IN_PROGRESS:
                return _in_progress(req, claim)
            return _answer(req, claim, source="redis")
    if not reads_under_claim_and_closes():
        committed = db_store.committed_result(req.scoped)
        if committed is not None:
            return _answer(req, _as_claim(req, committed), source="database")
    return _execute(req, execute, store=None, owner=None)


def _own_answer(req: IdempotentRequest) -> HttpResponse | None:
    """The answer this caller's operation under ``req``'s key left on this endpoint, if any:
    its live record's (a replay, or 422 for another payload), else the endpoint's memory of the
    key (``recall``).

    Asked for a pre-issued token whose signature no key verifies any longer: ``SECRET_KEY``
    rotated and its fallback dropped after a day, an unused token's life, while a used token
    stays its operation's key for the retention (72 h). A record exists only under a key that
    verified when it ran, and in the caller's own scope, so it is proof enough; anything else
    is refused as before (a forged token costs this one indexed SELECT, no Redis)."""
    committed = db_store.committed_result(req.scoped)
    if committed is not None:
        return _answer(req, _as_claim(req, committed), source="database")
    return req.recall() if req.recall is not None else None


def reads_under_claim_and_closes() -> bool:
    """Whether a request without a Redis claim skips the look-up before its transaction: its
    database claim's query reads the record anyway, in the same round trip, and a replay found
    there is answered in that transaction, which its audit's last statement commits (three
    round trips for a replay, as with the look-up; one less for a first execution). Where
    statements cannot ride along, or inside a caller's transaction, the look-up stays."""
    if connection.in_atomic_block:
        return False
    connection.ensure_connection()  # what the driver can do is known once connected
    return statements_ride_along()


def _claim(req: IdempotentRequest, store: GuardedStore, owner: str) -> ClaimResult | TokenRefusal:
    """Claim the key; under the ``wait`` policy keep asking while it is in progress."""
    deadline = time.monotonic() + (req.policy.wait_seconds if req.policy.in_flight == "wait" else 0)
    poll = engine_setting("WAIT_POLL_MS") / 1000
    # Only token claims pass the extra argument, so stores without token support still work.
    extra: dict[str, Any] = {"token": req.token} if req.token is not None else {}
    if store.store.appends_audits_in_claim:
        # a HIT is audited by the claim itself: a replay Redis serves is one round trip
        extra["audit"] = audit_stream.claim_append(_event(req, "HIT", source="redis"))
    source = req.script_source("claim")
    while True:
        claim = store.claim(
            key=req.scoped.redis_key,
            fingerprints=req.fingerprints,
            current_version=req.fingerprint_version,
            owner=owner,
            lease_ms=engine_setting("LEASE_MS"),
            field_hashes=req.field_hashes,
            source=source,
            **extra,
        )
        if isinstance(claim, TokenRefusal):
            return claim
        if claim.outcome is not Outcome.IN_PROGRESS or time.monotonic() + poll > deadline:
            return claim
        time.sleep(poll)


def _token_refused(req: IdempotentRequest, refusal: TokenRefusal) -> HttpResponse:
    """Redis refuses the token. If this very operation committed in the database (Redis lost
    its claim entry and token mark: eviction, failover, or a run in database-only mode), the
    record answers as for any key; if the record is gone too but the endpoint remembers the
    key (``req.recall``), its answer does; otherwise the token cannot be used here, and that
    refusal is recorded as the operation's answer (:func:`_keep_token_refusal`)."""
    committed = db_store.committed_result(req.scoped)
    if committed is not None:
        return _answer(req, _as_claim(req, committed), source="database")
    if refusal.reason == "unknown" and req.recall is not None:
        # Its mark went with its result (the retention, a purge): "take a new token" would
        # do again what the token did, where the endpoint remembers it and says so.
        recalled = req.recall()
        if recalled is not None:
            return recalled
    if refusal.reason == "used":
        _audit(req, "REUSED", source="redis", differing=["endpoint"])
        refused = responses.problem(
            409,
            IdempotencyErrorCode.TOKEN_USED,
            "This idempotency token was already used on another endpoint; use a new token.",
        )
    else:
        # Redis holds the tokens alone: one that lost its data (restarted empty, flushed)
        # knows none issued before, as if each had expired; the words say so.
        refused = responses.problem(
            422,
            IdempotencyErrorCode.TOKEN_UNKNOWN,
            "This idempotency token is not known: it expired, was never issued, or was lost "
            "with the token store's data; use a new token.",
        )
    return _keep_token_refusal(req, refused)


def _keep_token_refusal(req: IdempotentRequest, refused: HttpResponse) -> HttpResponse:
    """Record a token's refusal as its operation's answer, so that it stands.

    The client is told to take a new token and does; a copy of the refused request still in
    flight must then never run. Redis that lost a token's mark (restarted without its data)
    refuses it as unknown, and once Redis is down the token is accepted as a plain key
    (database-only mode): that late copy placed a second order beside the new token's. With the
    refusal recorded under the token, the database claim reads it and replays it. Should the
    operation have committed meanwhile (a copy run while Redis was away), its record is the
    answer instead: one outcome either way."""
    try:
        with transaction.atomic():
            _record(req, to_stored(refused, redact=req.redact))
    except (_AlreadyCommitted, IntegrityError):
        committed = db_store.committed_result(req.scoped)
        if committed is not None:
            return _answer(req, _as_claim(req, committed), source="database")
    return refused


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
    doomed = False
    committed: db_store.CommittedResult | None = None
    # Without a Redis claim (or with DATABASE_CLAIM_UNDER_REDIS) the key is claimed in the
    # database, in this transaction (ADR 0005).
    database_claim_held = store is None or engine_setting("DATABASE_CLAIM_UNDER_REDIS")
    try:
        # The tenant's policy is read before the view runs: a refused write leaves the
        # transaction unusable for queries until it is rolled back, and its refusal is stored
        # all the same (both are cached on the request). A hook that fails here releases the
        # key, as any failure does.
        _ = req.redact, req.ttl_seconds
        with engine_transaction() as tx:
            # Under a Redis claim the lease keeps duplicates out while a doomed refusal is
            # recorded after the rollback: no savepoint needed there.
            savepoint = new_savepoint() if store is None else None
            if database_claim_held:
                committed = _claim_in_database(
                    req, redis_claimed=store is not None, opening=tx.opening(), savepoint=savepoint
                )
            if committed is not None and store is None and tx.commit_rides_along():
                # A replay, found under the only claim: answered in this transaction, which
                # its audit's last statement commits (reads_under_claim_and_closes).
                return _answer(req, _as_claim(req, committed), source="database", closing=True)
            if committed is None:
                response, stored, doomed = _run_view(
                    req, execute, savepoint=savepoint, commit=tx.commit_rides_along()
                )
        if committed is not None:
            # Committed before (Redis lost it, or a duplicate committed while we waited for the
            # claim): replay it, run nothing.
            return _answer_committed(req, committed, store=store, owner=owner)
        if doomed:
            with transaction.atomic():
                _record(req, stored)
    except database_claim.ClaimBusy:
        # A duplicate holds the database claim (reject policy, or the wait budget ran out).
        _release(store, req, owner)
        _audit(req, "IN_PROGRESS", source="database")
        return responses.in_progress(None)
    except WriterBusy:
        # SQLite's writer lock, held by another request for longer than the database's
        # timeout: nothing ran. The audit waits in the in-process batch, as the database is
        # what is busy (writing it now would wait that timeout again).
        _release(store, req, owner)
        metrics.count(tenant=req.scoped.tenant, endpoint=req.endpoint, outcome="IN_PROGRESS")
        pending.record(_event(req, "IN_PROGRESS", source="database"))
        return responses.in_progress(None)
    except (_AlreadyCommitted, IntegrityError):
        # A duplicate won the race in the database (Redis lost the claim, or database-only
        # mode). Our transaction is rolled back; the winner's committed result is the answer.
        committed = db_store.committed_result(req.scoped)
        if committed is None:
            _release(store, req, owner)
            raise
        return _answer_committed(req, committed, store=store, owner=owner)
    except BaseException:
        _release(store, req, owner)
        raise
    if stored is None:
        _release(store, req, owner)
    else:
        _keep_once_committed(store, req, owner, stored)
    _audit(req, MISS, source="redis" if store is not None else "database")
    response[responses.RESULT_HEADER] = "MISS"
    return response


def _claim_in_database(
    req: IdempotentRequest, *, redis_claimed: bool, opening: Opening, savepoint: str | None
) -> db_store.CommittedResult | None:
    """Take the key's database claim in the current transaction (ADR 0005); the record a
    duplicate committed first, if any, which is then the answer, and the view does not run.

    Without a Redis claim this is what keeps duplicates from running the view; under a Redis
    claim (``DATABASE_CLAIM_UNDER_REDIS``) it makes a duplicate that falls back to the database
    while Redis dies mid-run wait for this run. Either way the key's record is read under the
    claim, in the claim's round trip on PostgreSQL: a Redis MISS for a key whose result is
    committed (Redis restarted without its data, flushed, or evicted the entry) replays that
    result instead of running the view again, whose second run could call out (a payment, an
    e-mail) or fail where the first succeeded. ``opening``: the transaction's, whose first
    statement the claim is (it carries the ``BEGIN`` where it may); ``savepoint``: the view's,
    established under the claim (only without a Redis claim)."""
    wait = req.policy.wait_seconds if req.policy.in_flight == "wait" else 0.0
    return database_claim.claim_and_read(
        req.scoped,
        wait_seconds=wait,
        opening=opening,
        savepoint=None if redis_claimed else savepoint,
    )


def _run_view(
    req: IdempotentRequest, execute: Execute, *, savepoint: str | None, commit: bool
) -> tuple[HttpResponse, StoredResponse | None, bool]:
    """Run the view in the engine's transaction and record its answer there: the response,
    what is kept of it (None: nothing, the key is released), and whether the view's own
    refusal doomed the transaction (its answer is then recorded after the rollback).
    With ``commit`` the record's statement commits the transaction too (it is the last).

    With ``savepoint`` (the database claim is the only claim; the claim's query established
    it), a refusal raised after the view wrote rolls back to the savepoint instead and is
    recorded in this transaction: rolling the whole transaction back would free the claim
    before the refusal is recorded, and a waiting duplicate would run the view in that gap."""
    hook = engine_hook("VIEW_EXECUTED_HOOK")
    if hook is not None:
        hook(tenant=req.scoped.tenant, endpoint=req.endpoint, key=req.scoped.key)
    with view_savepoint(savepoint):
        response = execute()
    kept = to_stored(response, redact=req.redact) if _kept(req, response) else None
    if kept is None:
        # A 5xx or a 429, a refusal under an automatic key, or a refusal too large to keep
        # (idempotency/core/replies.py): nothing of it is written, and the key is released
        # for a retry.
        transaction.set_rollback(True)
        return response, None, False
    if transaction.get_rollback():
        # The view refused after writing (a service raised inside the transaction, without a
        # savepoint of its own, see idempotency/core/transactions.py).
        if savepoint is None:
            # its writes are rolled back with ours; the refusal is recorded on its own after
            # the rollback
            return response, kept, True
        roll_back_to(savepoint)  # its writes are undone; the claim stays held
    _record(req, kept, commit=commit)
    return response, kept, False


def _kept(req: IdempotentRequest, response: HttpResponse) -> bool:
    """Whether an answer is kept for replays. A 5xx is not: the key is released for a retry.
    Nor is a 429: it says nothing was done and when to try again (``Retry-After``), and kept,
    every retry of the key, however late, would be told to wait, for the key's lifetime.
    Nor is a refusal (4xx) under an automatic key: the client sent no key, so a retry is a new
    attempt, and what refused it (the order's status, its stock) may have changed since; an
    explicit key names one operation, whose refusal stands for the key's lifetime, unless the
    endpoint keeps no refusals (``Policy.keep_refusals``: HTML forms)."""
    status = response.status_code
    if status < 400:
        return True
    if status == HTTPStatus.TOO_MANY_REQUESTS:
        return False
    return status < 500 and not req.scoped.is_automatic and req.policy.keep_refusals


def _record(req: IdempotentRequest, stored: StoredResponse, *, commit: bool = False) -> None:
    """Insert the idempotency record in the current transaction, or raise _AlreadyCommitted
    (with ``commit``: IntegrityError); ``commit``: and commit it in the same round trip."""
    if not db_store.insert_record(
        scoped=req.scoped,
        fingerprint=req.fingerprint,
        fingerprint_version=req.fingerprint_version,
        field_hashes=req.field_hashes,
        response=stored,
        ttl_seconds=req.ttl_seconds,
        commit=commit,
    ):
        raise _AlreadyCommitted


def _answer(
    req: IdempotentRequest, result: ClaimResult, *, source: str, closing: bool = False
) -> HttpResponse:
    """A HIT or a MISMATCH, audited; ``closing``: the audit's last statement commits the
    engine's transaction (``audit_stream.report_closing``)."""
    assert result.response is not None or result.outcome is Outcome.MISMATCH
    if result.outcome is Outcome.HIT and result.response is not None:
        if source != "local":
            _remember(req, result.response)
        # rendered first: a pointer's resource is read while the transaction is still usable
        response = responses.replay(result.response, render_pointer=req.render_pointer)
        resource = result.response.location
        _audit(
            req, "HIT", source=source, resource=resource, appended=result.audited, closing=closing
        )
        return response
    differing = diff_field_hashes(_stored_field_hashes(req, result), _field_hashes_as(req, result))
    _audit(req, "REUSED", source=source, differing=differing, closing=closing)
    return responses.key_reused()


def _stored_field_hashes(req: IdempotentRequest, result: ClaimResult) -> dict[str, str]:
    """The per-field hashes of the first request: Redis keeps them while it runs, the committed
    record once it finished (finish.lua drops them from Redis; a REUSED is rare, one SELECT)."""
    if result.stored_field_hashes is not None:
        return result.stored_field_hashes
    committed = db_store.committed_result(req.scoped)
    return committed.field_hashes if committed is not None else {}


def _field_hashes_as(req: IdempotentRequest, result: ClaimResult) -> dict[str, str]:
    """The request's field hashes under the version the stored entry was hashed with."""
    version = result.fingerprint_version
    if version in (None, req.fingerprint_version) or req.field_hashes_under is None:
        return req.field_hashes
    try:
        return req.field_hashes_under(version)
    except ValueError:  # a key no longer configured: every field is reported as differing
        return {}


def _answer_committed(
    req: IdempotentRequest,
    committed: db_store.CommittedResult,
    *,
    store: GuardedStore | None,
    owner: str | None,
) -> HttpResponse:
    """Answer from the key's committed record while holding its Redis claim. The same
    operation: its result goes back into Redis (``finish``) and replays. Another payload under
    the key: 422, and the claim is released, never finished: the entry would carry this
    request's fingerprint with the record's result, and the operation's own retries would be
    refused as the key reused for as long as Redis kept it."""
    claim = _as_claim(req, committed)
    if claim.outcome is Outcome.HIT:
        ttl = committed.seconds_left(req.ttl_seconds)
        _finish(store, req, owner, committed.response, ttl_seconds=ttl)
    else:
        _release(store, req, owner)
    return _answer(req, claim, source="database")


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


def _keep_once_committed(
    store: GuardedStore | None, req: IdempotentRequest, owner: str | None, stored: StoredResponse
) -> None:
    """Hand a first execution's answer to Redis and this process's cache once its record is
    committed: at once after the engine's own transaction; inside a caller's
    (``ATOMIC_REQUESTS``, a view called in ``transaction.atomic()``), where the engine's is a
    savepoint, when the caller's commits. Handed over before, a retry would be replayed an
    answer that a failure at that commit (a deferred foreign key) rolled back with the view's
    writes: told a create succeeded that never happened. Should the caller's transaction roll
    back, nothing is kept, and the Redis claim ends with its lease (``LEASE_MS``), as after a
    crash before commit."""

    def keep() -> None:
        _finish(store, req, owner, stored)
        _remember(req, stored)

    if _in_callers_transaction():
        transaction.on_commit(keep)
    else:
        keep()


def _in_callers_transaction() -> bool:
    """Whether a transaction of the caller's is still open around the engine's. A test case's
    (Django's ``TestCase``, pytest-django's ``django_db``) does not count, as it does not for
    Django's own ``atomic(durable=True)``: it stands for no transaction, and never commits."""
    return any(not block._from_testcase for block in connection.atomic_blocks)


def _remember(req: IdempotentRequest, stored: StoredResponse) -> None:
    """Keep a finished result in this process's cache, where Redis's channel can reach it
    (:func:`~idempotency.stores.nodes.cache_beside`); database-only, keep nothing."""
    cache: LocalResultCache | None = cache_beside(req.node)
    if cache is None:
        return
    cache.put(
        req.scoped.redis_key,
        fingerprint=req.fingerprint,
        fingerprint_version=req.fingerprint_version,
        response=stored,
        ttl_s=req.ttl_seconds,
        unless_dropped_since=req.cache_mark,
    )


def _finish(
    store: GuardedStore | None,
    req: IdempotentRequest,
    owner: str | None,
    stored: StoredResponse,
    *,
    ttl_seconds: int | None = None,
) -> None:
    """Store the finished reply in Redis for ``ttl_seconds`` (default: the request's TTL)."""
    if store is None or owner is None:
        return
    try:
        if not store.finish(
            key=req.scoped.redis_key,
            owner=owner,
            response=stored,
            ttl_ms=(req.ttl_seconds if ttl_seconds is None else ttl_seconds) * 1000,
            source=req.script_source("finish"),
        ):
            logger.warning("idempotency lease lost before finish; the database holds the result")
    except RedisError as exc:
        logger.warning(
            "Redis finish failed (%s); the database holds the result",
            exc,
            exc_info=not node_cannot_serve(exc),
        )


def _release(store: GuardedStore | None, req: IdempotentRequest, owner: str | None) -> None:
    if store is None or owner is None:
        return
    try:
        store.release(key=req.scoped.redis_key, owner=owner, source=req.script_source("release"))
    except RedisError as exc:
        logger.warning(
            "Redis release failed (%s); the lease will expire",
            exc,
            exc_info=not node_cannot_serve(exc),
        )


def _audit(
    req: IdempotentRequest,
    outcome: str,
    *,
    appended: bool = False,
    closing: bool = False,
    **event: Any,
) -> None:
    """Count the outcome and report it (durably, before the answer leaves: a client that saw
    a replay can find its audit, idempotency/stores/audit_stream.py); ``appended``: the claim
    already wrote it to the stream; ``closing``: it is written into the engine's transaction,
    which its last statement commits. ``event``: the details :func:`_event` takes."""
    metrics.count(tenant=req.scoped.tenant, endpoint=req.endpoint, outcome=outcome)
    if closing:
        audit_stream.report_closing(_event(req, outcome, **event))
    elif not appended:
        audit_stream.report(_event(req, outcome, **event))


def _event(
    req: IdempotentRequest,
    outcome: str,
    *,
    source: str,
    differing: list[str] | None = None,
    resource: str = "",
) -> AuditEvent:
    return AuditEvent(
        tenant_key=req.scoped.tenant,
        endpoint=req.endpoint,
        key=req.audit_key,
        outcome=outcome,
        source=source,
        principal=req.scoped.principal,
        request_meta=req.request_meta,
        differing_fields=differing or [],
        resource_ref=resource,
        event_id=req.audit_event_id,
    )
