"""The client: a diner session, one idempotency key per operation, and safe retries.

Every write is an *operation* with one ``Idempotency-Key``. The key is made when the operation
starts, written to storage before the first byte is sent, reused by every retry, and forgotten
only when the server has given a final answer. So an answer lost on the way (a dropped
connection after the server committed) or an app killed mid-request ends the same way: the
next attempt — in this call, or after a restart with the same storage — carries the same key
and the server replays its first answer instead of doing the work twice. The key of an
operation with an explicit ``operation_id`` outlives even its success answer, until
``operation_ttl``: an app killed after the call returned but before it saved the result calls
again and gets the replay.

Which stored key an operation takes is decided by ``operation_id``: by default the request
itself (method, path, and the body in the canonical form the server's fingerprint uses: key
order, Unicode normal form and a top-level null for an absent field make no difference), so
calling ``place_order`` again with the same order after a crash resumes it; pass your own
(e.g. the cart's id) to decide what "the same operation" means. A call of an operation that
this client is still running (a double tap) sends nothing: it waits for the running call and
returns its result, or raises its error.

A key is the diner's: the server scopes it to the session's diner. So every attempt of an
operation is sent as the diner its key was made for. A key whose diner is not the current
session's (the guest session expired between a crash and the restart, or between two attempts,
and a new guest was opened) is not sent, since the server would run it again as another
diner's first request: :class:`~ordering_client.errors.SessionChangedError` says so instead.
So does a 401 to an attempt whose key may already have reached the server.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
import time
import unicodedata
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any, NotRequired, TypedDict

import httpx

from ordering_client.errors import (
    ApiError,
    IdempotencyKeyReusedError,
    NetworkError,
    OrderAlreadyPlacedError,
    RetriesExhaustedError,
    SessionChangedError,
)
from ordering_client.keys import IssuedTokens, KeySource, UuidKeys
from ordering_client.retry import (
    RetryEvent,
    RetryPolicy,
    is_retryable_status,
    parse_http_date,
    retry_after_of,
)
from ordering_client.storage import MemoryStorage, Storage, shared_identity

KEY_REUSED = "IDEMPOTENCY_KEY_REUSED"
# Operations running in this process, by (storage, entry): clients sharing a storage share them
_RUNNING: dict[tuple[Hashable, str], Future[ApiResult]] = {}
_RUNNING_LOCK = threading.Lock()
# The session's lock, by (storage, restaurant): clients sharing a storage take turns opening,
# refreshing and ending its session, so they share one guest
_SESSION_LOCKS: dict[tuple[Hashable, str], Any] = {}
ALREADY_PLACED = "ORDER_ALREADY_PLACED"
TOKEN_UNKNOWN = "IDEMPOTENCY_TOKEN_UNKNOWN"
TOKEN_INVALID = "IDEMPOTENCY_TOKEN_INVALID"
OPERATION_TTL = 72 * 3600.0  # the server's replay retention, by default
# How every guest's diner id begins: the server makes them, and no merchant may name one so
GUEST_PREFIX = "guest_"


class OrderItem(TypedDict):
    dish_id: int
    quantity: int


class Contact(TypedDict):
    """Personal: replays carry null here (``Idempotency-Redacted`` names the paths)."""

    phone: NotRequired[str]
    address: NotRequired[str]


class PlaceOrder(TypedDict):
    items: list[OrderItem]
    payment_method: str
    coupon_code: NotRequired[str]
    note: NotRequired[str]
    contact: NotRequired[Contact]


@dataclass(frozen=True)
class Session:
    """A diner session (``POST /api/v1/diner-sessions/``); ``expires_at`` in epoch seconds of
    this device's clock (:func:`on_this_clock`). The token is the diner's credential: it is
    left out of the session's ``repr``, so an app that logs its session, or an error report
    that prints a frame's locals, does not write it out."""

    token: str = field(repr=False)
    diner_id: str
    expires_at: float

    @classmethod
    def from_answer(
        cls, data: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> Session:
        """The answer's session; its ``headers`` (their ``Date``) put its expiry on this
        device's clock. A ``session_provider`` returns the one the restaurant's backend
        opened, read from the answer it passes on."""
        expires = on_this_clock(str(data["expires_at"]), headers or {})
        return cls(token=str(data["token"]), diner_id=str(data["diner_id"]), expires_at=expires)


# How far apart this device's clock and the server's may be and still be taken as one: an
# answer's Date is in whole seconds and reaches the device after the network's delay, so a
# smaller difference measured is noise, and it is well inside the refresh margin.
CLOCK_TOLERANCE = 60.0


def on_this_clock(expires_at: str, headers: Mapping[str, str]) -> float:
    """The server's ``expires_at`` (ISO 8601, on the server's clock) as an instant of this
    device's clock (``time.time()``), which is all the client compares it with.

    A phone's clock may be hours off. Read as it is, an expiry seemed past on a clock a day
    ahead (every call opened a new guest session, and an operation's retry met another diner)
    and far off on one behind. So when the answer's ``Date`` (the server's clock as it
    answered) is ``CLOCK_TOLERANCE`` or more away from this clock, the expiry is moved by that
    difference. An answer without a readable ``Date`` is taken as said. ``Date`` is read in
    GMT in each of RFC 9110's formats (:func:`~ordering_client.retry.parse_http_date`): an
    asctime date (which names no zone) read as this device's local time moved the expiry by
    the device's distance from UTC."""
    expires = datetime.fromisoformat(expires_at).timestamp()
    date = parse_http_date(headers.get("date"))
    if date is None:
        return expires
    ahead = time.time() - date.timestamp()  # how far this clock is ahead of the server's
    return expires if abs(ahead) < CLOCK_TOLERANCE else expires + ahead


@dataclass(frozen=True)
class ApiResult:
    """A successful answer, exactly as the server sent it."""

    status: int
    body: bytes
    headers: httpx.Headers
    idempotency_key: str | None

    @property
    def replayed(self) -> bool:
        """True when the server replayed the first answer to this key (``X-Idempotent-Result:
        HIT``) instead of executing again."""
        return self.headers.get("x-idempotent-result") == "HIT"

    def json(self) -> Any:
        return json.loads(self.body)


class OrderingClient:
    """A diner's client of one restaurant, identified by its publishable key.

    ``storage`` keeps the session and the keys of unfinished operations (default: in memory;
    :class:`~ordering_client.storage.JsonFileStorage` survives restarts). ``keys`` makes new
    keys (default UUID v4; :class:`~ordering_client.keys.TokenKeys` for pre-issued tokens).
    ``retry`` bounds the retries; ``timeout`` bounds each attempt as a whole, from sending to
    the last byte of the answer. ``on_retry`` is called
    with a :class:`~ordering_client.retry.RetryEvent` before each wait. The session is
    refreshed when less than ``refresh_margin`` seconds of it are left, and a new guest
    session opened once it has expired. A stored key older than ``operation_ttl`` seconds
    (default 72 h, as long as the server replays by default) is not resumed: an identical
    request that much later is a new operation.

    ``session_provider`` is for a diner signed in to the restaurant's own backend, which opens
    their session with its secret key: the client calls it instead of opening a guest session
    (none stored, or the stored one expired or could not be refreshed) and stores what it
    returns, and when the server answers 401 for the session it calls it once more and sends
    the request again with the new session, a key only as the diner it was made for.
    """

    def __init__(
        self,
        base_url: str,
        publishable_key: str,
        *,
        storage: Storage | None = None,
        keys: KeySource | None = None,
        retry: RetryPolicy | None = None,
        timeout: float = 10.0,
        on_retry: Callable[[RetryEvent], None] | None = None,
        refresh_margin: float = 300.0,
        operation_ttl: float = OPERATION_TTL,
        session_provider: Callable[[], Session] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.storage: Storage = storage if storage is not None else MemoryStorage()
        self.session_provider = session_provider
        self.keys: KeySource = keys if keys is not None else UuidKeys()
        self.retry = retry or RetryPolicy()
        self.on_retry = on_retry
        self.refresh_margin = refresh_margin
        self.operation_ttl = operation_ttl
        self._publishable_key = publishable_key
        # Stored entries are per restaurant: an app may hold clients of several.
        self._prefix = f"ordering-client:{publishable_key.partition('.')[0]}:"
        self._finished_lock = threading.Lock()
        # operations running in this process on this storage, by entry: a second call of one,
        # from this client or another on the same storage, joins it
        self._storage_id = shared_identity(self.storage)
        with _RUNNING_LOCK:
            self._session_lock = _SESSION_LOCKS.setdefault(
                (self._storage_id, self._prefix), threading.RLock()
            )
        self.timeout = timeout
        self._http = httpx.Client(base_url=base_url, timeout=timeout, transport=transport)

    # --- reads -------------------------------------------------------------------------

    def menu(self) -> Any:
        return self._send("GET", "/api/v1/menu/", auth=self._key_auth).json()

    def orders(self, *, status: str | None = None, cursor: str | None = None) -> Any:
        """This diner's orders, one page, newest first:
        ``{"count", "next", "previous", "results"}`` (``count``: all pages' orders, counted up
        to 10,000: a list of more answers 10,000). The next page's ``cursor`` is in the
        answer's ``next`` link (``previous``: the newer orders' page); pass it as
        ``cursor=…``, with the same ``status``: the cursor is a place, not the filter, so
        without it the page is of every order. ``None`` leaves a parameter out, so a loop that
        starts with ``cursor=None`` reads the newest page: the server refuses an empty
        ``cursor`` (400 ``CURSOR_INVALID``) and an empty ``status`` (400
        ``VALIDATION_ERROR``)."""
        given = {"status": status, "cursor": cursor}
        params = {name: value for name, value in given.items() if value is not None}
        return self._send(
            "GET", "/api/v1/orders/", auth=self._bearer, params=params, renew=True
        ).json()

    def order(self, order_id: int | str) -> Any:
        return self._send(
            "GET", f"/api/v1/orders/{order_id}/", auth=self._bearer, renew=True
        ).json()

    # --- writes ------------------------------------------------------------------------

    def place_order(
        self,
        order: PlaceOrder,
        *,
        operation_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> ApiResult:
        return self.write(
            "/api/v1/orders/", order, operation_id=operation_id, idempotency_key=idempotency_key
        )

    def pay_order(
        self,
        order_id: int | str,
        *,
        operation_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> ApiResult:
        return self.write(
            f"/api/v1/orders/{order_id}/pay/",
            None,
            operation_id=operation_id,
            idempotency_key=idempotency_key,
        )

    def cancel_order(
        self,
        order_id: int | str,
        *,
        operation_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> ApiResult:
        return self.write(
            f"/api/v1/orders/{order_id}/cancel/",
            None,
            operation_id=operation_id,
            idempotency_key=idempotency_key,
        )

    def write(
        self,
        path: str,
        body: Mapping[str, Any] | None,
        *,
        operation_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> ApiResult:
        """POST ``body`` to ``path`` as one operation (see the module docstring).

        ``idempotency_key`` sends the caller's key instead of the operation's, as the current
        session's diner; while its outcome is unknown it is stored with that diner like an
        operation's key, so sent again as another diner it raises
        :class:`SessionChangedError` instead of running again. With an explicit
        ``operation_id`` the key is kept after the success answer, until ``operation_ttl``,
        so calling again replays it; by default it is forgotten then. Raises
        :class:`ApiError` for a final error answer (the operation is over: its key is
        forgotten), :class:`IdempotencyKeyReusedError` for a key reused with another payload
        (a key that may already have run the operation stays stored: its first payload still
        replays),
        :class:`OrderAlreadyPlacedError` for a key that placed an order whose answer is no
        longer kept (kept like a success), :class:`RetriesExhaustedError` when the outcome is
        unknown and :class:`SessionChangedError` when the diner changed under the operation
        (the key is kept); ``ValueError``, nothing sent, for an ``idempotency_key`` with a
        character outside printable ASCII.
        """
        content = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
        own = idempotency_key
        if own is not None:
            _check_own_key(own)
            entry = self._prefix + "key:" + own
        else:
            entry = self._prefix + "op:" + (operation_id or _request_id("POST", path, body))
        running_key = (self._storage_id, entry)
        while True:
            with _RUNNING_LOCK:
                running = _RUNNING.get(running_key)
                joining = running is not None
                if running is None:
                    running = _RUNNING[running_key] = Future()
            if not joining:
                break
            if own is None:
                return running.result()  # a double tap: the first call's answer, or its error
            # The caller's own key: calls with it take turns rather than join, as one with
            # another payload gets its own answer (a 422).
            wait([running])
        try:
            result = self._operation(
                entry, path, content, keep=operation_id is not None and own is None, own=own
            )
        except BaseException as error:
            running.set_exception(error)
            raise
        finally:
            with _RUNNING_LOCK:
                del _RUNNING[running_key]
        running.set_result(result)
        return result

    def _operation(
        self, entry: str, path: str, content: bytes, *, keep: bool, own: str | None = None
    ) -> ApiResult:
        """Send the operation with its key, every attempt as the key's diner. ``keep``: an
        explicit ``operation_id``, whose key outlives its success (see :meth:`write`).
        ``own``: the caller's key, stored with its diner like an operation's key."""
        self._prune_finished()
        stored = self._operation_key(entry, own)
        try:
            try:
                result = self._send_as_its_diner(path, content, stored)
            except ApiError as error:
                if own is not None or not _token_refused_unsent(error, stored):
                    raise
                # A pre-issued token the server no longer knows (its Redis came back without
                # its data) or cannot verify, refused before anything ran: the rest of the
                # batch is as stale, so it goes, and the operation takes a new key once.
                discard = getattr(self.keys, "discard_batch", None)
                if discard is not None:
                    discard()
                stored = self._new_operation_key(entry, stored.diner_id)
                result = self._send_as_its_diner(path, content, stored)
        except OrderAlreadyPlacedError:
            self._finish(entry, keep=keep)
            raise
        except SessionChangedError:
            # The session changed before the key's first attempt was sent (it expired, or
            # another client on the storage replaced it): nothing can have run under the key,
            # and kept, it would refuse every later call of the operation as another diner's.
            if not stored.may_have_reached_the_server:
                self.storage.delete(entry)
            raise
        except IdempotencyKeyReusedError:
            # Another payload under a key that may already have run this operation (kept after
            # its success, or resumed with its outcome unknown): the key still stands for that
            # first payload, so it stays. Forgotten, the first payload sent again under this
            # operation would get a new key and run a second time.
            if not stored.may_have_reached_the_server:
                self.storage.delete(entry)
            raise
        except ApiError as error:
            # The key's own final answer (the engine labels it X-Idempotent-Result), or a key
            # that never reached the server: forgotten. A refusal from before the engine (403
            # TENANT_SUSPENDED, 415, ...) to a key that may already have run the operation says
            # nothing of it: the key stays, so the same call later replays instead of ordering
            # again.
            if "x-idempotent-result" in error.headers or not stored.may_have_reached_the_server:
                self.storage.delete(entry)
            raise
        self._finish(entry, keep=keep)
        return result

    def _send_as_its_diner(self, path: str, content: bytes, stored: _StoredKey) -> ApiResult:
        """POST with ``stored``'s key, every attempt as the diner it was made for; a 401 once
        the key may have reached the server is a :class:`SessionChangedError` (the key may
        have placed the order: forgotten, the next call would order again)."""

        try:
            return self._send(
                "POST",
                path,
                content=content,
                key=stored,
                auth=lambda: self._bearer_of(stored),
                renew=True,
            )
        except ApiError as error:
            if error.status == 401 and stored.may_have_reached_the_server:
                raise SessionChangedError(
                    idempotency_key=stored.key, previous_diner_id=stored.diner_id, diner_id=None
                ) from error
            raise

    def end_session(self) -> None:
        """Sign the diner out (``POST /api/v1/diner-sessions/end/``) and forget the session.
        A 401 says the session has ended already (a retry after the sign-out's answer was
        lost, or a session revoked or expired): the diner is signed out, not an error."""
        with self._session_lock:
            session = self._stored_session()
            if session is not None:
                try:
                    self._send(
                        "POST",
                        "/api/v1/diner-sessions/end/",
                        content=b"",
                        auth=lambda: _bearer_header(session.token),
                    )
                except ApiError as error:
                    if error.status != 401:
                        raise
            self.storage.delete(self._prefix + "session")

    # --- the session -------------------------------------------------------------------

    def session(self) -> Session:
        """The current session: the stored one, refreshed when close to expiry, or a new one
        (:meth:`_new_session`) when there is none, it expired (an expired token cannot be
        refreshed) or its refresh was refused. With a ``session_provider``, a guest's session
        stored (the app's client before the diner signed in) is not the diner's: the provider
        is asked instead."""
        with self._session_lock:
            session = self._stored_session()
            now = time.time()
            if (
                session is None
                or session.expires_at <= now
                or (self.session_provider is not None and session.diner_id.startswith(GUEST_PREFIX))
            ):
                return self._new_session()
            if session.expires_at - now <= self.refresh_margin:
                try:
                    return self._save_session(
                        self._send(
                            "POST",
                            "/api/v1/diner-sessions/refresh/",
                            content=b"",
                            auth=lambda: _bearer_header(session.token),
                        )
                    )
                except ApiError as error:
                    if error.status != 401:
                        raise
                    return self._new_session()
            return session

    def _new_session(self) -> Session:
        """The ``session_provider``'s session (a signed-in diner's), or else a new guest
        session, stored. What the provider raises reaches the caller as it is."""
        if self.session_provider is None:
            answer = self._send("POST", "/api/v1/diner-sessions/", content=b"", auth=self._key_auth)
            return self._save_session(answer)
        session = self.session_provider()
        self.storage.set(self._prefix + "session", json.dumps(session.__dict__))
        return session

    def _forget_session(self, refused_token: str) -> None:
        """Forget the stored session if it is the one whose token was refused: another client
        on the storage may have stored a newer one meanwhile (a new guest), which stays."""
        with self._session_lock:
            session = self._stored_session()
            if session is not None and session.token == refused_token:
                self.storage.delete(self._prefix + "session")

    def _stored_session(self) -> Session | None:
        raw = self.storage.get(self._prefix + "session")
        return Session(**json.loads(raw)) if raw else None

    def _save_session(self, answer: ApiResult) -> Session:
        session = Session.from_answer(answer.json(), answer.headers)
        self.storage.set(self._prefix + "session", json.dumps(session.__dict__))
        return session

    def _key_auth(self) -> dict[str, str]:
        return {"Authorization": f"Api-Key {self._publishable_key}"}

    def _bearer(self) -> dict[str, str]:
        return _bearer_header(self.session().token)

    def _bearer_of(self, stored: _StoredKey) -> dict[str, str]:
        """The session's header, if the session is still the key's diner's: sent as another
        diner, the key would run the operation again (keys are scoped per diner). A refresh
        keeps the diner; an expired session replaced by a new guest does not."""
        session = self.session()
        if session.diner_id != stored.diner_id:
            raise SessionChangedError(
                idempotency_key=stored.key,
                previous_diner_id=stored.diner_id,
                diner_id=session.diner_id,
            )
        return _bearer_header(session.token)

    # --- keys --------------------------------------------------------------------------

    def _operation_key(self, entry: str, own: str | None = None) -> _StoredKey:
        """The stored key of this operation, or a new one (``own``, the caller's, if given),
        stored before it is ever sent; :class:`SessionChangedError` when the stored one is
        another diner's (module doc)."""
        diner_id = self.session().diner_id
        stored = self._live_record(entry)
        if stored is not None:
            earlier = str(stored.get("diner_id", diner_id))
            if earlier != diner_id:
                raise SessionChangedError(
                    idempotency_key=str(stored["key"]),
                    previous_diner_id=earlier,
                    diner_id=diner_id,
                )
            return _StoredKey(
                key=str(stored["key"]), diner_id=earlier, may_have_reached_the_server=True
            )
        return self._new_operation_key(entry, diner_id, own)

    def _new_operation_key(self, entry: str, diner_id: str, own: str | None = None) -> _StoredKey:
        """A new key for the operation (``own``, the caller's, if given), stored before it is
        ever sent."""
        key = own if own is not None else self.keys.next_key(self._issue_tokens, diner_id)
        record = {"key": key, "created_at": time.time(), "diner_id": diner_id}
        self.storage.set(entry, json.dumps(record))
        return _StoredKey(key=key, diner_id=diner_id, may_have_reached_the_server=False)

    def _live_record(self, entry: str) -> dict[str, Any] | None:
        """The operation's stored record, if younger than ``operation_ttl``."""
        raw = self.storage.get(entry)
        if not raw:
            return None
        record: dict[str, Any] = json.loads(raw)
        return record if time.time() - record["created_at"] < self.operation_ttl else None

    def _finish(self, entry: str, *, keep: bool) -> None:
        """The operation had its final answer: forget its key, or (``keep``) note it in the
        index of kept finished operations, which :meth:`_prune_finished` reads since storage
        cannot list its entries."""
        record = self._live_record(entry) if keep else None
        if record is None:  # not kept, or already older than operation_ttl
            self.storage.delete(entry)
            return
        with self._finished_lock:
            index = self._finished_index()
            index[entry] = record["created_at"]
            self.storage.set(self._prefix + "finished", json.dumps(index))

    def _prune_finished(self) -> None:
        """Forget the kept finished operations older than ``operation_ttl``, so storage does
        not grow with every order. One an identical call has since given a new key is left
        alone, and so is one running now."""
        with self._finished_lock:
            index = self._finished_index()
            now = time.time()
            expired = [e for e, created in index.items() if now - created >= self.operation_ttl]
            with _RUNNING_LOCK:
                expired = [e for e in expired if (self._storage_id, e) not in _RUNNING]
            if not expired:
                return
            for entry in expired:
                if self._live_record(entry) is None:
                    self.storage.delete(entry)
                del index[entry]
            self.storage.set(self._prefix + "finished", json.dumps(index))

    def _finished_index(self) -> dict[str, float]:
        raw = self.storage.get(self._prefix + "finished")
        return json.loads(raw) if raw else {}

    def _issue_tokens(self, count: int) -> IssuedTokens:
        """One request for ``count`` pre-issued tokens; no retries (the key source falls back
        to a UUID when this fails)."""
        diner_id = self.session().diner_id
        issued = self._send(
            "POST",
            "/api/v1/idempotency-tokens/",
            content=json.dumps({"count": count}).encode(),
            auth=self._bearer,
            retry=RetryPolicy(max_attempts=1),
        )
        answer = issued.json()
        expires = on_this_clock(str(answer["expires_at"]), issued.headers)
        return IssuedTokens(tokens=list(answer["tokens"]), expires_at=expires, diner_id=diner_id)

    # --- one request, retried ----------------------------------------------------------

    def _send(
        self,
        method: str,
        path: str,
        *,
        auth: Callable[[], dict[str, str]],
        content: bytes | None = None,
        key: _StoredKey | None = None,
        params: Mapping[str, str] | None = None,
        retry: RetryPolicy | None = None,
        renew: bool = False,
    ) -> ApiResult:
        """Send until a final answer: retries network errors, 5xx, 408, 409 in progress and 429
        (waiting at least ``Retry-After``) within the policy's bounds; raises any other error
        answer at once. ``renew`` (a request whose ``auth`` reads the current session): a 401
        for the session, with a ``session_provider``, sends it once more as the provider's
        new session."""
        policy = retry or self.retry
        started = time.monotonic()
        attempt = 0
        renewed = False
        idempotency_key = key.key if key is not None else None
        while True:
            attempt += 1
            headers = {"Accept": "application/json", **auth()}
            if idempotency_key is not None:
                headers["Idempotency-Key"] = idempotency_key
            if content is not None:
                headers["Content-Type"] = "application/json"
            error: ApiError | NetworkError
            retry_after: float | None = None
            try:
                response = self._attempt(
                    self._http.build_request(
                        method, path, content=content, headers=headers, params=params
                    )
                )
            except (httpx.TransportError, httpx.DecodingError) as exc:
                # no answer, or one whose body its Content-Encoding cannot decode (a proxy cut
                # or mangled it): either way nothing says what the server did
                error = NetworkError(f"{type(exc).__name__}: {exc}")
                error.__cause__ = exc
            else:
                if response.is_redirect:
                    # An http:// address a proxy sends to https://, a path behind another
                    # prefix: nothing behind it ran the request, and a retry meets it again.
                    raise _redirected(method, response)
                if response.status_code < 400 and _from_the_api(response, idempotency_key):
                    return ApiResult(
                        response.status_code, response.content, response.headers, idempotency_key
                    )
                if response.status_code < 400:
                    # not the API's answer (a captive portal's page): the outcome is unknown
                    error = NetworkError(
                        f"a {response.status_code} answer "
                        f"{'without X-Idempotent-Result' if key else 'that is not JSON'}: "
                        "not the API's"
                    )
                else:
                    error = _api_error(response)
                    if error.status == 401 and headers["Authorization"].startswith("Bearer "):
                        # Revoked or expired under our feet: the next call opens a new session.
                        self._forget_session(headers["Authorization"].removeprefix("Bearer "))
                        if renew and self.session_provider is not None and not renewed:
                            # A signed-in diner's session ended; the provider's new one is
                            # most likely the same diner's, whose key the server replays (a
                            # key goes only as its own diner: _bearer_of). Once: a provider
                            # handing over an ended session gets its 401 raised.
                            renewed = True
                            continue
                    if isinstance(error, IdempotencyKeyReusedError) or not is_retryable_status(
                        error.status, error.code
                    ):
                        raise error
                    retry_after = retry_after_of(response.headers)
            if key is not None:  # no final answer: the server may have run this attempt
                key.may_have_reached_the_server = True
            delay = policy.delay(attempt, retry_after)
            if attempt >= policy.max_attempts or (
                time.monotonic() - started + delay > policy.max_elapsed
            ):
                raise RetriesExhaustedError(
                    attempts=attempt, last_error=error, idempotency_key=idempotency_key
                )
            if self.on_retry is not None:
                self.on_retry(
                    RetryEvent(
                        attempt=attempt,
                        delay=delay,
                        status=error.status if isinstance(error, ApiError) else None,
                        code=error.code if isinstance(error, ApiError) else None,
                        retry_after=retry_after,
                        error=error,
                    )
                )
            time.sleep(delay)

    def _attempt(self, request: httpx.Request) -> httpx.Response:
        """One attempt, its answer read in full within ``timeout`` of sending it. httpx's own
        timeout bounds each phase and each read, so an answer trickled a few bytes at a time
        (its status line and headers as much as its body) could hold an attempt (and the
        operation) for ever. So the attempt runs in a thread of its own, which this one waits
        for until the deadline; past it the attempt is a ``ReadTimeout``, retried like any lost
        answer, and the abandoned thread hangs up at its next read."""
        deadline = time.monotonic() + self.timeout
        outcome: Future[httpx.Response] = Future()
        threading.Thread(
            target=self._receive, args=(request, deadline, outcome), daemon=True
        ).start()
        wait([outcome], timeout=max(0.0, deadline - time.monotonic()))
        if not outcome.done():
            raise httpx.ReadTimeout(f"no whole answer within {self.timeout} s", request=request)
        return outcome.result()

    def _receive(
        self, request: httpx.Request, deadline: float, outcome: Future[httpx.Response]
    ) -> None:
        """Send ``request`` and read its whole answer into ``outcome`` (or the error)."""
        try:
            streamed = self._http.send(request, stream=True)
            try:
                body = bytearray()
                for chunk in streamed.iter_bytes():
                    body += chunk
                    if time.monotonic() > deadline:
                        raise httpx.ReadTimeout(
                            f"no whole answer within {self.timeout} s", request=request
                        )
            finally:
                streamed.close()
        except BaseException as error:  # handed to the waiting thread, which raises it
            outcome.set_exception(error)
            return
        # the body as read (decoded): its encoding headers no longer describe it
        headers = [
            (name, value)
            for name, value in streamed.headers.multi_items()
            if name.lower() not in ("content-encoding", "content-length", "transfer-encoding")
        ]
        outcome.set_result(
            httpx.Response(
                streamed.status_code, headers=headers, content=bytes(body), request=request
            )
        )

    # --- lifetime ----------------------------------------------------------------------

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> OrderingClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _bearer_header(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class _StoredKey:
    """An operation's key, the diner it was made for, and whether it may already have reached
    the server: resumed from storage, or an attempt of this call ended without a final answer
    (:meth:`OrderingClient._send` notes it; an attempt answered 401 reached nothing)."""

    key: str
    diner_id: str
    may_have_reached_the_server: bool


def _check_own_key(key: str) -> None:
    """Refuse a key of the caller's own with a character outside printable ASCII (0x20-0x7E),
    before anything is stored or sent: the API refuses such a key (docs/idempotency.md), and
    no request can even carry it. httpx raised a ``UnicodeEncodeError`` out of the call for a
    character beyond ASCII, and failed to send one with a control character (a newline) on
    every attempt as a network error, retried into :class:`RetriesExhaustedError`, which says
    the outcome is unknown, for a request that never left the device."""
    if not all(" " <= char <= "~" for char in key):
        raise ValueError(f"idempotency_key must be printable ASCII (0x20-0x7E): {key!r}")


def _token_refused_unsent(error: ApiError, stored: _StoredKey) -> bool:
    """Whether the server refused a pre-issued token as unknown (expired, or lost by a Redis
    that came back empty) or invalid, to the first attempt of a key never sent before: the
    refusal came before any claim, and no earlier attempt can have run the operation, so a
    new key cannot make it run twice. Any other attempt's refusal is final as it is."""
    return (
        error.code in (TOKEN_UNKNOWN, TOKEN_INVALID)
        and stored.key.startswith("tok_")
        and not stored.may_have_reached_the_server
    )


def _from_the_api(response: httpx.Response, key: str | None) -> bool:
    """Whether a success answer came from the API. To a request sent with an
    ``Idempotency-Key``: its idempotency engine labels every one (``X-Idempotent-Result``).
    To any other: a 204, or a JSON answer (its ``Content-Type``; the body is parsed once, by
    whoever reads it). Any other answer (a captive portal's or a proxy's page) says nothing
    about the request."""
    if key is not None:
        return "x-idempotent-result" in response.headers
    media_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
    return response.status_code == 204 or media_type.endswith(("/json", "+json"))


def _request_id(method: str, path: str, body: Mapping[str, Any] | None) -> str:
    """The default operation id: the request itself, its body in canonical form, hashed to a
    short storage key."""
    canonical = json.dumps(
        _canonical({k: v for k, v in (body or {}).items() if v is not None}),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(f"{method} {path}\n{canonical}".encode()).hexdigest()


def _canonical(value: Any) -> Any:
    """``value`` as the server's fingerprint reads it: strings in NFC, ``2.0`` as ``2``."""
    if isinstance(value, str):
        return _nfc(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {_nfc(str(k)): _canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(item) for item in value]
    return value


# Combining characters in a row past which the server refuses a string (400 INVALID_JSON):
# Unicode's stream-safe limit, past which NFC costs time in the square of the run's length.
_MAX_NON_STARTERS = 30


def _nfc(text: str) -> str:
    """``text`` in NFC, unless it holds a run of combining characters the server refuses
    (counted as NFC decomposes them): that one is taken as it is, as putting it in NFC would
    hold the caller for minutes (150 KB of TIBETAN VOWEL SIGN II, a diner's note the app
    passes on) to name an operation the server answers 400 anyway."""
    if unicodedata.is_normalized("NFC", text):
        return text
    run = 0
    for char in text:
        leading, trailing, length = _non_starters(char)
        if run + leading > _MAX_NON_STARTERS:
            return text
        run = run + length if leading == length else trailing
    return unicodedata.normalize("NFC", text)


@functools.lru_cache(maxsize=4096)
def _non_starters(char: str) -> tuple[int, int, int]:
    """How many combining characters ``char``'s canonical decomposition begins and ends
    with, and how long it is (the server's count, ``idempotency.core.fingerprint``)."""
    if not unicodedata.decomposition(char):
        count = 1 if unicodedata.combining(char) else 0
        return count, count, 1
    marks = [unicodedata.combining(part) != 0 for part in unicodedata.normalize("NFD", char)]
    leading = next((i for i, mark in enumerate(marks) if not mark), len(marks))
    trailing = next((i for i, mark in enumerate(reversed(marks)) if not mark), len(marks))
    return leading, trailing, len(marks)


def _redirected(method: str, response: httpx.Response) -> ApiError:
    """A redirect as the final :class:`ApiError` it is, naming where it points. The client
    follows none: the caller is told the API's own address instead of retrying into
    :class:`RetriesExhaustedError`, and a 301 or 302 followed would turn a POST into a GET."""
    location = response.headers.get("location")
    return ApiError(
        status=response.status_code,
        code=None,
        detail=f"{method} redirected{f' to {location}' if location else ''}: not followed; "
        "give the client the API's own address",
        problem={},
        headers=dict(response.headers),
        body=response.content,
    )


def _api_error(response: httpx.Response) -> ApiError:
    try:
        problem = response.json()
    except ValueError:
        problem = {}
    if not isinstance(problem, dict):
        problem = {}
    code = problem.get("code")
    cls = {KEY_REUSED: IdempotencyKeyReusedError, ALREADY_PLACED: OrderAlreadyPlacedError}.get(
        code if isinstance(code, str) else "", ApiError
    )
    return cls(
        status=response.status_code,
        code=code if isinstance(code, str) else None,
        detail=str(problem.get("detail", response.reason_phrase)),
        problem=problem,
        headers=dict(response.headers),
        body=response.content,
    )
